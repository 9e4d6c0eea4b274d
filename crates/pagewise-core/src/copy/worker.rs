//! The workers: each takes units of files from the planner, opens the source and the file its
//! data goes to, moves the data with the first strategy the filesystems accept (remembering
//! refusals per filesystem) and hands the file to [`finish`](super::finish). Small files
//! travel in batches: one io_uring submission reads a batch.

use super::commit::Temp;
use super::dest::ParentCache;
use super::engine::{self, ChunkHashes, IoFailure, Job, Moved, Unsupported};
use super::finish::{settle, Settle};
use super::plan::FileTask;
use super::resume;
use super::{Ctx, Residue, Strategy};
use crate::dio::uncached;
use crate::error::{FileError, Op};
use crate::sys::{self, AlignedBuf};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Files up to this size are copied in batches (see [`Ctx::copy_small`]).
pub(super) const SMALL_FILE: u64 = 256 << 10;
/// The most a file of a pseudo filesystem may hold to be copied (see [`Ctx::copy_pseudo`]).
const PSEUDO_MAX: usize = 256 << 20;
/// Files and bytes per small-file batch of one worker.
pub(super) const SMALL_BATCH: usize = 64;
pub(super) const SMALL_BATCH_BYTES: u64 = 2 << 20;

/// What one worker adds up; merged into the report at the end.
#[derive(Default)]
pub(super) struct Local {
    /// Files written without the batched write-back, waiting for their wait and drop.
    pub settle: Vec<Settle>,
    pub files: u64,
    pub bytes: u64,
    pub data_bytes: u64,
    /// Files resumed from an earlier run's partial temporary, and the data bytes kept.
    pub resumed_files: u64,
    pub resumed_bytes: u64,
    pub strategies: BTreeMap<Strategy, u64>,
    pub residue: Residue,
    pub digests: Vec<Digest>,
    /// The directory the last file went to.
    pub parents: ParentCache,
}

/// Data extents of a file, `(offset, length)`.
type Extents = Vec<(u64, u64)>;

/// A copied file's destination, data extents, the checksum of the source data and the
/// (device, inode) of the file written (what `--verify` must find under the name).
pub(super) type Digest = (PathBuf, Extents, u64, (u64, u64));

/// Adds a worker's figures to the run's.
pub(super) fn merge(m: &mut Local, l: Local) {
    m.files += l.files;
    m.bytes += l.bytes;
    m.data_bytes += l.data_bytes;
    m.resumed_files += l.resumed_files;
    m.resumed_bytes += l.resumed_bytes;
    for (k, v) in l.strategies {
        *m.strategies.entry(k).or_default() += v;
    }
    m.residue.source_added_bytes += l.residue.source_added_bytes;
    m.residue.source_precached_bytes += l.residue.source_precached_bytes;
    m.residue.source_bytes += l.residue.source_bytes;
    m.residue.dest_bytes += l.residue.dest_bytes;
    m.residue.source_unknown_files += l.residue.source_unknown_files;
    m.digests.extend(l.digests);
}

/// What one worker thread keeps between batches.
struct Worker {
    ring: sys::ReadRing,
    buf: AlignedBuf,
}

/// A source opened and checked, and the file its data goes to.
pub(super) struct Open {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub sf: OwnedFd,
    pub st: sys::Stat,
    pub sparse: bool,
    /// On procfs, sysfs and the like: the size in stat is not the content (see
    /// [`sys::is_pseudo_fs`]); read to the end instead.
    pub pseudo: bool,
    /// Data extents of the source, `(offset, length)`.
    pub extents: Vec<(u64, u64)>,
    /// Source pages cached before the copy (None if unknown).
    pub src_cached: Option<u64>,
    pub df: fs::File,
    pub temp: Temp,
    /// The destination's directory, reached without following symlinks.
    pub dir: std::sync::Arc<OwnedFd>,
    /// The destination existed before (the copy updates it).
    pub existed: bool,
    /// Bytes from offset 0 an earlier, killed copy left in the temporary, checked against the
    /// source (see [`super::resume`]): the copy continues from there.
    pub kept: u64,
}

/// One worker thread: copies the units it receives until the planner is done, then settles
/// its files and adds its figures to `merged`.
pub(super) fn work(
    ctx: &Ctx<'_>,
    rx: crossbeam_channel::Receiver<Vec<FileTask>>,
    merged: &Mutex<Local>,
) {
    let mut local = Local::default();
    let mut worker = None;
    for mut unit in rx.iter() {
        // --checksum: files whose destination has the same content are left as they are.
        unit.retain(|t| !(t.compare && ctx.unchanged(t)));
        let (small, mut one_by_one): (Vec<_>, Vec<_>) =
            unit.into_iter().partition(|t| ctx.is_small(t));
        match (small.len() >= 2)
            .then(|| ctx.worker(&mut worker))
            .flatten()
        {
            Some(w) => ctx.copy_small(&mut local, small, w),
            None => one_by_one.extend(small),
        }
        for t in one_by_one {
            ctx.copy_file(&mut local, t);
        }
    }
    settle(&mut local.settle, &ctx.dest_residue);
    merge(&mut merged.lock().unwrap(), local);
}

impl Ctx<'_> {
    /// Copies one file through the general path.
    pub(super) fn copy_file(&self, local: &mut Local, task: FileTask) {
        if let Some(o) = self.open_pair(local, task) {
            self.copy_data_and_finish(local, o);
        }
    }

    /// Whether a file planned at `size` bytes goes through [`Ctx::copy_small`].
    /// (`no_small_path` is set from the start unless the strategy is `auto` with io_uring.)
    fn is_small(&self, task: &FileTask) -> bool {
        task.size <= SMALL_FILE
            && task.resume.is_none()
            && !self.no_small_path.load(Ordering::Relaxed)
    }

    /// Copies a batch of small files: their reads go to the kernel in one io_uring submission
    /// (RWF_DONTCACHE) — one device notification, and neighbouring files merged into one
    /// request — and their writes are plain buffered writes whose write-back is batched across
    /// files (see [`BatchSettle`](super::finish::BatchSettle)). A 100k-file tree needed ~100k
    /// reads and ~100k writes through per-file preadv2/pwritev2(RWF_DONTCACHE); this path
    /// needs a fraction of each. Files that turn out not to fit (grown, sparse) take the
    /// general path.
    fn copy_small(&self, local: &mut Local, tasks: Vec<FileTask>, w: &mut Worker) {
        let mut open = Vec::with_capacity(tasks.len());
        for t in tasks {
            if let Some(o) = self.open_pair(local, t) {
                if o.sparse || o.pseudo || o.st.size > SMALL_FILE || o.st.size == 0 {
                    self.copy_data_and_finish(local, o);
                } else {
                    open.push(o);
                }
            }
        }
        if open.is_empty() || self.stopped() {
            return;
        }
        let total: usize = open.iter().map(|o| o.st.size as usize).sum();
        if !self.pace(total as u64) {
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
                self.tally.notice(format!(
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
            self.write_small(local, o, data, results.next());
        }
    }

    /// Finishes one file of a small-file batch: `data` holds what the batch read of it (`got`:
    /// the bytes read, or the error; None when the batch could not be submitted).
    fn write_small(
        &self,
        local: &mut Local,
        o: Open,
        data: &mut [u8],
        got: Option<io::Result<usize>>,
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
            Err(Some(e)) => return self.fail(FileError::io(&o.src, Op::ReadDontcache, &e)),
            Err(None) => return self.copy_data_and_finish(local, o),
        };
        self.observer.progress(0, n as u64);
        if let Err(e) = engine::write_full(&data[..n], 0, |b, off| {
            sys::pwritev2(o.df.as_fd(), b, off, 0)
        }) {
            return self.fail(FileError::io(&o.dst, Op::Pwritev2, &e));
        }
        let digest = self
            .opts
            .verify
            .then(|| engine::digest_of(&o.extents, self.opts.chunk, &data[..n]));
        self.finish(local, o, Strategy::Dontcache, digest, true);
    }

    /// This thread's ring and buffer for small-file batches, made on first use; None (and
    /// small files one by one from then on) where io_uring cannot be set up.
    fn worker<'w>(&self, slot: &'w mut Option<Worker>) -> Option<&'w mut Worker> {
        if slot.is_none() {
            match sys::ReadRing::new(SMALL_BATCH as u32) {
                Ok(ring) => {
                    *slot = Some(Worker {
                        ring,
                        buf: AlignedBuf::new(SMALL_BATCH_BYTES as usize, 4096),
                    })
                }
                Err(e) => {
                    self.no_small_path.store(true, Ordering::Relaxed);
                    self.tally.notice(format!(
                        "io_uring unavailable ({e}): files copied one by one"
                    ));
                }
            }
        }
        slot.as_mut()
    }

    fn copy_data_and_finish(&self, local: &mut Local, o: Open) {
        if o.pseudo {
            return self.copy_pseudo(local, o);
        }
        let hashes = self.opts.verify.then(ChunkHashes::default);
        if let Some(s) = self.copy_data(&o, hashes.as_ref()) {
            self.finish(local, o, s, hashes.map(|h| h.digest()), false);
        }
    }

    /// Copies a file of procfs, sysfs and the like: what `read` returns up to its end (as cp
    /// does), never the size stat claims — a /proc file is 0 bytes there, a sysfs attribute
    /// 4096, so a copy by size would be empty or padded with NULs. At most
    /// [`PSEUDO_MAX`] bytes (such a file can be endless, /proc/kcore is the machine's memory).
    fn copy_pseudo(&self, local: &mut Local, mut o: Open) {
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
                        return self.fail(FileError::other(&o.src, Op::Read, why));
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return self.fail(FileError::io(&o.src, Op::Read, &e)),
            }
        }
        if let Err(e) =
            engine::write_full(&data, 0, |b, off| sys::pwritev2(o.df.as_fd(), b, off, 0))
        {
            return self.fail(FileError::io(&o.dst, Op::Pwritev2, &e));
        }
        self.observer.progress(0, data.len() as u64);
        o.st.size = data.len() as u64;
        o.extents = if data.is_empty() {
            Vec::new()
        } else {
            vec![(0, o.st.size)]
        };
        let digest = self
            .opts
            .verify
            .then(|| engine::digest_of(&o.extents, self.opts.chunk, &data));
        // Written through the cache, then written back and dropped with the run's others.
        self.finish(local, o, Strategy::DropBehind, digest, false);
    }

    /// Opens the source, checks it, and creates the file its data goes to.
    fn open_pair(&self, local: &mut Local, task: FileTask) -> Option<Open> {
        if self.stopped() {
            return None;
        }
        let FileTask {
            src,
            dst,
            existed,
            resume,
            ..
        } = task;
        let (sf, st, extents, pseudo) = self.open_source(&src)?;
        let sparse = !pseudo && st.allocated < st.size;
        let src_cached = crate::residency::cached_pages(sf.as_fd(), 0, 0);
        // Without --preserve the copy gets the source's permission bits less the umask, which
        // open(O_CREAT) applies itself: no fchmod afterwards. With --preserve the mode is set
        // after the owner (chown clears set-id bits), so the file starts private.
        let create_mode = if self.opts.preserve {
            0o600
        } else {
            st.mode & 0o777
        };
        let dir = match local.parents.parent(&self.dest, &dst) {
            Ok((dir, _)) => dir,
            Err(e) => {
                let parent = dst.parent().unwrap_or(Path::new(".")).to_path_buf();
                return self.fail_none(FileError::io(&dst, Op::OpenParent(parent), &e));
            }
        };
        let partial = resume
            .filter(|_| !pseudo)
            .and_then(|name| Some((self.take_partial(dir.as_fd(), &name, &sf, &st)?, name)));
        let (df, temp, kept) = match partial {
            Some(((fd, kept), name)) => {
                let mode = self.mode_at_commit(create_mode);
                (fd, Temp::adopt(dir.clone(), name, mode), kept)
            }
            None => match self.create_temp(&dir, &dst, create_mode) {
                Ok((fd, temp)) => (fd, temp, 0),
                Err(e) => {
                    self.fail(e);
                    return None;
                }
            },
        };
        if self.opts.preallocate && !sparse && st.size > self.opts.chunk as u64 {
            self.preallocate(&df, &dst, st.size)?;
        }
        Some(Open {
            src,
            dst,
            sf,
            st,
            sparse,
            pseudo,
            extents,
            src_cached,
            df: df.into(),
            temp,
            dir,
            existed,
            kept,
        })
    }

    /// Opens `src` (O_NOATIME where allowed), checks it is still a regular file, and finds its
    /// data extents (one for a file without holes; none for a file of a pseudo filesystem,
    /// flagged by the last field). None: skipped (vanished) or failed (reported).
    fn open_source(&self, src: &Path) -> Option<(OwnedFd, sys::Stat, Extents, bool)> {
        let flags = sys::OpenFlags {
            noatime: true,
            ..Default::default()
        };
        let sf = match sys::open_path(src, flags) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.tally
                    .notice("some source files vanished during the copy and were skipped");
                return None;
            }
            Err(e) => return self.fail_none(FileError::io(src, Op::Open, &e)),
        };
        let st = match sys::fstat(sf.as_fd()) {
            Ok(s) => s,
            Err(e) => return self.fail_none(FileError::io(src, Op::Fstat, &e)),
        };
        if !st.is_file() {
            let why = format!("is a {} now, not a regular file", st.kind());
            return self.fail_none(FileError::other(src, Op::Open, why));
        }
        let size = st.size;
        let pseudo = sys::is_pseudo_fs(sf.as_fd());
        let extents = if pseudo {
            Vec::new()
        } else if st.allocated < size {
            match sys::data_extents(sf.as_fd(), 0, size) {
                Ok(e) => e,
                Err(e) => return self.fail_none(FileError::io(src, Op::LseekData, &e)),
            }
        } else if size > 0 {
            vec![(0, size)]
        } else {
            Vec::new()
        };
        Some((sf, st, extents, pseudo))
    }

    /// Preallocates `size` bytes of the destination. Only files written in several chunks (in
    /// parallel, out of order) gain from it; a file written by one write is allocated in one
    /// piece by delayed allocation anyway, and fallocate's unwritten extents cost a conversion
    /// at I/O end (measured: 8% of a 10k small-file copy). None: failed (reported).
    fn preallocate(&self, df: &OwnedFd, dst: &Path, size: u64) -> Option<()> {
        if let Err(e) = sys::fallocate(df.as_fd(), 0, size) {
            if e.raw_os_error() == Some(libc::ENOSPC) {
                // Several files preallocated at once may not fit together where they fit
                // one after the other (cp copies them one by one): give back what was
                // allocated and write without; a write that really does not fit fails.
                if let Err(e) = df.try_clone().and_then(|d| fs::File::from(d).set_len(0)) {
                    return self.fail_none(FileError::io(dst, Op::Ftruncate, &e));
                }
            }
            // EOPNOTSUPP and friends: write without preallocation.
        }
        Some(())
    }

    /// Reports `e` for the file at hand and gives it up.
    fn fail_none<T>(&self, e: FileError) -> Option<T> {
        self.fail(e);
        None
    }

    /// Strategies to try for one file, best first. `auto` prefers RWF_DONTCACHE (measured
    /// fastest here: 4 GiB in 3.8 s against 6.1 s for O_DIRECT, at 2.1 s of CPU against 0.25 s),
    /// then O_DIRECT for large files (where the filesystem lacks DONTCACHE), then drop-behind.
    fn chain(&self, dev: u64, size: u64) -> Vec<Strategy> {
        let mut v: Vec<Strategy> = match self.opts.strategy {
            Strategy::Auto if size >= self.opts.direct_min => {
                vec![Strategy::Dontcache, Strategy::Direct, Strategy::DropBehind]
            }
            Strategy::Auto | Strategy::Dontcache => vec![Strategy::Dontcache, Strategy::DropBehind],
            Strategy::Direct => vec![Strategy::Direct, Strategy::Dontcache, Strategy::DropBehind],
            s => vec![s],
        };
        let refused = self.refused.lock().unwrap();
        v.retain(|s| !refused.contains(&(dev, *s)) || *s == Strategy::DropBehind);
        v
    }

    /// Moves the data with the first strategy of the chain that the filesystems accept.
    fn copy_data(&self, o: &Open, hashes: Option<&ChunkHashes>) -> Option<Strategy> {
        let size = o.st.size;
        let dev = sys::fstat(o.df.as_fd()).map(|s| s.dev).unwrap_or(0);
        // O_DIRECT twins are opened through /proc/self/fd: the very files opened and
        // checked, never a name someone could have replaced meanwhile.
        let src = sys::fd_path(o.sf.as_fd());
        let tmp = sys::fd_path(o.df.as_fd());
        let todo = resume::clip(&o.extents, o.kept);
        let prefix = self.resumed(o, hashes)?;
        let checkpoint = matches!(o.temp, Temp::Named(_)).then(|| {
            resume::Checkpointer::new(o.df.as_fd(), &o.st, &todo, self.opts.chunk, o.kept)
        });
        for strat in self.chain(dev, size) {
            let job = Job {
                src: o.sf.as_fd(),
                dst: o.df.as_fd(),
                extents: &todo,
                chunk: self.opts.chunk,
                // The one-at-a-time pass after ENOSPC writes in order: what fits is then a
                // prefix, which --partial keeps and a later run resumes (pieces in flight
                // out of order left a hole at the start and nothing to keep, 1 run in 4).
                depth: if size >= 2 * self.opts.chunk as u64
                    && !self.final_pass.load(Ordering::Relaxed)
                {
                    self.opts.depth
                } else {
                    1
                },
                observer: self.observer,
                tally: &self.tally,
                hasher: hashes,
                src_cached_before: o.src_cached,
                pace: self.bandwidth.as_ref(),
                checkpoint: checkpoint.as_ref(),
            };
            if let Some(h) = hashes {
                let mut parts = h.parts.lock().unwrap();
                parts.clear();
                parts.extend_from_slice(&prefix);
            }
            match self.move_data(&job, strat, &src, &tmp) {
                Moved::Done => return Some(strat),
                Moved::Fallback(Unsupported::Refused(op, e)) => {
                    self.refused.lock().unwrap().insert((dev, strat));
                    self.tally.notice(format!(
                        "{} refused on {} ({op}: {e}): falling back for its file system",
                        strat.name(),
                        crate::names::escape(o.dst.as_os_str().as_encoded_bytes())
                    ));
                    // What an earlier run kept stays; the next strategy writes the rest.
                    let _ = o.df.set_len(o.kept);
                }
                Moved::Failed(f) => {
                    // Out of space beside other files: tried again alone (see `failed`), its
                    // temporary given back meanwhile; out of space alone, it is final and
                    // --partial keeps what was written, as after any other failure.
                    let on_dest_full = f.on_dest && f.err.raw_os_error() == Some(libc::ENOSPC);
                    if !on_dest_full || self.final_pass.load(Ordering::Relaxed) {
                        self.keep_partial(o, checkpoint.as_ref());
                    }
                    return self.failed(o, f);
                }
                Moved::Interrupted => {
                    self.keep_partial(o, checkpoint.as_ref());
                    return None;
                }
            }
        }
        self.fail_none(FileError::other(
            &o.dst,
            Op::Copy,
            "no strategy could write this file",
        ))
    }

    /// A file resumed from an earlier run's temporary: its kept bytes count as done in the
    /// progress, and with `--verify` the kept prefix of the source is read (from disk) for the
    /// digest — the per-chunk hashes of `[0, kept)`. None: the read failed (reported).
    fn resumed(&self, o: &Open, hashes: Option<&ChunkHashes>) -> Option<Vec<(u64, u64)>> {
        if o.kept == 0 {
            return Some(Vec::new());
        }
        self.observer
            .progress(0, resume::data_below(&o.extents, o.kept));
        let Some(_) = hashes else {
            return Some(Vec::new());
        };
        let head = resume::below(&o.extents, o.kept);
        let read =
            o.sf.try_clone()
                .and_then(|fd| super::finish::hashes_from_disk(fd, &head, self.opts.chunk));
        match read {
            Ok(h) => Some(h.parts.into_inner().unwrap()),
            Err(e) => self.fail_none(FileError::io(&o.src, Op::Read, &e)),
        }
    }

    /// With `--partial`, a file stopped or failed mid-copy keeps its temporary with a
    /// checkpoint of what is on disk, for a later run to resume.
    fn keep_partial(&self, o: &Open, checkpoint: Option<&resume::Checkpointer<'_>>) {
        if let (true, Some(c), Temp::Named(t)) = (self.opts.partial, checkpoint, &o.temp) {
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
                existed: o.existed,
                compare: false,
                resume: None,
            });
            return None;
        }
        let path = if f.on_dest { &o.dst } else { &o.src };
        self.fail_none(FileError::io(path, f.op, &f.err))
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
