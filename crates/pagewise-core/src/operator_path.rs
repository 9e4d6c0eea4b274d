//! Paths the operator names on the command line (`sync`'s `--link-dest`, `--backup-dir`,
//! `--files-from`, `--log-file`, …), resolved the way rsync 3.5 resolves them: one component
//! at a time, following a symlink only when it is owned by root or by the running user. A
//! symlink another user planted in a directory they can write (`/tmp/backups/latest ->
//! /etc`) is refused, so a privileged run cannot be redirected by it; the operator's and
//! root's own symlinks (`/backup -> /mnt/disk`) are followed as before.
//!
//! [`resolve`] returns the physical path it walked (no symlink left in it): the caller opens
//! that. What does not exist yet is appended as named (a directory still to be made cannot
//! be a symlink now). Between the walk and the caller's open, a component inside a directory
//! that another user *owns* can still be swapped by that user; the walk closes the common
//! case, a symlink planted in a shared, sticky or group-writable directory.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::sys;

/// Symlinks followed on one path at most (the kernel's own limit, MAXSYMLINKS).
const MAX_HOPS: usize = 40;

/// Why an operator path was not resolved.
#[derive(Debug)]
pub enum OperatorPathError {
    /// A symlink on the way is owned by a user other than root and the running user.
    Untrusted {
        /// The symlink, as walked (no symlink before it).
        link: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// More than [`MAX_HOPS`] symlinks (a loop).
    Loop(PathBuf),
    /// lstat or readlink failed on `at`.
    Io {
        /// The path the call was made on.
        at: PathBuf,
        /// `lstat` or `readlink`.
        call: &'static str,
        /// The error.
        err: io::Error,
    },
}

impl std::fmt::Display for OperatorPathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorPathError::Untrusted { link, owner } => write!(
                f,
                "the symlink {} is owned by uid {owner}, neither root nor you: not followed \
                 (--insecure-links follows it)",
                link.display()
            ),
            OperatorPathError::Loop(at) => write!(
                f,
                "too many levels of symbolic links at {} (ELOOP)",
                at.display()
            ),
            OperatorPathError::Io { at, call, err } => {
                write!(f, "{call} {}: {err}", at.display())
            }
        }
    }
}

impl std::error::Error for OperatorPathError {}

/// Resolves `path` (relative ones against `anchor`, which must be absolute and is taken as
/// it is) following only symlinks owned by uid 0 or the effective uid — any symlink with
/// `any_owner` (rsync's `--insecure-links`). Returns the physical path walked; components
/// from the first one that does not exist on are appended as named.
pub fn resolve(path: &Path, anchor: &Path, any_owner: bool) -> Result<PathBuf, OperatorPathError> {
    let euid = sys::euid();
    resolve_trusting(path, anchor, &|uid| any_owner || uid == 0 || uid == euid)
}

/// [`resolve`] with the owners to trust given (tests).
fn resolve_trusting(
    path: &Path,
    anchor: &Path,
    trusted: &dyn Fn(u32) -> bool,
) -> Result<PathBuf, OperatorPathError> {
    let mut phys = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        anchor.to_path_buf()
    };
    // Still to walk, the next one last.
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut hops = 0;
    while let Some(name) = pending.pop() {
        match name.to_str() {
            Some(".") => continue,
            Some("..") => {
                phys.pop();
                continue;
            }
            _ => {}
        }
        phys.push(&name);
        let st = match sys::stat_path(&phys, false) {
            Ok(st) => st,
            // Not there (yet): the rest is appended as named — unless it climbs back out
            // (`new/../x`), which the kernel refuses too (ENOENT).
            Err(e)
                if e.raw_os_error() == Some(libc::ENOENT)
                    && !pending.iter().any(|n| n.as_os_str() == "..") =>
            {
                phys.extend(pending.drain(..).rev().filter(|n| n.as_os_str() != "."));
                return Ok(phys);
            }
            Err(err) => {
                return Err(OperatorPathError::Io {
                    at: phys,
                    call: "lstat",
                    err,
                })
            }
        };
        if !st.is_symlink() {
            continue;
        }
        if !trusted(st.uid) {
            return Err(OperatorPathError::Untrusted {
                link: phys,
                owner: st.uid,
            });
        }
        hops += 1;
        if hops > MAX_HOPS {
            return Err(OperatorPathError::Loop(phys));
        }
        let target = std::fs::read_link(&phys).map_err(|err| OperatorPathError::Io {
            at: phys.clone(),
            call: "readlink",
            err,
        })?;
        phys.pop();
        if target.is_absolute() {
            phys = PathBuf::from("/");
        }
        push_components(&mut pending, &target);
    }
    Ok(phys)
}

/// Puts `path`'s components on the stack so that the first is popped first.
fn push_components(stack: &mut Vec<OsString>, path: &Path) {
    let names: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir => Some(".".into()),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    stack.extend(names.into_iter().rev());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scene() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(base.join("real/sub")).unwrap();
        std::fs::create_dir_all(base.join("outside/sub")).unwrap();
        symlink(base.join("outside"), base.join("abs-link")).unwrap();
        symlink("real", base.join("rel-link")).unwrap();
        (t, base)
    }

    #[test]
    fn own_symlinks_are_followed_to_the_physical_path() {
        let (_t, base) = scene();
        let me = |_: u32| true;
        let r = resolve_trusting(Path::new("abs-link/sub"), &base, &me).unwrap();
        assert_eq!(r, base.join("outside/sub"));
        let r = resolve_trusting(&base.join("rel-link/sub/../sub"), &base, &me).unwrap();
        assert_eq!(r, base.join("real/sub"));
        // Not there yet: appended as named.
        let r = resolve_trusting(Path::new("rel-link/new/deeper"), &base, &me).unwrap();
        assert_eq!(r, base.join("real/new/deeper"));
        // The real function trusts this process's own links.
        assert_eq!(
            resolve(Path::new("rel-link"), &base, false).unwrap(),
            base.join("real")
        );
    }

    #[test]
    fn a_symlink_of_another_owner_is_refused_leaf_or_parent() {
        let (_t, base) = scene();
        let nobody = |_: u32| false;
        for p in ["abs-link", "abs-link/sub", "real/../rel-link/sub"] {
            match resolve_trusting(Path::new(p), &base, &nobody) {
                Err(OperatorPathError::Untrusted { link, .. }) => {
                    assert!(
                        link.ends_with("abs-link") || link.ends_with("rel-link"),
                        "{p}"
                    )
                }
                other => panic!("{p}: {other:?}"),
            }
        }
        // No symlink on the way: nothing to trust.
        assert_eq!(
            resolve_trusting(Path::new("real/sub"), &base, &nobody).unwrap(),
            base.join("real/sub")
        );
    }

    #[test]
    fn a_loop_ends_with_eloop() {
        let (_t, base) = scene();
        symlink("loop-b", base.join("loop-a")).unwrap();
        symlink("loop-a", base.join("loop-b")).unwrap();
        let r = resolve_trusting(Path::new("loop-a/x"), &base, &|_| true);
        assert!(matches!(r, Err(OperatorPathError::Loop(_))), "{r:?}");
    }

    proptest::proptest! {
        /// Any mix of names, `.`, `..` and links (loops included) ends without a panic, and a
        /// path it returns holds no symlink that exists.
        #[test]
        fn any_path_ends_and_leaves_no_symlink(parts in proptest::collection::vec(
            proptest::sample::select(vec!["real", "sub", "..", ".", "abs-link", "rel-link",
                "loop", "none", "outside"]), 0..12)) {
            let (_t, base) = scene();
            let _ = symlink("loop", base.join("loop"));
            let p: PathBuf = parts.iter().collect();
            if let Ok(r) = resolve_trusting(&p, &base, &|_| true) {
                let mut at = PathBuf::new();
                for c in r.components() {
                    at.push(c);
                    if let Ok(st) = sys::stat_path(&at, false) {
                        proptest::prop_assert!(!st.is_symlink(), "{} in {}", at.display(), r.display());
                    }
                }
            }
        }
    }
}
