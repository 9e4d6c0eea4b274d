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
//!
//! Here: [`run`]. The options in `options`, the reports in `report`; the machinery `run` and
//! [`Dropping`] share (follower, footprint, drop-behind thread, final drop) in `session`;
//! [`Dropping`] in `dropping`. Below: the footprint (`footprint`) of pages the events added,
//! pages pending per file in `pending`, the drop-behind thread and its `Dropper` in
//! `drop_behind`, the thread's CPU priority in `priority`.

mod drop_behind;
mod dropping;
mod footprint;
mod options;
mod pending;
mod priority;
mod report;
mod session;

pub use dropping::{Dropping, DroppingReport};
pub use options::{DroppingOptions, RunOptions, DEFAULT_MAX_CACHE};
pub use report::{DropFigures, RunReport};

use crate::sys;
use crate::trace::{self, command};
use crate::verb::Observer;
use session::{Session, Whom};
use std::sync::Arc;

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
    let launcher = command::Launcher::new(&opts.command, witness, false);
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
