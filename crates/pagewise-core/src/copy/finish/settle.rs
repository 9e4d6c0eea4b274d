//! Write-back of the destination files in batches (never an fdatasync per file): a worker's
//! own batch ([`settle`]), the batch the workers share ([`BatchSettle`]), and the account of
//! the cache the destination keeps after its drop ([`DestResidue`]); the descriptor budget
//! the batches are sized by ([`FdBudget`]).

use crate::residency::cached_pages;
use crate::sys::{self, Advice};
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// A destination file waiting for its batch's writeback wait and drop.
pub(in crate::copy) struct Settle {
    pub(in crate::copy) fd: OwnedFd,
}

/// Files a worker gathers before it waits for their write-back and drops them (at most).
const SETTLE_BATCH: usize = 256;

/// How many files each holder of open descriptors may keep, from the run's descriptor
/// budget ([`sys::fd_budget`]) less four per worker (its io_uring, the directories it
/// works in): half for the workers' small-file batches (source and destination) and settle
/// lists, an eighth for the shared batched write-back (up to three batches open: see
/// [`BatchSettle::add`]) and another for the files kept for the residue's second measure;
/// the rest is slack for the planners' directories. With the usual
/// limits these are the constants; under a limit of 1024 and 16 workers they shrink instead
/// of failing with EMFILE.
#[derive(Clone, Copy, Debug)]
pub(in crate::copy) struct FdBudget {
    /// Workers: the copy's threads, fewer when the budget cannot keep each a few files.
    pub workers: usize,
    pub small_batch: usize,
    pub settle: usize,
    pub shared_settle: usize,
    pub recheck: usize,
}

impl FdBudget {
    pub fn new(budget: usize, workers: usize) -> FdBudget {
        let workers = workers.min(budget / 16).max(1);
        let usable = budget.saturating_sub(4 * workers).max(16);
        let per_worker = usable / 2 / workers;
        FdBudget {
            workers,
            small_batch: (per_worker / 4).clamp(1, crate::copy::worker::SMALL_BATCH),
            settle: (per_worker / 4).clamp(1, SETTLE_BATCH),
            shared_settle: (usable / 24).clamp(1, SETTLE_FILES),
            recheck: (usable / 8).min(RESIDUE_RECHECK),
        }
    }

    /// Descriptors held at most by all of them.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.workers * (4 + 2 * self.small_batch + self.settle)
            + 3 * self.shared_settle
            + self.recheck
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_fits_the_limit_and_keeps_the_constants_when_there_is_room() {
        for (limit, workers) in [(128, 16), (1024, 16), (1024, 1), (4096, 64), (256, 2)] {
            let b = FdBudget::new(limit - 64, workers);
            assert!(b.held() <= limit - 64, "{limit} {workers}: {b:?}");
        }
        let roomy = FdBudget::new(1 << 20, 16);
        assert_eq!(roomy.workers, 16);
        assert_eq!(roomy.small_batch, crate::copy::worker::SMALL_BATCH);
        assert_eq!(roomy.settle, SETTLE_BATCH);
        assert_eq!(roomy.shared_settle, SETTLE_FILES);
        assert_eq!(roomy.recheck, RESIDUE_RECHECK);
    }
}

/// One writeback wait for a batch of files, then drop their pages; what stays cached of
/// them is measured (see [`DestResidue`]).
pub(in crate::copy) fn settle(batch: &mut Vec<Settle>, cached: &DestResidue) {
    for s in batch.iter() {
        let _ = sys::sync_file_range(s.fd.as_fd(), 0, 0, sys::SFR_WRITE);
    }
    for s in batch.drain(..) {
        let _ = sys::sync_file_range(
            s.fd.as_fd(),
            0,
            0,
            sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER,
        );
        let _ = sys::fadvise(s.fd.as_fd(), 0, 0, Advice::DontNeed);
        cached.measure(s.fd);
    }
}

/// The destination pages a copy leaves cached, measured on the files it wrote (not on the
/// files of the destination it left alone). A file with pages still cached right after its
/// drop is measured again when the copy ends: RWF_DONTCACHE pages are dropped by the kernel
/// itself when their write-back completes, and a DONTNEED racing with that drop skips them,
/// so the first measure can show pages that are gone a moment later.
pub(in crate::copy) struct DestResidue {
    pages: AtomicU64,
    later: Mutex<Vec<OwnedFd>>,
    /// Files kept open for the second measure (see [`FdBudget`]).
    keep: usize,
}

/// Files held open for the measure at the end; beyond, the first measure counts.
const RESIDUE_RECHECK: usize = 4096;

impl DestResidue {
    pub(in crate::copy) fn new(keep: usize) -> DestResidue {
        DestResidue {
            pages: AtomicU64::new(0),
            later: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// Measures one written file now, or keeps it for the end if pages are still cached.
    pub(in crate::copy) fn measure(&self, fd: OwnedFd) {
        let Some(cached) = cached_pages(fd.as_fd(), 0, 0) else {
            return;
        };
        if cached > 0 {
            let mut later = self.later.lock().unwrap();
            if later.len() < self.keep {
                return later.push(fd);
            }
        }
        self.pages.fetch_add(cached, Ordering::Relaxed);
    }

    /// Pages of the written files cached now.
    pub(in crate::copy) fn pages(&self) -> u64 {
        let later: u64 = std::mem::take(&mut *self.later.lock().unwrap())
            .iter()
            .filter_map(|fd| cached_pages(fd.as_fd(), 0, 0))
            .sum();
        self.pages.load(Ordering::Relaxed) + later
    }
}

/// Write-back of small files, shared by the workers: their pages are written back by one
/// `syncfs` per batch (the kernel then writes many files under one block plug: neighbouring
/// files' blocks go out as one request — 100k files took ~12k write requests instead of
/// ~100k), then each file is waited on and dropped. syncfs also starts write-back of other
/// dirty data of that filesystem, which the kernel would write within seconds anyway.
pub(in crate::copy) struct BatchSettle {
    pending: Mutex<Gathered>,
    /// Signalled when a write-back ends.
    written: Condvar,
    /// Files per batch (see [`FdBudget`]).
    files: usize,
}

/// Files gathered for the next batch, their dirty bytes, and whether a batch is being
/// written back now.
#[derive(Default)]
struct Gathered {
    files: Vec<fs::File>,
    bytes: u64,
    writing: bool,
}

/// Files and dirty bytes that trigger a batch write-back.
const SETTLE_FILES: usize = 2048;
const SETTLE_BYTES: u64 = 64 << 20;

impl BatchSettle {
    pub(in crate::copy) fn new(files: usize) -> BatchSettle {
        BatchSettle {
            pending: Mutex::default(),
            written: Condvar::new(),
            files,
        }
    }

    /// Adds a written file. One batch is written back at a time: while it is, files gather
    /// for the next, and a worker that would make the next batch twice as large waits (so
    /// at most three batches of files are open: a bound the [`FdBudget`] relies on).
    pub(in crate::copy) fn add(&self, f: fs::File, bytes: u64, cached: &DestResidue) {
        let batch = {
            let mut p = self.pending.lock().unwrap();
            while p.writing && p.files.len() >= 2 * self.files {
                p = self.written.wait(p).unwrap();
            }
            p.files.push(f);
            p.bytes += bytes;
            if p.writing || (p.files.len() < self.files && p.bytes < SETTLE_BYTES) {
                return;
            }
            p.bytes = 0;
            p.writing = true;
            std::mem::take(&mut p.files)
        };
        Self::write_back(batch, cached);
        self.pending.lock().unwrap().writing = false;
        self.written.notify_all();
    }

    /// Writes back and drops what is pending (at the end of the run).
    pub(in crate::copy) fn flush(&self, cached: &DestResidue) {
        let batch = std::mem::take(&mut self.pending.lock().unwrap().files);
        Self::write_back(batch, cached);
    }

    fn write_back(batch: Vec<fs::File>, cached: &DestResidue) {
        let Some(first) = batch.first() else { return };
        let _ = sys::syncfs(first.as_fd());
        // Per file: whatever syncfs did not cover (another filesystem, pages dirtied since)
        // is written and waited for, then the pages are dropped.
        let mut s: Vec<Settle> = batch.into_iter().map(|f| Settle { fd: f.into() }).collect();
        settle(&mut s, cached);
    }
}
