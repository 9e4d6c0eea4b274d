//! The top-level targets, with cp's rules: where each source goes ([`plan_targets`]), which
//! sources must not be copied (the same file, a directory into itself, a FIFO or device), and
//! the warning for a re-run that nests a second copy ([`nesting_notice`]).

use crate::copy::choices::Layout;
use crate::sys;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where each source goes, with cp's rules: into `dest` when it is a directory, else as
/// `dest` (then there must be one source).
pub fn plan_targets(
    sources: &[PathBuf],
    dest: &Path,
    no_target_directory: bool,
) -> Result<Vec<(PathBuf, PathBuf)>, crate::Error> {
    let invalid = |what, message| crate::Error::Invalid { what, message };
    if no_target_directory && sources.len() > 1 {
        return Err(invalid(
            "destination",
            format!(
                "{}: -T/--no-target-directory takes one source",
                dest.display()
            ),
        ));
    }
    let dest_is_dir = !no_target_directory && dest.is_dir();
    if sources.len() > 1 && !dest_is_dir {
        return Err(invalid(
            "destination",
            format!(
                "{}: not a directory (copying several sources needs one)",
                dest.display()
            ),
        ));
    }
    let mut out = Vec::new();
    for s in sources {
        // `SRC/.` names the directory's contents, as for cp: they go into DST itself.
        let t = if dest_is_dir && !is_dot(s) {
            let name = s
                .file_name()
                .ok_or_else(|| invalid("source", format!("{}: has no file name", s.display())))?;
            dest.join(name)
        } else {
            dest.to_path_buf()
        };
        out.push((s.clone(), t));
    }
    Ok(out)
}

/// Where each source goes with rsync's rules (see [`Layout::Rsync`] and
/// [`Layout::RsyncRelative`]).
pub(in crate::copy) fn rsync_targets(
    sources: &[PathBuf],
    dest: &Path,
    layout: Layout,
) -> Result<Vec<(PathBuf, PathBuf)>, crate::Error> {
    let invalid = |message: String| crate::Error::Invalid {
        what: "destination",
        message,
    };
    let dest_is_dir = dest.is_dir();
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(sources.len());
    let mut seen = std::collections::HashSet::new();
    for s in sources {
        // rsync's file list holds a name once, however often it is named.
        if !seen.insert(s.clone()) {
            continue;
        }
        let b = s.as_os_str().as_bytes();
        let t = if layout == Layout::RsyncRelative {
            if !dest_is_dir {
                return Err(invalid(format!("{}: not a directory", dest.display())));
            }
            dest.join(relative_part(s)?)
        } else if b.ends_with(b"/") || is_dot(s) {
            dest.to_path_buf()
        } else if dest_is_dir {
            let name = s
                .file_name()
                .ok_or_else(|| invalid(format!("{}: has no file name", s.display())))?;
            dest.join(name)
        } else if sources.len() == 1 {
            dest.to_path_buf()
        } else {
            return Err(invalid(format!(
                "{}: destination must be a directory when copying more than 1 file",
                dest.display()
            )));
        };
        out.push((s.clone(), t));
    }
    Ok(out)
}

/// The part of an -R source kept under the destination: what follows the last `/./`, else
/// the whole path without its leading `/` (and without `./` components); `..` in it is
/// refused, as rsync refuses it.
fn relative_part(s: &Path) -> Result<PathBuf, crate::Error> {
    let b = s.as_os_str().as_bytes();
    let kept = match b.windows(3).rposition(|w| w == b"/./") {
        Some(i) => &b[i + 3..],
        None => b.strip_prefix(b"./").unwrap_or(b),
    };
    let mut out = PathBuf::new();
    for c in Path::new(std::ffi::OsStr::from_bytes(kept)).components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                return Err(crate::Error::Invalid {
                    what: "source",
                    message: format!("{}: found \"..\" dir in relative path (-R)", s.display()),
                })
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The warning for a likely mistake of a re-run without `-T`: the source directory `src`
/// goes into `dest` as `dst` (= `dest/NAME`), which does not exist, while `dest` already holds
/// the source's entries (the first 64 of them by name, all of them) — the earlier run
/// copied the contents into `dest` itself (with -T or `NAME/.`), and this one nests a second
/// copy inside it.
pub(in crate::copy) fn nesting_notice(src: &Path, dst: &Path, dest: &Path) -> Option<String> {
    if dst == dest || fs::symlink_metadata(dst).is_ok() || !fs::metadata(src).ok()?.is_dir() {
        return None;
    }
    let mut names: Vec<_> = fs::read_dir(src)
        .ok()?
        .take(4096)
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names.sort();
    names.truncate(64);
    let held = !names.is_empty()
        && names
            .iter()
            .all(|n| fs::symlink_metadata(dest.join(n)).is_ok());
    held.then(|| {
        format!(
            "{} did not exist and {} already holds what {} holds: copying into {} (to update the earlier copy, add -T or copy {}/.)",
            dst.display(),
            dest.display(),
            src.display(),
            dst.display(),
            src.display()
        )
    })
}

/// True for a path whose last component is `.` as written (`src/.`, `.`).
fn is_dot(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b == b"." || b.ends_with(b"/.")
}

/// `(device, inode)` of what a metadata describes.
fn id(m: &fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// Why a top-level source must not be copied to `dst`, if it must not: copying it would
/// destroy the data it is to copy, or never end.
///
/// - The same file: `dst` (as named, or the file it links to) is the source itself, or the
///   file a symlink source points to — replacing `data` by the link `lnk -> data` would leave
///   `data -> data` and the content gone (cp: "are the same file").
/// - A directory into itself: any existing ancestor of `dst` (or `dst`) is the source
///   directory, compared by device and inode, so a bind mount or a symlink of the source
///   directory is caught as well as a path below it.
/// - A FIFO, socket or device named as a source: there is nothing to copy from it.
pub(super) fn refuse_source(src: &Path, dst: &Path, m: &sys::Stat) -> Option<String> {
    if !(m.is_dir() || m.is_file() || m.is_symlink()) {
        return Some(format!(
            "is a {}: only regular files, directories and symlinks are copied",
            m.kind()
        ));
    }
    if m.is_dir() {
        return into_itself(dst, m)
            .then(|| format!("cannot copy a directory into itself ({})", dst.display()));
    }
    same_file(src, dst, m)
        .then(|| format!("{} and {} are the same file", src.display(), dst.display()))
}

/// Whether `dst` or one of its existing ancestors is the directory `m` describes: the deepest
/// existing ancestor of `dst`, then each of its parents by ".." (a bind mount keeps the device
/// and inode, a path does not).
fn into_itself(dst: &Path, m: &sys::Stat) -> bool {
    let me = (m.dev, m.ino);
    let mut p = dst.to_path_buf();
    for _ in 0..4096 {
        if let Ok(dm) = fs::metadata(&p) {
            if id(&dm) == me {
                return true;
            }
            if dm.is_dir() && fs::metadata(p.join("..")).is_ok_and(|u| id(&u) == id(&dm)) {
                return false; // the root directory
            }
            p.push("..");
        } else {
            match p.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => p = parent.to_path_buf(),
                _ => p = PathBuf::from("."),
            }
        }
    }
    false
}

/// Whether copying the file or symlink `src` (metadata `m`) to `dst` would replace the data
/// it is to copy.
fn same_file(src: &Path, dst: &Path, m: &sys::Stat) -> bool {
    let me = (m.dev, m.ino);
    let followed = fs::metadata(src).ok();
    // A symlink is copied as its text, which then resolves from dst's directory: what the
    // copy will point to, were it in place (`dd/l -> data` copied to `data` names `data`).
    let copied_target = m
        .is_symlink()
        .then(|| fs::read_link(src).ok())
        .flatten()
        .map(|t| match dst.parent() {
            Some(d) if t.is_relative() && !d.as_os_str().is_empty() => d.join(t),
            _ => t,
        })
        .and_then(|t| fs::metadata(t).ok());
    let same = |d: &fs::Metadata| {
        id(d) == me
            || followed.as_ref().is_some_and(|f| id(f) == id(d))
            || copied_target.as_ref().is_some_and(|f| id(f) == id(d))
    };
    let dst_named = fs::symlink_metadata(dst).ok();
    let dst_followed = fs::metadata(dst).ok();
    // dst as named: neither the source nor what a symlink source points to. dst followed:
    // not the source itself (two symlinks to one file may replace each other).
    dst_named.as_ref().is_some_and(same) || dst_followed.as_ref().is_some_and(|d| id(d) == me)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_sources_are_recognised() {
        assert!(is_dot(Path::new("src/.")) && is_dot(Path::new(".")));
        assert!(!is_dot(Path::new("src/.x")) && !is_dot(Path::new("src")));
    }
}
