//! Reads and writes at an offset: pread(2), preadv2(2)/pwritev2(2) with their `RWF_*` flags
//! (typed: [`RwFlags`]), and the aligned buffers O_DIRECT needs.
//!
//! rustix has pread, preadv2 and pwritev2; its `ReadWriteFlags` has no name for
//! `RWF_DONTCACHE`, which [`RwFlags`] adds and passes through as a bit.
#![allow(unsafe_code)]

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::BorrowedFd;

use rustix::io::ReadWriteFlags;

/// `ssize_t pread(int fd, void *buf, size_t count, off_t offset)` —
/// <https://man7.org/linux/man-pages/man2/pread.2.html>, through rustix. Returns bytes read
/// (0 at EOF); retries on EINTR.
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<usize> {
    Ok(rustix::io::retry_on_intr(|| {
        rustix::io::pread(fd, &mut *buf, off)
    })?)
}

/// The largest alignment [`AlignedBuf::try_alloc`] accepts: 1 GiB (a huge page; O_DIRECT
/// asks for 512 B to 4 KiB).
pub const MAX_ALIGN: usize = 1 << 30;

/// A heap buffer aligned for O_DIRECT (whose memory alignment [`dio_align`](super::dio_align)
/// tells). Zero-filled on creation; dereferences to `[u8]`.
///
/// A buffer of [`HUGE`] bytes or more is a mapping of its own, aligned to [`HUGE`] and marked
/// `madvise(MADV_HUGEPAGE)` before its first touch: where transparent huge pages are on (or on
/// madvise), its memory is then physically contiguous in 2 MiB pieces, and an O_DIRECT request
/// of one chunk goes to the device whole. In 4 KiB pages each page is a segment of the
/// request, and a device with few segments per request splits it: this machine's virtio disk
/// (254 segments) took a 4 MiB O_DIRECT chunk as 527 KiB requests on average (3,980 reads
/// and as many writes for a 2 GiB copy, against 512 writes of 4 MiB by buffered
/// write-back), and copied at half the rate of buffered I/O.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
    /// Mapped on its own (munmap on drop), not from the allocator.
    mapped: bool,
}

/// A transparent huge page: buffers from this size are mapped on their own, aligned to it.
pub const HUGE: usize = 2 << 20;

/// `len` zeroed bytes (at least [`HUGE`]) mapped anonymously at a [`HUGE`] boundary and marked
/// MADV_HUGEPAGE (advice only: refused where huge pages are off, and then plain pages); None
/// when the memory cannot be mapped.
fn map_huge(len: usize) -> Option<std::ptr::NonNull<u8>> {
    let len = len.checked_next_multiple_of(4096)?;
    let span = len.checked_add(HUGE)?;
    // SAFETY: a fresh anonymous private mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let at = start.next_multiple_of(HUGE);
    // SAFETY: the head before `at` and the tail after `at + len` are parts of the mapping
    // just made, unmapped before anything refers to them (both page-aligned: mmap returns a
    // page-aligned address, HUGE and len are multiples of the page).
    unsafe {
        if at > start {
            libc::munmap(p, at - start);
        }
        if start + span > at + len {
            libc::munmap((at + len) as *mut libc::c_void, start + span - at - len);
        }
        libc::madvise(at as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    std::ptr::NonNull::new(at as *mut u8)
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes aligned to `align` (rounded up to a power of two; at least 512 is
    /// sensible). Aborts, as `Vec` does, when the allocation fails.
    pub fn new(len: usize, align: usize) -> Self {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), align.max(1).next_power_of_two())
                .expect("valid buffer layout");
        Self::alloc(layout).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
    }
    /// A zeroed buffer of `layout`: mapped on its own from [`HUGE`] bytes when the alignment
    /// asked is at most [`HUGE`] (see the type's documentation), else from the allocator.
    fn alloc(layout: std::alloc::Layout) -> Option<Self> {
        if layout.size() >= HUGE && layout.align() <= HUGE {
            // The layout keeps the alignment asked (what `align` reports): the address is a
            // multiple of it, as HUGE is.
            let ptr = map_huge(layout.size())?;
            return Some(AlignedBuf {
                ptr,
                layout,
                mapped: true,
            });
        }
        // SAFETY: layout has a non-zero size (every caller makes it at least 1).
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(AlignedBuf {
            ptr: std::ptr::NonNull::new(p)?,
            layout,
            mapped: false,
        })
    }
    /// [`new`](Self::new) that returns None instead of aborting when `len` and `align` make no
    /// valid layout (beyond `isize::MAX`) or the memory cannot be had: for callers in other
    /// languages, where an abort would take their program down.
    pub fn try_new(len: usize, align: usize) -> Option<Self> {
        let align = align.max(1).checked_next_power_of_two()?;
        let layout = std::alloc::Layout::from_size_align(len.max(1), align).ok()?;
        Self::alloc(layout)
    }
    /// A zeroed buffer of `len` bytes (at least 1) aligned to `align`, for sizes and
    /// alignments that come from a caller: never aborts. `align` must be a power of two of
    /// at most [`MAX_ALIGN`] (else `EINVAL`); a length beyond what can be allocated with it
    /// is `ENOMEM`.
    pub fn try_alloc(len: usize, align: usize) -> io::Result<Self> {
        if !align.is_power_of_two() || align > MAX_ALIGN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("alignment {align}: not a power of two of at most {MAX_ALIGN} (1 GiB)"),
            ));
        }
        let nomem = || {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("{len} bytes aligned to {align}: cannot allocate memory"),
            )
        };
        let layout = std::alloc::Layout::from_size_align(len.max(1), align).map_err(|_| nomem())?;
        Self::alloc(layout).ok_or_else(nomem)
    }
    /// Length in bytes (at least 1: a zero length is rounded up).
    pub fn len(&self) -> usize {
        self.layout.size()
    }
    /// Never true (see [`len`](Self::len)); here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }
    /// Alignment of the start in bytes (a power of two).
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len())
            .field("align", &self.align())
            .finish()
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
        let p = self.ptr.as_ptr();
        match self.mapped {
            // SAFETY: mapped by map_huge with this length rounded up to the page, and only
            // this buffer refers to it.
            true => unsafe {
                libc::munmap(p.cast(), self.layout.size().next_multiple_of(4096));
            },
            // SAFETY: allocated in alloc() with this exact layout.
            false => unsafe { std::alloc::dealloc(p, self.layout) },
        }
    }
}

bitflags::bitflags! {
    /// `RWF_*` flags of preadv2(2)/pwritev2(2) (`<linux/fs.h>`). Unknown bits pass through to
    /// the kernel, which refuses them with EOPNOTSUPP.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct RwFlags: u32 {
        /// `RWF_HIPRI` (since Linux 4.6): poll for completion (O_DIRECT on polled queues).
        const HIPRI = 0x01;
        /// `RWF_DSYNC` (since Linux 4.7): this write is O_DSYNC.
        const DSYNC = 0x02;
        /// `RWF_SYNC` (since Linux 4.7): this write is O_SYNC.
        const SYNC = 0x04;
        /// `RWF_NOWAIT` (since Linux 4.14): fail with EAGAIN rather than wait, e.g. for a read
        /// of pages not in the page cache.
        const NOWAIT = 0x08;
        /// `RWF_APPEND` (since Linux 4.16): this write appends, as with O_APPEND.
        const APPEND = 0x10;
        /// `RWF_NOAPPEND` (since Linux 6.9): this write goes to the offset even with O_APPEND.
        const NOAPPEND = 0x20;
        /// `RWF_ATOMIC` (since Linux 6.11): the write is torn-write safe, or fails.
        const ATOMIC = 0x40;
        /// `RWF_DONTCACHE` (since Linux 6.14): uncached buffered I/O, the pages dropped once
        /// the read or the writeback is done; EOPNOTSUPP where the filesystem lacks it. Not in
        /// rustix 1.1's `ReadWriteFlags`.
        const DONTCACHE = 0x80;
        const _ = !0;
    }
}

impl From<RwFlags> for ReadWriteFlags {
    fn from(f: RwFlags) -> Self {
        ReadWriteFlags::from_bits_retain(f.bits())
    }
}

/// `RWF_DONTCACHE` as the bare `int` [`preadv2`], [`pwritev2`] and `ReadRing::read_batch`
/// take; [`RwFlags::DONTCACHE`] is the typed one.
pub const RWF_DONTCACHE: i32 = RwFlags::DONTCACHE.bits() as i32;

/// `ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)` —
/// <https://man7.org/linux/man-pages/man2/preadv2.2.html> (Linux 4.6), through rustix, with
/// one buffer and typed flags. Returns bytes read (0 at EOF); retries on EINTR.
pub fn read_at(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64, flags: RwFlags) -> io::Result<usize> {
    let mut iov = [IoSliceMut::new(buf)];
    Ok(rustix::io::retry_on_intr(|| {
        rustix::io::preadv2(fd, &mut iov, off, flags.into())
    })?)
}

/// `ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags)` —
/// <https://man7.org/linux/man-pages/man2/pwritev2.2.html> (Linux 4.6), through rustix, with
/// one buffer and typed flags. Returns bytes written (possibly short); retries on EINTR.
pub fn write_at(fd: BorrowedFd<'_>, buf: &[u8], off: u64, flags: RwFlags) -> io::Result<usize> {
    let iov = [IoSlice::new(buf)];
    Ok(rustix::io::retry_on_intr(|| {
        rustix::io::pwritev2(fd, &iov, off, flags.into())
    })?)
}

/// [`read_at`] with the flags as a bare `int` (`RWF_*` bits, e.g. [`RWF_DONTCACHE`]).
pub fn preadv2(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64, flags: i32) -> io::Result<usize> {
    read_at(fd, buf, off, RwFlags::from_bits_retain(flags as u32))
}

/// [`write_at`] with the flags as a bare `int` (`RWF_*` bits, e.g. [`RWF_DONTCACHE`]).
pub fn pwritev2(fd: BorrowedFd<'_>, buf: &[u8], off: u64, flags: i32) -> io::Result<usize> {
    write_at(fd, buf, off, RwFlags::from_bits_retain(flags as u32))
}

/// `int ioctl(int fd, TIOCGWINSZ, struct winsize *)` —
/// <https://man7.org/linux/man-pages/man2/TIOCGWINSZ.2const.html>: the columns of the terminal
/// `fd` is, None when it is not a terminal (or says 0).
pub fn terminal_columns(fd: BorrowedFd<'_>) -> Option<u16> {
    rustix::termios::tcgetwinsize(fd)
        .ok()
        .map(|w| w.ws_col)
        .filter(|&c| c > 0)
}

/// `int listen(int sockfd, int backlog)` — <https://man7.org/linux/man-pages/man2/listen.2.html>,
/// through rustix.
///
/// On a socket that already listens (std's `TcpListener::bind` uses a backlog of 128) Linux
/// takes the new backlog, capped at `net.core.somaxconn`.
pub fn listen_backlog(fd: BorrowedFd<'_>, backlog: i32) -> io::Result<()> {
    rustix::net::listen(fd, backlog).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{cold_file, require, scratch_dir};
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        for align in [512usize, 4096, 1 << 16] {
            let b = AlignedBuf::new(10_000, align);
            assert_eq!(b.as_ptr() as usize % align, 0);
            assert_eq!(b.align(), align);
            assert_eq!(b.len(), 10_000);
            assert!(!b.is_empty());
            assert!(b.iter().all(|&x| x == 0));
        }
        // A non-power-of-two alignment is rounded up; a zero length is one byte.
        assert_eq!(AlignedBuf::new(1, 3000).align(), 4096);
        assert_eq!(AlignedBuf::new(0, 512).len(), 1);
        let t = AlignedBuf::try_new(5000, 4096).unwrap();
        assert_eq!(
            (t.len(), t.align(), t.as_ptr() as usize % 4096),
            (5000, 4096, 0)
        );
        assert!(AlignedBuf::try_new(usize::MAX - 100, 4096).is_none());
        assert!(AlignedBuf::try_new(1, usize::MAX).is_none());
    }

    /// From 2 MiB a buffer is its own mapping at a huge-page boundary (for O_DIRECT requests
    /// that reach the device whole), zeroed and writable to its last byte, and still reports
    /// the alignment asked; one over 2 MiB asked to be aligned beyond it comes from the
    /// allocator, aligned as asked.
    #[test]
    fn large_buffers_start_at_a_huge_page() {
        for (len, align) in [(HUGE, 4096), ((4 << 20) + 5, 512), (HUGE + 4096, HUGE)] {
            let mut b = AlignedBuf::try_alloc(len, align).unwrap();
            assert_eq!(
                (b.as_ptr() as usize % HUGE, b.align(), b.len()),
                (0, align, len)
            );
            assert!(b.iter().all(|&x| x == 0));
            b[len - 1] = 7;
            b[0] = 1;
            assert_eq!((b[0], b[len - 1]), (1, 7));
        }
        let b = AlignedBuf::try_alloc(HUGE, 4 << 20).unwrap();
        assert_eq!((b.as_ptr() as usize % (4 << 20), b.align()), (0, 4 << 20));
        // A mapping that cannot be had is an error, not an abort.
        assert!(AlignedBuf::try_alloc(usize::MAX / 2, 4096).is_err());
    }

    #[test]
    fn try_alloc_refuses_what_cannot_be_had_without_aborting() {
        let b = AlignedBuf::try_alloc(5000, 4096).unwrap();
        assert_eq!(
            (b.len(), b.align(), b.as_ptr() as usize % 4096),
            (5000, 4096, 0)
        );
        assert!(b.iter().all(|&x| x == 0));
        let b = AlignedBuf::try_alloc(1, MAX_ALIGN).unwrap();
        assert_eq!(b.as_ptr() as usize % MAX_ALIGN, 0);
        for len in [
            1usize << 62,
            usize::MAX,
            usize::MAX - 4095,
            isize::MAX as usize,
        ] {
            let e = AlignedBuf::try_alloc(len, 4096).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{len}: {e}");
        }
        for align in [0usize, 3, 3000, MAX_ALIGN * 2, 1 << 40, usize::MAX] {
            let e = AlignedBuf::try_alloc(16, align).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{align}: {e}");
        }
    }

    #[test]
    fn pwritev2_then_pread_and_preadv2_round_trip() {
        let f = tempfile::tempfile().unwrap();
        assert_eq!(pwritev2(f.as_fd(), b"hello world", 100, 0).unwrap(), 11);
        let mut buf = [0u8; 5];
        assert_eq!(pread(f.as_fd(), &mut buf, 106).unwrap(), 5);
        assert_eq!(&buf, b"world");
        assert_eq!(preadv2(f.as_fd(), &mut buf, 100, 0).unwrap(), 5);
        assert_eq!(&buf, b"hello");
        assert_eq!(pread(f.as_fd(), &mut buf, 111).unwrap(), 0, "EOF");
        assert_eq!(write_at(f.as_fd(), b"J", 100, RwFlags::DSYNC).unwrap(), 1);
        assert_eq!(
            read_at(f.as_fd(), &mut buf, 100, RwFlags::empty()).unwrap(),
            5
        );
        assert_eq!(&buf, b"Jello");
    }

    #[test]
    fn flags_have_the_kernels_values() {
        // include/uapi/linux/fs.h
        assert_eq!(RwFlags::HIPRI.bits(), libc::RWF_HIPRI as u32);
        assert_eq!(RwFlags::DSYNC.bits(), libc::RWF_DSYNC as u32);
        assert_eq!(RwFlags::SYNC.bits(), libc::RWF_SYNC as u32);
        assert_eq!(RwFlags::NOWAIT.bits(), libc::RWF_NOWAIT as u32);
        assert_eq!(RwFlags::APPEND.bits(), libc::RWF_APPEND as u32);
        assert_eq!(RWF_DONTCACHE, 0x80);
        assert_eq!(
            ReadWriteFlags::from(RwFlags::NOWAIT | RwFlags::DONTCACHE).bits(),
            0x88
        );
        // A bit no kernel knows is refused, not dropped on the way.
        let f = tempfile::tempfile().unwrap();
        let e = preadv2(f.as_fd(), &mut [0u8; 1], 0, 1 << 30).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP));
    }

    #[test]
    fn nowait_never_waits_and_reads_cached_pages() {
        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 4);
        let mut buf = vec![0u8; 4096];
        // A cold page: EAGAIN, having started readahead, unless that readahead was already
        // done when the kernel looked again (a fast disk): then the data.
        match read_at(f.as_fd(), &mut buf, 0, RwFlags::NOWAIT) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            r => assert_eq!(r.unwrap(), 4096),
        }
        assert_eq!(pread(f.as_fd(), &mut buf, 0).unwrap(), 4096);
        assert_eq!(
            read_at(f.as_fd(), &mut buf, 0, RwFlags::NOWAIT).unwrap(),
            4096
        );
        assert_eq!(buf[251], 0, "the pattern of cold_file");
    }

    #[test]
    fn dontcache_reads_leave_no_pages_behind() {
        let dir = scratch_dir();
        let f = cold_file(dir.path(), "f", 16);
        let mut buf = vec![0u8; 16 * 4096];
        match read_at(f.as_fd(), &mut buf, 0, RwFlags::DONTCACHE) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                require(
                    false,
                    "RWF_DONTCACHE (Linux 6.14+, a filesystem that has it)",
                );
                return;
            }
            r => assert_eq!(r.unwrap(), buf.len()),
        }
        assert_eq!(buf[251], 0);
        assert_eq!(buf[252], 1);
        if super::super::probe_cachestat() {
            let cs = super::super::cachestat(f.as_fd(), 0, 0).unwrap();
            assert_eq!(cs.cache, 0, "{cs:?}");
        }
    }
}
