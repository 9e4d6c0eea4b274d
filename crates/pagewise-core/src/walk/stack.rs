//! [`JobStack`]: the shared LIFO stack of jobs a few threads take work from and add work to
//! (the walk's directories and file batches, the copy planner's directories), with the count
//! of jobs being worked on, so a thread that finds the stack empty waits while another may
//! still add some, and ends when none can.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Jobs waiting (the last pushed is taken first: depth first keeps the stack small) and how
/// many taken jobs are not done yet.
pub(crate) struct JobStack<T> {
    state: Mutex<(Vec<T>, usize)>,
    cv: Condvar,
}

impl<T> Default for JobStack<T> {
    fn default() -> Self {
        JobStack {
            state: Mutex::new((Vec::new(), 0)),
            cv: Condvar::new(),
        }
    }
}

/// What a thread taking jobs does besides: stop early, or work on something of its own rather
/// than wait for a job. The defaults never stop and never have other work.
pub(crate) trait Taker {
    /// True when this thread takes no more jobs (the others are woken to ask too).
    fn stopped(&self) -> bool {
        false
    }
    /// True when the thread has work of its own to do ([`Taker::idle`]) before it waits.
    fn has_idle_work(&self) -> bool {
        false
    }
    /// Does that work; the stack is unlocked meanwhile.
    fn idle(&mut self) {}
}

/// Takes jobs as they come: never stops early, never has other work.
pub(crate) struct Plain;

impl Taker for Plain {}

/// Marks the job it came with done when dropped: at the job's end, or when working on it
/// panicked. Without it, a panicking thread would leave the others waiting for its job
/// forever; with it they finish the stack and the panic reaches the caller.
pub(crate) struct Taken<'a, T>(&'a JobStack<T>);

impl<T> Drop for Taken<'_, T> {
    fn drop(&mut self) {
        self.0.done();
    }
}

impl<T> JobStack<T> {
    /// The state, also when another thread panicked holding the lock (the guards run while
    /// unwinding: a poisoned lock must not panic again).
    fn lock(&self) -> MutexGuard<'_, (Vec<T>, usize)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one job and wakes one waiting thread.
    pub(crate) fn push(&self, job: T) {
        self.lock().0.push(job);
        self.cv.notify_one();
    }

    /// Queues jobs (the last of them is taken first) and wakes every waiting thread.
    pub(crate) fn push_all(&self, jobs: Vec<T>) {
        if jobs.is_empty() {
            return;
        }
        self.lock().0.extend(jobs);
        self.cv.notify_all();
    }

    /// Takes a job, marking it taken until the returned guard drops; waits while the stack is
    /// empty and jobs are still being worked on (they may add some). None when no job is left
    /// and none is being worked on, or when `taker` stopped.
    pub(crate) fn take(&self, taker: &mut impl Taker) -> Option<(T, Taken<'_, T>)> {
        let mut g = self.lock();
        loop {
            if taker.stopped() {
                self.cv.notify_all();
                return None;
            }
            if let Some(job) = g.0.pop() {
                g.1 += 1;
                return Some((job, Taken(self)));
            }
            if g.1 == 0 {
                self.cv.notify_all();
                return None;
            }
            if taker.has_idle_work() {
                drop(g);
                taker.idle();
                g = self.lock();
                continue;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Marks one taken job done; the last one done with the stack empty wakes every thread.
    fn done(&self) {
        let mut g = self.lock();
        g.1 -= 1;
        if g.1 == 0 && g.0.is_empty() {
            self.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every job is taken once, including those pushed by the workers while they run.
    #[test]
    fn threads_take_every_job_and_the_jobs_it_adds() {
        let stack = JobStack::default();
        stack.push(0u32);
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while let Some((n, _taken)) = stack.take(&mut Plain) {
                        if n < 6 {
                            stack.push_all(vec![2 * n + 1, 2 * n + 2]);
                        }
                        seen.lock().unwrap().push(n);
                    }
                });
            }
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, (0..=12).collect::<Vec<_>>());
    }

    /// A worker that panics on a job does not leave the others waiting for it.
    #[test]
    fn a_panicking_worker_leaves_nobody_waiting() {
        let stack = JobStack::default();
        stack.push_all(vec![1u32, 2, 3, 4]);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        while let Some((n, _taken)) = stack.take(&mut Plain) {
                            assert_ne!(n, 3, "job 3 fails");
                        }
                    });
                }
            })
        }));
        assert!(result.is_err());
    }
}
