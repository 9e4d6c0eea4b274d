//! A trace's page set in the files as they are now: its distinct pages as byte ranges, clipped
//! to each file's size ([`file_ranges`], what `replay` plans from), and what of them is cached
//! ([`TraceCacheReport`]: where `evict --trace` and `load --trace` start from and what they
//! report). Every allocation sized by the trace is fallible ([`TraceError::TooLarge`]).

use crate::residency::{Meter, Method, UNKNOWN_NOT_WRITABLE};
use crate::sys;
use crate::trace::{OpenFiles, SkippedFile, Trace, TraceError};
use crate::verb::{Outcome, Tally};
use serde::Serialize;
use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::Path;

/// Room for `n` more items in `v`, or [`TraceError::TooLarge`] (never an abort).
pub(crate) fn reserve<T>(v: &mut Vec<T>, n: usize, what: &str) -> Result<(), crate::Error> {
    v.try_reserve(n).map_err(|_| {
        TraceError::TooLarge(format!(
            "no memory for {} {what} ({} bytes each)",
            v.len().saturating_add(n),
            std::mem::size_of::<T>()
        ))
        .into()
    })
}

/// The bytes `[start, end)` of `pages` pages from page `index`, clipped to `limit`; None when
/// none of them lies before it (or the offsets do not fit in 64 bits, which a checked trace
/// never has).
pub(crate) fn span(index: u64, pages: u64, page: u64, limit: u64) -> Option<(u64, u64)> {
    let start = index.checked_mul(page)?;
    let end = index.checked_add(pages)?.checked_mul(page)?.min(limit);
    (start < end).then_some((start, end))
}

/// Where each file's traced pages end at most, by file index: its size now rounded up to a
/// page ([`OpenFiles::end`]), 0 for a file not opened.
pub(crate) fn ends(trace: &Trace, files: &OpenFiles) -> Result<Vec<u64>, crate::Error> {
    let page = trace.page_size as u64;
    let mut v = Vec::new();
    reserve(&mut v, trace.files.len(), "files")?;
    v.extend((0..trace.files.len()).map(|f| files.end(f as u32, page)));
    Ok(v)
}

/// Each traced file's distinct pages as sorted, merged byte ranges `(file, offset, length)`,
/// files in order of first use, ranges closer than `gap` bytes joined. Pages at or past
/// `ends[file]` are left out (a file missing from `ends` has none): pass the files' sizes now
/// (see [`OpenFiles::end`]), or `u64::MAX` for the trace as recorded.
pub fn file_ranges(
    trace: &Trace,
    gap: u64,
    ends: &[u64],
) -> Result<Vec<(u32, u64, u64)>, crate::Error> {
    let page = trace.page_size as u64;
    // Each file's rank in order of first use (u32::MAX: not used yet).
    let mut rank: Vec<u32> = Vec::new();
    reserve(&mut rank, trace.files.len(), "files")?;
    rank.resize(trace.files.len(), u32::MAX);
    let mut used = 0u32;
    // (rank, start, end, file) of every event, clipped.
    let mut spans: Vec<(u32, u64, u64, u32)> = Vec::new();
    reserve(&mut spans, trace.events.len(), "events")?;
    for e in &trace.events {
        let f = e.file as usize;
        let limit = ends.get(f).copied().unwrap_or(0);
        let (Some(r), Some((s, x))) = (rank.get_mut(f), span(e.index, e.pages as u64, page, limit))
        else {
            continue;
        };
        if *r == u32::MAX {
            *r = used;
            used += 1;
        }
        spans.push((*r, s, x, e.file));
    }
    spans.sort_unstable();
    let mut out = Vec::new();
    let mut cur: Option<(u32, u64, u64)> = None;
    for &(_, s, e, f) in &spans {
        cur = match cur {
            Some((cf, cs, ce)) if cf == f && s <= ce.saturating_add(gap) => {
                Some((cf, cs, ce.max(e)))
            }
            Some((cf, cs, ce)) => {
                reserve(&mut out, 1, "ranges")?;
                out.push((cf, cs, ce - cs));
                Some((f, s, e))
            }
            None => Some((f, s, e)),
        };
    }
    if let Some((cf, cs, ce)) = cur {
        reserve(&mut out, 1, "ranges")?;
        out.push((cf, cs, ce - cs));
    }
    Ok(out)
}

/// Cache state of the traced pages before and after a trace-driven evict or load.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
pub(crate) struct Cached {
    /// Bytes within the files' sizes.
    pub bytes: u64,
    /// Cached bytes of the files whose residency is known.
    pub cached: u64,
    /// Files whose residency is not.
    pub unknown: u64,
}

/// Measures the traced ranges (mincore's word only where it tells this process the truth: for a
/// file cachestat refused it would say "all cached").
pub(crate) fn traced_cached(files: &OpenFiles, ranges: &[(u32, u64, u64)]) -> Cached {
    let meter = Meter::new(Method::Auto);
    let mut c = Cached::default();
    let mut unknown = HashSet::new();
    // The ranges of a file come together: its descriptor is had once for them.
    let mut cur: Option<(u32, Option<crate::trace::TracedFd>)> = None;
    for &(f, off, len) in ranges {
        if cur.as_ref().is_none_or(|c| c.0 != f) {
            drop(cur.take()); // closed before the next is opened
            cur = Some((f, files.get(f, false)));
        }
        let Some(fd) = cur.as_ref().and_then(|c| c.1.as_ref()) else {
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

/// Traced byte ranges: `(file index, offset, length)`.
pub(crate) type Ranges = Vec<(u32, u64, u64)>;

/// What both trace-driven verbs (`evict --trace`, `load --trace`) do around their own work:
/// the traced files opened and their ranges measured (the clock starts before, so the
/// report's time includes it), `work` on them, with the tally of the run, then the report
/// from the ranges measured again.
pub(crate) fn measured(
    trace: &Trace,
    work: impl FnOnce(&OpenFiles, &Ranges, &Tally) -> Result<(), crate::Error>,
) -> Result<TraceCacheReport, crate::Error> {
    let tally = Tally::new();
    let (files, ranges, before) = open_traced(trace)?;
    work(&files, &ranges, &tally)?;
    Ok(cache_report(&files, &ranges, before, tally))
}

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
    for e in files.take_errors() {
        tally.error(e);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, TraceFile};

    /// A trace of two files recorded without a path, with `(file, page index, pages)` events.
    fn t(events: &[(u32, u64, u32)]) -> Trace {
        let file = |ino| TraceFile {
            dev_major: 0,
            dev_minor: 0,
            ino,
            size: 0,
            path: None,
            path_bytes: None,
            deleted: false,
            handle: None,
        };
        let event = |(i, &(file, index, pages)): (usize, &(u32, u64, u32))| Event {
            ts_ns: i as u64,
            file,
            pid: 1,
            index,
            pages,
        };
        Trace {
            page_size: 4096,
            files: vec![file(0), file(1)],
            events: events.iter().enumerate().map(event).collect(),
            ..Trace::default()
        }
    }

    #[test]
    fn file_ranges_sort_dedupe_and_merge() {
        let tr = t(&[
            (1, 10, 1),
            (0, 5, 1),
            (1, 0, 4),
            (0, 6, 2),
            (1, 10, 1),
            (1, 12, 1),
        ]);
        let all = [u64::MAX; 2];
        assert_eq!(
            file_ranges(&tr, 0, &all).unwrap(),
            vec![
                (1, 0, 4 * 4096),
                (1, 10 * 4096, 4096),
                (1, 12 * 4096, 4096),
                (0, 5 * 4096, 3 * 4096)
            ]
        );
        // A gap of one page is bridged with merge_gap = 4096.
        assert_eq!(
            file_ranges(&tr, 4096, &all).unwrap()[1],
            (1, 10 * 4096, 3 * 4096)
        );
        // Clipped to where each file ends: file 1 has 11 pages now, file 0 none.
        assert_eq!(
            file_ranges(&tr, 0, &[0, 11 * 4096]).unwrap(),
            vec![(1, 0, 4 * 4096), (1, 10 * 4096, 4096)]
        );
    }
}
