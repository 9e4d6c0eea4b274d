//! The requests of each policy on the descriptor, with their fallbacks; what the buffered
//! policies keep (pages cached before a read) and drop (pages read, pages written once
//! written back).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use super::uncached::{read_full, refused};
use super::{
    align_down, page_cover, Alignment, CachePolicy, DioError, BEHIND_WINDOW, CHUNK, KEEP_BLOCK,
};
use crate::error::Op;
use crate::sys::{self, Advice, AlignedBuf, RwFlags};

/// The descriptor and what every request needs: the policy in force and its fallbacks,
/// the alignment, the drop-behind windows. Kept apart from the bounce buffers so that a
/// request can borrow both.
pub(super) struct Io {
    pub(super) fd: OwnedFd,
    pub(super) path: PathBuf,
    pub(super) policy: CachePolicy,
    pub(super) notice: Option<String>,
    /// A request of the current policy has succeeded: a refusal now is an error, not a reason
    /// to fall back.
    pub(super) proven: bool,
    pub(super) align: Alignment,
    /// On tmpfs/ramfs: said once in the notice (no policy keeps those pages out of memory).
    pub(super) shmem: bool,
    pub(super) behind: Behind,
}

impl Io {
    pub(super) fn fail(&self, op: Op, source: io::Error) -> io::Error {
        DioError::wrap(self.path.clone(), op, source)
    }

    /// A bounce buffer of `len` bytes (at most [`CHUNK`]) at the memory alignment; `ENOMEM`
    /// rather than an abort when it cannot be had.
    pub(super) fn bounce_buffer(&self, len: usize) -> io::Result<AlignedBuf> {
        AlignedBuf::try_alloc(len.min(CHUNK), self.align.memory)
            .map_err(|e| self.fail(Op::PosixMemalign, e))
    }

    /// Records a fallback in the notice and switches the descriptor to `to`.
    pub(super) fn fall_back(&mut self, what: &str, why: &str) -> io::Result<()> {
        let to = self.policy.next().expect("drop-behind is never refused");
        let line = format!("{what} refused ({why}): falling back to {to}");
        self.notice = Some(match self.notice.take() {
            None => format!("{}: {line}", self.path.display()),
            Some(n) => format!("{n}; then {line}"),
        });
        if self.policy == CachePolicy::Direct {
            sys::set_direct(self.fd.as_fd(), false).map_err(|e| self.fail(Op::FcntlSetfl, e))?;
        }
        self.become_buffered(to);
        Ok(())
    }

    /// Makes `policy` (DontCache or DropBehind) the one in force: no kernel readahead (the
    /// window reads ahead), page alignment, and a probe of RWF_DONTCACHE where it can be
    /// made without reading a page.
    pub(super) fn become_buffered(&mut self, policy: CachePolicy) {
        let page = sys::page_size() as usize;
        self.policy = policy;
        self.proven = false;
        self.align = Alignment {
            memory: page,
            offset: page,
        };
        let _ = sys::fadvise(self.fd.as_fd(), 0, 0, Advice::Random);
        if policy == CachePolicy::DontCache {
            // A read far beyond the end checks the flag, then returns 0 without any I/O.
            // EBADF (a write-only descriptor): the first write will tell instead.
            match sys::read_at(self.fd.as_fd(), &mut [0u8; 1], 1 << 62, RwFlags::DONTCACHE) {
                Ok(_) => self.proven = true,
                Err(e) if refused(&e) => {
                    let why = e.to_string();
                    self.policy = CachePolicy::DropBehind;
                    let line = format!(
                        "preadv2(RWF_DONTCACHE) refused ({why}): falling back to drop-behind"
                    );
                    self.notice = Some(match self.notice.take() {
                        None => format!("{}: {line}", self.path.display()),
                        Some(n) => format!("{n}; then {line}"),
                    });
                }
                Err(_) => {}
            }
        }
    }

    /// One read of the current policy (short reads possible); falls back on a first refusal.
    pub(super) fn read(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        loop {
            let fd = self.fd.as_fd();
            let (r, call) = match self.policy {
                CachePolicy::Direct => (sys::pread(fd, buf, off), Op::PreadDirect),
                CachePolicy::DontCache => (
                    sys::read_at(fd, buf, off, RwFlags::DONTCACHE),
                    Op::Preadv2Dontcache,
                ),
                CachePolicy::DropBehind => (sys::pread(fd, buf, off), Op::Pread),
            };
            match r {
                Ok(n) => {
                    self.proven = true;
                    return Ok(n);
                }
                Err(e) if !self.proven && refused(&e) && self.policy != CachePolicy::DropBehind => {
                    self.fall_back(&call.to_string(), &e.to_string())?;
                }
                Err(e) => return Err(self.fail(call, e)),
            }
        }
    }

    /// Reads `buf.len()` bytes at `off` or up to the end of the file. With O_DIRECT `buf` and
    /// `off` must be aligned; a short read there means the end. With the buffered policies,
    /// pages this read brought into the cache are dropped afterwards.
    pub(super) fn read_full(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let keep = if self.policy == CachePolicy::Direct {
            None
        } else {
            Some(Precached::snapshot(self.fd.as_fd(), off, buf.len() as u64))
        };
        // With O_DIRECT a read that ends off a block boundary was the end of the file: the
        // next read (at an unaligned offset) is not made.
        let mut ended = false;
        let want = buf.len();
        let got = read_full(buf, off, want, |b, o| {
            if ended {
                return Ok(0);
            }
            let direct = self.policy == CachePolicy::Direct;
            let n = self.read(b, o)?;
            ended = direct && !n.is_multiple_of(self.align.offset);
            Ok(n)
        })?;
        let keep = match (keep, self.policy) {
            (Some(k), _) => Some(k),
            // Fell back from O_DIRECT during this read: what it read buffered is ours.
            (None, p) if p != CachePolicy::Direct => Some(Precached::none(off, got as u64)),
            _ => None,
        };
        if let Some(k) = keep {
            k.drop_rest(self.fd.as_fd(), off + got as u64);
        }
        Ok(got)
    }

    /// One write of the current policy (short writes possible); falls back on a first refusal.
    pub(super) fn write(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        loop {
            let fd = self.fd.as_fd();
            let (r, call) = match self.policy {
                CachePolicy::Direct => (
                    sys::write_at(fd, buf, off, RwFlags::empty()),
                    Op::PwriteDirect,
                ),
                CachePolicy::DontCache => (
                    sys::write_at(fd, buf, off, RwFlags::DONTCACHE),
                    Op::Pwritev2Dontcache,
                ),
                CachePolicy::DropBehind => {
                    (sys::write_at(fd, buf, off, RwFlags::empty()), Op::Pwrite)
                }
            };
            match r {
                Ok(n) => {
                    self.proven = true;
                    if self.policy != CachePolicy::Direct {
                        let fd = self.fd.as_fd();
                        self.behind
                            .wrote(fd, off, n as u64)
                            .map_err(|e| self.fail(Op::SyncFileRange, e))?;
                    }
                    return Ok(n);
                }
                Err(e) if !self.proven && refused(&e) && self.policy != CachePolicy::DropBehind => {
                    self.fall_back(&call.to_string(), &e.to_string())?;
                }
                Err(e) => return Err(self.fail(call, e)),
            }
        }
    }

    /// Writes all of `buf` at `off` (aligned with O_DIRECT).
    pub(super) fn write_full(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.write(&buf[done..], off + done as u64)? {
                0 => {
                    return Err(self.fail(
                        Op::Pwrite,
                        io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes"),
                    ))
                }
                n => done += n,
            }
        }
        Ok(())
    }

    /// Writes the partial block at the file's end, `buf` at `off`, with its exact bytes: O_DIRECT
    /// off for the moment, then the page written back and dropped.
    pub(super) fn write_tail_buffered(&mut self, buf: &[u8], off: u64) -> io::Result<()> {
        let fd = self.fd.as_fd();
        sys::set_direct(fd, false).map_err(|e| self.fail(Op::FcntlSetfl, e))?;
        let mut done = 0;
        let mut res = Ok(());
        while done < buf.len() {
            match sys::write_at(fd, &buf[done..], off + done as u64, RwFlags::empty()) {
                Ok(0) => {
                    res = Err(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes"));
                    break;
                }
                Ok(n) => done += n,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        let restored = sys::set_direct(fd, true);
        res.map_err(|e| self.fail(Op::Pwrite, e))?;
        restored.map_err(|e| self.fail(Op::FcntlSetfl, e))?;
        let (lo, hi) = page_cover(off, buf.len() as u64);
        let all = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        sys::sync_file_range(fd, lo, hi - lo, all).map_err(|e| self.fail(Op::SyncFileRange, e))?;
        let _ = sys::fadvise(fd, lo, hi - lo, Advice::DontNeed);
        Ok(())
    }

    /// Whether any page of `[off, off+len)` is cached (cachestat, else mincore; false where
    /// neither can tell: nothing is known to be cached, as in [`Precached`]).
    pub(super) fn cached(&self, off: u64, len: u64) -> bool {
        crate::residency::cached_pages(self.fd.as_fd(), off, len).is_some_and(|c| c > 0)
    }

    /// Writes back `[off, off+len)` and drops its pages: pages the kernel brought in itself
    /// (the old last page of a file a write went past, whose tail it zeroes in the cache).
    pub(super) fn write_back_and_drop(&self, off: u64, len: u64) -> io::Result<()> {
        let fd = self.fd.as_fd();
        let all = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        sys::sync_file_range(fd, off, len, all).map_err(|e| self.fail(Op::SyncFileRange, e))?;
        let _ = sys::fadvise(fd, off, len, Advice::DontNeed);
        Ok(())
    }

    /// Waits for the write-back of everything written with the buffered policies and drops it.
    pub(super) fn finish_behind(&mut self) -> io::Result<()> {
        let fd = self.fd.as_fd();
        self.behind
            .finish(fd)
            .map_err(|e| self.fail(Op::SyncFileRange, e))
    }
}

/// Pages of a buffered read's range that were cached before it: those stay, the rest is
/// dropped once read.
struct Precached {
    lo: u64,
    hi: u64,
    /// The page ranges that had cached pages, in order; empty when none had.
    kept: Vec<(u64, u64)>,
}

impl Precached {
    fn none(off: u64, len: u64) -> Self {
        let (lo, hi) = page_cover(off, len);
        Precached {
            lo,
            hi,
            kept: Vec::new(),
        }
    }

    /// One cachestat for the range; only when something in it was cached, one per
    /// [`KEEP_BLOCK`], and one per page of a block cached in part, so what is kept is exact to
    /// the page. Without cachestat (before Linux 6.5) mincore answers where it tells the
    /// truth; where nothing can tell, nothing is known to be cached.
    fn snapshot(fd: BorrowedFd<'_>, off: u64, len: u64) -> Self {
        let mut p = Precached::none(off, len);
        let cached = |a: u64, b: u64| crate::residency::cached_pages(fd, a, b - a).unwrap_or(0);
        if cached(p.lo, p.hi) == 0 {
            return p;
        }
        let mut b = p.lo;
        while b < p.hi {
            let e = (align_down(b, KEEP_BLOCK as usize) + KEEP_BLOCK).min(p.hi);
            p.keep_cached(b, e, &cached);
            b = e;
        }
        p
    }

    /// Keeps what of the block `[b, e)` is cached (`cached` counts the pages of a range): all
    /// of it, or the cached pages one by one.
    fn keep_cached(&mut self, b: u64, e: u64, cached: &impl Fn(u64, u64) -> u64) {
        let page = sys::page_size();
        match cached(b, e) {
            0 => {}
            n if n == (e - b) / page => self.keep(b, e),
            _ => {
                for q in (b..e).step_by(page as usize) {
                    if cached(q, q + page) > 0 {
                        self.keep(q, q + page);
                    }
                }
            }
        }
    }

    /// Adds `[a, b)` to the kept ranges, joined to the last one where they touch.
    fn keep(&mut self, a: u64, b: u64) {
        match self.kept.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => self.kept.push((a, b)),
        }
    }

    /// Drops the pages of `[lo, end)` (`end` widened to a page) outside the kept ranges.
    fn drop_rest(&self, fd: BorrowedFd<'_>, end: u64) {
        let end = page_cover(end, 0).1.min(self.hi);
        let mut from = self.lo;
        for &(a, b) in self.kept.iter().chain([(end, end)].iter()) {
            let to = a.min(end);
            if to > from {
                let _ = sys::fadvise(fd, from, to - from, Advice::DontNeed);
            }
            from = from.max(b);
            if from >= end {
                break;
            }
        }
    }
}

/// Written ranges of the buffered policies whose pages are still to be dropped: `pending`
/// (written, write-back not started) and `started` (write-back started).
#[derive(Default)]
pub(super) struct Behind {
    pending: Option<(u64, u64)>,
    started: Option<(u64, u64)>,
}

impl Behind {
    /// Notes `[off, off+len)` as written; a window full, or a write elsewhere, starts its
    /// write-back and waits for and drops the window before.
    fn wrote(&mut self, fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<()> {
        let (a, b) = (off, off + len);
        match self.pending {
            Some((lo, hi)) if a <= hi && b >= lo => self.pending = Some((lo.min(a), hi.max(b))),
            Some(_) => {
                self.rotate(fd)?;
                self.pending = Some((a, b));
            }
            None => self.pending = Some((a, b)),
        }
        if let Some((lo, hi)) = self.pending {
            if hi - lo >= BEHIND_WINDOW {
                self.rotate(fd)?;
            }
        }
        Ok(())
    }

    fn rotate(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        if let Some((lo, hi)) = self.pending.take() {
            sys::sync_file_range(fd, lo, hi - lo, sys::SFR_WRITE)?;
            if let Some(s) = self.started.replace((lo, hi)) {
                Self::settle(fd, s)?;
            }
        }
        Ok(())
    }

    /// Waits for the write-back of a range and drops its pages.
    fn settle(fd: BorrowedFd<'_>, (lo, hi): (u64, u64)) -> io::Result<()> {
        let (lo, hi) = page_cover(lo, hi - lo);
        let all = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
        sys::sync_file_range(fd, lo, hi - lo, all)?;
        let _ = sys::fadvise(fd, lo, hi - lo, Advice::DontNeed);
        Ok(())
    }

    fn finish(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let (s, p) = (self.started.take(), self.pending.take());
        for r in [s, p].into_iter().flatten() {
            Self::settle(fd, r)?;
        }
        Ok(())
    }
}
