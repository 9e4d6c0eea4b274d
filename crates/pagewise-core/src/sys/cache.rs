//! Page-cache state and control: cachestat(2), mmap(2) + mincore(2), posix_fadvise(2),
//! sync_file_range(2), madvise(2) `MADV_POPULATE_READ`.
//!
//! rustix has fadvise, mmap/munmap, madvise and faccessat; cachestat, mincore and
//! sync_file_range are own wrappers over libc.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::num::NonZeroU64;
use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::mm::{MapFlags, ProtFlags};

use super::{cvt, cvt_long, page_size, Stat};

/// Page-cache state of a byte range of a file, as `struct cachestat` of cachestat(2).
/// Every field counts pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStat {
    /// Pages in the page cache (`nr_cache`).
    pub cache: u64,
    /// Cached pages that are dirty (`nr_dirty`).
    pub dirty: u64,
    /// Cached pages under writeback (`nr_writeback`).
    pub writeback: u64,
    /// Pages evicted from the cache whose shadow entries remain (`nr_evicted`).
    pub evicted: u64,
    /// Evicted pages that would still be in memory had they not been evicted
    /// (`nr_recently_evicted`, the workingset's refault distance).
    pub recently_evicted: u64,
}

/// `struct cachestat_range` of `<linux/mman.h>`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `<linux/mman.h>`.
#[repr(C)]
#[derive(Default)]
struct RawCachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

const _: () = assert!(std::mem::size_of::<CachestatRange>() == 16);
const _: () = assert!(std::mem::size_of::<RawCachestat>() == 40);

/// Syscall number of cachestat: 451 in the unified table every architecture uses since 5.x.
const SYS_CACHESTAT: libc::c_long = 451;

/// `int cachestat(unsigned int fd, struct cachestat_range *range, struct cachestat *cstat,
/// unsigned int flags)` — <https://man7.org/linux/man-pages/man2/cachestat.2.html>.
///
/// Added in Linux 6.5 (not in rustix: own wrapper). `len == 0` means "to the end of the
/// file". Fails with `ENOSYS` on older kernels and, since the 6.14-era hardening, with `EPERM`
/// for files the caller could neither write nor owns (the same rule as mincore's).
///
/// On overlayfs the descriptor's own mapping is empty, whatever the real file holds (the
/// data's pages belong to the upper or lower inode): there this returns EOPNOTSUPP without
/// calling the kernel, and callers measure through a mapping (mincore), which maps the real
/// file's pages.
pub fn cachestat(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<CacheStat> {
    if super::fs_kind(fd) == super::FsKind::Overlay {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    let range = CachestatRange { off, len };
    let mut out = RawCachestat::default();
    // SAFETY: range and out are valid for the duration of the call and laid out as the kernel's
    // structs (two and five u64 fields, no padding; asserted above).
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
    /// `void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset)` with
    /// `(NULL, len, PROT_READ, MAP_SHARED, fd, off)` —
    /// <https://man7.org/linux/man-pages/man2/mmap.2.html>, through rustix.
    pub(super) fn new(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Mapping> {
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a fresh PROT_READ shared mapping of a file the caller holds open, placed by
        // the kernel (no fixed address); it is never dereferenced by pagewise, only passed to
        // mincore/madvise/mlock and unmapped on drop.
        let addr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::SHARED,
                fd,
                off,
            )
        }?;
        Ok(Mapping { addr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns, once.
        let _ = unsafe { rustix::mm::munmap(self.addr, self.len) };
    }
}

/// Maps the first page of `fd` read-only (`mmap(2)`, never touched) and calls `f` with the
/// mapping's address, then unmaps it: the line of that address in /proc/self/maps names the
/// inode whose pages the mapping holds — on overlayfs the real (upper or lower) file's, and
/// the superblock's device where stat(2) gives another (btrfs subvolumes).
pub fn with_mapping_address<R>(fd: BorrowedFd<'_>, f: impl FnOnce(u64) -> R) -> io::Result<R> {
    let map = Mapping::new(fd, 0, page_size())?;
    Ok(f(map.addr as u64))
}

/// Largest window mapped at once by [`mincore_count`]: 1 GiB of file needs a 256 KiB vector.
pub const MINCORE_WINDOW: u64 = 1 << 30;

/// `int mincore(void *addr, size_t length, unsigned char *vec)` —
/// <https://man7.org/linux/man-pages/man2/mincore.2.html> (not in rustix: own wrapper).
///
/// Counts resident pages of `[off, off+len)` of `fd` with `mmap(2)` + `mincore(2)`, one window
/// of at most [`MINCORE_WINDOW`] bytes at a time, so memory stays bounded for any file size.
/// `off` must be page aligned. `per_page`, when given, receives one bool per page. Since
/// Linux 5.2 mincore reports every page as resident for files the caller could not write and
/// does not own: callers must check [`mincore_is_truthful`] first.
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
        cvt(unsafe { libc::mincore(map.addr, map.len, vec.as_mut_ptr()) })?;
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
/// be able to open it for writing. Otherwise (since Linux 5.2) it reports every page resident.
///
/// `int faccessat(int dirfd, const char *pathname, int mode, int flags)` with
/// `(dir, name, W_OK, AT_EACCESS)` — <https://man7.org/linux/man-pages/man2/faccessat.2.html>,
/// through rustix, after geteuid(2).
pub fn mincore_is_truthful(dir: BorrowedFd<'_>, name: &CStr, st: &Stat) -> bool {
    let euid = rustix::process::geteuid();
    if has_cap_fowner() || st.uid == euid.as_raw() {
        return true;
    }
    rustix::fs::accessat(
        dir,
        name,
        rustix::fs::Access::WRITE_OK,
        rustix::fs::AtFlags::EACCESS,
    )
    .is_ok()
}

/// Whether this process has CAP_FOWNER in its effective set: the kernel's "owner or capable"
/// half of mincore's check. Root without it (a unit with a capability bounding set) is like
/// any other user there.
fn has_cap_fowner() -> bool {
    const CAP_FOWNER: u32 = 3;
    super::has_capability(CAP_FOWNER)
}

/// [`mincore_is_truthful`] for an open file: root or its owner, or the file is writable to the
/// caller — asked of the file itself through `/proc/self/fd/N` (faccessat follows that link to
/// the open inode, never to a name that could have been replaced).
pub fn mincore_is_truthful_fd(fd: BorrowedFd<'_>, st: &Stat) -> bool {
    let euid = rustix::process::geteuid();
    if has_cap_fowner() || st.uid == euid.as_raw() {
        return true;
    }
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::accessat(
        rustix::fs::CWD,
        link.as_str(),
        rustix::fs::Access::WRITE_OK,
        rustix::fs::AtFlags::EACCESS,
    )
    .is_ok()
}

/// Advice values for [`fadvise`] (`POSIX_FADV_*`).
#[derive(Debug, Clone, Copy)]
pub enum Advice {
    /// `POSIX_FADV_NORMAL`: default readahead.
    Normal,
    /// `POSIX_FADV_SEQUENTIAL`: doubles the readahead window.
    Sequential,
    /// `POSIX_FADV_RANDOM`: no readahead.
    Random,
    /// `POSIX_FADV_WILLNEED`: starts reading the range into the cache, without waiting.
    WillNeed,
    /// `POSIX_FADV_DONTNEED`: drops the range's clean, unmapped, unlocked pages.
    DontNeed,
    /// `POSIX_FADV_NOREUSE`: the data is used once (a no-op before Linux 6.3).
    NoReuse,
}

impl From<Advice> for rustix::fs::Advice {
    fn from(a: Advice) -> Self {
        match a {
            Advice::Normal => rustix::fs::Advice::Normal,
            Advice::Sequential => rustix::fs::Advice::Sequential,
            Advice::Random => rustix::fs::Advice::Random,
            Advice::WillNeed => rustix::fs::Advice::WillNeed,
            Advice::DontNeed => rustix::fs::Advice::DontNeed,
            Advice::NoReuse => rustix::fs::Advice::NoReuse,
        }
    }
}

/// `int posix_fadvise(int fd, off_t offset, off_t len, int advice)` —
/// <https://man7.org/linux/man-pages/man2/posix_fadvise.2.html>, through rustix.
///
/// `len == 0` means to the end. DONTNEED drops clean, unmapped, unlocked pages; it starts (but
/// does not wait for) writeback of dirty ones, which therefore stay.
pub fn fadvise(fd: BorrowedFd<'_>, off: u64, len: u64, advice: Advice) -> io::Result<()> {
    Ok(rustix::fs::fadvise(
        fd,
        off,
        NonZeroU64::new(len),
        advice.into(),
    )?)
}

/// sync_file_range(2) flag `SYNC_FILE_RANGE_WAIT_BEFORE`: wait for writeback already under
/// way in the range before starting any.
pub const SFR_WAIT_BEFORE: u32 = libc::SYNC_FILE_RANGE_WAIT_BEFORE;
/// sync_file_range(2) flag `SYNC_FILE_RANGE_WRITE`: start writeback of the range's dirty pages.
pub const SFR_WRITE: u32 = libc::SYNC_FILE_RANGE_WRITE;
/// sync_file_range(2) flag `SYNC_FILE_RANGE_WAIT_AFTER`: wait for the writeback to finish.
pub const SFR_WAIT_AFTER: u32 = libc::SYNC_FILE_RANGE_WAIT_AFTER;

/// `int sync_file_range(int fd, off64_t offset, off64_t nbytes, unsigned int flags)` —
/// <https://man7.org/linux/man-pages/man2/sync_file_range.2.html> (Linux 2.6.17; not in
/// rustix: own wrapper). Flags: [`SFR_WAIT_BEFORE`], [`SFR_WRITE`], [`SFR_WAIT_AFTER`].
///
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

/// `int madvise(void *addr, size_t length, int advice)` with `MADV_POPULATE_READ` —
/// <https://man7.org/linux/man-pages/man2/madvise.2.html> (Linux 5.14), through rustix.
///
/// Waits until `[off, off+len)` of `fd` is in the page cache and up to date, without copying
/// a byte to user space: maps the range (MAP_SHARED, PROT_READ) and asks the kernel to populate
/// it, then unmaps. Pages not yet read are read (with readahead); pages under I/O are
/// waited for. Unlike a read() into a buffer, the data is never touched by the CPU, which matters
/// on virtual machines where the first touch of a fresh page costs a hypervisor fault.
///
/// With `huge`, the mapping is first marked `madvise(MADV_HUGEPAGE)`: the fault path then reads
/// ahead in PMD-sized (2 MiB) folios (`do_sync_mmap_readahead`, VM_HUGEPAGE) instead of the
/// 4 KiB folios that fadvise(WILLNEED)/readahead(2) allocate (`force_page_cache_ra`). Measured
/// here on a cold 4 GiB ext4 file: 1.4 s of system time with 4 KiB folios, 0.05 s with 2 MiB
/// ones. Only useful where [`thp_file_readahead`](super::thp_file_readahead) says so; harmless elsewhere.
/// `off` must be page aligned. On kernels without MADV_POPULATE_READ (before 5.14) the pages
/// are faulted in one by one instead ([`touch_pages`]).
pub fn populate_read(fd: BorrowedFd<'_>, off: u64, len: u64, huge: bool) -> io::Result<()> {
    use rustix::mm::{madvise, Advice};
    if len == 0 {
        return Ok(());
    }
    let map = Mapping::new(fd, off, len)?;
    if huge {
        // SAFETY: addr/len describe the live mapping created above; advice changes no memory
        // contents. A failure (THP not built in) only loses the speed-up, so it is ignored.
        let _ = unsafe { madvise(map.addr, map.len, Advice::LinuxHugepage) };
    }
    // 5.10 failed `load` here before the fallback of populate_mapped.
    populate_mapped(map.addr as *const u8, map.len)
}

/// `madvise(addr, len, MADV_POPULATE_READ)` over `[addr, addr+len)` of a live shared
/// mapping of a file: its pages read in (where not cached) and mapped, nothing copied. Before
/// 5.14 (EINVAL) every page is faulted in instead, a byte each, as a read through the mapping
/// would (with the fault path's readahead): see [`touch_pages`].
pub(super) fn populate_mapped(addr: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: the range lies in a live mapping; populating fills its pages, which nothing
    // here dereferences.
    let r = rustix::io::retry_on_intr(|| unsafe {
        rustix::mm::madvise(
            addr as *mut std::ffi::c_void,
            len,
            rustix::mm::Advice::LinuxPopulateRead,
        )
    });
    if r == Err(rustix::io::Errno::INVAL) {
        let page = super::page_size() as usize;
        touch_pages(addr, len.div_ceil(page), page);
        return Ok(());
    }
    Ok(r?)
}

/// Maps `pages` pages from `addr` (of a live shared mapping of a file) by reading a byte of
/// each through process_vm_readv(2) on this process — <https://man7.org/linux/man-pages/man2/process_vm_readv.2.html>
/// (Linux 3.2) — which faults them in as a read would, but returns EFAULT where a page is past
/// the file's end now (truncated meanwhile) instead of raising SIGBUS. Errors are ignored:
/// a page not mapped is counted as unresolved by the caller.
pub(super) fn touch_pages(addr: *const u8, pages: usize, page: usize) {
    const BATCH: usize = 1024; // IOV_MAX
    let mut sink = [0u8; BATCH];
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(BATCH);
        let local = libc::iovec {
            iov_base: sink.as_mut_ptr().cast(),
            iov_len: n,
        };
        let remote: Vec<libc::iovec> = (done..done + n)
            .map(|k| libc::iovec {
                // The address is only read by the kernel, through the fault path.
                iov_base: addr.wrapping_add(k * page) as *mut libc::c_void,
                iov_len: 1,
            })
            .collect();
        // SAFETY: `local` is a writable buffer of n bytes; the remote iovecs name bytes of
        // this process's address space, which the kernel checks (EFAULT when unmapped).
        unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, remote.as_ptr(), n as u64, 0) };
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cold_file, require, scratch_dir};
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    fn cached(f: &std::fs::File) -> u64 {
        cachestat(f.as_fd(), 0, 0).unwrap().cache
    }

    fn resident(f: &std::fs::File, pages: u64) -> Vec<bool> {
        let mut per_page = Vec::new();
        let n = mincore_count(f.as_fd(), 0, pages * page_size(), Some(&mut per_page)).unwrap();
        assert_eq!(n, per_page.iter().filter(|&&p| p).count() as u64);
        per_page
    }

    #[test]
    fn cachestat_and_mincore_see_the_pages_just_written() {
        if !require(super::super::probe_cachestat(), "cachestat(2) (Linux 6.5+)") {
            return;
        }
        let dir = scratch_dir();
        let page = page_size();
        let mut f = std::fs::File::create_new(dir.path().join("f")).unwrap();
        f.write_all(&vec![7u8; 4 * page as usize]).unwrap();
        // mmap for mincore needs a descriptor open for reading.
        let f = std::fs::File::open(dir.path().join("f")).unwrap();
        let cs = cachestat(f.as_fd(), 0, 0).unwrap();
        assert_eq!((cs.cache, cs.dirty), (4, 4), "{cs:?}");
        assert_eq!(resident(&f, 4), vec![true; 4]);
        sync_file_range(
            f.as_fd(),
            0,
            0,
            SFR_WAIT_BEFORE | SFR_WRITE | SFR_WAIT_AFTER,
        )
        .unwrap();
        let cs = cachestat(f.as_fd(), 0, 0).unwrap();
        assert_eq!((cs.cache, cs.dirty, cs.writeback), (4, 0, 0), "{cs:?}");
    }

    #[test]
    fn dontneed_drops_what_a_read_brought_in() {
        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 8);
        assert_eq!(resident(&f, 8), vec![false; 8]);
        if super::super::probe_cachestat() {
            assert_eq!(cached(&f), 0);
        }
        let mut buf = vec![0u8; 8 * page_size() as usize];
        assert_eq!(
            super::super::pread(f.as_fd(), &mut buf, 0).unwrap(),
            buf.len()
        );
        assert_eq!(resident(&f, 8), vec![true; 8]);
        if super::super::probe_cachestat() {
            assert_eq!(cached(&f), 8);
            // A range counts only its own pages.
            let cs = cachestat(f.as_fd(), 2 * page_size(), 3 * page_size()).unwrap();
            assert_eq!(cs.cache, 3);
        }
        // Drop the first half only.
        fadvise(f.as_fd(), 0, 4 * page_size(), Advice::DontNeed).unwrap();
        let want: Vec<bool> = (0..8).map(|i| i >= 4).collect();
        assert_eq!(resident(&f, 8), want);
        if super::super::probe_cachestat() {
            assert_eq!(cached(&f), 4);
        }
    }

    #[test]
    fn populate_read_and_willneed_bring_pages_in() {
        let dir = scratch_dir();
        for (i, huge) in [false, true].into_iter().enumerate() {
            let f = cold_file(dir.path(), &format!("p{i}"), 16);
            populate_read(f.as_fd(), 0, 16 * page_size(), huge).unwrap();
            assert_eq!(resident(&f, 16), vec![true; 16], "huge: {huge}");
        }
        populate_read(cold_file(dir.path(), "empty", 0).as_fd(), 0, 0, false).unwrap();

        // WILLNEED starts the reads and returns: wait for them (bounded).
        let f = cold_file(dir.path(), "w", 16);
        fadvise(f.as_fd(), 0, 0, Advice::WillNeed).unwrap();
        let t = std::time::Instant::now();
        while resident(&f, 16) != vec![true; 16] {
            assert!(t.elapsed().as_secs() < 10, "WILLNEED read nothing in 10 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn every_advice_is_accepted_and_a_bad_descriptor_is_named() {
        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 1);
        for a in [
            Advice::Normal,
            Advice::Sequential,
            Advice::Random,
            Advice::WillNeed,
            Advice::DontNeed,
            Advice::NoReuse,
        ] {
            fadvise(f.as_fd(), 0, 0, a).unwrap();
        }
        // A pipe has no page cache: both refuse it with ESPIPE.
        let (r, _w) = std::io::pipe().unwrap();
        let e = fadvise(r.as_fd(), 0, 0, Advice::DontNeed).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESPIPE));
        let e = sync_file_range(r.as_fd(), 0, 0, SFR_WRITE).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESPIPE));
    }

    #[test]
    fn mincore_is_truthful_for_root_and_owners() {
        let dir = scratch_dir();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let d = std::fs::File::open(dir.path()).unwrap();
        let st = super::super::stat_path(&dir.path().join("f"), false).unwrap();
        // The test runs as the file's owner (root here): always truthful.
        assert!(mincore_is_truthful(d.as_fd(), c"f", &st));
    }

    /// populate_read's route before 5.14: faulting each page in through process_vm_readv
    /// brings a cold file's pages into the cache (cachestat), and a range past the end of the
    /// file raises no SIGBUS.
    #[test]
    fn touching_pages_reads_a_cold_file_in() {
        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 64);
        assert_eq!(cached(&f), 0);
        let page = page_size();
        let map = Mapping::new(f.as_fd(), 0, 80 * page).unwrap();
        touch_pages(map.addr as *const u8, 80, page as usize);
        assert_eq!(cached(&f), 64);
    }
}
