//! The walk's shared state: the jobs its workers take from the [`JobStack`](super::JobStack)
//! (directories and batches of files), and the counters of what it met.

use super::WalkSummary;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// A job of the walk: a directory to read, or a batch of a huge directory's files to visit.
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
