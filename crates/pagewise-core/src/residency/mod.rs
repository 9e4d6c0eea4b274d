//! The one measurement every verb reports with: how much of a file (or of its part in a byte
//! range) is in the page cache, by cachestat(2), with an mmap+mincore fallback that refuses to
//! report numbers it knows to be false ([`Meter`], [`Residency`], [`ByteRange`]).

//!
//! Here: the [`Meter`] and what it reports; byte ranges, page ranges ([`PageRange`]) and
//! sizes in `range`; page-level queries on a descriptor (cached pages, resident pages,
//! cached spans) in `pages`.

mod pages;
mod range;

use pages::mincore_pages;
pub use pages::{cached_pages, cached_spans, resident_pages};
pub use range::{parse_size, ByteRange, PageRange, ParseError};

use crate::error::{FileError, Op};
use crate::sys::{self, CacheStat};
use crate::walk::FileRef;
use serde::Serialize;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// How residency is to be measured (an option of every verb that measures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// Why a residency on FUSE is unknown.
pub const UNKNOWN_FUSE: &str = "a FUSE file: its daemon may read the data through files of its \
own (bindfs, passthrough), whose pages cannot be seen from the FUSE file";

/// Page counts over a page-aligned span, as one cachestat (or mincore) call gives them:
/// `[cached, dirty, writeback, evicted, recently_evicted]`, `None` where the method cannot know.
#[derive(Debug, Clone, Copy)]
struct Counts {
    pages: u64,
    c: [Option<u64>; 5],
    method: MeasuredBy,
    /// Why unknown (only with `MeasuredBy::Unknown`).
    why: Option<&'static str>,
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
            why: None,
        }
    }
    fn unknown(pages: u64, why: &'static str) -> Self {
        Counts {
            pages,
            c: [None; 5],
            method: MeasuredBy::Unknown,
            why: Some(why),
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
                    why: span.why,
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
            unknown_reason: span.why,
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
        if sys::fs_kind(fd) == sys::FsKind::Fuse {
            return Ok(Counts::unknown(pages, UNKNOWN_FUSE));
        }
        if !self.cachestat_missing.load(Ordering::Relaxed) {
            match sys::cachestat(fd, off, len) {
                Ok(c) => return Ok(Counts::from_cachestat(pages, c)),
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    self.cachestat_missing.store(true, Ordering::Relaxed);
                    self.notice("cachestat(2) is not available on this kernel (ENOSYS): using mmap+mincore; dirty/writeback/evicted counts unknown");
                }
                // Blind to this file's pages (overlayfs): through a mapping of it.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    if self.method == Method::Cachestat {
                        return Err(FileError::io(path, Op::Cachestat, &e));
                    }
                    self.notice("overlayfs: measured with mmap+mincore(2) through the file (cachestat(2) sees only the overlay inode's empty cache); dirty/writeback/evicted counts unknown");
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
            return Ok(Counts::unknown(pages, UNKNOWN_NOT_WRITABLE));
        }
        let n = mincore_pages(path, fd, off, len)?;
        Ok(Counts {
            pages,
            c: [Some(n), None, None, None, None],
            method: MeasuredBy::Mincore,
            why: None,
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
        if sys::fs_kind(f.fd()) == sys::FsKind::Fuse {
            return Ok(vec![None; cells as usize]);
        }
        let mut out = Vec::with_capacity(cells as usize);
        if !self.cachestat_missing.load(Ordering::Relaxed) {
            let mut ok = true;
            for i in 0..cells {
                let p0 = pages * i / cells;
                let p1 = pages * (i + 1) / cells;
                match sys::cachestat(f.fd(), off + p0 * page, (p1 - p0) * page) {
                    Ok(c) => out.push(Some(cell_percent(c.cache, p1 - p0))),
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EPERM) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
                        ) =>
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
