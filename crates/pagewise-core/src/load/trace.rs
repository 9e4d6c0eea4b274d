//! `load --trace`: load exactly the pages a trace recorded, in disk order with a deep queue (a
//! preloader), measured before and after.
//!
//! ```text
//! load_trace(&TraceLoadOptions, &dyn Observer) -> Result<TraceCacheReport, Error>
//! ```

use crate::replay::{check_io, replay_with, Order, Settings};
use crate::trace::pages::measured;
use crate::trace::{Trace, TraceCacheReport};
use crate::verb::Observer;

/// Options of [`load_trace`].
#[derive(Debug, Clone)]
pub struct TraceLoadOptions {
    /// The recording whose pages are loaded. Default: an empty trace (nothing to load).
    pub trace: Trace,
    /// Reads in flight (the pages are read in disk order). Default: [`DEFAULT_TRACE_DEPTH`].
    pub depth: usize,
}

/// [`TraceLoadOptions::depth`]'s default (the CLI's `load --trace` without `-j`).
pub const DEFAULT_TRACE_DEPTH: usize = 32;

impl Default for TraceLoadOptions {
    fn default() -> Self {
        TraceLoadOptions {
            trace: Trace::default(),
            depth: DEFAULT_TRACE_DEPTH,
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

/// Loads exactly the traced pages, in disk order with a deep queue (a preloader). The observer
/// sees the bytes read, and is asked between reads whether to stop.
///
/// ```
/// use pagewise_core::load::{load_trace, TraceLoadOptions};
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
    measured(trace, |files, _, tally| {
        let settings = Settings {
            order: Order::Disk,
            direct: false,
            merge_gap: 0,
            depth: Some(opts.depth),
            max_request: LOAD_REQUEST,
        };
        let r = replay_with(trace, files, &settings, observer)?;
        for e in r.outcome.errors {
            tally.error(e);
        }
        if r.outcome.interrupted {
            tally.interrupt();
        }
        Ok(())
    })
}
