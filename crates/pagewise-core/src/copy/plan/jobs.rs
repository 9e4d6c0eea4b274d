//! The job stack the planner threads share: directories waiting to be planned (a LIFO: depth
//! first keeps it small), how many are being planned, and the loop of a planner thread that
//! takes them until none is left. Also what the threads share besides (hard links seen,
//! destination directories made) and the chain of source directories above a job (`-L`'s
//! loop check).

use super::{Entry, Planner};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

/// A directory waiting to be planned.
pub(super) struct DirJob {
    pub(super) entry: Entry,
    /// The source directories above it, for `-L`'s loop check.
    pub(super) up: Option<Arc<Chain>>,
}

/// A source directory and those above it (`(device, inode)`), innermost first.
pub(super) struct Chain {
    pub(super) id: (u64, u64),
    pub(super) up: Option<Arc<Chain>>,
}

impl Chain {
    pub(super) fn contains(chain: &Option<Arc<Chain>>, id: (u64, u64)) -> bool {
        let mut at = chain.as_deref();
        while let Some(c) = at {
            if c.id == id {
                return true;
            }
            at = c.up.as_deref();
        }
        false
    }
}

/// What the planner threads share.
#[derive(Default)]
pub(super) struct Shared {
    /// Directories to plan, and how many are being planned now.
    pub(super) jobs: Mutex<(Vec<DirJob>, usize)>,
    pub(super) more: Condvar,
    /// First destination name of each multiply-linked source file, by (device, inode), and
    /// that name's (device, inode) when it was left as it was (then a second name already
    /// linked to it is up to date too).
    #[allow(clippy::type_complexity)]
    pub(super) links: Mutex<HashMap<(u64, u64), (PathBuf, Option<(u64, u64)>)>>,
    /// (device, inode) of every destination directory made or entered.
    pub(super) dest_dirs: Mutex<HashSet<(u64, u64)>>,
}

impl Shared {
    /// Queues directories; the last of `jobs` is planned first.
    pub(super) fn push(&self, jobs: Vec<DirJob>) {
        if jobs.is_empty() {
            return;
        }
        self.jobs.lock().unwrap().0.extend(jobs);
        self.more.notify_all();
    }

    /// Marks one job done (taken with [`Shared::take`]).
    pub(super) fn done(&self) {
        // Called while unwinding too (see `JobDone`): a poisoned lock must not panic again.
        let mut j = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        j.1 -= 1;
        if j.1 == 0 && j.0.is_empty() {
            self.more.notify_all();
        }
    }
}

/// Marks a taken job done when dropped: at its end, or when planning it panicked.
struct JobDone<'a>(&'a Shared);

impl Drop for JobDone<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}

impl Planner<'_> {
    /// Plans directories from the shared stack until none is left and none is being planned
    /// (another thread's directory may still add some), or the copy is stopped.
    pub(super) fn run_jobs(&mut self) {
        loop {
            let job = {
                let mut j = self.shared.jobs.lock().unwrap();
                loop {
                    if self.ctx.stopped() {
                        self.shared.more.notify_all();
                        return;
                    }
                    if let Some(job) = j.0.pop() {
                        j.1 += 1;
                        break job;
                    }
                    if j.1 == 0 {
                        return;
                    }
                    if self.pending_files > 0 {
                        // Nothing to plan for now: the workers get what is gathered first.
                        drop(j);
                        self.flush();
                        j = self.shared.jobs.lock().unwrap();
                        continue;
                    }
                    j = self.shared.more.wait(j).unwrap();
                }
            };
            // Done however the job ends: a panic in it unwinds through the guard, the other
            // planners finish, and `plan` hands the panic on (they waited forever before).
            let _done = JobDone(self.shared);
            self.dir(job);
        }
    }
}
