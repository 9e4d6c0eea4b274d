//! The machinery `run` and [`Dropping`](super::Dropping) share: a [`Session`] follows whose
//! pages it is told to (the follower fills the [`Footprint`] through the [`Sink`]), runs the
//! drop-behind thread that empties it, and at its finish drops the rest and measures what
//! stayed ([`Ended`]).

use super::drop_behind::{drop_pending, measure_left, Counts, DropBehind, Dropper};
use super::footprint::Footprint;
use super::options::DroppingOptions;
use super::pending::Mappers;
use super::priority::Priority;
use crate::assist::{AssistReport, Prefetch};
use crate::sys;
use crate::trace::tracefs::RawEvent;
use crate::trace::{self, FollowOptions, Follower};
use crate::verb::Tally;
use std::sync::Arc;
use std::time::Duration;

/// Passes over the ranges that stayed cached in the final drop, 2 ms apart.
const FINAL_RETRIES: usize = 25;

/// What to do when tracing is impossible: a cgroup limit also keeps a command's cache small.
const NO_TRACING_HINT: &str = ". Without them, a cgroup memory limit also keeps a command's \
     cache small, e.g.: systemd-run --scope -p MemoryHigh=256M -- CMD";

/// Whose page-cache additions a [`Session`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Whom {
    /// A command started after [`Follower::arm`] by the launcher thread with this id, and
    /// what it starts; pagewise's own threads are not (`run`).
    Command(i32),
    /// The calling thread and the threads and processes it starts ([`Dropping`]).
    Caller,
}

/// The machinery of `run` and [`Dropping`]: the follower filling the footprint, and the
/// drop-behind thread emptying it.
pub(super) struct Session {
    pub(super) footprint: Arc<Footprint>,
    pub(super) follower: Follower,
    pub(super) dropper: Arc<Dropper>,
    pub(super) behind: DropBehind,
}

/// What a [`Session`] did, once it is finished.
pub(super) struct Ended {
    pub(super) counts: Counts,
    pub(super) added_bytes: u64,
    pub(super) files: u64,
    pub(super) lost: u64,
    pub(super) assist: Option<AssistReport>,
    /// Errors and notices so far; the caller adds its own and finishes it.
    pub(super) tally: Tally,
}

impl Session {
    /// Starts following `whom` into a footprint (the assistant's prefetches too, with
    /// `assist`), and the drop-behind thread.
    pub(super) fn start(
        opts: &DroppingOptions,
        assist: Option<&Prefetch>,
        whom: Whom,
        seen: Option<Arc<trace::Witnessed>>,
    ) -> Result<Session, crate::Error> {
        sys::raise_nofile_limit();
        let page = sys::page_size();
        let skip = matches!(whom, Whom::Command(_)).then(std::process::id);
        let footprint = Arc::new(Footprint::new(
            assist,
            page,
            skip,
            seen.clone().unwrap_or_default(),
        ));
        let dropper = Arc::new(Dropper::new(opts.keep_written, opts.method, seen));
        // No limit: more pages than any machine has.
        let limit_pages = (opts.max_cache.unwrap_or(u64::MAX) / page).max(1);
        let priority = Arc::new(Priority::new(limit_pages));
        let sink = Sink {
            footprint: footprint.clone(),
            priority: priority.clone(),
            dropper: dropper.clone(),
        };
        let follower = follow(opts.follow, assist.is_some(), whom, sink)?;
        if let Some(n) = &follower.notice {
            dropper.tally.notice(n.clone());
        }
        let behind = DropBehind::start(footprint.clone(), dropper.clone(), priority, limit_pages);
        Ok(Session {
            footprint,
            follower,
            dropper,
            behind,
        })
    }

    /// Stops following (every event until now is handed to the footprint), stops the
    /// drop-behind thread and drops the rest.
    pub(super) fn finish(self) -> Ended {
        let source = self.follower.source;
        let lost = self.follower.stop().unwrap_or(0);
        self.footprint.requeue(self.behind.stop());
        self.dropper
            .ended
            .store(true, std::sync::atomic::Ordering::Relaxed);
        final_drop(&self.footprint, &self.dropper);
        let assist = self.footprint.assistant.as_ref().map(|a| {
            let mut ar = a.lock().unwrap().report();
            ar.lost_events = lost;
            ar.source = Some(source);
            ar
        });
        let dropper = Arc::into_inner(self.dropper).expect("the drop-behind thread has ended");
        let files = self.footprint.files.lock().unwrap().len() as u64;
        let added = self
            .footprint
            .added
            .load(std::sync::atomic::Ordering::Relaxed);
        Ended {
            counts: dropper.counts.into_inner().unwrap(),
            added_bytes: added * sys::page_size(),
            files,
            lost,
            assist,
            tally: dropper.tally,
        }
    }
}

/// Starts following `whom`'s events into `footprint`, the assistant's too with `--assist`.
fn follow(
    options: FollowOptions,
    assist: bool,
    whom: Whom,
    on_event: Sink,
) -> Result<Follower, crate::Error> {
    let events: &[&str] = if assist {
        &crate::assist::EVENTS
    } else {
        &[trace::ADD_EVENT]
    };
    // Drop-behind needs the events soon: a command reading at 3 GB/s adds 30 MB in 10 ms.
    // With --assist, prefetches need them at once. Perf events where the kernel allows them:
    // they follow the command from its fork without a PID list, whose changes cost an RCU
    // grace period each (~40 ms per run back to back).
    let every = (!assist).then_some(Duration::from_millis(2));
    let started = match whom {
        Whom::Command(tid) => Follower::start(events, options, every, tid, on_event),
        Whom::Caller => Follower::start_self(events, options, every, on_event),
    };
    started.map_err(|e| crate::Error::TracingUnavailable {
        reason: e.0,
        needed_by: Some(match whom {
            Whom::Command(_) => "run",
            Whom::Caller => "dropping",
        }),
        hint: NO_TRACING_HINT,
    })
}

/// The final pass: what is pending, including pages that were still under read I/O during
/// a drop-behind pass (they were queued again) and prefetch windows still in their grace
/// period. Ranges where pages stayed (read I/O still in flight) are retried a few times; what
/// stays then is measured and reported. Every page the command added produced an event and
/// was dropped in some pass, measured before and after, so only the ranges that stayed need
/// measuring again — not the whole set (a second open_by_handle_at + measurement per file:
/// ~0.5 s on a 100k-file tree).
fn final_drop(footprint: &Footprint, dropper: &Dropper) {
    // The command has exited (or unmapped what it mapped): nothing to page out.
    let none = Mappers::new();
    let mut stayed = drop_pending(dropper, footprint.take_all(), &none);
    for _ in 0..FINAL_RETRIES {
        if stayed.pages == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
        stayed = drop_pending(dropper, stayed, &none);
    }
    measure_left(dropper, &stayed.files);
}

/// The follower's sink: events into the footprint, and the assistant's deferred pieces when
/// no event waits.
/// It raises the drop-behind thread's priority the moment the command's pending pages pass
/// `--max-cache` (see `Priority`).
pub(super) struct Sink {
    pub footprint: Arc<Footprint>,
    pub priority: Arc<Priority>,
    pub dropper: Arc<Dropper>,
}

impl crate::trace::EventSink for Sink {
    fn event(&mut self, e: RawEvent) {
        if let Some(pending) = self.footprint.on_event(e) {
            self.priority.behind(pending, &self.dropper.tally);
        }
    }
    fn idle(&mut self) -> bool {
        self.footprint.issue_deferred()
    }
}
