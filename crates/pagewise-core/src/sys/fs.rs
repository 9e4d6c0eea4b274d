//! Files, directories and filesystems: stat(2), statx(2), fallocate(2), copy_file_range(2),
//! syncfs(2), fstatfs(2), flock(2), here; openat(2), O_TMPFILE + linkat(2) and
//! open_by_handle_at(2) in `fs/open.rs`; open(2) with every flag, fcntl(2) O_DIRECT,
//! fdatasync(2), ftruncate(2) and the logical block size (for `crate::dio`) in
//! `fs/direct.rs`; getdents64(2) in `fs/dir.rs`; SEEK_DATA, FIEMAP and BLKGETSIZE64 in
//! `fs/extent.rs`; extended attributes in `fs/xattr.rs`; special files (mknodat) and times
//! without following symlinks (utimensat) in `fs/node.rs`.
//!
//! rustix has all of these but open_by_handle_at (own wrapper) and the two ioctls.
#![allow(unsafe_code)]

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, CWD};
use rustix::io::Errno;

use super::cstring;

mod beneath;
mod dir;
mod direct;
mod extent;
mod node;
mod open;
mod xattr;

pub use beneath::*;
pub use dir::*;
pub use direct::*;
pub use extent::*;
pub use node::*;
pub use open::*;
pub use xattr::*;

/// The part of `struct stat` pagewise uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stat {
    /// Device of the filesystem the file is on (`st_dev`).
    pub dev: u64,
    /// Inode number (`st_ino`).
    pub ino: u64,
    /// File type and permission bits (`st_mode`).
    pub mode: u32,
    /// Number of hard links (`st_nlink`).
    pub nlink: u64,
    /// Owner (`st_uid`).
    pub uid: u32,
    /// Group (`st_gid`).
    pub gid: u32,
    /// Size in bytes (`st_size`); 0 for block devices, see [`block_device_size`].
    pub size: u64,
    /// Allocated bytes (st_blocks * 512): far below `size` for sparse files.
    pub allocated: u64,
    /// Last access, seconds and nanoseconds since the epoch.
    pub atime: (i64, i64),
    /// Last modification, seconds and nanoseconds since the epoch.
    pub mtime: (i64, i64),
    /// Last status change (`st_ctime`: any metadata change, xattrs and ACLs included).
    pub ctime: (i64, i64),
    /// Device number of a character or block device (`st_rdev`); 0 for other files.
    pub rdev: u64,
}

impl Stat {
    // The field types of `struct stat` differ between architectures.
    #[allow(clippy::unnecessary_cast)]
    fn from_raw(s: &rustix::fs::Stat) -> Self {
        Stat {
            dev: s.st_dev as u64,
            ino: s.st_ino as u64,
            mode: s.st_mode as u32,
            nlink: s.st_nlink as u64,
            uid: s.st_uid as u32,
            gid: s.st_gid as u32,
            size: s.st_size as u64,
            allocated: (s.st_blocks as u64) * 512,
            atime: (s.st_atime as i64, s.st_atime_nsec as i64),
            mtime: (s.st_mtime as i64, s.st_mtime_nsec as i64),
            ctime: (s.st_ctime as i64, s.st_ctime_nsec as i64),
            rdev: s.st_rdev as u64,
        }
    }
    /// A regular file (`S_IFREG`).
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    /// A directory (`S_IFDIR`).
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    /// A symbolic link (`S_IFLNK`; only from a stat that did not follow it).
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
    /// A block device (`S_IFBLK`).
    pub fn is_block_device(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFBLK
    }
    /// Short name of the file type, for messages.
    pub fn kind(&self) -> &'static str {
        Self::kind_of(self.mode)
    }

    /// The file type of an `st_mode`, in words.
    pub fn kind_of(mode: u32) -> &'static str {
        match mode & libc::S_IFMT {
            libc::S_IFREG => "regular file",
            libc::S_IFDIR => "directory",
            libc::S_IFLNK => "symlink",
            libc::S_IFIFO => "FIFO",
            libc::S_IFSOCK => "socket",
            libc::S_IFBLK => "block device",
            libc::S_IFCHR => "character device",
            _ => "unknown file type",
        }
    }
}

/// `int fstat(int fd, struct stat *statbuf)` —
/// <https://man7.org/linux/man-pages/man2/fstat.2.html>, through rustix.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    Ok(Stat::from_raw(&rustix::fs::fstat(fd)?))
}

/// `int fstatat(int dirfd, const char *path, struct stat *buf, int flags)` —
/// <https://man7.org/linux/man-pages/man2/fstatat.2.html>, through rustix. `dir == None`
/// means AT_FDCWD; without `follow`, AT_SYMLINK_NOFOLLOW.
pub fn fstatat(dir: Option<BorrowedFd<'_>>, name: &CStr, follow: bool) -> io::Result<Stat> {
    statat(dir.unwrap_or(CWD), name, follow)
}

/// Path variant of [`fstatat`] relative to the current directory.
pub fn stat_path(path: &Path, follow: bool) -> io::Result<Stat> {
    statat(CWD, super::no_nul(path)?, follow)
}

/// [`fstatat`] for any path rustix takes: a `&CStr` as it is, a `&Path` through a stack
/// buffer (no allocation below 256 bytes).
fn statat(dir: BorrowedFd<'_>, name: impl rustix::path::Arg, follow: bool) -> io::Result<Stat> {
    let flags = if follow {
        AtFlags::empty()
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    Ok(Stat::from_raw(&rustix::fs::statat(dir, name, flags)?))
}

/// Converts a dirent name to an `OsStr` for building display paths.
pub fn name_os(name: &CStr) -> &OsStr {
    OsStr::from_bytes(name.to_bytes())
}

/// `int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)`
/// with `(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN)` —
/// <https://man7.org/linux/man-pages/man2/statx.2.html> (`STATX_DIOALIGN`: Linux 6.1), through
/// rustix.
///
/// Direct-I/O alignment of an open file: `(memory alignment, file offset alignment)` in bytes.
/// `None` when the filesystem does not support O_DIRECT on this file or the kernel predates the
/// field.
pub fn dio_align(fd: BorrowedFd<'_>) -> Option<(u32, u32)> {
    use rustix::fs::StatxFlags;
    let stx = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN).ok()?;
    if stx.stx_mask & StatxFlags::DIOALIGN.bits() == 0 || stx.stx_dio_mem_align == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// The direct-I/O alignment of a file that O_DIRECT opened: [`dio_align`] where the kernel
/// says it (6.1+), else the logical block size of the file system's device (sysfs), else
/// 4096 — a multiple of every common device's logical block (512 or 4096), so reads and
/// writes aligned to it are accepted wherever O_DIRECT is (5.10's ext4, XFS, btrfs). Before
/// 6.1 pagewise used no O_DIRECT at all without this.
pub fn dio_align_or_device(fd: BorrowedFd<'_>) -> Option<(u32, u32)> {
    dio_align(fd).or_else(|| device_dio_align(fd))
}

/// The fallback of [`dio_align_or_device`]: the device's logical block size, else 4096.
pub fn device_dio_align(fd: BorrowedFd<'_>) -> Option<(u32, u32)> {
    let st = fstat(fd).ok()?;
    let b = logical_block_size(st.dev).unwrap_or(4096).max(512);
    Some((b, b))
}

/// `fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, len)` —
/// <https://man7.org/linux/man-pages/man2/fallocate.2.html>, through rustix: the range's
/// blocks are freed (it reads as zeros), the size stays. EOPNOTSUPP where the file system
/// has no holes.
pub fn punch_hole(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<()> {
    let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    Ok(rustix::fs::fallocate(fd, flags, off, len)?)
}

/// `int fallocate(int fd, int mode, off_t offset, off_t len)` with mode 0 —
/// <https://man7.org/linux/man-pages/man2/fallocate.2.html>, through rustix. EOPNOTSUPP on
/// filesystems without it.
pub fn fallocate(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<()> {
    Ok(rustix::fs::fallocate(
        fd,
        rustix::fs::FallocateFlags::empty(),
        off,
        len,
    )?)
}

/// `ssize_t copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len,
/// unsigned flags)` — <https://man7.org/linux/man-pages/man2/copy_file_range.2.html>
/// (Linux 4.5; across filesystems since 5.19), through rustix.
///
/// In-kernel copy through the page cache (or a reflink/server-side copy where supported).
/// Returns bytes copied (0 at the end of `src`); the descriptors' offsets are not moved.
pub fn copy_file_range(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: usize,
) -> io::Result<usize> {
    let (mut si, mut di) = (src_off, dst_off);
    Ok(rustix::fs::copy_file_range(
        src,
        Some(&mut si),
        dst,
        Some(&mut di),
        len,
    )?)
}

/// `void sync(void)` — <https://man7.org/linux/man-pages/man2/sync.2.html>, through rustix.
/// Writes back every file system.
pub fn sync_all() {
    rustix::fs::sync();
}

/// `int syncfs(int fd)` — <https://man7.org/linux/man-pages/man2/syncfs.2.html> (Linux
/// 2.6.39), through rustix. Writes back the whole filesystem `fd` is on.
pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::fs::syncfs(fd)?)
}

/// `int fstatfs(int fd, struct statfs *buf)` —
/// <https://man7.org/linux/man-pages/man2/fstatfs.2.html>, through rustix.
///
/// True when `fd` is on tmpfs, ramfs or hugetlbfs (`f_type`): shared-memory pages that have
/// no backing file and stay cached whatever is advised. False when fstatfs fails.
pub fn is_shmem(fd: BorrowedFd<'_>) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    let Ok(st) = rustix::fs::fstatfs(fd) else {
        return false;
    };
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on x86-64, not everywhere
    let t = st.f_type as i64;
    matches!(t, TMPFS_MAGIC | RAMFS_MAGIC | HUGETLBFS_MAGIC)
}

/// Where a file system keeps the pages of its files, as far as measuring them goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// overlayfs: the data's pages belong to the real (upper or lower) inode. A descriptor's
    /// own mapping is empty (cachestat on it reports 0), a mapping of it maps the real file.
    Overlay,
    /// btrfs: each subvolume has its own `st_dev`; the tracepoints and /proc/PID/maps name the
    /// superblock's device instead.
    Btrfs,
    /// FUSE: its daemon may read the data through files of its own (bindfs, passthrough),
    /// whose pages pagewise cannot see from the FUSE file.
    Fuse,
    /// Any other: the pages are the inode's own.
    Other,
}

/// `int fstatfs(int fd, struct statfs *buf)` —
/// <https://man7.org/linux/man-pages/man2/fstatfs.2.html>, through rustix: [`FsKind`] from
/// `f_type` (OVERLAYFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC, FUSE_SUPER_MAGIC). Other when fstatfs
/// fails.
pub fn fs_kind(fd: BorrowedFd<'_>) -> FsKind {
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    let Ok(st) = rustix::fs::fstatfs(fd) else {
        return FsKind::Other;
    };
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on x86-64, not everywhere
    match st.f_type as i64 {
        OVERLAYFS_SUPER_MAGIC => FsKind::Overlay,
        BTRFS_SUPER_MAGIC => FsKind::Btrfs,
        FUSE_SUPER_MAGIC => FsKind::Fuse,
        _ => FsKind::Other,
    }
}

/// `f_type` of cgroup v1 hierarchies (`CGROUP_SUPER_MAGIC`, `<linux/magic.h>`).
pub const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
/// `f_type` of the unified hierarchy, cgroup v2 (`CGROUP2_SUPER_MAGIC`, `<linux/magic.h>`).
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// `int fstatfs(int fd, struct statfs *buf)` —
/// <https://man7.org/linux/man-pages/man2/fstatfs.2.html>, through rustix: the `f_type` of
/// the file system `fd` is on (its magic number, `<linux/magic.h>`).
pub fn fs_type(fd: BorrowedFd<'_>) -> io::Result<i64> {
    let st = rustix::fs::fstatfs(fd)?;
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on x86-64, not everywhere
    Ok(st.f_type as i64)
}

/// The name of a file system type of [`fs_type`], for messages: None for one not listed.
pub fn fs_type_name(f_type: i64) -> Option<&'static str> {
    Some(match f_type {
        0xef53 => "ext2/3/4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x794c_7630 => "overlayfs",
        0x6573_5546 => "fuse",
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x6462_6720 => "debugfs",
        0x7472_6163 => "tracefs",
        0x1373 => "devfs",
        0x6969 => "nfs",
        0xf2f5_2010 => "f2fs",
        0x2fc1_2fc1 => "zfs",
        0x7371_7368 => "squashfs",
        0xe0f5_e1e2 => "erofs",
        0x0102_1997 => "9p",
        CGROUP_SUPER_MAGIC => "cgroup",
        CGROUP2_SUPER_MAGIC => "cgroup2",
        _ => return None,
    })
}

/// `int fstatfs(int fd, struct statfs *buf)` —
/// <https://man7.org/linux/man-pages/man2/fstatfs.2.html>, through rustix.
///
/// True when `fd` is on a filesystem whose files' sizes are not their contents: procfs,
/// sysfs, debugfs, tracefs, securityfs, configfs, cgroupfs, efivarfs, pstore, bpf (a
/// /proc file is 0 bytes in stat and a sysfs attribute 4096, whatever `read` returns). Such
/// files are copied by reading to the end, as cp does. False when fstatfs fails.
pub fn is_pseudo_fs(fd: BorrowedFd<'_>) -> bool {
    const PSEUDO: [i64; 11] = [
        0x9fa0,      // PROC_SUPER_MAGIC
        0x6265_6572, // SYSFS_MAGIC
        0x6462_6720, // DEBUGFS_MAGIC
        0x7472_6163, // TRACEFS_MAGIC
        0x7363_6673, // SECURITYFS_MAGIC
        0x6263_6673, // CONFIGFS_MAGIC
        0x0027_e0eb, // CGROUP_SUPER_MAGIC
        0x6367_7270, // CGROUP2_SUPER_MAGIC
        0xf97c_ff8c, // EFIVARFS_MAGIC
        0x6165_676c, // PSTOREFS_MAGIC
        0xcafe_4a11, // BPF_FS_MAGIC
    ];
    let Ok(st) = rustix::fs::fstatfs(fd) else {
        return false;
    };
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on x86-64, not everywhere
    let t = st.f_type as i64;
    PSEUDO.contains(&t)
}

/// What a [`watchdog`] does once its owner is gone, in order; a step that fails is passed
/// over.
#[derive(Debug, Clone)]
pub enum Undo {
    /// open(2) the file `O_WRONLY` (never creating it) and write(2) these bytes to it.
    Write(std::path::PathBuf, &'static [u8]),
    /// open(2) the file `O_WRONLY | O_TRUNC` (never creating it).
    Truncate(std::path::PathBuf),
    /// rmdir(2) the directory.
    Rmdir(std::path::PathBuf),
}

/// `int pipe2(int fds[2], O_CLOEXEC)`, then fork(2) twice, setsid(2), signal(2) of the
/// terminating signals back to SIG_DFL, close_range(2), read(2) of the pipe, the
/// open/write/close/rmdir of `undo`, _exit(2) — libc, not rustix: see the module list in
/// `sys`.
///
/// Starts a detached process that waits until the returned descriptor (the write end of a
/// pipe, close-on-exec) is closed — by the caller dropping it, or by the kernel when the
/// caller dies however it dies, SIGKILL included — then does `undo` and exits. Every other
/// descriptor but `keep` is closed in it: a file lock held through `keep` stays held until
/// it is done. It is in a session of its own (the terminal's signals do not reach it) and
/// is adopted by init, or by the caller where the caller is a subreaper. Returns once it
/// exists. Used for state in the kernel that outlives a process (a tracefs instance).
pub fn watchdog(keep: &[BorrowedFd<'_>], undo: &[Undo]) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    // Everything the child touches is prepared here: after fork it may not allocate.
    let steps: Vec<(u8, std::ffi::CString, &'static [u8])> = undo
        .iter()
        .map(|u| match u {
            Undo::Write(p, b) => cstring(p).map(|c| (0, c, *b)),
            Undo::Truncate(p) => cstring(p).map(|c| (1, c, &b""[..])),
            Undo::Rmdir(p) => cstring(p).map(|c| (2, c, &b""[..])),
        })
        .collect::<io::Result<_>>()?;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given, owned from here on.
    let (r, w) = unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let (r_raw, w_raw) = (r.as_raw_fd(), w.as_raw_fd());
    let mut kept: Vec<libc::c_uint> = keep.iter().map(|f| f.as_raw_fd() as libc::c_uint).collect();
    kept.push(r_raw as libc::c_uint);
    kept.sort_unstable();
    kept.dedup();
    // SAFETY: between fork and _exit the children only call async-signal-safe functions
    // (fork, setsid, signal, close_range/close, read, open, write, rmdir, _exit) on memory
    // prepared before the first fork.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            libc::setsid();
            if libc::fork() == 0 {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                // The write end above all: it must close when the caller's does.
                libc::close(w_raw);
                super::process::close_all_but(&kept);
                let mut b = 0u8;
                while libc::read(r_raw, (&mut b as *mut u8).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                for (kind, path, bytes) in &steps {
                    match kind {
                        2 => {
                            libc::rmdir(path.as_ptr());
                        }
                        _ => {
                            let trunc = if *kind == 1 { libc::O_TRUNC } else { 0 };
                            let fd =
                                libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC | trunc);
                            if fd >= 0 {
                                libc::write(fd, bytes.as_ptr().cast(), bytes.len());
                                libc::close(fd);
                            }
                        }
                    }
                }
                libc::_exit(0);
            }
            libc::_exit(0);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    drop(r);
    Ok(w)
}

/// `int flock(int fd, int op)` with `LOCK_EX | LOCK_NB` —
/// <https://man7.org/linux/man-pages/man2/flock.2.html>, through rustix.
///
/// Tries to take an exclusive lock on `fd` without waiting. Ok(false) when someone holds it.
pub fn try_lock_exclusive(fd: BorrowedFd<'_>) -> io::Result<bool> {
    match rustix::fs::flock(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::scratch_dir;
    use super::*;
    use std::os::fd::AsFd;

    /// The watchdog waits for its pipe to close, then does its steps in order: a write, a
    /// truncation (the file is never created), an rmdir.
    #[test]
    fn the_watchdog_acts_once_its_pipe_is_closed() {
        let dir = scratch_dir();
        let (w, t, d) = (
            dir.path().join("w"),
            dir.path().join("t"),
            dir.path().join("d"),
        );
        std::fs::write(&w, "1").unwrap();
        std::fs::write(&t, "full").unwrap();
        std::fs::create_dir(&d).unwrap();
        let missing = dir.path().join("missing");
        let guard = watchdog(
            &[],
            &[
                Undo::Write(w.clone(), b"0"),
                Undo::Truncate(t.clone()),
                Undo::Truncate(missing.clone()),
                Undo::Rmdir(d.clone()),
            ],
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(d.exists(), "nothing done while the pipe is open");
        drop(guard);
        let start = std::time::Instant::now();
        while d.exists() && start.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!d.exists());
        assert_eq!(std::fs::read_to_string(&w).unwrap(), "0");
        assert_eq!(std::fs::read_to_string(&t).unwrap(), "");
        assert!(!missing.exists());
    }

    fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
        r.unwrap_err().raw_os_error().unwrap()
    }

    #[test]
    fn stat_sees_size_kind_and_allocation() {
        let dir = scratch_dir();
        let p = dir.path().join("f");
        std::fs::write(&p, [0u8; 3000]).unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let st = stat_path(&p, true).unwrap();
        assert!(st.is_file() && !st.is_dir() && !st.is_symlink());
        assert_eq!(
            (st.size, st.nlink, st.uid),
            (3000, 1, rustix::process::geteuid().as_raw())
        );
        assert!(st.allocated >= 3000 || st.allocated == 0, "{st:?}"); // 0: still delayed
        assert_eq!(st.kind(), "regular file");
        let fd = open_path(&p, OpenFlags::default()).unwrap();
        let st2 = fstat(fd.as_fd()).unwrap();
        assert_eq!((st2.dev, st2.ino), (st.dev, st.ino));
        let d = open_path(dir.path(), OpenFlags::default()).unwrap();
        let link = fstatat(Some(d.as_fd()), c"l", false).unwrap();
        assert!(link.is_symlink() && link.kind() == "symlink");
        assert_eq!(fstatat(Some(d.as_fd()), c"l", true).unwrap().ino, st.ino);
        assert_eq!(
            errno(stat_path(&dir.path().join("none"), true)),
            libc::ENOENT
        );
        assert_eq!(Stat::kind_of(libc::S_IFDIR), "directory");
        assert_eq!(Stat::kind_of(libc::S_IFIFO), "FIFO");
    }

    #[test]
    fn open_write_creates_exclusively_and_copies() {
        let dir = scratch_dir();
        let p = dir.path().join("out");
        let out = open_write(&p, Some(0o600), false).unwrap();
        assert_eq!(errno(open_write(&p, Some(0o600), false)), libc::EEXIST);
        open_write(&p, None, false).unwrap();
        assert_eq!(
            errno(open_write(&dir.path().join("x"), None, false)),
            libc::ENOENT
        );

        let src = dir.path().join("src");
        std::fs::write(&src, b"0123456789").unwrap();
        let src = std::fs::File::open(&src).unwrap();
        fallocate(out.as_fd(), 0, 8192).unwrap();
        assert_eq!(fstat(out.as_fd()).unwrap().size, 8192);
        assert_eq!(
            copy_file_range(src.as_fd(), 2, out.as_fd(), 100, 5).unwrap(),
            5
        );
        assert_eq!(
            copy_file_range(src.as_fd(), 10, out.as_fd(), 0, 5).unwrap(),
            0,
            "EOF"
        );
        syncfs(out.as_fd()).unwrap();
        let got = std::fs::read(&p).unwrap();
        assert_eq!(&got[100..105], b"23456");
    }

    #[test]
    fn shmem_is_told_from_disk() {
        let dir = scratch_dir();
        let f = std::fs::File::create(dir.path().join("f")).unwrap();
        assert!(!is_shmem(f.as_fd()));
        let memfd =
            rustix::fs::memfd_create(c"pagewise-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        assert!(is_shmem(memfd.as_fd()));
    }

    #[test]
    fn flock_is_exclusive_between_open_files() {
        let dir = scratch_dir();
        let p = dir.path().join("lock");
        let a = std::fs::File::create(&p).unwrap();
        let b = std::fs::File::open(&p).unwrap();
        assert!(try_lock_exclusive(a.as_fd()).unwrap());
        assert!(
            try_lock_exclusive(a.as_fd()).unwrap(),
            "the holder may take it again"
        );
        assert!(!try_lock_exclusive(b.as_fd()).unwrap());
        drop(a);
        assert!(try_lock_exclusive(b.as_fd()).unwrap());
    }
}
