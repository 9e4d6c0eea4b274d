//! The requests of a replay: the traced pages as ranges, in the order asked for, merged and
//! split to the longest request.

use super::{Order, Settings};
use crate::sys;
use crate::trace::{self, OpenFiles, Trace};
use std::os::fd::AsFd;

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

/// Each traced file's distinct pages as sorted, merged byte ranges `(file, offset, length)`,
/// files in order of first use, ranges closer than `gap` bytes joined.
pub fn file_ranges(trace: &Trace, gap: u64) -> Vec<(u32, u64, u64)> {
    let page = trace.page_size as u64;
    let mut per_file: Vec<Vec<(u64, u64)>> = vec![Vec::new(); trace.files.len()];
    let mut order: Vec<u32> = Vec::new();
    for e in &trace.events {
        let v = &mut per_file[e.file as usize];
        if v.is_empty() {
            order.push(e.file);
        }
        v.push((e.index, e.pages as u64));
    }
    let mut out = Vec::new();
    for f in order {
        let v = &mut per_file[f as usize];
        v.sort_unstable();
        let mut cur: Option<(u64, u64)> = None;
        for &(idx, n) in v.iter() {
            let (s, e) = (idx * page, (idx + n) * page);
            cur = match cur {
                Some((cs, ce)) if s <= ce + gap => Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    out.push((f, cs, ce - cs));
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some((cs, ce)) = cur {
            out.push((f, cs, ce - cs));
        }
    }
    out
}

/// The requests of a replay of `trace` in `opts.order`, split to `opts.max_request`.
pub(crate) fn plan(trace: &Trace, files: &OpenFiles, opts: &Settings) -> Vec<Request> {
    let page = trace.page_size as u64;
    let reqs: Vec<Request> = match opts.order {
        Order::Recorded => trace::grouped(trace)
            .into_iter()
            .map(|r| Request {
                file: r.file,
                off: r.index * page,
                len: r.pages * page,
                physical: 0,
            })
            .collect(),
        Order::File => file_ranges(trace, opts.merge_gap)
            .into_iter()
            .map(|(file, off, len)| Request {
                file,
                off,
                len,
                physical: 0,
            })
            .collect(),
        Order::Disk => disk_order(trace, files, opts.merge_gap),
    };
    split(reqs, opts.max_request.max(page))
}

/// The traced ranges by physical position (FIEMAP), neighbours on disk that are neighbours in
/// the same file (at most `gap` apart) merged.
fn disk_order(trace: &Trace, files: &OpenFiles, gap: u64) -> Vec<Request> {
    let mut pieces = Vec::new();
    for (file, off, len) in file_ranges(trace, 0) {
        if let Some(fd) = files.fds[file as usize].as_ref() {
            extents(fd.as_fd(), file, off, len, &mut pieces);
        }
    }
    pieces.sort_by_key(|r| (r.physical, r.file, r.off));
    let mut merged: Vec<Request> = Vec::new();
    for r in pieces {
        if let Some(m) = merged.last_mut() {
            let logical_gap = r.off.saturating_sub(m.off + m.len);
            let physical_gap = r.physical.saturating_sub(m.physical + m.len);
            if m.file == r.file
                && r.off >= m.off + m.len
                && logical_gap <= gap
                && logical_gap == physical_gap
            {
                m.len = r.off + r.len - m.off;
                continue;
            }
        }
        merged.push(r);
    }
    merged
}

/// The pieces of one range by extent, each with its physical address.
fn extents(fd: std::os::fd::BorrowedFd, file: u32, off: u64, len: u64, out: &mut Vec<Request>) {
    match sys::fiemap(fd, off, len) {
        Ok(ext) if !ext.is_empty() => {
            for x in ext {
                let s = off.max(x.logical);
                let e = (off + len).min(x.logical + x.length);
                if e > s {
                    out.push(Request {
                        file,
                        off: s,
                        len: e - s,
                        physical: x.physical + (s - x.logical),
                    });
                }
            }
        }
        // Holes, inline data or no FIEMAP: keep the range, ordered by file offset.
        _ => out.push(Request {
            file,
            off,
            len,
            physical: u64::MAX / 2 + off,
        }),
    }
}

/// Requests longer than `max` split.
fn split(reqs: Vec<Request>, max: u64) -> Vec<Request> {
    if !reqs.iter().any(|r| r.len > max) {
        return reqs;
    }
    let mut out = Vec::with_capacity(reqs.len());
    for r in reqs {
        let mut o = 0;
        while o < r.len {
            let n = max.min(r.len - o);
            out.push(Request {
                off: r.off + o,
                len: n,
                physical: r.physical + o,
                ..r
            });
            o += n;
        }
    }
    out
}
