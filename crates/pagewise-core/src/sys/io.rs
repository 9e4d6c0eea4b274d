//! Reads and writes at an offset: pread(2), preadv2(2)/pwritev2(2) with their `RWF_*` flags,
//! and the aligned buffers O_DIRECT needs.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

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

#[cfg(test)]
mod tests {
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
        // A non-power-of-two alignment is rounded up.
        assert_eq!(AlignedBuf::new(1, 3000).align(), 4096);
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
    }
}
