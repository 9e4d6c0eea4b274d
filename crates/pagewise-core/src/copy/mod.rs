//! `copy`: files and trees at device speed, leaving the page cache as it was.
//!
//! A planner thread walks the sources (cp semantics), creates directories and symlinks, and
//! feeds regular files through a bounded channel to a pool of workers, so memory stays flat on
//! any tree. Each worker writes a file as an unnamed O_TMPFILE (or under a hidden temporary
//! name) and links (renames) it into place only when complete; on any error or cancellation
//! nothing is linked (the temporary is removed), so no half file ever stands under a final
//! name. Small files travel in batches of neighbours: one io_uring submission reads a batch,
//! and their write-back is batched across files (syncfs, then a wait and a drop per file).
//! Destination pages are cleaned in batches, never with an fdatasync per file. Hard links
//! inside the copied set are recreated as hard links once their first name exists; directory
//! modes and times are set last, after their contents.
//!
//! - `plan`: cp's rules, refusals (same file, directory into itself), the walk;
//! - `worker`: per file, open the pair and move the data with the first strategy accepted;
//! - `engine`: the strategies' read/write steps and the one chunk loop that runs them;
//! - `commit`: O_TMPFILE + linkat or a named temporary + rename;
//! - `finish`: metadata, write-back batches, hard links, directories, verify, residue.
//! - `options`: the options and their check; `report`: the report and the per-entry items.

mod commit;
mod dest;
mod engine;
pub mod filter;
mod finish;
pub mod limits;
mod options;
mod plan;
mod report;
mod resume;
mod worker;

pub use engine::Strategy;
pub use filter::{Filters, RuleKind, Side};
pub use options::{CopyOptions, Dereference, Existing, MAX_CHUNK, MAX_DEPTH, MAX_THREADS};
pub use options::{DEFAULT_CHUNK, DEFAULT_DEPTH, DEFAULT_DIRECT_MIN, DEFAULT_THREADS};
pub use plan::plan_targets;
pub use report::{Action, CopyItem, CopyReport, EntryKind, Residue};

use crate::error::{Error, FileError};
use crate::sys;
use crate::verb::{self, FileResult, Observer, Tally};
use plan::FileTask;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use worker::Local;

/// Entries counted by the planner threads and the workers.
#[derive(Default)]
struct Counts {
    symlinks: AtomicU64,
    specials: AtomicU64,
    created: AtomicU64,
    updated: AtomicU64,
    skipped: AtomicU64,
    stale_temps: AtomicU64,
    /// Bytes of kept data compared with the source (per side) before resuming.
    resume_compared: AtomicU64,
    /// Files whose content was left and whose metadata was brought over.
    metadata: AtomicU64,
    deleted: AtomicU64,
    /// A dry run's files and bytes that a copy would write (the workers count a real run's).
    dry_files: AtomicU64,
    dry_bytes: AtomicU64,
}

/// What the workers and the planner share for one run.
struct Ctx<'a> {
    counts: Counts,
    /// What the written files leave in the page cache.
    dest_residue: finish::DestResidue,
    opts: &'a CopyOptions,
    observer: &'a dyn Observer,
    /// Errors, notices, the clock and a stop once asked for.
    tally: Tally,
    /// Numbers temporary names.
    seq: AtomicU64,
    is_root: bool,
    /// This process's umask (what open(O_CREAT) takes from a new file's mode).
    umask: u32,
    /// A destination refused O_TMPFILE: use named temporary files from then on.
    no_tmpfile: AtomicBool,
    /// io_uring or RWF_DONTCACHE reads are refused: small files go one by one.
    no_small_path: AtomicBool,
    batch_settle: finish::BatchSettle,
    /// Open files each holder may keep.
    fds: finish::FdBudget,
    /// Filesystems (st_dev of the destination dir) where a strategy was refused.
    refused: Mutex<HashSet<(u64, Strategy)>>,
    /// Files whose destination ran out of space while others were written beside them: they
    /// are tried again one at a time when the parallel pass is over (files that fit one
    /// after the other, as cp copies them, must not fail for being copied together).
    no_space: Mutex<Vec<FileTask>>,
    /// The one-at-a-time pass: ENOSPC is final now.
    final_pass: AtomicBool,
    /// Destination names, resolved without following symlinks.
    dest: dest::Dest,
    /// `--bwlimit`: every chunk and small-file batch waits for its turn.
    bandwidth: Option<limits::Bandwidth>,
}

impl<'a> Ctx<'a> {
    fn new(opts: &'a CopyOptions, observer: &'a dyn Observer, dest: dest::Dest) -> Self {
        let fds = finish::FdBudget::new(sys::fd_budget(), opts.threads);
        Ctx {
            counts: Counts::default(),
            dest_residue: finish::DestResidue::new(fds.recheck),
            opts,
            observer,
            tally: Tally::new(),
            seq: AtomicU64::new(0),
            is_root: sys::euid() == 0,
            umask: finish::umask(),
            no_tmpfile: AtomicBool::new(false),
            no_small_path: AtomicBool::new(
                opts.strategy != Strategy::Auto || !sys::probe_io_uring(),
            ),
            batch_settle: finish::BatchSettle::new(fds.shared_settle),
            fds,
            refused: Mutex::new(HashSet::new()),
            no_space: Mutex::new(Vec::new()),
            final_pass: AtomicBool::new(false),
            dest,
            bandwidth: opts.bwlimit.map(limits::Bandwidth::new),
        }
    }

    /// Waits for `bytes` under the bandwidth limit; false when the copy stops meanwhile.
    fn pace(&self, bytes: u64) -> bool {
        match &self.bandwidth {
            Some(b) => b.take(bytes, || self.stopped()),
            None => true,
        }
    }

    /// Whether to stop (the observer asked, now or before).
    fn stopped(&self) -> bool {
        self.tally.stop_requested(self.observer)
    }

    /// One entry's outcome to the observer, when per-entry results were asked for.
    fn item(&self, path: &Path, kind: EntryKind, action: Action, bytes: u64) {
        if self.opts.items {
            self.observer.file(FileResult::Copy(CopyItem {
                path: path.to_path_buf(),
                kind: Some(kind),
                action,
                bytes,
                error: None,
            }));
        }
    }

    /// An entry made (`existed`: replacing what was there), counted and reported.
    fn done(&self, path: &Path, kind: EntryKind, existed: bool, bytes: u64) {
        let (count, action) = if existed {
            (&self.counts.updated, Action::Updated)
        } else {
            (&self.counts.created, Action::Created)
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.item(path, kind, action, bytes);
    }

    /// An entry left as it was, counted and reported.
    fn skipped(&self, path: &Path, kind: EntryKind) {
        self.counts.skipped.fetch_add(1, Ordering::Relaxed);
        self.item(path, kind, Action::Skipped, 0);
    }

    /// A per-file failure: counted in the outcome and reported as a `failed` entry.
    fn fail(&self, e: FileError) {
        if self.opts.items {
            self.observer.file(FileResult::Copy(CopyItem {
                path: e.path.clone(),
                kind: None,
                action: Action::Failed,
                bytes: 0,
                error: Some(format!("{} failed: {}", e.op, e.message)),
            }));
        }
        self.tally.error(e);
    }

    /// The parallel pass: the planner on this thread, `threads` workers beside it. Returns
    /// what the planner leaves for the end and the workers' figures.
    fn run_parallel(&self, targets: &[(PathBuf, PathBuf)]) -> (plan::Planned, Local) {
        let (tx, rx) = crossbeam_channel::bounded::<Vec<FileTask>>(1024);
        let merged = Mutex::new(Local::default());
        let planned = std::thread::scope(|s| {
            for _ in 0..self.fds.workers {
                let rx = rx.clone();
                let merged = &merged;
                s.spawn(move || worker::work(self, rx, merged));
            }
            drop(rx);
            let planned = plan::plan(self, targets, tx);
            self.observer.planned_all();
            planned
        });
        (planned, merged.into_inner().unwrap())
    }

    /// Files that met ENOSPC beside others: once more, one at a time.
    fn retry_no_space(&self, m: &mut Local) {
        let retry = std::mem::take(&mut *self.no_space.lock().unwrap());
        if retry.is_empty() {
            return;
        }
        self.final_pass.store(true, Ordering::Relaxed);
        let mut local = Local::default();
        for t in retry {
            self.copy_file(&mut local, t);
        }
        finish::settle(&mut local.settle, &self.dest_residue);
        worker::merge(m, local);
    }
}

/// The calling thread's I/O priority while a copy runs: set, then restored on drop.
struct IoPriorityGuard(sys::IoPriority);

impl IoPriorityGuard {
    fn set(p: sys::IoPriority) -> Result<Self, Error> {
        let io = |source| Error::Io {
            path: "ioprio".into(),
            op: crate::error::Op::IoprioSet,
            source,
        };
        let before = sys::io_priority(0).map_err(io)?;
        sys::set_io_priority(0, p).map_err(io)?;
        Ok(IoPriorityGuard(before))
    }
}

impl Drop for IoPriorityGuard {
    fn drop(&mut self) {
        let _ = sys::set_io_priority(0, self.0);
    }
}

/// Copies `options.sources` to `options.dest` (cp -a / rsync -a style, see the module doc).
///
/// Fatal errors (invalid options, several sources and a destination that is not a directory)
/// return `Err` before anything is copied; per-file failures are counted in the report's
/// outcome and the copy goes on. When `observer.cancelled()` says so the copy stops between
/// chunks and files: what was finished is complete, nothing else is left under a final name.
///
/// ```
/// use pagewise_core::copy::{copy, CopyOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let src = dir.path().join("src");
/// std::fs::write(&src, vec![7u8; 3 << 20]).unwrap();
/// let opts = CopyOptions {
///     sources: vec![src],
///     dest: dir.path().join("dst"),
///     ..CopyOptions::default()
/// };
/// let report = copy(&opts, &()).unwrap();
/// assert_eq!(report.files, 1);
/// assert_eq!(std::fs::read(dir.path().join("dst")).unwrap(), vec![7u8; 3 << 20]);
/// assert!(report.outcome.is_clean());
/// ```
pub fn copy(options: &CopyOptions, observer: &dyn Observer) -> Result<CopyReport, Error> {
    options.validate()?;
    let targets = plan_targets(&options.sources, &options.dest, options.no_target_directory)?;
    let umask = finish::umask();
    let follow_roots = options.dereference != Dereference::Never;
    // The I/O priority is set on this thread before any other starts (they inherit it) and
    // this thread's own is given back at the end.
    let _io_priority = match options.io_priority {
        Some(p) => Some(IoPriorityGuard::set(p)?),
        None => None,
    };
    let ctx = Ctx::new(options, observer, dest::Dest::new(&targets, follow_roots));
    if !options.no_target_directory {
        for (src, dst) in &targets {
            if let Some(n) = plan::nesting_notice(src, dst, &options.dest) {
                ctx.tally.notice(n);
            }
        }
    }
    let (planned, mut m) = ctx.run_parallel(&targets);
    ctx.retry_no_space(&mut m);
    ctx.batch_settle.flush(&ctx.dest_residue);
    let hardlinks = ctx.link_hard(&planned.deferred_links);
    if !options.dry_run {
        ctx.finish_dirs(&planned.dirs, umask);
    }
    if options.fsync && !options.dry_run {
        finish::fsync_parents(&targets);
    }
    let interrupted = ctx.stopped();
    // The copy's own time: verification and the residue measure are not in it (nor in the rate).
    let elapsed = ctx.tally.elapsed_s();
    let (verified_files, verify_mismatches) = if options.verify && !interrupted {
        ctx.verify(&m.digests)
    } else {
        (0, 0)
    };
    // Measured per written file after its write-back and drop (see finish::settle): what
    // this copy wrote, not files of the destination it left alone.
    m.residue.dest_cached_bytes =
        (ctx.dest_residue.pages() * sys::page_size()).min(m.residue.dest_bytes);
    let extra = interrupted
        .then(|| {
            match options.partial {
                true => "interrupted: files not finished were kept as partial temporaries for a later run; finished files are complete",
                false => "interrupted: files not finished were removed; finished files are complete",
            }
            .to_string()
        })
        .into_iter()
        .collect();
    let mut outcome = ctx.tally.finish(extra);
    outcome.elapsed_s = elapsed;
    let c = &ctx.counts;
    Ok(CopyReport {
        files: m.files + c.dry_files.load(Ordering::Relaxed),
        dirs: planned.dirs.len() as u64,
        symlinks: c.symlinks.load(Ordering::Relaxed),
        hardlinks,
        specials: c.specials.load(Ordering::Relaxed),
        created: c.created.load(Ordering::Relaxed),
        updated: c.updated.load(Ordering::Relaxed),
        skipped: c.skipped.load(Ordering::Relaxed),
        stale_temporaries_removed: c.stale_temps.load(Ordering::Relaxed),
        resumed_files: m.resumed_files,
        resumed_bytes: m.resumed_bytes,
        resume_compared_bytes: c.resume_compared.load(Ordering::Relaxed),
        metadata_updated: c.metadata.load(Ordering::Relaxed),
        deleted: c.deleted.load(Ordering::Relaxed),
        bytes: m.bytes + c.dry_bytes.load(Ordering::Relaxed),
        data_bytes: m.data_bytes,
        rate_bytes_per_s: verb::rate(m.data_bytes, elapsed),
        strategies: m.strategies,
        residue: m.residue,
        verified_files,
        verify_mismatches,
        dry_run: options.dry_run,
        outcome,
    })
}
