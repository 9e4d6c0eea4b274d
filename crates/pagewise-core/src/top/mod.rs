//! `top`: who is filling — or evicting — the page cache right now, by process, memory cgroup
//! and file, interval by interval.
//!
//! The kernel's page-cache tracepoints of the whole machine are sampled through perf events
//! (one per CPU and tracepoint, all of a CPU into one ring, the rings `record` reads):
//! `filemap:mm_filemap_add_to_page_cache` (pages added: reads, read-ahead, new pages
//! written), `filemap:mm_filemap_delete_from_page_cache` (pages removed: reclaim, eviction,
//! truncation) and the dirtying tracepoint (`writeback:writeback_dirty_folio`, before 5.19
//! `writeback_dirty_page`). A folio counts its size where the record has its order (6.x);
//! the dirtying records have none, so a dirtied folio counts the size it had when it was
//! seen added, else one page, and the figure says it is a lower bound.
//!
//! - [`Sampler`]: start once, [`Sampler::drain`] at each interval's end (the API a
//!   long-running process, such as the exporter, uses), [`Sampler::stop`];
//! - [`top`]: the verb, a sampler drained every `interval` for `count` intervals.
//!
//! Cgroups are the memory controller's groups `pagewise cgroups` shows: where memory is on
//! cgroup v2 alone, from the samples' cgroup id (PERF_SAMPLE_CGROUP, 5.7+); otherwise (v1's
//! memory controller, or a kernel refusing it) from `/proc/PID/cgroup`, read when a process
//! is first seen in an interval. Refaults are the group's memory.stat
//! `workingset_refault_file` (`workingset_refault` on older kernels) over the interval.
//! Memory is bounded: at most [`TopOptions::sampler`]`.max_keys` keys per view and interval
//! (the rest counted as `other`), [`aggregate::MAX_FOLIOS`] large folios remembered.
//!
//! ```no_run
//! use pagewise_core::top::{Sampler, SamplerOptions};
//! let mut s = Sampler::start(&SamplerOptions::default())?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let second = s.drain();
//! for p in second.processes.iter().flat_map(|v| &v.rows) {
//!     let comm = p.comm.as_deref().map(String::from_utf8_lossy);
//!     println!("{} {comm:?} added {} bytes", p.pid, p.counts.added_bytes);
//! }
//! s.stop();
//! # Ok::<(), pagewise_core::trace::TraceUnavailable>(())
//! ```

pub mod aggregate;
pub mod events;
pub mod names;
mod report;
mod sampler;

pub use aggregate::Counts;
pub use report::{CgroupRow, FileRow, Interval, ProcessRow, Rows};
pub use sampler::Sampler;

use crate::verb::{Observer, Outcome, Tally};
use serde::Serialize;
use std::time::{Duration, Instant};

/// [`TopOptions::interval`]'s default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// [`SamplerOptions::max_keys`]'s default: keys per view and interval.
pub const DEFAULT_MAX_KEYS: usize = 4096;

/// Which tallies a [`Sampler`] keeps (each costs a lookup per event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Views {
    /// By process (pid).
    pub process: bool,
    /// By memory cgroup.
    pub cgroup: bool,
    /// By file (device, inode).
    pub file: bool,
}

impl Default for Views {
    /// By process alone.
    fn default() -> Self {
        Views {
            process: true,
            cgroup: false,
            file: false,
        }
    }
}

/// What a [`Sampler`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerOptions {
    /// The tallies kept. Default: by process.
    pub views: Views,
    /// Distinct keys per view and interval; the rest are counted as `other`.
    /// Default: [`DEFAULT_MAX_KEYS`].
    pub max_keys: usize,
    /// Ring buffer per CPU, KiB. Default: [`crate::trace::DEFAULT_BUFFER_KB`].
    pub buffer_kb: u64,
    /// Rows named per view and interval, largest first; the others are summed in
    /// [`Rows::rest`] unnamed (naming a file costs an open by handle and a readlink: a build
    /// touching 2,000 files a second made naming them all most of top's CPU). None: every
    /// row. Default: None.
    pub max_rows: Option<usize>,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            views: Views::default(),
            max_keys: DEFAULT_MAX_KEYS,
            buffer_kb: crate::trace::DEFAULT_BUFFER_KB,
            max_rows: None,
        }
    }
}

/// Options of [`top`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopOptions {
    /// What is counted.
    pub sampler: SamplerOptions,
    /// Length of an interval. Default: [`DEFAULT_INTERVAL`].
    pub interval: Duration,
    /// Intervals to run; None: until cancelled. Default: None.
    pub count: Option<u64>,
}

impl Default for TopOptions {
    fn default() -> Self {
        TopOptions {
            sampler: SamplerOptions::default(),
            interval: DEFAULT_INTERVAL,
            count: None,
        }
    }
}

impl TopOptions {
    /// Checks the options, naming the field that is wrong.
    pub fn validate(&self) -> Result<(), crate::Error> {
        let invalid = |message: &str| {
            Err(crate::Error::Invalid {
                what: "top",
                message: message.into(),
            })
        };
        let v = self.sampler.views;
        if !(v.process || v.cgroup || v.file) {
            return invalid("`views`: none chosen (process, cgroup or file)");
        }
        if self.sampler.max_keys == 0 {
            return invalid("`max_keys` must be at least 1");
        }
        if self.interval < Duration::from_millis(10) || self.interval > Duration::from_secs(86_400)
        {
            return invalid("`interval` must be between 10ms and 1 day");
        }
        if self.count == Some(0) {
            return invalid("`count` must be at least 1");
        }
        if self.sampler.buffer_kb == 0 || self.sampler.buffer_kb > 1 << 20 {
            return invalid("`buffer_kb` must be between 1 and 1048576");
        }
        Ok(())
    }
}

/// What [`top`] did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TopReport {
    /// Intervals reported.
    pub interval_count: u64,
    /// Every event counted, together.
    pub totals: Counts,
    /// Events the kernel dropped.
    pub lost_events: u64,
    /// The dirtying tracepoint followed (`writeback/writeback_dirty_folio`), null for none.
    pub dirty_event: Option<&'static str>,
    /// Where cgroups come from: `perf` (the samples' cgroup id) or `proc` (/proc/PID/cgroup).
    #[cfg_attr(feature = "schema", schemars(extend("enum" = ["perf", "proc"])))]
    pub cgroup_source: &'static str,
    /// Errors, notices, time, interruption.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Samples the page cache's events for `options.count` intervals (or until the observer
/// cancels), handing each interval to `on_interval` as it ends. An interval cut short by
/// cancellation is not reported.
pub fn top(
    options: &TopOptions,
    observer: &dyn Observer,
    on_interval: &mut dyn FnMut(&Interval),
) -> Result<TopReport, crate::Error> {
    options.validate()?;
    let tally = Tally::new();
    let mut s = Sampler::start(&options.sampler).map_err(|e| crate::Error::TracingUnavailable {
        reason: e.0,
        needed_by: Some("top"),
        hint: "",
    })?;
    for n in &s.notices {
        tally.notice(n.clone());
    }
    let mut totals = Counts::default();
    let (mut intervals, mut lost) = (0u64, 0u64);
    let mut start = Instant::now();
    while options.count.is_none_or(|c| intervals < c) {
        let end = start + options.interval;
        let mut stopped = false;
        loop {
            if tally.stop_requested(observer) {
                stopped = true;
                break;
            }
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(50)));
        }
        // A stop (Ctrl-C) does not lose the interval under way: what it has so far is the
        // last one (its `elapsed_s` says how long it ran).
        if stopped && start.elapsed() < Duration::from_millis(100) {
            break;
        }
        start = end;
        let i = s.drain();
        totals.merge(&i.totals);
        lost += i.lost_events;
        intervals += 1;
        on_interval(&i);
        if stopped {
            break;
        }
    }
    let report = TopReport {
        interval_count: intervals,
        totals,
        lost_events: lost,
        dirty_event: s.dirty_event,
        cgroup_source: if s.cgroup_ids { "perf" } else { "proc" },
        outcome: Outcome::default(),
    };
    s.stop();
    Ok(TopReport {
        outcome: tally.finish(Vec::new()),
        ..report
    })
}
