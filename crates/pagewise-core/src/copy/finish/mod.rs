//! After the data. Per file ([`Finish::file`]): the check that the source did not change,
//! metadata, the commit to the final name, the account of the cache it left, and write-back
//! in batches (never an fdatasync per file). Per run: hard links ([`link_hard`]), directory
//! modes and times, deepest first ([`finish_dirs`]), fsync of directories, verification from
//! disk and the measure of the destination's cache.
//!
//! Here: a file's finish (with the write-back state it owns, [`Finish`]) and the run's end;
//! the write-back batches and the destination's residue in `settle`, metadata under
//! `--preserve` in `meta`, reading back from disk (`--verify`, `--checksum`, kept files'
//! metadata) in `compare`.

mod compare;
mod meta;
mod settle;

use compare::xattr_changes;
pub(super) use compare::{keep_file, same_content, unchanged, verify, Digest};

use super::commit::{Temp, Temps};
use super::options::Strategy;
use super::report::{Action, EntryKind, Residue};
use super::resume::data_below;
use super::state::Ctx;
use super::tasks::{DeferredLink, DirTask};
use super::worker::{Open, Written};
use crate::error::{FileError, Op};
use crate::residency::cached_pages;
use crate::sys;
use meta::{apply_meta, dir_xattrs, epoch_time};
use settle::{settle, BatchSettle, DestResidue, Settle};
use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// What one worker adds up; merged into the report at the end.
#[derive(Default)]
pub(super) struct Local {
    /// Files written without the batched write-back, waiting for their wait and drop.
    pub settle: Vec<Settle>,
    pub files: u64,
    pub bytes: u64,
    pub data_bytes: u64,
    /// Files resumed from an earlier run's partial temporary, and the data bytes kept.
    pub resumed_files: u64,
    pub resumed_bytes: u64,
    pub strategies: BTreeMap<Strategy, u64>,
    pub residue: Residue,
    pub digests: Vec<Digest>,
}

/// Adds a worker's figures to the run's.
pub(super) fn merge(m: &mut Local, l: Local) {
    m.files += l.files;
    m.bytes += l.bytes;
    m.data_bytes += l.data_bytes;
    m.resumed_files += l.resumed_files;
    m.resumed_bytes += l.resumed_bytes;
    for (k, v) in l.strategies {
        *m.strategies.entry(k).or_default() += v;
    }
    m.residue.source_added_bytes += l.residue.source_added_bytes;
    m.residue.source_precached_bytes += l.residue.source_precached_bytes;
    m.residue.source_bytes += l.residue.source_bytes;
    m.residue.dest_bytes += l.residue.dest_bytes;
    m.residue.source_unknown_files += l.residue.source_unknown_files;
    m.digests.extend(l.digests);
}

/// The finishing of written files: the run's shared state it reads, and the write-back state
/// it owns (the batch the workers share, the measure of what the destination keeps cached).
pub(super) struct Finish<'a> {
    ctx: &'a Ctx<'a>,
    temps: &'a Temps,
    /// What the written files leave in the page cache.
    residue: DestResidue,
    batch: BatchSettle,
}

impl<'a> Finish<'a> {
    pub(super) fn new(ctx: &'a Ctx<'a>, temps: &'a Temps) -> Self {
        Finish {
            ctx,
            temps,
            residue: DestResidue::new(ctx.fds.recheck),
            batch: BatchSettle::new(ctx.fds.shared_settle),
        }
    }

    /// A worker's settle list, written back and dropped (when its thread is done).
    pub(super) fn settle(&self, local: &mut Local) {
        settle(&mut local.settle, &self.residue);
    }

    /// Writes back and drops what the shared batch still holds (at the end of the run).
    pub(super) fn flush(&self) {
        self.batch.flush(&self.residue);
    }

    /// Pages of the written files cached now.
    pub(super) fn residue_pages(&self) -> u64 {
        self.residue.pages()
    }

    /// Makes the copied file final and counts it, then hands it to write-back: `batched` files
    /// were written without RWF_DONTCACHE and go to the shared [`BatchSettle`]; the others to
    /// this worker's settle list.
    pub(super) fn file(&self, local: &mut Local, w: Written) {
        let Written {
            open: mut o,
            strategy: strat,
            digest,
            batched,
        } = w;
        // What the file it replaces had of attributes, read before the commit replaces it.
        let (xattr, acl) = match o.before.is_some_and(|b| b.is_file()) {
            true => xattr_changes(self.ctx, &o.sf, &o.dst),
            false => (false, false),
        };
        match self.make_final(&mut o, strat) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => return self.ctx.fail(e),
        }
        let data = Self::account(local, &o, strat);
        self.ctx.observer.progress(1, 0);
        let checksum = self.ctx.opts.existing == super::options::Existing::Checksum;
        let changes = o.before.or(o.basis).map(|b| super::report::Changes {
            xattr,
            acl,
            // -c: copied because the content differed (rsync's `c`).
            content: checksum && b.is_file(),
            ..self.ctx.changes(&o.st, &b)
        });
        if o.quiet {
            self.ctx
                .counts
                .created
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.ctx.item(
                &o.dst,
                EntryKind::File,
                super::report::Action::Skipped,
                o.st.size,
            );
        } else {
            self.ctx.done_with(
                &o.dst,
                EntryKind::File,
                changes.is_some(),
                o.st.size,
                changes.unwrap_or_default(),
                None,
            );
        }
        self.ctx.remove_source(&o.src, &o.st);
        if let Some(d) = digest {
            let id = sys::fstat(o.df.as_fd()).map_or((0, 0), |s| (s.dev, s.ino));
            local.digests.push((o.dst, o.extents, d, id));
        }
        let fd = o.df;
        let cached = &self.residue;
        if batched {
            self.batch.add(fd, data, cached);
        } else if strat != Strategy::Buffered {
            local.settle.push(Settle { fd: fd.into() });
            if local.settle.len() >= self.ctx.fds.settle {
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
        if let Temp::Named(t) = &o.temp {
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
        if o.sparse || strat == Strategy::Direct || matches!(o.temp, Temp::InPlace) {
            o.df.set_len(size)
                .map_err(|e| FileError::io(&o.dst, Op::Ftruncate, &e))?;
        }
        apply_meta(self.ctx, &o.sf, &o.df, &o.st, true)
            .map_err(|(op, e)| FileError::io(&o.dst, op, &e))?;
        if self.ctx.opts.fsync {
            o.df.sync_all()
                .map_err(|e| FileError::io(&o.dst, Op::Fsync, &e))?;
        }
        if self.ctx.stopped() {
            return Ok(false);
        }
        if o.before.is_some_and(|b| b.is_dir()) {
            let name = o.dst.file_name().unwrap_or_default();
            clear_dir(self.ctx, o.dir.as_fd(), name)
                .map_err(|e| FileError::io(&o.dst, Op::Rmdir, &e))?;
        } else if o.before.is_some() && !matches!(o.temp, Temp::InPlace) {
            let name = o.dst.file_name().unwrap_or_default();
            backup(self.ctx, o.dir.as_fd(), name, &o.dst)
                .map_err(|e| FileError::io(&o.dst, Op::Backup, &e))?;
        }
        self.temps
            .commit(o.df.as_fd(), &mut o.temp, o.dir.as_fd(), &o.dst)
            .map_err(|(op, e)| FileError::io(&o.dst, op, &e))?;
        Ok(true)
    }

    /// Adds a committed file to the worker's figures (the source's cache residue included);
    /// returns its data bytes.
    fn account(local: &mut Local, o: &Open, strat: Strategy) -> u64 {
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
        let kept = data_below(&o.extents, o.kept);
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
}

/// Makes the hard links the planner deferred, now that their first name exists; the
/// number made.
pub(super) fn link_hard(ctx: &Ctx<'_>, deferred: &[DeferredLink]) -> u64 {
    let mut made = 0;
    for DeferredLink { first, other, st } in deferred {
        let (Ok((fdir, fname)), Ok((odir, oname))) =
            (ctx.dest.parent(first), ctx.dest.parent(other))
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
        let old = sys::fstatat(Some(odir.as_fd()), &oc, false)
            .ok()
            .filter(|m| !m.is_dir() && sys::unlink_at(odir.as_fd(), oname, false).is_ok());
        let existed = old.is_some();
        match sys::link_at(fdir.as_fd(), fname, odir.as_fd(), oname) {
            Ok(()) => {
                made += 1;
                // A name that held a file: what differs from it now (rsync's `hf..T......`).
                let changes = old.map(|o| ctx.changes(st, &o)).unwrap_or_default();
                match alt_linked(ctx, first, other) {
                    // Both names are the earlier snapshot's file: nothing changed (rsync).
                    Some(true) => ctx.item(
                        other,
                        EntryKind::Hardlink,
                        super::report::Action::Skipped,
                        0,
                    ),
                    // A counterpart there: itemized against it (`hf` and nothing else).
                    Some(false) => {
                        ctx.done_with(other, EntryKind::Hardlink, true, 0, changes, Some(first))
                    }
                    None => {
                        ctx.done_with(other, EntryKind::Hardlink, existed, 0, changes, Some(first))
                    }
                }
            }
            Err(e) => ctx.fail(FileError::io(other, Op::Link, &e)),
        }
    }
    made
}

/// For `other`, just linked to `first`, with alternate destinations: Some(true) when it is as
/// --link-dest found it (its counterpart there is the very file `first` is now, linked from
/// there), Some(false) when an alternate directory holds a counterpart file, None otherwise.
fn alt_linked(ctx: &Ctx<'_>, first: &std::path::Path, other: &std::path::Path) -> Option<bool> {
    if ctx.opts.alt_dests.is_empty() {
        return None;
    }
    let opts = ctx.opts;
    let ino = |p: &std::path::Path| sys::stat_path(p, false).ok().map(|s| (s.dev, s.ino));
    let now = ino(first)?;
    let linked = opts
        .alt_dests
        .iter()
        .filter(|a| a.kind == super::choices::AltKind::Link)
        .filter_map(|a| opts.alt_path(a, other))
        .any(|p| ino(&p) == Some(now));
    match linked {
        true => Some(true),
        false => opts.alt_basis(other).filter(|b| b.is_file()).map(|_| false),
    }
}

/// Sets the directories' modes (and with --preserve owner and times), deepest first, and
/// fsyncs them if asked. Without --preserve the mode is the source's less `umask`.
pub(super) fn finish_dirs(ctx: &Ctx<'_>, dirs: &[DirTask]) {
    let opts = ctx.opts;
    let keep = opts.preserve;
    for d in dirs {
        if opts.delete_only {
            // Only the times deleting inside changed are given back (rsync does the same
            // after --delete-after); nothing else is touched.
            if keep.times && !opts.omit_dir_times && !opts.dry_run {
                if let Ok(fd) = ctx.dest.dir(&d.dst) {
                    let times = fs::FileTimes::new()
                        .set_accessed(epoch_time(d.meta.atime))
                        .set_modified(epoch_time(d.meta.mtime));
                    let _ = fs::File::from(fd).set_times(times);
                }
            }
            continue;
        }
        if opts.dry_run {
            // What a run would say of a directory that exists; nothing is changed.
            if let Some(before) = &d.before {
                dir_item(ctx, d, before);
            }
            continue;
        }
        let meta = ctx.source_meta(&d.meta);
        // Without -p a directory that existed keeps its mode (as rsync's do); a new one was
        // made with the source's (see plan::dir::make_dir) plus u=rwx: what the source's
        // lacks of those is taken back, the rest of what mkdir gave (umask or default ACL,
        // inherited set-group-ID) stays.
        let added = 0o700 & !meta.mode;
        // Reached without following symlinks: a directory swapped for a link since it
        // was made is refused, not chmod'ed through.
        let f = match ctx.dest.dir(&d.dst) {
            Ok(fd) => fs::File::from(fd),
            Err(e) => {
                ctx.fail(FileError::io(&d.dst, Op::OpenDirectory, &e));
                continue;
            }
        };
        let _ = meta::chown(ctx, f.as_fd(), &meta);
        let mode = match (keep.perms, d.before) {
            (true, _) => Some(meta.mode & 0o7777),
            (false, None) if added != 0 => {
                sys::fstat(f.as_fd()).ok().map(|s| s.mode & 0o7777 & !added)
            }
            (false, _) => None,
        };
        if let Some(mode) = mode {
            if let Err(e) = f.set_permissions(fs::Permissions::from_mode(mode)) {
                ctx.fail(FileError::io(&d.dst, Op::Chmod, &e));
            }
        }
        if let Some(before) = &d.before {
            dir_item(ctx, d, before);
        }
        if !(keep.any() || opts.fsync) {
            continue;
        }
        dir_xattrs(ctx, &d.src, &f);
        if keep.times && !opts.omit_dir_times {
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

/// A directory that existed (`before`): reported as `metadata` when what is kept differed
/// from its source, else as left.
fn dir_item(ctx: &Ctx<'_>, d: &DirTask, before: &sys::Stat) {
    let changes = ctx.dir_changes(&d.meta, before);
    let action = match changes.is_empty() {
        true => super::report::Action::Skipped,
        false => super::report::Action::Metadata,
    };
    ctx.item_with(&d.dst, EntryKind::Dir, action, 0, changes, None);
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

/// rsync's --backup: before what stands at `name` in `dir` (the destination `dst`) is replaced
/// or deleted, it is kept under its backup name — `NAME` + suffix beside it, or the same
/// relative path under the backup directory (made as needed) — replacing an older backup.
/// Nothing without --backup, in a dry run, or when nothing stands there.
pub(in crate::copy) fn backup(
    ctx: &Ctx<'_>,
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    dst: &std::path::Path,
) -> std::io::Result<()> {
    let Some(b) = &ctx.opts.backup else {
        return Ok(());
    };
    if ctx.opts.dry_run {
        return Ok(());
    }
    let mut kept = name.to_os_string();
    kept.push(&b.suffix);
    let Some(bdir) = &b.dir else {
        // Beside the original: a second name now, so the original stays in place until the
        // copy's commit replaces it.
        let _ = sys::unlink_at(dir, &kept, false);
        sys::link_at(dir, name, dir, &kept).or_else(|_| {
            // A directory (rsync backs those up by renaming) or a file system without hard
            // links: renamed.
            sys::rename_at(dir, name, &kept)
        })?;
        let at = dst.with_file_name(&kept);
        ctx.item_with(
            dst,
            EntryKind::File,
            Action::BackedUp,
            0,
            Default::default(),
            Some(&at),
        );
        return Ok(());
    };
    let base = match bdir.is_absolute() {
        true => bdir.clone(),
        false => ctx.opts.dest.join(bdir),
    };
    let rel = dst
        .strip_prefix(&ctx.opts.dest)
        .unwrap_or(std::path::Path::new(name));
    let target = base.join(rel).with_file_name(&kept);
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent)?;
    }
    let flags = sys::OpenFlags {
        directory: true,
        nofollow: true,
        ..Default::default()
    };
    let tdir = sys::open_path(target.parent().unwrap_or(std::path::Path::new(".")), flags)?;
    let tname = target.file_name().unwrap_or_default();
    match sys::fstatat(
        Some(tdir.as_fd()),
        &std::ffi::CString::new(tname.as_encoded_bytes())?,
        false,
    ) {
        Ok(m) if m.is_dir() => sys::remove_tree_at(tdir.as_fd(), tname, 4096)?,
        Ok(_) => sys::unlink_at(tdir.as_fd(), tname, false)?,
        Err(_) => {}
    }
    match sys::link_at(dir, name, tdir.as_fd(), tname) {
        Ok(()) => Ok(()),
        Err(_) => match sys::rename_across(dir, name, tdir.as_fd(), tname) {
            // The backup directory on another file system: a copy there (rsync's
            // copy_file, symlink and mknod fallbacks); the original stays until it is
            // replaced or deleted.
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                copy_across(ctx, dir, name, tdir.as_fd(), tname)
            }
            r => r,
        },
    }?;
    ctx.item_with(
        dst,
        EntryKind::File,
        Action::BackedUp,
        0,
        Default::default(),
        Some(&target),
    );
    Ok(())
}

/// A backup of `name` in `dir` made as a copy at `tname` in `tdir` (another file system):
/// a regular file's data (through the cache, which the copy's data never is: backups
/// across file systems are rare), mode, owner (as root) and times; a symlink's text; a
/// special file's node. The copy is made under its name with O_EXCL|O_NOFOLLOW (the caller
/// removed what stood there) and removed again when it fails half-way. A directory cannot
/// be copied this way: EXDEV, as before.
fn copy_across(
    ctx: &Ctx<'_>,
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    tdir: std::os::fd::BorrowedFd<'_>,
    tname: &std::ffi::OsStr,
) -> std::io::Result<()> {
    let cname = std::ffi::CString::new(name.as_encoded_bytes())?;
    let st = sys::fstatat(Some(dir), &cname, false)?;
    if st.is_symlink() {
        return sys::symlink_at(&sys::read_link_at(dir, name)?, tdir, tname);
    }
    if let Some(kind) = sys::NodeKind::of_mode(st.mode) {
        return sys::mknod_at(tdir, tname, kind, st.mode, st.rdev);
    }
    if !st.is_file() {
        return Err(std::io::Error::from_raw_os_error(libc::EXDEV));
    }
    let flags = sys::OpenFlags {
        nofollow: true,
        noatime: true,
        ..Default::default()
    };
    let mut from = fs::File::from(sys::openat(Some(dir), &cname, flags)?);
    let mut to = fs::File::from(sys::create_at(tdir, tname, 0o600)?);
    let copied = std::io::copy(&mut from, &mut to).and_then(|_| {
        let uid = ctx.is_root.then_some(st.uid);
        let _ = sys::fchown(to.as_fd(), uid, Some(st.gid));
        to.set_permissions(fs::Permissions::from_mode(st.mode & 0o7777))?;
        let times = fs::FileTimes::new()
            .set_accessed(epoch_time(st.atime))
            .set_modified(epoch_time(st.mtime));
        to.set_times(times)
    });
    if copied.is_err() {
        let _ = sys::unlink_at(tdir, tname, false);
    }
    copied
}

/// A directory where a file, symlink or special file is to go: removed when empty, or with
/// everything in it under `force` (rsync --force, --delete); else the error rsync gives.
pub(in crate::copy) fn clear_dir(
    ctx: &Ctx<'_>,
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
) -> std::io::Result<()> {
    if ctx.opts.dry_run {
        return Ok(());
    }
    match sys::unlink_at(dir, name, true) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) && ctx.opts.force => {
            sys::remove_tree_at(dir, name, 4096)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Err(std::io::Error::other(
            "cannot delete non-empty directory in the way (rsync --force, --delete)",
        )),
        r => r,
    }
}
