//! The live assistant: page faults of a process tree, from the `mm_filemap_fault` tracepoint,
//! through the predictor, to `fadvise(WILLNEED)` on the same file opened by handle.
//!
//! A fault is a *miss* when its page is not among the ranges recently seen entering the cache
//! (`mm_filemap_add_to_page_cache` of the target, which the kernel emits right after the fault
//! of a page that was not cached) or prefetched by us. The reader thread waits in poll(2) on the
//! tracing ring, so a quiet target costs no CPU, and issues each prefetch itself, as soon as the
//! event is parsed: the time from the fault to the prefetch is measured and reported.

use super::predictor::{Access, Config, Detector, Predictor};
use crate::sys::{self, Advice};
use crate::trace::tracefs::{self, Instance, RawEvent};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `(device major, device minor, inode)`.
pub type FileKey = (u32, u32, u64);

/// Options of the assistant.
#[derive(Debug, Clone)]
pub struct AssistOptions {
    pub config: Config,
    /// Ring buffer per CPU, KiB.
    pub buffer_kb: u64,
    /// Files kept open at once.
    pub max_open: usize,
}

impl Default for AssistOptions {
    fn default() -> Self {
        AssistOptions {
            config: Config::for_page_size(sys::page_size()),
            buffer_kb: 4096,
            max_open: 1024,
        }
    }
}

/// What the assistant saw and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AssistReport {
    pub elapsed_s: f64,
    /// Page faults of the target on file mappings.
    pub faults: u64,
    /// Faults on pages not known to be cached.
    pub misses: u64,
    /// Faults on pages we had prefetched: misses avoided or shortened (an estimate: pages the
    /// kernel mapped by fault-around without a fault are not counted).
    pub faults_on_prefetched: u64,
    pub prefetches: u64,
    pub prefetches_sequential: u64,
    pub prefetches_stride: u64,
    pub prefetches_range: u64,
    pub prefetched_bytes: u64,
    /// Prefetched pages never faulted nor within fault-around (64 KiB) of a fault: an estimate.
    pub wasted_bytes_estimate: u64,
    /// Time from the fault (tracepoint time stamp) to the prefetch being issued, microseconds.
    pub issue_latency_us_p50: f64,
    pub issue_latency_us_p90: f64,
    pub issue_latency_us_p99: f64,
    pub files: u64,
    /// Files that could not be opened by handle (gone, or a filesystem without handles).
    pub files_unreachable: u64,
    /// Events the kernel lost (ring buffer overrun).
    pub lost_events: u64,
}

/// A prefetched window and which of its pages were used (bit per page).
struct Issued {
    start: u64,
    end: u64,
    used: Vec<u64>,
}

impl Issued {
    fn mark(&mut self, from: u64, to: u64) -> bool {
        let (a, b) = (from.max(self.start), to.min(self.end));
        for p in a..b {
            let i = (p - self.start) as usize;
            self.used[i / 64] |= 1 << (i % 64);
        }
        a < b
    }
    fn unused(&self) -> u64 {
        (self.end - self.start) - self.used.iter().map(|w| w.count_ones() as u64).sum::<u64>()
    }
}

struct Slot {
    id: u64,
    fd: Option<OwnedFd>,
    pages: u64,
    /// Ranges recently seen entering the cache (ring).
    known: VecDeque<(u64, u64)>,
    issued: VecDeque<Issued>,
    last_use: u64,
}

const KNOWN_RANGES: usize = 256;
const ISSUED_WINDOWS: usize = 64;
/// Pages the kernel maps around a fault (fault_around_bytes, 64 KiB by default).
const FAULT_AROUND_PAGES: u64 = 16;

/// The assistant's state: feed it trace events with [`Assistant::on_event`].
pub struct Assistant {
    pred: Predictor,
    page: u64,
    max_open: usize,
    slots: HashMap<FileKey, Slot>,
    next_id: u64,
    tick: u64,
    mounts: Mutex<Option<HashMap<(u32, u32), PathBuf>>>,
    r: AssistReport,
    /// Issue latency histogram, microseconds (last bucket: everything above).
    lat: Vec<u64>,
    wasted: u64,
}

impl Assistant {
    pub fn new(opts: &AssistOptions) -> Assistant {
        Assistant {
            pred: Predictor::new(opts.config.clone()),
            page: sys::page_size(),
            max_open: opts.max_open.max(1),
            slots: HashMap::new(),
            next_id: 0,
            tick: 0,
            mounts: Mutex::new(None),
            r: AssistReport::default(),
            lat: vec![0; 100_001],
            wasted: 0,
        }
    }

    fn slot(&mut self, key: FileKey) -> &mut Slot {
        self.tick += 1;
        if !self.slots.contains_key(&key) {
            if self.slots.len() >= self.max_open {
                let old = self
                    .slots
                    .iter()
                    .min_by_key(|(_, s)| s.last_use)
                    .map(|(k, _)| *k);
                if let Some(s) = old.and_then(|k| self.slots.remove(&k)) {
                    self.wasted += s.issued.iter().map(Issued::unused).sum::<u64>();
                }
            }
            let fd = crate::trace::open_inode(key, &self.mounts).ok();
            let pages = fd
                .as_ref()
                .and_then(|fd| sys::fstat(fd.as_fd()).ok())
                .map_or(0, |st| st.size.div_ceil(self.page));
            self.r.files += 1;
            if fd.is_none() {
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
    pub fn on_event(&mut self, e: &RawEvent) -> Vec<(FileKey, u64, u64)> {
        let key = (e.dev_major, e.dev_minor, e.ino);
        let page = self.page;
        let p = e.ofs / page;
        if !e.fault {
            let n = 1u64 << e.order.min(20);
            let s = self.slot(key);
            if s.known.len() >= KNOWN_RANGES {
                s.known.pop_front();
            }
            s.known.push_back((p, p + n));
            return Vec::new();
        }
        self.r.faults += 1;
        let s = self.slot(key);
        let id = s.id;
        let cached = s.known.iter().any(|&(a, b)| a <= p && p < b);
        let mut on_prefetched = false;
        for w in s.issued.iter_mut() {
            if w.start <= p && p < w.end {
                on_prefetched = true;
            }
            w.mark(p, p + FAULT_AROUND_PAGES);
        }
        if on_prefetched {
            self.r.faults_on_prefetched += 1;
        }
        if !cached {
            self.r.misses += 1;
        }
        let windows = self.pred.access(Access {
            file: super::predictor::stream(id, e.pid),
            page: p,
            hit: cached,
            t_ns: e.ts_us * 1000,
        });
        let mut out = Vec::new();
        for w in windows {
            let s = self.slots.get_mut(&key).unwrap();
            let end = if s.pages > 0 {
                (w.start + w.pages).min(s.pages)
            } else {
                w.start + w.pages
            };
            let Some(fd) = s.fd.as_ref() else { continue };
            if w.start >= end {
                continue;
            }
            let _ = sys::fadvise(
                fd.as_fd(),
                w.start * page,
                (end - w.start) * page,
                Advice::WillNeed,
            );
            let now_us = sys::monotonic_ns() / 1000;
            let lat = now_us.saturating_sub(e.ts_us) as usize;
            let last = self.lat.len() - 1;
            self.lat[lat.min(last)] += 1;
            if s.known.len() >= KNOWN_RANGES {
                s.known.pop_front();
            }
            s.known.push_back((w.start, end));
            if s.issued.len() >= ISSUED_WINDOWS {
                let old = s.issued.pop_front().unwrap();
                self.wasted += old.unused();
            }
            let mut iw = Issued {
                start: w.start,
                end,
                used: vec![0; ((end - w.start) as usize).div_ceil(64)],
            };
            iw.mark(p, p + FAULT_AROUND_PAGES);
            s.issued.push_back(iw);
            self.r.prefetches += 1;
            match w.detector {
                Detector::Sequential => self.r.prefetches_sequential += 1,
                Detector::Stride => self.r.prefetches_stride += 1,
                Detector::Range => self.r.prefetches_range += 1,
            }
            self.r.prefetched_bytes += (end - w.start) * page;
            out.push((key, w.start, end - w.start));
        }
        out
    }

    /// The report so far (waste counted for every window issued).
    pub fn report(&self) -> AssistReport {
        let mut r = self.r.clone();
        let pending: u64 = self
            .slots
            .values()
            .flat_map(|s| s.issued.iter())
            .map(Issued::unused)
            .sum();
        r.wasted_bytes_estimate = (self.wasted + pending) * self.page;
        let total: u64 = self.lat.iter().sum();
        let pct = |q: f64| -> f64 {
            if total == 0 {
                return 0.0;
            }
            let want = ((total as f64) * q).ceil().max(1.0) as u64;
            let mut acc = 0;
            for (us, n) in self.lat.iter().enumerate() {
                acc += n;
                if acc >= want {
                    return us as f64;
                }
            }
            (self.lat.len() - 1) as f64
        };
        r.issue_latency_us_p50 = pct(0.5);
        r.issue_latency_us_p90 = pct(0.9);
        r.issue_latency_us_p99 = pct(0.99);
        r
    }
}

/// The tracepoints the assistant needs.
pub const EVENTS: [&str; 2] = [crate::trace::ADD_EVENT, crate::trace::FAULT_EVENT];

/// Threads of a process: the PIDs to hand to `set_event_pid`.
pub fn threads_of(pid: u32) -> std::io::Result<Vec<u32>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(t) = e?.file_name().to_str().and_then(|s| s.parse().ok()) {
            v.push(t);
        }
    }
    Ok(v)
}

/// Assists running processes (and children they start from now on) until they all exit, or
/// until SIGINT/SIGTERM, or `duration` passes.
pub fn watch(
    pids: &[u32],
    opts: &AssistOptions,
    duration: Option<Duration>,
) -> Result<AssistReport, crate::Error> {
    let mut tids = Vec::new();
    for &pid in pids {
        tids.extend(threads_of(pid).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                crate::Error::NoSuchProcess(pid)
            } else {
                crate::Error::Io {
                    path: format!("/proc/{pid}/task").into(),
                    op: crate::Op::Readdir,
                    source: e,
                }
            }
        })?);
    }
    sys::raise_nofile_limit();
    let inst =
        Instance::new(&EVENTS, opts.buffer_kb).map_err(|e| crate::Error::TracingUnavailable {
            reason: e.0,
            needed_by: "assist",
            hint: "",
        })?;
    let assistant = Arc::new(Mutex::new(Assistant::new(opts)));
    let stop = Arc::new(AtomicBool::new(false));
    let a2 = assistant.clone();
    let me = std::process::id();
    let reader = inst
        .reader(stop.clone(), tracefs::Wake::OnEvent, move |line| {
            if let Some(e) = tracefs::parse_line(line) {
                if e.pid != me {
                    a2.lock().unwrap().on_event(&e);
                }
            }
        })
        .map_err(crate::Error::Tracefs)?;
    let fail = crate::Error::Tracefs;
    inst.follow(&tids).map_err(fail)?;
    inst.enable().map_err(fail)?;
    let interrupted = sys::interrupt_flag();
    let start = std::time::Instant::now();
    loop {
        if interrupted.load(Ordering::SeqCst) || duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        if !pids
            .iter()
            .any(|&p| std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = inst.disable();
    tracefs::Instance::stop_reader(&stop, reader);
    let mut r = assistant.lock().unwrap().report();
    r.lost_events = inst.lost();
    r.elapsed_s = start.elapsed().as_secs_f64();
    Ok(r)
}
