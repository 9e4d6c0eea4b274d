//! Special files and symlinks as they are, never opened: mknodat(2) for FIFOs, sockets and
//! devices, utimensat(2) with AT_SYMLINK_NOFOLLOW for their times, fchownat(2) for owners.

use std::io;
use std::path::Path;

use rustix::fs::{FileType, Mode, CWD};

/// The kind of a special file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A named pipe.
    Fifo,
    /// A Unix domain socket's name (no listener: as `cp -a` and `rsync --specials` make it).
    Socket,
    /// A character device (root only).
    CharDevice,
    /// A block device (root only).
    BlockDevice,
}

impl NodeKind {
    /// The kind of `mode`'s file type bits, None for regular files, directories and symlinks.
    pub fn of_mode(mode: u32) -> Option<NodeKind> {
        match mode & libc::S_IFMT {
            libc::S_IFIFO => Some(NodeKind::Fifo),
            libc::S_IFSOCK => Some(NodeKind::Socket),
            libc::S_IFCHR => Some(NodeKind::CharDevice),
            libc::S_IFBLK => Some(NodeKind::BlockDevice),
            _ => None,
        }
    }

    /// The file type rustix's mknodat takes.
    pub(crate) fn file_type(self) -> FileType {
        match self {
            NodeKind::Fifo => FileType::Fifo,
            NodeKind::Socket => FileType::Socket,
            NodeKind::CharDevice => FileType::CharacterDevice,
            NodeKind::BlockDevice => FileType::BlockDevice,
        }
    }
}

/// `int mknodat(int dirfd, const char *pathname, mode_t mode, dev_t dev)` —
/// <https://man7.org/linux/man-pages/man2/mknodat.2.html>.
///
/// Creates `path` as a special file with permission bits `perm` (less the umask) and, for
/// devices, device number `rdev`. Devices need CAP_MKNOD (EPERM otherwise).
pub fn mknod(path: &Path, kind: NodeKind, perm: u32, rdev: u64) -> io::Result<()> {
    Ok(rustix::fs::mknodat(
        CWD,
        path,
        kind.file_type(),
        Mode::from_raw_mode(perm & 0o7777),
        rdev,
    )?)
}

/// `int utimensat(int dirfd, const char *pathname, const struct timespec times[2], int flags)`
/// with `AT_SYMLINK_NOFOLLOW` — <https://man7.org/linux/man-pages/man2/utimensat.2.html>.
///
/// Sets the access and modification times of `path` itself: a symlink's own times, a FIFO's
/// without opening it. Times are `(seconds, nanoseconds)` since the epoch.
pub fn set_times_nofollow(path: &Path, atime: (i64, i64), mtime: (i64, i64)) -> io::Result<()> {
    super::set_times_at(CWD, path.as_os_str(), atime, mtime)
}

/// `fchmod(fd, mode)` — <https://man7.org/linux/man-pages/man2/fchmod.2.html>: the
/// permission bits (and set-id and sticky bits) of the open file `fd`.
pub fn fchmod(fd: std::os::fd::BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(
        fd,
        rustix::fs::Mode::from_raw_mode(mode),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    #[test]
    fn fifo_and_socket_nodes_with_their_own_times() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        mknod(&fifo, NodeKind::Fifo, 0o640, 0).unwrap();
        let sock = d.path().join("sock");
        mknod(&sock, NodeKind::Socket, 0o600, 0).unwrap();
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(std::fs::symlink_metadata(&sock)
            .unwrap()
            .file_type()
            .is_socket());
        assert_eq!(
            NodeKind::of_mode(std::fs::symlink_metadata(&fifo).unwrap().mode()),
            Some(NodeKind::Fifo)
        );
        // A dangling symlink's own times; the FIFO never opened (this would block).
        let link = d.path().join("link");
        std::os::unix::fs::symlink("nowhere", &link).unwrap();
        set_times_nofollow(&link, (1_000_000, 5), (2_000_000, 7)).unwrap();
        set_times_nofollow(&fifo, (3, 0), (4, 0)).unwrap();
        let m = std::fs::symlink_metadata(&link).unwrap();
        assert_eq!((m.mtime(), m.mtime_nsec()), (2_000_000, 7));
        assert_eq!(std::fs::symlink_metadata(&fifo).unwrap().mtime(), 4);
        assert_eq!(NodeKind::of_mode(libc::S_IFREG | 0o644), None);
    }
}
