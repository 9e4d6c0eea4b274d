//! [`Follower`]: threads and what they start, followed through the filemap tracepoints, by
//! perf events or a tracefs instance — the one place that chooses between them (`record`,
//! `run` and `assist` all follow through it).

use super::{perf, tracefs, Backend, FollowOptions, TraceUnavailable};
use serde::Serialize;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// How a [`Follower`] collects events. Shown and serialised as `perf` or `tracefs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// What a [`Follower`] follows, and how.
#[derive(Debug, Clone, Copy)]
pub struct Follow<'a> {
    /// The tracepoints (`filemap/mm_filemap_add_to_page_cache`, ...).
    pub events: &'a [&'a str],
    /// The ring buffer per CPU, and perf events, tracefs, or perf events else tracefs
    /// (`backend`: the one place that choice is made).
    pub options: FollowOptions,
    /// The reader is woken at least this often (None: at once for every event).
    pub every: Option<std::time::Duration>,
    /// The threads followed, with what they start later (0: the calling thread).
    pub tids: &'a [i32],
    /// Events of this process itself are dropped (it follows others); without, they are kept
    /// (a process following itself, `run::Dropping`).
    pub skip_own: bool,
    /// What the notice of a fallback to tracefs says is done through it (`recording`,
    /// `following`).
    pub doing: &'static str,
}

/// Why a [`Follower`] did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Neither way of following is available (both reasons when both were tried).
    #[error(transparent)]
    Unavailable(TraceUnavailable),
    /// The reader thread could not be started (or its trace_pipe opened).
    #[error("trace reader: {0}")]
    Reader(#[source] std::io::Error),
}

impl From<StartError> for TraceUnavailable {
    fn from(e: StartError) -> TraceUnavailable {
        match e {
            StartError::Unavailable(u) => u,
            reader @ StartError::Reader(_) => TraceUnavailable(reader.to_string()),
        }
    }
}

/// Follows threads and everything they start through the filemap tracepoints, handing each
/// event to a callback on a reader thread: perf events where the kernel allows them (see
/// [`perf`]), else a tracefs instance (see [`tracefs`]) — used by `record`, `run` and `assist`.
pub struct Follower {
    tracer: Tracer,
    /// The threads followed (0: the calling thread).
    tids: Vec<i32>,
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
        follow: FollowOptions,
        every: Option<std::time::Duration>,
        tid: i32,
        sink: F,
    ) -> Result<Follower, TraceUnavailable>
    where
        F: super::EventSink,
    {
        Self::record(events, follow, every, &[tid], true, sink)
    }

    /// [`Follower::start`] for a process that follows itself: the events of this thread and
    /// of the threads and processes it starts later are all kept, pagewise's own reader
    /// included (it reads no files). Used by `run::Dropping`.
    pub fn start_self<F>(
        events: &[&str],
        follow: FollowOptions,
        every: Option<std::time::Duration>,
        sink: F,
    ) -> Result<Follower, TraceUnavailable>
    where
        F: super::EventSink,
    {
        Self::record(events, follow, every, &[0], false, sink)
    }

    /// What [`Follower::start`] and [`Follower::start_self`] share: [`Follower::follow`]
    /// of `tids` (`skip_own`: leave pagewise's own threads out), "recording".
    fn record<F>(
        events: &[&str],
        follow: FollowOptions,
        every: Option<std::time::Duration>,
        tids: &[i32],
        skip_own: bool,
        sink: F,
    ) -> Result<Follower, TraceUnavailable>
    where
        F: super::EventSink,
    {
        let spec = Follow {
            events,
            options: follow,
            every,
            tids,
            skip_own,
            doing: "recording",
        };
        Ok(Self::follow(&spec, sink)?)
    }

    /// Opens the events `spec` names and starts the reader, which hands every event to
    /// `sink` (and does the sink's deferred work between them). Perf events count from here;
    /// a tracefs instance from [`Follower::arm`].
    pub fn follow<F>(spec: &Follow<'_>, sink: F) -> Result<Follower, StartError>
    where
        F: super::EventSink,
    {
        let backend = spec.options.backend;
        let session = match backend {
            Backend::Tracefs => Err(TraceUnavailable("`backend` tracefs".into())),
            _ => perf::Session::start_on(
                spec.events,
                spec.options.buffer_kb,
                spec.every.is_none(),
                spec.tids,
            ),
        };
        match session {
            Err(why) if backend == Backend::Perf => Err(StartError::Unavailable(why)),
            Ok(session) => Self::over_perf(spec, session, sink),
            Err(why) => {
                let notice = (backend == Backend::Auto).then(|| {
                    format!(
                        "perf events unavailable ({why}): {} through tracefs",
                        spec.doing
                    )
                });
                let inst =
                    tracefs::Instance::new(spec.events, spec.options.buffer_kb).map_err(|e| {
                        StartError::Unavailable(if backend == Backend::Auto && why.0 != e.0 {
                            TraceUnavailable(format!("perf events unavailable ({why}); {e}"))
                        } else {
                            e
                        })
                    })?;
                Self::over_tracefs(spec, inst, notice, sink)
            }
        }
    }

    fn over_perf<F>(
        spec: &Follow<'_>,
        mut session: perf::Session,
        sink: F,
    ) -> Result<Follower, StartError>
    where
        F: super::EventSink,
    {
        let poll = spec.every.unwrap_or(std::time::Duration::from_millis(50));
        let reader = session
            .stream(poll, spec.skip_own, sink)
            .map_err(StartError::Reader)?;
        let notice = session.notice.take();
        let source = if session.sampled_faults {
            Source::PerfFaults
        } else {
            Source::Perf
        };
        Ok(Follower {
            tracer: Tracer::Perf(session, reader),
            tids: spec.tids.to_vec(),
            source,
            notice,
        })
    }

    fn over_tracefs<F>(
        spec: &Follow<'_>,
        inst: tracefs::Instance,
        notice: Option<String>,
        mut sink: F,
    ) -> Result<Follower, StartError>
    where
        F: super::EventSink,
    {
        let wake = spec
            .every
            .map_or(tracefs::Wake::OnEvent, tracefs::Wake::Every);
        let stop = Arc::new(AtomicBool::new(false));
        // Process ids are never 0: skipping pid 0 skips nothing.
        let me = if spec.skip_own { std::process::id() } else { 0 };
        let reader = inst
            .reader(stop.clone(), wake, move |line| {
                if let Some(e) = tracefs::parse_line(line).filter(|e| e.pid != me) {
                    sink.event_and_deferred(e);
                }
            })
            .map_err(StartError::Reader)?;
        Ok(Follower {
            tracer: Tracer::Tracefs(inst, stop, reader),
            tids: spec.tids.to_vec(),
            source: Source::Tracefs,
            notice,
        })
    }

    /// Starts following the threads given to [`Follower::follow`] (0: the calling thread):
    /// the tracefs instance follows their thread ids (and, through event-fork, what they
    /// start from now on — threads started before are not followed) with its events on; perf
    /// events count already. Call it right before starting the command.
    pub fn arm(&self) -> std::io::Result<()> {
        if let Tracer::Tracefs(inst, _, _) = &self.tracer {
            let tids: Vec<u32> = self
                .tids
                .iter()
                .map(|&t| match t {
                    0 => crate::sys::gettid(),
                    t => t as u32,
                })
                .collect();
            inst.follow(&tids)?;
            inst.enable()?;
        }
        Ok(())
    }

    /// Stops following, lets the reader hand over every event still buffered, and returns
    /// the number of events the kernel lost (an error only when tracefs refused to turn its
    /// events off; the reader is stopped either way).
    pub fn stop(self) -> std::io::Result<u64> {
        let (lost, off) = self.stop_counting();
        off.map(|()| lost)
    }

    /// [`Follower::stop`] that counts the lost events even when tracefs refused to turn its
    /// events off (that refusal comes second).
    pub fn stop_counting(self) -> (u64, std::io::Result<()>) {
        match self.tracer {
            Tracer::Perf(session, reader) => {
                session.stop();
                (reader.join().unwrap_or(0), Ok(()))
            }
            Tracer::Tracefs(inst, stop, reader) => {
                let off = inst.disable();
                tracefs::Instance::stop_reader(&stop, reader);
                (inst.lost(), off)
            }
        }
    }
}
