//! `replay`: re-issue a recorded read set — in the program's order, grouped per file, or
//! sorted by position on disk (FIEMAP) and merged — and time it. `replay --compare` times
//! every order on a cold cache.
//!
//! ```text
//! replay(&ReplayOptions, &dyn Observer) -> Result<ReplayReport, Error>
//! compare(&CompareOptions, &dyn Observer) -> Result<Vec<ReplayReport>, Error>
//! ```

mod issue;
mod plan;

use crate::sys::{self, Advice};
use crate::trace::{OpenFiles, SkippedFile, Trace};
use crate::verb::{Observer, Outcome, Tally};
use serde::Serialize;
use std::os::fd::AsFd;

pub(crate) use plan::plan;
#[cfg(test)]
pub(crate) use plan::plan_within;
pub use plan::{Request, MAX_EXTRA_REQUESTS};

/// Longest single request a replay takes (`max_request`): 64 MiB.
pub const MAX_REQUEST_BYTES: u64 = 64 << 20;
/// Most requests in flight (`depth`): 1024.
pub const MAX_DEPTH: usize = 1024;
/// Most memory the buffers of the requests in flight may take: `depth` × `max_request` at
/// most 1 GiB (every buffer is touched before the clock starts).
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// Checks the request size and depth of a replay: bounded, so its buffers can be had.
pub(crate) fn check_io(max_request: u64, depth: usize) -> Result<(), crate::Error> {
    let invalid = |what, message| Err(crate::Error::Invalid { what, message });
    if max_request > MAX_REQUEST_BYTES {
        return invalid(
            "max_request",
            format!("{max_request} bytes: at most {MAX_REQUEST_BYTES} (64 MiB)"),
        );
    }
    if depth > MAX_DEPTH {
        return invalid("depth", format!("{depth}: at most {MAX_DEPTH}"));
    }
    if (depth as u64).saturating_mul(max_request) > MAX_BUFFER_BYTES {
        return invalid(
            "depth",
            format!(
                "{depth} requests in flight of {max_request} bytes: more than {MAX_BUFFER_BYTES} \
                 bytes (1 GiB) of buffers; lower the depth or the longest request"
            ),
        );
    }
    Ok(())
}

/// In which order the recorded pages are read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// The program's order, contiguous pages merged.
    Recorded,
    /// Per file (first-use order), each file's pages by offset, merged.
    File,
    /// By physical block on disk (FIEMAP), neighbours merged.
    Disk,
}

impl Order {
    /// `recorded`, `file` or `disk`.
    pub fn name(self) -> &'static str {
        match self {
            Order::Recorded => "recorded",
            Order::File => "file",
            Order::Disk => "disk",
        }
    }
    /// Requests in flight by default: the program's own serial reads for `recorded` and
    /// `file`; a deep queue for `disk`, which is what sorting is for.
    pub fn default_depth(self) -> usize {
        match self {
            Order::Recorded | Order::File => 1,
            Order::Disk => 32,
        }
    }
}

/// Options of [`replay`].
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The recording whose pages are read. Default: an empty trace (nothing to read).
    pub trace: Trace,
    /// Order of the reads. Default: [`Order::Disk`].
    pub order: Order,
    /// O_DIRECT: read exactly the recorded pages from the device, no cache, no readahead.
    /// Default: false.
    pub direct: bool,
    /// Merge ranges whose gap is at most this many bytes (reading the gap too). Default: 0:
    /// measured on the emulated disks (bench/replay-slowdisk), reading gaps through gained
    /// nothing on the 7,200 rpm disk (a forward skip within a track costs the time its bytes
    /// take to pass under the head either way: rustc's disk order 0.622 s at gaps 0, 64K,
    /// 256K and 1M alike) and lost on the cloud volume, whose throughput the gap's bytes
    /// share (python 0.078 s at 0, 0.091 s at 512K).
    pub merge_gap: u64,
    /// Requests in flight. Default: None, the order's [`Order::default_depth`].
    pub depth: Option<usize>,
    /// Longest single request, bytes (longer merged ranges are split; at least a page).
    /// Default: 1 MiB.
    pub max_request: u64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            trace: Trace::default(),
            order: Order::Disk,
            direct: false,
            merge_gap: 0,
            depth: None,
            max_request: 1 << 20,
        }
    }
}

impl ReplayOptions {
    /// Checks the options: the trace must be consistent (see [`Trace::check`]); the longest
    /// request at most [`MAX_REQUEST_BYTES`], the depth at most [`MAX_DEPTH`], and their
    /// buffers at most [`MAX_BUFFER_BYTES`].
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.trace.check()?;
        check_io(
            self.max_request,
            self.depth.unwrap_or(self.order.default_depth()),
        )
    }

    fn settings(&self) -> Settings {
        Settings {
            order: self.order,
            direct: self.direct,
            merge_gap: self.merge_gap,
            depth: self.depth,
            max_request: self.max_request,
        }
    }
}

/// Options of [`compare`].
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// The recording whose pages are read. Default: an empty trace (nothing to read).
    pub trace: Trace,
    /// Read with O_DIRECT (see [`ReplayOptions::direct`]). Default: false.
    pub direct: bool,
    /// See [`ReplayOptions::merge_gap`]. Default: 0.
    pub merge_gap: u64,
    /// See [`ReplayOptions::max_request`]. Default: 1 MiB.
    pub max_request: u64,
    /// Runs per order, each on a cold cache; the median is reported (0 counts as 1).
    /// Default: 3.
    pub runs: usize,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            trace: Trace::default(),
            direct: false,
            merge_gap: 0,
            max_request: 1 << 20,
            runs: 3,
        }
    }
}

impl CompareOptions {
    /// Checks the options as [`ReplayOptions::validate`] does.
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.trace.check()?;
        check_io(self.max_request, Order::Disk.default_depth())
    }
}

/// How to replay: the options without the trace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub order: Order,
    pub direct: bool,
    pub merge_gap: u64,
    pub depth: Option<usize>,
    pub max_request: u64,
}

/// What one replay did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReplayReport {
    /// The order the pages were read in.
    pub order: Order,
    /// Read with O_DIRECT.
    pub direct: bool,
    /// Requests in flight.
    pub depth: usize,
    /// Requests issued.
    pub requests: u64,
    /// Bytes read.
    pub bytes: u64,
    /// `bytes` per second of I/O, in MB (10^6 bytes) per second.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub mb_per_s: f64,
    /// Traced files read from.
    pub files: u64,
    /// Traced files skipped: gone, or never reachable by path or handle (see `skipped`).
    pub files_missing: u64,
    /// The first skipped files, with the reason.
    pub skipped: Vec<SkippedFile>,
    /// Read errors; `elapsed_s` is the time of the I/O alone (opening and planning excluded).
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Replays a trace once (the cache is left as the replay made it). The observer sees the
/// bytes read as they are, and is asked between requests whether to stop.
///
/// ```
/// use pagewise_core::replay::{replay, Order, ReplayOptions};
/// use pagewise_core::trace::Trace;
/// # fn trace_of_a_program() -> Trace { Trace::default() }
/// let opts = ReplayOptions {
///     trace: trace_of_a_program(), // e.g. Trace::from_bytes(&std::fs::read("app.trace")?)
///     order: Order::Disk,
///     ..ReplayOptions::default()
/// };
/// let report = replay(&opts, &()).unwrap();
/// println!("{} bytes in {} requests, {:.0} MB/s", report.bytes, report.requests, report.mb_per_s);
/// ```
pub fn replay(opts: &ReplayOptions, observer: &dyn Observer) -> Result<ReplayReport, crate::Error> {
    opts.validate()?;
    let files = OpenFiles::open(&opts.trace, opts.direct);
    replay_with(&opts.trace, &files, &opts.settings(), observer)
}

/// `replay --compare`: every order on a cold cache (the traced pages evicted before each run),
/// `runs` times each; the median run per order is reported. Stops early, with fewer reports,
/// when the observer says so.
pub fn compare(
    opts: &CompareOptions,
    observer: &dyn Observer,
) -> Result<Vec<ReplayReport>, crate::Error> {
    opts.validate()?;
    let files = OpenFiles::open(&opts.trace, opts.direct);
    let mut out = Vec::new();
    for order in [Order::Recorded, Order::File, Order::Disk] {
        let settings = Settings {
            order,
            direct: opts.direct,
            merge_gap: opts.merge_gap,
            depth: None,
            max_request: opts.max_request,
        };
        let mut rs: Vec<ReplayReport> = Vec::new();
        for _ in 0..opts.runs.max(1) {
            if observer.cancelled() {
                break;
            }
            crate::evict::drop_traced(&opts.trace, &files);
            rs.push(replay_with(&opts.trace, &files, &settings, observer)?);
        }
        if rs.is_empty() {
            break;
        }
        rs.sort_by(|a, b| a.outcome.elapsed_s.total_cmp(&b.outcome.elapsed_s));
        out.push(rs.swap_remove(rs.len() / 2));
    }
    Ok(out)
}

/// One replay of `trace` over files opened beforehand.
pub(crate) fn replay_with(
    trace: &Trace,
    files: &OpenFiles,
    opts: &Settings,
    observer: &dyn Observer,
) -> Result<ReplayReport, crate::Error> {
    let tally = Tally::new();
    for e in &files.errors {
        tally.error(e.clone());
    }
    let reqs = plan(trace, files, opts)?;
    if !opts.direct {
        // Exactly the recorded pages: no kernel readahead around them.
        for fd in files.kept() {
            let _ = sys::fadvise(fd.as_fd(), 0, 0, Advice::Random);
        }
    }
    let depth = opts.depth.unwrap_or(opts.order.default_depth());
    let issue = issue::Issue {
        reqs: &reqs,
        files,
        trace,
        direct: opts.direct,
        depth,
        max: reqs.iter().map(|r| r.len).max().unwrap_or(4096) as usize,
        tally: &tally,
        observer,
    };
    // io_uring is handed every descriptor at once: only when all are kept open.
    let uring = depth > 1 && files.all_kept() && sys::probe_io_uring();
    let (bytes, elapsed) = issue.run(uring)?;
    if !opts.direct {
        for fd in files.kept() {
            let _ = sys::fadvise(fd.as_fd(), 0, 0, Advice::Normal);
        }
    }
    for e in files.take_errors() {
        tally.error(e);
    }
    let mut outcome = tally.finish(Vec::new());
    outcome.elapsed_s = elapsed;
    Ok(ReplayReport {
        order: opts.order,
        direct: opts.direct,
        depth,
        requests: reqs.len() as u64,
        bytes,
        mb_per_s: crate::verb::rate(bytes, elapsed) / 1e6,
        files: files.opened(),
        files_missing: files.missing,
        skipped: files.skipped.clone(),
        outcome,
    })
}

/// A trace for tests (here and in the simulator's): version 1, 4 KiB pages, a file of each
/// `(inode, size)` (device 0:0, no path), no events, no faults.
#[cfg(test)]
pub(crate) fn test_trace(files: &[(u64, u64)]) -> Trace {
    Trace {
        version: 1,
        page_size: 4096,
        lost_events: 0,
        started_unix_ns: 0,
        duration_ns: 0,
        command: vec![],
        files: files
            .iter()
            .map(|&(ino, size)| crate::trace::TraceFile {
                dev_major: 0,
                dev_minor: 0,
                ino,
                size,
                path: None,
                path_bytes: None,
                deleted: false,
                handle: None,
            })
            .collect(),
        events: vec![],
        faults: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, TraceError};

    fn t(events: &[(u32, u64, u32)]) -> Trace {
        Trace {
            events: events
                .iter()
                .enumerate()
                .map(|(i, &(file, index, pages))| Event {
                    ts_ns: i as u64,
                    file,
                    pid: 1,
                    index,
                    pages,
                })
                .collect(),
            ..test_trace(&[(0, 0), (1, 0)])
        }
    }

    #[test]
    fn recorded_order_keeps_program_order() {
        let tr = t(&[(0, 8, 1), (0, 9, 1), (1, 0, 1), (0, 0, 1)]);
        let files = OpenFiles::default();
        let all = [u64::MAX; 2];
        let v = planned_pages(&tr, &files, &all, Order::Recorded);
        assert_eq!(v, vec![(0, 8, 2), (1, 0, 1), (0, 0, 1)]);
        let v = planned_pages(&tr, &files, &all, Order::File);
        assert_eq!(v, vec![(0, 0, 1), (0, 8, 2), (1, 0, 1)]);
    }

    /// The plan of `tr` in `order` (other options default), as (file, first page, pages).
    fn planned_pages(
        tr: &Trace,
        files: &OpenFiles,
        ends: &[u64],
        order: Order,
    ) -> Vec<(u32, u64, u64)> {
        let r = plan_within(
            tr,
            files,
            ends,
            &ReplayOptions {
                order,
                ..Default::default()
            }
            .settings(),
        )
        .unwrap();
        r.iter()
            .map(|r| (r.file, r.off / 4096, r.len / 4096))
            .collect()
    }

    #[test]
    fn a_plan_beyond_its_bound_is_refused_before_it_is_made() {
        // 8 events of 2^20 pages, far apart, read 4 KiB at a time: 8 Mi requests, more than
        // one per event + 4 Mi.
        let events: Vec<(u32, u64, u32)> = (0..8).map(|i| (0, i << 21, 1 << 20)).collect();
        let tr = t(&events);
        for order in [Order::Recorded, Order::File] {
            let settings = ReplayOptions {
                order,
                max_request: 4096,
                ..Default::default()
            }
            .settings();
            let all = [u64::MAX; 2];
            let e = plan_within(&tr, &OpenFiles::default(), &all, &settings).unwrap_err();
            assert!(
                matches!(&e, crate::Error::Trace(TraceError::TooLarge(m)) if m.contains("requests")),
                "{e}"
            );
            // Within the files' sizes now (1 MiB), the same trace plans 256 requests.
            let now = [1 << 20; 2];
            let reqs = plan_within(&tr, &OpenFiles::default(), &now, &settings).unwrap();
            assert_eq!(reqs.len(), 256);
            assert!(reqs
                .iter()
                .all(|r| r.off + r.len <= 1 << 20 && r.len == 4096));
        }
    }

    #[test]
    fn request_size_and_depth_are_bounded() {
        let opts = |max_request, depth| ReplayOptions {
            max_request,
            depth,
            ..Default::default()
        };
        assert!(opts(64 << 20, Some(16)).validate().is_ok());
        assert!(opts(1 << 50, None).validate().is_err());
        assert!(opts(1 << 20, Some(1 << 20)).validate().is_err());
        // 32 in flight (disk order's default) of 64 MiB: 2 GiB of buffers.
        assert!(opts(64 << 20, None).validate().is_err());
    }

    #[test]
    fn a_trace_naming_a_file_it_lacks_is_refused() {
        let mut tr = t(&[(0, 8, 1)]);
        tr.events[0].file = 5;
        let opts = ReplayOptions {
            trace: tr,
            ..Default::default()
        };
        assert!(matches!(
            replay(&opts, &()),
            Err(crate::Error::Trace(crate::trace::TraceError::Corrupt(_)))
        ));
    }
}
