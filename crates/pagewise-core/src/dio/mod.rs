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
use std::path::{Path, PathBuf};

use crate::error::{Error, Op};
use crate::sys::{self, Advice, AlignedBuf, FileOpen};

mod requests;
#[cfg(test)]
mod tests;

use requests::{Behind, Io};

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

/// How a [`DirectFile`] keeps out of the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CachePolicy {
    /// O_DIRECT: no page cache at all (the default).
    #[default]
    Direct,
    /// Buffered I/O with `RWF_DONTCACHE` (Linux 6.14): pages dropped once used.
    #[serde(rename = "dontcache")]
    DontCache,
    /// Buffered I/O; pages dropped behind with fadvise(DONTNEED) after writeback.
    DropBehind,
}

impl CachePolicy {
    /// The policy's name: `direct`, `dontcache`, `drop-behind` (as `copy --cache` spells them).
    pub fn name(self) -> &'static str {
        match self {
            CachePolicy::Direct => "direct",
            CachePolicy::DontCache => "dontcache",
            CachePolicy::DropBehind => "drop-behind",
        }
    }
    /// The policy to try when this one is refused.
    fn next(self) -> Option<CachePolicy> {
        match self {
            CachePolicy::Direct => Some(CachePolicy::DontCache),
            CachePolicy::DontCache => Some(CachePolicy::DropBehind),
            CachePolicy::DropBehind => None,
        }
    }
}

impl fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CachePolicy {
    type Err = Error;
    /// Parses a [`name`](CachePolicy::name) (also `drop_behind`, `dropbehind`, `dont-cache`).
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "direct" => CachePolicy::Direct,
            "dontcache" | "dont-cache" | "dont_cache" => CachePolicy::DontCache,
            "drop-behind" | "drop_behind" | "dropbehind" => CachePolicy::DropBehind,
            _ => {
                return Err(Error::Invalid {
                    what: "cache policy",
                    message: format!("{s:?}: expected direct, dontcache or drop-behind"),
                })
            }
        })
    }
}

/// How to open a [`DirectFile`]: access and creation, as open(2) flags. Default: read-only,
/// the file must exist; new files get mode 0o666 before the umask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenMode {
    /// Reads allowed.
    pub read: bool,
    /// Writes allowed.
    pub write: bool,
    /// Create the file if it does not exist (`O_CREAT`; needs `write`).
    pub create: bool,
    /// Cut the file to length 0 (`O_TRUNC`; needs `write`).
    pub truncate: bool,
    /// Every write goes to the end of the file, whatever offset it names (needs `write`).
    pub append: bool,
    /// With `create`: fail with EEXIST if the file exists (`O_EXCL`).
    pub exclusive: bool,
    /// Permission bits of a created file, before the umask (default 0o666).
    pub permissions: u32,
}

impl Default for OpenMode {
    fn default() -> Self {
        OpenMode::read()
    }
}

impl OpenMode {
    /// Read an existing file (`"r"`).
    pub fn read() -> Self {
        OpenMode {
            read: true,
            write: false,
            create: false,
            truncate: false,
            append: false,
            exclusive: false,
            permissions: 0o666,
        }
    }
    /// Write a file, created or cut to length 0 (`"w"`).
    pub fn write() -> Self {
        OpenMode {
            read: false,
            write: true,
            create: true,
            truncate: true,
            ..OpenMode::read()
        }
    }
    /// The mode of an fopen(3) / Python `open()` mode string: `r`, `w`, `a`, `x`, each with an
    /// optional `+` (read and write) and `b` (ignored: always binary). `t` and anything else
    /// is refused.
    pub fn from_fopen(mode: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Invalid {
            what: "mode",
            message: format!("{mode:?}: {why}"),
        };
        let mut base = None;
        let mut plus = false;
        for c in mode.chars() {
            match c {
                'r' | 'w' | 'a' | 'x' if base.is_none() => base = Some(c),
                'r' | 'w' | 'a' | 'x' => return Err(bad("more than one of r, w, a, x")),
                '+' if !plus => plus = true,
                'b' => {}
                't' => return Err(bad("text mode is not supported (binary only)")),
                _ => return Err(bad("expected r, w, a or x, then optional + and b")),
            }
        }
        let none = OpenMode {
            read: false,
            ..OpenMode::read()
        };
        let m = match base.ok_or_else(|| bad("expected r, w, a or x"))? {
            'r' => OpenMode::read(),
            'w' => OpenMode::write(),
            'a' => OpenMode {
                write: true,
                create: true,
                append: true,
                ..none
            },
            _ => OpenMode {
                write: true,
                create: true,
                exclusive: true,
                ..none
            },
        };
        Ok(OpenMode {
            read: m.read || plus,
            write: m.write || plus,
            ..m
        })
    }

    /// Checks that the flags make sense together.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |message: &str| {
            Err(Error::Invalid {
                what: "mode",
                message: message.into(),
            })
        };
        if !self.read && !self.write {
            return bad("neither read nor write");
        }
        if !self.write && (self.create || self.truncate || self.append) {
            return bad("create, truncate and append need write");
        }
        if self.exclusive && !self.create {
            return bad("exclusive needs create");
        }
        if self.permissions & !0o7777 != 0 {
            return bad("permissions beyond 0o7777");
        }
        Ok(())
    }
}

/// What a request must be aligned to for zero-copy I/O: the buffer's address to `memory`, the
/// file offset and the length to `offset`. With O_DIRECT, from statx(STATX_DIOALIGN), else
/// the device's logical block size, else 4096; with the buffered policies the page size
/// (nothing is required then; page-aligned buffers merely copy fastest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alignment {
    /// Alignment of the buffer's address in bytes (a power of two).
    pub memory: usize,
    /// Alignment of file offsets and lengths in bytes (a power of two).
    pub offset: usize,
}

/// A failed call on a [`DirectFile`]: `path: syscall failed: error`. The `io::Error`s of
/// `DirectFile` carry one inside (`io::Error::get_ref`); [`errno`] finds its errno.
#[derive(Debug)]
pub struct DioError {
    /// The path the file was opened with.
    pub path: PathBuf,
    /// The call that failed, as strace names it (`pread(O_DIRECT)`, `sync_file_range`, ...).
    pub syscall: &'static str,
    /// The kernel's error.
    pub source: io::Error,
}

impl fmt::Display for DioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} failed: {}",
            self.path.display(),
            self.syscall,
            self.source
        )
    }
}

impl std::error::Error for DioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The errno of an error from a [`DirectFile`] (or any OS error).
pub fn errno(e: &io::Error) -> Option<i32> {
    let kind = |e: &io::Error| match e.kind() {
        io::ErrorKind::InvalidInput => Some(libc::EINVAL),
        io::ErrorKind::OutOfMemory => Some(libc::ENOMEM),
        _ => None,
    };
    e.raw_os_error()
        .or_else(|| failure(e)?.source.raw_os_error())
        .or_else(|| kind(failure(e).map_or(e, |f| &f.source)))
}

/// The largest file offset the kernel takes (`loff_t`): requests must end by it.
const MAX_OFFSET: u64 = i64::MAX as u64;

/// The [`DioError`] inside an error from a [`DirectFile`], naming the path and the call.
pub fn failure(e: &io::Error) -> Option<&DioError> {
    e.get_ref()?.downcast_ref::<DioError>()
}

/// EINVAL or EOPNOTSUPP: the filesystem does not do what was asked (rather than failing it).
fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
    )
}

fn align_down(x: u64, a: usize) -> u64 {
    x / a as u64 * a as u64
}

fn align_up(x: u64, a: usize) -> u64 {
    x.div_ceil(a as u64) * a as u64
}

/// `[off, off+len)` widened to whole pages.
fn page_cover(off: u64, len: u64) -> (u64, u64) {
    let p = sys::page_size() as usize;
    (align_down(off, p), align_up(off + len, p))
}

/// The read-ahead window: file bytes `[off, off+len)` in `buf`, as read from the file.
#[derive(Default)]
struct Window {
    buf: Option<AlignedBuf>,
    off: u64,
    len: usize,
    /// Where a sequential read continues, and how much the next read-ahead reads.
    next: u64,
    ahead: usize,
}

impl Window {
    fn contains(&self, pos: u64) -> bool {
        pos >= self.off && pos < self.off + self.len as u64
    }
    fn invalidate_overlap(&mut self, off: u64, len: u64) {
        if self.len > 0 && off < self.off + self.len as u64 && off + len > self.off {
            self.len = 0;
        }
    }
}

/// The write-behind stage: file bytes `[off, off+len)` in `buf`, written by the caller (and,
/// with O_DIRECT, the head of the first block as read from the file), not yet in the file.
#[derive(Default)]
struct Stage {
    buf: Option<AlignedBuf>,
    off: u64,
    len: usize,
    active: bool,
}

impl Stage {
    fn end(&self) -> u64 {
        self.off + self.len as u64
    }
}

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
    /// Opens `path` for cache-neutral I/O under `policy`, falling back as the module doc says
    /// ([`policy`](Self::policy) tells the one in force, [`notice`](Self::notice) why).
    ///
    /// A file opened for writing is opened for reading too where permissions allow (O_DIRECT
    /// writes of a partial block read the rest of it). Only regular files and block devices.
    pub fn open(
        path: impl AsRef<Path>,
        mode: OpenMode,
        policy: CachePolicy,
    ) -> Result<DirectFile, Error> {
        mode.validate()?;
        let path = path.as_ref();
        let io_err = |op: Op, source: io::Error| Error::Io {
            path: path.to_path_buf(),
            op,
            source,
        };
        let mut how = FileOpen {
            read: true,
            write: mode.write,
            create: mode.create.then_some(mode.permissions),
            exclusive: mode.exclusive,
            truncate: mode.truncate,
            direct: policy == CachePolicy::Direct,
        };
        let mut notice = None;
        let fd = loop {
            match sys::open_file(path, how) {
                Ok(fd) => break fd,
                // A file we may write but not read: O_DIRECT then cannot complete a partial
                // block (reads of it fail with EBADF).
                Err(e) if e.raw_os_error() == Some(libc::EACCES) && how.read && !mode.read => {
                    how.read = false;
                }
                Err(e) if how.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    notice = Some(format!(
                        "{}: open(O_DIRECT) refused ({e}): falling back to dontcache",
                        path.display()
                    ));
                    how.direct = false;
                    // The refused open may have created the file already (the check comes
                    // after creation): it is ours, so no O_EXCL this time.
                    how.exclusive = false;
                }
                Err(e) => {
                    let op = if how.direct { Op::OpenDirect } else { Op::Open };
                    return Err(io_err(op, e));
                }
            }
        };
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_err(Op::Fstat, e))?;
        if !(st.is_file() || st.is_block_device()) {
            let source = if st.is_dir() {
                io::Error::from_raw_os_error(libc::EISDIR)
            } else {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("a {}, not a regular file or block device", st.kind()),
                )
            };
            return Err(io_err(Op::Open, source));
        }
        sys::set_nonblock(fd.as_fd(), false).map_err(|e| io_err(Op::Open, e))?;
        let page = sys::page_size() as usize;
        let mut io = Io {
            shmem: sys::is_shmem(fd.as_fd()),
            fd,
            path: path.to_path_buf(),
            policy: CachePolicy::Direct,
            notice,
            proven: false,
            align: Alignment {
                memory: page,
                offset: page,
            },
            behind: Behind::default(),
        };
        if how.direct && io.shmem {
            io.fall_back(
                "O_DIRECT",
                "tmpfs has no direct I/O: its O_DIRECT is buffered I/O over its own pages",
            )
            .map_err(|e| io_err(Op::OpenDirect, e))?;
        } else if how.direct {
            io.align = match sys::dio_align(io.fd.as_fd()) {
                Some((mem, off)) => Alignment {
                    memory: (mem as usize).next_power_of_two(),
                    offset: (off as usize).next_power_of_two(),
                },
                None => {
                    let a = sys::logical_block_size(st.dev).map_or(4096, |b| b as usize);
                    Alignment {
                        memory: a,
                        offset: a,
                    }
                }
            };
        } else if policy == CachePolicy::Direct {
            // O_DIRECT refused at open (the notice says so).
            io.become_buffered(CachePolicy::DontCache);
        } else {
            io.become_buffered(policy);
        }
        if io.shmem {
            let note = "tmpfs keeps the file's pages in memory whatever the policy";
            io.notice = Some(match io.notice.take() {
                Some(n) => format!("{n} ({note})"),
                None => format!("{}: {note}", path.display()),
            });
        }
        Ok(DirectFile {
            io,
            mode,
            window: Window {
                ahead: READAHEAD_MIN,
                ..Window::default()
            },
            stage: Stage::default(),
            closed: false,
        })
    }

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
        AlignedBuf::try_alloc(size, a.memory).map_err(|e| self.io.fail("posix_memalign", e))
    }

    /// The file's length in bytes, staged writes included.
    pub fn len(&self) -> io::Result<u64> {
        let fd = self.io.fd.as_fd();
        let st = sys::fstat(fd).map_err(|e| self.io.fail("fstat", e))?;
        let size = if st.is_block_device() {
            sys::block_device_size(fd).map_err(|e| self.io.fail("ioctl(BLKGETSIZE64)", e))?
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

    /// Reads up to `buf.len()` bytes at `off`: fewer only at the end of the file (0 there).
    pub fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if !self.mode.read {
            return Err(self
                .io
                .fail("pread", io::Error::from_raw_os_error(libc::EBADF)));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        self.check_span("pread", off, buf.len())?;
        let end = off + buf.len() as u64;
        if self.stage.active && off < self.stage.end() && end > self.stage.off {
            self.settle()?;
        }
        let mut done = 0;
        while done < buf.len() {
            let pos = off + done as u64;
            if self.window.contains(pos) {
                let w = &self.window;
                let at = (pos - w.off) as usize;
                let n = (w.len - at).min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&w.buf.as_ref().expect("filled")[at..at + n]);
                done += n;
                self.window.next = pos + n as u64;
                continue;
            }
            let rest = &mut buf[done..];
            if let Some(len) = self.straight_len(pos, rest.as_ptr(), rest.len()) {
                let n = self.io.read_full(&mut rest[..len], pos)?;
                done += n;
                self.window.next = pos + n as u64;
                if n < len {
                    break;
                }
                continue;
            }
            if !self.fill(pos, rest.len())? {
                break;
            }
        }
        Ok(done)
    }

    /// The length of a request at `pos` from `ptr` (of `len` bytes) that can go straight to
    /// the file, if it can.
    fn straight_len(&self, pos: u64, ptr: *const u8, len: usize) -> Option<usize> {
        let a = self.io.align;
        if self.io.policy == CachePolicy::Direct {
            let aligned =
                pos.is_multiple_of(a.offset as u64) && (ptr as usize).is_multiple_of(a.memory);
            (aligned && len >= a.offset).then(|| len / a.offset * a.offset)
        } else {
            (len >= STRAIGHT_MIN).then_some(len)
        }
    }

    /// Fills the window from the block holding `pos`, for a read of `want` bytes: only the
    /// blocks it needs after a seek, a doubling read-ahead while reads are sequential. False
    /// at the end of the file.
    fn fill(&mut self, pos: u64, want: usize) -> io::Result<bool> {
        let a = self.io.align.offset;
        let start = align_down(pos, a);
        let cover = (align_up(pos + want as u64, a) - start) as usize;
        let w = &mut self.window;
        let len = if pos == w.next {
            let len = cover.max(w.ahead);
            w.ahead = (w.ahead * 2).min(CHUNK);
            len
        } else {
            w.ahead = READAHEAD_MIN;
            cover
        };
        // Not past the largest offset (the kernel refuses a request that ends beyond it; no
        // file has bytes there): a read in the last block before it is the end of the file.
        let len = (align_up(len as u64, a) as usize)
            .min(CHUNK)
            .min(align_down(MAX_OFFSET - start, a) as usize);
        if w.buf.is_none() {
            w.buf = Some(self.io.bounce_buffer()?);
        }
        let w = &mut self.window;
        let buf = w.buf.as_mut().expect("allocated above");
        w.len = 0;
        let got = self.io.read_full(&mut buf[..len], start)?;
        let w = &mut self.window;
        w.off = start;
        w.len = got;
        Ok(w.contains(pos))
    }

    /// Writes all of `buf` at `off` (at the end of the file in append mode), returning
    /// `buf.len()`. The bytes may be staged until the next non-contiguous request, `sync` or
    /// `close` (see the module doc).
    pub fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        if !self.mode.write {
            return Err(self
                .io
                .fail("pwrite", io::Error::from_raw_os_error(libc::EBADF)));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let off = if self.mode.append { self.len()? } else { off };
        self.check_span("pwrite", off, buf.len())?;
        // Written in whole blocks (O_DIRECT) or pages (write-back), which must end by the
        // largest offset too: past it no filesystem stores a byte (EFBIG, as the kernel says).
        let block = self.io.align.offset.max(sys::page_size() as usize);
        if align_up(off + buf.len() as u64, block) > MAX_OFFSET {
            let e = io::Error::from_raw_os_error(libc::EFBIG);
            return Err(self.io.fail("pwrite", e));
        }
        self.window.invalidate_overlap(off, buf.len() as u64);
        if self.stage.active && off != self.stage.end() {
            self.settle()?;
        }
        // A write that starts past the end of the file leaves a gap. It goes to the file
        // before this call returns, as pwrite(2) would: the file's size is then its end and
        // the gap reads as zeros, to this file and to anyone else (staged, the gap would be
        // past the end until the next request elsewhere).
        let size = if self.stage.active { 0 } else { self.len()? };
        let past_end = !self.stage.active && off > size;
        // Going past a partial last page, the kernel zeroes the rest of that page through the
        // cache (buffered writes): a page this file then drops again, unless it was cached.
        let page = sys::page_size();
        let end_page = (past_end && !size.is_multiple_of(page))
            .then(|| align_down(size, page as usize))
            .filter(|&lo| !self.io.cached(lo, page));
        let mut done = 0;
        while done < buf.len() {
            let pos = off + done as u64;
            let rest = &buf[done..];
            let straight = self.straight_len(pos, rest.as_ptr(), rest.len());
            if let Some(len) = straight {
                if self.stage.active && self.stage.len > 0 {
                    // Contiguous with the stage: with O_DIRECT its end is aligned (else no
                    // straight write), so it is written whole.
                    self.settle()?;
                }
                self.stage.active = false;
                self.io.write_full(&rest[..len], pos)?;
                done += len;
                continue;
            }
            if !self.stage.active {
                self.start_stage(pos)?;
            }
            let s = &mut self.stage;
            let n = rest.len().min(CHUNK - s.len);
            s.buf.as_mut().expect("allocated")[s.len..s.len + n].copy_from_slice(&rest[..n]);
            s.len += n;
            done += n;
            if s.len == CHUNK {
                let b = s.buf.take().expect("allocated");
                let r = self.io.write_full(&b, self.stage.off);
                self.stage.buf = Some(b);
                if let Err(e) = r {
                    self.stage.active = false;
                    return Err(e);
                }
                self.stage.off += CHUNK as u64;
                self.stage.len = 0;
            }
        }
        if past_end {
            self.settle()?;
        }
        if let Some(lo) = end_page {
            self.io.write_back_and_drop(lo, page)?;
        }
        Ok(buf.len())
    }

    /// Checks that a request of `len` bytes at `off` ends by the largest offset the kernel
    /// takes (`EINVAL` otherwise, as the kernel's own check says), before any of it is
    /// staged or read ahead.
    fn check_span(&self, syscall: &'static str, off: u64, len: usize) -> io::Result<()> {
        match off.checked_add(len as u64) {
            Some(end) if end <= MAX_OFFSET => Ok(()),
            _ => Err(self.io.fail(
                syscall,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "offset {off} + length {len} is past the largest file offset \
                         ({MAX_OFFSET})"
                    ),
                ),
            )),
        }
    }

    /// Starts the stage at `pos`; with O_DIRECT at the block holding it, whose head is read
    /// from the file (zeros past its end).
    fn start_stage(&mut self, pos: u64) -> io::Result<()> {
        if self.stage.buf.is_none() {
            self.stage.buf = Some(self.io.bounce_buffer()?);
        }
        let s = &mut self.stage;
        let buf = s.buf.as_mut().expect("allocated above");
        let a = self.io.align.offset;
        if self.io.policy == CachePolicy::Direct && !pos.is_multiple_of(a as u64) {
            let start = align_down(pos, a);
            let head = (pos - start) as usize;
            let got = self.io.read_full(&mut buf[..a], start)?;
            buf[got.min(head)..head].fill(0);
            s.off = start;
            s.len = head;
        } else {
            s.off = pos;
            s.len = 0;
        }
        s.active = true;
        Ok(())
    }

    /// Writes the stage to the file. With O_DIRECT: the whole blocks straight; a partial last
    /// block inside the file read, completed and written whole; one at the file's end written
    /// with its exact bytes and dropped from the cache.
    fn settle(&mut self) -> io::Result<()> {
        if !self.stage.active {
            return Ok(());
        }
        self.stage.active = false;
        // A read-ahead may have read the staged range's old bytes.
        let (off, len) = (self.stage.off, self.stage.len as u64);
        self.window.invalidate_overlap(off, len);
        let Some(mut b) = self.stage.buf.take() else {
            return Ok(());
        };
        let r = self.settle_from(&mut b);
        self.stage.buf = Some(b);
        r
    }

    fn settle_from(&mut self, b: &mut AlignedBuf) -> io::Result<()> {
        let (off, len) = (self.stage.off, self.stage.len);
        if len == 0 {
            return Ok(());
        }
        if self.io.policy != CachePolicy::Direct {
            return self.io.write_full(&b[..len], off);
        }
        let a = self.io.align.offset;
        let full = len / a * a;
        if full > 0 {
            self.io.write_full(&b[..full], off)?;
        }
        let rem = len - full;
        if rem == 0 {
            return Ok(());
        }
        let tail = off + full as u64;
        if self.io.policy != CachePolicy::Direct {
            // O_DIRECT was refused on the first request above.
            return self.io.write_full(&b[full..len], tail);
        }
        // The stage is inactive by now: this is the size on disk (a block device's too).
        let size = self.len()?;
        if size >= tail + a as u64 {
            // Inside the file: read the block, lay the new bytes over it, write it whole.
            let new = b[full..len].to_vec();
            let got = self.io.read_full(&mut b[full..full + a], tail)?;
            b[full..full + rem].copy_from_slice(&new);
            if got == a {
                return self.io.write_full(&b[full..full + a], tail);
            }
        }
        self.io.write_tail_buffered(&b[full..full + rem], tail)
    }

    /// Writes what is staged, waits for the write-back of what was written with the buffered
    /// policies (dropping its pages), and flushes it to stable storage (fdatasync).
    pub fn sync(&mut self) -> io::Result<()> {
        self.settle()?;
        self.io.finish_behind()?;
        sys::fdatasync(self.io.fd.as_fd()).map_err(|e| self.io.fail("fdatasync", e))
    }

    /// Cuts or extends the file to `len` bytes (what is staged is written first). The page
    /// holding the new end, which the filesystem zeroes through the cache, is written back and
    /// dropped.
    pub fn set_len(&mut self, len: u64) -> io::Result<()> {
        if !self.mode.write {
            return Err(self
                .io
                .fail("ftruncate", io::Error::from_raw_os_error(libc::EBADF)));
        }
        if len > MAX_OFFSET {
            let why = format!("length {len} is past the largest file offset ({MAX_OFFSET})");
            let e = io::Error::new(io::ErrorKind::InvalidInput, why);
            return Err(self.io.fail("ftruncate", e));
        }
        self.settle()?;
        self.io.finish_behind()?;
        self.window.len = 0;
        let fd = self.io.fd.as_fd();
        sys::ftruncate(fd, len).map_err(|e| self.io.fail("ftruncate", e))?;
        let page = sys::page_size();
        if !len.is_multiple_of(page) {
            let lo = len / page * page;
            let all = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
            sys::sync_file_range(fd, lo, page, all)
                .map_err(|e| self.io.fail("sync_file_range", e))?;
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
