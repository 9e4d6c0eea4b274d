//! Dropping the command's pages: the [`Dropper`] that writes back and drops pending ranges,
//! measuring them before and after (cachestat(2), or mmap+mincore(2) where the kernel has no
//! cachestat: the [`Meter`] every verb measures with), and the [`DropBehind`] thread that calls
//! it whenever the command's outstanding footprint passes `max_cache`.

use super::footprint::{Footprint, Mappers, PageMap, Pending};
use super::priority::Priority;
use crate::error::{FileError, Op};
use crate::residency::{MeasuredBy, Meter, Method};
use crate::sys::FileId as FileKey;
use crate::sys::{self, Advice};
use crate::trace::Mounts;
use crate::verb::Tally;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Files kept open between drop-behind passes.
const MAX_OPEN: usize = 4096;

/// How long a process's file mappings read from /proc/PID/maps are used before they are read
/// again. Reading them at every drop cost an eighth of the CPU under fio mmap randread (the
/// retries come every few ms); a mapping replaced within this time would have the new file's
/// pages at those addresses paged out (clean pages, faulted in again when read).
const MAPS_TTL: Duration = Duration::from_millis(100);

/// Ranges paged out per `process_madvise` call (see `Dropper::page_out`).
const PAGE_OUT_RANGES: usize = 64;

/// A process's file mappings (None: unreadable) and when they were read.
type ReadMaps = (Instant, Option<Vec<crate::procfs::FileMapping>>);

/// Files dropped together: a tree of 100k files never holds more than a batch open.
const BATCH_FILES: usize = 1024;

/// Why `left_dirty_bytes` / `left_mapped_or_busy_bytes` are null: only cachestat(2) counts
/// dirty pages and pages under writeback.
pub const UNKNOWN_NO_CACHESTAT: &str = "measured with mmap+mincore(2), which sees only whether \
a page is cached: dirty and writeback counts need cachestat(2) (Linux >= 6.5)";

/// What the drops did, in bytes (see `RunReport` for each).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counts {
    pub dropped_bytes: u64,
    pub kept_written_bytes: u64,
    pub files_unreachable: u64,
    pub drops_while_running: u64,
    pub left_bytes: u64,
    /// None: unknown (mincore: see [`UNKNOWN_NO_CACHESTAT`]).
    pub left_dirty_bytes: Option<u64>,
    pub left_mapped_or_busy_bytes: Option<u64>,
    /// How the pages were measured: cachestat, or mincore when any file was.
    pub method: MeasuredBy,
}

impl Counts {
    /// Why the left figures are null, when they are.
    pub fn unknown_reason(&self) -> Option<&'static str> {
        self.left_dirty_bytes
            .is_none()
            .then_some(UNKNOWN_NO_CACHESTAT)
    }
}

/// One measurement of a range: cached pages, and cached pages dirty or under writeback
/// (None: unknown, mmap+mincore cannot tell); with mincore, which pages (one bool each).
#[derive(Debug, Clone)]
struct Measured {
    cached: u64,
    dirty: Option<u64>,
    pages: Option<Vec<bool>>,
}

impl Measured {
    /// Pages cached in `self` (before a drop) and no longer in `after`.
    fn dropped(&self, after: &Measured) -> u64 {
        match (&self.pages, &after.pages) {
            (Some(b), Some(a)) => b.iter().zip(a).filter(|(b, a)| **b && !**a).count() as u64,
            _ => self.cached.saturating_sub(after.cached),
        }
    }

    /// The parts `(first page, pages)` of the range `(i, n)` that may still hold pages after
    /// a drop, and how many pages they count. cachestat sees every page in the cache, read
    /// I/O in flight included: the pages still cached `after`. mincore sees a page only once
    /// it is up to date, and the events report pages as they are inserted, before their read
    /// completes: so a page unseen before the drop may be one still being read (DONTNEED
    /// leaves it); it stays pending with those seen after, and is tried again.
    fn stayed(&self, after: &Measured, (i, n): (u64, u64)) -> (Vec<(u64, u64)>, u64) {
        let (Some(b), Some(a)) = (&self.pages, &after.pages) else {
            return if after.cached > 0 {
                (vec![(i, n)], after.cached)
            } else {
                (Vec::new(), 0)
            };
        };
        let mut parts: Vec<(u64, u64)> = Vec::new();
        let mut pages = 0;
        for (j, (b, a)) in b.iter().zip(a).enumerate() {
            if *b && !*a {
                continue;
            }
            pages += 1;
            let p = i + j as u64;
            match parts.last_mut() {
                Some(last) if last.0 + last.1 == p => last.1 += 1,
                _ => parts.push((p, 1)),
            }
        }
        (parts, pages)
    }
}

/// Drops pending ranges of the command's files, opened by handle.
pub(super) struct Dropper {
    /// Measures every range before and after its drop: cachestat(2), falling back to
    /// mmap+mincore(2) without it (probed at run time), or mincore only (`Method::Mincore`).
    meter: Meter,
    /// When the run started (`CLOCK_REALTIME`): without dirty counts (mincore), a file
    /// modified since then counts as written by the command (`--keep-written`).
    started: (i64, i64),
    /// Whether mincore tells the truth about each file (see [`sys::mincore_is_truthful`]).
    truthful: Mutex<HashMap<FileKey, bool>>,
    /// Files whose residency could not be measured (why, for the notice): their pages are
    /// dropped all the same but counted in neither `dropped_bytes` nor `left_bytes`.
    unmeasured: Mutex<HashMap<FileKey, String>>,
    /// Some file was measured with mincore (no cachestat, or cachestat refused it).
    used_mincore: AtomicBool,
    /// Every range is measured page by page with mincore: the kernel has no cachestat
    /// (probed at run time), or `Method::Mincore`.
    mincore_route: bool,
    keep_written: bool,
    /// Files kept open (at most [`MAX_OPEN`]) and dropped together (at most [`BATCH_FILES`]),
    /// less under a small RLIMIT_NOFILE.
    max_open: usize,
    batch_files: usize,
    /// Open files, bounded (a tree of 100k files must not run into RLIMIT_NOFILE).
    fds: Mutex<HashMap<FileKey, Arc<OwnedFd>>>,
    /// Files that could not be opened (gone, or no handle support).
    unreachable: Mutex<HashSet<FileKey>>,
    mounts: Mounts,
    /// Files with dirty pages seen: written by the command.
    written: Mutex<HashSet<FileKey>>,
    /// `process_madvise` was refused: mapped pages are not paged out.
    no_page_out: AtomicBool,
    /// The process of each thread seen mapping a file.
    tgids: Mutex<HashMap<u32, Option<u32>>>,
    /// The file mappings of those processes, read at most every [`MAPS_TTL`].
    maps: Mutex<HashMap<u32, ReadMaps>>,
    pub counts: Mutex<Counts>,
    /// Errors and notices of the whole run.
    pub tally: Tally,
}

/// `sync_file_range` flags that write a range back and wait for it.
const WRITE_AND_WAIT: u32 = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;

impl Dropper {
    /// With `keep_written`, the pages of files the command wrote stay.
    pub fn new(keep_written: bool, method: Method) -> Dropper {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let budget = sys::fd_budget();
        let mincore_route = method == Method::Mincore || !sys::probe_cachestat();
        Dropper {
            used_mincore: AtomicBool::new(mincore_route),
            mincore_route,
            meter: Meter::new(method),
            started: (now.as_secs() as i64, now.subsec_nanos() as i64),
            truthful: Mutex::default(),
            unmeasured: Mutex::default(),
            keep_written,
            max_open: (budget / 4).clamp(1, MAX_OPEN),
            batch_files: (budget / 4).clamp(1, BATCH_FILES),
            fds: Mutex::default(),
            unreachable: Mutex::default(),
            mounts: Mounts::default(),
            written: Mutex::default(),
            no_page_out: AtomicBool::new(false),
            tgids: Mutex::default(),
            maps: Mutex::default(),
            counts: Mutex::default(),
            tally: Tally::new(),
        }
    }

    /// The file's descriptor: from the cache, or opened by handle (and cached while there is
    /// room). None when it cannot be opened.
    fn fd(&self, key: FileKey) -> Option<Arc<OwnedFd>> {
        if let Some(fd) = self.fds.lock().unwrap().get(&key) {
            return Some(fd.clone());
        }
        if self.unreachable.lock().unwrap().contains(&key) {
            return None;
        }
        match crate::trace::open_inode(key, &self.mounts) {
            Ok(fd) => {
                let fd = Arc::new(fd);
                let mut fds = self.fds.lock().unwrap();
                if fds.len() < self.max_open {
                    fds.insert(key, fd.clone());
                }
                Some(fd)
            }
            Err(_) => {
                if self.unreachable.lock().unwrap().insert(key) {
                    self.counts.lock().unwrap().files_unreachable += 1;
                }
                None
            }
        }
    }

    /// What is cached of the file's `[off, off+len)`, measured by the [`Meter`]; None when
    /// it cannot be known (mincore would lie about a file the caller may not write, or the
    /// measurement failed: the file is remembered for the notice).
    fn measure(&self, key: FileKey, fd: BorrowedFd, off: u64, len: u64) -> Option<Measured> {
        // Named only in the notice (`finish_notices`): no string built per measurement.
        let name = "";
        if self.mincore_route {
            let r =
                crate::residency::resident_pages(std::path::Path::new(&name), fd, off, len, || {
                    self.truthful(key, fd)
                });
            let why = match r {
                Ok(Some(pages)) => {
                    return Some(Measured {
                        cached: pages.iter().filter(|p| **p).count() as u64,
                        dirty: None,
                        pages: Some(pages),
                    })
                }
                Ok(None) => crate::residency::UNKNOWN_NOT_WRITABLE.to_string(),
                Err(e) => e.to_string(),
            };
            self.unmeasured.lock().unwrap().entry(key).or_insert(why);
            return None;
        }
        let r = self
            .meter
            .measure_fd(std::path::Path::new(&name), fd, off, off + len, || {
                self.truthful(key, fd)
            });
        let page = sys::page_size();
        match r {
            Ok(r) => {
                if r.method == MeasuredBy::Mincore {
                    self.used_mincore.store(true, Ordering::Relaxed);
                }
                match r.cached {
                    Some(c) => Some(Measured {
                        cached: c.div_ceil(page),
                        dirty: r
                            .dirty
                            .zip(r.writeback)
                            .map(|(d, w)| (d + w).div_ceil(page)),
                        pages: None,
                    }),
                    None => {
                        let why = r.unknown_reason.unwrap_or("unknown").to_string();
                        self.unmeasured.lock().unwrap().entry(key).or_insert(why);
                        None
                    }
                }
            }
            Err(e) => {
                self.unmeasured
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_insert(e.to_string());
                None
            }
        }
    }

    /// Whether mincore tells the truth about the file (asked once per file, on the mincore
    /// route only): root, its owner, or allowed to write it.
    fn truthful(&self, key: FileKey, fd: BorrowedFd) -> bool {
        *self
            .truthful
            .lock()
            .unwrap()
            .entry(key)
            .or_insert_with(|| sys::fstat(fd).is_ok_and(|st| sys::mincore_is_truthful_fd(fd, &st)))
    }

    /// Without dirty counts (mincore): whether the file was modified since the run started,
    /// i.e. written while the command ran.
    fn modified_since_start(&self, fd: BorrowedFd) -> bool {
        sys::fstat(fd).is_ok_and(|st| st.mtime >= self.started)
    }

    /// Notices of the measurements: the fallback taken, files that could not be measured.
    pub fn finish_notices(&self) {
        for n in self.meter.take_notices() {
            self.tally.notice(n);
        }
        let unmeasured = self.unmeasured.lock().unwrap();
        if let Some((key, why)) = unmeasured.iter().next() {
            self.tally.notice(format!(
                "the pages of {} file(s) were dropped but could not be measured, so they are \
                 counted in neither dropped nor left bytes (e.g. {}: {why})",
                unmeasured.len(),
                file_name(*key)
            ));
        }
    }

    fn kept(&self, key: &FileKey) -> bool {
        self.keep_written && self.written.lock().unwrap().contains(key)
    }

    /// Drops every pending range: writeback started for all dirty ranges first, then the
    /// ranges of files the command may map (`mappers`: its threads seen adding or faulting on
    /// each file's pages) paged out of their processes, then one wait per dirty range, then
    /// DONTNEED; counts measured before and after. Returns the ranges where pages
    /// stayed (typically still under read I/O: readahead reports pages when it queues them),
    /// so the caller can try them again.
    pub fn drop_pending(&self, pending: Pending, mappers: &Mappers) -> Pending {
        let mut stayed = Pending::default();
        let work: Vec<(FileKey, Vec<(u64, u64)>)> = pending
            .files
            .into_iter()
            .map(|(key, ranges)| (key, merge(ranges)))
            .collect();
        let (mut dropped, mut kept) = (0, 0);
        for batch in work.chunks(self.batch_files) {
            let fds: Vec<Option<Arc<OwnedFd>>> = batch.iter().map(|(k, _)| self.fd(*k)).collect();
            let (d, k) = self.drop_batch(batch, &fds, mappers, &mut stayed);
            dropped += d;
            kept += k;
        }
        let mut c = self.counts.lock().unwrap();
        c.dropped_bytes += dropped * sys::page_size();
        c.kept_written_bytes += kept * sys::page_size();
        stayed
    }

    /// Drops one batch of files: writeback started for all dirty ranges first (so the waits
    /// overlap), mapped ranges paged out, then per range a wait and DONTNEED, counted by
    /// cachestat before and after. Returns (pages dropped, pages of written files kept).
    fn drop_batch(
        &self,
        batch: &[(FileKey, Vec<(u64, u64)>)],
        fds: &[Option<Arc<OwnedFd>>],
        mappers: &Mappers,
        stayed: &mut Pending,
    ) -> (u64, u64) {
        let before: Vec<Vec<(Option<Measured>, bool)>> = batch
            .iter()
            .zip(fds)
            .map(|((key, ranges), fd)| match fd {
                Some(fd) => self.start_writeback(*key, fd.as_fd(), ranges),
                None => Vec::new(),
            })
            .collect();
        let droppable: Vec<&(FileKey, Vec<(u64, u64)>)> = batch
            .iter()
            .zip(fds)
            .filter(|((key, _), fd)| fd.is_some() && !self.kept(key))
            .map(|(w, _)| w)
            .collect();
        self.page_out(&droppable, mappers);
        let (mut dropped, mut kept) = (0, 0);
        for (((key, ranges), fd), before) in batch.iter().zip(fds).zip(&before) {
            let Some(fd) = fd.as_ref().map(|f| f.as_fd()) else {
                continue;
            };
            if self.kept(key) {
                kept += before
                    .iter()
                    .filter_map(|b| b.0.as_ref().map(|m| m.cached))
                    .sum::<u64>();
                continue;
            }
            dropped += self.drop_ranges(*key, fd, ranges, before, stayed);
        }
        (dropped, kept)
    }

    /// Drops a file's `ranges`, each with what was cached (and whether dirty) before; returns
    /// the pages dropped (ranges where pages stayed go to `stayed`).
    fn drop_ranges(
        &self,
        key: FileKey,
        fd: BorrowedFd,
        ranges: &[(u64, u64)],
        before: &[(Option<Measured>, bool)],
        stayed: &mut Pending,
    ) -> u64 {
        // Nothing to drop where cachestat finds nothing; mincore may not see pages still
        // being read in (see `Measured::stayed`), so its ranges are dropped all the same.
        ranges
            .iter()
            .zip(before)
            .filter(|(_, (m, _))| {
                !m.as_ref()
                    .is_some_and(|m| m.pages.is_none() && m.cached == 0)
            })
            .map(|(&range, (m, dirty))| self.drop_range(key, fd, range, m.as_ref(), *dirty, stayed))
            .sum()
    }

    /// One measurement per range says what is cached and dirty: `(cached pages, dirty)` per
    /// range (cached None: unknown). Writeback of everything dirty is started at once (unless
    /// written files are kept), so the waits in [`Dropper::drop_range`] overlap. Where dirty
    /// pages cannot be counted (mincore), every range may be dirty: its writeback is started
    /// and waited for all the same (cheap where nothing is dirty), and with `--keep-written`
    /// a file modified since the run started counts as written.
    fn start_writeback(
        &self,
        key: FileKey,
        fd: BorrowedFd,
        ranges: &[(u64, u64)],
    ) -> Vec<(Option<Measured>, bool)> {
        let page = sys::page_size();
        let mut v = Vec::with_capacity(ranges.len());
        for &(i, n) in ranges {
            let m = self.measure(key, fd, i * page, n * page);
            let known_dirty = m.as_ref().and_then(|m| m.dirty);
            let dirty = match known_dirty {
                Some(d) => d > 0,
                None => true,
            };
            let written = match known_dirty {
                Some(d) => d > 0,
                None => self.keep_written && self.modified_since_start(fd),
            };
            if written {
                self.written.lock().unwrap().insert(key);
            }
            if dirty && !self.kept(&key) {
                let _ = sys::sync_file_range(fd, i * page, n * page, sys::SFR_WRITE);
            }
            v.push((m, dirty));
        }
        v
    }

    /// Waits for the range's writeback when it was dirty, drops it, and returns the pages
    /// dropped, measured (0 when the range could not be measured); a range where pages stayed
    /// goes to `stayed`.
    fn drop_range(
        &self,
        key: FileKey,
        fd: BorrowedFd,
        (i, n): (u64, u64),
        before: Option<&Measured>,
        dirty: bool,
        stayed: &mut Pending,
    ) -> u64 {
        let page = sys::page_size();
        let (off, len) = (i * page, n * page);
        if dirty {
            let _ = sys::sync_file_range(fd, off, len, WRITE_AND_WAIT);
        }
        if let Err(e) = drop_seen(fd, (i, n), before) {
            let name = file_name(key);
            let path = std::path::Path::new(&name);
            self.tally
                .error(FileError::io(path, Op::FadviseDontneed, &e));
            return 0;
        }
        let Some(before) = before else {
            return 0;
        };
        let Some(after) = self.measure(key, fd, off, len) else {
            return 0;
        };
        let (parts, pages) = before.stayed(&after, (i, n));
        if pages > 0 {
            stayed.files.entry(key).or_default().extend(parts);
            stayed.pages += pages;
        }
        before.dropped(&after)
    }

    /// Pages the command maps cannot be dropped with DONTNEED while they stay mapped (an
    /// mmap it keeps: fio's whole file, a database's). So the ranges of files its threads were
    /// seen using are first paged out of their processes where those map them
    /// (`process_madvise(MADV_PAGEOUT)`, [`PAGE_OUT_RANGES`] ranges a call: clean file pages
    /// mapped by that process alone leave the cache, as under memory pressure; the process
    /// faults them in again if it reads them again). Trying DONTNEED first and paging out only
    /// what stayed through the retries cost six passes over every mapped range (fio mmap
    /// randread under `run --assist`: a third of the CPU in the drop-behind thread). What
    /// stays (pages several processes map) is retried and parked by the caller. Where the
    /// kernel refuses (no CAP_SYS_NICE, or before Linux 5.10) a notice says so once and mapped
    /// pages stay until the command unmaps them.
    fn page_out(&self, ranges: &[&(FileKey, Vec<(u64, u64)>)], mappers: &Mappers) {
        if self.no_page_out.load(Ordering::Relaxed) {
            return;
        }
        let page = sys::page_size();
        let mut per_process: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut maps = self.maps.lock().unwrap();
        maps.retain(|_, (at, _)| at.elapsed() < MAPS_TTL);
        for (key, ranges) in ranges {
            let Some(tids) = mappers.get(key) else {
                continue;
            };
            let mut tgids: Vec<u32> = tids.iter().filter_map(|&t| self.tgid_of(t)).collect();
            tgids.sort_unstable();
            tgids.dedup();
            for tgid in tgids {
                let (_, m) = maps
                    .entry(tgid)
                    .or_insert_with(|| (Instant::now(), crate::procfs::file_mappings(tgid).ok()));
                let Some(m) = m else {
                    continue;
                };
                let iov = per_process.entry(tgid).or_default();
                for m in m
                    .iter()
                    .filter(|m| m.dev == (key.0, key.1) && m.ino == key.2)
                {
                    iov.extend(
                        ranges
                            .iter()
                            .filter_map(|&(i, n)| m.addresses_of(i * page, n * page)),
                    );
                }
            }
        }
        drop(maps);
        for (tgid, iov) in per_process {
            if iov.is_empty() {
                continue;
            }
            // At most PAGE_OUT_RANGES ranges a call: a call of 1,024 windows of 128 KiB
            // reclaims for milliseconds, and the kernel does not preempt inside it.
            let r = sys::pidfd_open(tgid).and_then(|pidfd| {
                iov.chunks(PAGE_OUT_RANGES)
                    .try_for_each(|c| sys::process_madvise_pageout(pidfd.as_fd(), c).map(drop))
            });
            match r {
                // The process exited meanwhile: its mappings are gone.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    if !self.no_page_out.swap(true, Ordering::Relaxed) {
                        self.tally.notice(format!(
                            "pages the command maps stay cached until it unmaps them \
                             (process_madvise(MADV_PAGEOUT): {e})"
                        ));
                    }
                    return;
                }
                Ok(()) => {}
            }
        }
    }

    /// The process of thread `tid` (remembered: read once from /proc).
    fn tgid_of(&self, tid: u32) -> Option<u32> {
        *self
            .tgids
            .lock()
            .unwrap()
            .entry(tid)
            .or_insert_with(|| crate::procfs::tgid_of(tid))
    }

    /// After the final drop: what of the command's pages in `ranges` (those that stayed) is
    /// still cached, and why (a range still cached is dropped once more first).
    /// With mincore, dirty pages cannot be told from clean ones: `left_dirty_bytes` and
    /// `left_mapped_or_busy_bytes` are unknown (None) once anything is left.
    pub fn measure_left(&self, ranges: &PageMap) {
        let page = sys::page_size();
        let (mut left, mut dirty) = (0, Some(0u64));
        for (key, ranges) in ranges {
            if self.kept(key) {
                continue;
            }
            let Some(fd) = self.fd(*key) else {
                continue;
            };
            for &(i, n) in ranges {
                if let Some(m) = self.last_try(*key, fd.as_fd(), i * page, n * page) {
                    left += m.cached;
                    if m.cached > 0 {
                        dirty = dirty.zip(m.dirty).map(|(a, b)| a + b);
                    }
                }
            }
        }
        self.finish_notices();
        let mut c = self.counts.lock().unwrap();
        c.left_bytes = left * page;
        c.left_dirty_bytes = dirty.map(|d| d * page);
        c.left_mapped_or_busy_bytes = dirty.map(|d| left.saturating_sub(d) * page);
        c.method = if self.used_mincore.load(Ordering::Relaxed) {
            MeasuredBy::Mincore
        } else {
            MeasuredBy::Cachestat
        };
    }

    /// A range missed by the passes so far (e.g. a lost retry) is dropped now; returns what
    /// stays of it (None: it cannot be measured).
    fn last_try(&self, key: FileKey, fd: BorrowedFd, off: u64, len: u64) -> Option<Measured> {
        let m = self.measure(key, fd, off, len)?;
        if m.cached == 0 {
            return Some(m);
        }
        let _ = sys::sync_file_range(fd, off, len, WRITE_AND_WAIT);
        let page = sys::page_size();
        let _ = drop_seen(fd, (off / page, len / page), Some(&m));
        let after = self.measure(key, fd, off, len)?;
        self.counts.lock().unwrap().dropped_bytes += m.dropped(&after) * sys::page_size();
        Some(after)
    }
}

/// DONTNEED over the range `(first page, pages)`; with mincore's page-by-page view `before`,
/// over the pages it saw cached only. A page it did not see may be one still being read in,
/// which DONTNEED would drop once its read completed, uncounted: it stays pending (see
/// [`Measured::stayed`]) and is dropped once seen.
fn drop_seen(fd: BorrowedFd, (i, n): (u64, u64), before: Option<&Measured>) -> std::io::Result<()> {
    let page = sys::page_size();
    let Some(seen) = before.and_then(|m| m.pages.as_ref()) else {
        return sys::fadvise(fd, i * page, n * page, Advice::DontNeed);
    };
    let mut j = 0;
    while j < seen.len() {
        if !seen[j] {
            j += 1;
            continue;
        }
        let start = j;
        while j < seen.len() && seen[j] {
            j += 1;
        }
        let first = i + start as u64;
        sys::fadvise(
            fd,
            first * page,
            (j - start) as u64 * page,
            Advice::DontNeed,
        )?;
    }
    Ok(())
}

/// How a file the command used is named in errors and notices: by device and inode (it was
/// opened by handle; its path may be gone).
fn file_name(key: FileKey) -> String {
    format!("<{}:{} inode {}>", key.0, key.1, key.2)
}

/// A file's ranges `(first page, pages)` sorted, overlapping and touching ones merged.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (i, n) in ranges {
        match merged.last_mut() {
            Some(m) if i <= m.0 + m.1 => m.1 = m.1.max(i + n - m.0),
            _ => merged.push((i, n)),
        }
    }
    merged
}

/// The drop-behind thread: drops whenever the outstanding footprint passes the limit.
pub(super) struct DropBehind {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Pending>,
}

impl DropBehind {
    /// Starts the thread, dropping whenever more than `limit_pages` are pending.
    pub fn start(
        footprint: Arc<Footprint>,
        dropper: Arc<Dropper>,
        priority: Arc<Priority>,
        limit_pages: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pw-drop-behind".into())
            .spawn(move || {
                let mut retries = Retries::default();
                priority.start(&dropper.tally);
                while !stop2.load(Ordering::Acquire) {
                    let pause = pass(&footprint, &dropper, limit_pages, &mut retries, &priority);
                    if !pause.is_zero() {
                        std::thread::sleep(pause);
                    }
                }
                retries.take()
            })
            .expect("spawning the drop-behind thread");
        DropBehind { stop, thread }
    }

    /// Stops the thread after its current pass; returns the ranges it was still retrying
    /// (or had parked), for the final drop.
    pub fn stop(self) -> Pending {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// A range whose pages stayed cached is tried again after 1 ms, then after twice as long each
/// time while that stays under this (read I/O still in flight completes within it).
const RETRY_AFTER: Duration = Duration::from_millis(1);
const RETRY_LAST: Duration = Duration::from_millis(16);
/// Parked ranges are tried again after this long, then twice as long each time, up to
/// [`PARKED_RETRY_MAX`].
const PARKED_RETRY: Duration = Duration::from_secs(1);
const PARKED_RETRY_MAX: Duration = Duration::from_secs(8);

/// Ranges whose pages stayed cached after a drop. Pages still under read I/O drop a moment
/// later, so a range is tried again 1, 2, 4, 8 and 16 ms later; pages the command has mapped
/// (an mmap it keeps: fio's whole file, a database's) cannot be dropped while they are
/// mapped, so what stays then is parked: tried again after 1 s, 2 s, 4 s, then every 8 s,
/// and in the final drop (after the command's exit, when its mappings are gone). Parked pages
/// are not counted against `--max-cache`: counting what cannot be dropped would make every
/// pass retry all of it (measured: fio mmap randread under `run --assist` spent the CPU it
/// needed on passes over the pages it had mapped, 3 system calls per range each time).
#[derive(Default)]
struct Retries {
    /// Ranges that stayed: when to try them next, the wait before that try, the ranges.
    retrying: Vec<(std::time::Instant, Duration, Pending)>,
    parked: Pending,
    /// When the parked ranges are tried next, and the wait after that.
    parked_next: Option<(std::time::Instant, Duration)>,
}

impl Retries {
    fn pages(&self) -> u64 {
        self.retrying.iter().map(|(_, _, p)| p.pages).sum()
    }

    /// Ranges that stayed in a drop (now).
    fn stayed(&mut self, p: Pending) {
        if p.pages > 0 {
            let now = std::time::Instant::now();
            self.retrying.push((now + RETRY_AFTER, RETRY_AFTER, p));
        }
    }

    /// Everything still retried or parked.
    fn take(&mut self) -> Pending {
        let mut all = std::mem::take(&mut self.parked);
        for (_, _, p) in self.retrying.drain(..) {
            all.extend(p);
        }
        all
    }

    fn park(&mut self, p: Pending) {
        if p.pages > 0 {
            self.parked.extend(p);
            self.parked_next
                .get_or_insert((std::time::Instant::now() + PARKED_RETRY, PARKED_RETRY));
        }
    }

    /// The next try of ranges that stayed, whose time has come (what stays after the last
    /// parks), and of the parked ranges when their time has come.
    fn retry(&mut self, dropper: &Dropper, footprint: &Footprint) {
        let drop = |p: Pending| drop_running(dropper, footprint, p);
        if let Some((at, wait)) = self.parked_next {
            if std::time::Instant::now() >= at {
                let parked = std::mem::take(&mut self.parked);
                let stayed = drop(parked);
                self.parked_next = (stayed.pages > 0).then(|| {
                    let next = (wait * 2).min(PARKED_RETRY_MAX);
                    (std::time::Instant::now() + next, next)
                });
                self.parked.extend(stayed);
            }
        }
        let now = std::time::Instant::now();
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retrying)
            .into_iter()
            .partition(|(at, _, _)| *at <= now);
        self.retrying = wait;
        for (_, waited, work) in due {
            let stayed = drop(work);
            if stayed.pages == 0 {
                continue;
            }
            if waited >= RETRY_LAST {
                self.park(stayed);
            } else {
                let next = waited * 2;
                self.retrying
                    .push((std::time::Instant::now() + next, next, stayed));
            }
        }
    }
}

/// Drops `p` while the command runs: the ranges of files its threads were seen using are
/// paged out of their processes first (see [`Dropper::drop_pending`]).
fn drop_running(dropper: &Dropper, footprint: &Footprint, p: Pending) -> Pending {
    let mappers = footprint.users(p.files.keys().copied());
    dropper.drop_pending(p, &mappers)
}

/// One look at the footprint, and a drop when it is over the limit; returns how long to wait
/// before the next.
fn pass(
    footprint: &Footprint,
    dropper: &Dropper,
    limit_pages: u64,
    retries: &mut Retries,
    priority: &Priority,
) -> Duration {
    footprint.promote_prefetches();
    // Prefetches past their grace time count as waiting, so a thread that got no CPU for a
    // while sees how far behind it is.
    priority.adjust(footprint.pending_pages(), &dropper.tally);
    retries.retry(dropper, footprint);
    // Windows prefetched for the command count against the limit from the moment they are
    // issued, but are dropped only once used or after their grace time (see `Footprint`);
    // when they alone would pass the limit, the oldest go early (so the limit holds while
    // the assistant prefetches faster than the command reads: they are the likeliest to have
    // been read, or never to be).
    let held = retries.pages();
    if footprint.prefetch_pages() + held > limit_pages {
        footprint.promote_oldest_prefetches(limit_pages.saturating_sub(held));
    }
    let droppable = footprint.pending_pages();
    if droppable == 0 || droppable + footprint.prefetch_pages() + retries.pages() <= limit_pages {
        return Duration::from_millis(if retries.pages() > 0 { 1 } else { 5 });
    }
    let mut now = footprint.take_pending();
    // The front of a sequential stream (read-ahead not read yet) waits for a later pass, or
    // the final drop; at most half the limit is held so (see `front_hold`).
    let (front, files) = front_hold(limit_pages);
    let held = now.split_front(front, files);
    footprint.requeue(held);
    if now.pages == 0 {
        return Duration::from_millis(5);
    }
    let stayed = drop_running(dropper, footprint, now);
    dropper.counts.lock().unwrap().drops_while_running += 1;
    retries.stayed(stayed);
    Duration::ZERO
}

/// Pages of read-ahead a sequential reader may have ahead of it: the kernel keeps up to two
/// windows of `read_ahead_kb` in flight (the current one and the asynchronous next one), so
/// twice the largest `read_ahead_kb` of the machine's devices (read once; 128 KiB, the
/// kernel's default, where sysfs cannot tell), at least 2 MiB (one large folio).
fn readahead_pages() -> u64 {
    static PAGES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGES.get_or_init(|| {
        let kb = std::fs::read_dir("/sys/class/bdi")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("read_ahead_kb")).ok())
            .filter_map(|s| s.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(128)
            .clamp(128, 1 << 20);
        ((4 * kb) << 10).max(2 << 20) / sys::page_size()
    })
}

/// How much of each streaming file's front a pass keeps pending, and for how many files:
/// the read-ahead window per file ([`readahead_pages`]), both cut so that at most half of
/// `--max-cache` is held back — the limit still holds, and a pass always has something to
/// drop once the rest passes the other half.
fn front_hold(limit_pages: u64) -> (u64, usize) {
    let half = limit_pages / 2;
    let front = readahead_pages().min(half);
    if front == 0 {
        return (0, 0);
    }
    (front, (half / front).clamp(1, 64) as usize)
}
