//! `record`: runs a command under the filemap tracepoints and returns its trace.

use super::command::{self, exit_code, orphans_left, orphans_notice};
use super::{format, tracefs, Event, FollowOptions, Follower, Source, Trace, TraceFile};
use super::{ADD_EVENT, FAULT_EVENT};
use crate::sys;
use crate::verb::{Observer, Outcome, Tally};
use serde::Serialize;
use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};

/// Options of [`record`].
#[derive(Debug, Clone, Default)]
pub struct RecordOptions {
    /// The command and its arguments (`command[0]` is the program, looked up in `PATH`).
    /// Default: empty, which [`RecordOptions::validate`] refuses.
    pub command: Vec<OsString>,
    /// The ring buffer per CPU and how events are collected.
    /// Default: [`FollowOptions::default`].
    pub follow: FollowOptions,
    /// Also record page faults on file mappings (mm_filemap_fault), for `assist --simulate`.
    /// Default: false.
    pub faults: bool,
    /// The command reads nothing from stdin and its output is thrown away (`bench` records
    /// this way, as it runs the command). Default: false (it inherits pagewise's).
    pub quiet: bool,
}

impl RecordOptions {
    /// Checks the options: there must be a command.
    pub fn validate(&self) -> Result<(), crate::Error> {
        if self.command.is_empty() {
            return Err(command::no_command());
        }
        Ok(())
    }
}

/// What [`record`] gives back.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RecordReport {
    /// The recording, files resolved to paths where they could be.
    pub trace: Trace,
    /// The command's exit code (128 + signal when it was killed).
    pub exit_code: i32,
    /// How events were collected.
    pub source: Source,
    /// Notices (a fallback to tracefs, processes left running), elapsed time, and
    /// `interrupted` when the observer was cancelled by the time the command ended.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Runs the command under the tracepoint and returns its trace and exit code. SIGINT and
/// SIGTERM reach the command (same process group); pagewise itself survives them to write the
/// trace, and forwards those sent to it alone. Events come from perf events where the kernel
/// allows them, else from a tracefs instance.
///
/// The command decides when the recording ends: the observer is asked whether it was cancelled
/// only once it has (to set `interrupted`); to stop a recording, signal the command.
///
/// ```
/// use pagewise_core::trace::{record, RecordOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let f = dir.path().join("f");
/// std::fs::write(&f, vec![1u8; 1 << 20]).unwrap();
/// // Cold first, so the command's reads reach the page cache while it is recorded.
/// pagewise_core::evict::evict(&pagewise_core::evict::EvictOptions::new(vec![f.clone()]), &()).unwrap();
/// let opts = RecordOptions {
///     command: vec!["cat".into(), f.into()],
///     ..RecordOptions::default()
/// };
/// let report = record(&opts, &()).unwrap(); // needs the tracepoints: root here
/// assert_eq!(report.exit_code, 0);
/// assert!(report.trace.bytes() >= 1 << 20);
/// ```
pub fn record(opts: &RecordOptions, observer: &dyn Observer) -> Result<RecordReport, crate::Error> {
    record_seen(opts, observer).map(|(r, _)| r)
}

/// [`record`], and the files the command was seen holding (every file it opened: those whose
/// pages were all cached too, which the tracepoints do not name).
pub(crate) fn record_seen(
    opts: &RecordOptions,
    observer: &dyn Observer,
) -> Result<(RecordReport, Arc<super::Witnessed>), crate::Error> {
    opts.validate()?;
    let tally = Tally::new();
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
    let seen = Arc::new(super::Witnessed::default());
    let launcher = command::Launcher::new(
        &opts.command,
        opts.follow.witness.then(|| seen.clone()),
        opts.quiet,
    );
    let follower = Follower::start(
        events,
        opts.follow,
        Some(std::time::Duration::from_millis(10)),
        launcher.tid(),
        move |e| s2.lock().unwrap().push(e),
    )
    .map_err(|e| crate::Error::TracingUnavailable {
        reason: e.0,
        needed_by: None,
        hint: "",
    })?;
    let source = follower.source;
    if let Some(n) = &follower.notice {
        tally.notice(n.clone());
    }
    // The command is followed from its fork, before exec, so not a page it reads is missed
    // (exec reads the program's first pages). Our own events are dropped below.
    follower.arm().map_err(crate::Error::Tracefs)?;
    let started_unix_ns = unix_now_ns();
    let launcher_tid = launcher.tid() as u32;
    let ran = launcher.run();
    let orphans = orphans_left();
    let handed = seen.hand_over_if(orphans);
    let lost = follower.stop().map_err(crate::Error::Tracefs)?;
    let ran = ran?;
    let (status, start_mono, duration_ns) = (ran.status, ran.start_mono_ns, ran.duration_ns());
    let mut raw = std::mem::take(&mut *sink.lock().unwrap());
    let own = [me, launcher_tid, seen.thread_id()];
    let exec = seen.exec_stop();
    raw.retain(|e| the_commands(e, &own, exec));
    let mut trace = build(
        raw,
        start_mono,
        lost,
        started_unix_ns,
        duration_ns,
        &opts.command,
    );
    if !opts.faults {
        trace.faults = None;
    }
    super::resolve(&mut trace.files, &seen);
    if let Some(n) = orphans_notice(orphans, "the trace ends with the command, without") {
        tally.notice(n);
    }
    if let Some(n) = handed {
        tally.notice(n);
    }
    tally.stop_requested(observer);
    let report = RecordReport {
        trace,
        exit_code: exit_code(status),
        source,
        outcome: tally.finish(Vec::new()),
    };
    Ok((report, seen))
}

/// Whether event `e` is the command's: not one of pagewise's own threads' (`own`: perf events
/// give the process and leave them out already, tracefs only the thread — the launcher's and
/// the witness's code faulted in from a cold executable showed up as the command's), and not
/// one of the command's first process before its exec (`exec`: that thread and when the
/// filter stopped its execve), when it still ran pagewise's code — on 5.10 with the build on
/// a 9p share, pages of pagewise and libc were in every trace. Without the witness that
/// moment is unknown and those pages stay.
fn the_commands(e: &tracefs::RawEvent, own: &[u32], exec: Option<(u32, u64)>) -> bool {
    !own.contains(&e.pid) && !exec.is_some_and(|(tid, ns)| e.pid == tid && e.ts_us < ns / 1000)
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
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
                    handle: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pid: u32, ts_us: u64) -> tracefs::RawEvent {
        tracefs::RawEvent {
            pid,
            ts_us,
            dev_major: 8,
            dev_minor: 1,
            ino: 12,
            ofs: 0,
            order: 0,
            fault: false,
            mapped: 0,
            major: None,
        }
    }

    #[test]
    fn pagewise_own_threads_and_the_command_before_its_exec_are_left_out() {
        let own = [100, 101, 102];
        let exec = Some((200, 5_000_000));
        for pid in own {
            assert!(!the_commands(&at(pid, 9_000), &own, exec), "thread {pid}");
        }
        // The command's first process: before its execve was stopped, pagewise's code.
        assert!(!the_commands(&at(200, 4_999), &own, exec));
        // From then on (exec's own reads of the program), its own.
        assert!(the_commands(&at(200, 5_000), &own, exec));
        // Its children, whenever.
        assert!(the_commands(&at(201, 10), &own, exec));
        // Unwatched: only pagewise's threads are known.
        assert!(the_commands(&at(200, 10), &own, None));
        // A witness that never started has id 0, which no event has.
        assert!(the_commands(&at(200, 10), &[100, 101, 0], None));
    }
}
