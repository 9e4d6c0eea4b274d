//! The `assist` verb: running processes followed through [`crate::trace::Follower`] (perf
//! events, else tracefs), their page faults handed to the [`Assistant`]. The reader thread
//! waits in poll(2) on the tracing ring, so a quiet target costs no CPU, and issues each
//! prefetch itself, as soon as the event is parsed: the time from the fault to the prefetch
//! is measured and reported.

use super::assistant::{Assistant, Prefetch};
use super::report::AssistReport;
use crate::procfs;
use crate::trace::tracefs::RawEvent;
use crate::trace::{EventSink, Follow, FollowOptions, Follower, StartError};
use crate::verb::{Observer, Tally};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tracepoints the assistant needs (and, where the kernel has them, fault-around and the
/// filesystems' page reads: see `trace::perf::Session::start_on`).
pub const EVENTS: [&str; 2] = [crate::trace::ADD_EVENT, crate::trace::FAULT_EVENT];

/// Options of [`assist`] (`pagewise assist -p PID...`).
#[derive(Debug, Clone, Default)]
pub struct AssistOptions {
    /// The processes to assist: all their threads, their descendants running now, and
    /// children they start from now on.
    /// Default: none, which [`AssistOptions::validate`] refuses.
    pub pids: Vec<u32>,
    /// Stop after this long even if the processes still run. Default: None (until they all
    /// exit, or the observer says stop).
    pub duration: Option<Duration>,
    /// The ring buffer per CPU and how the events are collected.
    /// Default: [`FollowOptions::default`].
    pub follow: FollowOptions,
    /// How to predict and prefetch. Default: [`Prefetch::default`].
    pub prefetch: Prefetch,
}

impl AssistOptions {
    /// Checks the options: at least one process.
    pub fn validate(&self) -> Result<(), crate::Error> {
        if self.pids.is_empty() {
            return Err(crate::Error::Invalid {
                what: "pids",
                message: "no process to assist".into(),
            });
        }
        Ok(())
    }
}

/// Assists running processes (and children they start from now on) until they all exit, the
/// observer says stop (polled every 50 ms), or `duration` passes.
///
/// ```
/// use pagewise_core::assist::{assist, AssistOptions};
/// use std::time::Duration;
/// let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
/// let opts = AssistOptions {
///     pids: vec![child.id()],
///     duration: Some(Duration::from_millis(300)),
///     ..AssistOptions::default()
/// };
/// let report = assist(&opts, &()).unwrap(); // needs the tracepoints: root here
/// child.kill().unwrap();
/// child.wait().unwrap();
/// assert!(report.outcome.is_clean());
/// assert!(report.faults >= report.misses);
/// ```
pub fn assist(opts: &AssistOptions, observer: &dyn Observer) -> Result<AssistReport, crate::Error> {
    opts.validate()?;
    // A kernel thread (kthreadd, kworkers) has no memory map: it never takes a page fault on
    // a file, so following it would wait, silently, until it exits (never, for PID 2).
    for &pid in &opts.pids {
        if let Some(comm) = kernel_thread(pid) {
            return Err(crate::Error::Invalid {
                what: "pid",
                message: format!(
                    "PID {pid} ({comm}) is a kernel thread: it has no memory map and takes no \
                     page faults, so there is nothing to assist"
                ),
            });
        }
        // A zombie has exited (its parent has not reaped it yet): it will never fault again,
        // and its /proc entry would stay for as long as its parent lets it.
        if procfs::is_zombie(pid) {
            return Err(crate::Error::Invalid {
                what: "pid",
                message: format!(
                    "PID {pid} has exited and is a zombie (its parent has not reaped it): \
                     there is nothing to assist"
                ),
            });
        }
    }
    let mut tids = threads_of_all(&opts.pids)?;
    // Processes they started before now (fio's jobs, make's compilers): followed too. New
    // ones are covered by inherit; these must be named. One that exits meanwhile is skipped.
    for pid in procfs::descendants_of(&opts.pids) {
        tids.extend(procfs::threads_of(pid).unwrap_or_default());
    }
    let assistant = Arc::new(Mutex::new(Assistant::new(&opts.prefetch)));
    let tally = Tally::new();
    // Perf events opened on the target's threads, inherited by what they start: binary
    // samples in a ring per CPU, the reader woken at every sample. A tracefs instance
    // (set_event_pid, text) where the kernel refuses them.
    let ptids: Vec<i32> = tids.iter().map(|&t| t as i32).collect();
    let spec = Follow {
        events: &EVENTS,
        options: opts.follow,
        every: None,
        tids: &ptids,
        skip_own: true,
        doing: "following",
    };
    let mut follower = Follower::follow(&spec, Sink(assistant.clone())).map_err(|e| match e {
        StartError::Reader(e) => crate::Error::TracePipe(e),
        StartError::Unavailable(why) => crate::Error::TracingUnavailable {
            reason: why.0,
            needed_by: Some("assist"),
            hint: "",
        },
    })?;
    if let Some(n) = follower.notice.take() {
        tally.notice(n);
    }
    let source = follower.source;
    let armed = follower.arm();
    if let Err(e) = armed {
        let _ = follower.stop_counting();
        return Err(crate::Error::Tracefs(e));
    }
    wait_for(&opts.pids, opts.duration, &tally, observer);
    let (lost, _) = follower.stop_counting();
    let mut r = assistant.lock().unwrap().report();
    r.lost_events = lost;
    r.source = Some(source);
    r.outcome = tally.finish(Vec::new());
    Ok(r)
}

/// `assist -p`'s sink: events into the assistant, and its deferred pieces when no event
/// waits.
struct Sink(Arc<Mutex<Assistant>>);

impl EventSink for Sink {
    fn event(&mut self, e: RawEvent) {
        self.0.lock().unwrap().on_event(&e);
    }
    fn idle(&mut self) -> bool {
        self.0.lock().unwrap().issue_deferred()
    }
}

/// The name of `pid` when it is a kernel thread (PF_KTHREAD in the flags of /proc/PID/stat;
/// kernel threads also have an empty /proc/PID/maps). None when it is not, or when it cannot
/// be read (gone: the caller reports that).
fn kernel_thread(pid: u32) -> Option<String> {
    procfs::stat_of(pid)
        .filter(procfs::Stat::is_kernel_thread)
        .map(|s| s.comm)
}

/// The threads of every process.
fn threads_of_all(pids: &[u32]) -> Result<Vec<u32>, crate::Error> {
    let mut tids = Vec::new();
    for &pid in pids {
        tids.extend(procfs::threads_of(pid).map_err(|e| {
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
    Ok(tids)
}

/// Returns when every process has exited (gone, or a zombie: exited, not yet reaped by its
/// parent, which a notice says), `duration` has passed since `tally` started, or the observer
/// says stop (then `tally` is marked interrupted).
fn wait_for(pids: &[u32], duration: Option<Duration>, tally: &Tally, observer: &dyn Observer) {
    loop {
        if tally.stop_requested(observer)
            || duration.is_some_and(|d| tally.elapsed_s() >= d.as_secs_f64())
        {
            return;
        }
        let running = |&p: &u32| procfs::exists(p) && !procfs::is_zombie(p);
        if !pids.iter().any(running) {
            for &p in pids.iter().filter(|&&p| procfs::is_zombie(p)) {
                tally.notice(format!(
                    "PID {p} exited while assisted and is a zombie (its parent has not reaped \
                     it): the assistance ends with it"
                ));
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
