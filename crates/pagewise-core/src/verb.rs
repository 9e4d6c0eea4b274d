//! The one shape every verb has:
//!
//! ```text
//! fn verb(options: &VerbOptions, observer: &dyn Observer) -> Result<VerbReport, Error>
//! ```
//!
//! - `VerbOptions` is a plain struct whose defaults are documented on its fields; its
//!   `validate()` is the one place the verb's options are checked, and the verb calls it first
//!   (a binding may call it early to fail before any work).
//! - [`Observer`] sees progress, each file's result as it is measured, and is asked whether to
//!   stop. Verbs call it from their worker threads, hence `&dyn Observer` with `Sync` and
//!   `&self` methods rather than `&mut`: an observer that needs state keeps it behind atomics or
//!   a mutex.
//! - Every report embeds an [`Outcome`]: the per-file errors (counted, the first
//!   [`ErrorLog::MAX_KEPT`] kept), notices, elapsed time and whether the run was cancelled. All
//!   quantities are bytes.

use crate::error::{ErrorLog, FileError};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One file's result, handed to [`Observer::file`] as soon as it is known (from any worker
/// thread). The CLI's `--json-lines` writes each as one line.
#[derive(Debug)]
#[non_exhaustive]
pub enum FileResult {
    /// A file `stat` measured.
    Stat(crate::stat::FileStat),
    /// A file `evict` advised out, measured before and after.
    Evict(crate::evict::EvictFile),
    /// One entry `copy` created, updated, left, deleted or failed on
    /// (with `CopyOptions::items`).
    Copy(crate::copy::CopyItem),
    /// A file's cached pages per cgroup (`stat --by-cgroup`).
    Charge(crate::stat::FileCharge),
}

/// What a caller sees while a verb runs. Every method has a default that does nothing, so an
/// observer implements only what it needs; `&()` observes nothing.
pub trait Observer: Sync {
    /// `files` more files and `bytes` more bytes were done (called often: keep it cheap).
    fn progress(&self, files: u64, bytes: u64) {
        let _ = (files, bytes);
    }
    /// `files` and `bytes` more were found to do (totals may grow while a planner still walks).
    fn planned(&self, files: u64, bytes: u64) {
        let _ = (files, bytes);
    }
    /// Everything to do has been found: the totals of [`Observer::planned`] are final.
    fn planned_all(&self) {}
    /// One file's result (only verbs that report per file, and only when their options ask
    /// for per-file results, e.g. `StatOptions::files`).
    fn file(&self, result: FileResult) {
        let _ = result;
    }
    /// Polled between files and chunks: `true` stops the verb early; its report then has
    /// `interrupted` set, and what was finished is complete (a copy leaves no half file).
    fn cancelled(&self) -> bool {
        false
    }
}

/// Observes nothing and never cancels.
impl Observer for () {}

/// Progress counters another thread can poll while a verb runs (the CLI's progress line).
#[derive(Debug, Default)]
pub struct Progress {
    /// Files done.
    pub files: AtomicU64,
    /// Bytes done.
    pub bytes: AtomicU64,
    /// Files to do, as far as known (0 when unknown).
    pub total_files: AtomicU64,
    /// Bytes to do, as far as known (0 when unknown).
    pub total_bytes: AtomicU64,
    /// The totals are final (the verb found everything it will do).
    pub totals_final: std::sync::atomic::AtomicBool,
}

impl Progress {
    /// Adds to the work done.
    pub fn add(&self, files: u64, bytes: u64) {
        self.files.fetch_add(files, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl Observer for Progress {
    fn progress(&self, files: u64, bytes: u64) {
        self.add(files, bytes);
    }
    fn planned(&self, files: u64, bytes: u64) {
        self.total_files.fetch_add(files, Ordering::Relaxed);
        self.total_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    fn planned_all(&self) {
        self.totals_final.store(true, Ordering::Relaxed);
    }
}

/// An [`Observer`] assembled from parts: progress counters, a per-file callback and a
/// cancellation flag, each optional. What the CLI and the bindings use.
pub struct Watch<'a, F = fn(FileResult)> {
    /// Counters to add progress to.
    pub progress: Option<&'a Progress>,
    /// Called with each file's result.
    pub on_file: Option<F>,
    /// When set (e.g. by a SIGINT handler), the verb stops early.
    pub cancel: Option<&'a AtomicBool>,
}

impl Default for Watch<'_> {
    fn default() -> Self {
        Watch {
            progress: None,
            on_file: None,
            cancel: None,
        }
    }
}

impl<F: Fn(FileResult) + Sync> Observer for Watch<'_, F> {
    fn progress(&self, files: u64, bytes: u64) {
        if let Some(p) = self.progress {
            p.progress(files, bytes);
        }
    }
    fn planned(&self, files: u64, bytes: u64) {
        if let Some(p) = self.progress {
            p.planned(files, bytes);
        }
    }
    fn planned_all(&self) {
        if let Some(p) = self.progress {
            p.planned_all();
        }
    }
    fn file(&self, result: FileResult) {
        if let Some(f) = &self.on_file {
            f(result);
        }
    }
    fn cancelled(&self) -> bool {
        self.cancel.is_some_and(|c| c.load(Ordering::Relaxed))
    }
}

/// What every report carries besides its own figures.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Outcome {
    /// Per-file failures, sorted by path (the first [`ErrorLog::MAX_KEPT`]).
    pub errors: Vec<FileError>,
    /// All per-file failures, kept or not. Non-zero makes the CLI exit 2.
    pub error_count: u64,
    /// One-line notes: fallbacks taken, limits met, figures that cannot be known and why.
    pub notices: Vec<String>,
    /// Wall time of the verb, in seconds.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub elapsed_s: f64,
    /// The observer cancelled the run (or a signal stopped it); finished work is complete.
    pub interrupted: bool,
}

impl Outcome {
    /// True when every file succeeded and nothing stopped the run early.
    pub fn is_clean(&self) -> bool {
        self.error_count == 0 && !self.interrupted
    }
}

/// Collects an [`Outcome`] while a verb runs: errors and notices from many threads, the start
/// time, and cancellation as the observer reports it.
#[derive(Debug)]
pub struct Tally {
    /// Per-file errors from all threads.
    pub errors: ErrorLog,
    notices: Mutex<Vec<String>>,
    start: Instant,
    interrupted: AtomicBool,
}

impl Default for Tally {
    fn default() -> Self {
        Tally::new()
    }
}

impl Tally {
    /// Starts the clock.
    pub fn new() -> Self {
        Tally {
            errors: ErrorLog::default(),
            notices: Mutex::new(Vec::new()),
            start: Instant::now(),
            interrupted: AtomicBool::new(false),
        }
    }
    /// Records one file's failure (counted; the run goes on).
    pub fn error(&self, e: FileError) {
        self.errors.push(e);
    }
    /// Adds a notice once (the same text from many threads is kept once).
    pub fn notice(&self, s: impl Into<String>) {
        let s = s.into();
        let mut n = self.notices.lock().unwrap();
        if !n.contains(&s) {
            n.push(s);
        }
    }
    /// Asks the observer whether to stop, remembering a yes.
    pub fn stop_requested(&self, observer: &dyn Observer) -> bool {
        if self.interrupted.load(Ordering::Relaxed) {
            return true;
        }
        if observer.cancelled() {
            self.interrupted.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }
    /// Marks the run as stopped early (a signal seen by the verb itself).
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::Relaxed);
    }
    /// True once a stop was requested.
    pub fn is_interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Relaxed)
    }
    /// Seconds since the verb started.
    pub fn elapsed_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
    /// The outcome, with `extra` notices (e.g. a measuring method's fallbacks) after the
    /// verb's own.
    pub fn finish(self, extra: Vec<String>) -> Outcome {
        let elapsed_s = self.elapsed_s();
        let mut notices = self.notices.into_inner().unwrap();
        for n in extra {
            if !notices.contains(&n) {
                notices.push(n);
            }
        }
        Outcome {
            error_count: self.errors.count(),
            errors: self.errors.take(),
            notices,
            elapsed_s,
            interrupted: self.interrupted.into_inner(),
        }
    }
}

/// `bytes / seconds`, 0 when no time passed.
pub fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Op;
    use std::path::Path;

    #[test]
    fn tally_counts_errors_and_keeps_notices_once() {
        let t = Tally::new();
        t.error(FileError::other(Path::new("/b"), Op::Open, "x"));
        t.error(FileError::other(Path::new("/a"), Op::Open, "y"));
        t.notice("same");
        t.notice("same");
        let o = t.finish(vec!["same".into(), "other".into()]);
        assert_eq!(o.error_count, 2);
        assert_eq!(o.errors[0].path, Path::new("/a"));
        assert_eq!(o.notices, vec!["same".to_string(), "other".to_string()]);
        assert!(!o.interrupted);
        assert!(!o.is_clean());
    }

    #[test]
    fn watch_cancels_from_its_flag() {
        let flag = AtomicBool::new(false);
        let p = Progress::default();
        let w: Watch = Watch {
            progress: Some(&p),
            on_file: None,
            cancel: Some(&flag),
        };
        let t = Tally::new();
        w.progress(2, 10);
        assert!(!t.stop_requested(&w));
        flag.store(true, Ordering::Relaxed);
        assert!(t.stop_requested(&w));
        assert!(t.finish(Vec::new()).interrupted);
        assert_eq!(p.bytes.load(Ordering::Relaxed), 10);
    }
}
