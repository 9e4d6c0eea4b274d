//! `evict --trace`: drop exactly the pages a trace recorded (a selectively cold cache), dirty
//! ones written back first, measured before and after; and the unmeasured drop of the same
//! pages that `replay --compare` starts each run from.
//!
//! ```text
//! evict_trace(&TraceEvictOptions, &dyn Observer) -> Result<TraceCacheReport, Error>
//! ```

use crate::error::{FileError, Op};
use crate::sys::{self, Advice};
use crate::trace::pages::{ends, file_ranges, measured};
use crate::trace::{OpenFiles, Trace, TraceCacheReport, TracedFd};
use crate::verb::{Observer, Tally};
use std::os::fd::AsFd;

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

/// Writes back and drops the traced ranges of `files` (errors to `tally`, when given); the
/// observer is asked between ranges whether to stop.
pub(crate) fn drop_ranges(
    trace: &Trace,
    files: &OpenFiles,
    ranges: &[(u32, u64, u64)],
    tally: &Tally,
    observer: &dyn Observer,
) {
    // The ranges of a file come together: its descriptor is had once for them.
    let mut cur: Option<(u32, Option<TracedFd>)> = None;
    for &(f, off, len) in ranges {
        if tally.stop_requested(observer) {
            break;
        }
        if cur.as_ref().is_none_or(|c| c.0 != f) {
            drop(cur.take()); // closed before the next is opened
            cur = Some((f, files.get(f, false)));
        }
        // A length of 0 would mean "to the end of the file" to both calls: never asked.
        let Some(fd) = cur.as_ref().and_then(|c| c.1.as_ref()) else {
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
    drop(cur);
    for e in files.take_errors() {
        tally.error(e);
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
/// use pagewise_core::evict::{evict_trace, TraceEvictOptions};
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
    let mut r = measured(trace, |files, ranges, tally| {
        for e in &files.errors {
            tally.error(e.clone());
        }
        if !opts.dry_run {
            drop_ranges(trace, files, ranges, tally, observer);
        }
        Ok(())
    })?;
    r.dry_run = opts.dry_run;
    Ok(r)
}
