//! `run`: run any command, and drop again exactly the pages it brought into the page cache.
//!
//! The same tracepoint as `record` (one tracefs instance following the command's process tree)
//! says which pages the command added. Those pages, and only those, are dropped: whenever the
//! command's outstanding footprint exceeds `dropping.max_cache` (drop-behind), and all of them when it
//! exits. Pages that were cached before the command touched them never produce an event, so
//! they stay. Written pages are written back (one batched wait) before they are dropped, unless
//! `keep_written`. Works for static binaries and mmap readers alike: nothing is injected into
//! the command.
//!
//! ```text
//! run(&RunOptions, &dyn Observer) -> Result<RunReport, Error>
//! ```
//!
//! [`Dropping`] does the same for the calling process itself, between its `start` and
//! `finish` (the Python binding's `with pagewise.dropping():`).

mod drop_behind;
mod dropping;
mod footprint;
mod priority;

pub use dropping::{Dropping, DroppingOptions, DroppingReport};

use crate::assist::{AssistReport, Prefetch};
use crate::residency::MeasuredBy;
use crate::sys;
use crate::trace::{self, command, FollowOptions, Follower};
use crate::verb::Tally;
use crate::verb::{Observer, Outcome};
use drop_behind::{Counts, DropBehind, Dropper};
use footprint::Footprint;
use priority::Priority;
use serde::Serialize;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

/// `run`'s drop-behind limit: [`DroppingOptions::max_cache`] of [`RunOptions::default`] (the
/// CLI's `--max-cache` default), 64 MiB.
pub const DEFAULT_MAX_CACHE: u64 = 64 << 20;

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The command and its arguments (`command[0]` is the program, looked up in `PATH`).
    /// Default: empty, which [`RunOptions::validate`] refuses.
    pub command: Vec<OsString>,
    /// How the command's pages are followed, measured and dropped: `max_cache` (default
    /// here: `Some(`[`DEFAULT_MAX_CACHE`]`)`), `keep_written`, `follow`, `method`.
    pub dropping: DroppingOptions,
    /// Also prefetch for the command (`run --assist`); its prefetches are dropped like its own
    /// pages, and its events come through `dropping.follow`. Default: None.
    pub assist: Option<Prefetch>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            command: Vec::new(),
            dropping: DroppingOptions {
                max_cache: Some(DEFAULT_MAX_CACHE),
                ..DroppingOptions::default()
            },
            assist: None,
        }
    }
}

impl RunOptions {
    /// Checks the options: there must be a command.
    pub fn validate(&self) -> Result<(), crate::Error> {
        if self.command.is_empty() {
            return Err(command::no_command());
        }
        Ok(())
    }
}

/// Passes over the ranges that stayed cached in the final drop, 2 ms apart.
const FINAL_RETRIES: usize = 25;

/// What `run` did to the page cache.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunReport {
    /// The command's exit code (128 + signal when it was killed).
    pub exit_code: i32,
    /// Bytes the command brought into the cache (the kernel's events for its processes).
    pub added_bytes: u64,
    /// Bytes `--assist` asked the kernel to prefetch for it (windows; dropped again too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetched_bytes: Option<u64>,
    /// What the drops did: dropped, left and how it was measured.
    #[serde(flatten)]
    pub figures: DropFigures,
    /// What `--assist` did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assist: Option<AssistReport>,
    /// Errors, notices (fallbacks taken, processes left running); `elapsed_s` is the
    /// command's run time; `interrupted` when the observer was cancelled by the time the
    /// command ended (the CLI: a signal was received, and forwarded to the command).
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What the drops did to the followed pages, in bytes: the figures [`RunReport`] and
/// [`DroppingReport`] share (flattened into both, so their JSON keys are these). "The pages"
/// are the command's (`run`) or those brought in between `start` and `finish` ([`Dropping`]).
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DropFigures {
    /// Bytes dropped again, as measured before and after each drop (`method`).
    pub dropped_bytes: u64,
    /// Of the pages, bytes still cached after the final drop (measured).
    pub left_bytes: u64,
    /// Of `left_bytes`, dirty or under writeback (None: unknown, see `unknown_reason`).
    pub left_dirty_bytes: Option<u64>,
    /// Of `left_bytes`, clean: mapped by a process, or busy (None: unknown).
    pub left_mapped_or_busy_bytes: Option<u64>,
    /// How the pages were measured: cachestat(2), or mmap+mincore(2) (no cachestat before
    /// Linux 6.5, [`crate::residency::Method::Mincore`] / `--method mincore`, or cachestat
    /// refused a file).
    pub method: MeasuredBy,
    /// Why `left_dirty_bytes` and `left_mapped_or_busy_bytes` are null (only when they are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<&'static str>,
    /// Bytes of written files left alone (`keep_written`, the CLI's --keep-written).
    pub kept_written_bytes: u64,
    /// Drop-behind passes before the final one (`max_cache`): while the command ran, or
    /// between `start` and `finish`.
    pub drops_while_running: u64,
    /// Files pages were added to (by the command or `--assist`, or since `start`).
    pub files: u64,
    /// Files that could not be opened to drop their pages (gone, no handle support, or
    /// several files under one tracepoint key).
    pub files_unreachable: u64,
    /// Bytes the command added to those files: neither dropped nor measured (they may all be
    /// cached still). Non-zero means the run's promise was not kept (the CLI exits 2).
    pub unreachable_bytes: u64,
    /// Why one of those files could not be opened (only when some could not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreachable_reason: Option<String>,
    /// Bytes the command brought into file systems' own pages (metadata read through the
    /// block device, btrfs's btree inode): not file data, which no advice reaches; reported,
    /// not dropped.
    pub metadata_bytes: u64,
    /// Events the kernel lost (ring buffer overrun): their pages may stay cached.
    pub lost_events: u64,
}

impl DropFigures {
    /// The figures of a finished session: its drop counts, files followed and events lost.
    fn new(c: &Counts, files: u64, lost_events: u64) -> DropFigures {
        DropFigures {
            dropped_bytes: c.dropped_bytes,
            left_bytes: c.left_bytes,
            left_dirty_bytes: c.left_dirty_bytes,
            left_mapped_or_busy_bytes: c.left_mapped_or_busy_bytes,
            method: c.method,
            unknown_reason: c.unknown_reason(),
            kept_written_bytes: c.kept_written_bytes,
            drops_while_running: c.drops_while_running,
            files,
            files_unreachable: c.files_unreachable,
            unreachable_bytes: c.unreachable_bytes,
            unreachable_reason: c.unreachable_reason.clone(),
            metadata_bytes: c.metadata_bytes,
            lost_events,
        }
    }
}

/// What to do when tracing is impossible: a cgroup limit also keeps a command's cache small.
const NO_TRACING_HINT: &str = ". Without them, a cgroup memory limit also keeps a command's \
     cache small, e.g.: systemd-run --scope -p MemoryHigh=256M -- CMD";

/// Runs the command and drops the pages it brings into the page cache. stdin/stdout/stderr
/// are inherited; SIGINT, SIGTERM, SIGHUP and SIGQUIT received by pagewise are forwarded to
/// the command, and its pages are dropped when it ends.
///
/// The command decides when the run ends: the observer is asked whether it was cancelled only
/// once it has (to set `interrupted`); to stop a run, signal the command.
///
/// ```
/// use pagewise_core::run::{run, RunOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let f = dir.path().join("f");
/// std::fs::write(&f, vec![1u8; 4 << 20]).unwrap();
/// pagewise_core::evict::evict(&pagewise_core::evict::EvictOptions::new(vec![f.clone()]), &()).unwrap();
/// let opts = RunOptions {
///     command: vec!["cat".into(), f.into()],
///     ..RunOptions::default()
/// };
/// let report = run(&opts, &()).unwrap(); // needs the tracepoints: root here
/// assert_eq!(report.exit_code, 0);
/// // What cat brought into the cache was dropped again.
/// assert!(report.figures.left_bytes < report.added_bytes.max(1));
/// ```
pub fn run(opts: &RunOptions, observer: &dyn Observer) -> Result<RunReport, crate::Error> {
    opts.validate()?;
    let seen = Arc::new(trace::Witnessed::default());
    let witness = opts.dropping.follow.witness.then(|| seen.clone());
    let launcher = command::Launcher::new(&opts.command, witness);
    let whom = Whom::Command(launcher.tid());
    let session = Session::start(
        &opts.dropping,
        opts.assist.as_ref(),
        whom,
        Some(seen.clone()),
    )?;
    // SIGINT/SIGTERM/SIGHUP/SIGQUIT: pagewise survives them to drop what the command
    // brought in; those sent to pagewise alone are forwarded to the command as they are (the
    // terminal's reach it anyway), so it exits as it would have (130 for Ctrl-C).
    sys::supervise_signals();
    sys::become_subreaper();
    // Only the launcher thread is followed, not pagewise's own (reader, drop-behind).
    let ran = session
        .follower
        .arm()
        .map_err(crate::Error::Tracefs)
        .and_then(|()| launcher.run())
        .map(|r| (r.status, r.elapsed_s()));
    let orphans = trace::orphans_left();
    let handed = seen.hand_over_if(orphans);
    let ended = session.finish();
    let (status, elapsed) = ran?;
    if let Some(n) = trace::orphans_notice(
        orphans,
        "their pages are dropped only up to then; pagewise does not follow",
    ) {
        ended.tally.notice(n);
    }
    if let Some(n) = handed {
        ended.tally.notice(n);
    }
    ended.tally.stop_requested(observer);
    let assist = ended.assist.map(|mut ar| {
        ar.outcome.elapsed_s = elapsed;
        ar.lost_events = ended.lost;
        ar
    });
    let mut outcome = ended.tally.finish(Vec::new());
    outcome.elapsed_s = elapsed;
    Ok(RunReport {
        exit_code: command::exit_code(status),
        added_bytes: ended.added_bytes,
        prefetched_bytes: assist.as_ref().map(|a| a.prefetched_bytes),
        figures: DropFigures::new(&ended.counts, ended.files, ended.lost),
        assist,
        outcome,
    })
}

/// Whose page-cache additions a [`Session`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whom {
    /// A command started after [`Follower::arm`] by the launcher thread with this id, and
    /// what it starts; pagewise's own threads are not (`run`).
    Command(i32),
    /// The calling thread and the threads and processes it starts ([`Dropping`]).
    Caller,
}

/// The machinery of `run` and [`Dropping`]: the follower filling the footprint, and the
/// drop-behind thread emptying it.
struct Session {
    footprint: Arc<Footprint>,
    follower: Follower,
    dropper: Arc<Dropper>,
    behind: DropBehind,
}

/// What a [`Session`] did, once it is finished.
struct Ended {
    counts: Counts,
    added_bytes: u64,
    files: u64,
    lost: u64,
    assist: Option<AssistReport>,
    /// Errors and notices so far; the caller adds its own and finishes it.
    tally: Tally,
}

impl Session {
    /// Starts following `whom` into a footprint (the assistant's prefetches too, with
    /// `assist`), and the drop-behind thread.
    fn start(
        opts: &DroppingOptions,
        assist: Option<&Prefetch>,
        whom: Whom,
        seen: Option<Arc<trace::Witnessed>>,
    ) -> Result<Session, crate::Error> {
        sys::raise_nofile_limit();
        let page = sys::page_size();
        let skip = matches!(whom, Whom::Command(_)).then(std::process::id);
        let footprint = Arc::new(Footprint::new(
            assist,
            page,
            skip,
            seen.clone().unwrap_or_default(),
        ));
        let dropper = Arc::new(Dropper::new(opts.keep_written, opts.method, seen));
        // No limit: more pages than any machine has.
        let limit_pages = (opts.max_cache.unwrap_or(u64::MAX) / page).max(1);
        let priority = Arc::new(Priority::new(limit_pages));
        let sink = footprint::Sink {
            footprint: footprint.clone(),
            priority: priority.clone(),
            dropper: dropper.clone(),
        };
        let follower = follow(opts.follow, assist.is_some(), whom, sink)?;
        if let Some(n) = &follower.notice {
            dropper.tally.notice(n.clone());
        }
        let behind = DropBehind::start(footprint.clone(), dropper.clone(), priority, limit_pages);
        Ok(Session {
            footprint,
            follower,
            dropper,
            behind,
        })
    }

    /// Stops following (every event until now is handed to the footprint), stops the
    /// drop-behind thread and drops the rest.
    fn finish(self) -> Ended {
        let source = self.follower.source;
        let lost = self.follower.stop().unwrap_or(0);
        self.footprint.requeue(self.behind.stop());
        self.dropper
            .ended
            .store(true, std::sync::atomic::Ordering::Relaxed);
        final_drop(&self.footprint, &self.dropper);
        let assist = self.footprint.assistant.as_ref().map(|a| {
            let mut ar = a.lock().unwrap().report();
            ar.lost_events = lost;
            ar.source = Some(source);
            ar
        });
        let dropper = Arc::into_inner(self.dropper).expect("the drop-behind thread has ended");
        let files = self.footprint.files.lock().unwrap().len() as u64;
        let added = self
            .footprint
            .added
            .load(std::sync::atomic::Ordering::Relaxed);
        Ended {
            counts: dropper.counts.into_inner().unwrap(),
            added_bytes: added * sys::page_size(),
            files,
            lost,
            assist,
            tally: dropper.tally,
        }
    }
}

/// Starts following `whom`'s events into `footprint`, the assistant's too with `--assist`.
fn follow(
    options: FollowOptions,
    assist: bool,
    whom: Whom,
    on_event: footprint::Sink,
) -> Result<Follower, crate::Error> {
    let events: &[&str] = if assist {
        &crate::assist::EVENTS
    } else {
        &[trace::ADD_EVENT]
    };
    // Drop-behind needs the events soon: a command reading at 3 GB/s adds 30 MB in 10 ms.
    // With --assist, prefetches need them at once. Perf events where the kernel allows them:
    // they follow the command from its fork without a PID list, whose changes cost an RCU
    // grace period each (~40 ms per run back to back).
    let every = (!assist).then_some(Duration::from_millis(2));
    let started = match whom {
        Whom::Command(tid) => Follower::start(events, options, every, tid, on_event),
        Whom::Caller => Follower::start_self(events, options, every, on_event),
    };
    started.map_err(|e| crate::Error::TracingUnavailable {
        reason: e.0,
        needed_by: Some(match whom {
            Whom::Command(_) => "run",
            Whom::Caller => "dropping",
        }),
        hint: NO_TRACING_HINT,
    })
}

/// The final pass: what is pending, including pages that were still under read I/O during
/// a drop-behind pass (they were queued again) and prefetch windows still in their grace
/// period. Ranges where pages stayed (read I/O still in flight) are retried a few times; what
/// stays then is measured and reported. Every page the command added produced an event and
/// was dropped in some pass, measured before and after, so only the ranges that stayed need
/// measuring again — not the whole set (a second open_by_handle_at + measurement per file:
/// ~0.5 s on a 100k-file tree).
fn final_drop(footprint: &Footprint, dropper: &Dropper) {
    // The command has exited (or unmapped what it mapped): nothing to page out.
    let none = footprint::Mappers::new();
    let mut stayed = dropper.drop_pending(footprint.take_all(), &none);
    for _ in 0..FINAL_RETRIES {
        if stayed.pages == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
        stayed = dropper.drop_pending(stayed, &none);
    }
    dropper.measure_left(&stayed.files);
}
