//! `record`: which file pages a command (and all its descendants) brought into the page cache,
//! from the kernel's `mm_filemap_add_to_page_cache` tracepoint — pages that really came from
//! disk, readahead and mmap faults included, not the read() calls the program made.

pub mod format;
pub mod perf;
pub mod tracefs;

use crate::sys;
pub use format::{Event, Fault, Trace, TraceError, TraceFile};
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
    // SIGINT/SIGTERM from the terminal reach the command (same process group); pagewise only
    // notes them, so it survives to write the trace.
    let _ = sys::interrupt_flag();
    let mut notices = Vec::new();
    let me = std::process::id();
    let start_mono;
    let started_unix_ns;
    let status;
    let raw;
    let lost;
    let source;
    let session = match opts.backend {
        Backend::Tracefs => Err(TraceUnavailable("--backend tracefs".into())),
        _ => perf::Session::start(events, opts.buffer_kb, false),
    };
    match session {
        Err(why) if opts.backend == Backend::Perf => {
            return Err(crate::Error::Other(why.0));
        }
        Ok(mut session) => {
            // The events follow this thread and what it starts from now on: the command is
            // followed from its fork, before exec, so not a page it reads is missed. Our own
            // events are dropped below.
            let sink: Arc<Mutex<Vec<tracefs::RawEvent>>> = Arc::default();
            let s2 = sink.clone();
            let reader = session
                .stream(std::time::Duration::from_millis(100), move |e| {
                    s2.lock().unwrap().push(e)
                })
                .map_err(|e| crate::Error::Other(format!("trace reader: {e}")))?;
            start_mono = sys::monotonic_ns();
            started_unix_ns = unix_now_ns();
            status = run_to_end(cmd);
            session.stop();
            lost = reader
                .join()
                .map_err(|_| crate::Error::Other("trace reader panicked".into()))?;
            raw = std::mem::take(&mut *sink.lock().unwrap());
            source = "perf";
        }
        Err(why) => {
            if opts.backend == Backend::Auto {
                notices.push(format!(
                    "perf events unavailable ({why}): recording through tracefs"
                ));
            }
            let inst = tracefs::Instance::new(events, opts.buffer_kb)
                .map_err(|e| crate::Error::Other(e.0))?;
            let sink: Arc<Mutex<Vec<tracefs::RawEvent>>> = Arc::default();
            let stop = Arc::new(AtomicBool::new(false));
            let s2 = sink.clone();
            let reader = inst
                .reader(
                    stop.clone(),
                    tracefs::Wake::Every(std::time::Duration::from_millis(10)),
                    move |line| {
                        if let Some(e) = tracefs::parse_line(line) {
                            s2.lock().unwrap().push(e);
                        }
                    },
                )
                .map_err(|e| crate::Error::Other(format!("trace_pipe: open failed: {e}")))?;
            let fail = |e: std::io::Error| crate::Error::Other(format!("tracefs: {e}"));
            // Follow ourselves first: with event-fork the child is traced from the fork on.
            inst.follow(&[me]).map_err(fail)?;
            inst.enable().map_err(fail)?;
            start_mono = sys::monotonic_ns();
            started_unix_ns = unix_now_ns();
            status = run_to_end(cmd);
            inst.disable().map_err(fail)?;
            tracefs::Instance::stop_reader(&stop, reader);
            lost = inst.lost();
            drop(inst);
            raw = std::mem::take(&mut *sink.lock().unwrap());
            source = "tracefs";
        }
    }
    let (status, duration_ns) = status?;
    let mut raw = raw;
    raw.retain(|e| e.pid != me);
    let mut trace = build(raw, start_mono, lost, started_unix_ns, duration_ns, cmd);
    if !opts.faults {
        trace.faults = None;
    }
    resolve(&mut trace.files);
    Ok(Recorded {
        trace,
        status,
        source,
        notices,
    })
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
            Ok(s) => return Ok((s, sys::monotonic_ns() - start)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(crate::Error::Other(format!("wait for the command: {e}"))),
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
            if sys::fstat(fd.as_fd()).is_ok_and(|s| s.ino == f.ino) {
                return Ok(fd);
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
    sys::open_by_inode(mfd.as_fd(), f.ino)
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
    std::process::Command::new(prog)
        .args(args)
        .spawn()
        .map_err(|e| crate::Error::Io {
            path: prog.into(),
            op: "spawn",
            source: e,
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
        if let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{}", sys::raw(&fd))) {
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
        trace.command.join(" ")
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
