//! `run`: run any command, and drop again exactly the pages it brought into the page cache.
//!
//! The same tracepoint as `record` (one tracefs instance following the command's process tree)
//! says which pages the command added. Those pages, and only those, are dropped: whenever the
//! command's outstanding footprint exceeds `max_cache` (drop-behind), and all of them when it
//! exits. Pages that were cached before the command touched them never produce an event, so
//! they stay. Written pages are written back (one batched wait) before they are dropped, unless
//! `keep_written`. Works for static binaries and mmap readers alike: nothing is injected into
//! the command.

use crate::error::{ErrorLog, FileError, Op};
use crate::sys::{self, Advice};
use crate::trace::tracefs;
use crate::trace::Follower;
use serde::Serialize;
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Options of `run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Drop the command's pages whenever more than this many bytes of them are outstanding.
    pub max_cache: u64,
    /// Leave the pages of files the command wrote alone.
    pub keep_written: bool,
    /// Ring buffer per CPU, KiB.
    pub buffer_kb: u64,
    /// How the command's events are followed.
    pub backend: crate::trace::Backend,
    /// Also prefetch for the command (`run --assist`); its prefetches are dropped like its own
    /// pages.
    pub assist: Option<crate::assist::live::AssistOptions>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_cache: 64 << 20,
            keep_written: false,
            buffer_kb: 4096,
            backend: crate::trace::Backend::Auto,
            assist: None,
        }
    }
}

/// Passes over the ranges that stayed cached in the final drop, 2 ms apart.
const FINAL_RETRIES: usize = 25;

/// Files kept open between drop-behind passes.
const MAX_OPEN: usize = 4096;

/// Prefetched windows join the drop-behind only after this long, so they are not dropped
/// before the command reads them.
const PREFETCH_GRACE: Duration = Duration::from_millis(500);

/// What `run` did to the page cache.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    /// The command's exit code (128 + signal when it was killed).
    pub exit_code: i32,
    pub elapsed_s: f64,
    /// Bytes the command brought into the cache (the kernel's events for its processes).
    pub added_bytes: u64,
    /// Bytes `--assist` asked the kernel to prefetch for it (windows; dropped again too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetched_bytes: Option<u64>,
    /// Bytes dropped again, as cachestat measured them before and after each drop.
    pub dropped_bytes: u64,
    /// Bytes of the command's still cached after the final drop, by reason.
    pub left_bytes: u64,
    pub left_dirty_bytes: u64,
    pub left_mapped_or_busy_bytes: u64,
    /// Bytes of written files left alone (--keep-written).
    pub kept_written_bytes: u64,
    /// Drop-behind passes while the command ran (beyond the final one).
    pub drops_while_running: u64,
    pub files: u64,
    /// Files that could not be opened to drop their pages (gone, or no handle support).
    pub files_unreachable: u64,
    /// Events the kernel lost (ring buffer overrun): their pages may stay cached.
    pub lost_events: u64,
    pub errors: Vec<FileError>,
    pub error_count: u64,
    /// What `--assist` did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assist: Option<crate::assist::live::AssistReport>,
    /// One-line notices (fallbacks taken).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

type FileKey = (u32, u32, u64);
/// Page ranges `(first page, pages)` per file.
type PageMap = HashMap<FileKey, Vec<(u64, u64)>>;

/// The command's outstanding pages, per file.
#[derive(Default)]
struct Pending {
    files: PageMap,
    pages: u64,
}

struct Dropper {
    opts: RunOptions,
    /// Open files, bounded (a tree of 100k files must not run into RLIMIT_NOFILE).
    fds: Mutex<HashMap<FileKey, Arc<OwnedFd>>>,
    /// Files that could not be opened (gone, or no handle support).
    unreachable: Mutex<std::collections::HashSet<FileKey>>,
    mounts: Mutex<Option<HashMap<(u32, u32), PathBuf>>>,
    written: Mutex<std::collections::HashSet<FileKey>>,
    report: Mutex<RunReport>,
    errors: ErrorLog,
}

impl Dropper {
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
                if fds.len() < MAX_OPEN {
                    fds.insert(key, fd.clone());
                }
                Some(fd)
            }
            Err(_) => {
                if self.unreachable.lock().unwrap().insert(key) {
                    self.report.lock().unwrap().files_unreachable += 1;
                }
                None
            }
        }
    }

    /// Drops every pending range: writeback started for all dirty ranges first, then one wait
    /// per range, then DONTNEED; counts from cachestat before and after. Returns the ranges
    /// where pages stayed (typically still under read I/O: readahead reports pages when it
    /// queues them), so the caller can try them again.
    fn drop_pending(&self, pending: Pending) -> Pending {
        let mut stayed = Pending::default();
        let mut work: Vec<(FileKey, Vec<(u64, u64)>)> = Vec::new();
        for (key, mut ranges) in pending.files {
            ranges.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (i, n) in ranges {
                match merged.last_mut() {
                    Some(m) if i <= m.0 + m.1 => m.1 = m.1.max(i + n - m.0),
                    _ => merged.push((i, n)),
                }
            }
            work.push((key, merged));
        }
        let mut dropped = 0;
        let mut kept = 0;
        // In batches of files, so that a tree of 100k files never holds more than a batch open.
        for batch in work.chunks(1024) {
            let fds: Vec<Option<Arc<OwnedFd>>> = batch.iter().map(|(k, _)| self.fd(*k)).collect();
            let (d, k) = self.drop_batch(batch, &fds, &mut stayed);
            dropped += d;
            kept += k;
        }
        let mut r = self.report.lock().unwrap();
        r.dropped_bytes += dropped * sys::page_size();
        r.kept_written_bytes += kept * sys::page_size();
        stayed
    }

    /// Drops one batch of files: writeback started for all dirty ranges first (so the waits
    /// overlap), then per range a wait and DONTNEED, counted by cachestat before and after.
    /// Returns (pages dropped, pages of written files kept).
    fn drop_batch(
        &self,
        batch: &[(FileKey, Vec<(u64, u64)>)],
        fds: &[Option<Arc<OwnedFd>>],
        stayed: &mut Pending,
    ) -> (u64, u64) {
        let page = sys::page_size();
        let (mut dropped, mut kept) = (0, 0);
        // One cachestat per range says what is cached and dirty; writeback of everything dirty
        // is started at once, so the waits below overlap.
        let mut before: Vec<Vec<(u64, bool)>> = Vec::with_capacity(batch.len());
        for ((key, ranges), fd) in batch.iter().zip(fds) {
            let Some(fd) = fd.as_ref().map(|f| f.as_fd()) else {
                before.push(Vec::new());
                continue;
            };
            let mut v = Vec::with_capacity(ranges.len());
            for &(i, n) in ranges {
                let c = sys::cachestat(fd, i * page, n * page).unwrap_or_default();
                let dirty = c.dirty + c.writeback > 0;
                if dirty {
                    self.written.lock().unwrap().insert(*key);
                    if !self.opts.keep_written {
                        let _ = sys::sync_file_range(fd, i * page, n * page, sys::SFR_WRITE);
                    }
                }
                v.push((c.cache, dirty));
            }
            before.push(v);
        }
        for (((key, ranges), fd), before) in batch.iter().zip(fds).zip(&before) {
            let Some(fd) = fd.as_ref().map(|f| f.as_fd()) else {
                continue;
            };
            let written = self.written.lock().unwrap().contains(key);
            for (&(i, n), &(before, dirty)) in ranges.iter().zip(before) {
                let (off, len) = (i * page, n * page);
                if written && self.opts.keep_written {
                    kept += before;
                    continue;
                }
                if before == 0 {
                    continue;
                }
                if dirty {
                    let _ = sys::sync_file_range(
                        fd,
                        off,
                        len,
                        sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER,
                    );
                }
                if let Err(e) = sys::fadvise(fd, off, len, Advice::DontNeed) {
                    self.errors.push(FileError::io(
                        std::path::Path::new(&format!("<{}:{} inode {}>", key.0, key.1, key.2)),
                        Op::FadviseDontneed,
                        &e,
                    ));
                    continue;
                }
                let after = sys::cachestat(fd, off, len).map(|c| c.cache).unwrap_or(0);
                dropped += before.saturating_sub(after);
                if after > 0 {
                    stayed.files.entry(*key).or_default().push((i, n));
                    stayed.pages += after;
                }
            }
        }
        (dropped, kept)
    }

    /// After the final drop: what of the command's pages in `ranges` (those that stayed) is
    /// still cached, and why (a range still cached is dropped once more first).
    fn measure_left(&self, ranges: &PageMap) {
        let page = sys::page_size();
        let (mut left, mut dirty) = (0, 0);
        for (key, ranges) in ranges {
            if self.opts.keep_written && self.written.lock().unwrap().contains(key) {
                continue;
            }
            let Some(fd) = self.fd(*key) else {
                continue;
            };
            for &(i, n) in ranges {
                let (off, len) = (i * page, n * page);
                let Ok(mut c) = sys::cachestat(fd.as_fd(), off, len) else {
                    continue;
                };
                if c.cache > 0 {
                    // Missed by the passes so far (e.g. a lost retry): drop it now.
                    let _ = sys::sync_file_range(
                        fd.as_fd(),
                        off,
                        len,
                        sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER,
                    );
                    let _ = sys::fadvise(fd.as_fd(), off, len, Advice::DontNeed);
                    let was = c.cache;
                    c = sys::cachestat(fd.as_fd(), off, len).unwrap_or(c);
                    self.report.lock().unwrap().dropped_bytes +=
                        was.saturating_sub(c.cache) * sys::page_size();
                }
                left += c.cache;
                dirty += c.dirty + c.writeback;
            }
        }
        let mut r = self.report.lock().unwrap();
        let page = sys::page_size();
        r.left_bytes = left * page;
        r.left_dirty_bytes = dirty * page;
        r.left_mapped_or_busy_bytes = left.saturating_sub(dirty) * page;
    }
}

/// What to do when tracing is impossible: a cgroup limit also keeps a command's cache small.
const NO_TRACING_HINT: &str = ". Without them, a cgroup memory limit also keeps a command's \
     cache small, e.g.: systemd-run --scope -p MemoryHigh=256M -- CMD";

/// Runs `cmd` and drops the pages it brings into the page cache. stdin/stdout/stderr are
/// inherited; SIGINT and SIGTERM received by pagewise are forwarded to the command.
pub fn run(cmd: &[OsString], opts: &RunOptions) -> Result<RunReport, crate::Error> {
    if cmd.is_empty() {
        return Err(crate::Error::Invalid {
            what: "command",
            message: "nothing to run".into(),
        });
    }
    sys::raise_nofile_limit();
    let events: &[&str] = if opts.assist.is_some() {
        &crate::assist::live::EVENTS
    } else {
        &[crate::trace::ADD_EVENT]
    };
    let assistant = opts
        .assist
        .as_ref()
        .map(|a| Arc::new(Mutex::new(crate::assist::live::Assistant::new(a))));
    type Delayed = std::collections::VecDeque<(std::time::Instant, FileKey, (u64, u64))>;
    let delayed: Arc<Mutex<Delayed>> = Arc::default();
    let dropper = Arc::new(Dropper {
        opts: opts.clone(),
        fds: Mutex::new(HashMap::new()),
        unreachable: Mutex::new(Default::default()),
        mounts: Mutex::new(None),
        written: Mutex::new(Default::default()),
        report: Mutex::new(RunReport::default()),
        errors: ErrorLog::default(),
    });
    let pending = Arc::new(Mutex::new(Pending::default()));
    // Files the command (or --assist) added pages to: only counted for the report.
    let files: Arc<Mutex<std::collections::HashSet<FileKey>>> = Arc::default();
    let added = Arc::new(AtomicU64::new(0));
    let me = std::process::id();
    let page = sys::page_size();
    let stop = Arc::new(AtomicBool::new(false));
    let (p2, f2, ad2) = (pending.clone(), files.clone(), added.clone());
    let (as2, d2) = (assistant.clone(), delayed.clone());
    // Drop-behind needs the events soon: a command reading at 3 GB/s adds 30 MB in 10 ms.
    // With --assist, prefetches need them at once.
    let wake_each = assistant.is_some();
    let on_event = move |e: tracefs::RawEvent| {
        if e.pid == me {
            return;
        }
        if let Some(a) = &as2 {
            let windows = a.lock().unwrap().on_event(&e);
            if !windows.is_empty() {
                let now = std::time::Instant::now();
                let mut files = f2.lock().unwrap();
                let mut d = d2.lock().unwrap();
                for (key, start, n) in windows {
                    files.insert(key);
                    d.push_back((now, key, (start, n)));
                }
            }
        }
        if e.fault {
            return;
        }
        let key = (e.dev_major, e.dev_minor, e.ino);
        let r = (e.ofs / page, 1u64 << e.order.min(20));
        ad2.fetch_add(r.1, Ordering::Relaxed);
        let mut p = p2.lock().unwrap();
        p.files.entry(key).or_default().push(r);
        p.pages += r.1;
        f2.lock().unwrap().insert(key);
    };
    // Perf events where the kernel allows them: they follow the command from its fork without
    // a PID list, whose changes cost an RCU grace period each (~40 ms per run back to back).
    let every = (!wake_each).then_some(Duration::from_millis(2));
    let follower =
        Follower::start(events, opts.buffer_kb, opts.backend, every, on_event).map_err(|e| {
            crate::Error::TracingUnavailable {
                reason: e.0,
                needed_by: "run",
                hint: NO_TRACING_HINT,
            }
        })?;
    let follower_notice = follower.notice.clone();
    // Drop-behind: a thread that drops whenever the outstanding footprint passes the limit.
    let limit_pages = (opts.max_cache / page).max(1);
    let dropper_thread = {
        let (pending, dropper, stop) = (pending.clone(), dropper.clone(), stop.clone());
        let delayed = delayed.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                {
                    // Prefetched windows old enough join the command's footprint.
                    let mut d = delayed.lock().unwrap();
                    let mut p = pending.lock().unwrap();
                    while d.front().is_some_and(|x| x.0.elapsed() >= PREFETCH_GRACE) {
                        let (_, key, r) = d.pop_front().unwrap();
                        p.files.entry(key).or_default().push(r);
                        p.pages += r.1;
                    }
                }
                let over = pending.lock().unwrap().pages > limit_pages;
                if over {
                    let batch = std::mem::take(&mut *pending.lock().unwrap());
                    let stayed = dropper.drop_pending(batch);
                    dropper.report.lock().unwrap().drops_while_running += 1;
                    // Pages still in flight: retry them with the next pass.
                    let mut p = pending.lock().unwrap();
                    let retry = stayed.pages;
                    p.pages += stayed.pages;
                    for (k, v) in stayed.files {
                        p.files.entry(k).or_default().extend(v);
                    }
                    drop(p);
                    if retry > 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        })
    };
    // SIGINT/SIGTERM/SIGHUP/SIGQUIT: pagewise survives them to drop what the command
    // brought in; those sent to pagewise alone are forwarded to the command as they are (the
    // terminal's reach it anyway), so it exits as it would have (130 for Ctrl-C).
    sys::supervise_signals();
    sys::become_subreaper();
    // Threads started before this (reader, drop-behind) are not followed by tracefs.
    follower.arm().map_err(crate::Error::Tracefs)?;
    let start = std::time::Instant::now();
    let status = crate::trace::spawn(cmd).and_then(|mut child| {
        let status = child.wait().map_err(crate::Error::Wait);
        sys::stop_forwarding();
        status
    });
    let orphans = crate::trace::orphans_left();
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            let _ = follower.stop();
            stop.store(true, Ordering::Release);
            let _ = dropper_thread.join();
            return Err(e);
        }
    };
    let elapsed = start.elapsed().as_secs_f64();
    // Stop following (every event until now is handed to the callback), then stop the
    // drop-behind thread and drop the rest.
    let lost = follower.stop().unwrap_or(0);
    stop.store(true, Ordering::Release);
    let _ = dropper_thread.join();
    // The final pass: what is pending, including pages that were still under read I/O during
    // a drop-behind pass (they were queued again). Ranges where pages stayed (read I/O still
    // in flight) are retried a few times; what stays then is measured and reported. Every
    // page the command added produced an event and was dropped in some pass, measured by
    // cachestat, so only the ranges that stayed need measuring again — not the whole set
    // (a second open_by_handle_at + cachestat per file: ~0.5 s on a 100k-file tree).
    let mut last = std::mem::take(&mut *pending.lock().unwrap());
    // Prefetch windows still in their grace period (--assist) go too.
    for (_, key, r) in std::mem::take(&mut *delayed.lock().unwrap()) {
        last.files.entry(key).or_default().push(r);
        last.pages += r.1;
    }
    let mut stayed = dropper.drop_pending(last);
    for _ in 0..FINAL_RETRIES {
        if stayed.pages == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
        stayed = dropper.drop_pending(stayed);
    }
    dropper.measure_left(&stayed.files);
    use std::os::unix::process::ExitStatusExt;
    let mut r = std::mem::take(&mut *dropper.report.lock().unwrap());
    r.exit_code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    r.elapsed_s = elapsed;
    r.added_bytes = added.load(Ordering::Relaxed) * page;
    r.files = files.lock().unwrap().len() as u64;
    r.lost_events = lost;
    r.error_count = dropper.errors.count();
    r.errors = dropper.errors.take();
    r.notices = follower_notice.into_iter().collect();
    r.notices.extend(crate::trace::orphans_notice(
        orphans,
        "their pages are dropped only up to then; pagewise does not follow",
    ));
    if let Some(a) = &assistant {
        let mut ar = a.lock().unwrap().report();
        ar.elapsed_s = elapsed;
        ar.lost_events = lost;
        r.prefetched_bytes = Some(ar.prefetched_bytes);
        r.assist = Some(ar);
    }
    Ok(r)
}
