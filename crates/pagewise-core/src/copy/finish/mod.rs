//! After the data. Per file: the check that the source did not change, metadata, the commit
//! to the final name, the account of the cache it left, and write-back in batches (never an
//! fdatasync per file). Per run: hard links, directory modes and times (deepest first),
//! fsync of directories, verification from disk and the measure of the destination's cache.
//!
//! Here: a file's finish and the run's end; the write-back batches and the destination's
//! residue in `settle`, reading back from disk (`--verify`, `--checksum`, kept files'
//! metadata) in `compare`.

mod compare;
mod settle;

pub(super) use compare::hashes_from_disk;
pub(super) use settle::{settle, BatchSettle, DestResidue, FdBudget, Settle};

use super::plan::DirTask;
use super::worker::{Local, Open};
use super::{Ctx, EntryKind, Strategy};
use crate::error::{FileError, Op};
use crate::residency::cached_pages;
use crate::sys::{self};
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

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
            let id = sys::fstat(o.df.as_fd()).map_or((0, 0), |s| (s.dev, s.ino));
            local.digests.push((o.dst, o.extents, d, id));
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
        // A named temporary (a resumed one above all) that is longer than its source had
        // something else write to it: the result would not be the source, so it is not
        // published. (Nobody else can open one — 0600, ours — but a process of this user can.)
        if let super::commit::Temp::Named(t) = &o.temp {
            let grown = sys::fstat(o.df.as_fd()).map(|t| t.size > size);
            if grown.map_err(|e| FileError::io(&o.dst, Op::Fstat, &e))? {
                let why = format!(
                    "its temporary {} grew past the source's size while it was written \
                     (another process wrote to it): not published",
                    crate::names::escape(t.name.as_encoded_bytes())
                );
                return Err(FileError::other(&o.dst, Op::Copy, why));
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
        // Data an earlier run kept (resumed) was neither read nor written by this one.
        let kept = crate::copy::resume::data_below(&o.extents, o.kept);
        let data: u64 = o.extents.iter().map(|e| e.1).sum::<u64>() - kept;
        local.residue.source_bytes += data;
        local.residue.dest_bytes += data;
        local.files += 1;
        local.bytes += size;
        local.data_bytes += data;
        if o.kept > 0 {
            local.resumed_files += 1;
            local.resumed_bytes += kept;
        }
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
