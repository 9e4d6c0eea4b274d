//! Page-cache state and control: cachestat(2), mmap(2) + mincore(2), posix_fadvise(2),
//! sync_file_range(2), madvise(2) `MADV_POPULATE_READ`, and the transparent-huge-page setting
//! readahead depends on.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use super::{cvt, cvt_long, page_size, Stat};

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

/// A read-only shared mapping of a file range, unmapped on drop. Private: the wrappers below
/// hand out only what they compute from it, never the memory.
pub(super) struct Mapping {
    pub(super) addr: *mut libc::c_void,
    pub(super) len: usize,
}

impl Mapping {
    /// `mmap(NULL, len, PROT_READ, MAP_SHARED, fd, off)` —
    /// <https://man7.org/linux/man-pages/man2/mmap.2.html>.
    pub(super) fn new(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Mapping> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn cachestat_and_mincore_see_the_pages_just_written() {
        if !super::super::probe_cachestat() {
            return; // kernel before 6.5
        }
        let page = page_size();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 4 * page as usize]).unwrap();
        let cs = cachestat(f.as_fd(), 0, 0).unwrap();
        assert_eq!(cs.cache, 4, "{cs:?}");
        let mut per_page = Vec::new();
        let resident = mincore_count(f.as_fd(), 0, 4 * page, Some(&mut per_page)).unwrap();
        assert_eq!(resident, 4);
        assert_eq!(per_page, vec![true; 4]);
    }

    #[test]
    fn advice_and_writeback_accept_a_regular_file() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[1u8; 8192]).unwrap();
        sync_file_range(
            f.as_fd(),
            0,
            0,
            SFR_WAIT_BEFORE | SFR_WRITE | SFR_WAIT_AFTER,
        )
        .unwrap();
        for a in [Advice::Sequential, Advice::WillNeed, Advice::Normal] {
            fadvise(f.as_fd(), 0, 0, a).unwrap();
        }
    }
}
