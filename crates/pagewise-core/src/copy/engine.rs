//! Moving the bytes of one file, by strategy. Every strategy copies only the source's data
//! extents (holes stay holes) and reports the strategy it really used.
//!
//! O_DIRECT, RWF_DONTCACHE and drop-behind differ only in how they read and write one chunk
//! ([`Steps`]); one loop ([`chunk_loop`]) runs those steps over the chunks with several in
//! flight, hashes for `--verify`, reports progress, stops when asked and turns a refusal of
//! the first chunk into a fallback to the next strategy. The buffered strategy is
//! copy_file_range, a different shape (no buffer of ours), and runs its own work per chunk.

use super::limits::Bandwidth;
use crate::chunks::{self, pieces, Stopped};
use crate::dio::uncached::{read_direct, read_full, refused, UncachedReader};
use crate::error::Op;
use crate::sys::{self, Advice, AlignedBuf};
use crate::verb::{Observer, Tally};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a strategy could not be used for a file: the copy falls back to the next one.
#[derive(Debug)]
pub(super) enum Unsupported {
    /// The filesystem refused (EINVAL/EOPNOTSUPP on open or first I/O): the call and its error.
    Refused(&'static str, io::Error),
}

/// An error while moving data: which step, on which side.
#[derive(Debug)]
pub(super) struct IoFailure {
    pub op: Op,
    pub on_dest: bool,
    pub err: io::Error,
}

/// How moving one file's data with one strategy ended.
pub(super) enum Moved {
    Done,
    Fallback(Unsupported),
    Failed(IoFailure),
    Interrupted,
}

/// Everything one data copy needs.
pub(super) struct Job<'a> {
    pub src: BorrowedFd<'a>,
    pub dst: BorrowedFd<'a>,
    /// Data extents of the source, `(offset, length)`.
    pub extents: &'a [(u64, u64)],
    pub chunk: usize,
    /// Requests in flight for one large file.
    pub depth: usize,
    /// Told the bytes of each finished chunk, and asked before each chunk whether to stop.
    pub observer: &'a dyn Observer,
    /// Remembers a stop once the observer asked for it.
    pub tally: &'a Tally,
    /// xxh3 of the data as read, when --verify wants it (computed per chunk, combined).
    pub hasher: Option<&'a ChunkHashes>,
    /// Source pages cached before the copy (cachestat of the whole file; None if unknown).
    pub src_cached_before: Option<u64>,
    /// The copy's bandwidth limit, which each chunk waits for before it moves.
    pub pace: Option<&'a Bandwidth>,
    /// Told the offset of each chunk written: records how far the data is on disk, for a
    /// later run to resume (named temporaries; see the `resume` module).
    pub checkpoint: Option<&'a (dyn Fn(u64) + Sync)>,
    /// The strategy drops the source's pages it brought in when it is done (RWF_DONTCACHE's
    /// last pass). False for a part of a file whose caller drops them after all its parts
    /// (`auto`'s measured windows: each window's own pass waited for readahead into the
    /// next, up to 85 ms a window).
    pub drop_source_after: bool,
    /// rsync -S: whole blocks of zeros written are punched into holes (see
    /// [`CopyOptions::sparse_zeros`](super::CopyOptions::sparse_zeros)).
    pub punch_zeros: bool,
}

/// Per-chunk hashes of a file, combined in offset order, so parallel chunks hash deterministically.
#[derive(Default)]
pub(super) struct ChunkHashes {
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
pub(super) fn digest_of(extents: &[(u64, u64)], chunk: usize, data: &[u8]) -> u64 {
    let h = ChunkHashes::default();
    for (off, len) in pieces(extents, chunk as u64) {
        let end = ((off + len) as usize).min(data.len());
        h.add(off, &data[off as usize..end]);
    }
    h.digest()
}

/// The chunk hashes of `extents` of a file, read from disk, not from the cache (`--verify`'s
/// re-read, and the kept prefix of a resumed copy's source).
pub(super) fn hashes_from_disk(
    fd: OwnedFd,
    extents: &[(u64, u64)],
    chunk: usize,
) -> io::Result<ChunkHashes> {
    let hashes = ChunkHashes::default();
    let mut r = UncachedReader::open(fd, chunk)?;
    for (off, len) in pieces(extents, chunk as u64) {
        let data = r.read(off, len)?;
        if data.is_empty() {
            break;
        }
        hashes.add(off, data);
    }
    Ok(hashes)
}

/// Runs `work` over the job's extents with the job's depth (see [`chunks::run`]), asking the
/// observer before each chunk whether to stop and telling it each finished chunk's bytes.
fn parallel<F>(job: &Job<'_>, align: usize, work: F) -> Moved
where
    F: Fn(&mut AlignedBuf, u64, u64) -> Result<(), Moved> + Sync,
{
    let work = |buf: &mut AlignedBuf, off, len| {
        let stop = || job.tally.stop_requested(job.observer);
        if stop() || job.pace.is_some_and(|b| !b.take(len, stop)) {
            return Err(Moved::Interrupted);
        }
        work(buf, off, len)?;
        if let Some(c) = job.checkpoint {
            c(off);
        }
        Ok(())
    };
    let done = |len| job.observer.progress(0, len);
    match chunks::run(job.extents, job.chunk, job.depth, align, None, work, done) {
        Ok(()) => Moved::Done,
        Err(Stopped::Interrupted) => Moved::Interrupted,
        Err(Stopped::Failed(o)) => o,
    }
}

fn fail(op: Op, on_dest: bool, err: io::Error) -> Moved {
    Moved::Failed(IoFailure { op, on_dest, err })
}

/// Writes all of `buf` at `off` with `write` (a write of 0 bytes is an error).
pub(super) fn write_full(
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

/// A read or write step that failed: the operation for the error message and, when the error
/// may only mean the filesystem lacks the strategy, the call named in the fallback notice.
struct StepError {
    op: Op,
    refusal: Option<&'static str>,
    err: io::Error,
}

impl StepError {
    /// A failure of `op` that, on the first chunk, may be a refusal of `call`.
    fn refusable(op: Op, call: &'static str) -> impl FnOnce(io::Error) -> StepError {
        move |err| StepError {
            op,
            refusal: Some(call),
            err,
        }
    }
    /// A failure of `op`, never a refusal.
    fn of(op: Op) -> impl FnOnce(io::Error) -> StepError {
        move |err| StepError {
            op,
            refusal: None,
            err,
        }
    }
}

/// How one strategy reads and writes a chunk; [`chunk_loop`] does everything else.
trait Steps: Sync {
    /// Alignment of the chunk buffers.
    fn align(&self) -> usize;
    /// Reads the chunk `[off, off+len)` into `buf`: the bytes read, short only at EOF.
    fn read(&self, buf: &mut [u8], off: u64, len: u64) -> Result<usize, StepError>;
    /// Writes the `n` bytes just read at `off` (`buf` is the whole buffer: O_DIRECT pads the
    /// tail into it).
    fn write(&self, buf: &mut [u8], off: u64, len: u64, n: usize) -> Result<(), StepError>;
}

/// The one chunk loop of the strategies: read, hash, write each chunk with `steps`, several
/// chunks in flight. A refusal (EINVAL/EOPNOTSUPP) before any chunk was written means the
/// filesystem lacks the strategy and becomes a fallback; afterwards it is a failure.
fn chunk_loop(job: &Job<'_>, steps: &impl Steps) -> Moved {
    let first = AtomicBool::new(true);
    let failed = |e: StepError, on_dest: bool| match e.refusal {
        Some(call) if first.load(Ordering::Relaxed) && refused(&e.err) => {
            Moved::Fallback(Unsupported::Refused(call, e.err))
        }
        _ => fail(e.op, on_dest, e.err),
    };
    parallel(job, steps.align(), |buf, off, len| {
        let t = std::time::Instant::now();
        let n = steps.read(buf, off, len).map_err(|e| failed(e, false))?;
        let _ = job.pace.inspect(|b| b.note_read(t.elapsed()));
        if n == 0 {
            return Ok(());
        }
        if let Some(h) = job.hasher {
            h.add(off, &buf[..n]);
        }
        steps.write(buf, off, len, n).map_err(|e| failed(e, true))?;
        if job.punch_zeros {
            super::zeros::punch(job.dst, &buf[..n], off);
        }
        first.store(false, Ordering::Relaxed);
        Ok(())
    })
}

/// O_DIRECT steps: aligned reads and writes on the O_DIRECT twins of the files.
struct DirectSteps<'a> {
    src: BorrowedFd<'a>,
    dst: BorrowedFd<'a>,
    mem_align: usize,
    off_align: u64,
}

impl Steps for DirectSteps<'_> {
    fn align(&self) -> usize {
        self.mem_align
    }
    fn read(&self, buf: &mut [u8], off: u64, len: u64) -> Result<usize, StepError> {
        read_direct(self.src, buf, off, len, self.off_align)
            .map_err(StepError::refusable(Op::PreadDirect, "pread(O_DIRECT)"))
    }
    fn write(&self, buf: &mut [u8], off: u64, _len: u64, n: usize) -> Result<(), StepError> {
        let padded = (n as u64).div_ceil(self.off_align) * self.off_align;
        let padded = (padded as usize).min(buf.len());
        buf[n..padded].fill(0);
        write_full(&buf[..padded], off, |b, o| pwrite(self.dst, b, o))
            .map_err(StepError::refusable(Op::PwriteDirect, "pwrite(O_DIRECT)"))
    }
}

/// O_DIRECT copy: `src_direct`/`dst_direct` are O_DIRECT descriptors of the same files.
/// The unaligned tail is written as a whole aligned block; the caller truncates to the size.
///
/// A file system may take an O_DIRECT read through the page cache and say nothing: btrfs
/// does for files with data checksums (on 6.18 a 4 MiB O_DIRECT read of a cold file left
/// 8 MiB of it cached). So where nothing of the source was cached before, its first chunk is
/// copied alone and the kernel asked whether pages of the file appeared: then they are
/// dropped and O_DIRECT is refused for this file system (the next strategy writes the file
/// again from what was kept). Where pages were cached before or nothing can be seen of them,
/// the source blocks not cached before are dropped once the copy is done.
pub(super) fn copy_direct(
    job: &Job<'_>,
    src_direct: BorrowedFd<'_>,
    dst_direct: BorrowedFd<'_>,
    mem_align: usize,
    off_align: u64,
) -> Moved {
    let steps = DirectSteps {
        src: src_direct,
        dst: dst_direct,
        mem_align,
        off_align,
    };
    let Some(&(off, len)) = job.extents.first() else {
        return Moved::Done;
    };
    if job.src_cached_before != Some(0) {
        let precached = job
            .drop_source_after
            .then(|| PrecachedBlocks::snapshot(job));
        let outcome = chunk_loop(job, &steps);
        if let Some(p) = precached {
            p.drop_all(job.src);
        }
        return outcome;
    }
    let head = [(off, len.min(job.chunk as u64))];
    match chunk_loop(
        &Job {
            extents: &head,
            ..*job
        },
        &steps,
    ) {
        Moved::Done => {}
        other => return other,
    }
    if crate::residency::cached_pages(job.src, head[0].0, head[0].1).is_some_and(|c| c > 0) {
        let _ = sys::fadvise(job.src, 0, 0, Advice::DontNeed);
        let why = "the file system read it through the page cache (btrfs does for files with \
                   data checksums)";
        return Moved::Fallback(Unsupported::Refused(
            "pread(O_DIRECT)",
            io::Error::other(why),
        ));
    }
    let rest = super::resume::clip(job.extents, head[0].0 + head[0].1);
    chunk_loop(
        &Job {
            extents: &rest,
            ..*job
        },
        &steps,
    )
}

fn pwrite(fd: BorrowedFd<'_>, b: &[u8], o: u64) -> io::Result<usize> {
    sys::pwritev2(fd, b, o, 0)
}

/// RWF_DONTCACHE steps: preadv2/pwritev2 with the flag.
struct DontcacheSteps<'a> {
    src: BorrowedFd<'a>,
    dst: BorrowedFd<'a>,
}

impl Steps for DontcacheSteps<'_> {
    fn align(&self) -> usize {
        4096
    }
    fn read(&self, buf: &mut [u8], off: u64, len: u64) -> Result<usize, StepError> {
        let len = len as usize;
        read_full(&mut buf[..len], off, len, |b, o| {
            sys::preadv2(self.src, b, o, sys::RWF_DONTCACHE)
        })
        .map_err(StepError::refusable(
            Op::Preadv2Dontcache,
            "preadv2(RWF_DONTCACHE)",
        ))
    }
    fn write(&self, buf: &mut [u8], off: u64, _len: u64, n: usize) -> Result<(), StepError> {
        write_full(&buf[..n], off, |b, o| {
            sys::pwritev2(self.dst, b, o, sys::RWF_DONTCACHE)
        })
        .map_err(StepError::refusable(
            Op::Pwritev2Dontcache,
            "pwritev2(RWF_DONTCACHE)",
        ))
    }
}

/// RWF_DONTCACHE copy: pages this copy brings in are dropped once read / written back; pages
/// that were cached before stay (the kernel only marks folios it creates for the read).
/// The kernel does not drop every such folio: with several reads in flight about 1% of a 4 GiB
/// source stayed (folios another reader was waiting on are left), so once the copy is done the
/// source blocks that were not cached before are dropped with DONTNEED as drop-behind does.
pub(super) fn copy_dontcache(job: &Job<'_>) -> Moved {
    let precached = job
        .drop_source_after
        .then(|| PrecachedBlocks::snapshot(job));
    no_readahead_behind(job);
    let outcome = chunk_loop(
        job,
        &DontcacheSteps {
            src: job.src,
            dst: job.dst,
        },
    );
    if let Some(p) = precached {
        p.drop_all(job.src);
    }
    outcome
}

/// Granularity of drop-behind on the source: pages cached before the copy are remembered per
/// block of this size and never dropped.
const DROP_BLOCK: u64 = 128 << 10;

/// Which [`DROP_BLOCK`]s of a source had cached pages before the copy: those are someone
/// else's and stay; the others are dropped behind the copy. It covers the whole file, holes
/// included: readahead past a data extent fills the hole after it with zero pages (a sparse
/// image's first 4 MiB extent left 4 MiB of its hole cached).
pub(super) struct PrecachedBlocks(Vec<bool>);

impl PrecachedBlocks {
    /// Only when something of the file was cached before: one cachestat per block of the
    /// data extents, one per hole (per block only where a hole has pages).
    pub(super) fn snapshot(job: &Job<'_>) -> PrecachedBlocks {
        let size = sys::fstat(job.src)
            .map_or(0, |s| s.size)
            .max(job.extents.last().map_or(0, |e| e.0 + e.1));
        let mut precached = vec![false; size.div_ceil(DROP_BLOCK) as usize];
        // Nothing cached before, or nothing known of it (cachestat refused and mincore not
        // truthful): every block read is dropped behind, as if nothing was cached before —
        // the summary counts such files as unknown.
        if job.src_cached_before.is_none_or(|c| c == 0) {
            return PrecachedBlocks(precached);
        }
        let cached = |off: u64, len: u64| {
            crate::residency::cached_pages(job.src, off, len).is_some_and(|c| c > 0)
        };
        let mut at = 0;
        let mut mark = |off: u64, len: u64, hole: bool| {
            if len == 0 || (hole && !cached(off, len)) {
                return;
            }
            let (b0, b1) = (off / DROP_BLOCK, (off + len).div_ceil(DROP_BLOCK));
            for b in b0..b1 {
                precached[b as usize] |= cached(b * DROP_BLOCK, DROP_BLOCK);
            }
        };
        for &(off, len) in job.extents {
            mark(at, off.saturating_sub(at), true);
            mark(off, len, false);
            at = off + len;
        }
        mark(at, size.saturating_sub(at), true);
        PrecachedBlocks(precached)
    }

    /// Drops every block of the file that was not cached before the copy (the last pass),
    /// and checks with the kernel that they are gone. DONTNEED skips a folio that is locked
    /// or held by someone else at that moment (reclaim or DAMON scanning it, the kernel's own
    /// RWF_DONTCACHE drop): under load a cold 16 MiB sync from XFS left 2.5 MiB of its
    /// source cached after one pass. Such holds are brief, so the drop is repeated a few
    /// times, with growing pauses (at most ~85 ms in all), while the kernel still shows pages
    /// and the passes still make progress (pages DONTNEED can never drop — shmem, pages
    /// mapped by another process — end it after two short pauses).
    pub(super) fn drop_all(&self, src: BorrowedFd<'_>) {
        let len = self.0.len() as u64 * DROP_BLOCK;
        let mut before = u64::MAX;
        for (pass, pause_ms) in [0, 1, 4, 16, 64].into_iter().enumerate() {
            std::thread::sleep(std::time::Duration::from_millis(pause_ms));
            self.drop_others(src, 0, len);
            let left: u64 = self
                .runs(0, len)
                .filter_map(|(o, l)| crate::residency::cached_pages(src, o, l))
                .sum();
            if left == 0 || (pass >= 2 && left >= before) {
                return;
            }
            before = left;
        }
    }

    /// Drops the runs of blocks of `[off, off+len)` of `src` that were not cached before the
    /// copy.
    fn drop_others(&self, src: BorrowedFd<'_>, off: u64, len: u64) {
        for (o, l) in self.runs(off, len) {
            let _ = sys::fadvise(src, o, l, Advice::DontNeed);
        }
    }

    /// The byte ranges of the runs of blocks of `[off, off+len)` that were not cached before
    /// the copy.
    fn runs(&self, off: u64, len: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let b1 = (off + len).div_ceil(DROP_BLOCK).min(self.0.len() as u64);
        let mut b = off / DROP_BLOCK;
        std::iter::from_fn(move || {
            while b < b1 && self.0[b as usize] {
                b += 1;
            }
            let start = b;
            while b < b1 && !self.0[b as usize] {
                b += 1;
            }
            (b > start).then(|| (start * DROP_BLOCK, (b - start) * DROP_BLOCK))
        })
    }
}

/// Drop-behind steps: buffered reads; before each write the chunk's source blocks that were
/// not cached before are dropped, after it the written chunk is written back and dropped.
struct DropBehindSteps<'a> {
    src: BorrowedFd<'a>,
    dst: BorrowedFd<'a>,
    precached: PrecachedBlocks,
}

impl Steps for DropBehindSteps<'_> {
    fn align(&self) -> usize {
        4096
    }
    fn read(&self, buf: &mut [u8], off: u64, len: u64) -> Result<usize, StepError> {
        let len = len as usize;
        read_full(&mut buf[..len], off, len, |b, o| sys::pread(self.src, b, o))
            .map_err(StepError::of(Op::Pread))
    }
    fn write(&self, buf: &mut [u8], off: u64, len: u64, n: usize) -> Result<(), StepError> {
        self.precached.drop_others(self.src, off, len);
        write_full(&buf[..n], off, |b, o| pwrite(self.dst, b, o))
            .map_err(StepError::of(Op::Pwrite))?;
        // Write this chunk back now and drop it once clean. Waiting here keeps at most one
        // chunk per thread dirty; with several threads the device still sees a queue.
        let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        sys::sync_file_range(self.dst, off, n as u64, flags)
            .map_err(StepError::of(Op::SyncFileRange))?;
        let _ = sys::fadvise(self.dst, off, n as u64, Advice::DontNeed);
        Ok(())
    }
}

/// Drop-behind copy: buffered reads and writes; behind the cursor the destination is written
/// back and dropped, and source blocks that were not cached before the copy are dropped. The
/// snapshot of what was cached is taken before the first read, so our own readahead into the
/// next chunk is not mistaken for someone else's cached pages.
pub(super) fn copy_drop_behind(job: &Job<'_>) -> Moved {
    let steps = DropBehindSteps {
        src: job.src,
        dst: job.dst,
        precached: PrecachedBlocks::snapshot(job),
    };
    if !no_readahead_behind(job) {
        let _ = sys::fadvise(job.src, 0, 0, Advice::Sequential);
    }
    let outcome = chunk_loop(job, &steps);
    // Once more over the whole file: readahead that landed behind a chunk already dropped, and
    // file systems that fill a whole compressed block's pages for one read (squashfs: 128 KiB;
    // a cold 16 MiB copy left 1.2 MiB of its source cached without this). Not after a part
    // whose caller drops after all its parts (`auto`'s windows).
    if job.drop_source_after {
        steps.precached.drop_all(job.src);
    }
    outcome
}

/// With several chunks read at once and no way to see the source's pages (cachestat refused,
/// mincore not truthful: another user's file), turns the source's readahead off
/// (POSIX_FADV_RANDOM, this descriptor only) and says so. One reader's readahead runs into
/// the next chunk, which another reader may have read and dropped already, so those pages
/// come back — and when that readahead is still under I/O as the copy ends, the last drop
/// cannot take them (a 16 MiB cold copy, 8 readers of 4 MiB, left 2.5 MiB of its source
/// cached, twice in the e2e suite under load). Where the pages can be seen, the last drop is
/// checked and repeated instead ([`PrecachedBlocks::drop_all`]): readahead stays, as it is
/// worth ~10% on a 1 GiB cold copy here (medians of 7: 1.01 s with it, 1.12 s without).
fn no_readahead_behind(job: &Job<'_>) -> bool {
    job.depth > 1
        && job.src_cached_before.is_none()
        && sys::fadvise(job.src, 0, 0, Advice::Random).is_ok()
}

/// Plain buffered copy with copy_file_range (falls back to read/write across filesystems
/// where the kernel refuses, EXDEV/EINVAL on old kernels).
pub(super) fn copy_buffered(job: &Job<'_>) -> Moved {
    parallel(job, 4096, |buf, off, len| {
        let done = copy_range(job, buf, off, len)?;
        if let Some(h) = job.hasher {
            // Hash from the source (cached now) so --verify has the reference digest.
            let mut o = off;
            while o < off + done {
                let want = ((off + done - o) as usize).min(buf.len());
                let n = read_full(&mut buf[..want], o, want, |b, p| sys::pread(job.src, b, p))
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

/// Copies `[off, off+len)` with copy_file_range, through `buf` where the kernel cannot;
/// the bytes copied (short only at EOF).
fn copy_range(job: &Job<'_>, buf: &mut [u8], off: u64, len: u64) -> Result<u64, Moved> {
    let mut done = 0u64;
    while done < len {
        let at = off + done;
        match sys::copy_file_range(job.src, at, job.dst, at, (len - done) as usize) {
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
                let want = (len - done) as usize;
                let n = read_full(&mut buf[..want], at, want, |b, o| sys::pread(job.src, b, o))
                    .map_err(|e| fail(Op::Pread, false, e))?;
                if n == 0 {
                    break;
                }
                write_full(&buf[..n], at, |b, o| pwrite(job.dst, b, o))
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
    Ok(done)
}

/// Opens the O_DIRECT twins of a source and a freshly created destination, with the common
/// alignment; None when either filesystem lacks O_DIRECT for them.
pub(super) fn open_direct_pair(
    src_path: &Path,
    dst_path: &Path,
    dst: BorrowedFd<'_>,
) -> Result<(OwnedFd, OwnedFd, usize, u64), Unsupported> {
    let s =
        sys::open_read_direct(src_path).map_err(|e| Unsupported::Refused("open(O_DIRECT)", e))?;
    let d = sys::open_write(dst_path, None, true)
        .map_err(|e| Unsupported::Refused("open(O_DIRECT)", e))?;
    let sa = sys::dio_align_or_device(s.as_fd());
    let da = sys::dio_align_or_device(dst);
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
