//! The assistant: page faults and page-cache adds of the followed processes, through the
//! predictor, to `fadvise(WILLNEED)` on the same file opened by handle, issued by the thread
//! that reads the events, as soon as each is parsed.
//!
//! A fault is a *miss* when its page is not among the ranges recently seen entering the cache
//! (`mm_filemap_add_to_page_cache` of the target, which the kernel emits right after the fault
//! of a page that was not cached) or prefetched by us.

use super::predictor::{Access, Config, Detector, Predictor};
use super::report::{histogram, percentile, AssistReport, Latencies};
use crate::sys::{self, Advice, FileId};
use crate::trace::tracefs::RawEvent;
use crate::trace::{Mounts, Witnessed};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// How the assistant predicts and prefetches (`assist -p`, and `run --assist`).
#[derive(Debug, Clone)]
pub struct Prefetch {
    /// The predictor's detectors and windows. Default: [`Config::for_page_size`] of this
    /// system's page size.
    pub config: Config,
    /// Files kept open at once (the least recently used is closed). Default: 1024.
    pub max_open: usize,
}

impl Default for Prefetch {
    fn default() -> Self {
        Prefetch {
            config: Config::for_page_size(sys::page_size()),
            max_open: 1024,
        }
    }
}

/// Latencies of the prefetches issued. A prefetch is issued by the thread reading the events,
/// at once: handing it to other threads (four, so one waiting in the kernel would not delay
/// the next) cost a wake-up each, and with drop-behind as background work no longer delaying
/// the submissions, inline issue was faster (fio mmap randread 128k on 2 CPUs, 10 s: p50 23 us
/// / p99 185–193 us inline against 67–80 / 233–299 with four issuer threads, 521–604 MiB/s
/// against 454–458 under the 64M default; 18–19 / 152–161 us against 34–38 / 165–237 with
/// `--max-cache none`).
struct IssueStats {
    issued: Latencies,
    submitted: Latencies,
}

impl IssueStats {
    fn new() -> IssueStats {
        IssueStats {
            issued: Latencies::new(),
            submitted: Latencies::new(),
        }
    }

    /// Prefetches bytes `[off, off + len)` of `fd`, a piece of a window issued for a fault at
    /// `fault_us`, and counts the window's latencies from the fault: the issue latency at its
    /// `first` piece, the queued latency when its `last` piece has returned.
    fn issue(&self, fd: BorrowedFd, off: u64, len: u64, fault_us: u64, first: bool, last: bool) {
        let since_fault = || (sys::monotonic_ns() / 1000).saturating_sub(fault_us);
        if first {
            self.issued.add(since_fault());
        }
        let _ = sys::fadvise(fd, off, len, Advice::WillNeed);
        if last {
            self.submitted.add(since_fault());
        }
    }
}

/// Windows longer than [`WHOLE_PAGES`] are issued in pieces of this many pages: the piece
/// holding the faulting page at once, the others when no event waits (see
/// [`Assistant::issue_deferred`]). The kernel takes ~1 us per page to queue a WILLNEED
/// (allocation, charge, page cache, bio): a miss that arrived during a 1 MiB window's call
/// waited up to ~250 us for it. fio mmap randread 1m under `run --assist`, 4 GiB, 10 s
/// (five runs each): fault-to-prefetch p99 160–252 us with pieces of 16 pages, 234–389 with
/// 32, 242–338 with 64, 397–437 whole; the same throughput.
const PIECE_PAGES: u64 = 16;

/// Windows of at most this many pages are issued whole: splitting 128 KiB windows cost fio
/// mmap randread 128k a little (p99 204–232 us against 174–180 whole, two runs each).
const WHOLE_PAGES: u64 = 32;

/// Pieces waiting at most. A reader that never runs out of events (misses arriving faster
/// than it issues pieces) drops the oldest, which the command has most likely passed by
/// then; their bytes leave `prefetched_bytes`.
const MAX_DEFERRED: usize = 1024;

/// A piece of a window still to issue: pages `[start, end)` of file `key`, for a fault at
/// `fault_us`; `last`: the window's last piece.
struct Deferred {
    key: FileId,
    start: u64,
    end: u64,
    fault_us: u64,
    last: bool,
}

/// A prefetched window and which of its pages were used (bit per page).
struct Issued {
    start: u64,
    end: u64,
    used: Vec<u64>,
    /// The command faulted in it (the fault it was issued for counts).
    faulted: bool,
    /// Every page was used: reported once through [`Assistant::take_consumed`].
    consumed: bool,
}

impl Issued {
    /// Marks pages `[from, to)` used (a fault and its fault-around chunk); true when they
    /// touch the window.
    fn mark(&mut self, from: u64, to: u64) -> bool {
        let (a, b) = (from.max(self.start), to.min(self.end));
        for p in a..b {
            let i = (p - self.start) as usize;
            self.used[i / 64] |= 1 << (i % 64);
        }
        a < b
    }

    /// Marks pages `[from, to)` used by the command (a fault and its fault-around chunk, or
    /// what fault-around mapped), as faulted in; the first time every page is used, the
    /// window goes to `consumed` as `(file, first page, pages)`. True when the pages touch
    /// the window.
    fn use_pages(
        &mut self,
        from: u64,
        to: u64,
        key: FileId,
        consumed: &mut Vec<(FileId, u64, u64)>,
    ) -> bool {
        let touched = self.mark(from, to);
        self.faulted |= touched;
        if touched && !self.consumed && self.unused() == 0 {
            self.consumed = true;
            consumed.push((key, self.start, self.end - self.start));
        }
        touched
    }

    /// Pages not marked: the window is not used up until this is 0 (what drop-behind waits
    /// for).
    fn unused(&self) -> u64 {
        (self.end - self.start) - self.used.iter().map(|w| w.count_ones() as u64).sum::<u64>()
    }

    /// Pages of it the command cannot be shown to have used: all of them when it never
    /// faulted in the window (a window ahead of a sequential or stride reader it never
    /// reached), else none. Pages of a window need no fault to be used
    /// (fault-around maps 16 pages around a fault; since Linux 6.18 a fault maps a whole large
    /// folio, and memcpy of 1 MiB faults at its first and last page only), so a window
    /// partly faulted in is counted as used and the estimate is a lower bound: counting
    /// unfaulted pages called 40–90% of fio's windows wasted when they were read whole.
    fn unread(&self) -> u64 {
        if self.faulted {
            0
        } else {
            self.end - self.start
        }
    }
}

struct Slot {
    id: u64,
    fd: Option<Arc<OwnedFd>>,
    pages: u64,
    /// Ranges recently seen entering the cache (ring).
    known: VecDeque<(u64, u64)>,
    issued: VecDeque<Issued>,
    last_use: u64,
}

impl Slot {
    /// Pages `[from, to)` are known to be cached (the ring of recent ranges).
    fn seen(&mut self, from: u64, to: u64) {
        if self.known.len() >= KNOWN_RANGES {
            self.known.pop_front();
        }
        self.known.push_back((from, to));
    }
}

const KNOWN_RANGES: usize = 256;
const ISSUED_WINDOWS: usize = 64;

/// The assistant's state: feed it trace events with [`Assistant::on_event`].
pub struct Assistant {
    pred: Predictor,
    page: u64,
    max_open: usize,
    slots: HashMap<FileId, Slot>,
    next_id: u64,
    tick: u64,
    mounts: Mounts,
    /// The target's files as seen (by `run --assist`'s witness, or looked up in /proc/PID
    /// of the faulting thread): the way to them on every file system, without privileges.
    seen: Arc<Witnessed>,
    r: AssistReport,
    stats: IssueStats,
    wasted: u64,
    /// Windows whose every page the target has used since the last
    /// [`Assistant::take_consumed`].
    consumed: Vec<(FileId, u64, u64)>,
    /// Pieces of windows still to issue, oldest first.
    deferred: VecDeque<Deferred>,
}

impl Assistant {
    /// An assistant with nothing seen yet.
    pub fn new(opts: &Prefetch) -> Assistant {
        Assistant::with_witness(opts, Arc::default())
    }

    /// An assistant that finds the target's files through `seen` (shared with `run`'s
    /// witness).
    pub fn with_witness(opts: &Prefetch, seen: Arc<Witnessed>) -> Assistant {
        Assistant {
            seen,
            pred: Predictor::new(opts.config.clone()),
            page: sys::page_size(),
            // Under a small RLIMIT_NOFILE the files kept open shrink to half of what may be open.
            max_open: opts.max_open.min(sys::fd_budget_strict() / 2).max(1),
            slots: HashMap::new(),
            next_id: 0,
            tick: 0,
            mounts: Mounts::default(),
            r: AssistReport::default(),
            stats: IssueStats::new(),
            wasted: 0,
            consumed: Vec::new(),
            deferred: VecDeque::new(),
        }
    }

    fn slot(&mut self, key: FileId, tid: u32) -> &mut Slot {
        self.tick += 1;
        if !self.slots.contains_key(&key) {
            if self.slots.len() >= self.max_open {
                let old = self
                    .slots
                    .iter()
                    .min_by_key(|(_, s)| s.last_use)
                    .map(|(k, _)| *k);
                if let Some(s) = old.and_then(|k| self.slots.remove(&k)) {
                    self.wasted += s.issued.iter().map(Issued::unread).sum::<u64>();
                }
            }
            let fd = self.seen.find(key, tid).ok().or_else(|| {
                crate::trace::open_inode(key, &self.mounts)
                    .ok()
                    .map(Arc::new)
            });
            let pages = fd
                .as_ref()
                .and_then(|fd| sys::fstat(fd.as_fd()).ok())
                .map_or(0, |st| st.size.div_ceil(self.page));
            self.r.files += 1;
            // Shared memory, memfd and other files of no mounted file system have no file to
            // prefetch from: not a file the assistant failed to reach.
            if fd.is_none() && !self.mounts.is_metadata(key) {
                self.r.files_unreachable += 1;
            }
            self.next_id += 1;
            self.slots.insert(
                key,
                Slot {
                    id: self.next_id,
                    fd,
                    pages,
                    known: VecDeque::new(),
                    issued: VecDeque::new(),
                    last_use: 0,
                },
            );
        }
        let s = self.slots.get_mut(&key).unwrap();
        s.last_use = self.tick;
        s
    }

    /// Handles one trace event; returns the windows prefetched, as `(file, first page, pages)`.
    pub fn on_event(&mut self, e: &RawEvent) -> Vec<(FileId, u64, u64)> {
        let key = FileId(e.dev_major, e.dev_minor, e.ino);
        let p = e.ofs / self.page;
        if e.mapped > 0 {
            return self.on_mapped(key, p, p + e.mapped as u64, e);
        }
        if !e.fault {
            let n = 1u64 << e.order.min(20);
            self.slot(key, e.pid).seen(p, p + n);
            return Vec::new();
        }
        self.r.faults += 1;
        self.slot(key, e.pid);
        let s = self.slots.get_mut(&key).unwrap();
        let id = s.id;
        // A sampled fault says whether it waited for I/O: a major fault is a miss (its page
        // entered the cache, and was seen doing so, before the sample) unless it waited for
        // a window we issued; a minor one found its page cached. The tracepoint does not say:
        // the pages recently seen entering the cache tell.
        let cached = match e.major {
            Some(true) => s.issued.iter().any(|w| w.start <= p && p < w.end),
            Some(false) => true,
            None => s.known.iter().any(|&(a, b)| a <= p && p < b),
        };
        let mut on_prefetched = false;
        let fa = self.pred.config().fault_around;
        for w in s.issued.iter_mut() {
            if w.start <= p && p < w.end {
                on_prefetched = true;
            }
            w.use_pages(p, p + fa, key, &mut self.consumed);
        }
        if on_prefetched {
            self.r.faults_on_prefetched += 1;
        }
        if !cached {
            self.r.misses += 1;
        }
        self.access(key, id, p, cached, e)
    }

    /// Access to page `p` of file `key` (slot `id`) by event `e`'s thread goes to the predictor;
    /// the windows it proposes are prefetched and returned as `(file, first page, pages)`.
    fn access(
        &mut self,
        key: FileId,
        id: u64,
        p: u64,
        hit: bool,
        e: &RawEvent,
    ) -> Vec<(FileId, u64, u64)> {
        let windows = self.pred.access(Access {
            file: super::predictor::stream(id, e.pid),
            page: p,
            hit,
            t_ns: e.ts_us * 1000,
        });
        windows
            .into_iter()
            .filter_map(|w| self.prefetch(key, p, e.ts_us, w))
            .collect()
    }

    /// Fault-around mapped pages `[from, to)` of file `key`: faults the kernel served from the
    /// cache without `mm_filemap_fault`. The part inside windows we prefetched is how far the
    /// command read after a window made its pages ready: it marks them used and goes to the
    /// predictor as accesses at both ends, so a 128 KiB block whose window was read in time
    /// (one miss, then faults served by fault-around) shows 32 pages, not one. Pages outside
    /// our windows were cached by other means and tell nothing.
    fn on_mapped(
        &mut self,
        key: FileId,
        from: u64,
        to: u64,
        e: &RawEvent,
    ) -> Vec<(FileId, u64, u64)> {
        let Some(s) = self.slots.get_mut(&key) else {
            return Vec::new();
        };
        let id = s.id;
        let (mut lo, mut hi) = (u64::MAX, 0);
        for w in s.issued.iter_mut() {
            let (a, b) = (from.max(w.start), to.min(w.end));
            if a < b && w.use_pages(a, b, key, &mut self.consumed) {
                lo = lo.min(a);
                hi = hi.max(b - 1);
            }
        }
        if lo > hi {
            return Vec::new();
        }
        let mut out = self.access(key, id, lo, true, e);
        out.extend(self.access(key, id, hi, true, e));
        out
    }

    /// Prefetches window `w` of file `key` for a fault on page `p` at `ts_us`; returns it as
    /// `(file, first page, pages)`, cut to the file's size (None when nothing is left of it,
    /// or the file could not be opened).
    fn prefetch(
        &mut self,
        key: FileId,
        p: u64,
        ts_us: u64,
        w: super::predictor::Window,
    ) -> Option<(FileId, u64, u64)> {
        let page = self.page;
        let s = self.slots.get_mut(&key).unwrap();
        let end = if s.pages > 0 {
            (w.start + w.pages).min(s.pages)
        } else {
            w.start + w.pages
        };
        let fd = s.fd.as_ref()?;
        if w.start >= end {
            return None;
        }
        // The piece holding the faulting page now, the others deferred.
        let whole = end - w.start <= WHOLE_PAGES;
        let piece = if whole { end - w.start } else { PIECE_PAGES };
        let first = w.start + (p.clamp(w.start, end - 1) - w.start) / piece * piece;
        let first_end = (first + piece).min(end);
        let (off, len) = (first * page, (first_end - first) * page);
        self.stats.issue(fd.as_fd(), off, len, ts_us, true, whole);
        if !whole {
            let rest = (w.start..end)
                .step_by(piece as usize)
                .filter(|&a| a != first);
            let from = self.deferred.len();
            self.deferred.extend(rest.map(|a| Deferred {
                key,
                start: a,
                end: (a + piece).min(end),
                fault_us: ts_us,
                last: false,
            }));
            if let Some(d) = self.deferred.range_mut(from..).last() {
                d.last = true;
            }
            while self.deferred.len() > MAX_DEFERRED {
                let d = self.deferred.pop_front().unwrap();
                self.r.prefetched_bytes -= (d.end - d.start) * page;
            }
        }
        s.seen(w.start, end);
        if s.issued.len() >= ISSUED_WINDOWS {
            let old = s.issued.pop_front().unwrap();
            self.wasted += old.unread();
        }
        let mut iw = Issued {
            start: w.start,
            end,
            used: vec![0; ((end - w.start) as usize).div_ceil(64)],
            faulted: false,
            consumed: false,
        };
        iw.faulted = iw.mark(p, p + self.pred.config().fault_around);
        s.issued.push_back(iw);
        self.r.prefetches += 1;
        match w.detector {
            Detector::Sequential => self.r.prefetches_sequential += 1,
            Detector::Stride => self.r.prefetches_stride += 1,
            Detector::Range => self.r.prefetches_range += 1,
        }
        self.r.prefetched_bytes += (end - w.start) * page;
        Some((key, w.start, end - w.start))
    }

    /// Issues the oldest piece of a window still to issue (see [`PIECE_PAGES`]); false when
    /// none is left. A piece of a file whose slot was given up since is dropped (its bytes
    /// leave `prefetched_bytes`).
    pub fn issue_deferred(&mut self) -> bool {
        let Some(d) = self.deferred.pop_front() else {
            return false;
        };
        let (off, len) = (d.start * self.page, (d.end - d.start) * self.page);
        match self.slots.get(&d.key).and_then(|s| s.fd.as_ref()) {
            Some(fd) => self
                .stats
                .issue(fd.as_fd(), off, len, d.fault_us, false, d.last),
            None => self.r.prefetched_bytes -= len,
        }
        true
    }

    /// Prefetched windows the target has used every page of (faulted on, or mapped around a
    /// fault) since the last call, as `(file, first page, pages)`: drop-behind need not wait
    /// any longer for them.
    pub fn take_consumed(&mut self) -> Vec<(FileId, u64, u64)> {
        std::mem::take(&mut self.consumed)
    }

    /// The report so far (waste counted for every window issued).
    pub fn report(&self) -> AssistReport {
        let mut r = self.r.clone();
        let pending: u64 = self
            .slots
            .values()
            .flat_map(|s| s.issued.iter())
            .map(Issued::unread)
            .sum();
        r.wasted_bytes_estimate = (self.wasted + pending) * self.page;
        let issued = self.stats.issued.counts();
        let submitted = self.stats.submitted.counts();
        r.issue_latency_us_p50 = percentile(&issued, 0.5);
        r.issue_latency_us_p90 = percentile(&issued, 0.9);
        r.issue_latency_us_p99 = percentile(&issued, 0.99);
        r.submit_latency_us_p50 = percentile(&submitted, 0.5);
        r.submit_latency_us_p99 = percentile(&submitted, 0.99);
        r.issue_latency_us_histogram = histogram(&issued);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window longer than [`WHOLE_PAGES`] is queued piece by piece: when the fault's event
    /// has been handled, the kernel shows the piece holding the faulting page cached (or under
    /// read) and the window's last piece not; after the deferred pieces, all of it. At most
    /// [`MAX_DEFERRED`] pieces wait, and `prefetched_bytes` is what the kernel holds either way.
    #[test]
    fn long_windows_are_issued_piece_by_piece_after_the_faulting_one() {
        use std::os::unix::fs::MetadataExt;
        if sys::euid() != 0 {
            println!("SKIP: opening files by handle (open_by_handle_at) needs root");
            return;
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, vec![7u8; 256 << 20]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        f.sync_all().unwrap();
        let cached = |from: u64, to: u64| {
            let page = sys::page_size();
            sys::cachestat(f.as_fd(), from * page, (to - from) * page)
                .unwrap()
                .cache
        };
        let pages = (256 << 20) / sys::page_size();
        sys::fadvise(f.as_fd(), 0, 0, Advice::DontNeed).unwrap();
        assert_eq!(cached(0, pages), 0, "the file could not be evicted");
        let md = f.metadata().unwrap();
        let mut a = Assistant::new(&Prefetch::default());
        let fault = |a: &mut Assistant, page: u64| {
            let e = RawEvent {
                pid: 4242,
                ts_us: sys::monotonic_ns() / 1000,
                dev_major: libc::major(md.dev()),
                dev_minor: libc::minor(md.dev()),
                ino: md.ino(),
                ofs: page * sys::page_size(),
                order: 0,
                fault: true,
                mapped: 0,
                major: None,
            };
            a.on_event(&e)
        };
        // A reader climbing page by page: the sequential detector's windows double.
        let mut long = None;
        for page in 0..pages / 2 {
            let windows = fault(&mut a, page);
            if let Some(&(_, start, n)) = windows.iter().find(|w| w.2 > WHOLE_PAGES) {
                long = Some((page, start, n));
                break;
            }
            while a.issue_deferred() {}
        }
        let (p, start, n) = long.expect("no window longer than WHOLE_PAGES was issued");
        let end = start + n;
        let first = start + (p.max(start) - start) / PIECE_PAGES * PIECE_PAGES;
        assert!(
            end - first > PIECE_PAGES,
            "the window {start}+{n} for page {p}"
        );
        assert_eq!(
            cached(first, first + PIECE_PAGES),
            PIECE_PAGES,
            "the faulting piece is queued at once"
        );
        assert_eq!(cached(end - PIECE_PAGES, end), 0, "the last piece waits");
        let mut pieces = 0;
        while a.issue_deferred() {
            pieces += 1;
        }
        assert_eq!(pieces as u64, n.div_ceil(PIECE_PAGES) - 1);
        assert_eq!(cached(start, end), n, "every piece queued");
        // Only our WILLNEEDs read the file: the report's bytes are what the kernel holds.
        let r = a.report();
        assert_eq!(r.prefetched_bytes, cached(0, pages) * sys::page_size());

        // A reader that never runs out of events: at most MAX_DEFERRED pieces wait, the
        // oldest are dropped, and the report still says what was read.
        sys::fadvise(f.as_fd(), 0, 0, Advice::DontNeed).unwrap();
        let mut a = Assistant::new(&Prefetch::default());
        // Chunks of 1 MiB: one read page by page (the range detector learns its span), then
        // misses 2 MiB apart, each a 256-page window.
        let chunk = (1 << 20) / sys::page_size();
        for page in 0..chunk {
            fault(&mut a, page);
        }
        while a.issue_deferred() {}
        let mut windows = 0;
        for i in 1..pages / (2 * chunk) {
            windows += fault(&mut a, i * 2 * chunk).len();
        }
        assert!(windows * 15 > MAX_DEFERRED, "{windows} windows");
        assert_eq!(a.deferred.len(), MAX_DEFERRED);
        while a.issue_deferred() {}
        let r = a.report();
        assert!(r.prefetched_bytes < (windows as u64 * chunk) * sys::page_size());
        assert_eq!(r.prefetched_bytes, cached(0, pages) * sys::page_size());
    }
}
