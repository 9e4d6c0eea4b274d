//! A source directory's names as the planner sees them: read once, sorted, the filter
//! rules' exclusions and `--partial-dir`'s directory left out, and the directories of other
//! sources merged into it (rsync's `SRC1/ SRC2/ DEST/`) read with it, the first source that
//! has a name giving it.

use super::jobs::Entry;
use super::planner::Planner;
use crate::copy::filter::Side;
use crate::error::{FileError, Op};
use crate::sys;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// How a source directory is opened.
pub(super) fn source_dir_flags(nofollow: bool) -> sys::OpenFlags {
    sys::OpenFlags {
        directory: true,
        nofollow,
        ..Default::default()
    }
}

/// The names of the source directory `fd` and of those merged into it (`others`), sorted,
/// each with the source that gives it: 0 for `fd`, `i` for `others[i - 1]` — the first that
/// has the name, as rsync keeps the first of duplicate names.
pub(super) fn merged_names(
    p: &mut Planner<'_>,
    fd: BorrowedFd<'_>,
    others: &[(std::path::PathBuf, OwnedFd)],
    e: &Entry,
    follow: bool,
) -> Vec<(CString, usize)> {
    let first = read_names(p, fd, e, follow);
    if others.is_empty() {
        return first.into_iter().map(|n| (n, 0)).collect();
    }
    let mut all = std::collections::BTreeMap::new();
    for (i, names) in std::iter::once(first)
        .chain(
            others
                .iter()
                .map(|(_, o)| read_names(p, o.as_fd(), e, follow)),
        )
        .enumerate()
    {
        for n in names {
            all.entry(n).or_insert(i);
        }
    }
    all.into_iter().collect()
}

/// The names in the source directory `fd` (of `e`) that the filter rules do not exclude,
/// sorted; a failed read is reported.
fn read_names(p: &mut Planner<'_>, fd: BorrowedFd<'_>, e: &Entry, follow: bool) -> Vec<CString> {
    p.ctx.read_dir_rules(fd, &e.src, &e.rel, Side::Sender);
    let mut names: Vec<CString> = Vec::new();
    let sub = p.ctx.opts.temp_place.sub();
    for ent in sys::DirReader::new(fd) {
        match ent {
            // --partial-dir's (or --delay-updates') directory is never copied (rsync adds
            // an exclude rule for it).
            Ok(d) if sub.is_some_and(|s| sys::name_os(&d.name) == s) => {}
            Ok(d) if excluded(p, fd, e, &d, follow) => {}
            Ok(d) => names.push(d.name),
            Err(err) => p.ctx.fail(FileError::io(&e.src, Op::Readdir, &err)),
        }
    }
    names.sort();
    names
}

/// Whether the filter rules exclude the entry `d` of the source directory `fd` (of `e`)
/// from the copy. Its type comes from the directory entry, or fstatat when the file
/// system does not say (or, with -L, for a symlink: a link to a directory is one).
fn excluded(p: &Planner<'_>, fd: BorrowedFd<'_>, e: &Entry, d: &sys::Dirent, follow: bool) -> bool {
    if p.ctx.opts.filters.is_empty() {
        return false;
    }
    let is_dir = match d.kind {
        sys::DirentType::Dir => true,
        sys::DirentType::Unknown => {
            sys::fstatat(Some(fd), &d.name, follow).is_ok_and(|m| m.is_dir())
        }
        sys::DirentType::Symlink if follow => {
            sys::fstatat(Some(fd), &d.name, true).is_ok_and(|m| m.is_dir())
        }
        _ => false,
    };
    p.ctx
        .excluded(&child_rel(&e.rel, &d.name), is_dir, Side::Sender)
}

/// How deep rsync -m's look into a directory goes; below, a directory counts as holding
/// something (kept, as without -m): a planted chain of 100k empty directories costs no stack.
const PRUNE_DEPTH: usize = 256;

/// rsync -m (--prune-empty-dirs): `names` of the source directory `fd` (of `e`; `others`:
/// the sources merged into it) less the directories that hold nothing the copy would make
/// but directories, at any depth — as rsync prunes them from its file list: not made, and
/// gone for --delete.
pub(super) fn prune_empty(
    p: &Planner<'_>,
    fd: BorrowedFd<'_>,
    others: &[(std::path::PathBuf, OwnedFd)],
    e: &Entry,
    follow: bool,
    names: Vec<(CString, usize)>,
) -> Vec<(CString, usize)> {
    if !p.ctx.opts.prune_empty_dirs {
        return names;
    }
    let sources: Vec<BorrowedFd<'_>> = std::iter::once(fd)
        .chain(others.iter().map(|o| o.1.as_fd()))
        .collect();
    names
        .into_iter()
        .filter(|(n, i)| {
            let rel = child_rel(&e.rel, n);
            let is_dir =
                |s: BorrowedFd<'_>| sys::fstatat(Some(s), n, follow).is_ok_and(|m| m.is_dir());
            // A directory: kept when it holds something in a source that has it (merged, as
            // the copy merges them).
            let holds = |s: BorrowedFd<'_>| holds_something(p, s, n, &rel, follow, 0);
            !is_dir(sources[*i])
                || holds(sources[*i])
                || sources[*i + 1..].iter().any(|s| is_dir(*s) && holds(*s))
        })
        .collect()
}

/// Whether the source directory `name` in `fd` (the filter rules' name `rel`) holds, at any
/// depth, an entry the copy would make other than a directory: one the rules do not
/// exclude, of a kind the options keep. What cannot be read counts as something (the copy
/// then reports it).
fn holds_something(
    p: &Planner<'_>,
    fd: BorrowedFd<'_>,
    name: &CStr,
    rel: &[u8],
    follow: bool,
    depth: usize,
) -> bool {
    let opts = p.ctx.opts;
    let Ok(dir) = sys::openat(Some(fd), name, source_dir_flags(!follow)) else {
        return true;
    };
    if depth >= PRUNE_DEPTH {
        return true;
    }
    let at =
        std::path::Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(rel));
    p.ctx.read_dir_rules(dir.as_fd(), at, rel, Side::Sender);
    let sub = opts.temp_place.sub();
    for ent in sys::DirReader::new(dir.as_fd()) {
        let Ok(d) = ent else {
            return true;
        };
        if sub.is_some_and(|s| sys::name_os(&d.name) == s) {
            continue;
        }
        let Ok(st) = sys::fstatat(Some(dir.as_fd()), &d.name, follow) else {
            return true;
        };
        let rel = child_rel(rel, &d.name);
        if p.ctx.excluded(&rel, st.is_dir(), Side::Sender) {
            continue;
        }
        let made = match sys::NodeKind::of_mode(st.mode) {
            _ if st.is_dir() => holds_something(p, dir.as_fd(), &d.name, &rel, follow, depth + 1),
            _ if st.is_symlink() => opts.links != crate::copy::choices::Links::Skip,
            Some(sys::NodeKind::CharDevice | sys::NodeKind::BlockDevice) => opts.devices,
            Some(_) => opts.specials,
            None => true,
        };
        if made {
            return true;
        }
    }
    false
}

/// The filter rules' name of the entry `name` in the directory named `rel`.
pub(super) fn child_rel(rel: &[u8], name: &CStr) -> Vec<u8> {
    let name = name.to_bytes();
    let mut out = Vec::with_capacity(rel.len() + 1 + name.len());
    if !rel.is_empty() {
        out.extend_from_slice(rel);
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}
