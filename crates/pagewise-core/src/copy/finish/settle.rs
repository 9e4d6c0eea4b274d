//! Write-back of the destination files in batches (never an fdatasync per file): a worker's
//! own batch ([`settle`]), the batch the workers share ([`BatchSettle`]), and the account of
//! the cache the destination keeps after its drop ([`DestResidue`]). Each keeps its own state;
//! their sizes come from the run's `FdBudget` (state.rs).

use crate::copy::options::SETTLE_BYTES;
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
    /// Files kept open for the second measure (see `FdBudget`).
    keep: usize,
}

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
    /// Files per batch (see `FdBudget`).
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
    /// at most three batches of files are open: a bound the `FdBudget` relies on).
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
