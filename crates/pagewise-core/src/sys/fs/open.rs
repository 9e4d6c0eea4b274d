//! Opening files: openat(2), open(2) with O_TMPFILE or O_DIRECT, linkat(2) to name an
//! unnamed file, open_by_handle_at(2). rustix has all but open_by_handle_at (own wrapper).
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

use super::super::{cstring, cvt_long};

/// `O_NOFOLLOW`, for callers that open with std's `OpenOptionsExt::custom_flags`.
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;

/// Flags for [`openat`]; all false by default (read-only, any file type, follow symlinks,
/// update the access time).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenFlags {
    /// `O_DIRECTORY`: fail with ENOTDIR unless it is a directory.
    pub directory: bool,
    /// `O_NOFOLLOW`: fail with ELOOP if the last component is a symlink.
    pub nofollow: bool,
    /// `O_NOATIME` where allowed: reading does not update the access time.
    pub noatime: bool,
    /// `O_RDWR` instead of `O_RDONLY`.
    pub write: bool,
}

/// `int openat(int dirfd, const char *path, int flags)` —
/// <https://man7.org/linux/man-pages/man2/openat.2.html>, through rustix.
///
/// Always O_CLOEXEC and O_NONBLOCK: a FIFO or device met by accident never blocks the caller.
/// With `noatime`, O_NOATIME is tried first and silently dropped on EPERM (it needs ownership
/// or CAP_FOWNER). `dir == None` means AT_FDCWD.
pub fn openat(dir: Option<BorrowedFd<'_>>, name: &CStr, f: OpenFlags) -> io::Result<OwnedFd> {
    open_at(dir.unwrap_or(CWD), name, f)
}

/// [`openat`] for any path rustix takes (see [`statat`]).
fn open_at(
    dir: BorrowedFd<'_>,
    name: impl rustix::path::Arg + Copy,
    f: OpenFlags,
) -> io::Result<OwnedFd> {
    let mut flags = OFlags::CLOEXEC | OFlags::NONBLOCK;
    flags |= if f.write {
        OFlags::RDWR
    } else {
        OFlags::RDONLY
    };
    if f.directory {
        flags |= OFlags::DIRECTORY;
    }
    if f.nofollow {
        flags |= OFlags::NOFOLLOW;
    }
    if f.noatime {
        match rustix::fs::openat(dir, name, flags | OFlags::NOATIME, Mode::empty()) {
            Err(Errno::PERM) => {}
            r => return Ok(r?),
        }
    }
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// [`openat`] relative to the current directory, taking a path.
pub fn open_path(path: &Path, f: OpenFlags) -> io::Result<OwnedFd> {
    open_at(CWD, super::super::no_nul(path)?, f)
}

/// `/proc/self/fd/N`: a path naming the open file `fd` (to reopen it, link it, or read where
/// it lives).
pub fn fd_path(fd: BorrowedFd<'_>) -> std::path::PathBuf {
    format!("/proc/self/fd/{}", fd.as_raw_fd()).into()
}

/// `int open(const char *path, int flags, mode_t mode)` with `O_WRONLY | O_CLOEXEC`, plus
/// `O_CREAT | O_EXCL` when `create` is Some(mode) and `O_DIRECT` when `direct` —
/// <https://man7.org/linux/man-pages/man2/open.2.html>, through rustix.
///
/// Opens (creating exclusively: EEXIST if it exists) a file for writing.
pub fn open_write(path: &Path, create: Option<u32>, direct: bool) -> io::Result<OwnedFd> {
    let mut flags = OFlags::WRONLY | OFlags::CLOEXEC;
    if create.is_some() {
        flags |= OFlags::CREATE | OFlags::EXCL;
    }
    if direct {
        flags |= OFlags::DIRECT;
    }
    let mode = Mode::from_raw_mode(create.unwrap_or(0));
    Ok(rustix::fs::open(super::super::no_nul(path)?, flags, mode)?)
}

/// `int open(const char *dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, mode_t mode)` —
/// <https://man7.org/linux/man-pages/man2/open.2.html> (O_TMPFILE: Linux 3.11), through rustix.
///
/// An unnamed regular file in `dir`'s filesystem: it vanishes when closed unless [`link_fd`]
/// gives it a name, so a crash or an error never leaves a partial file behind. EOPNOTSUPP (or
/// EISDIR/EINVAL on old kernels) when the filesystem has no O_TMPFILE.
pub fn open_tmpfile(dir: &Path, mode: u32) -> io::Result<OwnedFd> {
    let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
    Ok(rustix::fs::open(
        super::super::no_nul(dir)?,
        flags,
        Mode::from_raw_mode(mode),
    )?)
}

/// 0: untried, 1: linkat(AT_EMPTY_PATH) works, 2: it does not (no CAP_DAC_READ_SEARCH).
static LINK_EMPTY_PATH: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// `int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int
/// flags)` — <https://man7.org/linux/man-pages/man2/linkat.2.html>, through rustix.
///
/// Gives the open file `fd` (typically from [`open_tmpfile`]) the name `to`:
/// `linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH)`, which needs CAP_DAC_READ_SEARCH, else
/// `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, to, AT_SYMLINK_FOLLOW)`. EEXIST when `to`
/// exists.
pub fn link_fd(fd: BorrowedFd<'_>, to: &Path) -> io::Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let to = cstring(to)?;
    if LINK_EMPTY_PATH.load(Relaxed) != 2 {
        match rustix::fs::linkat(fd, c"", CWD, &to, AtFlags::EMPTY_PATH) {
            Ok(()) => {
                LINK_EMPTY_PATH.store(1, Relaxed);
                return Ok(());
            }
            Err(e) if !matches!(e, Errno::NOENT | Errno::PERM) => return Err(e.into()),
            // ENOENT here means "not allowed" only while the target's directory exists.
            Err(e) if LINK_EMPTY_PATH.load(Relaxed) == 1 => return Err(e.into()),
            Err(_) => LINK_EMPTY_PATH.store(2, Relaxed),
        }
    }
    let proc = cstring(&fd_path(fd))?;
    Ok(rustix::fs::linkat(
        CWD,
        &proc,
        CWD,
        &to,
        AtFlags::SYMLINK_FOLLOW,
    )?)
}

/// `int open(const char *path, O_RDONLY | O_CLOEXEC | O_DIRECT | O_NONBLOCK | O_NOATIME)` —
/// <https://man7.org/linux/man-pages/man2/open.2.html>, through rustix.
///
/// Opens a file read-only with O_DIRECT (and O_NOATIME where allowed: retried without it on
/// EPERM); O_NONBLOCK, so a FIFO or device under the name never blocks the open.
pub fn open_read_direct(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::DIRECT | OFlags::NONBLOCK;
    let path = super::super::no_nul(path)?;
    match rustix::fs::open(path, flags | OFlags::NOATIME, Mode::empty()) {
        Err(Errno::PERM) => Ok(rustix::fs::open(path, flags, Mode::empty())?),
        r => Ok(r?),
    }
}

/// `int open_by_handle_at(int mount_fd, struct file_handle *handle, int flags)` —
/// <https://man7.org/linux/man-pages/man2/open_by_handle_at.2.html> (Linux 2.6.39; needs
/// CAP_DAC_READ_SEARCH; not in rustix: own wrapper).
///
/// Opens a file on the filesystem of `mount_fd` by inode number, with a FILEID_INO32_GEN
/// handle with generation 0, which ext2/3/4 accept without checking the generation. Other
/// filesystems may refuse (ESTALE, EOPNOTSUPP); inode numbers past 32 bits give EOVERFLOW.
/// The returned descriptor is read-only.
pub fn open_by_inode(mount_fd: BorrowedFd<'_>, ino: u64) -> io::Result<OwnedFd> {
    /// `FILEID_INO32_GEN` of `<linux/exportfs.h>`: 32-bit inode number, 32-bit generation.
    const FILEID_INO32_GEN: i32 = 1;
    let ino = u32::try_from(ino).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // [`file_handle`]'s bytes: the type, then f_handle = inode number, generation 0.
    let mut h = [0u8; 12];
    h[..4].copy_from_slice(&FILEID_INO32_GEN.to_le_bytes());
    h[4..8].copy_from_slice(&ino.to_le_bytes());
    open_by_file_handle(mount_fd, &h)
}

/// Largest `f_handle` a file system gives (`MAX_HANDLE_SZ` of `<linux/exportfs.h>`).
const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct FileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// `int name_to_handle_at(int dirfd, const char *path, struct file_handle *handle, int
/// *mount_id, int flags)` with `(fd, "", ..., AT_EMPTY_PATH)` —
/// <https://man7.org/linux/man-pages/man2/name_to_handle_at.2.html> (Linux 2.6.39; no
/// privilege needed; not in rustix: own wrapper).
///
/// The file system's own handle of the open file `fd`, as bytes: `handle_type` (i32, little
/// endian) then `f_handle`. It carries the inode's generation where the file system has one
/// (ext4, XFS, btrfs), so a handle never names a later file that reuses the inode number.
/// EOPNOTSUPP where the file system exports no handles (overlayfs without nfs_export, tmpfs
/// before 6.x, most FUSE).
pub fn file_handle(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut h = FileHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: h has room for MAX_HANDLE_SZ handle bytes, as handle_bytes says; the path is an
    // empty C string; mount_id is a valid int.
    cvt_long(unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            fd.as_raw_fd(),
            c"".as_ptr(),
            &mut h as *mut FileHandle,
            &mut mount_id as *mut libc::c_int,
            libc::AT_EMPTY_PATH,
        )
    })?;
    let n = (h.handle_bytes as usize).min(MAX_HANDLE_SZ);
    let mut out = Vec::with_capacity(4 + n);
    out.extend_from_slice(&h.handle_type.to_le_bytes());
    out.extend_from_slice(&h.f_handle[..n]);
    Ok(out)
}

/// `int open_by_handle_at(int mount_fd, struct file_handle *handle, int flags)` —
/// <https://man7.org/linux/man-pages/man2/open_by_handle_at.2.html> (Linux 2.6.39; needs
/// CAP_DAC_READ_SEARCH).
///
/// Opens, read-only, the file a handle of [`file_handle`] names on the file system of
/// `mount_fd`. ESTALE when that file is gone (the generation no longer matches); EINVAL for
/// bytes that are no handle.
pub fn open_by_file_handle(mount_fd: BorrowedFd<'_>, handle: &[u8]) -> io::Result<OwnedFd> {
    let bad = || io::Error::from_raw_os_error(libc::EINVAL);
    let (ty, bytes) = handle.split_first_chunk::<4>().ok_or_else(bad)?;
    if bytes.len() > MAX_HANDLE_SZ {
        return Err(bad());
    }
    let mut h = FileHandle {
        handle_bytes: bytes.len() as u32,
        handle_type: i32::from_le_bytes(*ty),
        f_handle: [0; MAX_HANDLE_SZ],
    };
    h.f_handle[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: h is a struct file_handle whose handle_bytes fit its f_handle.
    let fd = cvt_long(unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd.as_raw_fd(),
            &mut h as *mut FileHandle,
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    })?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether no other open file description refers to the file of `fd` (this one aside): a
/// write lease — `fcntl(fd, F_SETLEASE, F_WRLCK)`,
/// <https://man7.org/linux/man-pages/man2/fcntl.2.html> (Linux 2.4) — is granted only then,
/// and is given back at once. `Ok(false)`: someone else has the file open (EAGAIN); an error:
/// leases are not available here (another file system's EINVAL, `fs.leases-enable` 0, a file
/// not ours without CAP_LEASE), so nothing is known.
pub fn no_other_opener(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: fcntl on a descriptor we borrow; F_SETLEASE takes an int argument.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    if r == -1 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EBUSY) => Ok(false),
            _ => Err(e),
        };
    }
    // SAFETY: as above; gives back the lease just taken.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    Ok(true)
}

#[cfg(test)]
mod handle_tests {
    use super::super::super::testing::scratch_dir;
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_handle_taken_from_a_file_opens_that_file_again() {
        let dir = scratch_dir();
        let p = dir.path().join("f");
        std::fs::write(&p, b"by real handle").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let h = match file_handle(f.as_fd()) {
            Ok(h) => h,
            // A file system without handles: nothing more to check here.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return,
            Err(e) => panic!("name_to_handle_at: {e}"),
        };
        assert!(h.len() > 4);
        assert_eq!(
            open_by_file_handle(f.as_fd(), &h[..3])
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL)
        );
        let mnt = std::fs::File::open(dir.path()).unwrap();
        match open_by_file_handle(mnt.as_fd(), &h) {
            Ok(fd) => {
                let s = std::fs::read_to_string(super::super::fd_path(fd.as_fd())).unwrap();
                assert_eq!(s, "by real handle");
            }
            // Without CAP_DAC_READ_SEARCH.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{require, scratch_dir};
    use super::super::{dio_align, fstat, stat_path};
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
        r.unwrap_err().raw_os_error().unwrap()
    }

    #[test]
    fn openat_flags_do_what_they_say() {
        let dir = scratch_dir();
        std::fs::write(dir.path().join("f"), b"abc").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let d = open_path(
            dir.path(),
            OpenFlags {
                directory: true,
                ..Default::default()
            },
        )
        .unwrap();
        let at = |name: &CStr, f: OpenFlags| openat(Some(d.as_fd()), name, f);
        let nofollow = OpenFlags {
            nofollow: true,
            ..Default::default()
        };
        assert_eq!(errno(at(c"l", nofollow)), libc::ELOOP);
        let directory = OpenFlags {
            directory: true,
            ..Default::default()
        };
        assert_eq!(errno(at(c"f", directory)), libc::ENOTDIR);
        // Read-only unless asked: a write fails with EBADF.
        let ro = std::fs::File::from(at(c"f", OpenFlags::default()).unwrap());
        assert_eq!(
            (&ro).write(b"x").unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        let rw = OpenFlags {
            write: true,
            noatime: true,
            ..Default::default()
        };
        let mut f = std::fs::File::from(at(c"l", rw).unwrap());
        f.write_all(b"X").unwrap();
        let mut s = String::new();
        std::fs::File::open(dir.path().join("f"))
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "Xbc");
        // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer.
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        open_path(&fifo, OpenFlags::default()).unwrap();
    }

    #[test]
    fn tmpfile_gets_its_name_once() {
        let dir = scratch_dir();
        let fd = open_tmpfile(dir.path(), 0o640).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(b"data").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "unnamed");
        let to = dir.path().join("named");
        link_fd(f.as_fd(), &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"data");
        assert_eq!(stat_path(&to, false).unwrap().mode & 0o777, 0o640);
        assert_eq!(errno(link_fd(f.as_fd(), &to)), libc::EEXIST);
        assert!(fd_path(f.as_fd()).starts_with("/proc/self/fd/"));
    }

    #[test]
    fn direct_io_opens_where_statx_says_it_can() {
        let dir = scratch_dir();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![1u8; 8192]).unwrap();
        let fd = open_read_direct(&p).unwrap();
        let flags = rustix::fs::fcntl_getfl(&fd).unwrap();
        assert!(flags.contains(OFlags::DIRECT), "{flags:?}");
        // ext4, xfs, btrfs answer since 6.1; tmpfs has no O_DIRECT alignment to report.
        if let Some((mem, off)) = dio_align(fd.as_fd()) {
            assert!(
                mem.is_power_of_two() && off.is_power_of_two(),
                "{mem} {off}"
            );
            let mut buf = crate::sys::AlignedBuf::new(off.max(4096) as usize, mem as usize);
            let n = crate::sys::pread(fd.as_fd(), &mut buf, 0).unwrap();
            assert_eq!(n, buf.len().min(8192));
        }
        let w = open_write(&dir.path().join("d"), Some(0o600), true).unwrap();
        assert!(rustix::fs::fcntl_getfl(&w)
            .unwrap()
            .contains(OFlags::DIRECT));
    }

    #[test]
    fn open_by_inode_finds_the_same_file() {
        let dir = scratch_dir();
        let p = dir.path().join("f");
        std::fs::write(&p, b"by handle").unwrap();
        let st = stat_path(&p, false).unwrap();
        let mount = std::fs::File::open(dir.path()).unwrap();
        let fd = match open_by_inode(mount.as_fd(), st.ino) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOVERFLOW | libc::ESTALE | libc::EOPNOTSUPP | libc::EPERM)
                ) =>
            {
                require(
                    false,
                    &format!("this filesystem or user cannot open by handle: {e}"),
                );
                return;
            }
            r => r.unwrap(),
        };
        let got = fstat(fd.as_fd()).unwrap();
        assert_eq!((got.dev, got.ino), (st.dev, st.ino));
        let mut s = String::new();
        std::fs::File::from(fd).read_to_string(&mut s).unwrap();
        assert_eq!(s, "by handle");
        assert_eq!(
            errno(open_by_inode(mount.as_fd(), 1 << 40)),
            libc::EOVERFLOW
        );
    }
}
