//! [`Sampler`]: the page-cache tracepoints of the whole machine, through perf events (one per
//! CPU and tracepoint, all of a CPU writing into one ring, read with [`sys::PerfRing`] as
//! `record` reads its rings), counted per interval by a reader thread; [`Sampler::drain`]
//! ends an interval and names what it counted. Where perf events are refused (no CAP_PERFMON
//! under perf_event_paranoid 2, a seccomp filter), the same tracepoints are followed through a
//! tracefs instance of pagewise's own, as `record` does, and counted the same way.

use super::aggregate::{Bounded, Counts, DevKey, FileKey, Folios};
use super::events::{self, Dev, Kind, Layout};
use super::names::{Bdis, FileNames, Procs};
use super::report::Raw;
use super::{Interval, SamplerOptions};
use crate::sys::{self, PerfRing};
use crate::trace::tracefs::tracefs_root;
use crate::trace::TraceUnavailable;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// `PERF_SAMPLE_CGROUP` (Linux 5.7): the sample carries the task's cgroup v2 id.
const PERF_SAMPLE_CGROUP: u64 = 1 << 21;

/// How often the reader empties the rings when they do not wake it (ms): the longest a
/// [`Sampler::drain`] waits for its answer.
const POLL_MS: i32 = 20;

/// `PERF_RECORD_COMM`: a process exec'd (or renamed itself): u32 pid, u32 tid, its command.
const PERF_RECORD_COMM: u32 = 3;

/// Commands of exec'd processes kept for an interval at most (a process that exits before
/// its /proc entry is read is named from its exec).
const MAX_EXECS: usize = 65_536;

/// The reader thread's state.
struct Reader {
    rings: Vec<(OwnedFd, PerfRing)>,
    layouts: Vec<(u16, Layout)>,
    cgroup_ids: bool,
    me: u32,
    options: SamplerOptions,
    procs: Procs,
    folios: Folios,
    bdis: Bdis,
    cur: Raw,
    page: u64,
    /// Commands from PERF_RECORD_COMM, by pid.
    execs: super::aggregate::IntMap<u32, Vec<u8>>,
    /// The samples of one pass over the rings.
    batch: Vec<events::Event>,
    /// The file of the last event (see `Raw::file_pids`).
    last_file: Option<FileKey>,
}

fn empty(options: &SamplerOptions) -> Raw {
    let cap = options.max_keys;
    Raw {
        processes: Bounded::new(cap),
        cgroups: Bounded::new(cap),
        files: Bounded::new(cap),
        file_pids: Default::default(),
        totals: Counts::default(),
        pids: Vec::new(),
        cgroup_table: Vec::new(),
        bdis: Vec::new(),
        lost: 0,
        seq: 0,
    }
}

impl Reader {
    fn new(
        options: &SamplerOptions,
        rings: Vec<(OwnedFd, PerfRing)>,
        layouts: Vec<(u16, Layout)>,
        cgroup_ids: bool,
    ) -> Reader {
        Reader {
            rings,
            layouts,
            cgroup_ids,
            me: std::process::id(),
            options: *options,
            procs: Procs::new(),
            folios: Folios::default(),
            bdis: Bdis::default(),
            cur: empty(options),
            page: sys::page_size(),
            execs: Default::default(),
            batch: Vec::new(),
            last_file: None,
        }
    }

    #[inline]
    fn event(&mut self, e: events::Event) {
        if e.pid == self.me {
            return;
        }
        let file = FileKey::new(
            match e.dev {
                Dev::Fs(d) => DevKey::from_kernel(d),
                Dev::Bdi(name) => self.bdis.dev(&name),
            },
            e.ino,
        );
        let folio = (file, e.index);
        let (order, exact) = match e.kind {
            Kind::Added => {
                let o = e.order.unwrap_or(0);
                self.folios.added(folio, o);
                (o, e.order.is_some())
            }
            Kind::Evicted => {
                let seen = self.folios.order(&folio);
                self.folios.removed(&folio);
                match e.order {
                    Some(o) => (o, true),
                    None => (seen.unwrap_or(0), seen.is_some()),
                }
            }
            Kind::Dirtied => {
                let seen = self.folios.order(&folio);
                (seen.unwrap_or(0), seen.is_some())
            }
        };
        let bytes = self.page << order.min(20);
        self.cur.totals.add(e.kind, bytes, exact);
        let v = self.options.views;
        if v.process || (v.cgroup && e.cgroup_id.is_none()) {
            let cg = self.procs.cgroup_of(e.pid);
            if v.process {
                self.cur.processes.add(e.pid, e.kind, bytes, exact);
            }
            if v.cgroup && e.cgroup_id.is_none() {
                self.cur.cgroups.add(cg, e.kind, bytes, exact);
            }
        }
        if let (true, Some(id)) = (v.cgroup, e.cgroup_id) {
            let cg = self.procs.cgroup_id(id);
            self.cur.cgroups.add(cg, e.kind, bytes, exact);
        }
        if v.file {
            let key = file;
            // One lookup per change of file, not per event (runs of one file are common).
            if self.last_file != Some(key) {
                self.last_file = Some(key);
                if self.cur.file_pids.len() < self.options.max_keys {
                    self.cur.file_pids.entry(key).or_insert(e.pid);
                }
            }
            self.cur.files.add(key, e.kind, bytes, exact);
        }
    }

    /// Empties every ring: exec records first (a process that exec'd is looked up again:
    /// runtimes move a process into its cgroup, then exec), then the samples.
    fn drain_rings(&mut self) {
        let mut rings = std::mem::take(&mut self.rings);
        let mut batch = std::mem::take(&mut self.batch);
        for (_, ring) in rings.iter_mut() {
            ring.drain(|typ, body| self.record(typ, body, &mut batch));
        }
        for e in batch.drain(..) {
            self.event(e);
        }
        self.rings = rings;
        self.batch = batch;
    }

    /// One record of a ring: a sample goes to `batch`, an exec record names its process, a
    /// lost record is counted.
    fn record(&mut self, typ: u32, body: &[u8], batch: &mut Vec<events::Event>) {
        match typ {
            sys::PERF_RECORD_SAMPLE => {
                batch.extend(events::decode(body, &self.layouts, self.cgroup_ids));
            }
            PERF_RECORD_COMM => {
                let Some((pid, comm)) = events::exec_comm(body) else {
                    return;
                };
                self.procs.forget(pid);
                if self.execs.len() < MAX_EXECS {
                    self.execs.insert(pid, comm);
                }
            }
            sys::PERF_RECORD_LOST => {
                if let Some(n) = body.get(8..16).and_then(|b| b.try_into().ok()) {
                    self.cur.lost += u64::from_ne_bytes(n);
                }
            }
            _ => {}
        }
    }

    /// Ends the interval: the counts, with what names them.
    fn take(&mut self) -> Raw {
        let mut raw = std::mem::replace(&mut self.cur, empty(&self.options));
        self.last_file = None;
        raw.processes.flush();
        raw.cgroups.flush();
        raw.files.flush();
        raw.pids = raw
            .processes
            .by_key
            .keys()
            .filter_map(|p| {
                let mut info = self.procs.pids.get(p)?.clone();
                if info.comm.is_none() {
                    info.comm = self.execs.get(p).cloned();
                }
                Some((*p, info))
            })
            .collect();
        self.execs.clear();
        raw.cgroup_table = self.procs.cgroups.clone();
        raw.bdis = self.bdis.unresolved.clone();
        raw.seq = self.procs.interval;
        self.procs.next_interval();
        raw
    }
}

/// Counts the page cache's events of the whole machine, interval by interval: start it
/// once, then [`Sampler::drain`] at the end of each interval (what a long-running process
/// such as the exporter does), [`Sampler::stop`] at the end.
pub struct Sampler {
    events: Vec<OwnedFd>,
    /// The tracefs route, where perf events were refused.
    text: Option<TextRoute>,
    stop: Arc<AtomicBool>,
    requests: crossbeam_channel::Sender<crossbeam_channel::Sender<Raw>>,
    reader: Option<std::thread::JoinHandle<()>>,
    names: FileNames,
    /// Refaults of each cgroup path when last read, and the interval it ended.
    refaults: std::collections::HashMap<String, (u64, u64)>,
    since: Instant,
    views: super::Views,
    max_rows: Option<usize>,
    /// The dirtying tracepoint followed (None: this kernel has neither).
    pub dirty_event: Option<&'static str>,
    /// Cgroups come from PERF_SAMPLE_CGROUP (else from /proc/PID/cgroup).
    pub cgroup_ids: bool,
    /// Notes: tracepoints missing, cgroup source.
    pub notices: Vec<String>,
}

fn read_tracefs(event: &str, file: &str) -> Result<String, TraceUnavailable> {
    let p = tracefs_root()?.join("events").join(event).join(file);
    std::fs::read_to_string(&p)
        .map_err(|e| TraceUnavailable(format!("{}: read failed: {e}", p.display())))
}

fn tracepoint(event: &str, kind: Kind) -> Result<(u16, Layout), TraceUnavailable> {
    let id = read_tracefs(event, "id")?;
    let id: u16 = id
        .trim()
        .parse()
        .map_err(|_| TraceUnavailable(format!("{event}/id: not a 16-bit number: {id:?}")))?;
    Ok((
        id,
        events::layout_of(event, kind, &read_tracefs(event, "format")?)?,
    ))
}

/// Whether the memory controller is on cgroup v2 alone (then a task's v2 id is its memory
/// cgroup, and PERF_SAMPLE_CGROUP names it).
fn memory_on_v2() -> bool {
    let m = crate::cgroup::memory_mounts();
    !m.is_empty()
        && m.iter()
            .all(|m| m.hierarchy == crate::cgroup::Hierarchy::V2)
}

fn open_failed(id: u16, cpu: i32, e: &std::io::Error) -> TraceUnavailable {
    let paranoid = match (e.raw_os_error(), crate::procfs::perf_event_paranoid()) {
        (Some(libc::EACCES | libc::EPERM), Some(p)) => format!(
            " (kernel.perf_event_paranoid is {p}: events of every process need root or \
             CAP_PERFMON)"
        ),
        _ => String::new(),
    };
    TraceUnavailable(format!(
        "perf_event_open(tracepoint {id}, every process, cpu {cpu}) failed: {e}{paranoid}"
    ))
}

/// The tracepoints followed through a tracefs instance of pagewise's own (where perf events
/// are refused: perf_event_paranoid without CAP_PERFMON, or a seccomp filter): its lines are
/// parsed ([`events::parse_text`]) by the instance's reader thread and handed to the counting
/// thread.
struct TextRoute {
    inst: crate::trace::tracefs::Instance,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Ring-buffer overruns already counted.
    lost_seen: u64,
}

/// Events parsed and not yet counted, at most: past it they are dropped and counted as lost.
const TEXT_QUEUE: usize = 1 << 16;

/// What a counting thread hands back: its stop flag, where drain requests go, its handle.
type Counting = (
    Arc<AtomicBool>,
    crossbeam_channel::Sender<crossbeam_channel::Sender<Raw>>,
    std::thread::JoinHandle<()>,
);

/// Starts the thread that owns `reader`: each turn it takes the events in (`fill`), answers
/// drain requests with the interval's counts, and waits (`wait`) — until stopped, after a
/// last `fill`.
fn counting_thread(
    mut reader: Reader,
    mut fill: impl FnMut(&mut Reader) + Send + 'static,
    mut wait: impl FnMut(&mut Reader) + Send + 'static,
) -> Result<Counting, TraceUnavailable> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = crossbeam_channel::unbounded::<crossbeam_channel::Sender<Raw>>();
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("pw-top".into())
        .spawn(move || loop {
            let last = stop2.load(Ordering::Acquire);
            fill(&mut reader);
            while let Ok(reply) = rx.try_recv() {
                let _ = reply.send(reader.take());
            }
            if last {
                return;
            }
            wait(&mut reader);
        })
        .map_err(|e| TraceUnavailable(format!("starting the reader thread failed: {e}")))?;
    Ok((stop, tx, handle))
}

impl Sampler {
    /// Opens the tracepoints on every CPU for every process and starts the reader: through
    /// perf events, else (refused) through a tracefs instance, saying so in the notices.
    pub fn start(options: &SamplerOptions) -> Result<Sampler, TraceUnavailable> {
        match Sampler::start_perf(options) {
            Ok(s) => Ok(s),
            // (Both routes read tracefs: the same reason from both is said once.)
            Err(perf) => {
                Sampler::start_text(options, &perf).map_err(|text| match text.0 == perf.0 {
                    true => perf,
                    false => TraceUnavailable(format!("{perf}; and through tracefs: {text}")),
                })
            }
        }
    }

    fn start_perf(options: &SamplerOptions) -> Result<Sampler, TraceUnavailable> {
        let mut notices = Vec::new();
        let mut layouts = vec![
            tracepoint(events::ADD, Kind::Added)?,
            tracepoint(events::DELETE, Kind::Evicted)?,
        ];
        let mut dirty_event = None;
        let mut why = Vec::new();
        for ev in [events::DIRTY_FOLIO, events::DIRTY_PAGE] {
            match tracepoint(ev, Kind::Dirtied) {
                Ok(l) => {
                    layouts.push(l);
                    dirty_event = Some(ev);
                    break;
                }
                Err(e) => why.push(e.0),
            }
        }
        if dirty_event.is_none() {
            notices.push(format!("dirtied bytes are not counted: {}", why.join("; ")));
        }
        let want_ids = options.views.cgroup && memory_on_v2();
        let (fds, rings, cgroup_ids) = match open_all(&layouts, options.buffer_kb, want_ids) {
            Err(e) if want_ids => {
                notices.push(format!(
                    "cgroups read from /proc/PID/cgroup: PERF_SAMPLE_CGROUP refused ({})",
                    e.0
                ));
                open_all(&layouts, options.buffer_kb, false)?
            }
            r => r?,
        };
        let reader = Reader::new(options, rings, layouts, cgroup_ids);
        let (stop, tx, handle) = counting_thread(reader, Reader::drain_rings, |r| {
            let fds: Vec<_> = r.rings.iter().map(|(f, _)| f.as_fd()).collect();
            let _ = sys::poll_any_readable(&fds, POLL_MS);
        })?;
        Ok(Sampler::assemble(
            options,
            (stop, tx, handle),
            fds,
            None,
            dirty_event,
            cgroup_ids,
            notices,
        ))
    }

    /// The tracefs route: an instance of pagewise's own with the tracepoints enabled for every
    /// process; its reader thread parses lines into a bounded queue the counting thread
    /// empties.
    fn start_text(
        options: &SamplerOptions,
        perf: &TraceUnavailable,
    ) -> Result<Sampler, TraceUnavailable> {
        use crate::trace::tracefs::{Instance, Wake};
        let root = tracefs_root()?;
        let mut names = vec![events::ADD, events::DELETE];
        let dirty_event = [events::DIRTY_FOLIO, events::DIRTY_PAGE]
            .into_iter()
            .find(|ev| root.join("events").join(ev).is_dir());
        names.extend(dirty_event);
        let inst = Instance::new(&names, options.buffer_kb.max(1024))?;
        let (tx, rx) = crossbeam_channel::bounded::<events::Event>(TEXT_QUEUE);
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let dropped2 = dropped.clone();
        let page = sys::page_size();
        let text_stop = Arc::new(AtomicBool::new(false));
        let lines = inst
            .reader(
                text_stop.clone(),
                Wake::Every(std::time::Duration::from_millis(POLL_MS as u64)),
                move |line| {
                    if let Some(e) = events::parse_text(line, page) {
                        if tx.try_send(e).is_err() {
                            dropped2.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                },
            )
            .map_err(|e| TraceUnavailable(format!("reading trace_pipe failed: {e}")))?;
        inst.enable()
            .map_err(|e| TraceUnavailable(format!("enabling the tracepoints failed: {e}")))?;
        let reader = Reader::new(options, Vec::new(), Vec::new(), false);
        let fill = move |r: &mut Reader| {
            while let Ok(e) = rx.try_recv() {
                r.event(e);
            }
            r.cur.lost += dropped.swap(0, Ordering::Relaxed);
        };
        let (stop, req_tx, handle) = counting_thread(reader, fill, |_| {
            std::thread::sleep(std::time::Duration::from_millis(POLL_MS as u64))
        })?;
        let mut notices = vec![format!(
            "perf events refused ({perf}): following the tracepoints through tracefs instead \
             (processes by thread id; cgroups from /proc/PID/cgroup)"
        )];
        if dirty_event.is_none() {
            notices.push(
                "dirtied bytes are not counted: this kernel has no dirtying tracepoint".into(),
            );
        }
        let text = TextRoute {
            inst,
            stop: text_stop,
            reader: Some(lines),
            lost_seen: 0,
        };
        Ok(Sampler::assemble(
            options,
            (stop, req_tx, handle),
            Vec::new(),
            Some(text),
            dirty_event,
            false,
            notices,
        ))
    }

    /// A sampler of either route, its counting thread started.
    fn assemble(
        options: &SamplerOptions,
        (stop, requests, handle): Counting,
        events: Vec<OwnedFd>,
        text: Option<TextRoute>,
        dirty_event: Option<&'static str>,
        cgroup_ids: bool,
        notices: Vec<String>,
    ) -> Sampler {
        Sampler {
            events,
            text,
            stop,
            requests,
            reader: Some(handle),
            names: FileNames::default(),
            refaults: Default::default(),
            since: Instant::now(),
            views: options.views,
            max_rows: options.max_rows,
            dirty_event,
            cgroup_ids,
            notices,
        }
    }

    /// Ends the current interval (begun at start or at the last drain) and returns what it
    /// counted, named: processes, cgroups (with their refaults over the interval) and files,
    /// as the options' views ask, largest first.
    pub fn drain(&mut self) -> Interval {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let elapsed = self.since.elapsed();
        self.since = Instant::now();
        let mut raw = match self.requests.send(tx) {
            Ok(()) => rx.recv().ok(),
            Err(_) => None,
        };
        if let (Some(t), Some(r)) = (&mut self.text, &mut raw) {
            let lost = t.inst.lost();
            r.lost += lost.saturating_sub(t.lost_seen);
            t.lost_seen = lost;
        }
        self.names.next_interval();
        super::report::interval(
            raw,
            elapsed.as_secs_f64(),
            &mut self.names,
            &mut self.refaults,
            self.dirty_event.is_some(),
            self.views,
            self.max_rows,
        )
    }

    /// Stops the events and the reader.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        for fd in &self.events {
            let _ = sys::perf_disable(fd.as_fd());
        }
        if let Some(t) = &mut self.text {
            let _ = t.inst.disable();
            if let Some(r) = t.reader.take() {
                crate::trace::tracefs::Instance::stop_reader(&t.stop, r);
            }
        }
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Per CPU: one event per tracepoint, for every process, the first with a ring of
/// `buffer_kb`, the others writing into it. Returns the events, the rings (each with its
/// descriptor, to poll), and whether samples carry the cgroup id.
type Opened = (Vec<OwnedFd>, Vec<(OwnedFd, PerfRing)>, bool);

/// The ring of a CPU's first event, mapped, with a descriptor of the event to poll.
fn ring_of(fd: &OwnedFd, pages: usize) -> Result<(OwnedFd, PerfRing), TraceUnavailable> {
    let ring = PerfRing::map(fd.as_fd(), pages)
        .map_err(|e| TraceUnavailable(format!("mmap of a perf ring buffer failed: {e}")))?;
    let poll = fd
        .try_clone()
        .map_err(|e| TraceUnavailable(format!("dup of a perf event failed: {e}")))?;
    Ok((poll, ring))
}

fn open_all(
    layouts: &[(u16, Layout)],
    buffer_kb: u64,
    cgroup: bool,
) -> Result<Opened, TraceUnavailable> {
    let page = sys::page_size();
    let pages = (buffer_kb * 1024 / page).max(8).next_power_of_two() as usize;
    let wake = sys::PerfWake::Bytes((pages as u64 * page / 2) as u32);
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut rings = Vec::new();
    for cpu in sys::online_cpus() {
        let mut first: Option<usize> = None;
        for &(id, _) in layouts {
            let mut attr = sys::PerfEventAttr::tracepoint(id as u64, false, wake);
            attr.sample_type = sys::SampleType::TID | sys::SampleType::RAW;
            // Exec records once per CPU: the commands of processes gone before they are read.
            attr.flags.set(sys::AttrFlags::COMM, first.is_none());
            if cgroup {
                attr.sample_type |= sys::SampleType::from_bits_retain(PERF_SAMPLE_CGROUP);
            }
            let fd = match sys::perf_event_open(&attr, -1, cpu) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => break,
                Err(e) => return Err(open_failed(id, cpu, &e)),
            };
            match first {
                Some(i) => sys::perf_set_output(fd.as_fd(), fds[i].as_fd()).map_err(|e| {
                    TraceUnavailable(format!("PERF_EVENT_IOC_SET_OUTPUT failed: {e}"))
                })?,
                None => {
                    rings.push(ring_of(&fd, pages)?);
                    first = Some(fds.len());
                }
            }
            fds.push(fd);
        }
    }
    if rings.is_empty() {
        return Err(TraceUnavailable("no CPU accepted a perf event".into()));
    }
    Ok((fds, rings, cgroup))
}
