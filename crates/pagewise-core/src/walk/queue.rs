//! The walk's shared state: the LIFO job queue its workers take directories and batches of
//! files from, and the counters of what it met.

use super::WalkSummary;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

#[derive(Default)]
pub(super) struct Counters {
    pub(super) files: AtomicU64,
    pub(super) dirs: AtomicU64,
    pub(super) special: AtomicU64,
    pub(super) symlinks: AtomicU64,
    pub(super) hardlinks: AtomicU64,
    pub(super) vanished: AtomicU64,
    pub(super) other_fs: AtomicU64,
    pub(super) filtered: AtomicU64,
    pub(super) failed_roots: Mutex<Vec<usize>>,
}

impl Counters {
    pub(super) fn summary(&self) -> WalkSummary {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WalkSummary {
            files: g(&self.files),
            dirs: g(&self.dirs),
            special_skipped: g(&self.special),
            symlinks_skipped: g(&self.symlinks),
            hardlinks_skipped: g(&self.hardlinks),
            vanished: g(&self.vanished),
            other_fs_skipped: g(&self.other_fs),
            filtered: g(&self.filtered),
            failed_roots: self.failed_roots.lock().unwrap().clone(),
        }
    }
}

/// (dev, ino) of the directories above one, with `follow`: a symlink loop meets one again.
pub(super) type Ancestors = Arc<Vec<(u64, u64)>>;

/// A directory to read.
pub(super) struct DirJob {
    pub(super) path: PathBuf,
    /// Its path below the root (what globs match).
    pub(super) rel: PathBuf,
    pub(super) depth: usize,
    pub(super) root: usize,
    pub(super) root_dev: u64,
    /// (dev, ino) of the directories above it, with `follow`: a loop is met again here.
    pub(super) ancestors: Ancestors,
}

/// Where a directory sits: its depth below its root, the root's index and device.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub(super) depth: usize,
    pub(super) root: usize,
    pub(super) root_dev: u64,
}

/// A directory opened for reading, shared by the batch jobs its files are split into.
pub(super) struct OpenDir {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) path: Arc<PathBuf>,
    pub(super) rel: Arc<PathBuf>,
}

pub(super) enum Job {
    Dir(DirJob),
    Files {
        dir: Arc<OwnedFd>,
        path: Arc<PathBuf>,
        rel: Arc<PathBuf>,
        names: Vec<CString>,
        root: usize,
    },
}

pub(super) struct Queue {
    pub(super) state: Mutex<(Vec<Job>, usize)>,
    pub(super) cv: Condvar,
}

impl Queue {
    pub(super) fn push(&self, job: Job) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .push(job);
        self.cv.notify_one();
    }
    /// Takes a job, marking the taker active; None when no job is left and nobody can add one.
    pub(super) fn pop(&self) -> Option<Job> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(j) = g.0.pop() {
                g.1 += 1;
                return Some(j);
            }
            if g.1 == 0 {
                self.cv.notify_all();
                return None;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
    pub(super) fn done(&self) {
        // Called while unwinding too (see `Done`): a poisoned lock must not panic again.
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.1 -= 1;
        if g.1 == 0 && g.0.is_empty() {
            self.cv.notify_all();
        }
    }
}

/// Marks the job a worker took as done when dropped: at its end, or when it panicked.
pub(super) struct Done<'a>(pub(super) &'a Queue);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}
