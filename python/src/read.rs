//! Reads of one large range into the caller's memory with many requests in flight, for
//! `pagewise.read_into`, `pagewise.read` and the `read_into`/`readinto_at` methods of
//! `pagewise.open` objects.
//!
//! A range is cut at the file's offset alignment into a head (up to the first aligned offset,
//! or the first block), a middle of whole blocks and a tail (the partial last block). The head
//! and the tail go through the library's `DirectFile` (its read-ahead window bounces them: one
//! block each), which also proves the policy: O_DIRECT refused on the first request falls back
//! there. The middle is cut into [`PIECE`]s read by `depth` threads with pread(2) on the same
//! descriptor (O_DIRECT): straight into the caller's memory when it is aligned for the
//! device, else through one aligned bounce buffer per thread (the case `pagewise.empty`
//! avoids, and the Python layer warns about once). With the buffered policies, and for short
//! ranges, the whole range goes through `DirectFile` (which keeps pages cached before and drops
//! what it brought in).

use crate::wait::Control;
use pagewise_core::dio::{self, CachePolicy, DioError};
use pagewise_core::sys::{self, AlignedBuf};
use pagewise_core::Op;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Bytes per request of the middle (what fio's `bs=1M` reads).
pub const PIECE: usize = 1 << 20;
/// Requests in flight when the caller does not say.
pub const DEFAULT_DEPTH: usize = 32;
/// The most requests in flight (threads) one call starts.
pub const MAX_DEPTH: usize = 256;
/// Threads that need a bounce buffer (of [`PIECE`] bytes each): at most this many, so a
/// misaligned read never holds more than 32 MiB besides the caller's memory.
const MAX_BOUNCE_THREADS: usize = 32;
/// Ranges shorter than this are read by `DirectFile` alone (its read-ahead window serves
/// small sequential reads better than threads).
pub const PARALLEL_MIN: usize = 2 << 20;
/// The step of serial reads, between looks at cancellation (and progress).
const SERIAL_STEP: usize = 8 << 20;
/// The step of reads of a file whose size says nothing ([`read_to_end`]): what a procfs or
/// sysfs file gives in a few reads, and no more memory than that ahead of what was read;
/// with the buffered policies `DirectFile` reads a request this long straight into it.
const UNSIZED_STEP: usize = 256 << 10;

/// What a read did: bytes read, and whether the middle of the range had to go through bounce
/// buffers because the caller's memory is not aligned to the file (O_DIRECT only).
pub struct Outcome {
    pub n: usize,
    pub misaligned: bool,
}

fn interrupted() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted")
}

fn fail(path: &Path, op: Op, source: io::Error) -> io::Error {
    DioError::wrap(path.to_path_buf(), op, source)
}

/// The head of a range at `off`: up to the next aligned offset, or one block when `off` is
/// aligned.
fn head_len(off: u64, align: usize) -> usize {
    let r = (off % align as u64) as usize;
    align - r
}

/// Reads up to `buf.len()` bytes at `off` (fewer only at the end of the file). `parallel`:
/// the middle may be read with raw preads (false for a file with writes that may be staged).
pub fn read_into(
    file: &mut dio::DirectFile,
    path: &Path,
    buf: &mut [u8],
    off: u64,
    depth: usize,
    parallel: bool,
    ctl: &Control,
) -> io::Result<Outcome> {
    let size = file.len()?;
    let n = (buf.len() as u64).min(size.saturating_sub(off)) as usize;
    ctl.progress.total_bytes.store(n as u64, Ordering::Relaxed);
    if n == 0 {
        // At or past the end: the library's read says 0, or EINVAL past the largest offset.
        return Ok(Outcome {
            n: file.read_at(buf, off)?,
            misaligned: false,
        });
    }
    let buf = &mut buf[..n];
    let a = file.alignment();
    let head = head_len(off, a.offset).min(n);
    let got = serial(file, &mut buf[..head], off, ctl)?;
    // The first request has proven the policy (or fallen back).
    let a = file.alignment();
    let direct = file.policy() == CachePolicy::Direct;
    let middle_ptr = buf.as_ptr() as usize + head;
    let misaligned = direct && n - head >= a.offset && !middle_ptr.is_multiple_of(a.memory);
    if got < head {
        return Ok(Outcome { n: got, misaligned });
    }
    let use_threads = parallel && direct && n >= PARALLEL_MIN && a.offset <= PIECE;
    if !use_threads {
        let rest = serial(file, &mut buf[head..], off + head as u64, ctl)?;
        return Ok(Outcome {
            n: head + rest,
            misaligned,
        });
    }
    let mid_len = (n - head) / a.offset * a.offset;
    let (_, rest) = buf.split_at_mut(head);
    let (mid, tail) = rest.split_at_mut(mid_len);
    let mid_off = off + head as u64;
    let got_mid = middle(
        file.as_fd(),
        path,
        mid,
        mid_off,
        depth,
        !misaligned,
        a.offset,
        ctl,
    )?;
    if got_mid < mid_len || tail.is_empty() {
        return Ok(Outcome {
            n: head + got_mid,
            misaligned,
        });
    }
    let got_tail = serial(file, tail, mid_off + mid_len as u64, ctl)?;
    Ok(Outcome {
        n: head + mid_len + got_tail,
        misaligned,
    })
}

/// The bytes at `off` up to the end of a file whose size says nothing of its content — procfs
/// and sysfs files say they are 0 bytes long and have content (`limit`: at most that many):
/// read in [`UNSIZED_STEP`]s until a read returns nothing, as read(2) finds the end of any
/// file. O_DIRECT is refused there; `DirectFile` has fallen back to buffered reads at its open.
pub fn read_to_end(
    file: &mut dio::DirectFile,
    path: &Path,
    off: u64,
    limit: u64,
    ctl: &Control,
) -> io::Result<Vec<u8>> {
    let mut data = Vec::new();
    while (data.len() as u64) < limit {
        if ctl.cancel.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        let step = (limit - data.len() as u64).min(UNSIZED_STEP as u64) as usize;
        data.try_reserve(step)
            .map_err(|_| fail(path, Op::Pread, io::Error::from_raw_os_error(libc::ENOMEM)))?;
        let at = data.len();
        data.resize(at + step, 0);
        let got = file.read_at(&mut data[at..], off + at as u64)?;
        data.truncate(at + got);
        ctl.progress.bytes.fetch_add(got as u64, Ordering::Relaxed);
        if got == 0 {
            break;
        }
    }
    Ok(data)
}

/// A file of `size` bytes, at most [`PARALLEL_MIN`], read whole with one request (straight
/// from the device with O_DIRECT) into `scratch`, page-aligned memory grown as needed and
/// kept for the next file (allocating and zeroing memory per file cost more than reading it;
/// [`read_into`] would read a first block on its own, then the rest: two requests). Returns
/// the bytes read: `size`, fewer only when the file shrank.
pub fn read_small<'a>(
    file: &mut dio::DirectFile,
    path: &Path,
    size: u64,
    scratch: &'a mut Option<AlignedBuf>,
) -> io::Result<&'a [u8]> {
    let page = sys::page_size();
    let len = size.min(PARALLEL_MIN as u64).next_multiple_of(page) as usize;
    if scratch.as_ref().is_none_or(|b| b.len() < len) {
        *scratch = None;
        let b = AlignedBuf::try_alloc(len, page as usize)
            .map_err(|e| fail(path, Op::PosixMemalign, e))?;
        *scratch = Some(b);
    }
    let buf = &mut scratch.as_mut().expect("allocated above")[..len];
    let n = file.read_at(buf, 0)?.min(size as usize);
    Ok(&buf[..n])
}

/// Reads through `DirectFile` in steps, counting progress; fewer bytes only at the end.
fn serial(
    file: &mut dio::DirectFile,
    buf: &mut [u8],
    off: u64,
    ctl: &Control,
) -> io::Result<usize> {
    let mut done = 0;
    for step in buf.chunks_mut(SERIAL_STEP) {
        if ctl.cancel.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        let want = step.len();
        let got = file.read_at(step, off + done as u64)?;
        done += got;
        ctl.progress.bytes.fetch_add(got as u64, Ordering::Relaxed);
        if got < want {
            break;
        }
    }
    Ok(done)
}

/// Reads `buf.len()` bytes at `off` (aligned, O_DIRECT) with pread until the end of the file:
/// a short count there.
fn pread_full(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64, align: usize) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = sys::pread(fd, &mut buf[got..], off + got as u64)?;
        got += n;
        if n == 0 || !got.is_multiple_of(align) {
            break;
        }
    }
    Ok(got)
}

/// Reads one piece of the middle at `pos`: straight into it, or with `bounce` (the memory is
/// misaligned for O_DIRECT) through the worker's aligned buffer, allocated at its first use.
fn read_piece(
    fd: BorrowedFd<'_>,
    path: &Path,
    piece: &mut [u8],
    pos: u64,
    align: usize,
    bounce: Option<&mut Option<AlignedBuf>>,
) -> io::Result<usize> {
    let read = match bounce {
        None => pread_full(fd, piece, pos, align),
        Some(bounce) => {
            let b = match bounce {
                Some(b) => b,
                None => {
                    let b = AlignedBuf::try_alloc(PIECE, align.max(sys::page_size() as usize))
                        .map_err(|e| fail(path, Op::PosixMemalign, e))?;
                    bounce.insert(b)
                }
            };
            let len = piece.len();
            pread_full(fd, &mut b[..len], pos, align)
                .inspect(|&got| piece[..got].copy_from_slice(&b[..got]))
        }
    };
    read.map_err(|e| fail(path, Op::PreadDirect, e))
}

/// The middle: whole blocks at an aligned offset, in [`PIECE`]s, `depth` in flight.
#[allow(clippy::too_many_arguments)]
fn middle(
    fd: BorrowedFd<'_>,
    path: &Path,
    mid: &mut [u8],
    off: u64,
    depth: usize,
    aligned: bool,
    align: usize,
    ctl: &Control,
) -> io::Result<usize> {
    let pieces = mid
        .chunks_mut(PIECE)
        .enumerate()
        .map(|(i, p)| (off + (i * PIECE) as u64, p))
        .collect();
    let got = pieces_parallel(fd, path, pieces, depth, aligned, align, ctl)?;
    // Up to the first piece that came short (the end of the file).
    let mut total = 0;
    for (got, len) in got {
        total += got;
        if got < len {
            break;
        }
    }
    Ok(total)
}

/// Reads every `(position, memory)` piece (aligned for O_DIRECT, each at most [`PIECE`]),
/// `depth` in flight, in the order given; returns (bytes read, bytes asked) per piece — fewer
/// read only at the end of the file. `aligned`: straight into the memory, else through one
/// bounce buffer per thread.
#[allow(clippy::too_many_arguments)]
fn pieces_parallel(
    fd: BorrowedFd<'_>,
    path: &Path,
    pieces: Vec<(u64, &mut [u8])>,
    depth: usize,
    aligned: bool,
    align: usize,
    ctl: &Control,
) -> io::Result<Vec<(usize, usize)>> {
    let count = pieces.len();
    let cap = if aligned {
        MAX_DEPTH
    } else {
        MAX_BOUNCE_THREADS
    };
    let threads = depth.min(count).min(cap).max(1);
    let got: Vec<Mutex<(usize, usize)>> = pieces
        .iter()
        .map(|(_, p)| Mutex::new((0, p.len())))
        .collect();
    let queue = Mutex::new(pieces.into_iter().enumerate());
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<io::Error>> = Mutex::new(None);
    let record_error = |e: io::Error| {
        stop.store(true, Ordering::Relaxed);
        let mut g = first_error.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(e);
        }
    };
    let worker = || {
        let mut bounce: Option<AlignedBuf> = None;
        loop {
            if stop.load(Ordering::Relaxed) || ctl.cancel.load(Ordering::Relaxed) {
                return;
            }
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((i, (pos, piece))) = next else {
                return;
            };
            let bounce = if aligned { None } else { Some(&mut bounce) };
            match read_piece(fd, path, piece, pos, align, bounce) {
                Ok(n) => {
                    ctl.progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
                    got[i].lock().unwrap_or_else(|p| p.into_inner()).0 = n;
                }
                Err(e) => return record_error(e),
            }
        }
    };
    let spawned = std::thread::scope(|s| {
        let mut spawned = 0;
        for _ in 0..threads {
            let started = std::thread::Builder::new()
                .name("pagewise-read".into())
                .spawn_scoped(s, worker);
            match started {
                Ok(_) => spawned += 1,
                Err(e) if spawned == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(spawned)
    });
    if let Err(e) = spawned {
        return Err(fail(path, Op::PthreadCreate, e));
    }
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    if ctl.cancel.load(Ordering::Relaxed) {
        return Err(interrupted());
    }
    Ok(got
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect())
}

/// Reads each `(offset, memory)` range of the file (a scatter read: many ranges, `depth`
/// requests in flight over all of them, in the order given); returns the bytes read into each
/// (fewer only at the end of the file). With O_DIRECT in force and every range aligned for it
/// (offset and length multiples of the file's offset alignment, memory aligned for the device)
/// the ranges are cut into [`PIECE`]s read in parallel straight into the memory; otherwise
/// each is read as [`read_into`] reads. `parallel`: as for [`read_into`] (false for a file
/// with writes that may be staged).
pub fn read_ranges(
    file: &mut dio::DirectFile,
    path: &Path,
    mut ranges: Vec<(u64, &mut [u8])>,
    depth: usize,
    parallel: bool,
    ctl: &Control,
) -> io::Result<Vec<usize>> {
    let size = file.len()?;
    let total: u64 = ranges
        .iter()
        .map(|(o, b)| (b.len() as u64).min(size.saturating_sub(*o)))
        .sum();
    ctl.progress.total_bytes.store(total, Ordering::Relaxed);
    let mut out = vec![0; ranges.len()];
    // The first range's first block proves the policy (O_DIRECT refused falls back there);
    // `skip`: what is left to read of it starts there (all of it was read when it came short).
    let mut skip = 0;
    if let Some((off, buf)) = ranges.first_mut() {
        let asked = file.alignment().offset.min(buf.len());
        let got = serial(file, &mut buf[..asked], *off, ctl)?;
        out[0] = got;
        skip = if got < asked { buf.len() } else { got };
    }
    let a = file.alignment();
    let fits = |off: u64, b: &[u8]| {
        off.is_multiple_of(a.offset as u64)
            && b.len().is_multiple_of(a.offset)
            && (b.as_ptr() as usize).is_multiple_of(a.memory)
    };
    let direct = parallel
        && file.policy() == CachePolicy::Direct
        && a.offset <= PIECE
        && a.offset.is_multiple_of(a.memory)
        && ranges.iter().all(|(o, b)| fits(*o, b));
    let mut pieces = Vec::new();
    let mut owner = Vec::new();
    for (i, (off, buf)) in ranges.into_iter().enumerate() {
        let from = if i == 0 { skip.min(buf.len()) } else { 0 };
        let (off, rest) = (off + from as u64, &mut buf[from..]);
        if rest.is_empty() || off >= size {
            continue;
        }
        if !direct {
            out[i] += read_into(file, path, rest, off, depth, parallel, ctl)?.n;
            continue;
        }
        let end = (size - off).next_multiple_of(a.offset as u64);
        let want = rest.len().min(usize::try_from(end).unwrap_or(usize::MAX));
        for (k, p) in rest[..want].chunks_mut(PIECE).enumerate() {
            pieces.push((off + (k * PIECE) as u64, p));
            owner.push(i);
        }
    }
    if pieces.is_empty() {
        return Ok(out);
    }
    let got = pieces_parallel(file.as_fd(), path, pieces, depth, true, a.offset, ctl)?;
    // A range's count: its pieces up to the first short one.
    let mut short = vec![false; out.len()];
    for (&i, (n, len)) in owner.iter().zip(got) {
        if !short[i] {
            out[i] += n;
            short[i] = n < len;
        }
    }
    Ok(out)
}
