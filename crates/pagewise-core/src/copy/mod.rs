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
//! Dependencies go one way (tests/structure.rs checks there is no cycle): `options`,
//! `tasks`, `filter`, `limits`, `dest` and `report` import nothing above them; `state` (the
//! shared run state) builds on them; then `engine`, `resume`, `commit`, `worker`, `finish`,
//! `plan`, and this module, which wires the workers' output into `finish`.
//!
//! - `options`: the options, their check, the [`Strategy`] and the copy's constants;
//! - `tasks`: what the planner hands on (files, directories, the plan's leftovers);
//! - `state`: `Ctx`, what every part shares for one run (counts, tally, dest);
//! - `engine`: the strategies' read/write steps and the one chunk loop that runs them;
//! - `resume`: checkpoints in named temporaries, and taking one up again;
//! - `commit`: O_TMPFILE + linkat or a named temporary + rename (owns the O_TMPFILE fallback);
//! - `worker`: per file, open the pair and move the data with the first strategy accepted
//!   (owns the small-file fallback, the refused strategies, the ENOSPC retry queue);
//! - `finish`: metadata, commit, write-back batches (owns them), hard links, directories,
//!   verify, residue;
//! - `plan`: cp's rules, refusals (same file, directory into itself), the walk;
//! - `report`: the report and the per-entry items; `filter`, `limits`: rsync's rules and sizes.

mod backoff;
mod choices;
mod commit;
mod dest;
mod engine;
pub mod filter;
mod finish;
pub mod idmap;
pub mod limits;
pub mod modes;
mod options;
mod plan;
mod report;
mod resume;
mod state;
mod tasks;
mod worker;
mod zeros;

pub use backoff::AutoRate;
pub use choices::{AltDest, AltKind, Backup, InPlace, Layout, Links, Preserve, TempPlace};
pub use filter::{Filters, RuleKind, Side};
pub use options::{CopyOptions, Dereference, Existing, Strategy, MAX_CHUNK, MAX_DEPTH};
pub use options::{DEFAULT_CHUNK, DEFAULT_DEPTH, DEFAULT_DIRECT_MIN, DEFAULT_THREADS, MAX_THREADS};
pub use plan::plan_targets;
pub use report::{Action, AutoChoice, Changes, CopyItem, CopyReport, EntryKind, Residue};

use crate::error::{Error, Op};
use crate::sys;
use crate::verb::{self, Observer};
use commit::Temps;
use crossbeam_channel::Receiver;
use finish::{Finish, Local};
use state::Ctx;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use tasks::{FileTask, Planned};
use worker::Workers;

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
    let targets = match options.layout {
        Layout::Cp => plan_targets(&options.sources, &options.dest, options.no_target_directory)?,
        layout => plan::rsync_targets(&options.sources, &options.dest, layout)?,
    };
    let umask = finish::umask();
    let follow_roots = options.dereference != Dereference::Never;
    // The I/O priority is set on this thread before any other starts (they inherit it) and
    // this thread's own is given back at the end.
    let _io_priority = match options.io_priority {
        Some(p) => Some(IoPriorityGuard::set(p)?),
        None => None,
    };
    // rsync's -R: every target lies below the destination directory, the one anchor.
    let anchors = match options.layout {
        Layout::RsyncRelative => vec![(options.dest.clone(), options.dest.clone())],
        _ => targets.clone(),
    };
    let ctx = Ctx::new(options, observer, dest::Dest::new(&anchors, follow_roots));
    if options.io_priority.is_some() {
        for n in limits::ignored_priority(&options.sources, &options.dest) {
            ctx.tally.notice(n);
        }
    }
    let temps = Temps::new(umask, options);
    let workers = Workers::new(&ctx, &temps);
    let fin = Finish::new(&ctx, &temps);
    if !options.no_target_directory && options.layout == Layout::Cp {
        for (src, dst) in &targets {
            if let Some(n) = plan::nesting_notice(src, dst, &options.dest) {
                ctx.tally.notice(n);
            }
        }
    }
    // --bwlimit auto: the devices' read latency before the copy, then a thread that sets the
    // rate while it runs.
    let backoff = start_backoff(options, &ctx);
    let copied = std::sync::atomic::AtomicBool::new(false);
    let (planned, mut m, auto_rate) = std::thread::scope(|s| {
        let auto = match (&backoff, &ctx.bandwidth) {
            (Some(b), Some(bw)) => Some(s.spawn(|| b.run(bw, &copied))),
            (None, Some(bw)) if options.bwlimit_auto => {
                bw.set_rate(options.bwlimit.map_or(f64::INFINITY, |c| c as f64));
                None
            }
            _ => None,
        };
        let (planned, mut m) = run_parallel(&ctx, &temps, &workers, &fin, &targets);
        retry_no_space(&workers, &fin, &mut m);
        copied.store(true, Ordering::Relaxed);
        let auto_rate = auto.and_then(|h| h.join().ok());
        (planned, m, auto_rate)
    });
    for (name, e) in temps.finish_delayed() {
        let path = std::path::PathBuf::from(name);
        ctx.fail(crate::error::FileError::io(&path, Op::Rename, &e));
    }
    fin.flush();
    let hardlinks = finish::link_hard(&ctx, &planned.deferred_links);
    finish::finish_dirs(&ctx, &planned.dirs);
    if options.fsync && !options.dry_run {
        finish::fsync_parents(&targets);
    }
    let interrupted = ctx.stopped();
    // The copy's own time: verification and the residue measure are not in it (nor in the rate).
    let elapsed = ctx.tally.elapsed_s();
    let (verified_files, verify_mismatches) = if options.verify && !interrupted {
        finish::verify(&ctx, &m.digests)
    } else {
        (0, 0)
    };
    // Measured per written file after its write-back and drop (see finish::settle): what
    // this copy wrote, not files of the destination it left alone.
    m.residue.dest_cached_bytes =
        (fin.residue_pages() * sys::page_size()).min(m.residue.dest_bytes);
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
    let auto_choices = workers.choices();
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
        deletes_skipped: c.deletes_skipped.load(Ordering::Relaxed),
        linked: c.linked.load(Ordering::Relaxed),
        total_size: c.listed_bytes.load(Ordering::Relaxed),
        ignored: c.ignored.load(Ordering::Relaxed),
        bytes: m.bytes + c.dry_bytes.load(Ordering::Relaxed),
        data_bytes: m.data_bytes,
        rate_bytes_per_s: verb::rate(m.data_bytes, elapsed),
        strategies: m.strategies,
        residue: m.residue,
        verified_files,
        verify_mismatches,
        dry_run: options.dry_run,
        auto_rate,
        auto_choices,
        outcome,
    })
}

/// `--bwlimit auto`: the controller, after its probe of the devices under the copy (None
/// without the option, or with nothing to protect: said in a notice).
fn start_backoff(options: &CopyOptions, ctx: &Ctx<'_>) -> Option<backoff::Backoff> {
    if !options.bwlimit_auto {
        return None;
    }
    let paths: Vec<&std::path::Path> = options
        .sources
        .iter()
        .map(|p| p.as_path())
        .chain([options.dest.as_path()])
        .collect();
    backoff::Backoff::start(&paths, options.bwlimit, &|n| ctx.tally.notice(n))
}

/// The parallel pass: the planner on this thread, the workers beside it. Returns what the
/// planner leaves for the end and the workers' figures.
fn run_parallel(
    ctx: &Ctx<'_>,
    temps: &Temps,
    workers: &Workers<'_>,
    fin: &Finish<'_>,
    targets: &[(PathBuf, PathBuf)],
) -> (Planned, Local) {
    let (tx, rx) = crossbeam_channel::bounded::<Vec<FileTask>>(1024);
    let merged = Mutex::new(Local::default());
    let planned = std::thread::scope(|s| {
        for _ in 0..ctx.fds.workers {
            let rx = rx.clone();
            let merged = &merged;
            s.spawn(move || work(ctx, workers, fin, rx, merged));
        }
        drop(rx);
        let planned = plan::plan(ctx, temps, targets, tx);
        ctx.observer.planned_all();
        planned
    });
    (planned, merged.into_inner().unwrap())
}

/// One worker thread: copies the units it receives until the planner is done (each written
/// file is finished at once), then settles its files and adds its figures to `merged`.
fn work(
    ctx: &Ctx<'_>,
    workers: &Workers<'_>,
    fin: &Finish<'_>,
    rx: Receiver<Vec<FileTask>>,
    merged: &Mutex<Local>,
) {
    let mut local = Local::default();
    let mut thread = worker::Thread::default();
    for mut unit in rx.iter() {
        // --checksum: files whose destination has the same content are left as they are.
        unit.retain(|t| !(t.compare && finish::unchanged(ctx, t)));
        workers.copy_unit(&mut thread, unit, &mut |w| fin.file(&mut local, w));
    }
    fin.settle(&mut local);
    finish::merge(&mut merged.lock().unwrap(), local);
}

/// Files that met ENOSPC beside others: once more, one at a time (see
/// [`Workers::retry_no_space`]).
fn retry_no_space(workers: &Workers<'_>, fin: &Finish<'_>, m: &mut Local) {
    let mut local = Local::default();
    workers.retry_no_space(&mut |w| fin.file(&mut local, w));
    fin.settle(&mut local);
    finish::merge(m, local);
}
