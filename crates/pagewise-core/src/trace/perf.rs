//! Following a command's filemap tracepoints through perf events instead of a tracefs
//! instance (used by `record` and `run`).
//!
//! One perf event per CPU and tracepoint, opened on the recording thread with `inherit`: the
//! command started afterwards, and everything it starts, is followed by the kernel's own
//! fork handling — no PID list to write, and no text to format: samples arrive in per-CPU ring
//! buffers as the tracepoint's raw record. A tracefs instance follows processes through
//! `set_event_pid`, and every change of that list after the first waits for an RCU grace
//! period under the kernel's event lock (35–50 ms here), which back-to-back recordings paid.
//! Closing the last perf event of a tracepoint also waits for a grace period, so the events
//! are handed to a detached process that keeps them open for a few seconds
//! ([`sys::linger_detached`]): a recording that follows finds the tracepoint still
//! registered and pays nothing. Samples of pagewise's own threads (started after the events,
//! so they inherit them) are skipped by process id.
//!
//! Where the kernel has no `mm_filemap_fault` tracepoint (before 6.7: Debian 12's 6.1), the
//! page faults come from perf's software events instead (see [`super::faults`]), in rings of
//! their own, opened the same way (per CPU, per thread, inherited) and read by the same
//! reader, merged in time order with the tracepoints' events.

use super::faults::{self, FaultsFrom, Resolver};
use super::tracefs::{tracefs_root, RawEvent, TraceUnavailable};
use crate::sys::{self, PerfRing};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Tracepoints of a filesystem's synchronous read of one page (a page fault's miss): they
/// only wake the reader of `--assist` (see [`Session::start_on`]); their records are skipped.
const MISS_EVENTS: [&str; 2] = ["ext4/ext4_read_folio", "iomap/iomap_readpage"];

/// With [`MISS_EVENTS`] waking the reader, fault samples wake it every this many.
const FAULT_WAKE_EVERY: u32 = 16;

/// How long the detached process keeps the events (and the tracepoints' registration) alive.
const LINGER_SECS: u32 = 5;

/// Where a tracepoint's fields sit in its raw record (from its tracefs `format` file).
#[derive(Debug, Clone, Default)]
struct Layout {
    fault: bool,
    pid: usize,
    ino: usize,
    index: usize,
    dev: usize,
    /// Offset of `order` (folio order) for mm_filemap_add_to_page_cache.
    order: Option<usize>,
    /// Offset of `last_index` for mm_filemap_map_pages.
    last: Option<usize>,
}

/// A tracepoint's id (`system/name`), from tracefs.
fn event_id(event: &str) -> Result<u64, TraceUnavailable> {
    let dir = tracefs_root()?.join("events").join(event);
    std::fs::read_to_string(dir.join("id"))
        .map_err(|e| TraceUnavailable(format!("{}/id: read failed: {e}", dir.display())))?
        .trim()
        .parse()
        .map_err(|_| TraceUnavailable(format!("{}/id: not a number", dir.display())))
}

/// The page-fault tracepoint (`system/name` or its name alone).
fn is_fault(event: &str) -> bool {
    event.ends_with("mm_filemap_fault")
}

fn layout(event: &str) -> Result<(u64, Layout), TraceUnavailable> {
    let fault = is_fault(event);
    let dir = tracefs_root()?.join("events").join(event);
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .map_err(|e| TraceUnavailable(format!("{}: read failed: {e}", dir.join(f).display())))
    };
    let id = event_id(event)?;
    let fmt = read("format")?;
    let mut fields = HashMap::new();
    for l in fmt.lines() {
        // "\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;"
        let mut name = None;
        let mut off = None;
        for part in l.split(';') {
            let part = part.trim();
            if let Some(decl) = part.strip_prefix("field:") {
                name = decl.rsplit([' ', '*']).next().map(str::to_string);
            } else if let Some(o) = part.strip_prefix("offset:") {
                off = o.parse::<usize>().ok();
            }
        }
        if let (Some(n), Some(o)) = (name, off) {
            fields.insert(n, o);
        }
    }
    let get = |n: &str| {
        fields.get(n).copied().ok_or_else(|| {
            TraceUnavailable(format!("{event}: this kernel's record has no field {n}"))
        })
    };
    Ok((
        id,
        Layout {
            fault,
            pid: get("common_pid")?,
            ino: get("i_ino")?,
            index: get("index")?,
            dev: get("s_dev")?,
            // Added in 5.18 with large folios: before it every page is added alone (order
            // 0), and 5.10's record lacks the field — which made record, run and assist
            // refuse there.
            order: if fault || event == super::MAP_EVENT {
                None
            } else {
                fields.get("order").copied()
            },
            last: if event == super::MAP_EVENT {
                Some(get("last_index")?)
            } else {
                None
            },
        },
    ))
}

/// Whether the page faults are sampled through perf software events rather than traced
/// (the fault tracepoint where the kernel has it, unless told otherwise), and the notice
/// saying so.
fn faults_sampled() -> (bool, Option<String>) {
    match FaultsFrom::from_env() {
        FaultsFrom::Samples => (
            true,
            Some(format!(
                "page faults sampled through perf software events \
                 ({}=samples)",
                faults::FAULTS_FROM_ENV
            )),
        ),
        FaultsFrom::Tracepoint => (false, None),
        FaultsFrom::Auto => match layout(super::FAULT_EVENT) {
            Ok(_) => (false, None),
            Err(why) => (
                true,
                Some(format!(
                    "page faults sampled through perf software events (major and \
                     minor page faults, addresses resolved through /proc/PID/maps): \
                     {why}"
                )),
            ),
        },
    }
}

/// The events `--assist` adds where the faults are traced with a wake-up each.
///
/// A wake-up costs the faulting thread ~13 us (the kernel's irq_work interrupt and the
/// reader's wake-up, in a guest: fio mmap randread spent 40% of its CPU there), and only
/// misses need the reader at once. Where the filesystems' synchronous page reads have a
/// tracepoint (ext4_read_folio, iomap_readpage: a fault on a page that is not cached, before
/// its read is submitted), those wake the reader and faults only every FAULT_WAKE_EVERY
/// samples (hits drive sequential windows; a filesystem without such a tracepoint still gets
/// its misses seen within that many faults).
fn add_assist_events(
    events: &[&str],
    layouts: &mut HashMap<u16, Layout>,
    ids: &mut Vec<u64>,
    wakes: &mut Vec<sys::PerfWake>,
) {
    // Fault-around, where the kernel has the tracepoint: the assistant sees how far a chunk
    // was read after its window made the pages ready (those faults do not reach
    // mm_filemap_fault). It wakes the reader every 64 samples, as pages added do.
    if let Ok((id, l)) = layout(super::MAP_EVENT) {
        layouts.insert(id as u16, l);
        ids.push(id);
        wakes.push(sys::PerfWake::Samples(64));
    }
    let before_miss = ids.len();
    for ev in MISS_EVENTS {
        if let Ok(id) = event_id(ev) {
            ids.push(id);
            wakes.push(sys::PerfWake::Samples(1));
        }
    }
    if ids.len() > before_miss {
        for (e, w) in events.iter().zip(wakes.iter_mut()) {
            if is_fault(e) {
                *w = sys::PerfWake::Samples(FAULT_WAKE_EVERY);
            }
        }
    }
}

/// Opens the page-fault software event `config` for thread `tid` on `cpu`, counted in the
/// kernel too where allowed, else in user space only (EACCES, EPERM).
fn open_fault_event(
    config: u64,
    tid: i32,
    cpu: i32,
    wake: sys::PerfWake,
) -> std::io::Result<OwnedFd> {
    let open = |user_only| sys::perf_software_open_for(config, tid, cpu, true, wake, user_only);
    open(false).or_else(|e| match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => open(true),
        _ => Err(e),
    })
}

/// Why the `name` page-fault event of thread `tid` on `cpu` could not be opened: `e`, and
/// for a permission error the `perf_event_paranoid` setting behind it.
fn fault_event_failed(e: &std::io::Error, name: &str, tid: i32, cpu: i32) -> TraceUnavailable {
    let paranoid = match (e.raw_os_error(), crate::procfs::perf_event_paranoid()) {
        (Some(libc::EACCES | libc::EPERM), Some(p)) => format!(
            " (kernel.perf_event_paranoid is {p}: perf events of \
             another user's process need root or CAP_PERFMON, and above 2 any at all)"
        ),
        _ => String::new(),
    };
    TraceUnavailable(format!(
        "perf_event_open(software event: {name} page faults, thread {tid}, \
         cpu {cpu}) failed: {e}{paranoid}"
    ))
}

/// What a ring holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Tracepoint samples (their raw records).
    Tracepoints,
    /// `PERF_COUNT_SW_PAGE_FAULTS_MAJ` samples.
    Major,
    /// `PERF_COUNT_SW_PAGE_FAULTS_MIN` samples.
    Minor,
}

/// A ring: the descriptor polled, the mapping, what it holds.
type Ring = (OwnedFd, PerfRing, Kind);

/// The perf events of one recording: per CPU, one event per tracepoint, all writing into the
/// first one's ring (and, where faults are sampled, a ring for the major faults and one for
/// the minor ones).
pub struct Session {
    events: Vec<OwnedFd>,
    /// Wakes the reader at the end.
    wake: OwnedFd,
    rings: Vec<Ring>,
    layouts: HashMap<u16, Layout>,
    stop: Arc<AtomicBool>,
    /// The reader issues prefetches (`--assist`): it runs at [`READER_NICE`] with a
    /// [`READER_SLICE_NS`] time slice.
    urgent: bool,
    /// Why the reader could not be given its priority (set by [`Session::stream`]), and
    /// why faults are sampled rather than traced (set at start).
    pub notice: Option<String>,
    /// The page faults come from perf's software events (see [`super::faults`]), not from
    /// the `mm_filemap_fault` tracepoint.
    pub sampled_faults: bool,
}

/// The nice value of `--assist`'s event reader. It issues each prefetch the moment a miss is
/// read, and with both CPUs busy (the command's threads, drop-behind's page-out) it waited for
/// one: fault-to-prefetch p99 357–454 us at nice 0, 223–243 us at -10, the same throughput
/// (fio mmap randread 128k on 2 CPUs).
const READER_NICE: i32 = -10;

/// The reader's time slice (an EEVDF custom slice, 6.12+; the kernel's minimum): its
/// wake-ups get an earlier deadline than the command's busy threads (1.4 ms slices on 2 CPUs)
/// and preempt them. fio mmap randread 128k, 8 GiB, 20 s, `--max-cache none`, three runs
/// each: fault-to-prefetch p99 220–321 us with the default slice, 136–174 us with 0.1 ms.
const READER_SLICE_NS: u64 = 100_000;

impl Session {
    /// Opens the events (`system/name` tracepoints) on every online CPU with `buffer_kb` of
    /// ring each. They count from now on, for this thread and everything it starts later.
    /// The reader is woken when a ring is half full, or with `wake_each` at every event.
    pub fn start(
        events: &[&str],
        buffer_kb: u64,
        wake_each: bool,
    ) -> Result<Session, TraceUnavailable> {
        Self::start_on(events, buffer_kb, wake_each, &[0])
    }

    /// [`Session::start`] for the threads `tids` (0: the calling thread) instead of the
    /// caller: on every CPU one event per thread and tracepoint, inherited by what they start
    /// from now on, all writing into one ring per CPU (`assist -p`).
    pub fn start_on(
        events: &[&str],
        buffer_kb: u64,
        wake_each: bool,
        tids: &[i32],
    ) -> Result<Session, TraceUnavailable> {
        let want_faults = events.iter().any(|e| is_fault(e));
        let (sampled, notice) = if want_faults {
            faults_sampled()
        } else {
            (false, None)
        };
        let events: Vec<&str> = events
            .iter()
            .copied()
            .filter(|e| !(sampled && is_fault(e)))
            .collect();
        let mut layouts = HashMap::new();
        let mut ids = Vec::new();
        for ev in &events {
            let (id, l) = layout(ev)?;
            layouts.insert(id as u16, l);
            ids.push(id);
        }
        let page = sys::page_size();
        let pages = (buffer_kb * 1024 / page).max(8).next_power_of_two() as usize;
        // Half a ring; or with `wake_each`, every fault sample. Other events alongside faults
        // (the pages added, for bookkeeping) wake the reader every 64 samples only, so a
        // fault-heavy program does not pay two wake-ups per page (measured: fio bs=16k mmap
        // reads lost half their rate to them).
        let has_faults = events.iter().any(|e| is_fault(e));
        let mut wakes: Vec<sys::PerfWake> = events
            .iter()
            .map(|e| match (wake_each, want_faults && !is_fault(e)) {
                (false, _) => sys::PerfWake::Bytes((pages as u64 * page / 2) as u32),
                (true, false) => sys::PerfWake::Samples(1),
                (true, true) => sys::PerfWake::Samples(64),
            })
            .collect();
        if wake_each && has_faults {
            add_assist_events(&events, &mut layouts, &mut ids, &mut wakes);
        }
        let mut s = Session {
            events: Vec::new(),
            wake: sys::eventfd().map_err(|e| TraceUnavailable(format!("eventfd failed: {e}")))?,
            rings: Vec::new(),
            layouts,
            stop: Arc::default(),
            urgent: wake_each && want_faults,
            notice,
            sampled_faults: sampled,
        };
        let cpus = sys::online_cpus();
        for &cpu in &cpus {
            s.open_cpu(cpu, tids, &ids, pages, &wakes)?;
            if sampled {
                s.open_faults_cpu(cpu, tids, pages, wake_each)?;
            }
        }
        if s.rings.is_empty() {
            let shown: Vec<i32> = tids.iter().take(8).copied().collect();
            return Err(TraceUnavailable(format!(
                "no CPU accepted a perf event (CPUs {cpus:?}, threads {shown:?}: each CPU went \
                 offline (ENODEV) or each thread exited (ESRCH))"
            )));
        }
        Ok(s)
    }

    /// Opens one event per thread and tracepoint on `cpu`: the first with a ring of `pages`,
    /// the others writing into it. A CPU gone offline since they were listed is skipped, and
    /// so is a thread that exited since (its process's other threads are followed).
    fn open_cpu(
        &mut self,
        cpu: i32,
        tids: &[i32],
        ids: &[u64],
        pages: usize,
        wakes: &[sys::PerfWake],
    ) -> Result<(), TraceUnavailable> {
        let mut first: Option<OwnedFd> = None;
        let each = ids.iter().zip(wakes);
        for (&tid, (&id, &wake)) in tids.iter().flat_map(|t| each.clone().map(move |i| (t, i))) {
            let fd = match sys::perf_tracepoint_open_for(id, tid, cpu, true, wake) {
                Ok(fd) => fd,
                // A CPU that went offline since we listed them.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => break,
                // A thread that exited since.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) && tid != 0 => continue,
                Err(e) => {
                    return Err(TraceUnavailable(format!(
                        "perf_event_open(tracepoint {id}, thread {tid}, cpu {cpu}) failed: {e}"
                    )))
                }
            };
            self.attach(fd, &mut first, pages, Kind::Tracepoints)?;
        }
        self.events.extend(first);
        Ok(())
    }

    /// Adds event `fd` of one CPU and kind: the first (`first` empty) gets a ring of `pages`
    /// and is kept in `first`; the others write into its ring.
    fn attach(
        &mut self,
        fd: OwnedFd,
        first: &mut Option<OwnedFd>,
        pages: usize,
        kind: Kind,
    ) -> Result<(), TraceUnavailable> {
        let Some(f) = first else {
            self.add_ring(&fd, pages, kind)?;
            *first = Some(fd);
            return Ok(());
        };
        sys::perf_set_output(fd.as_fd(), f.as_fd())
            .map_err(|e| TraceUnavailable(format!("PERF_EVENT_IOC_SET_OUTPUT failed: {e}")))?;
        self.events.push(fd);
        Ok(())
    }

    /// Maps a ring of `pages` for event `fd`, the first of its CPU and kind (the others'
    /// samples can only be sent to an event with a ring).
    fn add_ring(&mut self, fd: &OwnedFd, pages: usize, kind: Kind) -> Result<(), TraceUnavailable> {
        let ring = PerfRing::map(fd.as_fd(), pages)
            .map_err(|e| TraceUnavailable(format!("mmap of a perf ring buffer failed: {e}")))?;
        let poll = fd
            .try_clone()
            .map_err(|e| TraceUnavailable(format!("dup of a perf event failed: {e}")))?;
        self.rings.push((poll, ring, kind));
        Ok(())
    }

    /// Opens the page-fault software events on `cpu` for every thread of `tids`: the major
    /// faults into one ring (the reader woken at each with `wake_each`: they are the misses),
    /// the minor ones into another (woken every 64: the hits, which drive the sequential
    /// windows, need not wake it). Counted in the kernel too where allowed, else in user
    /// space only (`perf_event_paranoid` 2 without CAP_PERFMON).
    fn open_faults_cpu(
        &mut self,
        cpu: i32,
        tids: &[i32],
        pages: usize,
        wake_each: bool,
    ) -> Result<(), TraceUnavailable> {
        let lazy = sys::PerfWake::Bytes((pages as u64 * sys::page_size() / 2) as u32);
        let kinds = [
            (sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ, Kind::Major, "major", 1),
            (sys::PERF_COUNT_SW_PAGE_FAULTS_MIN, Kind::Minor, "minor", 64),
        ];
        for (config, kind, name, every) in kinds {
            let wake = if wake_each {
                sys::PerfWake::Samples(every)
            } else {
                lazy
            };
            let mut first: Option<OwnedFd> = None;
            for &tid in tids {
                let fd = match open_fault_event(config, tid, cpu, wake) {
                    Ok(fd) => fd,
                    Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && tid != 0 => continue,
                    Err(e) => return Err(fault_event_failed(&e, name, tid, cpu)),
                };
                self.attach(fd, &mut first, pages, kind)?;
            }
            self.events.extend(first);
        }
        Ok(())
    }

    /// Starts the thread that empties the rings into `sink` (woken as set at start, and at
    /// least every `every`) until [`Session::stop`], doing the sink's deferred work whenever
    /// the rings are empty; it returns the count of lost events.
    /// With `skip_own`, samples of this process's threads are skipped (a command's recording);
    /// without, they are kept (a process following itself, `run::Dropping`).
    pub fn stream<F>(
        &mut self,
        every: std::time::Duration,
        skip_own: bool,
        mut sink: F,
    ) -> std::io::Result<std::thread::JoinHandle<u64>>
    where
        F: super::EventSink,
    {
        let mut rings = std::mem::take(&mut self.rings);
        let layouts = self.layouts.clone();
        let wake = self.wake.try_clone()?;
        let stop = self.stop.clone();
        let every_ms = every.as_millis().clamp(1, i32::MAX as u128) as i32;
        // Process ids are never 0: skipping pid 0 skips nothing.
        let me = if skip_own { std::process::id() } else { 0 };
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("pw-events".into())
            .spawn(move || {
                let _ = tid_tx.send(sys::gettid());
                let mut lost = 0u64;
                let mut batch = Vec::new();
                let mut resolver = Resolver::default();
                loop {
                    // Read the flag first: a ring emptied after it was set holds everything.
                    let last = stop.load(Ordering::Acquire);
                    lost += drain_all(
                        &mut rings,
                        &layouts,
                        &mut resolver,
                        me,
                        &mut batch,
                        &mut |e| sink.event(e),
                    );
                    if last {
                        return lost;
                    }
                    // Deferred work, one piece between two reads of the rings.
                    if sink.idle() {
                        continue;
                    }
                    let mut fds: Vec<_> = rings.iter().map(|(fd, _, _)| fd.as_fd()).collect();
                    fds.push(wake.as_fd());
                    let _ = sys::poll_any_readable(&fds, every_ms);
                }
            })?;
        if self.urgent {
            if let Ok(tid) = tid_rx.recv() {
                if let Err(e) = sys::set_thread_latency(tid, READER_NICE, READER_SLICE_NS) {
                    // Without CAP_SYS_NICE: the short slice alone needs no privilege.
                    let slice = sys::set_thread_latency(tid, 0, READER_SLICE_NS).is_ok();
                    let before = self.notice.take().map(|n| n + "; ").unwrap_or_default();
                    self.notice = Some(
                        before
                            + &format!(
                                "the prefetching thread runs at normal priority{} \
                         (sched_setattr(nice {READER_NICE}): {e})",
                                if slice { " with a 0.1 ms slice" } else { "" }
                            ),
                    );
                }
            }
        }
        Ok(handle)
    }

    /// Stops counting, hands the events to a detached process that keeps them a few
    /// seconds (see the module documentation), and tells the reader to finish.
    pub fn stop(self) {
        for fd in &self.events {
            let _ = sys::perf_disable(fd.as_fd());
        }
        let keep: Vec<_> = self.events.iter().map(|f| f.as_fd()).collect();
        let _ = sys::linger_detached(&keep, LINGER_SECS);
        self.stop.store(true, Ordering::Release);
        let _ = sys::eventfd_signal(self.wake.as_fd());
    }
}

/// Empties every ring into `on_event`, in time order across the rings; returns the events the
/// kernel reports lost. Each ring is in time order, but one ring after the other, the events of
/// a thread that moved between CPUs would come out of order, and the assistant's clusters are
/// built from the order of a thread's faults. (The sort is stable and runs in linear time on
/// rings that do not interleave.)
fn drain_all<F: FnMut(RawEvent)>(
    rings: &mut [Ring],
    layouts: &HashMap<u16, Layout>,
    resolver: &mut Resolver,
    me: u32,
    batch: &mut Vec<RawEvent>,
    on_event: &mut F,
) -> u64 {
    let mut lost = 0;
    let now = sys::monotonic_ns();
    for (_, ring, kind) in rings.iter_mut() {
        let kind = *kind;
        ring.drain(|typ, body| match typ {
            sys::PERF_RECORD_SAMPLE => {
                let e = match kind {
                    Kind::Tracepoints => parse_sample(body, layouts, me),
                    Kind::Major | Kind::Minor => faults::parse_fault_sample(body)
                        .filter(|s| s.pid != me)
                        .and_then(|s| resolver.event(&s, kind == Kind::Major, now)),
                };
                if let Some(e) = e {
                    batch.push(e);
                }
            }
            sys::PERF_RECORD_LOST if body.len() >= 16 => {
                lost += u64::from_ne_bytes(body[8..16].try_into().unwrap());
            }
            _ => {}
        });
    }
    batch.sort_by_key(|e| e.ts_us);
    for e in batch.drain(..) {
        on_event(e);
    }
    lost
}

/// Decodes one PERF_RECORD_SAMPLE body: u32 pid, u32 tid, u64 time, u32 size, raw record.
/// Samples of pagewise's own threads (which inherit the events when started after them) are
/// skipped.
fn parse_sample(b: &[u8], layouts: &HashMap<u16, Layout>, me: u32) -> Option<RawEvent> {
    if u32::from_ne_bytes(b.get(0..4)?.try_into().ok()?) == me {
        return None;
    }
    let time = u64::from_ne_bytes(b.get(8..16)?.try_into().ok()?);
    let size = u32::from_ne_bytes(b.get(16..20)?.try_into().ok()?) as usize;
    let raw = b.get(20..20 + size)?;
    let typ = u16::from_ne_bytes(raw.get(0..2)?.try_into().ok()?);
    let l = layouts.get(&typ)?;
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_ne_bytes(raw.get(o..o + 8)?.try_into().ok()?)) };
    let u32_at =
        |o: usize| -> Option<u32> { Some(u32::from_ne_bytes(raw.get(o..o + 4)?.try_into().ok()?)) };
    let dev = u32_at(l.dev)?;
    let order = match l.order {
        Some(o) => *raw.get(o)? as u32,
        None => 0,
    };
    let index = u64_at(l.index)?;
    let mapped = match l.last {
        Some(o) => (u64_at(o)?.saturating_sub(index) + 1).min(u32::MAX as u64) as u32,
        None => 0,
    };
    Some(RawEvent {
        pid: u32_at(l.pid)?,
        ts_us: time / 1000,
        dev_major: dev >> 20,
        dev_minor: dev & ((1 << 20) - 1),
        ino: u64_at(l.ino)?,
        ofs: index * sys::page_size(),
        order,
        fault: l.fault,
        mapped,
        major: None,
    })
}
