//! The workers: each takes units of files from the planner, opens the source and the file its
//! data goes to (`open`), moves the data with the first strategy the filesystems accept
//! (remembering refusals per filesystem) and hands the written file on ([`Written`]) to what
//! the caller gave to finish it (`copy/mod.rs` passes `finish`: nothing here depends on it).
//! Small files travel in batches: one io_uring submission reads a batch.
//!
//! The state the workers change is theirs, in [`Workers`]: the fallback from the small-file
//! path, the strategies refused per filesystem, and the files queued for the one-at-a-time
//! pass after ENOSPC.

mod open;
mod probe;

pub(super) use open::{Extents, Open};

use super::commit::{Temp, Temps};
use super::dest::ParentCache;
use super::engine::{self, hashes_from_disk, ChunkHashes, IoFailure, Job, Moved, Unsupported};
use super::options::{Strategy, SMALL_BATCH, SMALL_BATCH_BYTES, SMALL_FILE};
use super::resume;
use super::state::Ctx;
use super::tasks::FileTask;
use crate::dio::uncached;
use crate::error::{FileError, Op};
use crate::sys::{self, AlignedBuf};
use open::open_pair;
use probe::Probe;
use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The most a file of a pseudo filesystem may hold to be copied (see
/// [`Workers::copy_pseudo`]).
const PSEUDO_MAX: usize = 256 << 20;

/// A file whose data is written, handed on to be made final (`batched`: written by the
/// small-file path without RWF_DONTCACHE, for the write-back batch the workers share).
pub(in crate::copy) struct Written {
    pub open: Open,
    pub strategy: Strategy,
    pub digest: Option<u64>,
    pub batched: bool,
}

/// What finishes each written file (the caller's).
pub(super) type Done<'d> = dyn FnMut(Written) + 'd;

/// What one worker thread keeps between units: the directory the last file went to, and its
/// ring and buffer for small-file batches (made on first use).
#[derive(Default)]
pub(super) struct Thread {
    parents: ParentCache,
    ring: Option<Ring>,
}

/// A worker thread's io_uring and the buffer its small-file batches are read into.
struct Ring {
    ring: sys::ReadRing,
    buf: AlignedBuf,
}

/// The workers of one copy: the run's shared state they read, and the state they change.
pub(super) struct Workers<'a> {
    ctx: &'a Ctx<'a>,
    temps: &'a Temps,
    /// io_uring or RWF_DONTCACHE reads are refused: small files go one by one.
    no_small_path: AtomicBool,
    /// Filesystems (st_dev of the destination dir) where a strategy was refused.
    refused: Mutex<HashSet<(u64, Strategy)>>,
    /// Files whose destination ran out of space while others were written beside them: they
    /// are tried again one at a time when the parallel pass is over (files that fit one
    /// after the other, as cp copies them, must not fail for being copied together).
    no_space: Mutex<Vec<FileTask>>,
    /// The one-at-a-time pass: ENOSPC is final now.
    final_pass: AtomicBool,
    /// `auto`'s measured choices for large files, per (source, destination) device.
    choices: probe::Choices,
}

impl<'a> Workers<'a> {
    pub(super) fn new(ctx: &'a Ctx<'a>, temps: &'a Temps) -> Self {
        Workers {
            ctx,
            temps,
            no_small_path: AtomicBool::new(
                ctx.opts.strategy != Strategy::Auto || !sys::probe_io_uring(),
            ),
            refused: Mutex::new(HashSet::new()),
            no_space: Mutex::new(Vec::new()),
            final_pass: AtomicBool::new(false),
            choices: probe::Choices::default(),
        }
    }

    /// Copies one unit the planner sent: its small files in one batch when there are several
    /// (and io_uring can be set up), the others one by one.
    pub(super) fn copy_unit(&self, thread: &mut Thread, unit: Vec<FileTask>, done: &mut Done<'_>) {
        let (small, mut one_by_one): (Vec<_>, Vec<_>) =
            unit.into_iter().partition(|t| self.is_small(t));
        match (small.len() >= 2)
            .then(|| self.ring(&mut thread.ring))
            .flatten()
        {
            Some(r) => self.copy_small(&mut thread.parents, small, r, done),
            None => one_by_one.extend(small),
        }
        for t in one_by_one {
            self.copy_file(&mut thread.parents, t, done);
        }
    }

    /// Files that met ENOSPC beside others: once more, one at a time (ENOSPC is final now).
    pub(super) fn retry_no_space(&self, done: &mut Done<'_>) {
        let retry = std::mem::take(&mut *self.no_space.lock().unwrap());
        if retry.is_empty() {
            return;
        }
        self.final_pass.store(true, Ordering::Relaxed);
        let mut parents = ParentCache::default();
        for t in retry {
            self.copy_file(&mut parents, t, done);
        }
    }

    /// Copies one file through the general path.
    fn copy_file(&self, parents: &mut ParentCache, task: FileTask, done: &mut Done<'_>) {
        if let Some(o) = open_pair(self.ctx, self.temps, parents, task) {
            self.copy_data_and_finish(o, done);
        }
    }

    /// Whether a file planned at `size` bytes goes through [`Workers::copy_small`].
    /// (`no_small_path` is set from the start unless the strategy is `auto` with io_uring.)
    fn is_small(&self, task: &FileTask) -> bool {
        task.size <= SMALL_FILE
            && task.resume.is_none()
            && !self.no_small_path.load(Ordering::Relaxed)
    }

    /// Copies a batch of small files: their reads go to the kernel in one io_uring submission
    /// (RWF_DONTCACHE) — one device notification, and neighbouring files merged into one
    /// request — and their writes are plain buffered writes whose write-back is batched across
    /// files (see `BatchSettle` in finish/settle.rs). A 100k-file tree needed ~100k
    /// reads and ~100k writes through per-file preadv2/pwritev2(RWF_DONTCACHE); this path
    /// needs a fraction of each. Files that turn out not to fit (grown, sparse) take the
    /// general path.
    fn copy_small(
        &self,
        parents: &mut ParentCache,
        tasks: Vec<FileTask>,
        w: &mut Ring,
        done: &mut Done<'_>,
    ) {
        let mut open = Vec::with_capacity(tasks.len());
        for t in tasks {
            if let Some(o) = open_pair(self.ctx, self.temps, parents, t) {
                // Data kept from the destination (--append's existing bytes) is the general
                // path's: the batch writes whole files (an --append in a directory of two
                // small files rewrote them whole, where rsync appended).
                if o.sparse || o.pseudo || o.st.size > SMALL_FILE || o.st.size == 0 || o.kept > 0 {
                    self.copy_data_and_finish(o, done);
                } else {
                    open.push(o);
                }
            }
        }
        if open.is_empty() || self.ctx.stopped() {
            return;
        }
        let total: usize = open.iter().map(|o| o.st.size as usize).sum();
        if !self.ctx.pace(total as u64) {
            return;
        }
        if w.buf.len() < total {
            w.buf = AlignedBuf::new(total.next_multiple_of(1 << 20), 4096);
        }
        let results = {
            let mut reqs: Vec<(BorrowedFd<'_>, u64, &mut [u8])> = Vec::with_capacity(open.len());
            let mut rest: &mut [u8] = &mut w.buf;
            for o in &open {
                let (head, tail) = rest.split_at_mut(o.st.size as usize);
                reqs.push((o.sf.as_fd(), 0, head));
                rest = tail;
            }
            w.ring.read_batch(&mut reqs, sys::RWF_DONTCACHE)
        };
        let mut results = match results {
            Ok(r) => r.into_iter(),
            Err(e) => {
                self.no_small_path.store(true, Ordering::Relaxed);
                self.ctx.tally.notice(format!(
                    "io_uring batches unavailable ({e}): files copied one by one"
                ));
                Vec::new().into_iter()
            }
        };
        let mut at = 0usize;
        for o in open {
            let size = o.st.size as usize;
            let data = &mut w.buf[at..at + size];
            at += size;
            self.write_small(o, data, results.next(), done);
        }
    }

    /// Finishes one file of a small-file batch: `data` holds what the batch read of it (`got`:
    /// the bytes read, or the error; None when the batch could not be submitted).
    fn write_small(
        &self,
        o: Open,
        data: &mut [u8],
        got: Option<io::Result<usize>>,
        done: &mut Done<'_>,
    ) {
        let size = data.len();
        let got = match got {
            Some(Ok(n)) => Ok(n),
            Some(Err(e)) if uncached::refused(&e) => {
                // RWF_DONTCACHE or io_uring reads refused here: the general path decides.
                self.no_small_path.store(true, Ordering::Relaxed);
                Err(None)
            }
            Some(Err(e)) => Err(Some(e)),
            None => Err(None),
        };
        // Short reads (a file shrinking, or a partial read) are finished synchronously.
        let n = got.and_then(|n| {
            uncached::read_full(&mut data[n..], n as u64, size - n, |b, off| {
                sys::preadv2(o.sf.as_fd(), b, off, sys::RWF_DONTCACHE)
            })
            .map(|m| n + m)
            .map_err(Some)
        });
        let n = match n {
            Ok(n) => n,
            Err(Some(e)) => return self.ctx.fail(FileError::io(&o.src, Op::ReadDontcache, &e)),
            Err(None) => return self.copy_data_and_finish(o, done),
        };
        self.ctx.observer.progress(0, n as u64);
        if let Err(e) = engine::write_full(&data[..n], 0, |b, off| {
            sys::pwritev2(o.df.as_fd(), b, off, 0)
        }) {
            return self.ctx.fail(FileError::io(&o.dst, Op::Pwritev2, &e));
        }
        let digest = self
            .ctx
            .opts
            .verify
            .then(|| engine::digest_of(&o.extents, self.ctx.opts.chunk, &data[..n]));
        done(Written {
            open: o,
            strategy: Strategy::Dontcache,
            digest,
            batched: true,
        });
    }

    /// This thread's ring and buffer for small-file batches, made on first use; None (and
    /// small files one by one from then on) where io_uring cannot be set up.
    fn ring<'w>(&self, slot: &'w mut Option<Ring>) -> Option<&'w mut Ring> {
        if slot.is_none() {
            match sys::ReadRing::new(SMALL_BATCH as u32) {
                Ok(ring) => {
                    *slot = Some(Ring {
                        ring,
                        buf: AlignedBuf::new(SMALL_BATCH_BYTES as usize, 4096),
                    })
                }
                Err(e) => {
                    self.no_small_path.store(true, Ordering::Relaxed);
                    self.ctx.tally.notice(format!(
                        "io_uring unavailable ({e}): files copied one by one"
                    ));
                }
            }
        }
        slot.as_mut()
    }

    fn copy_data_and_finish(&self, o: Open, done: &mut Done<'_>) {
        if o.pseudo {
            return self.copy_pseudo(o, done);
        }
        let hashes = self.ctx.opts.verify.then(ChunkHashes::default);
        if let Some(s) = self.copy_data(&o, hashes.as_ref()) {
            done(Written {
                open: o,
                strategy: s,
                digest: hashes.map(|h| h.digest()),
                batched: false,
            });
        }
    }

    /// Copies a file of procfs, sysfs and the like: what `read` returns up to its end (as cp
    /// does), never the size stat claims — a /proc file is 0 bytes there, a sysfs attribute
    /// 4096, so a copy by size would be empty or padded with NULs. At most
    /// [`PSEUDO_MAX`] bytes (such a file can be endless, /proc/kcore is the machine's memory).
    fn copy_pseudo(&self, mut o: Open, done: &mut Done<'_>) {
        let mut data: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match sys::pread(o.sf.as_fd(), &mut buf, data.len() as u64) {
                Ok(0) => break,
                Ok(n) => {
                    if data.len() + n > PSEUDO_MAX || data.try_reserve(n).is_err() {
                        let why = format!(
                            "a file of a pseudo filesystem (procfs, sysfs...) longer than {} MiB: not copied",
                            PSEUDO_MAX >> 20
                        );
                        return self.ctx.fail(FileError::other(&o.src, Op::Read, why));
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return self.ctx.fail(FileError::io(&o.src, Op::Read, &e)),
            }
        }
        if let Err(e) =
            engine::write_full(&data, 0, |b, off| sys::pwritev2(o.df.as_fd(), b, off, 0))
        {
            return self.ctx.fail(FileError::io(&o.dst, Op::Pwritev2, &e));
        }
        self.ctx.observer.progress(0, data.len() as u64);
        o.st.size = data.len() as u64;
        o.extents = if data.is_empty() {
            Vec::new()
        } else {
            vec![(0, o.st.size)]
        };
        let digest = self
            .ctx
            .opts
            .verify
            .then(|| engine::digest_of(&o.extents, self.ctx.opts.chunk, &data));
        // Written through the cache, then written back and dropped with the run's others.
        done(Written {
            open: o,
            strategy: Strategy::DropBehind,
            digest,
            batched: false,
        });
    }

    /// Strategies to try for one file, best first. `auto` prefers O_DIRECT for files of
    /// `direct_min` and more (measured fastest here once its buffers are huge pages, see
    /// [`AlignedBuf`]: on the virtio disk 48 files of 32 MiB in 1.0-1.1 s at 0.2-1.1 s of CPU,
    /// against 1.6-1.9 s at 1.9-2.9 s for RWF_DONTCACHE; 400 files of 2 MiB in 0.50-0.54 s
    /// against 0.92-1.08 s), then RWF_DONTCACHE (the only one for smaller files, where a
    /// request's latency is the cost), then drop-behind; for files of [`probe::PROBE_MIN`] and
    /// more, the way measured between the devices first (see `probe`). `devs`: the source's
    /// and the destination's devices.
    fn chain(&self, devs: (u64, u64), size: u64) -> Vec<Strategy> {
        let mut v: Vec<Strategy> = match self.ctx.opts.strategy {
            Strategy::Auto if size >= self.ctx.opts.direct_min => {
                vec![Strategy::Direct, Strategy::Dontcache, Strategy::DropBehind]
            }
            Strategy::Auto | Strategy::Dontcache => vec![Strategy::Dontcache, Strategy::DropBehind],
            Strategy::Direct => vec![Strategy::Direct, Strategy::Dontcache, Strategy::DropBehind],
            s => vec![s],
        };
        let measured = match self.ctx.opts.strategy {
            Strategy::Auto => self.choices.chosen(devs, size),
            _ => None,
        };
        if let Some(first) = measured {
            v.sort_by_key(|s| *s != first);
        }
        let refused = self.refused.lock().unwrap();
        v.retain(|s| !refused.contains(&(devs.1, *s)) || *s == Strategy::DropBehind);
        v
    }

    /// What `auto` measured in this run (see `probe`), in the order measured.
    pub(in crate::copy) fn choices(&self) -> Vec<crate::copy::AutoChoice> {
        self.choices.all()
    }

    /// Remembers that the destination's file system (`dev`) refused `strat`, and says so.
    fn refuse(&self, dev: u64, strat: Strategy, u: Unsupported, dst: &Path) {
        let Unsupported::Refused(op, e) = u;
        self.refused.lock().unwrap().insert((dev, strat));
        self.ctx.tally.notice(format!(
            "{} refused on {} ({op}: {e}): falling back for its file system",
            strat.name(),
            crate::names::escape(dst.as_os_str().as_encoded_bytes())
        ));
    }

    /// Moves the data with the first strategy of the chain that the filesystems accept
    /// (large files with `auto`: the way measured, see `probe`).
    fn copy_data(&self, o: &Open, hashes: Option<&ChunkHashes>) -> Option<Strategy> {
        let size = o.st.size;
        let devs = (
            o.st.dev,
            sys::fstat(o.df.as_fd()).map(|s| s.dev).unwrap_or(0),
        );
        // O_DIRECT twins are opened through /proc/self/fd: the very files opened and
        // checked, never a name someone could have replaced meanwhile.
        let src = sys::fd_path(o.sf.as_fd());
        let tmp = sys::fd_path(o.df.as_fd());
        let todo = resume::clip(&o.extents, o.kept);
        let mut prefix = self.resumed(o, hashes)?;
        let checkpoint = matches!(o.temp, Temp::Named(_)).then(|| {
            resume::Checkpointer::new(o.df.as_fd(), &o.st, &todo, self.ctx.opts.chunk, o.kept)
        });
        let finished = |off: u64| {
            if let Some(c) = &checkpoint {
                c.finished(off);
            }
        };
        let job = |extents| Job {
            src: o.sf.as_fd(),
            dst: o.df.as_fd(),
            extents,
            chunk: self.ctx.opts.chunk,
            // The one-at-a-time pass after ENOSPC writes in order: what fits is then a
            // prefix, which --partial keeps and a later run resumes (pieces in flight
            // out of order left a hole at the start and nothing to keep, 1 run in 4).
            depth: if size >= 2 * self.ctx.opts.chunk as u64
                && !self.final_pass.load(Ordering::Relaxed)
            {
                self.ctx.opts.depth
            } else {
                1
            },
            observer: self.ctx.observer,
            tally: &self.ctx.tally,
            hasher: hashes,
            src_cached_before: o.src_cached,
            pace: self.ctx.bandwidth.as_ref(),
            checkpoint: checkpoint
                .is_some()
                .then_some(&finished as &(dyn Fn(u64) + Sync)),
            drop_source_after: true,
            punch_zeros: self.ctx.opts.sparse_zeros,
        };
        // Each attempt hashes from what is kept (what an earlier run or the measure wrote).
        let restart_hashes = |prefix: &[(u64, u64)]| {
            if let Some(h) = hashes {
                let mut parts = h.parts.lock().unwrap();
                parts.clear();
                parts.extend_from_slice(prefix);
            }
        };
        restart_hashes(&prefix);
        // What is left to copy after `auto`'s measure, and what is on disk before the
        // chain's attempts (a refused strategy's leftovers are cut back to it).
        // Not under a bandwidth limit: the windows would time the limit, not the device (a
        // --bwlimit auto copy measured RWF_DONTCACHE faster and took it).
        let probed = match self.ctx.opts.strategy {
            Strategy::Auto if size >= probe::PROBE_MIN && self.ctx.bandwidth.is_none() => {
                let chain = self.chain(devs, size);
                let move_data = |j: &Job<'_>, s| self.move_data(j, s, &src, &tmp);
                self.choices
                    .measure(&job(&todo), devs, size, &chain, move_data)
            }
            _ => Probe::Skip,
        };
        let upto = match probed {
            Probe::Skip => None,
            Probe::Chose { upto } => Some(upto),
            Probe::Refused { upto, way, why } => {
                self.refuse(devs.1, way, why, &o.dst);
                Some(upto)
            }
            Probe::Ended(m) => return self.ended(o, m, checkpoint.as_ref()),
        };
        let (rest, kept) = match upto {
            None => (todo.clone(), o.kept),
            Some(upto) => {
                if let Some(h) = hashes {
                    let mut parts = h.parts.lock().unwrap();
                    parts.retain(|p| p.0 < upto);
                    prefix = parts.clone();
                }
                (resume::clip(&todo, upto), upto)
            }
        };
        for strat in self.chain(devs, size) {
            restart_hashes(&prefix);
            match self.move_data(&job(&rest), strat, &src, &tmp) {
                Moved::Done => return Some(strat),
                Moved::Fallback(u) => {
                    self.refuse(devs.1, strat, u, &o.dst);
                    // What was kept stays; the next strategy writes the rest.
                    let _ = o.df.set_len(kept);
                }
                m => return self.ended(o, m, checkpoint.as_ref()),
            }
        }
        self.ctx.fail_none(FileError::other(
            &o.dst,
            Op::Copy,
            "no strategy could write this file",
        ))
    }

    /// A file whose copy failed or was stopped (`m`).
    fn ended(
        &self,
        o: &Open,
        m: Moved,
        checkpoint: Option<&resume::Checkpointer<'_>>,
    ) -> Option<Strategy> {
        match m {
            Moved::Failed(f) => {
                // Out of space beside other files: tried again alone (see `failed`), its
                // temporary given back meanwhile; out of space alone, it is final and
                // --partial keeps what was written, as after any other failure.
                let on_dest_full = f.on_dest && f.err.raw_os_error() == Some(libc::ENOSPC);
                if !on_dest_full || self.final_pass.load(Ordering::Relaxed) {
                    self.keep_partial(o, checkpoint);
                }
                self.failed(o, f)
            }
            _ => {
                self.keep_partial(o, checkpoint);
                None
            }
        }
    }

    /// A file resumed from an earlier run's temporary: its kept bytes count as done in the
    /// progress, and with `--verify` the kept prefix of the source is read (from disk) for the
    /// digest — the per-chunk hashes of `[0, kept)`. None: the read failed (reported).
    fn resumed(&self, o: &Open, hashes: Option<&ChunkHashes>) -> Option<Vec<(u64, u64)>> {
        if o.kept == 0 {
            return Some(Vec::new());
        }
        self.ctx
            .observer
            .progress(0, resume::data_below(&o.extents, o.kept));
        let Some(_) = hashes else {
            return Some(Vec::new());
        };
        let head = resume::below(&o.extents, o.kept);
        let read =
            o.sf.try_clone()
                .and_then(|fd| hashes_from_disk(fd, &head, self.ctx.opts.chunk));
        match read {
            Ok(h) => Some(h.parts.into_inner().unwrap()),
            Err(e) => self.ctx.fail_none(FileError::io(&o.src, Op::Read, &e)),
        }
    }

    /// With `--partial`, a file stopped or failed mid-copy keeps its temporary with a
    /// checkpoint of what is on disk, for a later run to resume.
    fn keep_partial(&self, o: &Open, checkpoint: Option<&resume::Checkpointer<'_>>) {
        if let (true, Some(c), Temp::Named(t)) = (self.ctx.opts.partial, checkpoint, &o.temp) {
            c.save_now();
            if c.saved() > 0 {
                t.keep();
            }
        }
    }

    /// Reports a failure to move a file's data, or, for a destination out of space while
    /// other files were written beside it, queues the file for the one-at-a-time pass.
    fn failed(&self, o: &Open, f: IoFailure) -> Option<Strategy> {
        if f.on_dest
            && f.err.raw_os_error() == Some(libc::ENOSPC)
            && !self.final_pass.load(Ordering::Relaxed)
        {
            // The temporary goes with `o`, giving its space back.
            self.no_space.lock().unwrap().push(FileTask {
                src: o.src.clone(),
                dst: o.dst.clone(),
                size: o.st.size,
                before: o.before,
                basis: o.basis,
                quiet: o.quiet,
                compare: false,
                resume: None,
                nofollow: o.nofollow,
            });
            return None;
        }
        let path = if f.on_dest { &o.dst } else { &o.src };
        self.ctx.fail_none(FileError::io(path, f.op, &f.err))
    }

    /// One attempt at the data with `strat` (`src` and `tmp` name the files for O_DIRECT's
    /// own descriptors).
    fn move_data(&self, job: &Job<'_>, strat: Strategy, src: &Path, tmp: &Path) -> Moved {
        match strat {
            Strategy::Direct => match engine::open_direct_pair(src, tmp, job.dst) {
                Ok((s, d, mem, off)) => engine::copy_direct(job, s.as_fd(), d.as_fd(), mem, off),
                Err(u) => Moved::Fallback(u),
            },
            Strategy::Dontcache => engine::copy_dontcache(job),
            Strategy::DropBehind => engine::copy_drop_behind(job),
            Strategy::Buffered | Strategy::Auto => engine::copy_buffered(job),
        }
    }
}
