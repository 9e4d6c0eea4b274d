//! The one measurement every verb reports with: how much of a file (or of its part in a byte
//! range) is in the page cache, by cachestat(2), with an mmap+mincore fallback that refuses to
//! report numbers it knows to be false ([`Meter`], [`Residency`], [`ByteRange`]).

use crate::error::{FileError, Op};
use crate::sys::{self, CacheStat};
use crate::walk::FileRef;
use serde::Serialize;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A byte range of every file: `[start, end)`, `end == None` meaning to the end of the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// End (exclusive), `None` for the end of each file.
    pub end: Option<u64>,
}

impl ByteRange {
    /// Parses `START-END`, `START-` or `-END` with optional K/M/G/T (binary) suffixes.
    pub fn parse(s: &str) -> Result<ByteRange, ParseError> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| ParseError::RangeShape(s.to_string()))?;
        let start = if a.is_empty() { 0 } else { parse_size(a)? };
        let end = if b.is_empty() {
            None
        } else {
            Some(parse_size(b)?)
        };
        if let Some(e) = end {
            if e <= start {
                return Err(ParseError::RangeOrder(s.to_string()));
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

/// Why a size or a range could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A suffix other than K, M, G, T, P (optionally followed by `iB` or `B`).
    #[error("unknown size unit in '{0}'")]
    UnknownUnit(String),
    /// Not a non-negative number.
    #[error("'{0}' is not a size")]
    NotASize(String),
    /// A range without its `-`.
    #[error("range '{0}' must look like START-END, START- or -END")]
    RangeShape(String),
    /// A range whose end is not after its start.
    #[error("range '{0}': end must be after start")]
    RangeOrder(String),
    /// A size of 2^64 bytes or more (or infinite).
    #[error("'{0}' is larger than any size (2^64 bytes)")]
    TooLarge(String),
}

/// Parses `4096`, `64K`, `1.5G`, `2MiB` (binary units; B optional).
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
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
                _ => return Err(ParseError::UnknownUnit(s.to_string())),
            };
            (&t[..t.len() - 1], m)
        }
        _ => (t, 1),
    };
    // Whole numbers exactly (an f64 holds 53 bits); beyond 2^64 bytes refused, not saturated.
    if let Ok(n) = num.parse::<u64>() {
        return n
            .checked_mul(mult)
            .ok_or_else(|| ParseError::TooLarge(s.to_string()));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| ParseError::NotASize(s.to_string()))?;
    if v.is_nan() || v < 0.0 {
        return Err(ParseError::NotASize(s.to_string()));
    }
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return Err(ParseError::TooLarge(s.to_string()));
    }
    Ok(bytes as u64)
}

/// How residency is to be measured (an option of every verb that measures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// cachestat, falling back to mincore when missing or refused.
    #[default]
    Auto,
    /// cachestat(2) only (Linux >= 6.5).
    Cachestat,
    /// mmap + mincore(2) only: knows what is cached, nothing of dirty or evicted pages.
    Mincore,
}

/// How one residency was measured, as reported (`"cachestat"`, `"mincore"`, `"unknown"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MeasuredBy {
    /// cachestat(2): every figure known.
    #[default]
    Cachestat,
    /// mmap + mincore(2): only the cached figure is known.
    Mincore,
    /// Neither could tell (see the residency's `unknown_reason`).
    Unknown,
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
    method: MeasuredBy,
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
            method: MeasuredBy::Cachestat,
        }
    }
    fn unknown(pages: u64) -> Self {
        Counts {
            pages,
            c: [None; 5],
            method: MeasuredBy::Unknown,
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
    /// Bytes cached (null: unknown).
    pub cached: Option<u64>,
    #[serde(rename = "dirty_bytes")]
    /// Bytes dirty (null: unknown, e.g. mincore).
    pub dirty: Option<u64>,
    #[serde(rename = "writeback_bytes")]
    /// Bytes under writeback (null: unknown).
    pub writeback: Option<u64>,
    #[serde(rename = "evicted_bytes")]
    /// Bytes evicted since the file was opened by anyone (cachestat's count; null: unknown).
    pub evicted: Option<u64>,
    #[serde(rename = "recently_evicted_bytes")]
    /// Bytes evicted recently (cachestat's workingset count; null: unknown).
    pub recently_evicted: Option<u64>,
    /// How it was measured.
    pub method: MeasuredBy,
    /// Why the figures are null (only when `method` is "unknown").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<&'static str>,
}

impl Residency {
    /// Cached bytes, 0 when unknown.
    pub fn cached_or_zero(&self) -> u64 {
        self.cached.unwrap_or(0)
    }
    /// True when not even the cached figure is known.
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
            method: MeasuredBy::Cachestat,
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
    /// A meter using `method` (Auto: cachestat, falling back to mincore).
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

    /// Adds a one-line notice once (fallbacks taken).
    pub fn notice(&self, s: &str) {
        let mut n = self.notices.lock().unwrap();
        if !n.iter().any(|x| x == s) {
            n.push(s.to_string());
        }
    }

    /// The notices so far, each once.
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
            unknown_reason: (span.method == MeasuredBy::Unknown).then_some(UNKNOWN_NOT_WRITABLE),
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
                        return Err(FileError::io(path, Op::Cachestat, &e));
                    }
                }
                Err(e) => return Err(FileError::io(path, Op::Cachestat, &e)),
            }
        }
        if !truthful() {
            return Ok(Counts::unknown(pages));
        }
        let n = mincore_pages(path, fd, off, len)?;
        Ok(Counts {
            pages,
            c: [Some(n), None, None, None, None],
            method: MeasuredBy::Mincore,
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
                    Err(e) => return Err(FileError::io(f.path, Op::Cachestat, &e)),
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
        // One count per cell (no per-page vector: a 16 TiB file would need 4 G of them), each
        // over the cell's cached parts only (see `mincore_pages`).
        for i in 0..cells {
            let p0 = pages * i / cells;
            let p1 = pages * (i + 1) / cells;
            let n = mincore_pages(f.path, f.fd(), off + p0 * page, (p1 - p0) * page)?;
            out.push(Some(cell_percent(n, p1 - p0)));
        }
        Ok(out)
    }
}

/// Resident pages of the page-aligned `[off, off+len)` by mmap+mincore(2), looking only where
/// [`cached_spans`] finds cached pages: mincore asks the page cache page by page (27 G lookups
/// for a 100 TiB sparse file, minutes), cachestat(2) only walks the entries present. Without
/// cachestat (before Linux 6.5) the whole span is walked: still exact, as slow as the size.
fn mincore_pages(path: &Path, fd: BorrowedFd<'_>, off: u64, len: u64) -> Result<u64, FileError> {
    let mut n = 0;
    let mut count = |o: u64, l: u64| -> Result<(), FileError> {
        n += sys::mincore_count(fd, o, l, None)
            .map_err(|e| FileError::io(path, Op::MmapMincore, &e))?;
        Ok(())
    };
    if !cached_spans(path, fd, off, len, &mut count)? {
        count(off, len)?;
    }
    Ok(n)
}

/// Cached pages of the page-aligned `[off, off+len)` (`len` 0: to the end of the file) of an
/// open file, for a verb's own bookkeeping (what copy found cached before it read, what it
/// leaves behind): cachestat(2); where the kernel has none (before Linux 6.5), mmap+mincore when
/// mincore tells this process the truth ([`sys::mincore_is_truthful_fd`]); None when neither can say (callers report `unknown`).
pub fn cached_pages(fd: BorrowedFd<'_>, off: u64, len: u64) -> Option<u64> {
    match sys::cachestat(fd, off, len) {
        Ok(c) => Some(c.cache),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let st = sys::fstat(fd).ok()?;
            if !sys::mincore_is_truthful_fd(fd, &st) {
                return None;
            }
            let page = sys::page_size();
            let end = match len {
                0 => st.size.div_ceil(page) * page,
                l => off.saturating_add(l).min(st.size.div_ceil(page) * page),
            };
            if end <= off {
                return Some(0);
            }
            sys::mincore_count(fd, off, end - off, None).ok()
        }
        Err(_) => None,
    }
}

/// Which pages of the page-aligned `[off, off+len)` of an open file are resident, one bool per
/// page, by the same mmap+mincore(2) as [`Meter`]'s counts; None when mincore would lie about
/// the file (`truthful` false: see [`sys::mincore_is_truthful`]). mincore sees a page only
/// once it is up to date: a page still being read in is not resident here (cachestat counts
/// it). For callers that must know which pages, not how many (`run` without cachestat).
pub fn resident_pages(
    path: &Path,
    fd: BorrowedFd<'_>,
    off: u64,
    len: u64,
    truthful: impl FnOnce() -> bool,
) -> Result<Option<Vec<bool>>, FileError> {
    if !truthful() {
        return Ok(None);
    }
    let pages = usize::try_from(len.div_ceil(sys::page_size())).unwrap_or(usize::MAX);
    let mut v = Vec::new();
    v.try_reserve_exact(pages).map_err(|_| {
        FileError::io(
            path,
            Op::MmapMincore,
            &std::io::Error::from_raw_os_error(libc::ENOMEM),
        )
    })?;
    sys::mincore_count(fd, off, len, Some(&mut v))
        .map_err(|e| FileError::io(path, Op::MmapMincore, &e))?;
    Ok(Some(v))
}

/// Parts of a span handed over whole once cachestat finds a cached page in them: 64 MiB
/// (16,384 pages, one mincore call or one pagemap window).
const SPAN_LEAF: u64 = 64 << 20;

/// Calls `each(off, len)`, in ascending order, for page-aligned parts of `[off, off+len)` that
/// together hold every page of it in the page cache — holes of a sparse file included (a read
/// of a hole caches its zeros: 1 MiB read of an ext4 hole shows 256 pages in cachestat). Found
/// by halving with cachestat(2), which walks only the cache entries present: a span with
/// nothing cached costs one call whatever its length, so 1 MiB cached in a 16 TiB sparse file
/// takes ~50 calls, where SEEK_DATA would miss the cached holes. Adjacent parts are merged up
/// to [`sys::MINCORE_WINDOW`].
///
/// Returns false, calling nothing, when cachestat cannot tell (ENOSYS before Linux 6.5; EPERM
/// for a file the caller neither owns nor may write): the caller looks at the whole span.
pub fn cached_spans(
    path: &Path,
    fd: BorrowedFd<'_>,
    off: u64,
    len: u64,
    each: &mut dyn FnMut(u64, u64) -> Result<(), FileError>,
) -> Result<bool, FileError> {
    if len == 0 {
        return Ok(true);
    }
    if !sys::probe_cachestat() {
        return Ok(false);
    }
    let first = match sys::cachestat(fd, off, len) {
        Ok(c) => c.cache,
        Err(_) => return Ok(false),
    };
    let page = sys::page_size();
    // Parts to look at, last first; each with its cached pages once known. The depth of the
    // halving is at most 64, so the stack holds at most ~64 parts.
    let mut stack: Vec<(u64, u64, Option<u64>)> = vec![(off, len, Some(first))];
    let mut pending: Option<(u64, u64)> = None;
    while let Some((o, l, known)) = stack.pop() {
        let cached = match known {
            Some(c) => c,
            None => {
                sys::cachestat(fd, o, l)
                    .map_err(|e| FileError::io(path, Op::Cachestat, &e))?
                    .cache
            }
        };
        if cached == 0 {
            continue;
        }
        let pages = l.div_ceil(page);
        if cached < pages && l > SPAN_LEAF {
            let mid = o + pages / 2 * page;
            stack.push((mid, o + l - mid, None));
            stack.push((o, mid - o, None));
            continue;
        }
        pending = match pending {
            Some((po, pl)) if po + pl == o && pl + l <= sys::MINCORE_WINDOW => Some((po, pl + l)),
            Some((po, pl)) => {
                each(po, pl)?;
                Some((o, l))
            }
            None => Some((o, l)),
        };
    }
    if let Some((po, pl)) = pending {
        each(po, pl)?;
    }
    Ok(true)
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
