//! Destination names resolved without following symlinks. Anything inside a destination tree
//! may have been planted by whoever can write there: a symlink `dst/x -> /etc` must not turn
//! a copy (or its `--delete`, or its metadata setting) into writes elsewhere. Each target has
//! an anchor the caller named — the destination directory to copy into, or the parent of the
//! destination — opened once, following symlinks as the caller wrote it; every destination
//! path below an anchor is reached from the anchor's descriptor with
//! [`sys::open_dir_beneath`] (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, else an
//! O_NOFOLLOW walk), and the last component is acted on with an *at call that does not follow
//! it either.

use crate::sys;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The anchors of one copy's targets.
pub(super) struct Dest {
    /// `(path as the caller's arguments give it, its descriptor or the errno of its open)`,
    /// longest path first so that the deepest anchor wins.
    anchors: Vec<(PathBuf, Result<OwnedFd, i32>)>,
}

impl Dest {
    /// Opens the anchor of each target `(source, destination)`: the destination itself when
    /// it is a directory (followed: the caller named it) and the source is one too (it is
    /// entered, not replaced), else the destination's parent directory.
    pub(super) fn new(targets: &[(PathBuf, PathBuf)], follow_roots: bool) -> Dest {
        let mut anchors: Vec<(PathBuf, Result<OwnedFd, i32>)> = Vec::new();
        for (src, dst) in targets {
            let src_dir = sys::stat_path(src, follow_roots).is_ok_and(|s| s.is_dir());
            let dst_dir = sys::stat_path(dst, true).is_ok_and(|s| s.is_dir());
            let anchor = if src_dir && dst_dir {
                dst.clone()
            } else {
                dst.parent().map(Path::to_path_buf).unwrap_or_default()
            };
            if anchors.iter().any(|(p, _)| *p == anchor) {
                continue;
            }
            let open_as = if anchor.as_os_str().is_empty() {
                Path::new(".")
            } else {
                &anchor
            };
            let flags = sys::OpenFlags {
                directory: true,
                ..Default::default()
            };
            let fd = sys::open_path(open_as, flags).map_err(|e| e.raw_os_error().unwrap_or(0));
            anchors.push((anchor, fd));
        }
        anchors.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        Dest { anchors }
    }

    /// The anchor `p` lies below and the rest of `p` after it.
    fn anchor<'p>(&self, p: &'p Path) -> io::Result<(BorrowedFd<'_>, &'p Path)> {
        for (a, fd) in &self.anchors {
            if let Ok(rel) = p.strip_prefix(a) {
                return match fd {
                    Ok(fd) => Ok((fd.as_fd(), rel)),
                    Err(e) => Err(io::Error::from_raw_os_error(*e)),
                };
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not below a destination of this copy",
        ))
    }

    /// The directory `p` (an anchor, or below one), opened without following any symlink
    /// below its anchor.
    pub(super) fn dir(&self, p: &Path) -> io::Result<OwnedFd> {
        let (root, rel) = self.anchor(p)?;
        sys::open_dir_beneath(root, rel)
    }

    /// The directory holding `p` and `p`'s last name in it: where `p` is created, replaced
    /// or removed.
    pub(super) fn parent<'p>(&self, p: &'p Path) -> io::Result<(Arc<OwnedFd>, &'p OsStr)> {
        let (root, rel) = self.anchor(p)?;
        let name = rel.file_name().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "the destination has no name")
        })?;
        let up = rel.parent().unwrap_or(Path::new(""));
        Ok((Arc::new(sys::open_dir_beneath(root, up)?), name))
    }

    /// Opens the file `p` to read it (never through a symlink).
    pub(super) fn open_read(&self, p: &Path) -> io::Result<OwnedFd> {
        let (dir, name) = self.parent(p)?;
        sys::open_read_at(dir.as_fd(), name)
    }
}

/// A worker's last parent directory, kept while files of the same directory follow (small
/// files come in batches of one directory: one openat2 a batch instead of one a file).
#[derive(Default)]
pub(super) struct ParentCache {
    last: Option<(PathBuf, Arc<OwnedFd>)>,
}

impl ParentCache {
    /// The directory holding `p` (see [`Dest::parent`]), reused when the last file asked
    /// about was in the same directory.
    pub(super) fn parent<'p>(
        &mut self,
        dest: &Dest,
        p: &'p Path,
    ) -> io::Result<(Arc<OwnedFd>, &'p OsStr)> {
        let up = p.parent().unwrap_or(Path::new(""));
        if let Some((dir, fd)) = &self.last {
            if dir == up {
                if let Some(name) = p.file_name() {
                    return Ok((fd.clone(), name));
                }
            }
        }
        let (fd, name) = dest.parent(p)?;
        self.last = Some((up.to_path_buf(), fd.clone()));
        Ok((fd, name))
    }
}
