//! [`Follower`]: this process and what it starts, followed through the filemap tracepoints,
//! by perf events or a tracefs instance.

use super::{perf, tracefs, Backend, TraceUnavailable};
use serde::Serialize;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// How a [`Follower`] collects events. Shown and serialised as `perf` or `tracefs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Perf events, one per CPU and tracepoint, inherited by the command's process tree.
    Perf,
    /// Perf events as [`Source::Perf`], with the page faults from perf's software events
    /// (sampled major and minor faults, their addresses resolved through /proc/PID/maps)
    /// where the kernel has no `mm_filemap_fault` tracepoint (see [`super::faults`]).
    #[serde(rename = "perf-faults")]
    PerfFaults,
    /// A tracefs instance following the command with `set_event_pid`.
    Tracefs,
}

impl Source {
    /// `perf` or `tracefs`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Perf => "perf",
            Source::PerfFaults => "perf-faults",
            Source::Tracefs => "tracefs",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Follows this process and everything it starts after [`Follower::arm`] through the filemap
/// tracepoints, handing each event to a callback on a reader thread: perf events where the
/// kernel allows them (see [`perf`]), else a tracefs instance (see [`tracefs`]) — used by
/// `record` and `run`.
pub struct Follower {
    tracer: Tracer,
    /// The thread followed (0: the calling thread).
    tid: i32,
    /// How events are collected.
    pub source: Source,
    /// A notice to pass on: why perf events were not used (`auto` fell back to tracefs), or
    /// why the prefetching reader kept its normal priority.
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
    /// Opens the events for thread `tid` (a [`super::command::Launcher`]'s) and starts the
    /// reader, which hands every event to `sink` (and does the sink's deferred work between
    /// them), woken at least every `every` — or at once for every event with None. With perf
    /// events the counting starts here, for that thread and what it starts later; with
    /// tracefs at [`Follower::arm`].
    pub fn start<F>(
        events: &[&str],
        buffer_kb: u64,
        backend: Backend,
        every: Option<std::time::Duration>,
        tid: i32,
        sink: F,
    ) -> Result<Follower, TraceUnavailable>
    where
        F: super::EventSink,
    {
        Self::start_with(events, buffer_kb, backend, every, tid, true, sink)
    }

    /// [`Follower::start`] for a process that follows itself: the events of this thread and
    /// of the threads and processes it starts later are all kept, pagewise's own reader
    /// included (it reads no files). Used by `run::Dropping`.
    pub fn start_self<F>(
        events: &[&str],
        buffer_kb: u64,
        backend: Backend,
        every: Option<std::time::Duration>,
        sink: F,
    ) -> Result<Follower, TraceUnavailable>
    where
        F: super::EventSink,
    {
        Self::start_with(events, buffer_kb, backend, every, 0, false, sink)
    }

    fn start_with<F>(
        events: &[&str],
        buffer_kb: u64,
        backend: Backend,
        every: Option<std::time::Duration>,
        tid: i32,
        skip_own: bool,
        mut sink: F,
    ) -> Result<Follower, TraceUnavailable>
    where
        F: super::EventSink,
    {
        let session = match backend {
            Backend::Tracefs => Err(TraceUnavailable("--backend tracefs".into())),
            _ => perf::Session::start_on(events, buffer_kb, every.is_none(), &[tid]),
        };
        let reader_err = |e: std::io::Error| TraceUnavailable(format!("trace reader: {e}"));
        match session {
            Err(why) if backend == Backend::Perf => Err(why),
            Ok(mut session) => {
                let poll = every.unwrap_or(std::time::Duration::from_millis(50));
                let reader = session.stream(poll, skip_own, sink).map_err(reader_err)?;
                let notice = session.notice.take();
                let source = if session.sampled_faults {
                    Source::PerfFaults
                } else {
                    Source::Perf
                };
                Ok(Follower {
                    tracer: Tracer::Perf(session, reader),
                    tid,
                    source,
                    notice,
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
                let reader = inst
                    .reader(stop.clone(), wake, move |line| {
                        if let Some(e) = tracefs::parse_line(line) {
                            sink.event_and_deferred(e);
                        }
                    })
                    .map_err(reader_err)?;
                Ok(Follower {
                    tracer: Tracer::Tracefs(inst, stop, reader),
                    tid,
                    source: Source::Tracefs,
                    notice,
                })
            }
        }
    }

    /// Starts following the thread given to [`Follower::start`] (or the calling thread): the
    /// tracefs instance follows its thread id (and, through event-fork, what it starts from
    /// now on — threads started before are not followed) with its events on; perf events
    /// count already. Call it right before starting the command.
    pub fn arm(&self) -> std::io::Result<()> {
        if let Tracer::Tracefs(inst, _, _) = &self.tracer {
            let tid = match self.tid {
                0 => crate::sys::gettid(),
                t => t as u32,
            };
            inst.follow(&[tid])?;
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
