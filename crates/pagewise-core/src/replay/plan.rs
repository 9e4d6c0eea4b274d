//! The requests of a replay: the traced pages as ranges, in the order asked for, merged and
//! split to the longest request. Every range is clipped to its file's size now (a trace may
//! name any page below 2^63), and the requests are counted as they are planned: at most one
//! per event plus [`MAX_EXTRA_REQUESTS`], each allocation fallible.

use super::{Order, Settings};
use crate::sys;
use crate::trace::pages::{ends, file_ranges, reserve, span};
use crate::trace::{OpenFiles, Trace, TraceError};
use std::os::fd::AsFd;

/// Requests a replay plans beyond one per event (what splitting long runs at the longest
/// request adds): 4,194,304, 128 MiB of plan. A recording's runs are what the program read:
/// 4 TiB at the default 1 MiB request before this limit is reached. More than that, the trace
/// is refused with [`TraceError::TooLarge`] instead of planning without end.
pub const MAX_EXTRA_REQUESTS: u64 = 1 << 22;

/// One read to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Index of the file in the trace.
    pub file: u32,
    /// Byte offset in the file.
    pub off: u64,
    /// Bytes to read.
    pub len: u64,
    /// Physical byte address of `off` (disk order only; 0 when unknown).
    pub physical: u64,
}

/// The requests being planned: split to `max` bytes, at most `limit` of them.
struct Plan {
    reqs: Vec<Request>,
    max: u64,
    limit: u64,
}

impl Plan {
    fn new(trace: &Trace, max: u64) -> Plan {
        Plan {
            reqs: Vec::new(),
            max,
            limit: (trace.events.len() as u64).saturating_add(MAX_EXTRA_REQUESTS),
        }
    }

    /// Adds `r`, split into requests of at most `max` bytes.
    fn add(&mut self, r: Request) -> Result<(), crate::Error> {
        let n = r.len.div_ceil(self.max);
        let total = (self.reqs.len() as u64).saturating_add(n);
        if total > self.limit {
            return Err(TraceError::TooLarge(format!(
                "a replay of it would issue more than {} requests (one per event, {} events, \
                 + {MAX_EXTRA_REQUESTS}) of at most {} bytes: more than a recording holds \
                 (a larger --max-request issues fewer)",
                self.limit,
                self.limit - MAX_EXTRA_REQUESTS,
                self.max
            ))
            .into());
        }
        reserve(&mut self.reqs, n as usize, "requests")?;
        let mut o = 0;
        while o < r.len {
            let len = self.max.min(r.len - o);
            self.reqs.push(Request {
                off: r.off + o,
                len,
                physical: r.physical.saturating_add(o),
                ..r
            });
            o += len;
        }
        Ok(())
    }
}

/// The requests of a replay of `trace` in `opts.order`, each within its file's size now and
/// split to `opts.max_request`; files not opened have none.
pub(crate) fn plan(
    trace: &Trace,
    files: &OpenFiles,
    opts: &Settings,
) -> Result<Vec<Request>, crate::Error> {
    plan_within(trace, files, &ends(trace, files)?, opts)
}

/// [`plan`] with each file's pages ending at `ends[file]` (see [`file_ranges`]).
pub(crate) fn plan_within(
    trace: &Trace,
    files: &OpenFiles,
    ends: &[u64],
    opts: &Settings,
) -> Result<Vec<Request>, crate::Error> {
    let page = trace.page_size as u64;
    let mut plan = Plan::new(trace, opts.max_request.max(page));
    match opts.order {
        Order::Recorded => recorded(trace, ends, &mut plan)?,
        Order::File => {
            for (file, off, len) in file_ranges(trace, opts.merge_gap, ends)? {
                plan.add(Request {
                    file,
                    off,
                    len,
                    physical: 0,
                })?;
            }
        }
        Order::Disk => {
            for r in disk_order(trace, files, ends, opts.merge_gap, plan.limit)? {
                plan.add(r)?;
            }
        }
    }
    Ok(plan.reqs)
}

/// The requests in recorded order: consecutive events on the same file with contiguous
/// pages, merged (as `trace::grouped`), each run clipped to its file's end in `ends`.
fn recorded(trace: &Trace, ends: &[u64], plan: &mut Plan) -> Result<(), crate::Error> {
    let page = trace.page_size as u64;
    let mut run: Option<(u32, u64, u64)> = None;
    let emit = |plan: &mut Plan, (file, index, pages): (u32, u64, u64)| {
        let limit = ends.get(file as usize).copied().unwrap_or(0);
        match span(index, pages, page, limit) {
            Some((off, end)) => plan.add(Request {
                file,
                off,
                len: end - off,
                physical: 0,
            }),
            None => Ok(()),
        }
    };
    for e in &trace.events {
        let pages = e.pages as u64;
        run = match run {
            Some((f, i, n)) if f == e.file && i.checked_add(n) == Some(e.index) => {
                Some((f, i, n + pages))
            }
            Some(r) => {
                emit(plan, r)?;
                Some((e.file, e.index, pages))
            }
            None => Some((e.file, e.index, pages)),
        };
    }
    if let Some(r) = run {
        emit(plan, r)?;
    }
    Ok(())
}

/// The traced ranges by physical position (FIEMAP), neighbours on disk that are neighbours in
/// the same file (at most `gap` apart) merged; at most `limit` pieces.
fn disk_order(
    trace: &Trace,
    files: &OpenFiles,
    ends: &[u64],
    gap: u64,
    limit: u64,
) -> Result<Vec<Request>, crate::Error> {
    let mut pieces = Vec::new();
    for (file, off, len) in file_ranges(trace, 0, ends)? {
        if let Some(fd) = files.get(file, false) {
            extents(fd.as_fd(), file, off, len, &mut pieces)?;
        }
        if pieces.len() as u64 > limit {
            return Err(TraceError::TooLarge(format!(
                "its pages lie in more than {limit} extents on disk"
            ))
            .into());
        }
    }
    pieces.sort_by_key(|r| (r.physical, r.file, r.off));
    let mut merged: Vec<Request> = Vec::new();
    reserve(&mut merged, pieces.len(), "requests")?;
    for r in pieces {
        if let Some(m) = merged.last_mut() {
            let m_end = m.off + m.len;
            let logical_gap = r.off.saturating_sub(m_end);
            let physical_gap = r.physical.saturating_sub(m.physical.saturating_add(m.len));
            if m.file == r.file
                && r.off >= m_end
                && logical_gap <= gap
                && logical_gap == physical_gap
            {
                m.len = r.off + r.len - m.off;
                continue;
            }
        }
        merged.push(r);
    }
    Ok(merged)
}

/// The pieces of one range by extent, each with its physical address.
fn extents(
    fd: std::os::fd::BorrowedFd,
    file: u32,
    off: u64,
    len: u64,
    out: &mut Vec<Request>,
) -> Result<(), crate::Error> {
    match sys::fiemap(fd, off, len) {
        Ok(ext) if !ext.is_empty() => {
            reserve(out, ext.len(), "extents")?;
            out.extend(ext.iter().filter_map(|x| clip(x, file, off, len)));
        }
        // Holes, inline data or no FIEMAP: keep the range, ordered by file offset.
        _ => {
            reserve(out, 1, "extents")?;
            out.push(Request {
                file,
                off,
                len,
                physical: u64::MAX / 2 + off,
            });
        }
    }
    Ok(())
}

/// The part of extent `x` within `off..off + len` of `file`, with its physical address (None
/// where they do not overlap).
fn clip(x: &sys::Extent, file: u32, off: u64, len: u64) -> Option<Request> {
    let s = off.max(x.logical);
    let e = (off + len).min(x.logical.saturating_add(x.length));
    (e > s).then(|| Request {
        file,
        off: s,
        len: e - s,
        physical: x.physical.saturating_add(s - x.logical),
    })
}
