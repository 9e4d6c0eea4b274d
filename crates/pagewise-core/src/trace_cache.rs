//! `evict --trace` and `load --trace`: drop or load exactly the pages a trace recorded (a
//! selectively cold, or warm, cache), measured before and after.
//!
//! ```text
//! evict_trace(&TraceEvictOptions, &dyn Observer) -> Result<TraceCacheReport, Error>
//! load_trace(&TraceLoadOptions, &dyn Observer) -> Result<TraceCacheReport, Error>
//! ```

use crate::error::{FileError, Op};
use crate::replay::{check_io, ends, file_ranges, replay_with, Order, Settings};
use crate::residency::{Meter, Method, UNKNOWN_NOT_WRITABLE};
use crate::sys::{self, Advice};
use crate::trace::{OpenFiles, SkippedFile, Trace};
use crate::verb::{Observer, Outcome, Tally};
use serde::Serialize;
use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::Path;

/// Options of [`evict_trace`].
#[derive(Debug, Clone, Default)]
pub struct TraceEvictOptions {
    /// The recording whose pages are dropped. Default: an empty trace (nothing to drop).
    pub trace: Trace,
    /// Only measure what is cached of the traced pages; drop nothing. Default: false.
    pub dry_run: bool,
}

impl TraceEvictOptions {
    /// Checks the options: the trace must be consistent (see [`Trace::check`]).
    pub fn validate(&self) -> Result<(), crate::Error> {
        Ok(self.trace.check()?)
    }
}

/// Options of [`load_trace`].
#[derive(Debug, Clone)]
pub struct TraceLoadOptions {
    /// The recording whose pages are loaded. Default: an empty trace (nothing to load).
    pub trace: Trace,
    /// Reads in flight (the pages are read in disk order). Default: 32.
    pub depth: usize,
}

impl Default for TraceLoadOptions {
    fn default() -> Self {
        TraceLoadOptions {
            trace: Trace::default(),
            depth: 32,
        }
    }
}

impl TraceLoadOptions {
    /// Checks the options: the trace must be consistent (see [`Trace::check`]), the depth at
    /// most [`crate::replay::MAX_DEPTH`].
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.trace.check()?;
        check_io(LOAD_REQUEST, self.depth)
    }
}

/// Longest request of `load --trace`: 1 MiB.
const LOAD_REQUEST: u64 = 1 << 20;

/// Cache state of the traced pages before and after a trace-driven evict or load.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TraceCacheReport {
    /// Measured only, nothing changed (`evict --trace --dry-run`).
    pub dry_run: bool,
    /// Traced files opened.
    pub files: u64,
    /// Traced files skipped: gone, or never reachable by path or handle (see `skipped`).
    pub files_missing: u64,
    /// The first skipped files, with the reason.
    pub skipped: Vec<SkippedFile>,
    /// Distinct traced ranges (contiguous pages merged) within the files opened, up to their
    /// size now: 0 when there was nothing to act on (no pages traced, every file skipped, or
    /// every traced page past its file's end).
    pub ranges: u64,
    /// Bytes of the traced ranges (within the files' sizes now).
    pub bytes: u64,
    /// Of the files whose residency is known; see `unknown_files`.
    pub cached_bytes_before: u64,
    /// Of the files whose residency is known, after.
    pub cached_bytes_after: u64,
    /// Files whose residency cannot be known (cachestat refused: not yours, not writable):
    /// they were acted on all the same, but what they held is left out of the figures.
    pub unknown_files: u64,
    /// Why `unknown_files` are unknown (only when there are some).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<&'static str>,
    /// Per-file errors, elapsed time (measuring included).
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What the kernel shows of the traced ranges.
#[derive(Debug, Clone, Copy, Default)]
struct Cached {
    /// Bytes within the files' sizes.
    bytes: u64,
    /// Cached bytes of the files whose residency is known.
    cached: u64,
    /// Files whose residency is not.
    unknown: u64,
}

/// Measures the traced ranges (mincore's word only where it tells this process the truth: for a
/// file cachestat refused it would say "all cached").
fn traced_cached(files: &OpenFiles, ranges: &[(u32, u64, u64)]) -> Cached {
    let meter = Meter::new(Method::Auto);
    let mut c = Cached::default();
    let mut unknown = HashSet::new();
    for &(f, off, len) in ranges {
        let Some(fd) = files.fds.get(f as usize).and_then(Option::as_ref) else {
            continue;
        };
        let Ok(st) = sys::fstat(fd.as_fd()) else {
            continue;
        };
        let end = (off + len).min(st.size);
        let truthful = || sys::mincore_is_truthful_fd(fd.as_fd(), &st);
        let Ok(r) = meter.measure_fd(Path::new(""), fd.as_fd(), off.min(end), end, truthful) else {
            continue;
        };
        c.bytes += r.bytes;
        if r.is_unknown() {
            unknown.insert(f);
        } else {
            c.cached += r.cached_or_zero();
        }
    }
    c.unknown = unknown.len() as u64;
    c
}

/// Writes back and drops the traced ranges of `files` (errors to `tally`, when given); the
/// observer is asked between ranges whether to stop.
fn drop_ranges(
    trace: &Trace,
    files: &OpenFiles,
    ranges: &[(u32, u64, u64)],
    tally: &Tally,
    observer: &dyn Observer,
) {
    for &(f, off, len) in ranges {
        if tally.stop_requested(observer) {
            return;
        }
        // A length of 0 would mean "to the end of the file" to both calls: never asked.
        let Some(fd) = files.fds.get(f as usize).and_then(Option::as_ref) else {
            continue;
        };
        if len == 0 {
            continue;
        }
        let path = trace.files[f as usize].name();
        let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        if let Err(e) = sys::sync_file_range(fd.as_fd(), off, len, flags) {
            tally.error(FileError::io(&path, Op::SyncFileRange, &e));
        }
        if let Err(e) = sys::fadvise(fd.as_fd(), off, len, Advice::DontNeed) {
            tally.error(FileError::io(&path, Op::FadviseDontneed, &e));
        }
        observer.progress(0, len);
    }
}

/// Drops the traced pages of `files` (opened from `trace`), unmeasured and errors ignored:
/// the cold start before each run of `replay --compare`.
pub(crate) fn drop_traced(trace: &Trace, files: &OpenFiles) {
    let Ok(ranges) = ends(trace, files).and_then(|e| file_ranges(trace, 0, &e)) else {
        return;
    };
    drop_ranges(trace, files, &ranges, &Tally::new(), &());
}

/// Drops exactly the traced pages (dirty ones written back first); other pages stay. With
/// `dry_run`, only measures what is cached of them. The observer sees each range dropped, and
/// is asked between ranges whether to stop.
///
/// ```
/// use pagewise_core::trace_cache::{evict_trace, TraceEvictOptions};
/// # let trace = pagewise_core::trace::Trace::default();
/// // A selectively cold start: only the pages the program read are dropped.
/// let report = evict_trace(&TraceEvictOptions { trace, dry_run: false }, &()).unwrap();
/// assert_eq!(report.cached_bytes_after, 0);
/// ```
pub fn evict_trace(
    opts: &TraceEvictOptions,
    observer: &dyn Observer,
) -> Result<TraceCacheReport, crate::Error> {
    opts.validate()?;
    let trace = &opts.trace;
    // The clock starts before the first measure, which the report's time includes.
    let tally = Tally::new();
    let (files, ranges, before) = open_traced(trace)?;
    for e in &files.errors {
        tally.error(e.clone());
    }
    if !opts.dry_run {
        drop_ranges(trace, &files, &ranges, &tally, observer);
    }
    let mut r = cache_report(&files, &ranges, before, tally);
    r.dry_run = opts.dry_run;
    Ok(r)
}

/// Loads exactly the traced pages, in disk order with a deep queue (a preloader). The observer
/// sees the bytes read, and is asked between reads whether to stop.
///
/// ```
/// use pagewise_core::trace_cache::{load_trace, TraceLoadOptions};
/// # let trace = pagewise_core::trace::Trace::default();
/// // The preloader role: bring in what the program will read, before it starts.
/// let report = load_trace(&TraceLoadOptions { trace, ..Default::default() }, &()).unwrap();
/// assert_eq!(report.cached_bytes_after, report.bytes);
/// ```
pub fn load_trace(
    opts: &TraceLoadOptions,
    observer: &dyn Observer,
) -> Result<TraceCacheReport, crate::Error> {
    opts.validate()?;
    let trace = &opts.trace;
    // The clock starts before the first measure, which the report's time includes.
    let tally = Tally::new();
    let (files, ranges, before) = open_traced(trace)?;
    let settings = Settings {
        order: Order::Disk,
        direct: false,
        merge_gap: 0,
        depth: Some(opts.depth),
        max_request: LOAD_REQUEST,
    };
    let r = replay_with(trace, &files, &settings, observer)?;
    for e in r.outcome.errors {
        tally.error(e);
    }
    if r.outcome.interrupted {
        tally.interrupt();
    }
    Ok(cache_report(&files, &ranges, before, tally))
}

/// Traced byte ranges: `(file index, offset, length)`.
type Ranges = Vec<(u32, u64, u64)>;

/// What both trace-driven verbs start from: the traced files opened, their page ranges up to
/// each file's size now, and what of those is cached now.
fn open_traced(trace: &Trace) -> Result<(OpenFiles, Ranges, Cached), crate::Error> {
    let files = OpenFiles::open(trace, false);
    let ranges = file_ranges(trace, 0, &ends(trace, &files)?)?;
    let before = traced_cached(&files, &ranges);
    Ok((files, ranges, before))
}

/// The report: the ranges measured again, against `before`.
fn cache_report(
    files: &OpenFiles,
    ranges: &[(u32, u64, u64)],
    before: Cached,
    tally: Tally,
) -> TraceCacheReport {
    let after = traced_cached(files, ranges);
    let unknown_files = before.unknown.max(after.unknown);
    TraceCacheReport {
        dry_run: false,
        files: files.opened(),
        files_missing: files.missing,
        skipped: files.skipped.clone(),
        ranges: ranges.len() as u64,
        bytes: after.bytes,
        cached_bytes_before: before.cached,
        cached_bytes_after: after.cached,
        unknown_files,
        unknown_reason: (unknown_files > 0).then_some(UNKNOWN_NOT_WRITABLE),
        outcome: tally.finish(Vec::new()),
    }
}
