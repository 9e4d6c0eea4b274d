//! Files, directories and filesystems: stat(2), openat(2), getdents64(2), statx(2), lseek(2)
//! SEEK_DATA, fallocate(2), copy_file_range(2), xattrs, O_TMPFILE + linkat(2), FIEMAP,
//! open_by_handle_at(2), fstatfs(2), flock(2) and a few ioctls.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{cstring, cvt};

/// The part of `struct stat` pagewise uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Allocated bytes (st_blocks * 512): far below `size` for sparse files.
    pub allocated: u64,
    /// Last access, seconds and nanoseconds since the epoch.
    pub atime: (i64, i64),
    /// Last modification, seconds and nanoseconds since the epoch.
    pub mtime: (i64, i64),
}

impl Stat {
    fn from_raw(s: &libc::stat) -> Self {
        Stat {
            dev: s.st_dev,
            ino: s.st_ino,
            mode: s.st_mode,
            nlink: s.st_nlink,
            uid: s.st_uid,
            gid: s.st_gid,
            size: s.st_size as u64,
            allocated: (s.st_blocks as u64) * 512,
            atime: (s.st_atime, s.st_atime_nsec),
            mtime: (s.st_mtime, s.st_mtime_nsec),
        }
    }
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
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

/// `int fstat(int fd, struct stat *statbuf)` — <https://man7.org/linux/man-pages/man2/fstat.2.html>.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st is valid for writes of a struct stat.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so st is initialised.
    Ok(Stat::from_raw(unsafe { &st.assume_init() }))
}

/// `int fstatat(int dirfd, const char *path, struct stat *buf, int flags)` —
/// <https://man7.org/linux/man-pages/man2/fstatat.2.html>. `dir == None` means AT_FDCWD.
pub fn fstatat(dir: Option<BorrowedFd<'_>>, name: &CStr, follow: bool) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    let dfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: name is a valid C string, st valid for writes.
    cvt(unsafe { libc::fstatat(dfd, name.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat succeeded.
    Ok(Stat::from_raw(unsafe { &st.assume_init() }))
}

/// Path variant of [`fstatat`] relative to the current directory.
pub fn stat_path(path: &Path, follow: bool) -> io::Result<Stat> {
    fstatat(None, &cstring(path)?, follow)
}

/// `O_NOFOLLOW`, for callers that open with std's `OpenOptionsExt::custom_flags`.
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;

/// Flags for [`openat`].
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenFlags {
    pub directory: bool,
    pub nofollow: bool,
    pub noatime: bool,
    pub write: bool,
}

/// `int openat(int dirfd, const char *path, int flags)` —
/// <https://man7.org/linux/man-pages/man2/openat.2.html>.
///
/// Always O_CLOEXEC and O_NONBLOCK: a FIFO or device met by accident never blocks the caller.
/// With `noatime`, O_NOATIME is tried first and silently dropped on EPERM (it needs ownership
/// or CAP_FOWNER). `dir == None` means AT_FDCWD.
pub fn openat(dir: Option<BorrowedFd<'_>>, name: &CStr, f: OpenFlags) -> io::Result<OwnedFd> {
    let mut flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    flags |= if f.write {
        libc::O_RDWR
    } else {
        libc::O_RDONLY
    };
    if f.directory {
        flags |= libc::O_DIRECTORY;
    }
    if f.nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    let dfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    if f.noatime {
        // SAFETY: name is a valid C string.
        let fd = unsafe { libc::openat(dfd, name.as_ptr(), flags | libc::O_NOATIME) };
        if fd >= 0 {
            // SAFETY: fd was just returned by openat and is owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    // SAFETY: name is a valid C string.
    let fd = cvt(unsafe { libc::openat(dfd, name.as_ptr(), flags) })?;
    // SAFETY: fd was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// [`openat`] relative to the current directory, taking a path.
pub fn open_path(path: &Path, f: OpenFlags) -> io::Result<OwnedFd> {
    openat(None, &cstring(path)?, f)
}

/// `d_type` values of getdents64(2) that matter to the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirentType {
    File,
    Dir,
    Symlink,
    /// FIFO, socket, device: never opened unless named explicitly.
    Special,
    /// The filesystem did not say (DT_UNKNOWN): the caller must fstatat.
    Unknown,
}

/// One entry read by [`DirReader`].
#[derive(Debug)]
pub struct Dirent {
    pub ino: u64,
    pub kind: DirentType,
    pub name: CString,
}

/// Streams the entries of a directory with `getdents64(2)`
/// (<https://man7.org/linux/man-pages/man2/getdents64.2.html>), skipping `.` and `..`.
/// Cheaper than readdir(3): one 32 KiB buffer, no per-entry allocation besides the name.
pub struct DirReader<'a> {
    fd: BorrowedFd<'a>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
}

impl<'a> DirReader<'a> {
    pub fn new(fd: BorrowedFd<'a>) -> Self {
        DirReader {
            fd,
            buf: vec![0; 32 * 1024],
            pos: 0,
            end: 0,
            eof: false,
        }
    }
}

impl Iterator for DirReader<'_> {
    type Item = io::Result<Dirent>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.pos >= self.end {
                if self.eof {
                    return None;
                }
                // SAFETY: buf is valid for writes of buf.len() bytes.
                let n = unsafe {
                    libc::syscall(
                        libc::SYS_getdents64,
                        self.fd.as_raw_fd(),
                        self.buf.as_mut_ptr(),
                        self.buf.len(),
                    )
                };
                if n < 0 {
                    self.eof = true;
                    return Some(Err(io::Error::last_os_error()));
                }
                if n == 0 {
                    self.eof = true;
                    return None;
                }
                self.pos = 0;
                self.end = n as usize;
            }
            // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
            let rec = &self.buf[self.pos..self.end];
            let ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap());
            let reclen = u16::from_ne_bytes(rec[16..18].try_into().unwrap()) as usize;
            let dtype = rec[18];
            let name_bytes = &rec[19..reclen];
            let nul = name_bytes
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_bytes.len());
            let name = &name_bytes[..nul];
            self.pos += reclen;
            if name == b"." || name == b".." {
                continue;
            }
            let kind = match dtype {
                libc::DT_REG => DirentType::File,
                libc::DT_DIR => DirentType::Dir,
                libc::DT_LNK => DirentType::Symlink,
                libc::DT_UNKNOWN => DirentType::Unknown,
                _ => DirentType::Special,
            };
            return Some(Ok(Dirent {
                ino,
                kind,
                name: CString::new(name).expect("no NUL inside a dirent name"),
            }));
        }
    }
}

/// Converts a dirent name to an `OsStr` for building display paths.
pub fn name_os(name: &CStr) -> &OsStr {
    OsStr::from_bytes(name.to_bytes())
}

/// `/proc/self/fd/N`: a path naming the open file `fd` (to reopen it, link it, or read where
/// it lives).
pub fn fd_path(fd: BorrowedFd<'_>) -> std::path::PathBuf {
    format!("/proc/self/fd/{}", fd.as_raw_fd()).into()
}

/// Data extents of `[off, end)` of a file, from `lseek(2)` with SEEK_DATA/SEEK_HOLE
/// (<https://man7.org/linux/man-pages/man2/lseek.2.html>, Linux 3.1). Holes are skipped, so a
/// sparse 1 TiB file with 1 MiB of data yields one 1 MiB extent. Filesystems without support
/// report the whole file as data, which is still correct.
pub fn data_extents(fd: BorrowedFd<'_>, off: u64, end: u64) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut pos = off;
    while pos < end {
        // SAFETY: no pointers involved.
        let d = unsafe { libc::lseek(fd.as_raw_fd(), pos as libc::off_t, libc::SEEK_DATA) };
        if d < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break; // no data after pos
            }
            return Err(e);
        }
        let d = d as u64;
        if d >= end {
            break;
        }
        // SAFETY: no pointers involved.
        let h = unsafe { libc::lseek(fd.as_raw_fd(), d as libc::off_t, libc::SEEK_HOLE) };
        if h < 0 {
            return Err(io::Error::last_os_error());
        }
        let h = (h as u64).min(end);
        out.push((d, h - d));
        pos = h;
    }
    Ok(out)
}

/// Direct-I/O alignment of an open file: `(memory alignment, file offset alignment)` in bytes,
/// from `statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN)`
/// (<https://man7.org/linux/man-pages/man2/statx.2.html>, Linux 6.1). `None` when the
/// filesystem does not support O_DIRECT on this file or the kernel predates the field.
pub fn dio_align(fd: BorrowedFd<'_>) -> Option<(u32, u32)> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: c"" is a valid C string, stx is valid for writes of a struct statx.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: statx succeeded; the struct was zeroed before, so every field is initialised.
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_mem_align == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// `int fallocate(int fd, int mode, off_t offset, off_t len)` with mode 0 —
/// <https://man7.org/linux/man-pages/man2/fallocate.2.html>. EOPNOTSUPP on filesystems without it.
pub fn fallocate(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: no pointers involved.
    cvt(unsafe { libc::fallocate(fd.as_raw_fd(), 0, off as libc::off_t, len as libc::off_t) })
        .map(drop)
}

/// `ssize_t copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len,
/// unsigned flags)` — <https://man7.org/linux/man-pages/man2/copy_file_range.2.html> (Linux 4.5).
/// In-kernel copy through the page cache (or a reflink/server-side copy where supported).
pub fn copy_file_range(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: usize,
) -> io::Result<usize> {
    let mut si = src_off as libc::loff_t;
    let mut di = dst_off as libc::loff_t;
    // SAFETY: the offsets are valid for reads and writes for the duration of the call.
    let r = unsafe {
        libc::copy_file_range(src.as_raw_fd(), &mut si, dst.as_raw_fd(), &mut di, len, 0)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// All extended attributes of an open file as (name, value) pairs, via flistxattr(2) and
/// fgetxattr(2) (<https://man7.org/linux/man-pages/man2/listxattr.2.html>). ENOTSUP yields none.
pub fn xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<(CString, Vec<u8>)>> {
    let mut names = vec![0u8; 4096];
    let n = loop {
        // SAFETY: names is valid for writes of names.len() bytes.
        let r = unsafe { libc::flistxattr(fd.as_raw_fd(), names.as_mut_ptr().cast(), names.len()) };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    };
    let mut out = Vec::new();
    for name in names[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let cname = CString::new(name).expect("xattr names have no interior NUL");
        let mut val = vec![0u8; 256];
        loop {
            // SAFETY: cname is a valid C string; val valid for writes of val.len() bytes.
            let r = unsafe {
                libc::fgetxattr(
                    fd.as_raw_fd(),
                    cname.as_ptr(),
                    val.as_mut_ptr().cast(),
                    val.len(),
                )
            };
            if r >= 0 {
                val.truncate(r as usize);
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                val.resize(val.len() * 8, 0);
                continue;
            }
            return Err(e);
        }
        out.push((cname, val));
    }
    Ok(out)
}

/// `int fsetxattr(int fd, const char *name, const void *value, size_t size, int flags)`.
pub fn set_xattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: name is a valid C string, value valid for reads of value.len() bytes.
    cvt(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

/// Opens (creating exclusively when `create` is Some(mode)) a file for writing, optionally
/// with O_DIRECT. `openat(2)` relative to AT_FDCWD.
pub fn open_write(path: &Path, create: Option<u32>, direct: bool) -> io::Result<OwnedFd> {
    let c = cstring(path)?;
    let mut flags = libc::O_WRONLY | libc::O_CLOEXEC;
    if create.is_some() {
        flags |= libc::O_CREAT | libc::O_EXCL;
    }
    if direct {
        flags |= libc::O_DIRECT;
    }
    // SAFETY: c is a valid C string.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags, create.unwrap_or(0) as libc::c_uint) })?;
    // SAFETY: fd was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open(dir, O_TMPFILE | O_WRONLY, mode)` — an unnamed regular file in `dir`'s filesystem
/// (<https://man7.org/linux/man-pages/man2/open.2.html>): it vanishes when closed unless
/// [`link_fd`] gives it a name, so a crash or an error never leaves a partial file behind.
/// EOPNOTSUPP (or EISDIR/EINVAL on old kernels) when the filesystem has no O_TMPFILE.
pub fn open_tmpfile(dir: &Path, mode: u32) -> io::Result<OwnedFd> {
    let c = cstring(dir)?;
    // SAFETY: c is a valid C string.
    let fd = cvt(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: fd was just returned by open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// 0: untried, 1: linkat(AT_EMPTY_PATH) works, 2: it does not (no CAP_DAC_READ_SEARCH).
static LINK_EMPTY_PATH: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Gives the open file `fd` (typically from [`open_tmpfile`]) the name `to`:
/// `linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH)`, which needs CAP_DAC_READ_SEARCH, else
/// `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, to, AT_SYMLINK_FOLLOW)`
/// (<https://man7.org/linux/man-pages/man2/linkat.2.html>). EEXIST when `to` exists.
pub fn link_fd(fd: BorrowedFd<'_>, to: &Path) -> io::Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let to = cstring(to)?;
    if LINK_EMPTY_PATH.load(Relaxed) != 2 {
        // SAFETY: both strings are valid C strings; fd is open.
        let r = unsafe {
            libc::linkat(
                fd.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        };
        if r == 0 {
            LINK_EMPTY_PATH.store(1, Relaxed);
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EPERM)) {
            return Err(e);
        }
        // ENOENT here means "not allowed" only while the target's directory exists.
        if LINK_EMPTY_PATH.load(Relaxed) == 1 {
            return Err(e);
        }
        LINK_EMPTY_PATH.store(2, Relaxed);
    }
    let proc = cstring(&fd_path(fd))?;
    // SAFETY: both strings are valid C strings.
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
    .map(drop)
}

/// Opens a file read-only with O_DIRECT (and O_NOATIME where allowed); O_NONBLOCK, so a
/// FIFO or device under the name never blocks the open.
pub fn open_read_direct(path: &Path) -> io::Result<OwnedFd> {
    let c = cstring(path)?;
    for extra in [libc::O_NOATIME, 0] {
        // SAFETY: c is a valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECT | libc::O_NONBLOCK | extra,
            )
        };
        if fd >= 0 {
            // SAFETY: fd was just returned by open and is owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if extra == 0 || e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    unreachable!()
}

/// `int syncfs(int fd)` — <https://man7.org/linux/man-pages/man2/syncfs.2.html>.
pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: no pointers involved.
    cvt(unsafe { libc::syncfs(fd.as_raw_fd()) }).map(drop)
}

/// One extent of a file as FIEMAP reports it: logical offset, physical offset, length (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
}

const FS_IOC_FIEMAP: libc::c_ulong = 0xC020660B;
const FIEMAP_EXTENT_LAST: u32 = 0x1;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
struct Fiemap {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtent; 128],
}

/// Physical layout of `[off, off+len)` of a file: `ioctl(fd, FS_IOC_FIEMAP, struct fiemap *)`
/// (<https://docs.kernel.org/filesystems/fiemap.html>, Linux 2.6.28). 128 extents per call.
/// Filesystems without FIEMAP fail with EOPNOTSUPP.
pub fn fiemap(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Vec<Extent>> {
    let mut out = Vec::new();
    let end = off.saturating_add(len);
    let mut start = off;
    loop {
        let mut fm = Box::new(Fiemap {
            fm_start: start,
            fm_length: end - start,
            fm_flags: 0,
            fm_mapped_extents: 0,
            fm_extent_count: 128,
            fm_reserved: 0,
            fm_extents: [FiemapExtent::default(); 128],
        });
        // SAFETY: fm is a valid struct fiemap with room for fm_extent_count extents.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_FIEMAP as _, &mut *fm as *mut Fiemap) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = fm.fm_mapped_extents as usize;
        if n == 0 {
            break;
        }
        let mut last = false;
        for e in &fm.fm_extents[..n] {
            out.push(Extent {
                logical: e.fe_logical,
                physical: e.fe_physical,
                length: e.fe_length,
            });
            last |= e.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        let l = fm.fm_extents[n - 1];
        start = l.fe_logical + l.fe_length;
        if last || start >= end {
            break;
        }
    }
    Ok(out)
}

/// Opens a file on the filesystem of `mount_fd` by inode number, with
/// `open_by_handle_at(2)` (<https://man7.org/linux/man-pages/man2/open_by_handle_at.2.html>,
/// Linux 2.6.39; needs CAP_DAC_READ_SEARCH) and a FILEID_INO32_GEN handle with generation 0,
/// which ext2/3/4 accept without checking the generation. Other filesystems may refuse (ESTALE,
/// EOPNOTSUPP). The returned descriptor is O_PATH-like read-only.
pub fn open_by_inode(mount_fd: BorrowedFd<'_>, ino: u64) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct Handle {
        handle_bytes: u32,
        handle_type: i32,
        ino: u32,
        generation: u32,
    }
    if ino > u32::MAX as u64 {
        return Err(io::Error::from_raw_os_error(libc::EOVERFLOW));
    }
    let mut h = Handle {
        handle_bytes: 8,
        handle_type: 1, // FILEID_INO32_GEN
        ino: ino as u32,
        generation: 0,
    };
    // SAFETY: h is laid out as struct file_handle with an 8-byte f_handle.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd.as_raw_fd(),
            &mut h as *mut Handle,
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// True when `fd` is on tmpfs, ramfs or hugetlbfs (`fstatfs(2)` f_type): shared-memory pages
/// that have no backing file and stay cached whatever is advised.
pub fn is_shmem(fd: BorrowedFd<'_>) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: st points to writable memory of the right size; fd is open.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstatfs succeeded and filled st.
    #[allow(clippy::unnecessary_cast)] // f_type is i64 on x86-64, not everywhere
    let t = unsafe { st.assume_init() }.f_type as i64;
    matches!(t, TMPFS_MAGIC | RAMFS_MAGIC | HUGETLBFS_MAGIC)
}

/// Size in bytes of a block device (`ioctl(fd, BLKGETSIZE64)`; `stat` says 0 for devices).
pub fn block_device_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer given.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) })?;
    Ok(size)
}

/// Opens `path` with O_WRONLY|O_TRUNC in a detached grandchild process and returns at once
/// (fork twice; the child is reaped here, the grandchild is adopted by init). For tracefs files
/// whose truncation waits for an RCU grace period: the caller does not wait. File descriptions
/// the caller holds (e.g. a lock) stay held until the grandchild exits.
pub fn truncate_detached(path: &Path) -> io::Result<()> {
    let c = cstring(path)?;
    // SAFETY: between fork and _exit the children only call async-signal-safe functions
    // (fork, close, open, _exit) on memory prepared before the first fork.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            if libc::fork() == 0 {
                for fd in 0..3 {
                    libc::close(fd);
                }
                let fd = libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC);
                libc::_exit(if fd < 0 { 1 } else { 0 });
            }
            libc::_exit(0);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    Ok(())
}

/// Tries to take an exclusive lock on `fd` without waiting: flock(LOCK_EX | LOCK_NB)
/// (<https://man7.org/linux/man-pages/man2/flock.2.html>). Ok(false) when someone holds it.
pub fn try_lock_exclusive(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: no pointers involved.
    match cvt(unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn dir_reader_lists_a_temp_dirs_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("c")).unwrap();
        let fd = open_path(
            dir.path(),
            OpenFlags {
                directory: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut got: Vec<(String, DirentType)> = DirReader::new(fd.as_fd())
            .map(|e| {
                let e = e.unwrap();
                let kind = match e.kind {
                    // DT_UNKNOWN: ask fstatat, as the walk does.
                    DirentType::Unknown => {
                        let st = fstatat(Some(fd.as_fd()), &e.name, false).unwrap();
                        if st.is_dir() {
                            DirentType::Dir
                        } else if st.is_symlink() {
                            DirentType::Symlink
                        } else {
                            DirentType::File
                        }
                    }
                    k => k,
                };
                (name_os(&e.name).to_string_lossy().into_owned(), kind)
            })
            .collect();
        got.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            got,
            vec![
                ("a".to_string(), DirentType::File),
                ("b".to_string(), DirentType::Dir),
                ("c".to_string(), DirentType::Symlink),
            ]
        );
    }

    #[test]
    fn stat_sees_size_and_kind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, [0u8; 3000]).unwrap();
        let st = stat_path(&p, true).unwrap();
        assert!(st.is_file() && !st.is_dir());
        assert_eq!(st.size, 3000);
        assert_eq!(st.kind(), "regular file");
        let fd = open_path(&p, OpenFlags::default()).unwrap();
        let st2 = fstat(fd.as_fd()).unwrap();
        assert_eq!((st2.dev, st2.ino), (st.dev, st.ino));
        assert_eq!(Stat::kind_of(libc::S_IFDIR), "directory");
    }
}
