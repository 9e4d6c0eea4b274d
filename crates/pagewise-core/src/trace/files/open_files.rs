//! The traced files held for a verb: [`OpenFiles`] reaches each file once (see
//! [`open_file`]), keeps as many open as the descriptor budget allows and opens the others
//! again for each use ([`TracedFd`]), a bounded number at a time.

use super::{open_file, out_of_descriptors, Mounts, SkipReason, SkippedFile, MAX_SKIPPED};
use crate::error::{FileError, Op};
use crate::sys;
use crate::trace::{Trace, TraceFile};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

/// The traced files, reached: each opened once and checked to be the traced file, and kept
/// open while the descriptor budget allows (half of [`sys::fd_budget_strict`]); the others are opened
/// again for each use ([`OpenFiles::get`]) and closed after it, at most a quarter of the budget
/// at a time. No verb holds a descriptor per file: under `ulimit -n 64` a trace of 300 files
/// is acted on whole.
#[derive(Debug, Default)]
pub struct OpenFiles {
    /// Descriptors kept, by file index of the trace.
    kept: Vec<Option<OwnedFd>>,
    /// O_DIRECT twins of `kept` (when asked for).
    kept_direct: Vec<Option<OwnedFd>>,
    /// Each file was reached (opened as the traced regular file) when the trace was opened.
    reached: Vec<bool>,
    /// Size of each file when it was opened (fstat), 0 for those not opened: traced pages
    /// past it are left out (the file may have shrunk since it was recorded, and a trace may
    /// claim any page).
    pub sizes: Vec<u64>,
    /// Files that are gone or cannot be reached, with the reason (skipped; not errors).
    pub missing: u64,
    /// The first [`MAX_SKIPPED`] of them.
    pub skipped: Vec<SkippedFile>,
    /// Files that exist but could not be opened as the traced regular file, or could not be
    /// opened for want of descriptors (errors).
    pub errors: Vec<FileError>,
    /// How files reached but not kept are opened again; None when all are kept.
    reopen: Option<Reopen>,
    /// Files that could not be opened again (given up from then on), and the errors not yet
    /// taken by [`OpenFiles::take_errors`].
    failed: Mutex<(std::collections::HashSet<u32>, Vec<FileError>)>,
}

/// What opening a file again takes: the trace's files, the mounts, and the slots for
/// descriptors open at once.
#[derive(Debug)]
struct Reopen {
    files: Vec<TraceFile>,
    mounts: Mounts,
    /// Descriptors opened again and not yet closed, and how many may be.
    open: Mutex<usize>,
    max: usize,
    freed: std::sync::Condvar,
}

/// A traced file's descriptor from [`OpenFiles::get`]: one kept open, or one opened for this
/// use, closed (and its slot given back) when dropped.
pub struct TracedFd<'a> {
    kept: Option<&'a OwnedFd>,
    fresh: Option<(OwnedFd, &'a Reopen)>,
}

impl TracedFd<'_> {
    /// Opened again for this use (not one kept open).
    pub fn is_fresh(&self) -> bool {
        self.fresh.is_some()
    }
}

impl AsFd for TracedFd<'_> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match (&self.kept, &self.fresh) {
            (Some(fd), _) => fd.as_fd(),
            (None, Some((fd, _))) => fd.as_fd(),
            (None, None) => unreachable!("a TracedFd holds a descriptor"),
        }
    }
}

impl Drop for TracedFd<'_> {
    fn drop(&mut self) {
        if let Some((fd, r)) = self.fresh.take() {
            drop(fd);
            r.release();
        }
    }
}

impl Reopen {
    /// Waits for a free slot and takes it.
    fn acquire(&self) {
        let mut open = self.open.lock().unwrap();
        while *open >= self.max {
            open = self.freed.wait(open).unwrap();
        }
        *open += 1;
    }

    /// Gives a slot back.
    fn release(&self) {
        *self.open.lock().unwrap() -= 1;
        self.freed.notify_one();
    }
}

impl OpenFiles {
    /// Reaches every traced file (by path, else by inode), keeping as many open as the
    /// descriptor budget allows; with `direct`, an O_DIRECT twin too.
    pub fn open(trace: &Trace, direct: bool) -> OpenFiles {
        let budget = sys::fd_budget_strict();
        let per_file = if direct { 2 } else { 1 };
        Self::open_keeping(
            trace,
            direct,
            budget / 2 / per_file,
            (budget / 4).max(per_file),
        )
    }

    /// [`OpenFiles::open`] keeping at most `keep` files open, and opening at most `fresh`
    /// descriptors again at a time.
    fn open_keeping(trace: &Trace, direct: bool, keep: usize, fresh: usize) -> OpenFiles {
        let mounts = Mounts::default();
        let mut out = OpenFiles::default();
        let mut kept = 0;
        for f in &trace.files {
            let fd = match open_file(f, &mounts) {
                Ok(fd) => Some(fd),
                Err(e) => {
                    out.refused(f, &e, &mounts);
                    None
                }
            };
            let size = fd
                .as_ref()
                .and_then(|fd| sys::fstat(fd.as_fd()).ok())
                .map_or(0, |s| s.size);
            out.reached.push(fd.is_some());
            out.sizes.push(size);
            let keep_it = fd.is_some() && kept < keep;
            if keep_it {
                kept += 1;
            }
            let d = if direct && keep_it {
                fd.as_ref()
                    .and_then(|fd| sys::open_read_direct(&sys::fd_path(fd.as_fd())).ok())
            } else {
                None
            };
            out.kept.push(fd.filter(|_| keep_it));
            out.kept_direct.push(d);
        }
        if out.opened() > kept as u64 {
            out.reopen = Some(Reopen {
                files: trace.files.clone(),
                mounts,
                open: Mutex::new(0),
                max: fresh.max(1),
                freed: std::sync::Condvar::new(),
            });
        }
        out
    }

    /// Files that could be opened.
    pub fn opened(&self) -> u64 {
        self.reached.iter().filter(|&&r| r).count() as u64
    }

    /// Whether every file reached is kept open (so its descriptor may be handed to io_uring
    /// with the others').
    pub fn all_kept(&self) -> bool {
        self.reopen.is_none()
    }

    /// The descriptors kept open (to advise them all at once).
    pub fn kept(&self) -> impl Iterator<Item = &OwnedFd> {
        self.kept.iter().flatten()
    }

    /// The descriptor of traced file `file` (O_DIRECT with `direct`): kept, or opened again
    /// (waiting for a free slot) and checked to be the traced file. None for a file not
    /// reached when the trace was opened, and for one that cannot be opened again now: that
    /// one is given up from then on, its error (naming the path and the syscall) kept for
    /// [`OpenFiles::take_errors`].
    pub fn get(&self, file: u32, direct: bool) -> Option<TracedFd<'_>> {
        match self.try_get(file, direct)? {
            Ok(fd) => Some(fd),
            Err(e) => {
                let mut failed = self.failed.lock().unwrap();
                if failed.0.insert(file) {
                    let op = if direct { Op::OpenDirect } else { Op::Open };
                    let name = self.reopen.as_ref().map(|r| r.files[file as usize].name());
                    failed
                        .1
                        .push(FileError::io(&name.unwrap_or_default(), op, &e));
                }
                None
            }
        }
    }

    /// The errors of files that could not be opened again since the last call (each once).
    pub fn take_errors(&self) -> Vec<FileError> {
        std::mem::take(&mut self.failed.lock().unwrap().1)
    }

    /// [`OpenFiles::get`], the error given back.
    fn try_get(&self, file: u32, direct: bool) -> Option<std::io::Result<TracedFd<'_>>> {
        let f = file as usize;
        if !self.reached.get(f).copied().unwrap_or(false) {
            return None;
        }
        if self.failed.lock().unwrap().0.contains(&file) {
            return None;
        }
        let table = if direct {
            &self.kept_direct
        } else {
            &self.kept
        };
        if let Some(fd) = table.get(f).and_then(Option::as_ref) {
            return Some(Ok(TracedFd {
                kept: Some(fd),
                fresh: None,
            }));
        }
        if direct && self.kept.get(f).is_some_and(Option::is_some) {
            // Kept, but its O_DIRECT twin could not be opened (the file system has none).
            return None;
        }
        let r = self.reopen.as_ref()?;
        r.acquire();
        let fd = match open_file(&r.files[f], &r.mounts) {
            Ok(fd) if direct => sys::open_read_direct(&sys::fd_path(fd.as_fd())),
            other => other,
        };
        match fd {
            Ok(fd) => Some(Ok(TracedFd {
                kept: None,
                fresh: Some((fd, r)),
            })),
            Err(e) => {
                r.release();
                Some(Err(e))
            }
        }
    }

    /// Where the traced pages of file `file` end at most: its size rounded up to a whole
    /// `page` (the kernel caches, and O_DIRECT reads, the last partial page whole); 0 for a
    /// file not opened.
    pub fn end(&self, file: u32, page: u64) -> u64 {
        let f = file as usize;
        if !self.reached.get(f).copied().unwrap_or(false) {
            return 0;
        }
        let size = self.sizes.get(f).copied().unwrap_or(0);
        size.div_ceil(page.max(1)).saturating_mul(page.max(1))
    }

    /// Counts a file that could not be opened: an error when it is no longer a regular file
    /// or there was no descriptor to open it with, else skipped with the reason.
    fn refused(&mut self, f: &TraceFile, e: &std::io::Error, mounts: &Mounts) {
        // Refused by open_file itself (not a kernel EINVAL): no longer a regular file.
        let not_regular =
            e.kind() == std::io::ErrorKind::InvalidInput && e.raw_os_error().is_none();
        if not_regular || out_of_descriptors(e) {
            self.errors.push(FileError::io(&f.name(), Op::Open, e));
            return;
        }
        self.missing += 1;
        if self.skipped.len() < MAX_SKIPPED {
            self.skipped.push(SkippedFile {
                path: f.name(),
                reason: SkipReason::of(f, e, mounts),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace of `n` files of one page each (written in `dir`), with their paths.
    fn trace_of(dir: &std::path::Path, n: usize) -> Trace {
        let mut t = Trace {
            page_size: 4096,
            ..Trace::default()
        };
        for i in 0..n {
            let p = dir.join(format!("f{i}"));
            std::fs::write(&p, [i as u8; 4096]).unwrap();
            let st = sys::stat_path(&p, false).unwrap();
            let key = sys::FileId::from_dev(st.dev, st.ino);
            t.files.push(TraceFile {
                dev_major: key.0,
                dev_minor: key.1,
                ino: st.ino,
                size: 4096,
                path: Some(p.to_string_lossy().into_owned()),
                path_bytes: Some(p.as_os_str().as_encoded_bytes().to_vec()),
                deleted: false,
                handle: None,
            });
        }
        t
    }

    /// Beyond the files kept, each is opened again for its use and closed after it; a file
    /// gone since is an error then, not a wrong answer.
    #[test]
    fn files_beyond_the_budget_are_opened_for_each_use() {
        let dir = tempfile::tempdir().unwrap();
        let t = trace_of(dir.path(), 5);
        let files = OpenFiles::open_keeping(&t, false, 2, 1);
        assert_eq!(files.opened(), 5);
        assert!(!files.all_kept());
        assert_eq!(files.kept().count(), 2);
        for f in 0..5u32 {
            let fd = files.get(f, false).unwrap();
            let mut b = [0u8; 1];
            sys::pread(fd.as_fd(), &mut b, 0).unwrap();
            assert_eq!(b[0], f as u8);
            assert_eq!(files.end(f, 4096), 4096);
        }
        assert!(files.take_errors().is_empty());
        std::fs::remove_file(dir.path().join("f4")).unwrap();
        // Removed, the file is still reached by its inode while any process holds it open: a
        // child another test spawns copies this process's descriptors until its exec closes
        // them. Wait (bounded) until the kernel has let the inode go.
        let gone = (0..200).any(|_| {
            let reached = files.get(4, false).is_some();
            if reached {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            !reached
        });
        assert!(gone, "f4 still reached 5 s after its removal");
        assert!(files.get(4, false).is_none());
        let errors = files.take_errors();
        assert_eq!(errors.len(), 1, "one error per file: {errors:?}");
        assert_eq!(errors[0].path, dir.path().join("f4"));
        assert_eq!(errors[0].op, Op::Open);
        // The slot of the failed open was given back.
        assert!(files.get(3, false).is_some());
    }
}
