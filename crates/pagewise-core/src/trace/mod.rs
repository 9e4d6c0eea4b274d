//! `record`: which file pages a command (and all its descendants) brought into the page cache,
//! from the kernel's `mm_filemap_add_to_page_cache` tracepoint — pages that really came from
//! disk, readahead and mmap faults included, not the read() calls the program made.

pub mod format;
pub mod perf;
pub mod tracefs;

use crate::sys;
pub use format::{Event, Fault, Trace, TraceError, TraceFile, UNNAMED_LEGEND};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
pub use tracefs::TraceUnavailable;

/// Options of `record`.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Ring buffer per CPU, KiB.
    pub buffer_kb: u64,
    /// Also record page faults on file mappings (mm_filemap_fault), for `assist --simulate`.
    pub faults: bool,
    /// How events are collected.
    pub backend: Backend,
}

/// How `record` collects events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Perf events where the kernel allows them, else a tracefs instance (with a notice).
    #[default]
    Auto,
    /// Perf events ([`perf`]): no PID list, binary samples, nothing to wait for at the end.
    Perf,
    /// A tracefs instance ([`tracefs`]) following the command with set_event_pid.
    Tracefs,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            buffer_kb: 4096,
            faults: false,
            backend: Backend::Auto,
        }
    }
}

pub const ADD_EVENT: &str = "filemap/mm_filemap_add_to_page_cache";
pub const FAULT_EVENT: &str = "filemap/mm_filemap_fault";

/// Runs `cmd` under the tracepoint and returns its trace and exit status. SIGINT and SIGTERM
/// reach the command (same process group); pagewise itself survives them to write the trace.
/// Events come from perf events where the kernel allows them, else from a tracefs instance.
pub fn record(cmd: &[OsString], opts: &RecordOptions) -> Result<Recorded, crate::Error> {
    if cmd.is_empty() {
        return Err(crate::Error::Invalid {
            what: "command",
            message: "nothing to run".into(),
        });
    }
    let events: &[&str] = if opts.faults {
        &[ADD_EVENT, FAULT_EVENT]
    } else {
        &[ADD_EVENT]
    };
    // SIGINT/SIGTERM/SIGHUP/SIGQUIT: pagewise survives them to write the trace; those sent
    // to pagewise alone are forwarded to the command (the terminal's reach it anyway).
    sys::supervise_signals();
    sys::become_subreaper();
    let me = std::process::id();
    let sink: Arc<Mutex<Vec<tracefs::RawEvent>>> = Arc::default();
    let s2 = sink.clone();
    let follower = Follower::start(
        events,
        opts.buffer_kb,
        opts.backend,
        Some(std::time::Duration::from_millis(10)),
        move |e| s2.lock().unwrap().push(e),
    )
    .map_err(|e| crate::Error::TracingUnavailable {
        reason: e.0,
        needed_by: "record",
        hint: "",
    })?;
    let (source, mut notices): (_, Vec<String>) =
        (follower.source, follower.notice.iter().cloned().collect());
    // The command is followed from its fork, before exec, so not a page it reads is missed.
    // Our own events are dropped below.
    follower.arm().map_err(crate::Error::Tracefs)?;
    let start_mono = sys::monotonic_ns();
    let started_unix_ns = unix_now_ns();
    let status = run_to_end(cmd);
    let orphans = orphans_left();
    let lost = follower.stop().map_err(crate::Error::Tracefs)?;
    let (status, duration_ns) = status?;
    let mut raw = std::mem::take(&mut *sink.lock().unwrap());
    raw.retain(|e| e.pid != me);
    let mut trace = build(raw, start_mono, lost, started_unix_ns, duration_ns, cmd);
    if !opts.faults {
        trace.faults = None;
    }
    resolve(&mut trace.files);
    notices.extend(orphans_notice(
        orphans,
        "the trace ends with the command, without",
    ));
    Ok(Recorded {
        trace,
        status,
        source,
        notices,
    })
}

/// Follows this process and everything it starts after [`Follower::arm`] through the filemap
/// tracepoints, handing each event to a callback on a reader thread: perf events where the
/// kernel allows them (see [`perf`]), else a tracefs instance (see [`tracefs`]) — used by
/// `record` and `run`.
pub struct Follower {
    tracer: Tracer,
    /// "perf" or "tracefs".
    pub source: &'static str,
    /// Why perf events were not used, when `auto` fell back to tracefs.
    pub notice: Option<String>,
}

enum Tracer {
    Perf(perf::Session, std::thread::JoinHandle<u64>),
    Tracefs(
        tracefs::Instance,
        Arc<AtomicBool>,
        std::thread::JoinHandle<()>,
    ),
}

impl Follower {
    /// Opens the events and starts the reader, which calls `on_event` for every event, woken
    /// at least every `every` — or at once for every event with None. With perf events the
    /// counting starts here, for this thread and what it starts later (pagewise's own
    /// threads' events are skipped by the reader).
    pub fn start<F>(
        events: &[&str],
        buffer_kb: u64,
        backend: Backend,
        every: Option<std::time::Duration>,
        on_event: F,
    ) -> Result<Follower, TraceUnavailable>
    where
        F: FnMut(tracefs::RawEvent) + Send + 'static,
    {
        let session = match backend {
            Backend::Tracefs => Err(TraceUnavailable("--backend tracefs".into())),
            _ => perf::Session::start(events, buffer_kb, every.is_none()),
        };
        let reader_err = |e: std::io::Error| TraceUnavailable(format!("trace reader: {e}"));
        match session {
            Err(why) if backend == Backend::Perf => Err(why),
            Ok(mut session) => {
                let poll = every.unwrap_or(std::time::Duration::from_millis(50));
                let reader = session.stream(poll, on_event).map_err(reader_err)?;
                Ok(Follower {
                    tracer: Tracer::Perf(session, reader),
                    source: "perf",
                    notice: None,
                })
            }
            Err(why) => {
                let notice = (backend == Backend::Auto)
                    .then(|| format!("perf events unavailable ({why}): recording through tracefs"));
                let inst = tracefs::Instance::new(events, buffer_kb).map_err(|e| {
                    if backend == Backend::Auto && why.0 != e.0 {
                        TraceUnavailable(format!("perf events unavailable ({why}); {e}"))
                    } else {
                        e
                    }
                })?;
                let wake = every.map_or(tracefs::Wake::OnEvent, tracefs::Wake::Every);
                let stop = Arc::new(AtomicBool::new(false));
                let mut on_event = on_event;
                let reader = inst
                    .reader(stop.clone(), wake, move |line| {
                        if let Some(e) = tracefs::parse_line(line) {
                            on_event(e);
                        }
                    })
                    .map_err(reader_err)?;
                Ok(Follower {
                    tracer: Tracer::Tracefs(inst, stop, reader),
                    source: "tracefs",
                    notice,
                })
            }
        }
    }

    /// Starts following this process: the tracefs instance follows our PID (and, through
    /// event-fork, what we start from now on — threads started before are not followed) with
    /// its events on; perf events count already. Call it right before starting the command.
    pub fn arm(&self) -> std::io::Result<()> {
        if let Tracer::Tracefs(inst, _, _) = &self.tracer {
            inst.follow(&[std::process::id()])?;
            inst.enable()?;
        }
        Ok(())
    }

    /// Stops following, lets the reader hand over every event still buffered, and returns
    /// the number of events the kernel lost (an error only when tracefs refused to turn its
    /// events off; the reader is stopped either way).
    pub fn stop(self) -> std::io::Result<u64> {
        match self.tracer {
            Tracer::Perf(session, reader) => {
                session.stop();
                Ok(reader.join().unwrap_or(0))
            }
            Tracer::Tracefs(inst, stop, reader) => {
                let off = inst.disable();
                tracefs::Instance::stop_reader(&stop, reader);
                off.map(|()| inst.lost())
            }
        }
    }
}

/// What [`record`] gives back.
pub struct Recorded {
    pub trace: Trace,
    /// The command's exit status.
    pub status: std::process::ExitStatus,
    /// How events were collected: "perf" (perf events) or "tracefs" (a tracefs instance).
    pub source: &'static str,
    /// One-line notices (fallbacks taken).
    pub notices: Vec<String>,
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs the command to its end: its exit status and how long it ran (ns).
fn run_to_end(cmd: &[OsString]) -> Result<(std::process::ExitStatus, u64), crate::Error> {
    let start = sys::monotonic_ns();
    let mut child = spawn(cmd)?;
    loop {
        match child.wait() {
            Ok(s) => {
                sys::stop_forwarding();
                return Ok((s, sys::monotonic_ns() - start));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(crate::Error::Wait(e)),
        }
    }
}

/// Turns raw events into a trace: files numbered in order of first appearance.
fn build(
    raw: Vec<tracefs::RawEvent>,
    start_mono: u64,
    lost: u64,
    started_unix_ns: u64,
    duration_ns: u64,
    cmd: &[OsString],
) -> Trace {
    let page = sys::page_size();
    let mut ids: HashMap<(u32, u32, u64), u32> = HashMap::new();
    let mut files = Vec::new();
    let mut events = Vec::with_capacity(raw.len());
    let mut faults = Vec::new();
    for r in raw.iter() {
        let id = *ids
            .entry((r.dev_major, r.dev_minor, r.ino))
            .or_insert_with(|| {
                files.push(TraceFile {
                    dev_major: r.dev_major,
                    dev_minor: r.dev_minor,
                    ino: r.ino,
                    size: 0,
                    path: None,
                    path_bytes: None,
                    deleted: false,
                });
                (files.len() - 1) as u32
            });
        let ts_ns = (r.ts_us * 1000).saturating_sub(start_mono);
        if r.fault {
            faults.push(format::Fault {
                ts_ns,
                file: id,
                pid: r.pid,
                index: r.ofs / page,
            });
            continue;
        }
        events.push(Event {
            ts_ns,
            file: id,
            pid: r.pid,
            index: r.ofs / page,
            pages: 1 << r.order.min(20),
        });
    }
    events.sort_by_key(|e| e.ts_ns);
    faults.sort_by_key(|f| f.ts_ns);
    Trace {
        version: format::VERSION,
        page_size: page as u32,
        lost_events: lost,
        started_unix_ns,
        duration_ns,
        command: cmd
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        files,
        events,
        faults: Some(faults),
    }
}

/// Mount points by device, from /proc/self/mountinfo (the mount of the filesystem's root first).
fn mounts() -> HashMap<(u32, u32), std::path::PathBuf> {
    let mut m: HashMap<(u32, u32), (bool, std::path::PathBuf)> = HashMap::new();
    if let Ok(s) = std::fs::read_to_string("/proc/self/mountinfo") {
        for l in s.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() < 5 {
                continue;
            }
            let Some((a, b)) = f[2].split_once(':') else {
                continue;
            };
            let (Ok(a), Ok(b)) = (a.parse(), b.parse()) else {
                continue;
            };
            let is_root = f[3] == "/";
            let mp = std::path::PathBuf::from(f[4].replace("\\040", " "));
            match m.get(&(a, b)) {
                Some((true, _)) => {}
                Some((false, _)) if !is_root => {}
                _ => {
                    m.insert((a, b), (is_root, mp));
                }
            }
        }
    }
    m.into_iter().map(|(k, v)| (k, v.1)).collect()
}

/// Opens a traced file: by its recorded path when it still names the same inode, else by inode
/// with open_by_handle_at on its filesystem's mount.
pub fn open_file(
    f: &TraceFile,
    mounts_cache: &Mutex<Option<HashMap<(u32, u32), std::path::PathBuf>>>,
) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(p) = &f.path_bytes {
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(p));
        if let Ok(fd) = sys::open_path(
            path,
            sys::OpenFlags {
                noatime: true,
                ..Default::default()
            },
        ) {
            match sys::fstat(fd.as_fd()) {
                Ok(s) if s.ino == f.ino => return regular(fd, s),
                // Replaced under its name by a FIFO or device: say so, never read it.
                Ok(s) if !s.is_file() => return regular(fd, s),
                _ => {}
            }
        }
    }
    let mut g = mounts_cache.lock().unwrap();
    let m = g.get_or_insert_with(mounts);
    let mp = m
        .get(&(f.dev_major, f.dev_minor))
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no mount of device {}:{}", f.dev_major, f.dev_minor),
            )
        })?
        .clone();
    drop(g);
    let mfd = sys::open_path(
        &mp,
        sys::OpenFlags {
            directory: true,
            ..Default::default()
        },
    )?;
    let fd = sys::open_by_inode(mfd.as_fd(), f.ino)?;
    let st = sys::fstat(fd.as_fd())?;
    regular(fd, st)
}

/// A traced file must still be a regular file: a FIFO or device now standing under its name
/// (or its inode number) is refused, never read (a read, or an open without O_NONBLOCK, could
/// block forever).
fn regular(fd: OwnedFd, st: sys::Stat) -> std::io::Result<OwnedFd> {
    if st.is_file() {
        return Ok(fd);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "is a {} now, not the regular file that was traced",
            st.kind()
        ),
    ))
}

/// Why a traced file could not be opened, in words a user can act on.
pub fn unreachable_reason(f: &TraceFile, e: &std::io::Error) -> String {
    if f.path.is_none() && !mounts().contains_key(&(f.dev_major, f.dev_minor)) {
        return format!(
            "recorded without a path: device {}:{} is not mounted anywhere (an internal \
             filesystem: pipes, sockets, memfd or anonymous shared memory), so there is no \
             file to read",
            f.dev_major, f.dev_minor
        );
    }
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESTALE) => {
            if f.deleted {
                "deleted while it was recorded, and gone now".into()
            } else {
                "gone: deleted since it was recorded".into()
            }
        }
        _ => format!("cannot be opened: {e}"),
    }
}

/// Opens a file known only by `(device major, device minor, inode)`, by handle.
pub fn open_inode(
    key: (u32, u32, u64),
    mounts_cache: &Mutex<Option<HashMap<(u32, u32), std::path::PathBuf>>>,
) -> std::io::Result<OwnedFd> {
    let f = TraceFile {
        dev_major: key.0,
        dev_minor: key.1,
        ino: key.2,
        size: 0,
        path: None,
        path_bytes: None,
        deleted: false,
    };
    open_file(&f, mounts_cache)
}

/// Starts the command to trace (`cmd[0]` with the rest as arguments).
pub(crate) fn spawn(cmd: &[OsString]) -> Result<std::process::Child, crate::Error> {
    let Some((prog, args)) = cmd.split_first() else {
        return Err(crate::Error::Invalid {
            what: "command",
            message: "nothing to run".into(),
        });
    };
    let child = std::process::Command::new(prog)
        .args(args)
        .spawn()
        .map_err(|e| crate::Error::Spawn {
            program: prog.into(),
            source: e,
        })?;
    sys::forward_signals_to(child.id());
    Ok(child)
}

/// Processes left behind by the command: its descendants still running after it exited
/// (a daemon, a background job). pagewise is their subreaper, so they are its children now.
pub(crate) fn orphans_left() -> usize {
    // pagewise's own detached helpers (forks that never exec) run our executable.
    let exe = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mine = exe("self");
    sys::children_of(std::process::id())
        .into_iter()
        .filter(|pid| mine.is_none() || exe(&pid.to_string()) != mine)
        .count()
}

/// The notice for [`orphans_left`]: what their later page-cache use means for the verb.
pub(crate) fn orphans_notice(n: usize, what: &str) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "{n} process(es) started by the command were still running when it exited \
             (a daemon or background job): {what} what they do after that"
        )
    })
}

/// Fills in paths and sizes of traced files (open_by_handle_at + /proc/self/fd), keeping by
/// inode those that cannot be resolved (deleted, or a filesystem without handle support).
pub fn resolve(files: &mut [TraceFile]) {
    let cache = Mutex::new(None);
    for f in files.iter_mut() {
        let Ok(fd) = open_file(f, &cache) else {
            continue;
        };
        if let Ok(st) = sys::fstat(fd.as_fd()) {
            f.size = st.size;
        }
        if let Ok(p) = std::fs::read_link(sys::fd_path(fd.as_fd())) {
            use std::os::unix::ffi::OsStrExt;
            let mut b = p.as_os_str().as_bytes().to_vec();
            if b.ends_with(b" (deleted)") {
                f.deleted = true;
                b.truncate(b.len() - 10);
            }
            if b.first() == Some(&b'/') {
                f.path = Some(String::from_utf8_lossy(&b).into_owned());
                f.path_bytes = Some(b);
            }
        }
    }
}

/// One merged run of pages of a file: `(file, first page, pages, first time)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Run {
    pub file: u32,
    pub index: u64,
    pub pages: u64,
    pub ts_ns: u64,
}

/// Consecutive events (in time order) on the same file with contiguous pages, merged: the
/// grouped view of the original experiments.
pub fn grouped(trace: &Trace) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for e in &trace.events {
        if let Some(last) = out.last_mut() {
            if last.file == e.file && last.index + last.pages == e.index {
                last.pages += e.pages as u64;
                continue;
            }
        }
        out.push(Run {
            file: e.file,
            index: e.index,
            pages: e.pages as u64,
            ts_ns: e.ts_ns,
        });
    }
    out
}

/// Writes the trace as text: `time path offset` per page, or grouped `time path offset length`.
pub fn write_text(
    trace: &Trace,
    grouped_view: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let page = trace.page_size as u64;
    let names: Vec<String> = trace.files.iter().map(|f| f.display()).collect();
    writeln!(
        out,
        "# pagewise trace v{}: {} events, {} files, {} bytes, {} lost events; command: {}",
        trace.version,
        trace.events.len(),
        trace.files.len(),
        trace.bytes(),
        trace.lost_events,
        trace
            .command
            .iter()
            .map(|a| crate::names::escape(a.as_bytes()))
            .collect::<Vec<_>>()
            .join(" ")
    )?;
    if grouped_view {
        writeln!(out, "# time_s path offset length")?;
        for r in grouped(trace) {
            writeln!(
                out,
                "{:.6} {} {} {}",
                r.ts_ns as f64 / 1e9,
                names[r.file as usize],
                r.index * page,
                r.pages * page
            )?;
        }
    } else {
        writeln!(out, "# time_s path offset")?;
        for e in &trace.events {
            for p in 0..e.pages as u64 {
                writeln!(
                    out,
                    "{:.6} {} {}",
                    e.ts_ns as f64 / 1e9,
                    names[e.file as usize],
                    (e.index + p) * page
                )?;
            }
        }
    }
    Ok(())
}
