//! `load`: bring files and trees into the page cache with many reads in flight.
//!
//! Only files not fully cached are touched. Small files: each worker issues
//! fadvise(WILLNEED) — which queues the read and returns — for a batch of files, then reads each
//! of them once (pread waits only for pages still in flight), so a worker keeps a whole batch of
//! I/Os queued instead of one. Large files are read in windows with WILLNEED kept a window
//! ahead, so the device always has the next window's requests. Completion is proven by reading:
//! a page under read I/O already counts as cached for cachestat, so a count alone would claim
//! success too early. Large files are waited for with MADV_POPULATE_READ instead of a copy:
//! on a virtual machine the first CPU touch of each freshly read page costs a hypervisor fault
//! (measured here: 4–10 s of system time per 4 GiB with pread, 0.65 s with populate).
//!
//! `load --trace` ([`load_trace`]: exactly the pages a trace recorded) is in trace.rs; what
//! holding locked pages as a service needs (pidfile, sd_notify, detaching) is in [`hold`].

pub mod hold;
mod lock;
mod trace;
pub use lock::LockSet;
pub use trace::{load_trace, TraceLoadOptions, DEFAULT_TRACE_DEPTH};

use crate::chunks::{self, Stopped};
use crate::error::{FileError, Op};
use crate::residency::{ByteRange, Meter, Method};
use crate::sys::{self, Advice, LockedMapping};
use crate::verb::{rate, Observer, Outcome, Tally};
use crate::walk::{self, Batched, FileRef, Merged, WalkOptions, WalkSummary};
use lock::{check_lock_budget, lock_failure_hint};
use serde::Serialize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Options of `load`.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Files and trees to load (directories recurse). Required: at least one.
    pub roots: Vec<PathBuf>,
    /// How to walk the trees (default: [`WalkOptions::default`] with [`default_threads`]).
    pub walk: WalkOptions,
    /// Part of every file to load (default: all of it).
    pub range: ByteRange,
    /// How to measure before and after (default: [`Method::Auto`]).
    pub method: Method,
    /// Keep the loaded ranges resident with mmap+mlock (default off).
    pub lock: bool,
    /// Files per worker whose readahead is queued before the worker waits for them
    /// (default 256).
    pub batch_files: usize,
    /// Bytes in flight within one large file, split over `depth` threads (default 256 MiB).
    pub window: u64,
    /// Threads reading one large file (default 16).
    pub depth: usize,
}

impl LoadOptions {
    /// Options loading `roots` whole, with the defaults above.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        LoadOptions {
            roots,
            ..LoadOptions::default()
        }
    }
    /// Checks the options: at least one root, a valid walk, a positive batch, window and depth.
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.walk.validate(&self.roots)?;
        let zero = |what: &'static str| crate::Error::Invalid {
            what,
            message: "must be at least 1".into(),
        };
        if self.batch_files == 0 {
            return Err(zero("batch_files"));
        }
        if self.window == 0 {
            return Err(zero("window"));
        }
        if self.depth == 0 {
            return Err(zero("depth"));
        }
        Ok(())
    }
}

/// `load`'s walker threads when none are asked for: twice the CPUs, at least 4 (workers wait
/// on reads). What the CLI's `-j`, Python's `threads` and C's `threads = 0` default to.
pub fn default_threads() -> usize {
    (crate::walk::default_threads() * 2).max(4)
}

/// [`LoadOptions::batch_files`]'s default.
pub const DEFAULT_BATCH_FILES: usize = 256;
/// [`LoadOptions::window`]'s default, 256 MiB: 16 threads x 16 MiB chunks, each faulting
/// thread keeping ~4 MiB of huge-folio readahead in flight; on this VM's disk 16 x 16 MiB
/// reached fio's O_DIRECT rate where 4 x 16 MiB reached half of it (bench/cache-verbs).
pub const DEFAULT_WINDOW: u64 = 256 << 20;
/// [`LoadOptions::depth`]'s default.
pub const DEFAULT_DEPTH: usize = 16;

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            roots: Vec::new(),
            walk: WalkOptions {
                threads: default_threads(),
                ..WalkOptions::default()
            },
            range: ByteRange::default(),
            method: Method::Auto,
            lock: false,
            batch_files: DEFAULT_BATCH_FILES,
            window: DEFAULT_WINDOW,
            depth: DEFAULT_DEPTH,
        }
    }
}

/// Totals of a load.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LoadTotals {
    /// Files loaded or found fully cached.
    pub files: u64,
    /// Bytes in the requested ranges.
    pub bytes: u64,
    /// Cached bytes before, over the known files.
    pub cached_bytes_before: u64,
    /// Cached bytes after.
    pub cached_bytes_after: u64,
    /// Files skipped because they were fully cached already.
    pub already_cached_files: u64,
    /// Bytes of the ranges of files that were read (cached parts of them are only copied).
    pub read_bytes: u64,
    /// Bytes locked with `lock`, as the kernel shows them: the bytes of the range (at most the
    /// file's) whose pages are resident in the locked mappings (mincore); a sparse file's holes
    /// are not locked.
    pub locked_bytes: u64,
    /// Files locked with `lock`.
    pub locked_files: u64,
    /// Files whose residency before the load could not be known (see `unknown_reason`):
    /// `cached_bytes_before` leaves them out.
    pub unknown_files: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Why some files' residency before was unknown.
    pub unknown_reason: Option<&'static str>,
}

/// What `load` did.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LoadReport {
    /// The kernel's page size, in bytes.
    pub page_size: u64,
    /// Sums over all files.
    pub total: LoadTotals,
    /// Bytes newly brought in per second.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub rate_bytes_per_s: f64,
    /// What the walk met besides the files loaded.
    pub walk: WalkSummary,
    /// Errors, notices, elapsed time.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// With `lock`: the locked mappings; the pages stay resident until this is dropped.
    #[serde(skip)]
    pub locks: LockSet,
}

/// What of a file is loaded, for measuring and locking it after the read.
#[derive(Clone, Copy)]
struct Part<'f> {
    path: &'f Path,
    fd: BorrowedFd<'f>,
    /// The range, whole pages: `(off, len)`.
    pages: (u64, u64),
    /// The exact bytes of the file in it: `[start, end)`.
    span: (u64, u64),
    /// Only the data extents count (a sparse file's holes are neither read nor locked).
    sparse: bool,
    /// The file's size when the walk met it (`pages` and `span` are of it).
    size: u64,
}

struct Queued {
    path: PathBuf,
    fd: OwnedFd,
    off: u64,
    len: u64,
    /// The exact bytes of the file in the range (`off, len` are whole pages).
    span: (u64, u64),
    /// The file's size when the walk met it.
    size: u64,
}

#[derive(Default)]
struct Local {
    queued: Vec<Queued>,
    totals: LoadTotals,
    locks: Vec<LockedMapping>,
    buf: Vec<u8>,
}

const READ_BUF: usize = 1 << 20;

/// Files (or data extents) at least this long are read by several threads in chunks
/// (`read_large`); smaller ones go through the batched WILLNEED path.
const LARGE_FILE: u64 = 64 << 20;

struct Ctx<'a> {
    opts: &'a LoadOptions,
    /// Files a worker queues before it reads them: `batch_files`, less under a small
    /// RLIMIT_NOFILE (each queued file is open).
    batch_files: usize,
    meter: Meter,
    tally: Tally,
    observer: &'a dyn Observer,
    lock_blocked: AtomicBool,
}

impl Merged for Ctx<'_> {
    fn merge(&self, all: &mut Local, mut local: Local) {
        all.totals.merge(&local.totals);
        all.locks.append(&mut local.locks);
    }
}

impl Batched for Ctx<'_> {
    type Local = Local;

    fn visit(&self, local: &mut Local, f: FileRef<'_>) {
        let (off, len) = self.opts.range.clamp(f.stat.size);
        let before = match self.meter.measure(&f, self.opts.range) {
            Ok(r) => r,
            Err(e) => return self.tally.error(e),
        };
        // The exact bytes of the file in the range (`off, len` are rounded out to pages).
        let span = self.opts.range.span(f.stat.size);
        let real = before.bytes;
        local.totals.files += 1;
        local.totals.bytes += real;
        local.totals.cached_bytes_before += before.cached_or_zero();
        if before.is_unknown() {
            local.totals.unknown_files += 1;
            local.totals.unknown_reason = before.unknown_reason;
        }
        if len == 0 {
            return;
        }
        let part = Part {
            path: f.path,
            fd: f.fd(),
            pages: (off, len),
            span,
            sparse: false,
            size: f.stat.size,
        };
        let fully = before.cached.is_some_and(|c| c >= before.bytes);
        if fully {
            local.totals.already_cached_files += 1;
            local.totals.cached_bytes_after += real;
            self.observer.progress(1, len);
            // All of it is cached (holes too): locking pins what is there, no I/O.
            self.lock(local, part);
            return;
        }
        if f.stat.allocated < f.stat.size {
            // Sparse: read only the data extents; loading holes would fill the cache with zeros.
            match sys::data_extents(f.fd(), off, off + len) {
                Ok(ext) => {
                    for (o, l) in page_spans(&ext) {
                        self.read_large(f.path, f.fd(), o, l);
                    }
                }
                Err(e) => return self.tally.error(FileError::io(f.path, Op::LseekData, &e)),
            }
            self.after(
                local,
                Part {
                    sparse: true,
                    ..part
                },
            );
            return;
        }
        if len >= LARGE_FILE.min(self.opts.window) {
            self.read_large(f.path, f.fd(), off, len);
            self.after(local, part);
            return;
        }
        if let Err(e) = sys::fadvise(f.fd(), off, len, Advice::WillNeed) {
            return self
                .tally
                .error(FileError::io(f.path, Op::FadviseWillneed, &e));
        }
        local.queued.push(Queued {
            path: f.path.to_path_buf(),
            fd: f.fd,
            off,
            len,
            span,
            size: f.stat.size,
        });
        if local.queued.len() >= self.batch_files {
            self.drain(local);
        }
    }

    /// Reads every queued file once; the readahead issued when queued is mostly done by now.
    fn drain(&self, local: &mut Local) {
        for q in std::mem::take(&mut local.queued) {
            if self.read_range(local, &q.path, &q.fd, q.off, q.len) {
                let part = Part {
                    path: &q.path,
                    fd: q.fd.as_fd(),
                    pages: (q.off, q.len),
                    span: q.span,
                    sparse: false,
                    size: q.size,
                };
                self.after(local, part);
            }
        }
    }
}

impl Ctx<'_> {
    fn read_range(&self, local: &mut Local, path: &Path, fd: &OwnedFd, off: u64, len: u64) -> bool {
        if local.buf.len() < READ_BUF {
            local.buf = vec![0; READ_BUF];
        }
        let mut pos = off;
        let end = off + len;
        while pos < end {
            let n = ((end - pos) as usize).min(READ_BUF);
            match sys::pread(fd.as_fd(), &mut local.buf[..n], pos) {
                Ok(0) => break, // truncated meanwhile
                Ok(r) => pos += r as u64,
                Err(e) => {
                    self.tally.error(FileError::io(path, Op::Pread, &e));
                    return false;
                }
            }
        }
        true
    }

    /// A large file (or a data extent of a sparse one): `depth` threads each queue a whole
    /// chunk with WILLNEED and then read it, so `depth` chunks are in flight at once.
    fn read_large(&self, path: &Path, fd: std::os::fd::BorrowedFd<'_>, off: u64, len: u64) {
        let chunk = ((self.opts.window / self.opts.depth.max(1) as u64).clamp(2 << 20, 64 << 20)
            & !((2 << 20) - 1)) as usize;
        // With huge-folio readahead the faults themselves read 4 MiB at a time per thread in
        // 2 MiB folios; WILLNEED first would allocate the whole chunk in 4 KiB folios (30x the
        // system time, see sys::populate_read).
        let huge = sys::thp_file_readahead();
        let work = |_: &mut sys::AlignedBuf, o: u64, l: u64| -> Result<(), std::io::Error> {
            if !huge {
                let _ = sys::fadvise(fd, o, l, Advice::WillNeed);
            }
            // Wait for the chunk without copying it (see sys::populate_read).
            populate_within(fd, o, l, huge)
        };
        let done = |l| self.observer.progress(0, l);
        if let Err(Stopped::Failed(e)) = chunks::run(
            &[(off, len)],
            chunk,
            self.opts.depth,
            4096,
            None,
            work,
            done,
        ) {
            self.tally
                .error(FileError::io(path, Op::MadvisePopulateRead, &e));
        }
    }

    /// Measures a part read, counts it and tells the observer, then locks it (`lock`).
    ///
    /// The file's size is seen again first (fstat): one that shrank while it was loaded is
    /// measured, counted and locked up to its new end only, and said — a notice when all that
    /// is left is loaded (and locked), else an error (the promise was not kept); one that grew
    /// is loaded up to its old end, with a notice.
    fn after(&self, local: &mut Local, part: Part<'_>) {
        let path = part.path;
        let now = match sys::fstat(part.fd) {
            Ok(st) => st.size,
            Err(e) => return self.tally.error(FileError::io(path, Op::Fstat, &e)),
        };
        let shrank = now < part.size;
        let part = match shrank {
            true => {
                let span = self.opts.range.span(now);
                local.totals.bytes =
                    local.totals.bytes + (span.1 - span.0) - (part.span.1 - part.span.0);
                Part {
                    pages: self.opts.range.clamp(now),
                    span,
                    ..part
                }
            }
            false => part,
        };
        if now > part.size {
            self.tally.notice(format!(
                "{}: grew while it was loaded ({} -> {now} bytes): loaded up to its old end",
                path.display(),
                part.size
            ));
        }
        let Part {
            fd,
            pages: (_, len),
            span: (start, end),
            ..
        } = part;
        let after = match self.meter.measure_fd(path, fd, start, end, || true) {
            Ok(r) => r,
            Err(e) => return self.tally.error(e),
        };
        local.totals.read_bytes += end - start;
        local.totals.cached_bytes_after += after.cached_or_zero();
        if len < LARGE_FILE.min(self.opts.window) {
            self.observer.progress(1, len);
        } else {
            self.observer.progress(1, 0);
        }
        let locked = self.lock(local, part);
        if shrank {
            let cached = after.cached_or_zero();
            let all_locked = !self.opts.lock || part.sparse || locked >= end - start;
            let what = format!("shrank while it was loaded ({} -> {now} bytes)", part.size);
            if cached >= end - start && all_locked {
                self.tally.notice(format!(
                    "{}: {what}: all that is left is loaded",
                    path.display()
                ));
            } else {
                self.tally.error(FileError::other(
                    path,
                    Op::Load,
                    format!(
                        "{what}: {cached} of the {} bytes left are cached{}",
                        end - start,
                        match self.opts.lock {
                            true => format!(", {locked} locked"),
                            false => String::new(),
                        }
                    ),
                ));
            }
        }
    }

    /// Locks the pages `[off, off+len)` of a file (of a sparse one, only its data extents:
    /// mlock would read every hole in as zeros) and counts what the kernel then holds locked:
    /// the bytes of `[start, end)` whose pages are resident in the locked mappings (mincore),
    /// so a file's partial last page counts its bytes only and a hole nothing.
    /// Returns the bytes it holds locked.
    fn lock(&self, local: &mut Local, part: Part<'_>) -> u64 {
        let Part {
            path,
            fd,
            pages: (off, len),
            sparse,
            ..
        } = part;
        if !self.opts.lock || len == 0 || self.lock_blocked.load(Ordering::Relaxed) {
            return 0;
        }
        let parts = if sparse {
            match sys::data_extents(fd, off, off + len) {
                Ok(ext) => page_spans(&ext),
                Err(e) => {
                    self.tally.error(FileError::io(path, Op::LseekData, &e));
                    return 0;
                }
            }
        } else {
            vec![(off, len)]
        };
        let mut locked = 0;
        let mut any = false;
        for (o, l) in parts {
            match self.lock_part(local, &part, (o, l), &mut locked) {
                Ok(()) => any = true,
                Err(e) => {
                    self.tally.error(e);
                    break;
                }
            }
        }
        local.totals.locked_bytes += locked;
        local.totals.locked_files += any as u64;
        locked
    }

    /// Locks the page-aligned `[off, off+len)` of `part` and adds the bytes of its span it
    /// holds locked.
    fn lock_part(
        &self,
        local: &mut Local,
        part: &Part<'_>,
        (off, len): (u64, u64),
        locked: &mut u64,
    ) -> Result<(), FileError> {
        let (path, (start, end)) = (part.path, part.span);
        match sys::mmap_lock(part.fd, off, len) {
            Ok(m) => {
                *locked += m
                    .resident_bytes(start, end)
                    .map_err(|e| FileError::io(path, Op::MmapMincore, &e))?;
                local.locks.push(m);
                Ok(())
            }
            Err((op, e)) => {
                let why = lock_failure_hint(&op, &e);
                if e.raw_os_error() == Some(libc::ENOMEM) || e.raw_os_error() == Some(libc::EPERM) {
                    // Every further file would fail the same way: say it once, stop trying.
                    self.lock_blocked.store(true, Ordering::Relaxed);
                }
                Err(FileError::other(path, op, format!("{e}{why}")))
            }
        }
    }
}

/// [`sys::populate_read`] of `[off, off+len)`, within the file's end as it is now: a file
/// truncated meanwhile makes the populate fail with EFAULT (pages past the end cannot be
/// mapped: the SIGBUS of a touch); then the size is seen again (fstat) and only what is left
/// of the range is populated (nothing when it all went).
fn populate_within(fd: BorrowedFd<'_>, off: u64, len: u64, huge: bool) -> std::io::Result<()> {
    match sys::populate_read(fd, off, len, huge) {
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
            let page = sys::page_size();
            let end = sys::fstat(fd)?.size.div_ceil(page) * page;
            if end >= off + len {
                return Err(e); // not a truncation
            }
            match end.checked_sub(off) {
                Some(left) if left > 0 => sys::populate_read(fd, off, left, huge),
                _ => Ok(()),
            }
        }
        r => r,
    }
}

/// Data extents rounded out to whole pages, overlapping or touching ones merged (extents of
/// a filesystem with blocks smaller than a page can share a page).
fn page_spans(extents: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let page = sys::page_size();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(extents.len());
    for &(o, l) in extents {
        let (a, b) = (o / page * page, (o + l).div_ceil(page) * page);
        match out.last_mut() {
            Some((po, pl)) if a <= *po + *pl => *pl = b.max(*po + *pl) - *po,
            _ => out.push((a, b - a)),
        }
    }
    out
}

/// Loads every file under `options.roots`. With `options.lock`, the report holds the locked
/// mappings ([`LoadReport::locks`]): the pages stay resident until the report is dropped.
///
/// ```
/// use pagewise_core::load::{load, LoadOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let f = dir.path().join("f");
/// std::fs::write(&f, vec![1u8; 1 << 20]).unwrap();
/// let report = load(&LoadOptions::new(vec![f]), &()).unwrap();
/// assert_eq!(report.total.bytes, 1 << 20);
/// assert_eq!(report.total.cached_bytes_after, 1 << 20);
/// ```
pub fn load(options: &LoadOptions, observer: &dyn Observer) -> Result<LoadReport, crate::Error> {
    options.validate()?;
    check_lock_budget(options)?;
    let opts = options;
    let per_worker = sys::fd_budget_per_worker(opts.walk.threads);
    let ctx = Ctx {
        opts,
        batch_files: opts.batch_files.min(per_worker).max(1),
        meter: Meter::new(opts.method),
        tally: Tally::new(),
        observer,
        lock_blocked: AtomicBool::new(false),
    };
    let (all, summary) = walk::walk_merged(&opts.roots, &opts.walk, &ctx.tally, observer, &ctx)?;
    let total = all.totals;
    let new_bytes = total
        .cached_bytes_after
        .saturating_sub(total.cached_bytes_before);
    let notices = ctx.meter.take_notices();
    let outcome = ctx.tally.finish(notices);
    Ok(LoadReport {
        page_size: sys::page_size(),
        rate_bytes_per_s: rate(new_bytes, outcome.elapsed_s),
        total,
        walk: summary,
        outcome,
        locks: LockSet { maps: all.locks },
    })
}

impl LoadTotals {
    fn merge(&mut self, l: &LoadTotals) {
        self.files += l.files;
        self.bytes += l.bytes;
        self.cached_bytes_before += l.cached_bytes_before;
        self.cached_bytes_after += l.cached_bytes_after;
        self.already_cached_files += l.already_cached_files;
        self.read_bytes += l.read_bytes;
        self.locked_bytes += l.locked_bytes;
        self.locked_files += l.locked_files;
        self.unknown_files += l.unknown_files;
        self.unknown_reason = self.unknown_reason.or(l.unknown_reason);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn page_spans_round_out_and_merge() {
        let p = crate::sys::page_size();
        assert_eq!(super::page_spans(&[]), vec![]);
        // 1 KiB blocks: two extents sharing a page are one span.
        assert_eq!(
            super::page_spans(&[(0, 1024), (2048, 1024), (3 * p, 10)]),
            vec![(0, p), (3 * p, p)]
        );
        assert_eq!(super::page_spans(&[(p, p), (2 * p, p)]), vec![(p, 2 * p)]);
    }
}
