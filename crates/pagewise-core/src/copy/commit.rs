//! Where a file is written before it has its final name, and how it gets it: an unnamed
//! O_TMPFILE linked into place (linkat), or a hidden temporary name renamed over the final
//! one. Until the commit nothing stands under the final name, so an error or a stop leaves no
//! half file. [`Temps`] owns what that needs across files: the sequence of temporary names,
//! the umask, and the fallback to named temporaries where O_TMPFILE is refused.

use super::choices::TempPlace;
use super::resume::RESUME_MARK;
use super::state::Ctx;
use crate::error::{FileError, Op};
use crate::sys;
use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Where a file is written before it gets its final name.
pub(super) enum Temp {
    /// O_TMPFILE: no name until linked; nothing to clean up if the copy fails.
    Unnamed,
    /// A hidden name in the destination directory, renamed over the final name when complete.
    Named(NamedTemp),
    /// The destination file itself (rsync --inplace, --append): nothing to commit.
    InPlace,
}

/// A hidden temporary name in a destination directory, removed on drop unless the copy
/// committed it.
pub(super) struct NamedTemp {
    /// The directory it is in (reached without following symlinks) and its name there.
    pub dir: Arc<OwnedFd>,
    pub name: OsString,
    /// The mode the file gets at its commit: a named temporary is made 0600 — nobody else
    /// may open it to write while it is written, or hold a descriptor to the published file
    /// — and takes this mode (the source's less the umask) just before its rename. None:
    /// `preserve` sets the mode itself.
    mode: Option<u32>,
    armed: AtomicBool,
}

impl NamedTemp {
    /// Leaves the temporary where it is when dropped (a partial copy kept for a later run).
    pub(super) fn keep(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }
}

impl Temp {
    /// The temporary `name` in `dir` that an earlier run left, taken up by this one; it gets
    /// `mode` at its commit (see [`NamedTemp`]).
    pub(super) fn adopt(dir: Arc<OwnedFd>, name: OsString, mode: Option<u32>) -> Temp {
        Temp::Named(NamedTemp {
            dir,
            name,
            mode,
            armed: AtomicBool::new(true),
        })
    }
}

impl Drop for NamedTemp {
    fn drop(&mut self) {
        if *self.armed.get_mut() {
            let _ = sys::unlink_at(self.dir.as_fd(), &self.name, false);
        }
    }
}

/// The extended attribute that marks a named temporary as this program's: a later run
/// removes a leftover temporary (of a copy killed before it could clean up) only when it
/// carries this mark and its process is gone — never on its name alone. Removed before the
/// temporary takes its final name.
pub(super) const TEMP_MARK: &CStr = c"user.pagewise.temporary";
/// The mark's value.
pub(super) const TEMP_MARK_VALUE: &[u8] = b"1";

/// The temporaries of one copy: what is shared by every file written.
pub(super) struct Temps {
    /// Numbers temporary names.
    seq: AtomicU64,
    /// This process's umask (what open(O_CREAT) takes from a new file's mode).
    umask: u32,
    /// A destination refused O_TMPFILE: use named temporary files from then on.
    no_tmpfile: AtomicBool,
    /// rsync --delay-updates: complete files wait under their temporary names, and are all
    /// renamed into place at the end of the run (`Some`: those waiting, in order).
    delayed: Option<Mutex<Vec<Delayed>>>,
    /// Where temporaries are made (see [`TempPlace`]).
    place: TempPlace,
    /// [`TempPlace::Dir`]'s directory, opened once (or the error, as an errno).
    place_dir: OnceLock<Result<Arc<OwnedFd>, i32>>,
    /// [`TempPlace::Sub`]: the destination directories that have the subdirectory (by
    /// device and inode, with a descriptor), to remove it at the end when empty.
    subs: Mutex<HashMap<(u64, u64), Arc<OwnedFd>>>,
    /// rsync's layout: a FIFO or socket standing where a file goes is replaced, as rsync
    /// replaces it (cp's refuses; a device node is refused by both, see [`replaceable`]).
    specials: bool,
}

/// A complete file waiting for --delay-updates' renames: its temporary (directory, name)
/// and its final (directory, name).
struct Delayed {
    tmp_dir: Arc<OwnedFd>,
    tmp: OsString,
    dir: Arc<OwnedFd>,
    name: OsString,
}

impl Temps {
    /// The temporaries of a copy with `opts`, made under `umask`.
    pub(super) fn new(umask: u32, opts: &super::CopyOptions) -> Temps {
        Temps {
            delayed: opts.delay_updates.then(Default::default),
            seq: AtomicU64::new(0),
            umask,
            no_tmpfile: AtomicBool::new(false),
            place: opts.temp_place.clone(),
            place_dir: OnceLock::new(),
            subs: Mutex::default(),
            specials: opts.layout != super::Layout::Cp,
        }
    }

    /// The directory temporaries of files in the destination directory `dir` go to (see
    /// [`TempPlace`]): `dir` itself, the `--temp-dir`, or the subdirectory of `dir` —
    /// made (0700) when `create`, else None when it is not there. Never through a symlink.
    pub(super) fn temp_dir(
        &self,
        dir: &Arc<OwnedFd>,
        create: bool,
    ) -> io::Result<Option<Arc<OwnedFd>>> {
        match &self.place {
            TempPlace::Beside => Ok(Some(dir.clone())),
            TempPlace::Dir(p) => {
                let flags = sys::OpenFlags {
                    directory: true,
                    ..Default::default()
                };
                let r = self.place_dir.get_or_init(|| {
                    sys::open_path(p, flags)
                        .map(Arc::new)
                        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
                });
                match r {
                    Ok(fd) => Ok(Some(fd.clone())),
                    Err(e) => Err(io::Error::from_raw_os_error(*e)),
                }
            }
            TempPlace::Sub(name) => {
                let sub = match sys::open_dir_at(dir.as_fd(), name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                        match sys::mkdir_at(dir.as_fd(), name, 0o700) {
                            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                            _ => sys::open_dir_at(dir.as_fd(), name)?,
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    r => r?,
                };
                self.note_sub(dir);
                Ok(Some(Arc::new(sub)))
            }
        }
    }

    /// Remembers that the destination directory `dir` has [`TempPlace::Sub`]'s
    /// subdirectory, to remove it at the end when empty.
    pub(super) fn note_sub(&self, dir: &Arc<OwnedFd>) {
        if let Ok(st) = sys::fstat(dir.as_fd()) {
            let mut subs = self.subs.lock().unwrap();
            subs.entry((st.dev, st.ino)).or_insert_with(|| dir.clone());
        }
    }

    /// Removes [`TempPlace::Sub`]'s subdirectories that are empty now (after the copy and
    /// --delay-updates' renames), as rsync removes its partial directories.
    pub(super) fn remove_empty_subs(&self) {
        let Some(name) = self.place.sub() else {
            return;
        };
        for (_, dir) in self.subs.lock().unwrap().drain() {
            let _ = sys::unlink_at(dir.as_fd(), name, true);
        }
    }

    /// A hidden name for a temporary beside the final name `dst`, unique to this process
    /// and call: `.NAME.pagewise-PID-N.tmp`.
    pub(super) fn temp_name(&self, dst: &Path) -> OsString {
        let name = dst.file_name().unwrap_or_default();
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        static PID: OnceLock<u32> = OnceLock::new();
        let pid = *PID.get_or_init(std::process::id);
        let mut t = OsString::from(".");
        t.push(name);
        t.push(format!(".pagewise-{pid}-{n}.tmp"));
        t
    }

    /// Creates a named temporary `name` in `dir` (never through a symlink) marked as this
    /// program's (see [`TEMP_MARK`]). Where the filesystem has O_TMPFILE the file is made
    /// unnamed, marked, then linked under `name`, so the name never stands without its mark
    /// (a copy killed between a create and the mark left unmarked temporaries that no later
    /// run may remove: 2 of 245 in a test); elsewhere it is created (O_EXCL) and marked at
    /// once. Where the filesystem keeps no user xattrs it stays unmarked.
    fn create_marked(&self, dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<OwnedFd> {
        if !self.no_tmpfile.load(Ordering::Relaxed) {
            if let Ok(fd) = sys::open_tmpfile_at(dir, mode) {
                let _ = sys::set_xattr(fd.as_fd(), TEMP_MARK, TEMP_MARK_VALUE);
                sys::link_fd_at(fd.as_fd(), dir, name)?;
                return Ok(fd);
            }
        }
        let fd = sys::create_at(dir, name, mode)?;
        let _ = sys::set_xattr(fd.as_fd(), TEMP_MARK, TEMP_MARK_VALUE);
        Ok(fd)
    }

    /// The mode a named temporary gets at its commit when the file is to have `mode` (see
    /// [`NamedTemp`]): None when `preserve` sets it, or when it is 0600 anyway.
    pub(super) fn mode_at_commit(&self, ctx: &Ctx<'_>, mode: u32) -> Option<u32> {
        let m = mode & !self.umask;
        (!ctx.opts.preserve.perms && m != 0o600).then_some(m)
    }

    /// Creates the file the data goes to, in `dir` (the directory of `dst`, reached without
    /// following symlinks): unnamed (O_TMPFILE) where the filesystem has it, which costs one
    /// directory entry (at link time) instead of a create plus a rename — measured 12% of the
    /// CPU of a 100k-file tree copy went to rename —, else a hidden name, made 0600 (it gets
    /// `mode` at the commit).
    pub(super) fn create_temp(
        &self,
        ctx: &Ctx<'_>,
        dir: &Arc<OwnedFd>,
        dst: &Path,
        mode: u32,
    ) -> Result<(OwnedFd, Temp), FileError> {
        let parent = || match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // In a --temp-dir, temporaries have names there, as rsync's.
        let named = ctx.opts.named_temp
            || ctx.opts.partial
            || ctx.opts.delay_updates
            || matches!(self.place, TempPlace::Dir(_));
        let dir = &match self.temp_dir(dir, true) {
            Ok(Some(d)) => d,
            Ok(None) => dir.clone(),
            Err(e) => {
                let at = match &self.place {
                    TempPlace::Dir(p) => p.clone(),
                    TempPlace::Sub(n) => dst.with_file_name(n),
                    TempPlace::Beside => parent(),
                };
                return Err(FileError::io(dst, Op::OpenParent(at), &e));
            }
        };
        if !named && !self.no_tmpfile.load(Ordering::Relaxed) {
            match sys::open_tmpfile_at(dir.as_fd(), mode) {
                Ok(fd) => return Ok((fd, Temp::Unnamed)),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
                    ) =>
                {
                    self.no_tmpfile.store(true, Ordering::Relaxed);
                    ctx.tally.notice(format!(
                        "{} has no O_TMPFILE ({e}): files are written under hidden temporary names",
                        parent().display()
                    ));
                }
                Err(e) => {
                    return Err(FileError::io(dst, Op::OpenTmpfileIn(parent()), &e));
                }
            }
        }
        let name = self.temp_name(dst);
        let path = match self.place.sub() {
            Some(sub) => dst.with_file_name(sub).join(&name),
            None => dst.with_file_name(&name),
        };
        match self.create_marked(dir.as_fd(), &name, 0o600) {
            Ok(fd) => Ok((
                fd,
                Temp::Named(NamedTemp {
                    dir: dir.clone(),
                    name,
                    mode: self.mode_at_commit(ctx, mode),
                    armed: AtomicBool::new(true),
                }),
            )),
            Err(e) => Err(FileError::io(dst, Op::CreateExclusive(path), &e)),
        }
    }

    /// --delay-updates: renames every complete file waiting under its temporary name into
    /// place, in the order they were finished; the failures, with the final name. Then
    /// removes the empty subdirectories of [`TempPlace::Sub`].
    pub(super) fn finish_delayed(&self) -> Vec<(OsString, io::Error)> {
        let mut failed = Vec::new();
        let waiting = self
            .delayed
            .as_ref()
            .map(|d| std::mem::take(&mut *d.lock().unwrap()));
        for w in waiting.unwrap_or_default() {
            let (tdir, dir) = (w.tmp_dir.as_fd(), w.dir.as_fd());
            let r = replaceable(dir, &w.name, self.specials)
                .and_then(|_| sys::rename_across(tdir, &w.tmp, dir, &w.name));
            if let Err(e) = r {
                let _ = sys::unlink_at(tdir, &w.tmp, false);
                failed.push((w.name, e));
            }
        }
        self.remove_empty_subs();
        failed
    }

    /// Gives the complete file its final name `name` in `dir`, replacing what was there (as
    /// cp does; a symlink there is replaced, never followed).
    pub(super) fn commit(
        &self,
        fd: BorrowedFd<'_>,
        temp: &mut Temp,
        dir: BorrowedFd<'_>,
        dst: &Path,
    ) -> Result<(), (Op, io::Error)> {
        let name = dst.file_name().unwrap_or_default();
        match temp {
            Temp::InPlace => Ok(()),
            Temp::Named(tmp) => {
                replaceable(dir, name, self.specials).map_err(|e| (Op::Rename, e))?;
                if let Some(mode) = tmp.mode {
                    sys::fchmod(fd, mode).map_err(|e| (Op::Fchmod, e))?;
                }
                // The temporary's own mark goes last, right before its rename: a copy
                // killed between the two leaves an unmarked temporary (one syscall's window).
                let _ = sys::remove_xattr(fd, RESUME_MARK);
                let _ = sys::remove_xattr(fd, TEMP_MARK);
                if let Some(d) = &self.delayed {
                    // Renamed at the end of the run with the others (--delay-updates).
                    let owned = dir.try_clone_to_owned().map_err(|e| (Op::Rename, e))?;
                    d.lock().unwrap().push(Delayed {
                        tmp_dir: tmp.dir.clone(),
                        tmp: tmp.name.clone(),
                        dir: Arc::new(owned),
                        name: name.to_os_string(),
                    });
                    tmp.keep();
                    return Ok(());
                }
                sys::rename_across(tmp.dir.as_fd(), &tmp.name, dir, name)
                    .map_err(|e| (Op::Rename, e))?;
                tmp.keep();
                Ok(())
            }
            Temp::Unnamed => match sys::link_fd_at(fd, dir, name) {
                Ok(()) => Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    // Replacing an existing file atomically needs a rename.
                    replaceable(dir, name, self.specials).map_err(|e| (Op::Rename, e))?;
                    let tmp = self.temp_name(dst);
                    sys::link_fd_at(fd, dir, &tmp).map_err(|e| (Op::Linkat, e))?;
                    sys::rename_at(dir, &tmp, name).map_err(|e| {
                        let _ = sys::unlink_at(dir, &tmp, false);
                        (Op::Rename, e)
                    })
                }
                Err(e) => Err((Op::Linkat, e)),
            },
        }
    }
}

/// Whether the copy may take the place of what stands at `name` in `dir`: a regular file or
/// a symlink (replaced, as `cp --remove-destination` would) or nothing, and with `specials`
/// (rsync's layout) a FIFO or socket too. A device node is refused — renaming over
/// /dev/null would replace the device with a file.
fn replaceable(dir: BorrowedFd<'_>, name: &OsStr, specials: bool) -> io::Result<()> {
    let Ok(c) = CString::new(name.as_bytes()) else {
        return Ok(());
    };
    match sys::fstatat(Some(dir), &c, false) {
        Ok(m)
            if specials
                && matches!(
                    sys::NodeKind::of_mode(m.mode),
                    Some(sys::NodeKind::Fifo | sys::NodeKind::Socket)
                ) =>
        {
            Ok(())
        }
        Ok(m) if !(m.is_file() || m.is_symlink() || m.is_dir()) => Err(io::Error::other(format!(
            "the destination is a {}, not replaced by a copy",
            m.kind()
        ))),
        _ => Ok(()),
    }
}
