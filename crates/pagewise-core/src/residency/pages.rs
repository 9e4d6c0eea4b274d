//! Page-level questions on a descriptor: how many pages of a range are cached
//! ([`cached_pages`]), which ones ([`resident_pages`], mincore), and where the cached parts of
//! a large or sparse span are ([`cached_spans`], halving with cachestat).

use crate::error::{FileError, Op};
use crate::sys;
use std::os::fd::BorrowedFd;
use std::path::Path;

/// Resident pages of the page-aligned `[off, off+len)` by mmap+mincore(2), looking only where
/// [`cached_spans`] finds cached pages: mincore asks the page cache page by page (27 G lookups
/// for a 100 TiB sparse file, minutes), cachestat(2) only walks the entries present. Without
/// cachestat (before Linux 6.5) the whole span is walked: still exact, as slow as the size.
pub(super) fn mincore_pages(
    path: &Path,
    fd: BorrowedFd<'_>,
    off: u64,
    len: u64,
) -> Result<u64, FileError> {
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
        // No cachestat, one blind to this file's pages (overlayfs: mincore through a mapping
        // maps the real file's), or one refused (EPERM: a seccomp filter in a container, or
        // not the caller's file — then mincore is not truthful either, and this says None).
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) | Some(libc::EPERM)
            ) =>
        {
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
