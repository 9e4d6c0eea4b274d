//! Dropping the command's pages: the [`Dropper`] that writes back and drops pending ranges,
//! counting with cachestat before and after, and the [`DropBehind`] thread that calls it
//! whenever the command's outstanding footprint passes `max_cache`.

use super::footprint::{FileKey, Footprint, Mappers, PageMap, Pending};
use crate::error::{FileError, Op};
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
type ReadMaps = (Instant, Option<Vec<sys::FileMapping>>);

/// Files dropped together: a tree of 100k files never holds more than a batch open.
const BATCH_FILES: usize = 1024;

/// What the drops did, in bytes (see `RunReport` for each).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counts {
    pub dropped_bytes: u64,
    pub kept_written_bytes: u64,
    pub files_unreachable: u64,
    pub drops_while_running: u64,
    pub left_bytes: u64,
    pub left_dirty_bytes: u64,
    pub left_mapped_or_busy_bytes: u64,
}

/// Drops pending ranges of the command's files, opened by handle.
pub(super) struct Dropper {
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
    pub fn new(keep_written: bool) -> Dropper {
        let budget = sys::fd_budget();
        Dropper {
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

    fn kept(&self, key: &FileKey) -> bool {
        self.keep_written && self.written.lock().unwrap().contains(key)
    }

    /// Drops every pending range: writeback started for all dirty ranges first, then the
    /// ranges of files the command may map (`mappers`: its threads seen adding or faulting on
    /// each file's pages) paged out of their processes, then one wait per dirty range, then
    /// DONTNEED; counts from cachestat before and after. Returns the ranges where pages
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
        let before: Vec<Vec<(u64, bool)>> = batch
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
                kept += before.iter().map(|b| b.0).sum::<u64>();
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
        before: &[(u64, bool)],
        stayed: &mut Pending,
    ) -> u64 {
        ranges
            .iter()
            .zip(before)
            .filter(|(_, &(cached, _))| cached > 0)
            .map(|(&range, &(cached, dirty))| {
                self.drop_range(key, fd, range, cached, dirty, stayed)
            })
            .sum()
    }

    /// One cachestat per range says what is cached and dirty: `(cached pages, dirty)` per
    /// range. Writeback of everything dirty is started at once (unless written files are
    /// kept), so the waits in [`Dropper::drop_range`] overlap.
    fn start_writeback(
        &self,
        key: FileKey,
        fd: BorrowedFd,
        ranges: &[(u64, u64)],
    ) -> Vec<(u64, bool)> {
        let page = sys::page_size();
        let mut v = Vec::with_capacity(ranges.len());
        for &(i, n) in ranges {
            let c = sys::cachestat(fd, i * page, n * page).unwrap_or_default();
            let dirty = c.dirty + c.writeback > 0;
            if dirty {
                self.written.lock().unwrap().insert(key);
                if !self.keep_written {
                    let _ = sys::sync_file_range(fd, i * page, n * page, sys::SFR_WRITE);
                }
            }
            v.push((c.cache, dirty));
        }
        v
    }

    /// Waits for the range's writeback when it was dirty, drops it, and returns the pages
    /// dropped; a range where pages stayed goes to `stayed`.
    fn drop_range(
        &self,
        key: FileKey,
        fd: BorrowedFd,
        (i, n): (u64, u64),
        before: u64,
        dirty: bool,
        stayed: &mut Pending,
    ) -> u64 {
        let page = sys::page_size();
        let (off, len) = (i * page, n * page);
        if dirty {
            let _ = sys::sync_file_range(fd, off, len, WRITE_AND_WAIT);
        }
        if let Err(e) = sys::fadvise(fd, off, len, Advice::DontNeed) {
            let name = format!("<{}:{} inode {}>", key.0, key.1, key.2);
            let path = std::path::Path::new(&name);
            self.tally
                .error(FileError::io(path, Op::FadviseDontneed, &e));
            return 0;
        }
        let after = sys::cachestat(fd, off, len).map(|c| c.cache).unwrap_or(0);
        if after > 0 {
            stayed.files.entry(key).or_default().push((i, n));
            stayed.pages += after;
        }
        before.saturating_sub(after)
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
                    .or_insert_with(|| (Instant::now(), sys::file_mappings(tgid).ok()));
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
            .or_insert_with(|| sys::tgid_of(tid))
    }

    /// After the final drop: what of the command's pages in `ranges` (those that stayed) is
    /// still cached, and why (a range still cached is dropped once more first).
    pub fn measure_left(&self, ranges: &PageMap) {
        let page = sys::page_size();
        let (mut left, mut dirty) = (0, 0);
        for (key, ranges) in ranges {
            if self.kept(key) {
                continue;
            }
            let Some(fd) = self.fd(*key) else {
                continue;
            };
            for &(i, n) in ranges {
                if let Some(c) = self.last_try(fd.as_fd(), i * page, n * page) {
                    left += c.cache;
                    dirty += c.dirty + c.writeback;
                }
            }
        }
        let mut c = self.counts.lock().unwrap();
        c.left_bytes = left * page;
        c.left_dirty_bytes = dirty * page;
        c.left_mapped_or_busy_bytes = left.saturating_sub(dirty) * page;
    }

    /// A range missed by the passes so far (e.g. a lost retry) is dropped now; returns what
    /// stays of it.
    fn last_try(&self, fd: BorrowedFd, off: u64, len: u64) -> Option<sys::CacheStat> {
        let mut c = sys::cachestat(fd, off, len).ok()?;
        if c.cache > 0 {
            let _ = sys::sync_file_range(fd, off, len, WRITE_AND_WAIT);
            let _ = sys::fadvise(fd, off, len, Advice::DontNeed);
            let was = c.cache;
            c = sys::cachestat(fd, off, len).unwrap_or(c);
            self.counts.lock().unwrap().dropped_bytes +=
                was.saturating_sub(c.cache) * sys::page_size();
        }
        Some(c)
    }
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
    pub fn start(footprint: Arc<Footprint>, dropper: Arc<Dropper>, limit_pages: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pw-drop-behind".into())
            .spawn(move || {
                let mut retries = Retries::default();
                let mut class = Class::start(&dropper);
                while !stop2.load(Ordering::Acquire) {
                    let pause = pass(&footprint, &dropper, limit_pages, &mut retries, &mut class);
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

/// How the drop-behind thread is scheduled. It runs as background work (`SCHED_IDLE`) while
/// it keeps up, so any thread that wakes takes the CPU from it at once: with the kernel
/// not preempting inside system calls, a normal-priority drop-behind delayed the wake-ups of
/// `--assist`'s prefetch threads by its fadvise calls (measured: fio mmap randread on 2 CPUs,
/// fault-to-prefetch p99 466–567 us, 270–273 us as background). When it falls behind (more than
/// `--max-cache` waiting to be dropped: the CPUs are busy with other work), it returns to
/// normal priority until it has caught up, so the limit still holds on a busy machine.
struct Class {
    background: bool,
    /// Leaving background priority was refused (it needs CAP_SYS_NICE): not tried again.
    stuck: bool,
}

impl Class {
    fn start(dropper: &Dropper) -> Class {
        match sys::set_thread_class(sys::ThreadClass::Background) {
            Ok(()) => Class {
                background: true,
                stuck: false,
            },
            Err(e) => {
                dropper.tally.notice(format!(
                    "drop-behind runs at normal priority (sched_setscheduler(SCHED_IDLE): {e})"
                ));
                Class {
                    background: false,
                    stuck: true,
                }
            }
        }
    }

    /// Normal priority while more than the limit waits to be dropped (`droppable` pages:
    /// prefetches in their grace time and ranges being retried are not counted, the thread
    /// cannot drop them yet), background again once a quarter of it does.
    fn adjust(&mut self, droppable: u64, limit: u64, dropper: &Dropper) {
        if self.stuck {
            return;
        }
        let want = if droppable > limit {
            false
        } else if droppable <= limit / 4 {
            true
        } else {
            self.background
        };
        if want == self.background {
            return;
        }
        let class = if want {
            sys::ThreadClass::Background
        } else {
            sys::ThreadClass::Normal
        };
        match sys::set_thread_class(class) {
            Ok(()) => self.background = want,
            Err(e) => {
                self.stuck = true;
                dropper.tally.notice(format!(
                    "drop-behind stays at background priority (sched_setscheduler: {e}): \
                     --max-cache may be exceeded while the CPUs are busy"
                ));
            }
        }
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
    class: &mut Class,
) -> Duration {
    footprint.promote_prefetches();
    // Prefetches past their grace time count as waiting, so a thread that got no CPU for a
    // while sees how far behind it is.
    class.adjust(footprint.pending_pages(), limit_pages, dropper);
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
