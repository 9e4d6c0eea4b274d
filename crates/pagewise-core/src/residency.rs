//! `stat`: how much of each file is in the page cache, measured by cachestat(2) with an
//! mmap+mincore fallback that refuses to report numbers it knows to be false.

use crate::error::{ErrorLog, FileError};
use crate::sys::{self, CacheStat};
use crate::walk::{self, FileRef, WalkOptions, WalkSummary};
use serde::Serialize;
use std::io;
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

    /// The page-aligned `(offset, length)` of this range within a file of `size` bytes.
    pub fn clamp(&self, size: u64) -> (u64, u64) {
        let page = sys::page_size();
        let start = (self.start.min(size) / page) * page;
        let end = self.end.unwrap_or(u64::MAX).min(size);
        let end = end.div_ceil(page) * page;
        (start, end.saturating_sub(start))
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

/// The cache state of one file (or of its `--range`). Page counts; `None` where the method
/// cannot know (mincore knows nothing of dirty pages; mincore on a file the caller may not write
/// would lie, so everything is `None`: "unknown").
#[derive(Debug, Clone, Default, Serialize)]
pub struct Residency {
    pub pages: u64,
    pub cached: Option<u64>,
    pub dirty: Option<u64>,
    pub writeback: Option<u64>,
    pub evicted: Option<u64>,
    pub recently_evicted: Option<u64>,
    /// "cachestat", "mincore" or "unknown".
    pub method: &'static str,
}

impl Residency {
    fn from_cachestat(pages: u64, c: CacheStat) -> Self {
        Residency {
            pages,
            cached: Some(c.cache),
            dirty: Some(c.dirty),
            writeback: Some(c.writeback),
            evicted: Some(c.evicted),
            recently_evicted: Some(c.recently_evicted),
            method: "cachestat",
        }
    }
    pub fn unknown(pages: u64) -> Self {
        Residency {
            pages,
            method: "unknown",
            ..Default::default()
        }
    }
    /// Cached pages, 0 when unknown.
    pub fn cached_or_zero(&self) -> u64 {
        self.cached.unwrap_or(0)
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

    /// Residency of `[off, off+len)` of `f`.
    pub fn measure(&self, f: &FileRef<'_>, off: u64, len: u64) -> Result<Residency, FileError> {
        self.measure_fd(f.path, f.fd(), off, len, || f.mincore_is_truthful())
    }

    /// Residency of `[off, off+len)` of an open file; `truthful` is asked only on the mincore
    /// path (see [`sys::mincore_is_truthful`]).
    pub fn measure_fd(
        &self,
        path: &Path,
        fd: BorrowedFd<'_>,
        off: u64,
        len: u64,
        truthful: impl FnOnce() -> bool,
    ) -> Result<Residency, FileError> {
        let page = sys::page_size();
        let pages = len.div_ceil(page);
        if len == 0 {
            return Ok(Residency {
                pages: 0,
                cached: Some(0),
                dirty: Some(0),
                writeback: Some(0),
                evicted: Some(0),
                recently_evicted: Some(0),
                method: "cachestat",
            });
        }
        if !self.cachestat_missing.load(Ordering::Relaxed) {
            match sys::cachestat(fd, off, len) {
                Ok(c) => return Ok(Residency::from_cachestat(pages, c)),
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    self.cachestat_missing.store(true, Ordering::Relaxed);
                    self.notice("cachestat(2) is not available on this kernel (ENOSYS): using mmap+mincore; dirty/writeback/evicted counts unknown");
                }
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    if self.method == Method::Cachestat {
                        return Err(FileError::io(path, "cachestat", &e));
                    }
                    self.notice("cachestat(2) refused some files (EPERM: not owned and not writable): tried mincore for them");
                }
                Err(e) => return Err(FileError::io(path, "cachestat", &e)),
            }
        }
        self.measure_mincore(path, fd, off, len, truthful(), None)
    }

    /// mincore path; with `map`, fills one bool per page.
    fn measure_mincore(
        &self,
        path: &Path,
        fd: BorrowedFd<'_>,
        off: u64,
        len: u64,
        truthful: bool,
        map: Option<&mut Vec<bool>>,
    ) -> Result<Residency, FileError> {
        let pages = len.div_ceil(sys::page_size());
        if !truthful {
            self.notice("mincore(2) cannot tell for files you neither own nor may write (it reports them fully cached): shown as unknown");
            return Ok(Residency::unknown(pages));
        }
        let n = sys::mincore_count(fd, off, len, map)
            .map_err(|e| FileError::io(path, "mmap+mincore", &e))?;
        Ok(Residency {
            pages,
            cached: Some(n),
            method: "mincore",
            ..Default::default()
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
                    Ok(c) => out.push(Some((c.cache * 100 / (p1 - p0).max(1)) as u8)),
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
        self.measure_mincore(f.path, f.fd(), off, len, true, Some(&mut bits))?;
        for i in 0..cells {
            let p0 = (pages * i / cells) as usize;
            let p1 = (pages * (i + 1) / cells) as usize;
            let n = bits[p0..p1].iter().filter(|&&b| b).count();
            out.push(Some((n * 100 / (p1 - p0).max(1)) as u8));
        }
        Ok(out)
    }
}

/// One file's line of a stat report.
#[derive(Debug, Clone, Serialize)]
pub struct FileStat {
    pub path: PathBuf,
    pub size: u64,
    /// Bytes allocated on disk (sparse files have fewer).
    pub allocated: u64,
    #[serde(flatten)]
    pub residency: Residency,
    /// Cached bytes (`cached` pages × page size, capped at the size), None when unknown.
    pub cached_bytes: Option<u64>,
    /// Per-cell cached % for `--map`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<Vec<Option<u8>>>,
    #[serde(skip)]
    pub root: usize,
}

impl FileStat {
    /// Cached share of the measured range, 0.0..=100.0 (None when unknown).
    pub fn percent(&self) -> Option<f64> {
        let c = self.residency.cached?;
        Some(if self.residency.pages == 0 {
            0.0
        } else {
            c as f64 * 100.0 / self.residency.pages as f64
        })
    }
}

/// Sums over many files.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub files: u64,
    pub size: u64,
    pub pages: u64,
    pub cached_pages: u64,
    pub cached_bytes: u64,
    pub dirty_pages: u64,
    pub writeback_pages: u64,
    pub evicted_pages: u64,
    pub recently_evicted_pages: u64,
    /// Files whose residency could not be known (mincore would lie).
    pub unknown_files: u64,
}

impl Totals {
    pub fn add(&mut self, f: &FileStat) {
        self.add_parts(f.size, &f.residency, f.cached_bytes);
    }
    pub fn add_parts(&mut self, size: u64, r: &Residency, cached_bytes: Option<u64>) {
        self.files += 1;
        self.size += size;
        self.pages += r.pages;
        if r.cached.is_none() {
            self.unknown_files += 1;
        }
        self.cached_pages += r.cached.unwrap_or(0);
        self.cached_bytes += cached_bytes.unwrap_or(0);
        self.dirty_pages += r.dirty.unwrap_or(0);
        self.writeback_pages += r.writeback.unwrap_or(0);
        self.evicted_pages += r.evicted.unwrap_or(0);
        self.recently_evicted_pages += r.recently_evicted.unwrap_or(0);
    }
    pub fn merge(&mut self, o: &Totals) {
        self.files += o.files;
        self.size += o.size;
        self.pages += o.pages;
        self.cached_pages += o.cached_pages;
        self.cached_bytes += o.cached_bytes;
        self.dirty_pages += o.dirty_pages;
        self.writeback_pages += o.writeback_pages;
        self.evicted_pages += o.evicted_pages;
        self.recently_evicted_pages += o.recently_evicted_pages;
        self.unknown_files += o.unknown_files;
    }
    /// Cached share of all measured pages.
    pub fn percent(&self) -> f64 {
        if self.pages == 0 {
            0.0
        } else {
            self.cached_pages as f64 * 100.0 / self.pages as f64
        }
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

/// Cached bytes of a range: cached pages, capped at the bytes the range really covers.
fn cached_bytes(pages: u64, range: ByteRange, size: u64, off: u64) -> u64 {
    let real_end = range.end.unwrap_or(u64::MAX).min(size);
    (pages * sys::page_size()).min(real_end.saturating_sub(off))
}

/// Builds a [`FileStat`] for one open file: the one measurement routine every verb reports with.
pub fn file_stat(
    meter: &Meter,
    f: &FileRef<'_>,
    range: ByteRange,
    map_cells: usize,
) -> Result<FileStat, FileError> {
    let (off, len) = range.clamp(f.stat.size);
    let residency = meter.measure(f, off, len)?;
    let map = if map_cells > 0 {
        Some(meter.map(f, off, len, map_cells)?)
    } else {
        None
    };
    let cached_bytes = residency
        .cached
        .map(|c| cached_bytes(c, range, f.stat.size, off));
    Ok(FileStat {
        path: f.path.to_path_buf(),
        size: f.stat.size,
        allocated: f.stat.allocated,
        residency,
        cached_bytes,
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
                        local[fs.root].add(&fs);
                        sink(fs);
                    }
                    Err(e) => errors.push(e),
                }
                return;
            }
            // Totals only: no per-file record, no path copy.
            let (off, len) = opts.range.clamp(f.stat.size);
            match meter.measure(&f, off, len) {
                Ok(r) => {
                    let cached = r
                        .cached
                        .map(|c| cached_bytes(c, opts.range, f.stat.size, off));
                    local[f.root].add_parts(f.stat.size, &r, cached);
                }
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
        roots: roots
            .iter()
            .zip(per_root)
            .map(|(p, totals)| RootTotals {
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

/// Used by tests and by verbs needing one file's state by path.
pub fn stat_one(path: &std::path::Path) -> io::Result<CacheStat> {
    let f = std::fs::File::open(path)?;
    use std::os::fd::AsFd;
    sys::cachestat(f.as_fd(), 0, 0)
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
        assert_eq!(r.clamp(10 * p), (10 * p, 0));
    }
}
