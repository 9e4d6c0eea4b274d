//! The tree walk of the planner: one directory at a time — its source opened and checked
//! (never a destination of this copy, never one above it), its destination made or entered,
//! both sides read once, the destination tidied (stale temporaries, `--delete`), its entries
//! planned and its subdirectories queued as jobs.

use super::entries::entry;
use super::jobs::{Chain, DirJob, Entry};
use super::listing::{child_rel, merged_names, source_dir_flags};
use super::partial::{stale_temporary, temp_owner, tidy_sub, wanted};
use super::planner::Planner;
use crate::copy::filter::Side;
use crate::copy::options::Dereference;
use crate::copy::report::{Action, EntryKind};
use crate::copy::tasks::DirTask;
use crate::error::{FileError, Op};
use crate::sys;
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Levels below a directory that `--delete` removes (deeper trees fail with a message).
const MAX_REMOVE_DEPTH: usize = 4096;

/// The two sides of a directory being planned: the source's descriptor, the destination's
/// (None in a dry run where it does not exist yet) and the names it holds, and whether
/// entries are followed (`-L`).
#[derive(Clone, Copy)]
struct Sides<'a> {
    src: BorrowedFd<'a>,
    /// Source directories merged into this one (see `Entry::also`), opened.
    others: &'a [(std::path::PathBuf, OwnedFd)],
    dst: Option<BorrowedFd<'a>>,
    there: &'a HashSet<CString>,
    follow: bool,
}

/// Plans a directory: makes its destination (private until its mode is set at the end),
/// reads both sides once, tidies the destination, then plans the entries sorted by name;
/// subdirectories are queued for any planner thread.
pub(super) fn dir(p: &mut Planner<'_>, job: DirJob) {
    let DirJob { entry: e, up } = job;
    let follow = p.ctx.opts.dereference == Dereference::Always;
    let nofollow = e.nofollow(p.ctx.opts.dereference);
    let Some((src_fd, st)) = open_source(p, &e, &up, nofollow) else {
        return;
    };
    let Some((dst_fd, existed)) = make_dir(p, &e) else {
        return;
    };
    let dst_fd = dst_fd.map(Arc::new);
    if let Some(fd) = &dst_fd {
        if let Ok(d) = sys::fstat(fd.as_fd()) {
            p.shared.dest_dirs.lock().unwrap().insert((d.dev, d.ino));
        }
    }
    // Sources merged into this one (rsync's `SRC1/ SRC2/ DEST/`), opened as it is.
    let others: Vec<(std::path::PathBuf, OwnedFd)> = e
        .also
        .iter()
        .filter_map(|s| match sys::open_path(s, source_dir_flags(nofollow)) {
            Ok(fd) => Some((s.clone(), fd)),
            Err(err) => {
                p.ctx.fail(FileError::io(s, Op::Opendir, &err));
                None
            }
        })
        .collect();
    // A mount point under -x is made but not entered, on either side.
    let names = match e.contents {
        true => {
            let names = merged_names(p, src_fd.as_fd(), &others, &e, follow);
            super::listing::prune_empty(p, src_fd.as_fd(), &others, &e, follow, names)
        }
        false => Vec::new(),
    };
    let there = match (&dst_fd, existed && e.contents) {
        (Some(fd), true) => read_existing(p, fd, &e, &names),
        _ => HashSet::new(),
    };
    let up = Some(Arc::new(Chain {
        id: (st.dev, st.ino),
        up,
    }));
    let sides = Sides {
        src: src_fd.as_fd(),
        others: &others,
        dst: dst_fd.as_ref().map(|fd| fd.as_fd()),
        there: &there,
        follow,
    };
    let mut subdirs = plan_entries(p, &e, sides, names, &up);
    // Kept partials no entry took, where the temporaries are (beside, or --partial-dir's).
    if let Some(fd) = dst_fd
        .as_ref()
        .and_then(|d| p.temps.temp_dir(d, false).ok().flatten())
    {
        p.partials.drop_all(p.ctx, fd.as_fd());
    }
    subdirs.reverse();
    p.shared.jobs.push_all(subdirs);
    p.flush_if_full();
    p.dirs.push(DirTask {
        src: e.src,
        dst: e.dst,
        meta: st,
        before: e.dst_st.filter(|d| d.is_dir()),
        depth: e.depth,
    });
}

/// Opens the source directory of `e` and its metadata (the directory opened, which is the
/// one planned unless it was replaced meanwhile). None (reported) when it cannot be opened
/// or copying it would never end: a directory this copy made, or one above it (`-L`).
fn open_source(
    p: &mut Planner<'_>,
    e: &Entry,
    up: &Option<Arc<Chain>>,
    nofollow: bool,
) -> Option<(OwnedFd, sys::Stat)> {
    let src_fd = match sys::open_path(&e.src, source_dir_flags(nofollow)) {
        Ok(fd) => fd,
        Err(err) => {
            p.ctx.fail(FileError::io(&e.src, Op::Opendir, &err));
            return None;
        }
    };
    let st = sys::fstat(src_fd.as_fd()).unwrap_or(e.st);
    let id = (st.dev, st.ino);
    if p.shared.dest_dirs.lock().unwrap().contains(&id) {
        // A directory this copy made, met again as a source (a bind mount of the
        // destination inside the source): copying it would never end.
        p.ctx.fail(FileError::other(
            &e.src,
            Op::Copy,
            "cannot copy a directory into itself (it is a destination of this copy)",
        ));
        return None;
    }
    if Chain::contains(up, id) {
        p.ctx.fail(FileError::other(
            &e.src,
            Op::Copy,
            "symlink loop: this directory contains itself (-L)",
        ));
        return None;
    }
    Some((src_fd, st))
}

/// Reads a destination directory that existed (`fd`, of `e`) once, tidies it against
/// the source's `names` (see [`tidy_existing`]; and --partial-dir's subdirectory, see
/// [`tidy_sub`]), and returns the names it holds.
fn read_existing(
    p: &mut Planner<'_>,
    dir: &Arc<OwnedFd>,
    e: &Entry,
    names: &[(CString, usize)],
) -> HashSet<CString> {
    let fd = dir.as_fd();
    let mut dst_names: Vec<CString> = sys::DirReader::new(fd)
        .filter_map(Result::ok)
        .map(|d| d.name)
        .collect();
    dst_names.sort();
    let mut keep: HashSet<&CStr> = names.iter().map(|(n, _)| n.as_c_str()).collect();
    // The way to another source's destination below this directory (`-R a c/./a/f`).
    if let Some(ways) = p.shared.ways_to_roots.get(&e.dst) {
        let below = dst_names.iter().filter(|n| ways.contains(sys::name_os(n)));
        keep.extend(below.map(|n| n.as_c_str()));
    }
    tidy_existing(p, fd, e, &dst_names, &keep);
    if let Some(sub) = p.ctx.opts.temp_place.sub() {
        if dst_names.iter().any(|n| sys::name_os(n) == sub) {
            tidy_sub(p.ctx, p.temps, &mut p.partials, dir, &e.dst, &keep);
        }
    }
    dst_names.into_iter().collect()
}

/// Plans the entries `names` of the directory `e` (stat'ed relative to its descriptor;
/// their destinations only when the destination directory holds the name): the
/// subdirectories come back as jobs, in name order.
fn plan_entries(
    p: &mut Planner<'_>,
    e: &Entry,
    sides: Sides<'_>,
    names: Vec<(CString, usize)>,
    up: &Option<Arc<Chain>>,
) -> Vec<DirJob> {
    let follow = sides.follow;
    let mut subdirs = Vec::new();
    for (n, i) in names {
        let (src_dir, src_fd) = match i {
            0 => (&e.src, sides.src),
            i => (&sides.others[i - 1].0, sides.others[i - 1].1.as_fd()),
        };
        let src = src_dir.join(sys::name_os(&n));
        let mut followed = false;
        let st = match sys::fstatat(Some(src_fd), &n, follow) {
            Ok(s) => s,
            Err(err) if err.kind() == io::ErrorKind::NotFound && !follow => continue,
            Err(err) => {
                let op = if follow { Op::Stat } else { Op::Lstat };
                p.ctx.fail(FileError::io(&src, op, &err));
                continue;
            }
        };
        // -k: a symlink to a directory is that directory.
        let st = match st.is_symlink() && p.ctx.opts.copy_dirlinks {
            true => match sys::fstatat(Some(src_fd), &n, true) {
                Ok(t) if t.is_dir() => {
                    followed = true;
                    t
                }
                _ => st,
            },
            false => st,
        };
        // --copy-unsafe-links: an unsafe symlink is replaced by what it points to.
        let st = match (st.is_symlink(), p.ctx.opts.links) {
            (true, crate::copy::choices::Links::FollowUnsafe) => {
                let dst = e.dst.join(sys::name_os(&n));
                let margin = super::entries::link_margin(p.ctx, &dst, e.depth + 1);
                let text = sys::read_link_at(src_fd, sys::name_os(&n)).unwrap_or_default();
                match super::entries::unsafe_link(text.as_os_str().as_bytes(), margin) {
                    true => match sys::fstatat(Some(src_fd), &n, true) {
                        Ok(t) => {
                            followed = true;
                            t
                        }
                        Err(err) => {
                            let why = format!("symlink has no referent ({err})");
                            p.ctx.fail(FileError::other(&src, Op::Stat, why));
                            continue;
                        }
                    },
                    false => st,
                }
            }
            _ => st,
        };
        // Inside the destination nothing is followed: a symlink where the source has a
        // directory is refused as cp refuses it, never entered (it could lead anywhere).
        let dst_st = match sides.dst {
            Some(fd) if sides.there.contains(&n) => sys::fstatat(Some(fd), &n, false).ok(),
            _ => None,
        };
        let opts = p.ctx.opts;
        let child = Entry {
            dst: e.dst.join(sys::name_os(&n)),
            src,
            dst_st,
            depth: e.depth + 1,
            rel: match opts.filters.is_empty() {
                true => Vec::new(),
                false => child_rel(&e.rel, &n),
            },
            fs: e.fs,
            contents: !(opts.one_file_system && st.is_dir() && st.dev != e.fs) && opts.recursive,
            followed,
            // A directory that later merged sources have too: theirs merge into it.
            also: match st.is_dir() {
                true => sides.others[i.min(sides.others.len())..]
                    .iter()
                    .filter(|(_, o)| {
                        sys::fstatat(Some(o.as_fd()), &n, follow).is_ok_and(|m| m.is_dir())
                    })
                    .map(|(d, _)| d.join(sys::name_os(&n)))
                    .collect(),
                false => Vec::new(),
            },
            st,
        };
        subdirs.extend(entry(p, child, up.clone()));
    }
    subdirs
}

/// A destination directory that existed before this run (`names`: what it holds): the
/// hidden temporaries that copies killed before they could clean up (SIGKILL, power cut)
/// left in it are removed — only those whose process is gone, so a copy running now into
/// the same directory keeps its own —, and with `--delete` what the source directory
/// (`keep`) no longer has, as rsync --delete does — except what the filter rules protect
/// (an excluded name, unless `--delete-excluded`).
fn tidy_existing(
    p: &mut Planner<'_>,
    dir: BorrowedFd<'_>,
    e: &Entry,
    names: &[CString],
    keep: &HashSet<&CStr>,
) {
    let (dry, dst) = (p.ctx.opts.dry_run, &e.dst);
    if p.ctx.opts.delete {
        p.ctx.read_dir_rules(dir, dst, &e.rel, Side::Receiver);
    }
    for name in names {
        let path = dst.join(sys::name_os(name));
        if let Some(pid) = temp_owner(name.to_bytes()) {
            // A partial copy with a checkpoint is kept for its entry (see plan/partial.rs) —
            // unless partials are kept in --partial-dir's directory now.
            let beside = p.ctx.opts.temp_place.sub().is_none();
            let kept = |q: &mut Planner<'_>| {
                !dry && beside && q.partials.keep(q.ctx, dir, dst, name, |t| wanted(keep, t))
            };
            if stale_temporary(p.ctx, dir, name, pid)
                && !kept(p)
                && (dry || sys::unlink_at(dir, sys::name_os(name), false).is_ok())
            {
                p.ctx.counts.stale_temps.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        if !p.ctx.opts.delete || keep.contains(name.as_c_str()) {
            continue;
        }
        // --partial-dir's directory is protected from --delete (rsync's implied rule).
        if p.ctx.opts.temp_place.sub() == Some(sys::name_os(name)) {
            continue;
        }
        // What it is labels its `deleted` item (None: gone already; the unlink says so).
        let kind = sys::fstatat(Some(dir), name, false)
            .ok()
            .map(|m| EntryKind::of(&m));
        let is_dir = kind == Some(EntryKind::Dir);
        if p.ctx
            .excluded(&child_rel(&e.rel, name), is_dir, Side::Receiver)
        {
            continue;
        }
        let over = p
            .ctx
            .opts
            .max_delete
            .is_some_and(|max| p.ctx.counts.deleted.load(Ordering::Relaxed) >= max);
        if over {
            p.ctx.counts.deletes_skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let backed_up = p.ctx.opts.backup.is_some() && !dry;
        if backed_up && is_dir {
            // rsync backs up what a directory holds, file by file, then removes the
            // directories that are empty (a backup kept beside its file keeps its directory).
            delete_backing_up(p, &path, &e.rel);
            continue;
        }
        if backed_up && backs_up_deleted(p.ctx, name.as_bytes()) {
            if let Err(err) = crate::copy::finish::backup(p.ctx, dir, sys::name_os(name), &path) {
                p.ctx.fail(FileError::io(&path, Op::Backup, &err));
                continue;
            }
        }
        // What is removed below a directory, each listed (as rsync lists it), deepest first.
        let mut below: Vec<(Vec<u8>, bool)> = Vec::new();
        let (r, op) = match (dry, is_dir) {
            (true, true) => {
                let mut visit = |rel: &[u8], d: bool| below.push((rel.to_vec(), d));
                let n = sys::name_os(name);
                let r = sys::walk_below_at(dir, n, n.as_bytes(), MAX_REMOVE_DEPTH, &mut visit);
                (r.map(|_| true), Op::Readdir)
            }
            (true, false) => (Ok(true), Op::Unlink),
            (false, true) => (remove_dir(p, dir, e, name, &mut below), Op::Rmdir),
            (false, false) => (
                sys::unlink_at(dir, sys::name_os(name), false).map(|_| true),
                Op::Unlink,
            ),
        };
        match r {
            // A directory holding what the rules protect stays, with that inside (rsync:
            // "cannot delete non-empty directory").
            Ok(false) => {}
            Ok(true) => {
                for (rel, d) in &below {
                    let kind = if *d { EntryKind::Dir } else { EntryKind::File };
                    p.ctx.item(
                        &dst.join(std::ffi::OsStr::from_bytes(rel)),
                        kind,
                        Action::Deleted,
                        0,
                    );
                }
                p.ctx
                    .counts
                    .deleted
                    .fetch_add(1 + below.len() as u64, Ordering::Relaxed);
                let kind = kind.unwrap_or(EntryKind::File);
                p.ctx.item(&path, kind, Action::Deleted, 0);
            }
            Err(err) => p.ctx.fail(FileError::io(&path, op, &err)),
        }
    }
}

/// Whether a file `name` deleted under --backup is backed up first: not when its backup
/// would go beside it and it already ends with the suffix (it is a backup itself: rsync's
/// delete.c is_backup_file unlinks it, where a second suffix would pile `~~` on `~`).
fn backs_up_deleted(ctx: &crate::copy::state::Ctx<'_>, name: &[u8]) -> bool {
    let Some(b) = &ctx.opts.backup else {
        return false;
    };
    let suffix = b.suffix.as_bytes();
    b.dir.is_some() || suffix.is_empty() || name.len() <= suffix.len() || !name.ends_with(suffix)
}

/// --delete with --backup of the destination directory `path`: every file below it backed up
/// and removed, deepest first, then each directory that is empty removed ("cannot delete
/// non-empty directory" for the others, as rsync says).
fn delete_backing_up(p: &Planner<'_>, path: &std::path::Path, base: &[u8]) {
    let ctx = p.ctx;
    let mut below: Vec<(Vec<u8>, bool)> = Vec::new();
    let walked = ctx.dest.parent(path).and_then(|(dir, name)| {
        let mut visit = |rel: &[u8], d: bool| below.push((rel.to_vec(), d));
        sys::walk_below_at(
            dir.as_fd(),
            name,
            name.as_bytes(),
            MAX_REMOVE_DEPTH,
            &mut visit,
        )
    });
    if let Err(err) = walked {
        return ctx.fail(FileError::io(path, Op::Readdir, &err));
    }
    let top = path
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_default();
    below.push((top, true));
    let parent = path.parent().unwrap_or(std::path::Path::new("."));
    for (rel, is_dir) in below {
        let at = parent.join(std::ffi::OsStr::from_bytes(&rel));
        // What the rules protect stays (rsync's `P *~` keeps the backups beside their files).
        let named = match base.is_empty() {
            true => rel.clone(),
            false => [base, b"/", &rel].concat(),
        };
        if ctx.excluded(&named, is_dir, Side::Receiver) {
            continue;
        }
        let r = ctx.dest.parent(&at).and_then(|(dir, name)| {
            if !is_dir && backs_up_deleted(ctx, name.as_bytes()) {
                crate::copy::finish::backup(ctx, dir.as_fd(), name, &at)?;
            }
            sys::unlink_at(dir.as_fd(), name, is_dir)
        });
        match r {
            Ok(()) => {
                ctx.counts.deleted.fetch_add(1, Ordering::Relaxed);
                let kind = if is_dir {
                    EntryKind::Dir
                } else {
                    EntryKind::File
                };
                ctx.item(&at, kind, Action::Deleted, 0);
            }
            Err(e) if is_dir && e.raw_os_error() == Some(libc::ENOTEMPTY) => ctx.tally.notice(
                format!("cannot delete non-empty directory: {}", at.display()),
            ),
            Err(e) => ctx.fail(FileError::io(&at, Op::Backup, &e)),
        }
    }
}

/// Removes the destination directory `name` in `dir` (of `e`) with all below it but what
/// the filter rules protect: Ok(true) when all of it went.
fn remove_dir(
    p: &Planner<'_>,
    dir: BorrowedFd<'_>,
    e: &Entry,
    name: &CStr,
    removed: &mut Vec<(Vec<u8>, bool)>,
) -> io::Result<bool> {
    let rel = child_rel(&e.rel, name);
    let seen = std::cell::RefCell::new(Vec::new());
    let keep = |path: &[u8], is_dir: bool| {
        let kept = path != rel.as_slice() && p.ctx.excluded(path, is_dir, Side::Receiver);
        if !kept && path != rel.as_slice() {
            seen.borrow_mut().push((path.to_vec(), is_dir));
        }
        kept
    };
    let r = sys::remove_tree_keeping(dir, sys::name_os(name), &rel, MAX_REMOVE_DEPTH, &keep);
    // Named below the directory `dir` is (the rules' names start at the transfer's root).
    let skip = match e.rel.is_empty() {
        true => 0,
        false => e.rel.len() + 1,
    };
    removed.extend(
        seen.into_inner()
            .into_iter()
            .map(|(p, d)| (p[skip..].to_vec(), d)),
    );
    r
}

/// Makes (or enters) the destination directory: its descriptor (None in a dry run where
/// it does not exist yet) and whether it existed. None: failed (reported).
fn make_dir(p: &mut Planner<'_>, e: &Entry) -> Option<(Option<OwnedFd>, bool)> {
    let dest = &p.ctx.dest;
    let existed = e.dst_st.as_ref().is_some_and(|d| d.is_dir());
    let rsync = p.ctx.opts.layout != crate::copy::choices::Layout::Cp;
    if e.dst_st.is_some() && !existed && rsync && !p.ctx.opts.dry_run {
        // rsync replaces a file, symlink or special file standing where a directory goes
        // (backed up first with --backup).
        let cleared = dest.parent(&e.dst).and_then(|(dir, name)| {
            crate::copy::finish::backup(p.ctx, dir.as_fd(), name, &e.dst)?;
            sys::unlink_at(dir.as_fd(), name, false)
        });
        if let Err(err) = cleared {
            p.ctx.fail(FileError::io(&e.dst, Op::Unlink, &err));
            return None;
        }
    } else if e.dst_st.is_some() && !existed && !(rsync && p.ctx.opts.dry_run) {
        // A file or symlink where the directory goes: cp refuses to replace a
        // non-directory by a directory, and so does this copy (nothing is removed, and
        // a symlink is never entered: it could lead out of the destination).
        let err = io::Error::other(format!(
            "cannot overwrite non-directory with directory (it is a {})",
            e.dst_st.as_ref().map_or("file", |d| d.kind())
        ));
        p.ctx.fail(FileError::io(&e.dst, Op::Mkdir, &err));
        return None;
    }
    if !existed && (p.ctx.opts.only_existing || p.ctx.opts.delete_only) {
        // --existing: nothing new is made, a new directory's contents included.
        return None;
    }
    if p.ctx.opts.dry_run {
        if !existed {
            made_dir(p, e);
        }
        return Some((existed.then(|| dest.dir(&e.dst).ok()).flatten(), existed));
    }
    if !existed {
        // With -p made private, its mode set at the end; without, made with the source's
        // mode (the umask or the parent's default ACL applied by mkdir, the parent's
        // set-group-ID bit inherited, as rsync makes it) plus u=rwx while it is filled,
        // taken back at the end when the source's lacks them.
        let mode = match p.ctx.opts.preserve.perms {
            true => 0o700,
            false => p.ctx.source_meta(&e.st).mode & 0o777 | 0o700,
        };
        let made = dest
            .parent(&e.dst)
            .and_then(|(dir, name)| sys::mkdir_at(dir.as_fd(), name, mode));
        match made {
            Ok(()) => made_dir(p, e),
            // Made meanwhile by another copy: entered below if it is a directory.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(err) => {
                p.ctx.fail(FileError::io(&e.dst, Op::Mkdir, &err));
                return None;
            }
        }
    }
    match dest.dir(&e.dst) {
        Ok(fd) => Some((Some(fd), existed)),
        Err(err) => {
            p.ctx.fail(FileError::io(&e.dst, Op::OpenDirectory, &err));
            None
        }
    }
}

/// Reports a directory made: created, or — where an alternate destination directory holds
/// its counterpart, which rsync itemizes it against — left (nothing differed) or with what
/// differed from that counterpart.
fn made_dir(p: &Planner<'_>, e: &Entry) {
    let ctx = p.ctx;
    let Some(basis) = ctx.opts.alt_basis(&e.dst).filter(|b| b.is_dir()) else {
        return ctx.done(&e.dst, EntryKind::Dir, false, 0);
    };
    let changes = ctx.dir_changes(&e.st, &basis);
    ctx.counts.created.fetch_add(1, Ordering::Relaxed);
    let action = match changes.is_empty() {
        true => Action::Skipped,
        false => Action::Updated,
    };
    ctx.item_with(&e.dst, EntryKind::Dir, action, 0, changes, None);
}
