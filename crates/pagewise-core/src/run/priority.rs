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
        if pending > self.limit && self.background.load(Ordering::Acquire) {
            self.set(true, tally);
        }
    }

    /// The drop-behind thread's own test at each pass (`droppable` pages: prefetches in their
    /// grace time and ranges being retried are not counted, the thread cannot drop them yet):
    /// normal priority while more than the limit waits, background again once a quarter of
    /// it does.
    pub fn adjust(&self, droppable: u64, tally: &Tally) {
        if droppable > self.limit {
            self.set(true, tally);
        } else if droppable <= self.limit / 4 {
            self.set(false, tally);
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
        let background = self.background.load(Ordering::Acquire);
        if *stuck || background != urgent {
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
                         --max-cache may be exceeded while the CPUs are busy"
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
