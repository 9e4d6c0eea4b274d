//! What the planner threads share: the [`JobStack`] of directories waiting to be planned, the
//! hard links seen, the destination directories made; the loop of a planner thread that takes
//! directories until none is left (a [`Taker`] that stops with the copy and sends what it
//! gathered rather than wait); and the chain of source directories above a job (`-L`'s loop
//! check).

use super::{Entry, Planner};
use crate::walk::{JobStack, Taker};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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
    /// Directories to plan (the last pushed is planned first).
    pub(super) jobs: JobStack<DirJob>,
    /// First destination name of each multiply-linked source file, by (device, inode), and
    /// that name's (device, inode) when it was left as it was (then a second name already
    /// linked to it is up to date too).
    #[allow(clippy::type_complexity)]
    pub(super) links: Mutex<HashMap<(u64, u64), (PathBuf, Option<(u64, u64)>)>>,
    /// (device, inode) of every destination directory made or entered.
    pub(super) dest_dirs: Mutex<HashSet<(u64, u64)>>,
}

impl Taker for Planner<'_> {
    fn stopped(&self) -> bool {
        self.ctx.stopped()
    }
    /// Nothing to plan for now: the workers get what is gathered first.
    fn has_idle_work(&self) -> bool {
        self.pending_files > 0
    }
    fn idle(&mut self) {
        self.flush();
    }
}

impl Planner<'_> {
    /// Plans directories from the shared stack until none is left and none is being planned
    /// (another thread's directory may still add some), or the copy is stopped.
    pub(super) fn run_jobs(&mut self) {
        let shared = self.shared;
        // Done however the job ends (see `Taken`): a panic in it unwinds through the guard,
        // the other planners finish, and `plan` hands the panic on.
        while let Some((job, _taken)) = shared.jobs.take(self) {
            self.dir(job);
        }
    }
}
