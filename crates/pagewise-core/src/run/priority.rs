//! How the drop-behind thread is scheduled, shared with the follower that feeds it.
//!
//! It runs as background work (`SCHED_IDLE`) while it keeps up, so any thread that wakes takes
//! the CPU from it at once: with the kernel not preempting inside system calls, a
//! normal-priority drop-behind delayed the wake-ups of `--assist`'s prefetch threads by its
//! fadvise calls (measured: fio mmap randread on 2 CPUs, fault-to-prefetch p99 466–567 us,
//! 270–273 us as background). When it falls behind (more than `--max-cache` waiting to be
//! dropped: the CPUs are busy with other work), it returns to normal priority until it has
//! caught up, so the limit still holds on a busy machine.
//!
//! A `SCHED_IDLE` thread on a busy machine gets almost no CPU, so it cannot be relied on to
//! notice by itself that it fell behind (measured: `run --max-cache 32M -- cat` of 384 MiB
//! beside three busy loops on 2 CPUs peaked at 116 MiB). The follower, at normal priority,
//! sees every page the command adds: it raises the drop-behind thread the moment the pending
//! pages pass the limit ([`Priority::behind`]); the thread itself lowers it again once it has
//! caught up ([`Priority::adjust`]).

use crate::sys::{self, ThreadClass};
use crate::verb::Tally;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

/// The drop-behind thread's scheduling class, which both it and the follower change.
pub(super) struct Priority {
    /// `--max-cache` in pages.
    limit: u64,
    /// The drop-behind thread's id, 0 until it has started.
    tid: AtomicU32,
    /// It runs as background work now (the follower's cheap test before it locks `state`).
    background: AtomicBool,
    /// Changes of class, one at a time; `true` once a change was refused (not tried again).
    stuck: Mutex<bool>,
}

impl Priority {
    pub fn new(limit_pages: u64) -> Priority {
        Priority {
            limit: limit_pages,
            tid: AtomicU32::new(0),
            background: AtomicBool::new(false),
            stuck: Mutex::new(false),
        }
    }

    /// Called by the drop-behind thread when it starts: it becomes background work (a notice
    /// when the kernel refuses).
    pub fn start(&self, tally: &Tally) {
        self.tid.store(sys::gettid(), Ordering::Release);
        self.set(false, tally);
    }

    /// The follower's test after each page the command added: `pending` pages wait to be
    /// dropped. Past the limit, the drop-behind thread leaves background priority.
    pub fn behind(&self, pending: u64, tally: &Tally) {
        if self.falls_behind(pending, self.background.load(Ordering::Acquire)) {
            self.set(true, tally);
        }
    }

    /// Whether the follower raises the thread: `pending` pages past the limit while it runs
    /// as background work.
    fn falls_behind(&self, pending: u64, background: bool) -> bool {
        pending > self.limit && background
    }

    /// The drop-behind thread's own test at each pass (`droppable` pages: prefetches in their
    /// grace time and ranges being retried are not counted, the thread cannot drop them yet):
    /// normal priority while more than the limit waits, background again once a quarter of
    /// it does.
    pub fn adjust(&self, droppable: u64, tally: &Tally) {
        if let Some(urgent) = self.wanted(droppable) {
            self.set(urgent, tally);
        }
    }

    /// The class the thread asks for with `droppable` pages waiting: normal (`Some(true)`)
    /// past the limit, background (`Some(false)`) at a quarter of it or less, no change
    /// between (so it does not flip at every pass around one figure).
    fn wanted(&self, droppable: u64) -> Option<bool> {
        if droppable > self.limit {
            Some(true)
        } else if droppable <= self.limit / 4 {
            Some(false)
        } else {
            None
        }
    }

    /// Normal priority (`urgent`) or background, unless it is already so or a change was
    /// refused before.
    fn set(&self, urgent: bool, tally: &Tally) {
        let tid = self.tid.load(Ordering::Acquire);
        if tid == 0 {
            return;
        }
        let mut stuck = self.stuck.lock().unwrap_or_else(|e| e.into_inner());
        if !needs_change(*stuck, self.background.load(Ordering::Acquire), urgent) {
            return;
        }
        let class = if urgent {
            ThreadClass::Normal
        } else {
            ThreadClass::Background
        };
        match sys::set_thread_class(tid, class) {
            Ok(()) => self.background.store(!urgent, Ordering::Release),
            Err(e) => {
                *stuck = true;
                tally.notice(if urgent {
                    format!(
                        "drop-behind stays at background priority (sched_setscheduler: {e}): \
                         `max_cache` may be exceeded while the CPUs are busy"
                    )
                } else {
                    format!(
                        "drop-behind runs at normal priority (sched_setscheduler(SCHED_IDLE): {e})"
                    )
                });
            }
        }
    }
}

/// Whether the class must change to become normal (`urgent`) or background: not when it is
/// already so, nor once a change was refused (`stuck`).
fn needs_change(stuck: bool, background: bool, urgent: bool) -> bool {
    !stuck && background == urgent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_asks_for_normal_past_the_limit_and_background_at_a_quarter() {
        let p = Priority::new(100);
        assert_eq!(p.wanted(101), Some(true));
        assert_eq!(p.wanted(u64::MAX), Some(true));
        // Between a quarter and the limit: as it is.
        assert_eq!(p.wanted(100), None);
        assert_eq!(p.wanted(26), None);
        assert_eq!(p.wanted(25), Some(false));
        assert_eq!(p.wanted(0), Some(false));
        // A limit of 0 pages: anything pending is past it, nothing is a quarter of it.
        let z = Priority::new(0);
        assert_eq!((z.wanted(1), z.wanted(0)), (Some(true), Some(false)));
    }

    #[test]
    fn the_follower_raises_only_a_background_thread_past_the_limit() {
        let p = Priority::new(64);
        assert!(p.falls_behind(65, true));
        assert!(!p.falls_behind(64, true));
        assert!(!p.falls_behind(65, false), "already at normal priority");
    }

    #[test]
    fn a_class_changes_only_when_it_differs_and_was_never_refused() {
        // To normal (urgent) from background, and back.
        assert!(needs_change(false, true, true));
        assert!(needs_change(false, false, false));
        // Already so.
        assert!(!needs_change(false, false, true));
        assert!(!needs_change(false, true, false));
        // Refused once: never tried again.
        assert!(!needs_change(true, true, true));
        assert!(!needs_change(true, false, false));
    }

    #[test]
    fn before_the_thread_starts_nothing_changes() {
        let p = Priority::new(10);
        let tally = Tally::new();
        p.adjust(1_000, &tally);
        p.behind(1_000, &tally);
        assert!(!p.background.load(Ordering::Acquire));
        assert!(!*p.stuck.lock().unwrap());
    }
}
