//! The per-entry decisions of the planner: whether an existing destination is left as it is
//! (`--existing`), and what is done with each kind of source entry — a regular file queued for
//! the workers (or a hard link deferred), a symlink or special file made here under a
//! temporary name and renamed over its destination.

use super::jobs::{Chain, DirJob, Entry};
use super::planner::Planner;
use crate::copy::choices::{AltKind, InPlace, Links};
use crate::copy::finish::{keep_file, same_content};
use crate::copy::options::Existing;
use crate::copy::report::EntryKind;
use crate::copy::report::{Action, Changes};
use crate::copy::state::Ctx;
use crate::copy::tasks::{DeferredLink, FileTask};
use crate::error::{FileError, Op};
use crate::sys;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
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
    if p.ctx.opts.delete_only {
        return None;
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
    let device = matches!(kind, sys::NodeKind::CharDevice | sys::NodeKind::BlockDevice);
    let opts = p.ctx.opts;
    if (device && !opts.devices) || (!device && !opts.specials) {
        return p.ctx.ignored(&e.dst, EntryKind::of(&e.st), None);
    }
    if new_refused(p, e) {
        return;
    }
    if keep_existing(p, e, None, |d| {
        sys::NodeKind::of_mode(d.mode) == Some(kind) && d.rdev == e.st.rdev
    }) {
        return;
    }
    let (mode, rdev) = (e.st.mode & 0o777, e.st.rdev);
    let same_node = |d: &sys::Stat, _: &Path| {
        sys::NodeKind::of_mode(d.mode) == Some(kind)
            && d.rdev == rdev
            && p.ctx.changes(&e.st, d) == Changes::default()
    };
    let alt = match e.dst_st {
        None => alt_match(p, e, &same_node),
        Some(_) => Alt::NoMatch,
    };
    if matches!(alt, Alt::Done) {
        return;
    }
    // What differs from the node it replaces: its device numbers, and what is kept.
    let changes = Changes {
        content: e.dst_st.is_some_and(|d| d.rdev != rdev),
        ..e.dst_st
            .as_ref()
            .filter(|d| d.mode & libc::S_IFMT == e.st.mode & libc::S_IFMT)
            .map(|d| p.ctx.changes(&e.st, d))
            .unwrap_or_default()
    };
    place(
        p,
        e,
        EntryKind::of(&e.st),
        Op::Mknod,
        (changes, matches!(alt, Alt::CopyQuiet(_))),
        None,
        |dir, tmp| sys::mknod_at(dir, tmp, kind, mode, rdev),
    );
}

/// With --existing (only what exists is updated): true when `e`'s destination does not exist,
/// so it is not made.
pub(super) fn new_refused(p: &Planner<'_>, e: &Entry) -> bool {
    p.ctx.opts.only_existing && e.dst_st.is_none()
}

/// Makes a symlink or special file under a temporary name with `make`, gives it its
/// metadata and renames it over the destination (nothing in a dry run); counts it.
fn place(
    p: &mut Planner<'_>,
    e: &Entry,
    kind: EntryKind,
    op: Op,
    (changes, quiet): (Changes, bool),
    target: Option<&Path>,
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
        if e.dst_st.is_some_and(|d| d.is_dir()) {
            if let Err(err) = crate::copy::finish::clear_dir(p.ctx, dir.as_fd(), name) {
                return p.ctx.fail(FileError::io(&e.dst, Op::Rmdir, &err));
            }
        } else if e.dst_st.is_some() {
            if let Err(err) = crate::copy::finish::backup(p.ctx, dir.as_fd(), name, &e.dst) {
                return p.ctx.fail(FileError::io(&e.dst, Op::Backup, &err));
            }
        }
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
    if quiet {
        p.ctx.counts.created.fetch_add(1, Ordering::Relaxed);
        p.ctx
            .item_with(&e.dst, kind, Action::Skipped, 0, Changes::default(), target);
    } else {
        p.ctx
            .done_with(&e.dst, kind, e.dst_st.is_some(), 0, changes, target);
    }
    p.ctx.remove_source(&e.src, &e.st);
}

/// True (and counted as skipped) when the destination exists and `existing` says to leave
/// it: always with [`Existing::Keep`], when `same` holds of its metadata with
/// [`Existing::QuickCheck`] and [`Existing::Checksum`].
fn keep_existing(
    p: &mut Planner<'_>,
    e: &Entry,
    target: Option<&Path>,
    same: impl FnOnce(&sys::Stat) -> bool,
) -> bool {
    let keep = keeps(p, e, same);
    if keep {
        p.ctx.counts.skipped.fetch_add(1, Ordering::Relaxed);
        let kind = EntryKind::of(&e.st);
        p.ctx
            .item_with(&e.dst, kind, Action::Skipped, 0, Changes::default(), target);
        p.ctx.remove_source(&e.src, &e.st);
    }
    keep
}

/// Whether `existing` leaves `e`'s destination as it is: never with
/// [`Existing::Replace`], whenever it exists with [`Existing::Keep`], when `same` holds of
/// its metadata with [`Existing::QuickCheck`] and [`Existing::Checksum`].
fn keeps(p: &Planner<'_>, e: &Entry, same: impl FnOnce(&sys::Stat) -> bool) -> bool {
    match p.ctx.opts.existing {
        Existing::Replace => false,
        // rsync -I: every file is copied; symlinks and special files as the quick check says.
        Existing::ReplaceFiles => !e.st.is_file() && e.dst_st.as_ref().is_some_and(same),
        Existing::Keep => e.dst_st.is_some(),
        Existing::QuickCheck | Existing::SizeOnly | Existing::Checksum => {
            e.dst_st.as_ref().is_some_and(same)
        }
    }
}

/// With `preserve`: a special file's or symlink's owner (when root), mode (not for
/// symlinks, which have none of their own) and times, all without following or opening it.
fn node_meta(p: &Planner<'_>, dir: BorrowedFd<'_>, name: &OsStr, st: &sys::Stat) -> io::Result<()> {
    let keep = p.ctx.opts.preserve;
    let st = &p.ctx.source_meta(st);
    let uid = (keep.owner && p.ctx.is_root).then_some(st.uid);
    let gid = keep.group.then_some(st.gid);
    if uid.is_some() || gid.is_some() {
        match sys::chown_at(dir, name, uid, gid) {
            Err(e) if !p.ctx.is_root && e.raw_os_error() == Some(libc::EPERM) => {}
            r => r?,
        }
    }
    if keep.perms && !st.is_symlink() {
        sys::chmod_at(dir, name, st.mode & 0o7777)?;
    }
    if keep.times && !(st.is_symlink() && p.ctx.opts.omit_link_times) {
        sys::set_times_at(dir, name, st.atime, st.mtime)?;
    }
    Ok(())
}

/// Copies a symlink as its text, under a temporary name renamed over `dst`.
fn symlink(p: &mut Planner<'_>, e: &Entry) {
    if p.ctx.opts.links == Links::Skip {
        return p.ctx.ignored(&e.dst, EntryKind::Symlink, None);
    }
    let target = match fs::read_link(&e.src) {
        Ok(t) => t,
        Err(err) => return p.ctx.fail(FileError::io(&e.src, Op::Readlink, &err)),
    };
    let margin = link_margin(p.ctx, &e.dst, e.depth);
    if p.ctx.opts.links == Links::SkipUnsafe && unsafe_link(target.as_os_str().as_bytes(), margin) {
        return p.ctx.ignored(&e.dst, EntryKind::Symlink, Some(&target));
    }
    if new_refused(p, e) {
        return;
    }
    p.ctx
        .counts
        .listed_bytes
        .fetch_add(e.st.size, Ordering::Relaxed);
    let dest = &p.ctx.dest;
    let same_text = |d: &sys::Stat| {
        d.is_symlink()
            && dest
                .parent(&e.dst)
                .and_then(|(dir, name)| sys::read_link_at(dir.as_fd(), name))
                .is_ok_and(|t| t == target)
    };
    let same_link =
        |d: &sys::Stat, at: &Path| d.is_symlink() && fs::read_link(at).is_ok_and(|t| t == target);
    let alt = match e.dst_st {
        None => alt_match(p, e, &same_link),
        Some(_) => Alt::NoMatch,
    };
    if matches!(alt, Alt::Done) {
        return;
    }
    let differs = e.dst_st.is_some_and(|d| d.is_symlink() && !same_text(&d));
    if keep_existing(p, e, Some(&target), same_text) {
        return;
    }
    // A link made anew over another gets the source's time with -t (not -J): rsync shows it
    // (`cLc.t......`).
    let opts = p.ctx.opts;
    let times = opts.preserve.times && !opts.omit_link_times;
    let changes = Changes {
        content: differs,
        time: differs
            && times
            && e.dst_st
                .is_some_and(|d| !opts.same_mtime(d.mtime, e.st.mtime)),
        ..Changes::default()
    };
    let text = target.clone();
    place(
        p,
        e,
        EntryKind::Symlink,
        Op::Symlink,
        (changes, matches!(alt, Alt::CopyQuiet(_))),
        Some(&text),
        |dir, tmp| sys::symlink_at(&target, dir, tmp),
    );
}

/// rsync's margin for [`unsafe_link`]: the directories between the transfer's root and a
/// link whose copy is `dst` (`depth` levels below the source named: the fallback when `dst`
/// is not below the destination).
pub(super) fn link_margin(ctx: &Ctx<'_>, dst: &Path, depth: usize) -> usize {
    dst.strip_prefix(&ctx.opts.dest)
        .map_or(depth.saturating_sub(1), |r| {
            r.components().count().saturating_sub(1)
        })
}

/// rsync's unsafe symlink (util1.c `unsafe_symlink`, rsync 3.4+): its `target` may leave the
/// copied tree from a link `margin` directories below the tree's root — an absolute or empty
/// target, a `..` anywhere but at the start, a trailing `/..`, or more `..` than the margin
/// plus the names before them at any point.
pub(super) fn unsafe_link(target: &[u8], margin: usize) -> bool {
    if target.is_empty() || target[0] == b'/' {
        return true;
    }
    let mut rest = target;
    while let Some(r) = rest.strip_prefix(b"../") {
        rest = r;
        while let Some(r) = rest.strip_prefix(b"/") {
            rest = r;
        }
    }
    if rest.windows(4).any(|w| w == b"/../") {
        return true;
    }
    if target.len() > 3 && target.ends_with(b"/..") {
        return true;
    }
    let mut depth = margin as i64;
    let parts: Vec<&[u8]> = target.split(|&b| b == b'/').collect();
    let Some((last, dirs)) = parts.split_last() else {
        return true;
    };
    for seg in dirs {
        match *seg {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    if *last == b".." {
        depth -= 1;
    }
    depth < 0
}

/// Queues a regular file for the workers (or, for a second name of a file already
/// queued, a hard link to make at the end).
fn file(p: &mut Planner<'_>, e: Entry) {
    let size = e.st.size;
    p.ctx.counts.listed_bytes.fetch_add(size, Ordering::Relaxed);
    // rsync's --max-size and --min-size: the file is left out, its destination kept.
    let opts = p.ctx.opts;
    if opts.max_size.is_some_and(|m| size > m) || opts.min_size.is_some_and(|m| size < m) {
        return;
    }
    if left_as_is(p, &e) {
        return;
    }
    let nofollow = e.nofollow(opts.dereference);
    // --checksum never leaves a file on its metadata alone: same-size files are compared.
    let quick = opts.existing != Existing::Checksum;
    let same = |d: &sys::Stat| {
        quick
            && d.is_file()
            && d.size == size
            && (opts.existing == Existing::SizeOnly || opts.same_mtime(d.mtime, e.st.mtime))
    };
    let keep = keeps(p, &e, same);
    if e.st.nlink > 1 && opts.hard_links {
        let key = (e.st.dev, e.st.ino);
        let mut links = p.shared.links.lock().unwrap();
        if let Some((first, kept)) = links.get(&key) {
            let (first, kept) = (first.clone(), *kept);
            drop(links);
            // Already this file's second name when its first name was left as it was.
            let linked = |d: &sys::Stat| kept == Some((d.dev, d.ino));
            if keeps(p, &e, linked) {
                return p.ctx.skipped(&e.dst, EntryKind::Hardlink);
            }
            if p.ctx.opts.dry_run {
                p.ctx
                    .done(&e.dst, EntryKind::Hardlink, e.dst_st.is_some(), 0);
            } else {
                p.deferred_links.push(DeferredLink {
                    first,
                    other: e.dst,
                    st: e.st,
                });
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
        let may_differ = e
            .dst_st
            .as_ref()
            .is_none_or(|d| !p.ctx.changes(&e.st, d).is_empty() || e.st.ctime >= d.ctime);
        // --ignore-existing (cp -n) leaves an existing file as it is, metadata and all.
        if !may_differ || opts.existing == Existing::Keep {
            p.ctx.skipped(&e.dst, EntryKind::File);
        } else {
            keep_file(p.ctx, &e.src, &e.dst, EntryKind::File);
        }
        return p.ctx.remove_source(&e.src, &e.st);
    }
    let alt = match e.dst_st {
        None => alt_dest(p, &e),
        Some(_) => Alt::NoMatch,
    };
    if matches!(alt, Alt::Done) {
        return;
    }
    let compare = p.ctx.opts.existing == Existing::Checksum
        && e.dst_st
            .as_ref()
            .is_some_and(|d| d.is_file() && d.size == size);
    let resume = p.partials.take(&e.dst);
    // rsync itemizes a file new here against its counterpart in an alternate directory.
    let basis = match e.dst_st {
        None => opts.alt_basis(&e.dst).filter(|b| b.is_file()),
        Some(_) => None,
    };
    let task = FileTask {
        quiet: matches!(alt, Alt::CopyQuiet(_)),
        src: alt.source(e.src, opts.remove_source_files),
        dst: e.dst,
        size,
        before: e.dst_st,
        basis,
        compare,
        resume,
        nofollow,
    };
    if p.ctx.opts.dry_run {
        // What a run would do, content compared here when --checksum asks.
        if compare && same_content(p.ctx, &task) {
            return keep_file(p.ctx, &task.src, &task.dst, EntryKind::File);
        }
        let c = &p.ctx.counts;
        c.dry_files.fetch_add(1, Ordering::Relaxed);
        c.dry_bytes.fetch_add(task.size, Ordering::Relaxed);
        if task.quiet {
            c.dry_files.fetch_sub(1, Ordering::Relaxed);
            c.dry_bytes.fetch_sub(task.size, Ordering::Relaxed);
            return p.ctx.skipped(&task.dst, EntryKind::File);
        }
        let changes = task.before.or(task.basis).map(|d| p.ctx.changes(&e.st, &d));
        return p.ctx.done_with(
            &task.dst,
            EntryKind::File,
            changes.is_some(),
            task.size,
            changes.unwrap_or_default(),
            None,
        );
    }
    p.ctx.observer.planned(1, size);
    p.queue(task);
}

/// Whether a file is left before any comparison: --existing and a new file, --append and a
/// destination as long as its source or longer, -u and a destination newer than its source
/// (the last two reported as left).
fn left_as_is(p: &Planner<'_>, e: &Entry) -> bool {
    let opts = p.ctx.opts;
    if new_refused(p, e) {
        return true;
    }
    let appending = matches!(opts.inplace, InPlace::Append | InPlace::AppendVerify);
    let longer = e.dst_st.is_some_and(|d| d.is_file() && d.size >= e.st.size);
    // rsync -u compares whole seconds: a destination is newer when the source's second is
    // more than --modify-window before its (rsync's generator.c); cp -u to the nanosecond.
    let newer = e.dst_st.is_some_and(|d| {
        d.is_file()
            && match opts.layout {
                crate::copy::choices::Layout::Cp => d.mtime > e.st.mtime,
                _ => e.st.mtime.0 - d.mtime.0 < opts.modify_window,
            }
    });
    if (appending && longer) || (opts.skip_newer && newer) {
        p.ctx.skipped(&e.dst, EntryKind::File);
        return true;
    }
    false
}

/// rsync's --link-dest, --compare-dest and --copy-dest for a file missing at the destination:
/// the first alternate directory holding the same relative path as a regular file unchanged
/// from the source (size and time, and the mode, owner and group that are kept) decides. True
/// when the file is done (linked, or left out); false: copy it (--copy-dest copies the same
/// content from the source).
fn alt_dest(p: &mut Planner<'_>, e: &Entry) -> Alt {
    let opts = p.ctx.opts;
    let same = |st: &sys::Stat, _: &Path| {
        st.is_file()
            && st.size == e.st.size
            && (opts.existing == Existing::SizeOnly || opts.same_mtime(st.mtime, e.st.mtime))
            && p.ctx.changes(&e.st, st) == Changes::default()
    };
    alt_match(p, e, &same)
}

/// [`alt_dest`] for any kind: `same` says whether what the alternate directory holds
/// (its lstat and path) is unchanged from the source `e`. A symlink or special file found
/// there is linked (--link-dest; as root rsync links them too) or left out, and reported as
/// left (rsync lists it only with -ii).
fn alt_match(p: &mut Planner<'_>, e: &Entry, same: &dyn Fn(&sys::Stat, &Path) -> bool) -> Alt {
    let opts = p.ctx.opts;
    if opts.alt_dests.is_empty() {
        return Alt::NoMatch;
    }
    let Some(rel) = e
        .dst
        .strip_prefix(&opts.dest)
        .ok()
        .filter(|r| r.file_name().is_some())
    else {
        return Alt::NoMatch;
    };
    for (i, alt) in opts.alt_dests.iter().enumerate() {
        // Reached from the directory held open, no symlink followed on the way or at the end.
        let Some(root) = p.ctx.alt_root(i) else {
            continue;
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        let name = rel
            .file_name()
            .and_then(|n| std::ffi::CString::new(n.as_bytes()).ok());
        let found = sys::open_dir_beneath(root, parent)
            .ok()
            .zip(name)
            .and_then(|(d, n)| sys::fstatat(Some(d.as_fd()), &n, false).ok());
        let Some(st) = found else {
            continue;
        };
        let path = sys::fd_path(root).join(rel);
        if !same(&st, &path) {
            continue;
        }
        return match alt.kind {
            AltKind::Compare => {
                p.ctx.skipped(&e.dst, EntryKind::of(&e.st));
                Alt::Done
            }
            AltKind::Copy => Alt::CopyQuiet(path),
            AltKind::Link if link_alt(p, e, &path) => Alt::Done,
            AltKind::Link => Alt::NoMatch,
        };
    }
    Alt::NoMatch
}

/// What an alternate destination directory decided for an entry new here.
#[derive(Clone, PartialEq, Eq)]
enum Alt {
    /// Nothing unchanged there: copied as usual.
    NoMatch,
    /// Linked from there, or left out (--compare-dest): nothing more to do.
    Done,
    /// Unchanged there (--copy-dest): copied from there as rsync's (a local copy of the
    /// basis, not the source's data), and reported as left (rsync lists such a copy only
    /// with -ii).
    CopyQuiet(PathBuf),
}

impl Alt {
    /// What the file is copied from: --copy-dest's basis, else `src` (also with
    /// --remove-source-files, which removes the source after the copy).
    fn source(self, src: PathBuf, removing_sources: bool) -> PathBuf {
        match self {
            Alt::CopyQuiet(basis) if !removing_sources => basis,
            _ => src,
        }
    }
}

/// --link-dest: the destination becomes a hard link to the unchanged `alt` file. False when
/// the link cannot be made (another file system, too many links): the file is copied.
fn link_alt(p: &mut Planner<'_>, e: &Entry, alt: &Path) -> bool {
    if !p.ctx.opts.dry_run {
        let Ok((dir, name)) = p.ctx.dest.parent(&e.dst) else {
            return false;
        };
        let flags = sys::OpenFlags {
            directory: true,
            ..Default::default()
        };
        let (Some(aname), Some(aparent)) = (alt.file_name(), alt.parent()) else {
            return false;
        };
        let linked = sys::open_path(aparent, flags)
            .and_then(|adir| sys::link_at(adir.as_fd(), aname, dir.as_fd(), name));
        if linked.is_err() {
            return false;
        }
    }
    p.ctx.counts.linked.fetch_add(1, Ordering::Relaxed);
    match e.st.is_file() {
        true => p.ctx.done_with(
            &e.dst,
            EntryKind::Hardlink,
            false,
            0,
            Changes::default(),
            Some(alt),
        ),
        false => p.ctx.skipped(&e.dst, EntryKind::of(&e.st)),
    }
    p.ctx.remove_source(&e.src, &e.st);
    true
}
