//! The only module with `unsafe`: one thin, documented wrapper per system call, plus run-time
//! probes for what the kernel supports.
//!
//! Every wrapper returns `std::io::Result` with the raw OS error, so callers can name the path
//! and the syscall (`SysError`) when something fails. Nothing here allocates per page or holds
//! state beyond the file descriptors it is handed.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// Size of a page of the page cache, from `sysconf(_SC_PAGESIZE)`.
pub fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as u64
        } else {
            4096
        }
    })
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

// ---------------------------------------------------------------------------------------------
// cachestat(2)
// ---------------------------------------------------------------------------------------------

/// Page-cache state of a byte range of a file, as `struct cachestat` of cachestat(2).
/// Every field counts pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStat {
    pub cache: u64,
    pub dirty: u64,
    pub writeback: u64,
    pub evicted: u64,
    pub recently_evicted: u64,
}

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct RawCachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Syscall number of cachestat: 451 in the unified table every architecture uses since 5.x.
const SYS_CACHESTAT: libc::c_long = 451;

/// `int cachestat(unsigned int fd, struct cachestat_range *range, struct cachestat *cstat,
/// unsigned int flags)` — <https://man7.org/linux/man-pages/man2/cachestat.2.html>.
///
/// Added in Linux 6.5. `len == 0` means "to the end of the file". Fails with `ENOSYS` on older
/// kernels and, since the 6.14-era hardening, with `EPERM` for files the caller could neither
/// write nor owns (the same rule as mincore's).
pub fn cachestat(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<CacheStat> {
    let range = CachestatRange { off, len };
    let mut out = RawCachestat::default();
    // SAFETY: range and out are valid for the duration of the call and laid out as the kernel's
    // structs (five and two u64 fields, no padding).
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd() as libc::c_uint,
            &range as *const CachestatRange,
            &mut out as *mut RawCachestat,
            0 as libc::c_uint,
        )
    };
    cvt_long(r)?;
    Ok(CacheStat {
        cache: out.nr_cache,
        dirty: out.nr_dirty,
        writeback: out.nr_writeback,
        evicted: out.nr_evicted,
        recently_evicted: out.nr_recently_evicted,
    })
}

// ---------------------------------------------------------------------------------------------
// mmap + mincore(2), in bounded windows
// ---------------------------------------------------------------------------------------------

/// A read-only shared mapping of a file range, unmapped on drop. Private: the wrappers below
/// hand out only what they compute from it, never the memory.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    /// `mmap(NULL, len, PROT_READ, MAP_SHARED, fd, off)` —
    /// <https://man7.org/linux/man-pages/man2/mmap.2.html>.
    fn new(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Mapping> {
        // SAFETY: a fresh PROT_READ shared mapping of a file the caller holds open; it is never
        // dereferenced by pagewise, only passed to mincore/madvise/mlock and unmapped on drop.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off as libc::off_t,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            addr,
            len: len as usize,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// Largest window mapped at once by [`mincore_count`]: 1 GiB of file needs a 256 KiB vector.
pub const MINCORE_WINDOW: u64 = 1 << 30;

/// Counts resident pages of `[off, off+len)` of `fd` with `mmap(2)` + `mincore(2)`, one window
/// of at most [`MINCORE_WINDOW`] bytes at a time, so memory stays bounded for any file size.
/// `off` must be page aligned. `per_page`, when given, receives one bool per page.
///
/// `int mincore(void *addr, size_t length, unsigned char *vec)` —
/// <https://man7.org/linux/man-pages/man2/mincore.2.html>. Since Linux 5.2 mincore reports every
/// page as resident for files the caller could not write and does not own: callers must check
/// [`mincore_is_truthful`] first.
pub fn mincore_count(
    fd: BorrowedFd<'_>,
    off: u64,
    len: u64,
    mut per_page: Option<&mut Vec<bool>>,
) -> io::Result<u64> {
    let page = page_size();
    let mut vec: Vec<u8> = Vec::new();
    let mut done = 0u64;
    let mut resident = 0u64;
    while done < len {
        let win = (len - done).min(MINCORE_WINDOW);
        let map = Mapping::new(fd, off + done, win)?;
        let pages = win.div_ceil(page) as usize;
        vec.clear();
        vec.resize(pages, 0);
        // SAFETY: map spans `win` bytes of a live mapping and vec has one byte per page.
        if unsafe { libc::mincore(map.addr, map.len, vec.as_mut_ptr()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        for b in &vec {
            let present = b & 1 == 1;
            resident += present as u64;
            if let Some(v) = per_page.as_deref_mut() {
                v.push(present);
            }
        }
        done += win;
    }
    Ok(resident)
}

/// True when mincore(2) would tell the truth about this file for the calling process: the
/// kernel's `can_do_mincore()` requires the caller to own the inode (or have CAP_FOWNER) or to
/// be able to open it for writing. Otherwise it reports every page resident.
pub fn mincore_is_truthful(dir: BorrowedFd<'_>, name: &CStr, st: &Stat) -> bool {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 || st.uid == euid {
        return true;
    }
    // SAFETY: name is a valid C string and dir a valid descriptor.
    unsafe { libc::faccessat(dir.as_raw_fd(), name.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

// ---------------------------------------------------------------------------------------------
// Advice, readahead, writeback
// ---------------------------------------------------------------------------------------------

/// Advice values for [`fadvise`].
#[derive(Debug, Clone, Copy)]
pub enum Advice {
    Normal,
    Sequential,
    Random,
    WillNeed,
    DontNeed,
    NoReuse,
}

/// `int posix_fadvise(int fd, off_t offset, off_t len, int advice)` —
/// <https://man7.org/linux/man-pages/man2/posix_fadvise.2.html>. `len == 0` means to the end.
/// DONTNEED drops clean, unmapped, unlocked pages; it starts (but does not wait for) writeback
/// of dirty ones, which therefore stay.
pub fn fadvise(fd: BorrowedFd<'_>, off: u64, len: u64, advice: Advice) -> io::Result<()> {
    let a = match advice {
        Advice::Normal => libc::POSIX_FADV_NORMAL,
        Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
        Advice::Random => libc::POSIX_FADV_RANDOM,
        Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
        Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
        Advice::NoReuse => libc::POSIX_FADV_NOREUSE,
    };
    // SAFETY: no pointers involved.
    let r =
        unsafe { libc::posix_fadvise(fd.as_raw_fd(), off as libc::off_t, len as libc::off_t, a) };
    // posix_fadvise returns the error number instead of setting errno.
    if r != 0 {
        Err(io::Error::from_raw_os_error(r))
    } else {
        Ok(())
    }
}

/// Flags of sync_file_range(2).
pub const SFR_WAIT_BEFORE: u32 = libc::SYNC_FILE_RANGE_WAIT_BEFORE;
pub const SFR_WRITE: u32 = libc::SYNC_FILE_RANGE_WRITE;
pub const SFR_WAIT_AFTER: u32 = libc::SYNC_FILE_RANGE_WAIT_AFTER;

/// `int sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags)` —
/// <https://man7.org/linux/man-pages/man2/sync_file_range.2.html> (Linux 2.6.17).
/// Writes back data pages only — no metadata, no journal commit — which is what eviction needs
/// (clean pages), and is far cheaper per file than fdatasync. `nbytes == 0` means to the end.
pub fn sync_file_range(fd: BorrowedFd<'_>, off: u64, len: u64, flags: u32) -> io::Result<()> {
    // SAFETY: no pointers involved.
    cvt(unsafe {
        libc::sync_file_range(
            fd.as_raw_fd(),
            off as libc::off64_t,
            len as libc::off64_t,
            flags,
        )
    })
    .map(drop)
}

/// `ssize_t pread(int fd, void *buf, size_t count, off_t offset)` —
/// <https://man7.org/linux/man-pages/man2/pread.2.html>. Returns bytes read (0 at EOF);
/// retries on EINTR.
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let r = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                off as libc::off_t,
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Files and directories
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Locking pages in memory
// ---------------------------------------------------------------------------------------------

/// A read-only shared mapping of a file range locked with mlock(2); unlocked and unmapped on drop.
pub struct LockedMapping {
    _map: Mapping,
}

// SAFETY: the mapping is never dereferenced by pagewise; it only pins pages. Moving the handle
// between threads is harmless.
unsafe impl Send for LockedMapping {}
unsafe impl Sync for LockedMapping {}

/// Maps `[off, off+len)` of `fd` (MAP_SHARED, PROT_READ) and locks it with
/// `int mlock(const void *addr, size_t len)` (<https://man7.org/linux/man-pages/man2/mlock.2.html>).
/// Fails with ENOMEM past RLIMIT_MEMLOCK (unprivileged) or vm.max_map_count, EPERM without
/// CAP_IPC_LOCK and a zero limit. The error says which call failed.
pub fn mmap_lock(
    fd: BorrowedFd<'_>,
    off: u64,
    len: u64,
) -> Result<LockedMapping, (&'static str, io::Error)> {
    let map = Mapping::new(fd, off, len).map_err(|e| ("mmap", e))?;
    // SAFETY: locks exactly the live mapping created above.
    if unsafe { libc::mlock(map.addr, map.len) } < 0 {
        return Err(("mlock", io::Error::last_os_error()));
    }
    Ok(LockedMapping { _map: map })
}

// ---------------------------------------------------------------------------------------------
// Process-wide helpers
// ---------------------------------------------------------------------------------------------

/// The effective user id, from geteuid(2).
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Raises the soft RLIMIT_NOFILE to the hard limit, so batches of open files fit.
/// Returns the new soft limit.
pub fn raise_nofile_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is valid for reads and writes.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) != 0 {
            return 1024;
        }
        if rl.rlim_cur < rl.rlim_max {
            let want = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
    }
    rl.rlim_cur
}

/// The soft RLIMIT_MEMLOCK in bytes (`u64::MAX` when unlimited).
pub fn memlock_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is valid for writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return 0;
    }
    if rl.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        rl.rlim_cur
    }
}

/// Blocks SIGINT and SIGTERM in the calling thread (and threads it spawns later), then waits for
/// one of them or for `timeout`. Returns the signal number, or None on timeout.
/// Uses `sigtimedwait(2)` (<https://man7.org/linux/man-pages/man2/sigtimedwait.2.html>).
pub fn wait_for_interrupt(timeout: Option<Duration>) -> Option<i32> {
    // SAFETY: set is initialised by sigemptyset before use; all pointers are to locals.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        let mut set = set.assume_init();
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        loop {
            let r = match timeout {
                Some(t) => {
                    let ts = libc::timespec {
                        tv_sec: t.as_secs() as libc::time_t,
                        tv_nsec: t.subsec_nanos() as libc::c_long,
                    };
                    libc::sigtimedwait(&set, std::ptr::null_mut(), &ts)
                }
                None => libc::sigwaitinfo(&set, std::ptr::null_mut()),
            };
            if r > 0 {
                return Some(r);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                return None;
            }
            // EINTR: try again (timeout restarts; acceptable for a hold loop).
        }
    }
}

/// Current number of memory mappings of this process (lines of /proc/self/maps) and the
/// system's vm.max_map_count, for a clear message before mapping thousands of files.
pub fn map_count_and_limit() -> (u64, u64) {
    let used = std::fs::read("/proc/self/maps")
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0);
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65530);
    (used, limit)
}

/// `/proc/self/fd/N`: a path naming the open file `fd` (to reopen it, link it, or read where
/// it lives).
pub fn fd_path(fd: BorrowedFd<'_>) -> std::path::PathBuf {
    format!("/proc/self/fd/{}", fd.as_raw_fd()).into()
}

/// Whether this kernel has cachestat(2): probes it on a descriptor of this program's own binary.
/// EPERM counts as present (the call exists; it refused this file).
pub fn probe_cachestat() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| match std::fs::File::open("/proc/self/exe") {
        Ok(f) => {
            use std::os::fd::AsFd;
            !matches!(cachestat(f.as_fd(), 0, 0), Err(e) if e.raw_os_error() == Some(libc::ENOSYS))
        }
        Err(_) => true,
    })
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

// ---------------------------------------------------------------------------------------------
// Copy support: statx DIOALIGN, aligned buffers, preadv2/pwritev2 flags, fallocate, xattrs
// ---------------------------------------------------------------------------------------------

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

/// A heap buffer aligned for O_DIRECT. Zero-filled on creation.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes aligned to `align` (a power of two, at least 512 is sensible).
    pub fn new(len: usize, align: usize) -> Self {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), align.max(1).next_power_of_two())
                .expect("valid buffer layout");
        // SAFETY: layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }
    pub fn len(&self) -> usize {
        self.layout.size()
    }
    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this exact layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// preadv2/pwritev2 flag: uncached buffered I/O (Linux 6.14); EOPNOTSUPP where the filesystem
/// lacks it.
pub const RWF_DONTCACHE: i32 = 0x80;

/// `ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)` —
/// <https://man7.org/linux/man-pages/man2/preadv2.2.html> (Linux 4.6), one buffer. Retries EINTR.
pub fn preadv2(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64, flags: i32) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    loop {
        // SAFETY: iov describes buf, valid for writes for the duration of the call.
        let r = unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, off as libc::off_t, flags) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)` —
/// <https://man7.org/linux/man-pages/man2/pwritev2.2.html>, one buffer. Retries EINTR.
pub fn pwritev2(fd: BorrowedFd<'_>, buf: &[u8], off: u64, flags: i32) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    loop {
        // SAFETY: iov describes buf, valid for reads; the kernel does not write through it.
        let r = unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, off as libc::off_t, flags) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
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

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The last signal received by [`on_interrupt`] (0: none).
static LAST_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// The child that received signals are forwarded to (0: none yet).
static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// A signal sent with kill(2) before [`forward_signals_to`] named the child (0: none).
static FORWARD_PENDING: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// `si_code` of signals the kernel generates itself, such as the terminal's SIGINT/SIGQUIT
/// (sent to the whole foreground process group, so the child has it already).
const SI_KERNEL: i32 = 0x80;

extern "C" fn on_interrupt(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    use std::sync::atomic::Ordering::SeqCst;
    INTERRUPTED.store(true, SeqCst);
    LAST_SIGNAL.store(sig, SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_code }
    };
    let child = FORWARD_TO.load(SeqCst);
    // The terminal's signals reach its whole foreground process group, the command included,
    // unless the command left the group (setsid) — then it is sent here. A hangup goes to the
    // session leader, which pagewise may be: always passed on.
    // SAFETY: getpgid/getpgrp are plain syscalls without pointers.
    if code == SI_KERNEL
        && sig != libc::SIGHUP
        && (child <= 0 || unsafe { libc::getpgid(child) == libc::getpgrp() })
    {
        return;
    }
    // Stored first, taken by whoever sees both: this handler, or forward_signals_to naming
    // the child at the same moment. The signal is sent once, never lost.
    FORWARD_PENDING.store(sig, SeqCst);
    let child = FORWARD_TO.load(SeqCst);
    if child > 0 {
        let pending = FORWARD_PENDING.swap(0, SeqCst);
        if pending > 0 {
            // SAFETY: kill(2) is async-signal-safe; no pointers.
            unsafe { libc::kill(child, pending) };
        }
    }
}

fn install_handlers(sigs: &[libc::c_int]) {
    for &sig in sigs {
        // SAFETY: sa is fully initialised (zeroed, then handler, flags and mask set); the
        // handler only stores to atomics and calls kill(2), which are async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_interrupt as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Installs SIGINT/SIGTERM handlers that only set a flag (async-signal-safe), so long
/// operations can stop between I/Os and clean up (never leave a half file under a final name).
/// Returns the flag. `sigaction(2)`: <https://man7.org/linux/man-pages/man2/sigaction.2.html>.
pub fn interrupt_flag() -> &'static std::sync::atomic::AtomicBool {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| install_handlers(&[libc::SIGINT, libc::SIGTERM]));
    &INTERRUPTED
}

/// Signals a supervisor (`record`, `run`) survives and forwards to its command.
pub const FORWARDED_SIGNALS: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Makes this process survive SIGINT, SIGTERM, SIGHUP and SIGQUIT; call before starting the
/// command, then name it with [`forward_signals_to`]. Signals sent with kill(2) are forwarded
/// to the command as they are; those the terminal sends (si_code SI_KERNEL) reach the whole
/// foreground process group, the command included, and are not sent twice.
pub fn supervise_signals() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    let _ = interrupt_flag();
    INSTALLED.get_or_init(|| install_handlers(&FORWARDED_SIGNALS));
}

/// Stops forwarding (call once the child is reaped: its PID may be reused).
pub fn stop_forwarding() {
    FORWARD_TO.store(0, std::sync::atomic::Ordering::SeqCst);
}

/// Names the child that signals received from now on are forwarded to; one received while
/// it was being started is sent now.
pub fn forward_signals_to(pid: u32) {
    use std::sync::atomic::Ordering::SeqCst;
    FORWARD_TO.store(pid as i32, SeqCst);
    let pending = FORWARD_PENDING.swap(0, SeqCst);
    if pending > 0 {
        let _ = kill(pid, pending);
    }
}

/// The last of the handled signals received (None: none).
pub fn last_signal() -> Option<i32> {
    match LAST_SIGNAL.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// `MADV_POPULATE_READ` (Linux 5.14): fault in page tables for a range, reading what is missing.
const MADV_POPULATE_READ: libc::c_int = 22;

/// Waits until `[off, off+len)` of `fd` is in the page cache and up to date, without copying
/// a byte to user space: maps the range (MAP_SHARED, PROT_READ) and asks the kernel to populate
/// it with `madvise(MADV_POPULATE_READ)` (<https://man7.org/linux/man-pages/man2/madvise.2.html>,
/// Linux 5.14), then unmaps. Pages not yet read are read (with readahead); pages under I/O are
/// waited for. Unlike a read() into a buffer, the data is never touched by the CPU, which matters
/// on virtual machines where the first touch of a fresh page costs a hypervisor fault.
///
/// With `huge`, the mapping is first marked `madvise(MADV_HUGEPAGE)`: the fault path then reads
/// ahead in PMD-sized (2 MiB) folios (`do_sync_mmap_readahead`, VM_HUGEPAGE) instead of the
/// 4 KiB folios that fadvise(WILLNEED)/readahead(2) allocate (`force_page_cache_ra`). Measured
/// here on a cold 4 GiB ext4 file: 1.4 s of system time with 4 KiB folios, 0.05 s with 2 MiB
/// ones. Only useful where [`thp_file_readahead`] says so; harmless elsewhere.
/// `off` must be page aligned. Returns EINVAL on kernels without MADV_POPULATE_READ.
pub fn populate_read(fd: BorrowedFd<'_>, off: u64, len: u64, huge: bool) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let map = Mapping::new(fd, off, len)?;
    if huge {
        // SAFETY: addr/len describe the live mapping created above. A failure (THP not built
        // in) only loses the speed-up, so it is ignored.
        unsafe { libc::madvise(map.addr, map.len, libc::MADV_HUGEPAGE) };
    }
    loop {
        // SAFETY: addr/len describe the live mapping created above.
        let r = unsafe { libc::madvise(map.addr, map.len, MADV_POPULATE_READ) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether mappings marked MADV_HUGEPAGE get huge-folio readahead: transparent huge pages are
/// built in and not set to `never` (`/sys/kernel/mm/transparent_hugepage/enabled`, which shows
/// the active mode in brackets). Probed once.
pub fn thp_file_readahead() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map(|s| !s.contains("[never]"))
            .unwrap_or(false)
    })
}

// ---------------------------------------------------------------------------------------------
// Tracing support: FIEMAP, open_by_handle_at, a child that waits before exec
// ---------------------------------------------------------------------------------------------

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

/// Makes this process the subreaper of what it starts (`prctl(PR_SET_CHILD_SUBREAPER)`,
/// Linux 3.4): descendants orphaned by the command are reparented here, not to init, so they
/// can be found with [`children_of`].
pub fn become_subreaper() {
    // SAFETY: no pointers; the flag only changes who adopts orphans.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Processes whose parent is `pid` (from /proc/PID/stat), zombies excluded.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for ent in dir.flatten() {
        let Some(child) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let state = f.next();
        let ppid = f.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) && state != Some("Z") {
            out.push(child);
        }
    }
    out
}

/// Sends `sig` to `pid` (`kill(2)`).
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    // SAFETY: no pointers involved.
    cvt(unsafe { libc::kill(pid as libc::pid_t, sig) }).map(drop)
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

/// Waits up to `timeout_ms` for `fd` to become readable: poll(2) with POLLIN
/// (<https://man7.org/linux/man-pages/man2/poll.2.html>). Ok(true) when readable.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: p is one valid pollfd for the duration of the call.
    let n = cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) })?;
    Ok(n > 0)
}

/// `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)` (<https://man7.org/linux/man-pages/man2/eventfd.2.html>):
/// a descriptor that [`eventfd_signal`] makes readable, to wake a thread in poll.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers involved.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: fd was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes an [`eventfd`] readable (adds 1 to its counter).
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64.
    cvt(unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) as libc::c_int })
        .map(drop)
}

/// Waits up to `timeout_ms` for any of `fds` to become readable: poll(2) with POLLIN.
pub fn poll_any_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<bool> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: p holds p.len() valid pollfds for the duration of the call.
    let n = cvt(unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) })?;
    Ok(n > 0)
}

/// Mounts tracefs at `target`: `mount("nodev", target, "tracefs", 0, NULL)`
/// (<https://man7.org/linux/man-pages/man2/mount.2.html>; needs CAP_SYS_ADMIN).
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    let t = cstring(target)?;
    // SAFETY: all strings are valid C strings; data is NULL.
    cvt(unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            t.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// CLOCK_MONOTONIC in nanoseconds (`clock_gettime(2)`), the clock of tracefs' `mono` trace clock.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid for writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ---------------------------------------------------------------------------------------------
// io_uring: many reads in flight from one thread, submitted in batches
// ---------------------------------------------------------------------------------------------

/// One read for [`uring_read_all`]: descriptor, offset, length.
#[derive(Debug, Clone, Copy)]
pub struct ReadReq {
    pub fd: RawFd,
    pub off: u64,
    pub len: u32,
}

/// Whether io_uring can be set up here (Linux 5.1+, not disabled by sysctl or seccomp).
pub fn probe_io_uring() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| io_uring::IoUring::new(2).is_ok())
}

/// Reads every request with up to `depth` in flight through one io_uring
/// (<https://man7.org/linux/man-pages/man7/io_uring.7.html>): submissions go to the kernel in
/// batches — one system call and one device notification for many reads, where a thread per
/// read pays both per request. Buffers (`depth` of `max_len` bytes, 4 KiB aligned, so O_DIRECT
/// descriptors work) are allocated and touched before `ready` is called; the clock should start
/// there. Returns per-request results (bytes read or the error), in request order.
pub fn uring_read_all(
    reqs: &[ReadReq],
    depth: usize,
    max_len: usize,
    ready: impl FnOnce(),
) -> io::Result<Vec<io::Result<usize>>> {
    use io_uring::{opcode, types, IoUring};
    let depth = depth.clamp(1, 4096);
    let mut ring = IoUring::new(depth.next_power_of_two() as u32)?;
    let mut bufs: Vec<AlignedBuf> = (0..depth)
        .map(|_| {
            let mut b = AlignedBuf::new(max_len.max(4096), 4096);
            b.fill(1);
            b
        })
        .collect();
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut slot_of: Vec<usize> = vec![0; depth];
    let mut results: Vec<io::Result<usize>> = Vec::with_capacity(reqs.len());
    results.resize_with(reqs.len(), || Ok(0));
    let mut next = 0usize;
    let mut in_flight = 0usize;
    ready();
    while next < reqs.len() || in_flight > 0 {
        {
            let mut sq = ring.submission();
            while next < reqs.len() {
                let Some(slot) = free.pop() else { break };
                let r = reqs[next];
                let len = (r.len as usize).min(bufs[slot].len());
                let entry = opcode::Read::new(types::Fd(r.fd), bufs[slot].as_mut_ptr(), len as u32)
                    .offset(r.off)
                    .build()
                    .user_data(((next as u64) << 16) | slot as u64);
                // SAFETY: the buffer stays alive and unused by anyone else until this entry's
                // completion is reaped below (the slot is only returned to `free` then).
                if unsafe { sq.push(&entry) }.is_err() {
                    free.push(slot);
                    break;
                }
                slot_of[slot] = next;
                next += 1;
                in_flight += 1;
            }
        }
        ring.submit_and_wait(1)?;
        for cqe in ring.completion() {
            let slot = (cqe.user_data() & 0xffff) as usize;
            let idx = (cqe.user_data() >> 16) as usize;
            debug_assert_eq!(slot_of[slot], idx);
            results[idx] = if cqe.result() < 0 {
                Err(io::Error::from_raw_os_error(-cqe.result()))
            } else {
                Ok(cqe.result() as usize)
            };
            free.push(slot);
            in_flight -= 1;
        }
    }
    Ok(results)
}

/// An io_uring kept by one thread for batches of reads into the caller's buffers.
pub struct ReadRing {
    ring: io_uring::IoUring,
}

impl ReadRing {
    /// A ring with room for `entries` reads per batch.
    pub fn new(entries: u32) -> io::Result<ReadRing> {
        Ok(ReadRing {
            ring: io_uring::IoUring::new(entries.next_power_of_two())?,
        })
    }

    /// Issues one read per request — descriptor, offset, buffer — all in one submission, and
    /// waits for all of them. Buffered reads of uncached data start their disk I/O during the
    /// submission, under one block plug: one device notification for the batch, and adjacent
    /// requests merged. `rw_flags` are preadv2 flags (e.g. [`RWF_DONTCACHE`]). Results (bytes
    /// read, possibly short, or the error) are in request order. Batches larger than the
    /// ring are split.
    pub fn read_batch(
        &mut self,
        reqs: &mut [(BorrowedFd<'_>, u64, &mut [u8])],
        rw_flags: i32,
    ) -> io::Result<Vec<io::Result<usize>>> {
        use io_uring::{opcode, types};
        let mut results: Vec<io::Result<usize>> = Vec::with_capacity(reqs.len());
        let cap = self.ring.params().sq_entries() as usize;
        for (base, part) in reqs.chunks_mut(cap).enumerate().map(|(i, p)| (i * cap, p)) {
            results.resize_with(base + part.len(), || Ok(0));
            {
                let mut sq = self.ring.submission();
                for (i, (fd, off, buf)) in part.iter_mut().enumerate() {
                    let len = buf.len().min(u32::MAX as usize) as u32;
                    let e = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf.as_mut_ptr(), len)
                        .offset(*off)
                        .rw_flags(rw_flags)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: each buffer is borrowed mutably for this whole call and every
                    // submitted entry is reaped below before it returns; the ring has room
                    // for `cap` entries and is empty here.
                    unsafe { sq.push(&e) }.expect("ring has room for the part");
                }
            }
            let mut left = part.len();
            while left > 0 {
                match self.ring.submit_and_wait(left) {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                        ) => {}
                    Err(e) => {
                        // Reads in flight would write into buffers the caller is about to
                        // free: then nothing safe is left to do but stop.
                        if left > self.ring.submission().len() {
                            eprintln!("pagewise: io_uring wait failed with reads in flight: {e}");
                            std::process::abort();
                        }
                        return Err(e);
                    }
                }
                for cqe in self.ring.completion() {
                    let i = cqe.user_data() as usize;
                    results[base + i] = if cqe.result() < 0 {
                        Err(io::Error::from_raw_os_error(-cqe.result()))
                    } else {
                        Ok(cqe.result() as usize)
                    };
                    left -= 1;
                }
            }
        }
        Ok(results)
    }
}

/// Restores the default SIGPIPE action, so `pagewise ... | head` ends quietly like other
/// Unix tools instead of reporting EPIPE (Rust ignores SIGPIPE by default).
pub fn default_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

// ---------------------------------------------------------------------------------------------
// perf_event_open: kernel tracepoints into per-CPU ring buffers
// ---------------------------------------------------------------------------------------------

/// Bytes of `struct perf_event_attr` we pass (PERF_ATTR_SIZE_VER7).
const PERF_ATTR_SIZE: usize = 128;
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// sample_type bits: PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW.
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_RAW: u64 = 1 << 10;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// ioctls: _IO('$', 0), _IO('$', 1), _IO('$', 5).
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// Record types in the ring.
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_SAMPLE: u32 = 9;

/// Opens a perf event counting kernel tracepoint `id` (from tracefs `events/SYS/NAME/id`) for
/// the calling thread on `cpu`, sampling every hit with the thread id, a CLOCK_MONOTONIC time
/// and the tracepoint's raw record: `perf_event_open(2)`
/// (<https://man7.org/linux/man-pages/man2/perf_event_open.2.html>). With `inherit`, every
/// thread and process created afterwards by this thread (and theirs) is counted too, into this
/// event's ring buffer. The ring's reader is woken when `wakeup_bytes` are waiting, or at every
/// sample with None. The event counts from now on.
pub fn perf_tracepoint_open(
    id: u64,
    cpu: i32,
    inherit: bool,
    wakeup_bytes: Option<u32>,
) -> io::Result<OwnedFd> {
    let mut attr = [0u8; PERF_ATTR_SIZE];
    let put32 =
        |a: &mut [u8], off: usize, v: u32| a[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    let put64 =
        |a: &mut [u8], off: usize, v: u64| a[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    put32(&mut attr, 0, PERF_TYPE_TRACEPOINT);
    put32(&mut attr, 4, PERF_ATTR_SIZE as u32);
    put64(&mut attr, 8, id);
    put64(&mut attr, 16, 1); // sample_period: every hit
    put64(
        &mut attr,
        24,
        PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
    );
    // Flags: inherit (bit 1), watermark (bit 14: wake up by bytes), use_clockid (bit 25).
    let mut flags: u64 = 1 << 25;
    if inherit {
        flags |= 1 << 1;
    }
    if wakeup_bytes.is_some() {
        flags |= 1 << 14;
    }
    put64(&mut attr, 40, flags);
    // wakeup_watermark (bytes) with the watermark flag, else wakeup_events.
    put32(&mut attr, 48, wakeup_bytes.unwrap_or(1).max(1));
    put32(&mut attr, 92, libc::CLOCK_MONOTONIC as u32); // clockid
                                                        // SAFETY: attr is a valid, fully initialised perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as libc::pid_t,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by perf_event_open and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `fd`'s samples into the ring buffer of `target` (same CPU):
/// `ioctl(PERF_EVENT_IOC_SET_OUTPUT)`.
pub fn perf_set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both descriptors are open perf events; the argument is a descriptor number.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_SET_OUTPUT,
            target.as_raw_fd(),
        )
    })
    .map(drop)
}

/// Stops an event (and its inherited children) from counting: `ioctl(PERF_EVENT_IOC_DISABLE)`.
pub fn perf_disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fd is an open perf event; the ioctl takes no argument.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_DISABLE, 0) }).map(drop)
}

/// A perf event's ring buffer, mapped: one metadata page (`struct perf_event_mmap_page`)
/// then 2^n data pages the kernel writes records into.
pub struct PerfRing {
    base: *mut u8,
    len: usize,
    /// Scratch for a record that wraps around the end of the data area.
    wrap: Vec<u8>,
}

// SAFETY: the mapping is owned by this value alone; the kernel is the only other writer and
// synchronisation with it goes through data_head/data_tail with acquire/release ordering.
unsafe impl Send for PerfRing {}

impl PerfRing {
    /// Maps `data_pages` (a power of two) of ring for the perf event `fd`.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize) -> io::Result<PerfRing> {
        let len = (data_pages + 1) * page_size() as usize;
        // SAFETY: a fresh shared mapping of the event's ring; checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(PerfRing {
            base: p.cast(),
            len,
            wrap: Vec::new(),
        })
    }

    /// Hands every complete record waiting in the ring to `f` as (type, body without the
    /// 8-byte header), then frees their space for the kernel.
    pub fn drain(&mut self, mut f: impl FnMut(u32, &[u8])) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let page = page_size() as usize;
        // SAFETY: the metadata page is mapped for the life of self; data_head and data_tail
        // are naturally aligned u64s at offsets 1024 and 1032 of struct perf_event_mmap_page,
        // read with acquire (head: the kernel's writes before it are visible) and written with
        // release (tail: our reads are done before the kernel may overwrite).
        let (head_a, tail_a, data, size) = unsafe {
            let head = &*(self.base.add(1024) as *const AtomicU64);
            let tail = &*(self.base.add(1032) as *const AtomicU64);
            let data = std::slice::from_raw_parts(self.base.add(page), self.len - page);
            (head, tail, data, self.len - page)
        };
        let head = head_a.load(Ordering::Acquire);
        let mut tail = tail_a.load(Ordering::Relaxed);
        while tail + 8 <= head {
            let at = (tail % size as u64) as usize;
            let hdr = |i: usize| data[(at + i) % size];
            let typ = u32::from_ne_bytes([hdr(0), hdr(1), hdr(2), hdr(3)]);
            let rsize = u16::from_ne_bytes([hdr(6), hdr(7)]) as usize;
            if rsize < 8 || tail + rsize as u64 > head {
                break;
            }
            let start = (at + 8) % size;
            let n = rsize - 8;
            if start + n <= size {
                f(typ, &data[start..start + n]);
            } else {
                self.wrap.clear();
                self.wrap.extend_from_slice(&data[start..]);
                self.wrap.extend_from_slice(&data[..n - (size - start)]);
                f(typ, &self.wrap);
            }
            tail += rsize as u64;
        }
        tail_a.store(tail, Ordering::Release);
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: base/len describe the mapping made in map(), unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// CPUs that are online, from /sys/devices/system/cpu/online ("0-3,6"); [0..n) if unreadable.
pub fn online_cpus() -> Vec<i32> {
    let mut v = Vec::new();
    if let Ok(s) = std::fs::read_to_string("/sys/devices/system/cpu/online") {
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                v.extend(a..=b);
            }
        }
    }
    if v.is_empty() {
        // SAFETY: sysconf has no memory-safety preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
        v.extend(0..n as i32);
    }
    v
}

/// Starts a detached process (double fork, own session) that keeps the descriptors `keep`
/// open for `secs` seconds, then exits; every other descriptor is closed in it (close_range),
/// so no pipe a caller waits on stays open. Used to keep perf events — and so their
/// tracepoints' registration — alive after this process is done: the last close of a
/// tracepoint's perf events waits for an RCU grace period (tens of ms) under the kernel's
/// event lock, which a recording started right after would wait for. Returns once the
/// grandchild exists.
pub fn linger_detached(keep: &[BorrowedFd<'_>], secs: u32) -> io::Result<()> {
    let mut keep: Vec<libc::c_uint> = keep.iter().map(|f| f.as_raw_fd() as libc::c_uint).collect();
    keep.sort_unstable();
    keep.dedup();
    // SAFETY: between fork and _exit the children only call async-signal-safe functions
    // (fork, setsid, close_range, nanosleep, _exit) on memory prepared before the first fork.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            libc::setsid();
            if libc::fork() == 0 {
                let mut from: libc::c_uint = 0;
                for &k in &keep {
                    if k > from {
                        libc::syscall(libc::SYS_close_range, from, k - 1, 0);
                    }
                    from = k + 1;
                }
                libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0);
                let ts = libc::timespec {
                    tv_sec: secs as libc::time_t,
                    tv_nsec: 0,
                };
                libc::nanosleep(&ts, std::ptr::null_mut());
                libc::_exit(0);
            }
            libc::_exit(0);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    Ok(())
}
