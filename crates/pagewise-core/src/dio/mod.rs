//! A file opened for cache-neutral I/O: [`DirectFile`] reads and writes any buffer at any
//! offset and length, and leaves the page cache as it found it.
//!
//! Three policies ([`CachePolicy`]), tried in this order when one is refused:
//! - **Direct**: O_DIRECT, which bypasses the cache. The kernel wants the buffer, the offset
//!   and the length aligned ([`DirectFile::alignment`], from statx(STATX_DIOALIGN)). Aligned
//!   requests go straight to the file (zero copy); others go through an aligned bounce buffer
//!   in large chunks: a read-ahead window for reads, a write-behind stage for writes. An
//!   unaligned block inside the file is read, modified and written whole; the partial block
//!   at the file's end is written with its exact bytes through the page cache and dropped at
//!   once, so the file never holds padding past its end, not even for a moment.
//! - **DontCache**: buffered I/O with `RWF_DONTCACHE` (Linux 6.14): pages are dropped once
//!   read or written back.
//! - **DropBehind**: plain buffered I/O; behind it, pages this file brought in are dropped
//!   with fadvise(DONTNEED), written pages after sync_file_range in windows of
//!   [`BEHIND_WINDOW`] (start writeback of one window, wait for the one before, drop it).
//!
//! With the two buffered policies, pages that were cached before a read stay cached (checked
//! with cachestat per 128 KiB block); only what this file brought in is dropped. Readahead is
//! off for the file description (`POSIX_FADV_RANDOM`): the read-ahead window reads ahead
//! itself, and kernel readahead would leave pages beyond it.
//!
//! Where a policy is refused (O_DIRECT: EINVAL at open or on the first request, or tmpfs,
//! whose O_DIRECT is buffered I/O over its own pages; RWF_DONTCACHE: EOPNOTSUPP/EINVAL), the
//! file falls back to the next one and [`DirectFile::notice`] says why in one line.
//! What a refusal is, and the read loops past the cache that copy shares with this file
//! (the aligned O_DIRECT read, the buffered read dropped after), are in `uncached`.
//!
//! Errors name the path and the call: the `io::Error`s returned here wrap a [`DioError`]
//! (`/data/x: pwrite(O_DIRECT) failed: No space left on device`); [`errno`] gets the errno back.
//! Data written is staged until the next non-contiguous request, [`sync`](DirectFile::sync) or
//! [`close`](DirectFile::close) (as with `BufWriter`): a failure to write it is reported by
//! that call; dropping the file writes it too, but can only ignore a failure. A write that
//! starts past the end of the file is never left staged: when it returns, the file's size is
//! its end and the gap reads as zeros, as after pwrite(2). Requests that end past the largest
//! file offset (2^63 - 1) are EINVAL; buffers whose size cannot be allocated are ENOMEM (never
//! an abort).
//!
//! ```
//! use pagewise_core::dio::{CachePolicy, DirectFile, OpenMode};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("f");
//! let mut f = DirectFile::open(&path, OpenMode::write(), CachePolicy::Direct).unwrap();
//! f.write_at(b"hello, ", 0).unwrap();
//! f.write_at(b"unaligned world", 7).unwrap();
//! f.close().unwrap();
//! let mut f = DirectFile::open(&path, OpenMode::read(), CachePolicy::Direct).unwrap();
//! let mut buf = [0u8; 5];
//! assert_eq!(f.read_at(&mut buf, 17).unwrap(), 5);
//! assert_eq!(&buf, b"world");
//! assert_eq!(f.len().unwrap(), 22);
//! ```

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use crate::error::Op;
use crate::sys::{self, Advice, AlignedBuf};

mod align;
mod error;
mod mode;
mod open;
mod read;
mod requests;
#[cfg(test)]
mod tests;
pub(crate) mod uncached;
mod write;

pub use align::Alignment;
use align::{align_down, page_cover, MAX_OFFSET};
pub use error::{errno, failure, DioError};
pub use mode::{CachePolicy, OpenMode};
use read::Window;
use requests::Io;
use write::Stage;

/// Size of the bounce buffers (the read-ahead window and the write-behind stage), and the most
/// one read-ahead reads: large enough for device speed (4 MiB requests reach a disk's
/// sequential rate), small enough to keep per file.
pub const CHUNK: usize = 4 << 20;
/// The first read-ahead after a seek; it doubles with each sequential read up to [`CHUNK`].
const READAHEAD_MIN: usize = 128 << 10;
/// With the buffered policies, requests at least this large skip the bounce buffers.
const STRAIGHT_MIN: usize = 256 << 10;
/// Drop-behind of written pages: writeback of one window of this many bytes is started, then
/// the window before it is waited for and dropped.
pub const BEHIND_WINDOW: u64 = 8 << 20;
/// Granularity at which pages cached before a buffered read are remembered and kept.
const KEEP_BLOCK: u64 = 128 << 10;

/// A file opened for cache-neutral I/O: positioned reads and writes of any buffer, offset and
/// length, under a [`CachePolicy`] (see the module doc). Not shared between threads: every
/// request takes `&mut self`.
pub struct DirectFile {
    io: Io,
    mode: OpenMode,
    window: Window,
    stage: Stage,
    closed: bool,
}

impl fmt::Debug for DirectFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectFile")
            .field("path", &self.io.path)
            .field("policy", &self.io.policy)
            .field("alignment", &self.io.align)
            .field("notice", &self.io.notice)
            .finish()
    }
}

impl DirectFile {
    /// The policy in force (after any fallback).
    pub fn policy(&self) -> CachePolicy {
        self.io.policy
    }

    /// Why the policy asked for is not the one in force, in one line (None when it is).
    pub fn notice(&self) -> Option<&str> {
        self.io.notice.as_deref()
    }

    /// What requests must be aligned to for zero-copy I/O (see [`Alignment`]).
    pub fn alignment(&self) -> Alignment {
        self.io.align
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.io.path
    }

    /// The mode the file was opened with.
    pub fn mode(&self) -> OpenMode {
        self.mode
    }

    /// A zeroed buffer of at least `len` bytes (rounded up to the offset alignment), aligned
    /// for zero-copy requests on this file. An error (`ENOMEM`) when it cannot be allocated.
    pub fn aligned_buffer(&self, len: usize) -> io::Result<AlignedBuf> {
        let a = self.io.align;
        // Rounded up without wrapping: a length that cannot be rounded cannot be allocated.
        let size = len.checked_next_multiple_of(a.offset).unwrap_or(usize::MAX);
        AlignedBuf::try_alloc(size, a.memory).map_err(|e| self.io.fail(Op::PosixMemalign, e))
    }

    /// The file's length in bytes, staged writes included.
    pub fn len(&self) -> io::Result<u64> {
        let fd = self.io.fd.as_fd();
        let st = sys::fstat(fd).map_err(|e| self.io.fail(Op::Fstat, e))?;
        let size = if st.is_block_device() {
            sys::block_device_size(fd).map_err(|e| self.io.fail(Op::IoctlBlkgetsize64, e))?
        } else {
            st.size
        };
        Ok(if self.stage.active {
            size.max(self.stage.end())
        } else {
            size
        })
    }

    /// Whether the file is empty ([`len`](Self::len) is 0).
    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Writes what is staged, waits for the write-back of what was written with the buffered
    /// policies (dropping its pages), and flushes it to stable storage (fdatasync).
    pub fn sync(&mut self) -> io::Result<()> {
        self.settle()?;
        self.io.finish_behind()?;
        sys::fdatasync(self.io.fd.as_fd()).map_err(|e| self.io.fail(Op::Fdatasync, e))
    }

    /// Cuts or extends the file to `len` bytes (what is staged is written first). The page
    /// holding the new end, which the filesystem zeroes through the cache, is written back and
    /// dropped.
    pub fn set_len(&mut self, len: u64) -> io::Result<()> {
        if !self.mode.write {
            return Err(self
                .io
                .fail(Op::Ftruncate, io::Error::from_raw_os_error(libc::EBADF)));
        }
        if len > MAX_OFFSET {
            let why = format!("length {len} is past the largest file offset ({MAX_OFFSET})");
            let e = io::Error::new(io::ErrorKind::InvalidInput, why);
            return Err(self.io.fail(Op::Ftruncate, e));
        }
        self.settle()?;
        self.io.finish_behind()?;
        self.window.len = 0;
        let fd = self.io.fd.as_fd();
        sys::ftruncate(fd, len).map_err(|e| self.io.fail(Op::Ftruncate, e))?;
        let page = sys::page_size();
        if !len.is_multiple_of(page) {
            let lo = len / page * page;
            let all = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
            sys::sync_file_range(fd, lo, page, all)
                .map_err(|e| self.io.fail(Op::SyncFileRange, e))?;
            let _ = sys::fadvise(fd, lo, page, Advice::DontNeed);
        }
        Ok(())
    }

    /// Writes what is staged, waits for the write-back of what was written with the buffered
    /// policies (dropping its pages), and closes the file. An error here means data written
    /// earlier may not be in the file. (No fdatasync: as with close(2); see [`sync`](Self::sync).)
    pub fn close(mut self) -> io::Result<()> {
        self.closed = true;
        let staged = self.settle();
        let behind = self.io.finish_behind();
        staged.and(behind)
    }
}

impl AsFd for DirectFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.fd.as_fd()
    }
}

impl Drop for DirectFile {
    /// Best effort: writes what is staged and drops what was written; errors are lost (call
    /// [`close`](DirectFile::close) to see them).
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.settle();
            let _ = self.io.finish_behind();
        }
    }
}
