//! Reading from disk past the page cache, the one place for it: what a refusal of the
//! filesystem is ([`refused`]), the read loop every uncached reader runs ([`read_full`]), the
//! aligned O_DIRECT read ([`read_direct`]), the buffered read whose pages are dropped after
//! ([`read_dropping`]), and [`UncachedReader`], which chooses between those two for a file.
//! [`DirectFile`](super::DirectFile) (its requests), the copy engine (its chunk reads) and
//! copy's `--verify` / `--checksum` compares (an [`UncachedReader`] each) all read through
//! here.

use crate::residency::cached_pages;
use crate::sys::{self, Advice, AlignedBuf};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// EINVAL or EOPNOTSUPP: the filesystem does not do what was asked (rather than failing it).
pub(crate) fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
    )
}

/// Reads at `off` into `buf` until at least `want` bytes are in or a read returns 0 (the
/// end); each read asks for all of `buf` still empty. The bytes read.
pub(crate) fn read_full(
    buf: &mut [u8],
    off: u64,
    want: usize,
    mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut got = 0;
    while got < want {
        let n = read(&mut buf[got..], off + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// Reads `len` bytes at `off` with O_DIRECT (`fd` opened with it, `buf` and `off` aligned):
/// lengths must be aligned too, so it asks for the aligned-up length and takes the short read
/// at EOF.
pub(crate) fn read_direct(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    off: u64,
    len: u64,
    off_align: u64,
) -> io::Result<usize> {
    let want = len as usize;
    let req = ((len.div_ceil(off_align) * off_align) as usize).min(buf.len());
    let got = read_full(&mut buf[..req], off, want, |b, o| sys::pread(fd, b, o))?;
    Ok(got.min(want))
}

/// Reads `[off, off+len)` of `fd` from disk without O_DIRECT: cached pages are written back
/// and dropped first (they cannot be re-read from disk otherwise), and what the read brings
/// in is dropped after.
pub(crate) fn read_dropping(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    off: u64,
    len: u64,
) -> io::Result<usize> {
    let was = cached_pages(fd, off, len).unwrap_or(1);
    if was > 0 {
        let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        sys::sync_file_range(fd, off, len, flags)?;
        sys::fadvise(fd, off, len, Advice::DontNeed)?;
    }
    let n = read_full(&mut buf[..len as usize], off, len as usize, |b, o| {
        sys::pread(fd, b, o)
    })?;
    sys::fadvise(fd, off, len, Advice::DontNeed)?;
    Ok(n)
}

/// A file read from disk, not from the cache, leaving the cache as it was: O_DIRECT where
/// the filesystem takes it, else buffered reads whose pages are dropped after
/// ([`read_dropping`]).
pub(crate) struct UncachedReader {
    direct: Option<OwnedFd>,
    buffered: fs::File,
    buf: AlignedBuf,
    off_align: u64,
}

impl UncachedReader {
    /// Reads the open file `fd` in reads of at most `chunk` bytes; its O_DIRECT twin is
    /// opened through /proc/self/fd (the same file, whatever its name is now).
    pub(crate) fn open(fd: OwnedFd, chunk: usize) -> io::Result<Self> {
        let direct = sys::open_read_direct(&sys::fd_path(fd.as_fd())).ok();
        let buffered = fs::File::from(fd);
        let (align, off_align) = direct
            .as_ref()
            .and_then(|d| sys::dio_align_or_device(d.as_fd()))
            .map_or((4096, 4096), |(m, o)| (m as usize, o as u64));
        Ok(UncachedReader {
            direct,
            buffered,
            buf: AlignedBuf::new(chunk, align.max(4096)),
            off_align: off_align.max(512),
        })
    }

    /// Reads `[off, off+len)` (`len` at most the chunk): the bytes read (fewer at the end).
    pub(crate) fn read(&mut self, off: u64, len: u64) -> io::Result<&[u8]> {
        let fd = self.buffered.as_fd();
        let n = match &self.direct {
            Some(d) => match read_direct(d.as_fd(), &mut self.buf, off, len, self.off_align) {
                Ok(n) => n,
                Err(e) if refused(&e) => {
                    read_full(&mut self.buf[..len as usize], off, len as usize, |b, o| {
                        sys::pread(fd, b, o)
                    })?
                }
                Err(e) => return Err(e),
            },
            None => read_dropping(fd, &mut self.buf, off, len)?,
        };
        Ok(&self.buf[..n])
    }
}

/// Whether the first `len` bytes of two files are the same (--append-verify), both read from
/// disk without caching them; a read failure counts as different.
pub(crate) fn same_prefix(a: OwnedFd, b: OwnedFd, len: u64, chunk: usize) -> bool {
    let run = || -> io::Result<bool> {
        let (mut ra, mut rb) = (
            UncachedReader::open(a, chunk)?,
            UncachedReader::open(b, chunk)?,
        );
        let mut off = 0;
        while off < len {
            let n = (len - off).min(chunk as u64);
            let x = ra.read(off, n)?;
            if x.len() as u64 != n || x != rb.read(off, n)? {
                return Ok(false);
            }
            off += n;
        }
        Ok(true)
    };
    run().unwrap_or(false)
}
