//! The per-entry decisions of the planner: whether an existing destination is left as it is
//! (`--existing`), and what is done with each kind of source entry — a regular file queued for
//! the workers (or a hard link deferred), a symlink or special file made here under a
//! temporary name and renamed over its destination.

use super::jobs::{Chain, DirJob, Entry};
use super::planner::Planner;
use crate::copy::finish::{keep_file, same_content};
use crate::copy::options::Existing;
use crate::copy::report::EntryKind;
use crate::copy::tasks::FileTask;
use crate::error::{FileError, Op};
use crate::sys;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Plans one source entry; a directory comes back as a job to queue.
pub(super) fn entry(p: &mut Planner<'_>, e: Entry, up: Option<Arc<Chain>>) -> Option<DirJob> {
    if p.ctx.stopped() {
        return None;
    }
    if e.st.is_dir() {
        return Some(DirJob { entry: e, up });
    }
    if e.st.is_symlink() {
        symlink(p, &e)
    } else if e.st.is_file() {
        file(p, e)
    } else {
        special(p, &e)
    }
    None
}

/// Recreates a FIFO, socket or device node (never opened: it could block or be a
/// device), under a temporary name renamed over `dst`, as `cp -a` and `rsync --specials
/// --devices` do. With `preserve`: owner (root), mode and times.
fn special(p: &mut Planner<'_>, e: &Entry) {
    let Some(kind) = sys::NodeKind::of_mode(e.st.mode) else {
        return p.ctx.fail(FileError::other(
            &e.src,
            Op::Copy,
            "unknown file type: not copied",
        ));
    };
    if keep_existing(p, e, |d| {
        sys::NodeKind::of_mode(d.mode) == Some(kind) && d.rdev == e.st.rdev
    }) {
        return;
    }
    let (mode, rdev) = (e.st.mode & 0o777, e.st.rdev);
    place(p, e, EntryKind::of(&e.st), Op::Mknod, |dir, tmp| {
        sys::mknod_at(dir, tmp, kind, mode, rdev)
    });
}

/// Makes a symlink or special file under a temporary name with `make`, gives it its
/// metadata and renames it over the destination (nothing in a dry run); counts it.
fn place(
    p: &mut Planner<'_>,
    e: &Entry,
    kind: EntryKind,
    op: Op,
    make: impl FnOnce(BorrowedFd<'_>, &OsStr) -> io::Result<()>,
) {
    if !p.ctx.opts.dry_run {
        let (dir, name) = match p.ctx.dest.parent(&e.dst) {
            Ok(p) => p,
            Err(err) => {
                let up = e.dst.parent().unwrap_or(Path::new(".")).to_path_buf();
                return p.ctx.fail(FileError::io(&e.dst, Op::OpenParent(up), &err));
            }
        };
        let tmp = p.temps.temp_name(&e.dst);
        let r = make(dir.as_fd(), &tmp)
            .and_then(|_| node_meta(p, dir.as_fd(), &tmp, &e.st))
            .and_then(|_| sys::rename_at(dir.as_fd(), &tmp, name));
        if let Err(err) = r {
            let _ = sys::unlink_at(dir.as_fd(), &tmp, false);
            return p.ctx.fail(FileError::io(&e.dst, op, &err));
        }
    }
    let count = match kind {
        EntryKind::Symlink => &p.ctx.counts.symlinks,
        _ => &p.ctx.counts.specials,
    };
    count.fetch_add(1, Ordering::Relaxed);
    p.ctx.done(&e.dst, kind, e.dst_st.is_some(), 0);
}

/// True (and counted as skipped) when the destination exists and `existing` says to leave
/// it: always with [`Existing::Keep`], when `same` holds of its metadata with
/// [`Existing::QuickCheck`] and [`Existing::Checksum`].
fn keep_existing(p: &mut Planner<'_>, e: &Entry, same: impl FnOnce(&sys::Stat) -> bool) -> bool {
    let keep = keeps(p, e, same);
    if keep {
        p.ctx.skipped(&e.dst, EntryKind::of(&e.st));
    }
    keep
}

/// Whether `existing` leaves `e`'s destination as it is: never with
/// [`Existing::Replace`], whenever it exists with [`Existing::Keep`], when `same` holds of
/// its metadata with [`Existing::QuickCheck`] and [`Existing::Checksum`].
fn keeps(p: &Planner<'_>, e: &Entry, same: impl FnOnce(&sys::Stat) -> bool) -> bool {
    match p.ctx.opts.existing {
        Existing::Replace => false,
        Existing::Keep => e.dst_st.is_some(),
        Existing::QuickCheck | Existing::Checksum => e.dst_st.as_ref().is_some_and(same),
    }
}

/// With `preserve`: a special file's or symlink's owner (when root), mode (not for
/// symlinks, which have none of their own) and times, all without following or opening it.
fn node_meta(p: &Planner<'_>, dir: BorrowedFd<'_>, name: &OsStr, st: &sys::Stat) -> io::Result<()> {
    if !p.ctx.opts.preserve {
        return Ok(());
    }
    if p.ctx.is_root {
        sys::chown_at(dir, name, st.uid, st.gid)?;
    }
    if !st.is_symlink() {
        sys::chmod_at(dir, name, st.mode & 0o7777)?;
    }
    sys::set_times_at(dir, name, st.atime, st.mtime)
}

/// Copies a symlink as its text, under a temporary name renamed over `dst`.
fn symlink(p: &mut Planner<'_>, e: &Entry) {
    let target = match fs::read_link(&e.src) {
        Ok(t) => t,
        Err(err) => return p.ctx.fail(FileError::io(&e.src, Op::Readlink, &err)),
    };
    let dest = &p.ctx.dest;
    let same_text = |d: &sys::Stat| {
        d.is_symlink()
            && dest
                .parent(&e.dst)
                .and_then(|(dir, name)| sys::read_link_at(dir.as_fd(), name))
                .is_ok_and(|t| t == target)
    };
    if keep_existing(p, e, same_text) {
        return;
    }
    place(p, e, EntryKind::Symlink, Op::Symlink, |dir, tmp| {
        sys::symlink_at(&target, dir, tmp)
    });
}

/// Queues a regular file for the workers (or, for a second name of a file already
/// queued, a hard link to make at the end).
fn file(p: &mut Planner<'_>, e: Entry) {
    let size = e.st.size;
    // rsync's --max-size and --min-size: the file is left out, its destination kept.
    let opts = p.ctx.opts;
    if opts.max_size.is_some_and(|m| size > m) || opts.min_size.is_some_and(|m| size < m) {
        return;
    }
    // --checksum never leaves a file on its metadata alone: same-size files are compared.
    let quick = p.ctx.opts.existing != Existing::Checksum;
    let same = |d: &sys::Stat| quick && d.is_file() && d.size == size && d.mtime == e.st.mtime;
    let keep = keeps(p, &e, same);
    if e.st.nlink > 1 {
        let key = (e.st.dev, e.st.ino);
        let mut links = p.shared.links.lock().unwrap();
        if let Some((first, kept)) = links.get(&key) {
            let (first, kept) = (first.clone(), *kept);
            drop(links);
            // Already this file's second name when its first name was left as it was.
            let linked = |d: &sys::Stat| kept == Some((d.dev, d.ino));
            let keep_second = keeps(p, &e, linked);
            if keep_second {
                return p.ctx.skipped(&e.dst, EntryKind::Hardlink);
            }
            if p.ctx.opts.dry_run {
                p.ctx
                    .done(&e.dst, EntryKind::Hardlink, e.dst_st.is_some(), 0);
            } else {
                p.deferred_links.push((first, e.dst));
            }
            return;
        }
        let kept = keep
            .then(|| e.dst_st.as_ref().map(|d| (d.dev, d.ino)))
            .flatten();
        links.insert(key, (e.dst.clone(), kept));
    }
    if keep {
        // Metadata is compared in full (both files opened, xattrs and ACLs read) only
        // when the stats say it may differ: mode, owner or mtime differ, or the source's
        // metadata changed (ctime) after the destination was last written. Opening every
        // up-to-date file made a no-op `-au` of 100k files 1.5x rsync's time. Equal ctimes
        // count too: timestamps are coarse (a jiffy, 4 ms at HZ=250), and a change made in
        // the same tick as the last copy left its destination was missed (an xattr set
        // right after a copy was not brought over).
        let may_differ = e.dst_st.as_ref().is_none_or(|d| {
            d.mode & 0o7777 != e.st.mode & 0o7777
                || (p.ctx.is_root && (d.uid, d.gid) != (e.st.uid, e.st.gid))
                || d.mtime != e.st.mtime
                || e.st.ctime >= d.ctime
        });
        if !may_differ {
            return p.ctx.skipped(&e.dst, EntryKind::File);
        }
        return keep_file(p.ctx, &e.src, &e.dst, EntryKind::File);
    }
    let compare = p.ctx.opts.existing == Existing::Checksum
        && e.dst_st
            .as_ref()
            .is_some_and(|d| d.is_file() && d.size == size);
    let resume = p.partials.take(&e.dst);
    let task = FileTask {
        src: e.src,
        dst: e.dst,
        size,
        existed: e.dst_st.is_some(),
        compare,
        resume,
    };
    if p.ctx.opts.dry_run {
        // What a run would do, content compared here when --checksum asks.
        if compare && same_content(p.ctx, &task) {
            return keep_file(p.ctx, &task.src, &task.dst, EntryKind::File);
        }
        let c = &p.ctx.counts;
        c.dry_files.fetch_add(1, Ordering::Relaxed);
        c.dry_bytes.fetch_add(task.size, Ordering::Relaxed);
        return p
            .ctx
            .done(&task.dst, EntryKind::File, task.existed, task.size);
    }
    p.ctx.observer.planned(1, size);
    p.queue(task);
}
