//! After the data. Per file: the check that the source did not change, metadata, the commit
//! to the final name, the account of the cache it left, and write-back in batches (never an
//! fdatasync per file). Per run: hard links, directory modes and times (deepest first),
//! fsync of directories, verification from disk and the measure of the destination's cache.

use super::engine::{read_direct, read_full, refused, ChunkHashes};
use super::plan::{DirTask, FileTask};
use super::worker::{Digest, Local, Open};
use super::{Ctx, EntryKind, Strategy};
use crate::chunks::pieces;
use crate::error::{FileError, Op};
use crate::residency::cached_pages;
use crate::sys::{self, Advice, AlignedBuf};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// A destination file waiting for its batch's writeback wait and drop.
pub(super) struct Settle {
    fd: OwnedFd,
}

/// Files a worker gathers before it waits for their write-back and drops them (at most).
const SETTLE_BATCH: usize = 256;

/// How many files each holder of open descriptors may keep, from the run's descriptor
/// budget ([`sys::fd_budget`]) less four per worker (its io_uring, the directories it
/// works in): half for the workers' small-file batches (source and destination) and settle
/// lists, an eighth for the shared batched write-back (up to three batches open: see
/// [`BatchSettle::add`]) and another for the files kept for the residue's second measure;
/// the rest is slack for the planners' directories. With the usual
/// limits these are the constants; under a limit of 1024 and 16 workers they shrink instead
/// of failing with EMFILE.
#[derive(Clone, Copy, Debug)]
pub(super) struct FdBudget {
    /// Workers: the copy's threads, fewer when the budget cannot keep each a few files.
    pub workers: usize,
    pub small_batch: usize,
    pub settle: usize,
    pub shared_settle: usize,
    pub recheck: usize,
}

impl FdBudget {
    pub fn new(budget: usize, workers: usize) -> FdBudget {
        let workers = workers.min(budget / 16).max(1);
        let usable = budget.saturating_sub(4 * workers).max(16);
        let per_worker = usable / 2 / workers;
        FdBudget {
            workers,
            small_batch: (per_worker / 4).clamp(1, super::worker::SMALL_BATCH),
            settle: (per_worker / 4).clamp(1, SETTLE_BATCH),
            shared_settle: (usable / 24).clamp(1, SETTLE_FILES),
            recheck: (usable / 8).min(RESIDUE_RECHECK),
        }
    }

    /// Descriptors held at most by all of them.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.workers * (4 + 2 * self.small_batch + self.settle)
            + 3 * self.shared_settle
            + self.recheck
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_fits_the_limit_and_keeps_the_constants_when_there_is_room() {
        for (limit, workers) in [(128, 16), (1024, 16), (1024, 1), (4096, 64), (256, 2)] {
            let b = FdBudget::new(limit - 64, workers);
            assert!(b.held() <= limit - 64, "{limit} {workers}: {b:?}");
        }
        let roomy = FdBudget::new(1 << 20, 16);
        assert_eq!(roomy.workers, 16);
        assert_eq!(roomy.small_batch, super::super::worker::SMALL_BATCH);
        assert_eq!(roomy.settle, SETTLE_BATCH);
        assert_eq!(roomy.shared_settle, SETTLE_FILES);
        assert_eq!(roomy.recheck, RESIDUE_RECHECK);
    }
}

/// One writeback wait for a batch of files, then drop their pages; what stays cached of
/// them is measured (see [`DestResidue`]).
pub(super) fn settle(batch: &mut Vec<Settle>, cached: &DestResidue) {
    for s in batch.iter() {
        let _ = sys::sync_file_range(s.fd.as_fd(), 0, 0, sys::SFR_WRITE);
    }
    for s in batch.drain(..) {
        let _ = sys::sync_file_range(
            s.fd.as_fd(),
            0,
            0,
            sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER,
        );
        let _ = sys::fadvise(s.fd.as_fd(), 0, 0, Advice::DontNeed);
        cached.measure(s.fd);
    }
}

/// The destination pages a copy leaves cached, measured on the files it wrote (not on the
/// files of the destination it left alone). A file with pages still cached right after its
/// drop is measured again when the copy ends: RWF_DONTCACHE pages are dropped by the kernel
/// itself when their write-back completes, and a DONTNEED racing with that drop skips them,
/// so the first measure can show pages that are gone a moment later.
pub(super) struct DestResidue {
    pages: AtomicU64,
    later: Mutex<Vec<OwnedFd>>,
    /// Files kept open for the second measure (see [`FdBudget`]).
    keep: usize,
}

/// Files held open for the measure at the end; beyond, the first measure counts.
const RESIDUE_RECHECK: usize = 4096;

impl DestResidue {
    pub(super) fn new(keep: usize) -> DestResidue {
        DestResidue {
            pages: AtomicU64::new(0),
            later: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// Measures one written file now, or keeps it for the end if pages are still cached.
    pub(super) fn measure(&self, fd: OwnedFd) {
        let Some(cached) = cached_pages(fd.as_fd(), 0, 0) else {
            return;
        };
        if cached > 0 {
            let mut later = self.later.lock().unwrap();
            if later.len() < self.keep {
                return later.push(fd);
            }
        }
        self.pages.fetch_add(cached, Ordering::Relaxed);
    }

    /// Pages of the written files cached now.
    pub(super) fn pages(&self) -> u64 {
        let later: u64 = std::mem::take(&mut *self.later.lock().unwrap())
            .iter()
            .filter_map(|fd| cached_pages(fd.as_fd(), 0, 0))
            .sum();
        self.pages.load(Ordering::Relaxed) + later
    }
}

/// Write-back of small files, shared by the workers: their pages are written back by one
/// `syncfs` per batch (the kernel then writes many files under one block plug: neighbouring
/// files' blocks go out as one request — 100k files took ~12k write requests instead of
/// ~100k), then each file is waited on and dropped. syncfs also starts write-back of other
/// dirty data of that filesystem, which the kernel would write within seconds anyway.
pub(super) struct BatchSettle {
    pending: Mutex<Gathered>,
    /// Signalled when a write-back ends.
    written: Condvar,
    /// Files per batch (see [`FdBudget`]).
    files: usize,
}

/// Files gathered for the next batch, their dirty bytes, and whether a batch is being
/// written back now.
#[derive(Default)]
struct Gathered {
    files: Vec<fs::File>,
    bytes: u64,
    writing: bool,
}

/// Files and dirty bytes that trigger a batch write-back.
const SETTLE_FILES: usize = 2048;
const SETTLE_BYTES: u64 = 64 << 20;

impl BatchSettle {
    pub(super) fn new(files: usize) -> BatchSettle {
        BatchSettle {
            pending: Mutex::default(),
            written: Condvar::new(),
            files,
        }
    }

    /// Adds a written file. One batch is written back at a time: while it is, files gather
    /// for the next, and a worker that would make the next batch twice as large waits (so
    /// at most three batches of files are open: a bound the [`FdBudget`] relies on).
    fn add(&self, f: fs::File, bytes: u64, cached: &DestResidue) {
        let batch = {
            let mut p = self.pending.lock().unwrap();
            while p.writing && p.files.len() >= 2 * self.files {
                p = self.written.wait(p).unwrap();
            }
            p.files.push(f);
            p.bytes += bytes;
            if p.writing || (p.files.len() < self.files && p.bytes < SETTLE_BYTES) {
                return;
            }
            p.bytes = 0;
            p.writing = true;
            std::mem::take(&mut p.files)
        };
        Self::write_back(batch, cached);
        self.pending.lock().unwrap().writing = false;
        self.written.notify_all();
    }

    /// Writes back and drops what is pending (at the end of the run).
    pub(super) fn flush(&self, cached: &DestResidue) {
        let batch = std::mem::take(&mut self.pending.lock().unwrap().files);
        Self::write_back(batch, cached);
    }

    fn write_back(batch: Vec<fs::File>, cached: &DestResidue) {
        let Some(first) = batch.first() else { return };
        let _ = sys::syncfs(first.as_fd());
        // Per file: whatever syncfs did not cover (another filesystem, pages dirtied since)
        // is written and waited for, then the pages are dropped.
        let mut s: Vec<Settle> = batch.into_iter().map(|f| Settle { fd: f.into() }).collect();
        settle(&mut s, cached);
    }
}

impl Ctx<'_> {
    /// Makes the copied file final and counts it, then hands it to write-back: `batched` files
    /// were written without RWF_DONTCACHE and go to the shared [`BatchSettle`]; the others to
    /// this worker's settle list.
    pub(super) fn finish(
        &self,
        local: &mut Local,
        mut o: Open,
        strat: Strategy,
        digest: Option<u64>,
        batched: bool,
    ) {
        match self.make_final(&mut o, strat) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => return self.fail(e),
        }
        let data = self.account(local, &o, strat);
        self.observer.progress(1, 0);
        self.done(&o.dst, EntryKind::File, o.existed, o.st.size);
        if let Some(d) = digest {
            local.digests.push((o.dst, o.extents, d));
        }
        let fd = o.df;
        let cached = &self.dest_residue;
        if batched {
            self.batch_settle.add(fd, data, cached);
        } else if strat != Strategy::Buffered {
            local.settle.push(Settle { fd: fd.into() });
            if local.settle.len() >= self.fds.settle {
                settle(&mut local.settle, cached);
            }
        } else {
            // Buffered leaves its pages, as cp does: they are what the copy left.
            cached.measure(fd.into());
        }
    }

    /// Checks the source did not change, sets the size and metadata, fsyncs if asked and gives
    /// the file its final name. `Ok(false)`: stopped before the commit (nothing named).
    fn make_final(&self, o: &mut Open, strat: Strategy) -> Result<bool, FileError> {
        let size = o.st.size;
        // A source written to while we copied it would give a copy that never existed. (A
        // pseudo file's size says nothing: it was read to its end.)
        if let Ok(now) = sys::fstat(o.sf.as_fd()) {
            if (now.size != size && !o.pseudo) || now.mtime != o.st.mtime {
                return Err(FileError::other(
                    &o.src,
                    Op::Copy,
                    "source changed while it was being copied (not renamed into place; copy again)",
                ));
            }
        }
        if o.sparse || strat == Strategy::Direct {
            o.df.set_len(size)
                .map_err(|e| FileError::io(&o.dst, Op::Ftruncate, &e))?;
        }
        self.apply_meta(&o.sf, &o.df, &o.st)
            .map_err(|(op, e)| FileError::io(&o.dst, op, &e))?;
        if self.opts.fsync {
            o.df.sync_all()
                .map_err(|e| FileError::io(&o.dst, Op::Fsync, &e))?;
        }
        if self.stopped() {
            return Ok(false);
        }
        self.commit(o.df.as_fd(), &mut o.temp, o.dir.as_fd(), &o.dst)
            .map_err(|(op, e)| FileError::io(&o.dst, op, &e))?;
        Ok(true)
    }

    /// Adds a committed file to the worker's figures (the source's cache residue included);
    /// returns its data bytes.
    fn account(&self, local: &mut Local, o: &Open, strat: Strategy) -> u64 {
        let size = o.st.size;
        let page = sys::page_size();
        let src_after = cached_pages(o.sf.as_fd(), 0, 0);
        match (o.src_cached, src_after) {
            // Nothing of a pseudo file (procfs, sysfs) is ever in the page cache.
            _ if o.pseudo => {}
            // Whole pages, capped at the file's size (a 2-byte file has 2 bytes to cache).
            (Some(before), Some(after)) => {
                local.residue.source_added_bytes += (after.saturating_sub(before) * page).min(size);
                local.residue.source_precached_bytes += (before * page).min(size);
            }
            // cachestat refused (not yours, not writable): nothing true to add.
            _ => local.residue.source_unknown_files += 1,
        }
        let data: u64 = o.extents.iter().map(|e| e.1).sum();
        local.residue.source_bytes += data;
        local.residue.dest_bytes += data;
        local.files += 1;
        local.bytes += size;
        local.data_bytes += data;
        *local.strategies.entry(strat).or_default() += 1;
        data
    }

    /// With --preserve: owner (when root), xattrs, mode and times. Times go last: nothing after
    /// them changes mtime.
    pub(super) fn apply_meta(
        &self,
        sf: &OwnedFd,
        df: &fs::File,
        st: &sys::Stat,
    ) -> Result<(), (Op, io::Error)> {
        if !self.opts.preserve {
            // Created with the right mode (see Ctx::open_pair).
            return Ok(());
        }
        if self.is_root {
            std::os::unix::fs::fchown(df, Some(st.uid), Some(st.gid))
                .map_err(|e| (Op::Fchown, e))?;
        }
        let list = sys::xattrs(sf.as_fd()).map_err(|e| (Op::Flistxattr, e))?;
        self.put_xattrs(df, &list)?;
        df.set_permissions(fs::Permissions::from_mode(st.mode & 0o7777))
            .map_err(|e| (Op::Fchmod, e))?;
        let times = fs::FileTimes::new()
            .set_accessed(epoch_time(st.atime))
            .set_modified(epoch_time(st.mtime));
        df.set_times(times).map_err(|e| (Op::Futimens, e))?;
        Ok(())
    }

    /// Makes the hard links the planner deferred, now that their first name exists; the
    /// number made.
    pub(super) fn link_hard(&self, deferred: &[(PathBuf, PathBuf)]) -> u64 {
        let mut made = 0;
        for (first, other) in deferred {
            let (Ok((fdir, fname)), Ok((odir, oname))) =
                (self.dest.parent(first), self.dest.parent(other))
            else {
                continue; // the first copy's directory failed and was reported
            };
            let Ok(c) = std::ffi::CString::new(fname.as_bytes()) else {
                continue;
            };
            if sys::fstatat(Some(fdir.as_fd()), &c, false).is_err() {
                continue; // the first copy failed and was reported
            }
            let oc = std::ffi::CString::new(oname.as_bytes()).unwrap_or_default();
            let existed = sys::fstatat(Some(odir.as_fd()), &oc, false).is_ok_and(|m| !m.is_dir())
                && sys::unlink_at(odir.as_fd(), oname, false).is_ok();
            match sys::link_at(fdir.as_fd(), fname, odir.as_fd(), oname) {
                Ok(()) => {
                    made += 1;
                    self.done(other, EntryKind::Hardlink, existed, 0);
                }
                Err(e) => self.fail(FileError::io(other, Op::Link, &e)),
            }
        }
        made
    }

    /// Sets the directories' modes (and with --preserve owner and times), deepest first, and
    /// fsyncs them if asked. Without --preserve the mode is the source's less `umask`.
    pub(super) fn finish_dirs(&self, dirs: &[DirTask], umask: u32) {
        let opts = self.opts;
        for d in dirs {
            let mode = if opts.preserve {
                d.meta.mode & 0o7777
            } else {
                d.meta.mode & 0o777 & !umask
            };
            // Reached without following symlinks: a directory swapped for a link since it
            // was made is refused, not chmod'ed through.
            let f = match self.dest.dir(&d.dst) {
                Ok(fd) => fs::File::from(fd),
                Err(e) => {
                    self.fail(FileError::io(&d.dst, Op::OpenDirectory, &e));
                    continue;
                }
            };
            if opts.preserve && self.is_root {
                let _ = std::os::unix::fs::fchown(&f, Some(d.meta.uid), Some(d.meta.gid));
            }
            if let Err(e) = f.set_permissions(fs::Permissions::from_mode(mode)) {
                self.fail(FileError::io(&d.dst, Op::Chmod, &e));
            }
            if !(opts.preserve || opts.fsync) {
                continue;
            }
            if opts.preserve {
                self.dir_xattrs(&d.src, &f);
                let times = fs::FileTimes::new()
                    .set_accessed(epoch_time(d.meta.atime))
                    .set_modified(epoch_time(d.meta.mtime));
                let _ = f.set_times(times);
            }
            if opts.fsync {
                let _ = f.sync_all();
            }
        }
    }

    /// With `preserve`: a directory's extended attributes (its ACLs, default ACLs included).
    fn dir_xattrs(&self, src: &Path, dst: &fs::File) {
        let Ok(s) = fs::File::open(src) else {
            return; // it was read a moment ago; gone now: nothing to keep
        };
        let r = sys::xattrs(s.as_fd())
            .map_err(|e| (Op::Flistxattr, e))
            .and_then(|list| self.put_xattrs(dst, &list));
        if let Err((op, e)) = r {
            self.fail(FileError::io(src, op, &e));
        }
    }

    /// Makes `dst`'s extended attributes exactly `list` (the source's): sets each, then
    /// removes what `dst` has beyond them — an ACL inherited from a default ACL of the
    /// destination directory, a stale attribute of the file replaced — as `rsync -AX` does.
    /// `security.*` (SELinux and IMA labels the system gives) is left as the system set it.
    /// A namespace the destination does not take is a notice.
    fn put_xattrs(
        &self,
        dst: &fs::File,
        list: &[(std::ffi::CString, Vec<u8>)],
    ) -> Result<(), (Op, io::Error)> {
        let not_taken = |e: &io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::ENOTSUP) | Some(libc::EPERM) | Some(libc::EACCES)
            )
        };
        for (name, value) in list {
            match sys::set_xattr(dst.as_fd(), name, value) {
                Ok(()) => {}
                // Not every destination takes every namespace (e.g. security.* on tmpfs).
                Err(e) if not_taken(&e) => {
                    self.tally
                        .notice(format!("some extended attributes could not be kept: {e}"));
                }
                Err(e) => return Err((Op::Fsetxattr, e)),
            }
        }
        let have = sys::xattrs(dst.as_fd()).map_err(|e| (Op::Flistxattr, e))?;
        for (name, _) in have {
            if name.to_bytes().starts_with(b"security.") || list.iter().any(|(n, _)| *n == name) {
                continue;
            }
            match sys::remove_xattr(dst.as_fd(), &name) {
                Ok(()) => {}
                Err(e) if not_taken(&e) || e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err((Op::Fremovexattr, e)),
            }
        }
        Ok(())
    }

    /// Re-reads every copied file from disk and compares it with its source's digest:
    /// `(verified, mismatches)`; mismatches and read failures are reported.
    pub(super) fn verify(&self, digests: &[Digest]) -> (u64, u64) {
        let (mut verified, mut mismatches) = (0, 0);
        for (dst, extents, want) in digests {
            let got = self
                .dest
                .open_read(dst)
                .and_then(|fd| digest_from_disk(fd, extents, self.opts.chunk));
            match got {
                Ok(got) if got == *want => verified += 1,
                Ok(_) => {
                    mismatches += 1;
                    self.fail(FileError::other(
                        dst,
                        Op::VerifyContent,
                        "content differs from the source",
                    ));
                }
                Err(e) => self.fail(FileError::io(dst, Op::Verify, &e)),
            }
        }
        (verified, mismatches)
    }
}

/// fsyncs the directories that received the top-level names.
pub(super) fn fsync_parents(targets: &[(PathBuf, PathBuf)]) {
    for (_, dst) in targets {
        if let Some(p) = dst.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(f) = fs::File::open(p) {
                let _ = f.sync_all();
            }
        }
    }
}

/// The process's umask, read from /proc (no syscall that changes it); 022 if unknown.
pub(super) fn umask() -> u32 {
    crate::procfs::own_umask().unwrap_or(0o022)
}

/// A (seconds, nanoseconds) time stamp since the epoch as a SystemTime (before it if negative).
fn epoch_time((sec, nsec): (i64, i64)) -> SystemTime {
    let whole = std::time::Duration::from_secs(sec.unsigned_abs());
    let base = if sec >= 0 {
        UNIX_EPOCH + whole
    } else {
        UNIX_EPOCH - whole
    };
    base + std::time::Duration::from_nanos(nsec as u64)
}

/// A file read from disk, not from the cache, leaving the cache as it was: O_DIRECT where
/// the filesystem takes it, else buffered reads whose pages are dropped after (see
/// [`read_uncached`]).
struct DiskReader {
    direct: Option<OwnedFd>,
    buffered: fs::File,
    buf: AlignedBuf,
    off_align: u64,
}

impl DiskReader {
    /// Reads the open file `fd`; its O_DIRECT twin is opened through /proc/self/fd (the same
    /// file, whatever its name is now).
    fn open(fd: OwnedFd, chunk: usize) -> io::Result<Self> {
        let direct = sys::open_read_direct(&sys::fd_path(fd.as_fd())).ok();
        let buffered = fs::File::from(fd);
        let (align, off_align) = direct
            .as_ref()
            .and_then(|d| sys::dio_align(d.as_fd()))
            .map_or((4096, 4096), |(m, o)| (m as usize, o as u64));
        Ok(DiskReader {
            direct,
            buffered,
            buf: AlignedBuf::new(chunk, align.max(4096)),
            off_align: off_align.max(512),
        })
    }

    /// Reads `[off, off+len)` (`len` at most the chunk): the bytes read (fewer at the end).
    fn read(&mut self, off: u64, len: u64) -> io::Result<&[u8]> {
        let fd = self.buffered.as_fd();
        let pread = |b: &mut [u8], o| sys::pread(fd, b, o);
        let n = match &self.direct {
            Some(d) => match read_direct(d.as_fd(), &mut self.buf, off, len, self.off_align) {
                Ok(n) => n,
                Err(e) if refused(&e) => read_full(&mut self.buf, off, len as usize, pread)?,
                Err(e) => return Err(e),
            },
            None => read_uncached(fd, &mut self.buf, off, len)?,
        };
        Ok(&self.buf[..n])
    }
}

/// Reads a whole file from disk, not from the cache, returning the chunk digest used by copy.
fn digest_from_disk(fd: OwnedFd, extents: &[(u64, u64)], chunk: usize) -> io::Result<u64> {
    let hashes = ChunkHashes::default();
    let mut r = DiskReader::open(fd, chunk)?;
    for (off, len) in pieces(extents, chunk as u64) {
        let data = r.read(off, len)?;
        if data.is_empty() {
            break;
        }
        hashes.add(off, data);
    }
    Ok(hashes.digest())
}

/// Whether two files hold the same bytes (--checksum): both read from disk side by side in
/// chunks, leaving the cache as it was; the first difference stops the compare. Sizes are
/// compared first.
fn same_bytes(a: OwnedFd, b: OwnedFd, chunk: usize) -> io::Result<bool> {
    let size = sys::fstat(a.as_fd())?.size;
    let other = sys::fstat(b.as_fd())?;
    if !other.is_file() || other.size != size {
        return Ok(false);
    }
    let (mut ra, mut rb) = (DiskReader::open(a, chunk)?, DiskReader::open(b, chunk)?);
    let mut off = 0;
    while off < size {
        let len = (size - off).min(chunk as u64);
        let x = ra.read(off, len)?;
        if x.is_empty() || x != rb.read(off, len)? {
            return Ok(false);
        }
        off += x.len() as u64;
    }
    Ok(true)
}

/// Extended attributes as compared for metadata-only changes: sorted, `security.*` left out
/// (the system sets those, see [`Ctx::put_xattrs`]).
fn comparable_xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<(std::ffi::CString, Vec<u8>)>> {
    let mut list = sys::xattrs(fd)?;
    list.retain(|(n, _)| !n.to_bytes().starts_with(b"security."));
    list.sort();
    Ok(list)
}

impl Ctx<'_> {
    /// A destination file left for its content (quick check or checksum) under `preserve`:
    /// when its mode, owner (as root), modification time, extended attributes or ACLs differ
    /// from the source's, they are brought over (nothing in a dry run), as rsync -a does for
    /// a file it itemizes `.f...p.....`. True when something differed. The destination is
    /// opened without following a symlink.
    pub(super) fn refresh_meta(&self, src: &Path, dst: &Path) -> Result<bool, FileError> {
        let flags = sys::OpenFlags {
            noatime: true,
            nofollow: true,
            ..Default::default()
        };
        let sf = sys::open_path(src, flags).map_err(|e| FileError::io(src, Op::Open, &e))?;
        let st = sys::fstat(sf.as_fd()).map_err(|e| FileError::io(src, Op::Fstat, &e))?;
        let df = self
            .dest
            .open_read(dst)
            .map_err(|e| FileError::io(dst, Op::Open, &e))?;
        let dt = sys::fstat(df.as_fd()).map_err(|e| FileError::io(dst, Op::Fstat, &e))?;
        let owner_differs = self.is_root && (st.uid, st.gid) != (dt.uid, dt.gid);
        let differs = owner_differs
            || st.mode & 0o7777 != dt.mode & 0o7777
            || st.mtime != dt.mtime
            || comparable_xattrs(sf.as_fd()).ok() != comparable_xattrs(df.as_fd()).ok();
        if differs && !self.opts.dry_run {
            self.apply_meta(&sf, &fs::File::from(df), &st)
                .map_err(|(op, e)| FileError::io(dst, op, &e))?;
        }
        Ok(differs)
    }

    /// An existing destination file whose content is left: its metadata refreshed under
    /// `preserve` (counted and itemized as `metadata`), else counted as skipped.
    pub(super) fn keep_file(&self, src: &Path, dst: &Path, kind: EntryKind) {
        if !self.opts.preserve {
            return self.skipped(dst, kind);
        }
        match self.refresh_meta(src, dst) {
            Ok(true) => {
                self.counts.metadata.fetch_add(1, Ordering::Relaxed);
                self.item(dst, kind, super::Action::Metadata, 0);
            }
            Ok(false) => self.skipped(dst, kind),
            Err(e) => self.fail(e),
        }
    }

    /// --checksum: whether `t`'s destination has its source's content (read without caching
    /// either). A read failure counts as different: the copy then runs and reports it.
    pub(super) fn same_content(&self, t: &FileTask) -> bool {
        let flags = sys::OpenFlags {
            noatime: true,
            ..Default::default()
        };
        let src = sys::open_path(&t.src, flags);
        let dst = self.dest.open_read(&t.dst);
        match (src, dst) {
            (Ok(a), Ok(b)) => same_bytes(a, b, self.opts.chunk).unwrap_or(false),
            _ => false,
        }
    }

    /// A worker's check of a `compare` task: true when the destination has the same content,
    /// then left (counted as skipped) with, under `preserve`, its metadata brought up to date
    /// as rsync does for a file whose content matches.
    pub(super) fn unchanged(&self, t: &FileTask) -> bool {
        if self.stopped() || !self.same_content(t) {
            return false;
        }
        self.keep_file(&t.src, &t.dst, EntryKind::File);
        true
    }
}

/// Reads `[off, off+len)` of `fd` from disk without O_DIRECT: cached pages are written back
/// and dropped first (they cannot be re-read from disk otherwise), and what the read brings
/// in is dropped after.
fn read_uncached(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64, len: u64) -> io::Result<usize> {
    let was = cached_pages(fd, off, len).unwrap_or(1);
    if was > 0 {
        let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        sys::sync_file_range(fd, off, len, flags)?;
        sys::fadvise(fd, off, len, Advice::DontNeed)?;
    }
    let n = read_full(buf, off, len as usize, |b, o| sys::pread(fd, b, o))?;
    sys::fadvise(fd, off, len, Advice::DontNeed)?;
    Ok(n)
}
