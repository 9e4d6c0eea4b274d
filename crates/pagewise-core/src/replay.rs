//! `replay`: re-issue a recorded read set — in the program's order, grouped per file, or
//! sorted by position on disk (FIEMAP) and merged — and time it. Also the trace-driven
//! `evict --trace` and `load --trace`.

use crate::error::{ErrorLog, FileError, Op};
use crate::sys::{self, Advice, AlignedBuf};
use crate::trace::{self, Trace};
use serde::Serialize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// In which order the recorded pages are read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

/// Options of `replay`.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub order: Order,
    /// O_DIRECT: read exactly the recorded pages from the device, no cache, no readahead.
    pub direct: bool,
    /// Merge ranges whose gap is at most this many bytes (reading the gap too).
    pub merge_gap: u64,
    /// Requests in flight (None: the order's default).
    pub depth: Option<usize>,
    /// Longest single request.
    pub max_request: u64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            order: Order::Disk,
            direct: false,
            merge_gap: 0,
            depth: None,
            max_request: 1 << 20,
        }
    }
}

/// One read to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub file: u32,
    pub off: u64,
    pub len: u64,
    /// Physical byte address of `off` (disk order only; 0 when unknown).
    pub physical: u64,
}

/// What one replay did.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub order: Order,
    pub direct: bool,
    pub depth: usize,
    pub requests: u64,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub mb_per_s: f64,
    pub files: u64,
    /// Traced files skipped: gone, or never reachable by path or handle (see `skipped`).
    pub files_missing: u64,
    pub skipped: Vec<SkippedFile>,
    pub errors: Vec<FileError>,
    pub error_count: u64,
}

/// The traced files, opened (None where they could not be).
pub struct OpenFiles {
    pub fds: Vec<Option<OwnedFd>>,
    pub direct: Vec<Option<OwnedFd>>,
    /// Files that are gone or cannot be reached, with the reason (skipped; not errors).
    pub missing: u64,
    pub skipped: Vec<SkippedFile>,
    /// Files that exist but could not be opened as the traced regular file (errors).
    pub errors: Vec<FileError>,
}

/// A traced file that was skipped, and why.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedFile {
    /// The recorded path, or `<MAJOR:MINOR inode N>` for a file recorded without one.
    #[serde(flatten, serialize_with = "crate::json::path")]
    pub path: PathBuf,
    pub reason: String,
}

/// Skipped files listed in a report (all are counted).
const MAX_SKIPPED: usize = 100;

/// Opens every traced file (by path, else by inode); with `direct`, an O_DIRECT twin too.
pub fn open_files(trace: &Trace, direct: bool) -> OpenFiles {
    let cache = Mutex::new(None);
    let mut out = OpenFiles {
        fds: Vec::new(),
        direct: Vec::new(),
        missing: 0,
        skipped: Vec::new(),
        errors: Vec::new(),
    };
    for f in &trace.files {
        let fd = match trace::open_file(f, &cache) {
            Ok(fd) => Some(fd),
            // Refused by trace::open_file itself (not a kernel EINVAL): no longer a regular file.
            Err(e)
                if e.kind() == std::io::ErrorKind::InvalidInput && e.raw_os_error().is_none() =>
            {
                let path = f.name();
                out.errors.push(FileError::io(&path, Op::Open, &e));
                None
            }
            Err(e) => {
                out.missing += 1;
                if out.skipped.len() < MAX_SKIPPED {
                    out.skipped.push(SkippedFile {
                        path: f.name(),
                        reason: trace::unreachable_reason(f, &e),
                    });
                }
                None
            }
        };
        let d = if direct {
            fd.as_ref()
                .and_then(|fd| sys::open_read_direct(&sys::fd_path(fd.as_fd())).ok())
        } else {
            None
        };
        out.fds.push(fd);
        out.direct.push(d);
    }
    out
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

/// The requests of a replay in the given order.
pub fn plan(trace: &Trace, files: &OpenFiles, opts: &ReplayOptions) -> Vec<Request> {
    let page = trace.page_size as u64;
    let mut reqs: Vec<Request> = match opts.order {
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
        Order::Disk => {
            let mut pieces = Vec::new();
            for (file, off, len) in file_ranges(trace, 0) {
                let Some(fd) = files.fds[file as usize].as_ref() else {
                    continue;
                };
                match sys::fiemap(fd.as_fd(), off, len) {
                    Ok(ext) if !ext.is_empty() => {
                        for x in ext {
                            let s = off.max(x.logical);
                            let e = (off + len).min(x.logical + x.length);
                            if e > s {
                                pieces.push(Request {
                                    file,
                                    off: s,
                                    len: e - s,
                                    physical: x.physical + (s - x.logical),
                                });
                            }
                        }
                    }
                    // Holes, inline data or no FIEMAP: keep the range, ordered by file offset.
                    _ => pieces.push(Request {
                        file,
                        off,
                        len,
                        physical: u64::MAX / 2 + off,
                    }),
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
                        && logical_gap <= opts.merge_gap
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
    };
    // Split requests longer than max_request.
    let max = opts.max_request.max(page);
    if reqs.iter().any(|r| r.len > max) {
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
        reqs = out;
    }
    reqs
}

/// Issues the requests with `depth` threads in flight; returns (bytes read, seconds). Threads
/// and their buffers are made and touched before the clock starts, so the time is the I/O's
/// (on a VM, the first DMA into a fresh buffer page costs a hypervisor fault).
#[allow(clippy::too_many_arguments)]
fn issue(
    reqs: &[Request],
    files: &OpenFiles,
    direct: bool,
    depth: usize,
    max: usize,
    errors: &ErrorLog,
    trace: &Trace,
) -> (u64, f64) {
    let next = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    let depth = depth.clamp(1, reqs.len().max(1));
    let barrier = std::sync::Barrier::new(depth + 1);
    let mut bufs: Vec<AlignedBuf> = (0..depth)
        .map(|_| {
            let mut b = AlignedBuf::new(max, 4096);
            b.fill(1);
            b
        })
        .collect();
    let mut start = Instant::now();
    std::thread::scope(|s| {
        for mut buf in bufs.drain(..) {
            let (next, bytes, barrier) = (&next, &bytes, &barrier);
            s.spawn(move || {
                barrier.wait();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(r) = reqs.get(i) else { return };
                    let fd = if direct {
                        files.direct[r.file as usize].as_ref()
                    } else {
                        files.fds[r.file as usize].as_ref()
                    };
                    let Some(fd) = fd else { continue };
                    let n = (r.len as usize).min(buf.len());
                    match sys::pread(fd.as_fd(), &mut buf[..n], r.off) {
                        Ok(got) => {
                            bytes.fetch_add(got as u64, Ordering::Relaxed);
                        }
                        Err(e) => errors.push(FileError::io(
                            &trace.files[r.file as usize].name(),
                            if direct { Op::PreadDirect } else { Op::Pread },
                            &e,
                        )),
                    }
                }
            });
        }
        barrier.wait();
        start = Instant::now();
    });
    (bytes.into_inner(), start.elapsed().as_secs_f64())
}

/// [`issue`] through one io_uring: batches of submissions instead of a thread per request.
#[allow(clippy::too_many_arguments)]
fn issue_uring(
    reqs: &[Request],
    files: &OpenFiles,
    direct: bool,
    depth: usize,
    max: usize,
    errors: &ErrorLog,
    trace: &Trace,
) -> (u64, f64) {
    use std::os::fd::AsRawFd;
    let table = if direct { &files.direct } else { &files.fds };
    let rr: Vec<(usize, sys::ReadReq)> = reqs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let fd = table[r.file as usize].as_ref()?;
            Some((
                i,
                sys::ReadReq {
                    fd: fd.as_raw_fd(),
                    off: r.off,
                    len: r.len.min(max as u64) as u32,
                },
            ))
        })
        .collect();
    let list: Vec<sys::ReadReq> = rr.iter().map(|x| x.1).collect();
    let mut start = Instant::now();
    match sys::uring_read_all(&list, depth, max, || start = Instant::now()) {
        Ok(results) => {
            let elapsed = start.elapsed().as_secs_f64();
            let mut bytes = 0;
            for ((i, _), res) in rr.iter().zip(results) {
                match res {
                    Ok(n) => bytes += n as u64,
                    Err(e) => errors.push(FileError::io(
                        &trace.files[reqs[*i].file as usize].name(),
                        if direct {
                            Op::UringReadDirect
                        } else {
                            Op::UringRead
                        },
                        &e,
                    )),
                }
            }
            (bytes, elapsed)
        }
        // Ring setup refused (e.g. io_uring disabled): the thread pool does it.
        Err(_) => issue(reqs, files, direct, depth, max, errors, trace),
    }
}

/// Replays a trace once (the cache is left as the replay made it).
pub fn replay(trace: &Trace, opts: &ReplayOptions) -> ReplayReport {
    let files = open_files(trace, opts.direct);
    replay_with(trace, &files, opts)
}

fn replay_with(trace: &Trace, files: &OpenFiles, opts: &ReplayOptions) -> ReplayReport {
    let errors = ErrorLog::default();
    for e in &files.errors {
        errors.push(e.clone());
    }
    let reqs = plan(trace, files, opts);
    if !opts.direct {
        // Exactly the recorded pages: no kernel readahead around them.
        for fd in files.fds.iter().flatten() {
            let _ = sys::fadvise(fd.as_fd(), 0, 0, Advice::Random);
        }
    }
    let depth = opts.depth.unwrap_or(opts.order.default_depth());
    let max = reqs.iter().map(|r| r.len).max().unwrap_or(4096) as usize;
    let (bytes, elapsed) = if depth > 1 && sys::probe_io_uring() {
        issue_uring(&reqs, files, opts.direct, depth, max, &errors, trace)
    } else {
        issue(&reqs, files, opts.direct, depth, max, &errors, trace)
    };
    if !opts.direct {
        for fd in files.fds.iter().flatten() {
            let _ = sys::fadvise(fd.as_fd(), 0, 0, Advice::Normal);
        }
    }
    ReplayReport {
        order: opts.order,
        direct: opts.direct,
        depth,
        requests: reqs.len() as u64,
        bytes,
        elapsed_s: elapsed,
        mb_per_s: if elapsed > 0.0 {
            bytes as f64 / elapsed / 1e6
        } else {
            0.0
        },
        files: files.fds.iter().filter(|f| f.is_some()).count() as u64,
        files_missing: files.missing,
        skipped: files.skipped.clone(),
        error_count: errors.count(),
        errors: errors.take(),
    }
}

/// Cache state of the traced pages before and after a trace-driven evict or load.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TraceCacheReport {
    /// Measured only, nothing changed (`evict --trace --dry-run`).
    pub dry_run: bool,
    pub files: u64,
    /// Traced files skipped: gone, or never reachable by path or handle (see `skipped`).
    pub files_missing: u64,
    pub skipped: Vec<SkippedFile>,
    pub ranges: u64,
    /// Bytes of the traced ranges (within the files' sizes now).
    pub bytes: u64,
    /// Of the files whose residency is known; see `unknown_files`.
    pub cached_bytes_before: u64,
    pub cached_bytes_after: u64,
    /// Files whose residency cannot be known (cachestat refused: not yours, not writable):
    /// they were acted on all the same, but what they held is left out of the figures.
    pub unknown_files: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<&'static str>,
    pub elapsed_s: f64,
    pub errors: Vec<FileError>,
    pub error_count: u64,
}

/// The traced ranges as the kernel shows them: (bytes within the files' sizes, cached bytes of
/// the files whose residency is known, files whose residency is not).
fn traced_cached(files: &OpenFiles, ranges: &[(u32, u64, u64)]) -> (u64, u64, u64) {
    let meter = crate::residency::Meter::new(crate::residency::Method::Auto);
    let (mut bytes, mut cached) = (0, 0);
    let mut unknown = std::collections::HashSet::new();
    for &(f, off, len) in ranges {
        let Some(fd) = files.fds[f as usize].as_ref() else {
            continue;
        };
        let size = sys::fstat(fd.as_fd()).map_or(0, |s| s.size);
        let end = (off + len).min(size);
        // Never mincore's word for a file cachestat refused: it would say "all cached".
        match meter.measure_fd(Path::new(""), fd.as_fd(), off.min(end), end, || false) {
            Ok(r) if !r.is_unknown() => {
                bytes += r.bytes;
                cached += r.cached_or_zero();
            }
            Ok(r) => {
                bytes += r.bytes;
                unknown.insert(f);
            }
            Err(_) => {}
        }
    }
    (bytes, cached, unknown.len() as u64)
}

/// Drops exactly the traced pages (dirty ones written back first); other pages stay. With
/// `dry_run`, only measures what is cached of them.
pub fn evict_trace(trace: &Trace, dry_run: bool) -> TraceCacheReport {
    let files = open_files(trace, false);
    let ranges = file_ranges(trace, 0);
    let errors = ErrorLog::default();
    for e in &files.errors {
        errors.push(e.clone());
    }
    let start = Instant::now();
    let before = traced_cached(&files, &ranges);
    for &(f, off, len) in ranges.iter().filter(|_| !dry_run) {
        let Some(fd) = files.fds[f as usize].as_ref() else {
            continue;
        };
        let path = trace.files[f as usize].name();
        let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        if let Err(e) = sys::sync_file_range(fd.as_fd(), off, len, flags) {
            errors.push(FileError::io(&path, Op::SyncFileRange, &e));
        }
        if let Err(e) = sys::fadvise(fd.as_fd(), off, len, Advice::DontNeed) {
            errors.push(FileError::io(&path, Op::FadviseDontneed, &e));
        }
    }
    let mut r = cache_report(&files, &ranges, before, start, errors);
    r.dry_run = dry_run;
    r
}

/// Loads exactly the traced pages, in disk order with a deep queue (a preloader).
pub fn load_trace(trace: &Trace, depth: usize) -> TraceCacheReport {
    let files = open_files(trace, false);
    let ranges = file_ranges(trace, 0);
    let start = Instant::now();
    let before = traced_cached(&files, &ranges);
    let opts = ReplayOptions {
        order: Order::Disk,
        direct: false,
        merge_gap: 0,
        depth: Some(depth),
        ..Default::default()
    };
    let r = replay_with(trace, &files, &opts);
    let errors = ErrorLog::default();
    for e in r.errors {
        errors.push(e);
    }
    cache_report(&files, &ranges, before, start, errors)
}

fn cache_report(
    files: &OpenFiles,
    ranges: &[(u32, u64, u64)],
    before: (u64, u64, u64),
    start: Instant,
    errors: ErrorLog,
) -> TraceCacheReport {
    let (bytes, after, unknown) = traced_cached(files, ranges);
    TraceCacheReport {
        dry_run: false,
        files: files.fds.iter().filter(|f| f.is_some()).count() as u64,
        files_missing: files.missing,
        skipped: files.skipped.clone(),
        ranges: ranges.len() as u64,
        bytes,
        cached_bytes_before: before.1,
        cached_bytes_after: after,
        unknown_files: before.2.max(unknown),
        unknown_reason: (before.2.max(unknown) > 0)
            .then_some(crate::residency::UNKNOWN_NOT_WRITABLE),
        elapsed_s: start.elapsed().as_secs_f64(),
        error_count: errors.count(),
        errors: errors.take(),
    }
}

/// `replay --compare`: every order on a cold cache (the traced pages evicted before each run),
/// `runs` times each; the median run per order is reported.
pub fn compare(
    trace: &Trace,
    direct: bool,
    merge_gap: u64,
    max_request: u64,
    runs: usize,
) -> Vec<ReplayReport> {
    let files = open_files(trace, direct);
    let mut out = Vec::new();
    for order in [Order::Recorded, Order::File, Order::Disk] {
        let opts = ReplayOptions {
            order,
            direct,
            merge_gap,
            max_request,
            ..Default::default()
        };
        let mut rs: Vec<ReplayReport> = (0..runs.max(1))
            .map(|_| {
                evict_trace(trace, false);
                replay_with(trace, &files, &opts)
            })
            .collect();
        rs.sort_by(|a, b| a.elapsed_s.total_cmp(&b.elapsed_s));
        out.push(rs.swap_remove(rs.len() / 2));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Event, TraceFile};

    fn t(events: &[(u32, u64, u32)]) -> Trace {
        Trace {
            version: 1,
            page_size: 4096,
            lost_events: 0,
            started_unix_ns: 0,
            duration_ns: 0,
            command: vec![],
            files: (0..2)
                .map(|i| TraceFile {
                    dev_major: 0,
                    dev_minor: 0,
                    ino: i,
                    size: 0,
                    path: None,
                    path_bytes: None,
                    deleted: false,
                })
                .collect(),
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
            faults: None,
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
        assert_eq!(
            file_ranges(&tr, 0),
            vec![
                (1, 0, 4 * 4096),
                (1, 10 * 4096, 4096),
                (1, 12 * 4096, 4096),
                (0, 5 * 4096, 3 * 4096)
            ]
        );
        // A gap of one page is bridged with merge_gap = 4096.
        assert_eq!(file_ranges(&tr, 4096)[1], (1, 10 * 4096, 3 * 4096));
    }

    #[test]
    fn recorded_order_keeps_program_order() {
        let tr = t(&[(0, 8, 1), (0, 9, 1), (1, 0, 1), (0, 0, 1)]);
        let files = OpenFiles {
            fds: vec![None, None],
            direct: vec![None, None],
            missing: 2,
            skipped: Vec::new(),
            errors: Vec::new(),
        };
        let r = plan(
            &tr,
            &files,
            &ReplayOptions {
                order: Order::Recorded,
                ..Default::default()
            },
        );
        let v: Vec<(u32, u64, u64)> = r
            .iter()
            .map(|r| (r.file, r.off / 4096, r.len / 4096))
            .collect();
        assert_eq!(v, vec![(0, 8, 2), (1, 0, 1), (0, 0, 1)]);
        let r = plan(
            &tr,
            &files,
            &ReplayOptions {
                order: Order::File,
                ..Default::default()
            },
        );
        let v: Vec<(u32, u64, u64)> = r
            .iter()
            .map(|r| (r.file, r.off / 4096, r.len / 4096))
            .collect();
        assert_eq!(v, vec![(0, 0, 1), (0, 8, 2), (1, 0, 1)]);
    }
}
