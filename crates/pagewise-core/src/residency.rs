//! `stat`: how much of each file is in the page cache, measured by cachestat(2) with an
//! mmap+mincore fallback that refuses to report numbers it knows to be false.

use crate::error::{ErrorLog, FileError};
use crate::sys::{self, CacheStat};
use crate::walk::{self, FileRef, WalkOptions, WalkSummary};
use serde::Serialize;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// A byte range of every file: `[start, end)`, `end == None` meaning to the end of the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ByteRange {
    pub start: u64,
    pub end: Option<u64>,
}

impl ByteRange {
    /// Parses `START-END`, `START-` or `-END` with optional K/M/G/T (binary) suffixes.
    pub fn parse(s: &str) -> Result<ByteRange, String> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| format!("range '{s}' must look like START-END, START- or -END"))?;
        let start = if a.is_empty() { 0 } else { parse_size(a)? };
        let end = if b.is_empty() {
            None
        } else {
            Some(parse_size(b)?)
        };
        if let Some(e) = end {
            if e <= start {
                return Err(format!("range '{s}': end must be after start"));
            }
        }
        Ok(ByteRange { start, end })
    }

    /// The page-aligned `(offset, length)` of this range within a file of `size` bytes; the
    /// length is 0 when the range starts at or beyond the end of the file.
    pub fn clamp(&self, size: u64) -> (u64, u64) {
        let page = sys::page_size();
        if self.start >= size {
            return (self.start, 0);
        }
        let start = (self.start / page) * page;
        let end = self.end.unwrap_or(u64::MAX).min(size);
        let end = end.div_ceil(page) * page;
        (start, end.saturating_sub(start))
    }
}

impl ByteRange {
    /// The exact bytes `[start, end)` of a file of `size` bytes that lie within this range
    /// (`[0, size)` without a range; empty at the end of the file when the range starts past
    /// it): what every verb measures.
    pub fn span(&self, size: u64) -> (u64, u64) {
        let start = self.start.min(size);
        (start, self.end.unwrap_or(u64::MAX).min(size).max(start))
    }
}

/// Parses `4096`, `64K`, `1.5G`, `2MiB` (binary units; B optional).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                'P' => 1 << 50,
                _ => return Err(format!("unknown size unit in '{s}'")),
            };
            (&t[..t.len() - 1], m)
        }
        _ => (t, 1),
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a size"))?;
    if v.is_nan() || v < 0.0 {
        return Err(format!("'{s}' is not a size"));
    }
    Ok((v * mult as f64) as u64)
}

/// How residency is measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// cachestat, falling back to mincore when missing or refused.
    #[default]
    Auto,
    Cachestat,
    Mincore,
}

/// Why a residency is unknown: mincore(2) reports every page of a file the caller may not
/// write as cached (Linux >= 5.2), and cachestat(2) refuses such files (EPERM).
pub const UNKNOWN_NOT_WRITABLE: &str = "cachestat(2) refused (EPERM: not your file and not \
writable) and mincore(2) reports such files as fully cached, so their residency cannot be known";

/// Page counts over a page-aligned span, as one cachestat (or mincore) call gives them:
/// `[cached, dirty, writeback, evicted, recently_evicted]`, `None` where the method cannot know.
#[derive(Debug, Clone, Copy)]
struct Counts {
    pages: u64,
    c: [Option<u64>; 5],
    method: &'static str,
}

impl Counts {
    fn from_cachestat(pages: u64, c: CacheStat) -> Self {
        Counts {
            pages,
            c: [
                Some(c.cache),
                Some(c.dirty),
                Some(c.writeback),
                Some(c.evicted),
                Some(c.recently_evicted),
            ],
            method: "cachestat",
        }
    }
    fn unknown(pages: u64) -> Self {
        Counts {
            pages,
            c: [None; 5],
            method: "unknown",
        }
    }
    /// True when some count is neither none nor all of the pages: only then can an edge page
    /// that the range covers in part be either cached or not.
    fn mixed(&self) -> bool {
        self.c
            .iter()
            .any(|x| x.is_some_and(|n| n > 0 && n < self.pages))
    }
}

/// The cache state of one file (or of its part in `--range`), in bytes: each figure is the
/// bytes of the measured span whose page is cached (dirty, ...), so a 2-byte dirty file has
/// 2 dirty bytes, not a page, and a range 1000-2000 covers 1000 bytes. `None` where the method
/// cannot know (mincore knows nothing of dirty pages; mincore on a file the caller may not
/// write would lie, so everything is `None`: "unknown").
#[derive(Debug, Clone, Default, Serialize)]
pub struct Residency {
    /// Bytes measured: the file's size, or its part in the range.
    pub bytes: u64,
    #[serde(rename = "cached_bytes")]
    pub cached: Option<u64>,
    #[serde(rename = "dirty_bytes")]
    pub dirty: Option<u64>,
    #[serde(rename = "writeback_bytes")]
    pub writeback: Option<u64>,
    #[serde(rename = "evicted_bytes")]
    pub evicted: Option<u64>,
    #[serde(rename = "recently_evicted_bytes")]
    pub recently_evicted: Option<u64>,
    /// "cachestat", "mincore" or "unknown".
    pub method: &'static str,
    /// Why the figures are null (only when `method` is "unknown").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<&'static str>,
}

impl Residency {
    /// Cached bytes, 0 when unknown.
    pub fn cached_or_zero(&self) -> u64 {
        self.cached.unwrap_or(0)
    }
    pub fn is_unknown(&self) -> bool {
        self.cached.is_none()
    }
    /// Every figure 0 over `bytes`.
    fn empty() -> Self {
        Residency {
            bytes: 0,
            cached: Some(0),
            dirty: Some(0),
            writeback: Some(0),
            evicted: Some(0),
            recently_evicted: Some(0),
            method: "cachestat",
            unknown_reason: None,
        }
    }
}

/// Measures residency of one open file. Shared by every verb so they all count alike.
pub struct Meter {
    method: Method,
    cachestat_missing: AtomicBool,
    /// One-line notices for the user (fallbacks taken), deduplicated.
    pub notices: Mutex<Vec<String>>,
}

impl Meter {
    pub fn new(method: Method) -> Self {
        let missing = method == Method::Mincore || !sys::probe_cachestat();
        let m = Meter {
            method,
            cachestat_missing: AtomicBool::new(missing),
            notices: Mutex::new(Vec::new()),
        };
        if missing && method != Method::Mincore {
            m.notice("cachestat(2) is not available on this kernel (ENOSYS): using mmap+mincore; dirty/writeback/evicted counts unknown");
        }
        m
    }

    pub fn notice(&self, s: &str) {
        let mut n = self.notices.lock().unwrap();
        if !n.iter().any(|x| x == s) {
            n.push(s.to_string());
        }
    }

    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.notices.lock().unwrap())
    }

    /// Residency of the part of `f` in `range`.
    pub fn measure(&self, f: &FileRef<'_>, range: ByteRange) -> Result<Residency, FileError> {
        let (start, end) = range.span(f.stat.size);
        self.measure_fd(f.path, f.fd(), start, end, || f.mincore_is_truthful())
    }

    /// Residency of the bytes `[start, end)` of an open file, exactly: the pages are counted
    /// over the page-aligned span, and an edge page the range covers only in part (a file's
    /// last page, an unaligned `--range`) counts for the bytes of it in the range — measured
    /// on its own only when the span is neither all cached nor all cold (one more call, rare).
    /// `truthful` is asked only on the mincore path (see [`sys::mincore_is_truthful`]).
    pub fn measure_fd(
        &self,
        path: &Path,
        fd: BorrowedFd<'_>,
        start: u64,
        end: u64,
        truthful: impl FnOnce() -> bool,
    ) -> Result<Residency, FileError> {
        if end <= start {
            return Ok(Residency::empty());
        }
        let page = sys::page_size();
        let (a, b) = (start / page * page, end.div_ceil(page) * page);
        let mut truthful = Some(truthful);
        let mut truth = None;
        let mut ask = || *truth.get_or_insert_with(|| truthful.take().is_some_and(|t| t()));
        let span = self.counts(path, fd, a, b - a, &mut ask)?;
        // Pages the range covers in part: (first byte of the page, bytes of it in the range).
        let mut edges: Vec<(u64, u64)> = Vec::new();
        let head_in = (a + page).min(end) - start;
        if head_in < page {
            edges.push((a, head_in));
        }
        if b - a > page && !end.is_multiple_of(page) {
            edges.push((b - page, end - (b - page)));
        }
        let mut bytes = span.c.map(|x| x.map(|n| n * page));
        for (off, inside) in edges {
            let edge = if span.mixed() {
                self.counts(path, fd, off, page, &mut ask)?
            } else {
                // All or nothing over the span: the edge page is like every other.
                Counts {
                    pages: 1,
                    c: span.c.map(|x| x.map(|n| (n == span.pages) as u64)),
                    method: span.method,
                }
            };
            for (total, e) in bytes.iter_mut().zip(edge.c) {
                if let (Some(t), Some(e)) = (total.as_mut(), e) {
                    *t = t.saturating_sub(e * (page - inside));
                }
            }
        }
        Ok(Residency {
            bytes: end - start,
            cached: bytes[0],
            dirty: bytes[1],
            writeback: bytes[2],
            evicted: bytes[3],
            recently_evicted: bytes[4],
            method: span.method,
            unknown_reason: (span.method == "unknown").then_some(UNKNOWN_NOT_WRITABLE),
        })
    }

    /// Page counts of the page-aligned `[off, off+len)`.
    fn counts(
        &self,
        path: &Path,
        fd: BorrowedFd<'_>,
        off: u64,
        len: u64,
        truthful: &mut dyn FnMut() -> bool,
    ) -> Result<Counts, FileError> {
        let pages = len.div_ceil(sys::page_size());
        if !self.cachestat_missing.load(Ordering::Relaxed) {
            match sys::cachestat(fd, off, len) {
                Ok(c) => return Ok(Counts::from_cachestat(pages, c)),
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    self.cachestat_missing.store(true, Ordering::Relaxed);
                    self.notice("cachestat(2) is not available on this kernel (ENOSYS): using mmap+mincore; dirty/writeback/evicted counts unknown");
                }
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    if self.method == Method::Cachestat {
                        return Err(FileError::io(path, "cachestat", &e));
                    }
                }
                Err(e) => return Err(FileError::io(path, "cachestat", &e)),
            }
        }
        if !truthful() {
            return Ok(Counts::unknown(pages));
        }
        let n = sys::mincore_count(fd, off, len, None)
            .map_err(|e| FileError::io(path, "mmap+mincore", &e))?;
        Ok(Counts {
            pages,
            c: [Some(n), None, None, None, None],
            method: "mincore",
        })
    }

    /// Per-bucket cached percentage over `[off, off+len)`, `buckets` cells (a `--map` line).
    /// With cachestat each cell is one exact cachestat call over its byte span.
    pub fn map(
        &self,
        f: &FileRef<'_>,
        off: u64,
        len: u64,
        buckets: usize,
    ) -> Result<Vec<Option<u8>>, FileError> {
        let page = sys::page_size();
        let pages = len.div_ceil(page);
        if pages == 0 || buckets == 0 {
            return Ok(Vec::new());
        }
        let cells = (buckets as u64).min(pages);
        let mut out = Vec::with_capacity(cells as usize);
        if !self.cachestat_missing.load(Ordering::Relaxed) {
            let mut ok = true;
            for i in 0..cells {
                let p0 = pages * i / cells;
                let p1 = pages * (i + 1) / cells;
                match sys::cachestat(f.fd(), off + p0 * page, (p1 - p0) * page) {
                    Ok(c) => out.push(Some(cell_percent(c.cache, p1 - p0))),
                    Err(e)
                        if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::ENOSYS)) =>
                    {
                        ok = false;
                        break;
                    }
                    Err(e) => return Err(FileError::io(f.path, "cachestat", &e)),
                }
            }
            if ok {
                return Ok(out);
            }
            out.clear();
        }
        if !f.mincore_is_truthful() {
            return Ok(vec![None; cells as usize]);
        }
        // Bounded: one bool per page of this file only while building its map line.
        let mut bits = Vec::new();
        sys::mincore_count(f.fd(), off, len, Some(&mut bits))
            .map_err(|e| FileError::io(f.path, "mmap+mincore", &e))?;
        for i in 0..cells {
            let p0 = (pages * i / cells) as usize;
            let p1 = (pages * (i + 1) / cells) as usize;
            let n = bits[p0..p1].iter().filter(|&&b| b).count();
            out.push(Some(cell_percent(n as u64, (p1 - p0) as u64)));
        }
        Ok(out)
    }
}

/// Cached share of a map cell, rounded down but never to 0 when a page is cached (one page
/// in a wide cell must not show as nothing).
fn cell_percent(cached: u64, pages: u64) -> u8 {
    let p = (cached * 100 / pages.max(1)).min(100) as u8;
    if cached > 0 {
        p.max(1)
    } else {
        p
    }
}

/// One file's line of a stat report.
#[derive(Debug, Clone, Serialize)]
pub struct FileStat {
    #[serde(flatten, serialize_with = "crate::json::path")]
    pub path: PathBuf,
    /// The file's size; `bytes` (below) is the part measured: all of it, or its part in the range.
    pub size: u64,
    /// Bytes allocated on disk (sparse files have fewer).
    pub allocated_bytes: u64,
    #[serde(flatten)]
    pub residency: Residency,
    /// Per-cell cached % for `--map` (null: unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<Vec<Option<u8>>>,
    #[serde(skip)]
    pub root: usize,
}

impl FileStat {
    /// Cached share of the measured range, 0.0..=100.0 (None when unknown).
    pub fn percent(&self) -> Option<f64> {
        let c = self.residency.cached?;
        Some(if self.residency.bytes == 0 {
            0.0
        } else {
            c as f64 * 100.0 / self.residency.bytes as f64
        })
    }
    pub fn cached_bytes(&self) -> Option<u64> {
        self.residency.cached
    }
}

/// Sums over many files, in bytes (each file's counts capped at its measured bytes).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub files: u64,
    /// Sum of the files' sizes.
    pub size: u64,
    /// Bytes measured: the files' sizes, or their parts in the range.
    pub bytes: u64,
    /// Of the known files only; see `unknown_files`.
    pub cached_bytes: u64,
    /// These four over the files whose method knows them (cachestat); null when none does
    /// (mincore knows only what is cached). `detail_unknown_files` says how many do not.
    pub dirty_bytes: Option<u64>,
    pub writeback_bytes: Option<u64>,
    pub evicted_bytes: Option<u64>,
    pub recently_evicted_bytes: Option<u64>,
    /// Files whose dirty / writeback / evicted figures are unknown.
    pub detail_unknown_files: u64,
    /// Files whose residency could not be known (see `unknown_reason`), and their bytes: the
    /// cached figures above leave them out.
    pub unknown_files: u64,
    pub unknown_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<&'static str>,
}

/// Adds a figure that may be unknown to a sum of the known ones (null until one is known).
fn add_known(sum: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *sum = Some(sum.unwrap_or(0) + v);
    }
}

impl Totals {
    pub fn add(&mut self, size: u64, r: &Residency) {
        self.files += 1;
        self.size += size;
        self.bytes += r.bytes;
        if r.is_unknown() {
            self.unknown_files += 1;
            self.unknown_bytes += r.bytes;
            self.unknown_reason = Some(UNKNOWN_NOT_WRITABLE);
        }
        self.cached_bytes += r.cached.unwrap_or(0);
        add_known(&mut self.dirty_bytes, r.dirty);
        add_known(&mut self.writeback_bytes, r.writeback);
        add_known(&mut self.evicted_bytes, r.evicted);
        add_known(&mut self.recently_evicted_bytes, r.recently_evicted);
        self.detail_unknown_files += r.dirty.is_none() as u64;
    }
    pub fn merge(&mut self, o: &Totals) {
        self.files += o.files;
        self.size += o.size;
        self.bytes += o.bytes;
        self.cached_bytes += o.cached_bytes;
        add_known(&mut self.dirty_bytes, o.dirty_bytes);
        add_known(&mut self.writeback_bytes, o.writeback_bytes);
        add_known(&mut self.evicted_bytes, o.evicted_bytes);
        add_known(&mut self.recently_evicted_bytes, o.recently_evicted_bytes);
        self.detail_unknown_files += o.detail_unknown_files;
        self.unknown_files += o.unknown_files;
        self.unknown_bytes += o.unknown_bytes;
        self.unknown_reason = self.unknown_reason.or(o.unknown_reason);
    }
    /// Cached share of the bytes whose residency is known (None when none is).
    pub fn percent(&self) -> Option<f64> {
        let known = self.bytes - self.unknown_bytes;
        if self.unknown_files == self.files && self.files > 0 {
            return None;
        }
        Some(if known == 0 {
            0.0
        } else {
            self.cached_bytes as f64 * 100.0 / known as f64
        })
    }
}

/// Options of `stat`.
#[derive(Debug, Clone, Default)]
pub struct StatOptions {
    pub walk: WalkOptions,
    pub range: ByteRange,
    pub method: Method,
    /// Cells of the per-file residency map, 0 for none.
    pub map_cells: usize,
    /// Build a per-file record for the sink (off: totals only, the fastest walk).
    pub files: bool,
}

/// One root argument's totals.
#[derive(Debug, Clone, Serialize)]
pub struct RootTotals {
    #[serde(flatten, serialize_with = "crate::json::path")]
    pub path: PathBuf,
    #[serde(flatten)]
    pub totals: Totals,
}

/// What `stat` measured. Per-file lines go to the caller's sink as they are measured, so memory
/// stays flat on any tree; only totals are kept here.
#[derive(Debug, Clone, Serialize)]
pub struct StatReport {
    pub page_size: u64,
    pub roots: Vec<RootTotals>,
    pub total: Totals,
    pub walk: WalkSummary,
    pub errors: Vec<FileError>,
    pub error_count: u64,
    pub notices: Vec<String>,
}

/// Builds a [`FileStat`] for one open file: the one measurement routine every verb reports with.
pub fn file_stat(
    meter: &Meter,
    f: &FileRef<'_>,
    range: ByteRange,
    map_cells: usize,
) -> Result<FileStat, FileError> {
    let (off, len) = range.clamp(f.stat.size);
    let residency = meter.measure(f, range)?;
    let map = if map_cells > 0 {
        Some(meter.map(f, off, len, map_cells)?)
    } else {
        None
    };
    Ok(FileStat {
        path: f.path.to_path_buf(),
        size: f.stat.size,
        allocated_bytes: f.stat.allocated,
        residency,
        map,
        root: f.root,
    })
}

/// Measures every file under `roots`, calling `sink` with each file's line (from many threads).
pub fn stat<K>(roots: &[PathBuf], opts: &StatOptions, sink: K) -> Result<StatReport, crate::Error>
where
    K: Fn(FileStat) + Sync,
{
    let meter = Meter::new(opts.method);
    let errors = ErrorLog::default();
    let totals: Mutex<Vec<Totals>> = Mutex::new(vec![Totals::default(); roots.len()]);
    let summary = walk::walk(
        roots,
        &opts.walk,
        &errors,
        || vec![Totals::default(); roots.len()],
        |local: &mut Vec<Totals>, f| {
            if opts.files {
                match file_stat(&meter, &f, opts.range, opts.map_cells) {
                    Ok(fs) => {
                        local[fs.root].add(fs.size, &fs.residency);
                        sink(fs);
                    }
                    Err(e) => errors.push(e),
                }
                return;
            }
            // Totals only: no per-file record, no path copy.
            match meter.measure(&f, opts.range) {
                Ok(r) => local[f.root].add(f.stat.size, &r),
                Err(e) => errors.push(e),
            }
        },
        |local| {
            let mut t = totals.lock().unwrap();
            for (a, b) in t.iter_mut().zip(local.iter()) {
                a.merge(b);
            }
        },
    )?;
    let per_root = totals.into_inner().unwrap();
    let mut total = Totals::default();
    for t in &per_root {
        total.merge(t);
    }
    Ok(StatReport {
        page_size: sys::page_size(),
        // A root that could not be walked has its error, not a row of zeros.
        roots: roots
            .iter()
            .zip(per_root)
            .enumerate()
            .filter(|(i, _)| !summary.failed_roots.contains(i))
            .map(|(_, (p, totals))| RootTotals {
                path: p.clone(),
                totals,
            })
            .collect(),
        total,
        walk: summary,
        error_count: errors.count(),
        errors: errors.take(),
        notices: meter.take_notices(),
    })
}

/// Progress counters a CLI can poll from another thread while a verb runs.
#[derive(Debug, Default)]
pub struct Progress {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
    /// Known totals (0 when unknown); may grow while a planner is still discovering work.
    pub total_files: AtomicU64,
    pub total_bytes: AtomicU64,
}

impl Progress {
    pub fn add(&self, files: u64, bytes: u64) {
        self.files.fetch_add(files, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ranges_parse() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("x").is_err());
        assert_eq!(
            ByteRange::parse("1M-2M").unwrap(),
            ByteRange {
                start: 1 << 20,
                end: Some(2 << 20)
            }
        );
        assert_eq!(
            ByteRange::parse("4K-").unwrap(),
            ByteRange {
                start: 4096,
                end: None
            }
        );
        assert_eq!(
            ByteRange::parse("-8K").unwrap(),
            ByteRange {
                start: 0,
                end: Some(8192)
            }
        );
        assert!(ByteRange::parse("5M-1M").is_err());
        assert!(ByteRange::parse("5M").is_err());
    }

    #[test]
    fn clamp_aligns_to_pages() {
        let p = sys::page_size();
        let r = ByteRange {
            start: 100,
            end: Some(p + 1),
        };
        assert_eq!(r.clamp(10 * p), (0, 2 * p));
        assert_eq!(ByteRange::default().clamp(0), (0, 0));
        assert_eq!(ByteRange::default().clamp(1), (0, p));
        let r = ByteRange {
            start: 20 * p,
            end: None,
        };
        assert_eq!(r.clamp(10 * p).1, 0);
        // A range starting past the end of a file shorter than a page covers nothing of it
        // (it used to cover the file's last page).
        let r = ByteRange {
            start: 1 << 20,
            end: Some(3 << 20),
        };
        assert_eq!(r.clamp(5000).1, 0);
        assert_eq!(r.span(5000), (5000, 5000));
        assert_eq!(r.span(2 << 20), (1 << 20, 2 << 20));
        assert_eq!(ByteRange::default().span(5000), (0, 5000));
    }
}
