//! Moving the bytes of one file, by strategy. Every strategy copies only the source's data
//! extents (holes stay holes) and reports the strategy it really used.

use crate::chunks::{self, pieces, Stopped};
use crate::error::Op;
use crate::sys::{self, Advice, AlignedBuf};
use serde::Serialize;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How a file's data moves, and what that does to the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Pick the fastest cache-clean strategy the filesystems support.
    #[default]
    Auto,
    /// preadv2/pwritev2 with RWF_DONTCACHE (Linux 6.14+).
    Dontcache,
    /// O_DIRECT with aligned buffers, several requests in flight.
    Direct,
    /// Buffered I/O, then write-back and DONTNEED behind the cursor.
    DropBehind,
    /// Plain buffered copy (copy_file_range); leaves both files cached, like cp.
    Buffered,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Dontcache => "dontcache",
            Strategy::Direct => "direct",
            Strategy::DropBehind => "drop-behind",
            Strategy::Buffered => "buffered",
        }
    }
}

/// Why a strategy could not be used for a file: the copy falls back to the next one.
#[derive(Debug)]
pub enum Unsupported {
    /// The filesystem refused (EINVAL/EOPNOTSUPP on open or first I/O).
    Refused(&'static str, io::Error),
}

/// An error while moving data: which step, on which side.
#[derive(Debug)]
pub struct IoFailure {
    pub op: Op,
    pub on_dest: bool,
    pub err: io::Error,
}

pub enum Outcome {
    Done,
    Fallback(Unsupported),
    Failed(IoFailure),
    Interrupted,
}

/// Everything one data copy needs.
pub struct Job<'a> {
    pub src_path: &'a Path,
    pub dst_path: &'a Path,
    pub src: BorrowedFd<'a>,
    pub dst: BorrowedFd<'a>,
    /// Data extents of the source, `(offset, length)`.
    pub extents: &'a [(u64, u64)],
    pub chunk: usize,
    /// Requests in flight for one large file.
    pub depth: usize,
    pub interrupted: &'a AtomicBool,
    pub progress: &'a AtomicU64,
    /// xxh3 of the data as read, when --verify wants it (computed per chunk, combined).
    pub hasher: Option<&'a ChunkHashes>,
    /// Source pages cached before the copy (cachestat of the whole file; None if unknown).
    pub src_cached_before: Option<u64>,
}

/// Per-chunk hashes of a file, combined in offset order, so parallel chunks hash deterministically.
#[derive(Default)]
pub struct ChunkHashes {
    pub parts: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl ChunkHashes {
    pub fn add(&self, off: u64, data: &[u8]) {
        self.parts
            .lock()
            .unwrap()
            .push((off, xxhash_rust::xxh3::xxh3_64(data)));
    }
    pub fn digest(&self) -> u64 {
        let mut p = self.parts.lock().unwrap().clone();
        p.sort_unstable();
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for (o, v) in p {
            h.update(&o.to_le_bytes());
            h.update(&v.to_le_bytes());
        }
        h.digest()
    }
}

/// The digest [`ChunkHashes`] gives for a file whose data (extents `extents`, all in `data`,
/// which starts at offset 0) was read in one piece.
pub fn digest_of(extents: &[(u64, u64)], chunk: usize, data: &[u8]) -> u64 {
    let h = ChunkHashes::default();
    for (off, len) in pieces(extents, chunk as u64) {
        let end = ((off + len) as usize).min(data.len());
        h.add(off, &data[off as usize..end]);
    }
    h.digest()
}

/// Runs `work` over the job's extents with the job's depth (see [`chunks::run`]).
fn parallel<F>(job: &Job<'_>, align: usize, work: F) -> Outcome
where
    F: Fn(&mut AlignedBuf, u64, u64) -> Result<(), Outcome> + Sync,
{
    let done = |len| {
        job.progress.fetch_add(len, Ordering::Relaxed);
    };
    match chunks::run(
        job.extents,
        job.chunk,
        job.depth,
        align,
        Some(job.interrupted),
        work,
        done,
    ) {
        Ok(()) => Outcome::Done,
        Err(Stopped::Interrupted) => Outcome::Interrupted,
        Err(Stopped::Failed(o)) => o,
    }
}

fn fail(op: Op, on_dest: bool, err: io::Error) -> Outcome {
    Outcome::Failed(IoFailure { op, on_dest, err })
}

pub(crate) fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
    )
}

/// Reads `len` bytes at `off` fully (short only at EOF) with `read`.
pub(crate) fn read_full(
    buf: &mut [u8],
    off: u64,
    len: usize,
    mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut got = 0;
    while got < len {
        let n = read(&mut buf[got..len], off + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

pub(crate) fn write_full(
    buf: &[u8],
    off: u64,
    mut write: impl FnMut(&[u8], u64) -> io::Result<usize>,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = write(&buf[done..], off + done as u64)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
        }
        done += n;
    }
    Ok(())
}

/// O_DIRECT copy: `src_direct`/`dst_direct` are O_DIRECT descriptors of the same files.
/// The unaligned tail is written as a whole aligned block; the caller truncates to the size.
pub fn copy_direct(
    job: &Job<'_>,
    src_direct: BorrowedFd<'_>,
    dst_direct: BorrowedFd<'_>,
    mem_align: usize,
    off_align: u64,
) -> Outcome {
    let first = AtomicBool::new(true);
    parallel(job, mem_align, |buf, off, len| {
        let n = read_direct(src_direct, buf, off, len, off_align).map_err(|e| {
            if first.load(Ordering::Relaxed) && refused(&e) {
                Outcome::Fallback(Unsupported::Refused("pread(O_DIRECT)", e))
            } else {
                fail(Op::PreadDirect, false, e)
            }
        })?;
        if n == 0 {
            return Ok(());
        }
        if let Some(h) = job.hasher {
            h.add(off, &buf[..n]);
        }
        let padded = (n as u64).div_ceil(off_align) * off_align;
        let padded = (padded as usize).min(buf.len());
        buf[n..padded].fill(0);
        write_full(&buf[..padded], off, |b, o| pwrite(dst_direct, b, o)).map_err(|e| {
            if first.load(Ordering::Relaxed) && refused(&e) {
                Outcome::Fallback(Unsupported::Refused("pwrite(O_DIRECT)", e))
            } else {
                fail(Op::PwriteDirect, true, e)
            }
        })?;
        first.store(false, Ordering::Relaxed);
        Ok(())
    })
}

/// Reads `len` bytes at `off` with O_DIRECT: lengths must be aligned too, so it asks for the
/// aligned-up length and takes the short read at EOF.
fn read_direct(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    off: u64,
    len: u64,
    off_align: u64,
) -> io::Result<usize> {
    let want = len as usize;
    let req = ((len.div_ceil(off_align) * off_align) as usize).min(buf.len());
    let mut got = 0usize;
    while got < want {
        match sys::pread(fd, &mut buf[got..req], off + got as u64)? {
            0 => break,
            r => got += r,
        }
    }
    Ok(got.min(want))
}

fn pwrite(fd: BorrowedFd<'_>, b: &[u8], o: u64) -> io::Result<usize> {
    sys::pwritev2(fd, b, o, 0)
}

/// RWF_DONTCACHE copy: pages this copy brings in are dropped once read / written back; pages
/// that were cached before stay (the kernel only marks folios it creates for the read).
/// The kernel does not drop every such folio: with several reads in flight about 1% of a 4 GiB
/// source stayed (folios another reader was waiting on are left), so once the copy is done the
/// source blocks that were not cached before are dropped with DONTNEED as drop-behind does.
pub fn copy_dontcache(job: &Job<'_>) -> Outcome {
    let precached = PrecachedBlocks::snapshot(job);
    let first = AtomicBool::new(true);
    let outcome = parallel(job, 4096, |buf, off, len| {
        let n = read_full(buf, off, len as usize, |b, o| {
            sys::preadv2(job.src, b, o, sys::RWF_DONTCACHE)
        })
        .map_err(|e| {
            if first.load(Ordering::Relaxed) && refused(&e) {
                Outcome::Fallback(Unsupported::Refused("preadv2(RWF_DONTCACHE)", e))
            } else {
                fail(Op::Preadv2Dontcache, false, e)
            }
        })?;
        if n == 0 {
            return Ok(());
        }
        if let Some(h) = job.hasher {
            h.add(off, &buf[..n]);
        }
        write_full(&buf[..n], off, |b, o| {
            sys::pwritev2(job.dst, b, o, sys::RWF_DONTCACHE)
        })
        .map_err(|e| {
            if first.load(Ordering::Relaxed) && refused(&e) {
                Outcome::Fallback(Unsupported::Refused("pwritev2(RWF_DONTCACHE)", e))
            } else {
                fail(Op::Pwritev2Dontcache, true, e)
            }
        })?;
        first.store(false, Ordering::Relaxed);
        Ok(())
    });
    for &(off, len) in job.extents {
        precached.drop_others(job, off, len);
    }
    outcome
}

/// Granularity of drop-behind on the source: pages cached before the copy are remembered per
/// block of this size and never dropped.
const DROP_BLOCK: u64 = 128 << 10;

/// Which [`DROP_BLOCK`]s of a source had cached pages before the copy: those are someone
/// else's and stay; the others are dropped behind the copy.
struct PrecachedBlocks(Vec<bool>);

impl PrecachedBlocks {
    /// One cachestat per block, only when something of the file was cached before.
    fn snapshot(job: &Job<'_>) -> PrecachedBlocks {
        let size = job.extents.last().map_or(0, |e| e.0 + e.1);
        let mut precached = vec![false; size.div_ceil(DROP_BLOCK) as usize];
        if job.src_cached_before == Some(0) {
            return PrecachedBlocks(precached);
        }
        for &(off, len) in job.extents {
            let (b0, b1) = (off / DROP_BLOCK, (off + len).div_ceil(DROP_BLOCK));
            for b in b0..b1 {
                precached[b as usize] = sys::cachestat(job.src, b * DROP_BLOCK, DROP_BLOCK)
                    .map(|c| c.cache > 0)
                    .unwrap_or(true);
            }
        }
        PrecachedBlocks(precached)
    }

    /// Drops the runs of blocks of `[off, off+len)` that were not cached before the copy.
    fn drop_others(&self, job: &Job<'_>, off: u64, len: u64) {
        let (b0, b1) = (off / DROP_BLOCK, (off + len).div_ceil(DROP_BLOCK));
        let mut b = b0;
        while b < b1 {
            if self.0[b as usize] {
                b += 1;
                continue;
            }
            let start = b;
            while b < b1 && !self.0[b as usize] {
                b += 1;
            }
            let _ = sys::fadvise(
                job.src,
                start * DROP_BLOCK,
                (b - start) * DROP_BLOCK,
                Advice::DontNeed,
            );
        }
    }
}

/// Drop-behind copy: buffered reads and writes; behind the cursor the destination is written
/// back and dropped, and source blocks that were not cached before the copy are dropped. The
/// snapshot of what was cached is taken before the first read, so our own readahead into the
/// next chunk is not mistaken for someone else's cached pages.
pub fn copy_drop_behind(job: &Job<'_>) -> Outcome {
    let precached = PrecachedBlocks::snapshot(job);
    let _ = sys::fadvise(job.src, 0, 0, Advice::Sequential);
    parallel(job, 4096, |buf, off, len| {
        let n = read_full(buf, off, len as usize, |b, o| sys::pread(job.src, b, o))
            .map_err(|e| fail(Op::Pread, false, e))?;
        if n == 0 {
            return Ok(());
        }
        if let Some(h) = job.hasher {
            h.add(off, &buf[..n]);
        }
        precached.drop_others(job, off, len);
        write_full(&buf[..n], off, |b, o| pwrite(job.dst, b, o))
            .map_err(|e| fail(Op::Pwrite, true, e))?;
        // Write this chunk back now and drop it once clean. Waiting here keeps at most one
        // chunk per thread dirty; with several threads the device still sees a queue.
        let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        sys::sync_file_range(job.dst, off, n as u64, flags)
            .map_err(|e| fail(Op::SyncFileRange, true, e))?;
        let _ = sys::fadvise(job.dst, off, n as u64, Advice::DontNeed);
        Ok(())
    })
}

/// Plain buffered copy with copy_file_range (falls back to read/write across filesystems
/// where the kernel refuses, EXDEV/EINVAL on old kernels).
pub fn copy_buffered(job: &Job<'_>) -> Outcome {
    parallel(job, 4096, |buf, off, len| {
        let mut done = 0u64;
        while done < len {
            match sys::copy_file_range(
                job.src,
                off + done,
                job.dst,
                off + done,
                (len - done) as usize,
            ) {
                Ok(0) => break,
                Ok(n) => done += n as u64,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EXDEV)
                            | Some(libc::EINVAL)
                            | Some(libc::ENOSYS)
                            | Some(libc::EOPNOTSUPP)
                    ) =>
                {
                    let n = read_full(buf, off + done, (len - done) as usize, |b, o| {
                        sys::pread(job.src, b, o)
                    })
                    .map_err(|e| fail(Op::Pread, false, e))?;
                    if n == 0 {
                        break;
                    }
                    write_full(&buf[..n], off + done, |b, o| pwrite(job.dst, b, o))
                        .map_err(|e| fail(Op::Pwrite, true, e))?;
                    done += n as u64;
                }
                Err(e) => {
                    // copy_file_range does not say which side failed; ENOSPC/EDQUOT are the destination's.
                    let on_dest = matches!(
                        e.raw_os_error(),
                        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG)
                    );
                    return Err(fail(Op::CopyFileRange, on_dest, e));
                }
            }
        }
        if let Some(h) = job.hasher {
            // Hash from the source (cached now) so --verify has the reference digest.
            let mut o = off;
            while o < off + done {
                let want = ((off + done - o) as usize).min(buf.len());
                let n = read_full(buf, o, want, |b, p| sys::pread(job.src, b, p))
                    .map_err(|e| fail(Op::Pread, false, e))?;
                if n == 0 {
                    break;
                }
                h.add(o, &buf[..n]);
                o += n as u64;
            }
        }
        Ok(())
    })
}

/// Reads a whole file from disk, not from the cache (O_DIRECT where supported, else buffered
/// followed by DONTNEED of what the read brought in), returning the chunk digest used by copy.
pub fn digest_from_disk(path: &Path, extents: &[(u64, u64)], chunk: usize) -> io::Result<u64> {
    let hashes = ChunkHashes::default();
    let direct = sys::open_read_direct(path).ok();
    let buffered = std::fs::File::open(path)?;
    let (align, off_align) = direct
        .as_ref()
        .and_then(|d| sys::dio_align(d.as_fd()))
        .map_or((4096, 4096), |(m, o)| (m as usize, o as u64));
    let mut buf = AlignedBuf::new(chunk, align.max(4096));
    for (off, len) in pieces(extents, chunk as u64) {
        let n = match &direct {
            Some(d) => match read_direct(d.as_fd(), &mut buf, off, len, off_align.max(512)) {
                Ok(n) => n,
                Err(e) if refused(&e) => read_full(&mut buf, off, len as usize, |b, o| {
                    sys::pread(buffered.as_fd(), b, o)
                })?,
                Err(e) => return Err(e),
            },
            None => {
                let was = sys::cachestat(buffered.as_fd(), off, len)
                    .map(|c| c.cache)
                    .unwrap_or(1);
                // Already cached pages cannot be re-read from disk without dropping them first.
                if was > 0 {
                    sys::sync_file_range(
                        buffered.as_fd(),
                        off,
                        len,
                        sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER,
                    )?;
                    sys::fadvise(buffered.as_fd(), off, len, Advice::DontNeed)?;
                }
                let n = read_full(&mut buf, off, len as usize, |b, o| {
                    sys::pread(buffered.as_fd(), b, o)
                })?;
                sys::fadvise(buffered.as_fd(), off, len, Advice::DontNeed)?;
                n
            }
        };
        if n == 0 {
            break;
        }
        hashes.add(off, &buf[..n]);
    }
    Ok(hashes.digest())
}

/// Opens the O_DIRECT twins of a source and a freshly created destination, with the common
/// alignment; None when either filesystem lacks O_DIRECT for them.
pub fn open_direct_pair(
    src_path: &Path,
    dst_path: &Path,
    dst: BorrowedFd<'_>,
) -> Result<(OwnedFd, OwnedFd, usize, u64), Unsupported> {
    let s =
        sys::open_read_direct(src_path).map_err(|e| Unsupported::Refused("open(O_DIRECT)", e))?;
    let d = sys::open_write(dst_path, None, true)
        .map_err(|e| Unsupported::Refused("open(O_DIRECT)", e))?;
    let sa = sys::dio_align(s.as_fd());
    let da = sys::dio_align(dst);
    match (sa, da) {
        (Some((sm, so)), Some((dm, dof))) => {
            let mem = sm.max(dm).max(512) as usize;
            let off = so.max(dof).max(512) as u64;
            Ok((s, d, mem, off))
        }
        _ => Err(Unsupported::Refused(
            "statx(STATX_DIOALIGN)",
            io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        )),
    }
}
