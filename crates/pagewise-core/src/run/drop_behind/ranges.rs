//! Dropping ranges: a pending set merged per file and dropped in batches of files — writeback
//! started for every dirty range first (so the waits overlap), mapped ranges paged out, then
//! per range a wait and DONTNEED (over the pages mincore saw only), counted before and after:
//! functions over the [`Dropper`], whose open files and measurements they use.

use super::super::pending::{Mappers, Pending};
use super::dropper::{file_name, Dropper, WRITE_AND_WAIT};
use super::measured::Measured;
use crate::error::{FileError, Op};
use crate::residency::PageRange;
use crate::sys::FileId as FileKey;
use crate::sys::{self, Advice};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Drops every pending range: writeback started for all dirty ranges first, then the
/// ranges of files the command may map (`mappers`: its threads seen adding or faulting on
/// each file's pages) paged out of their processes, then one wait per dirty range, then
/// DONTNEED; counts measured before and after. Returns the ranges where pages
/// stayed (typically still under read I/O: readahead reports pages when it queues them),
/// so the caller can try them again.
pub(in crate::run) fn drop_pending(
    dropper: &Dropper,
    pending: Pending,
    mappers: &Mappers,
) -> Pending {
    let mut stayed = Pending::default();
    let work: Vec<(FileKey, Vec<PageRange>)> = pending
        .files
        .into_iter()
        .map(|(key, ranges)| (key, merge(ranges)))
        .collect();
    let (mut dropped, mut kept) = (0, 0);
    for batch in work.chunks(dropper.batch_files) {
        let fds: Vec<Option<Arc<OwnedFd>>> = batch
            .iter()
            .map(|(k, _)| dropper.fd(*k, mappers.get(k).map_or(&[][..], |v| &v[..])))
            .collect();
        let (d, k) = drop_batch(dropper, batch, &fds, mappers, &mut stayed);
        dropped += d;
        kept += k;
    }
    let mut c = dropper.counts.lock().unwrap();
    c.dropped_bytes += dropped * sys::page_size();
    c.kept_written_bytes += kept * sys::page_size();
    stayed
}

/// Drops one batch of files: writeback started for all dirty ranges first (so the waits
/// overlap), mapped ranges paged out, then per range a wait and DONTNEED, counted by
/// cachestat before and after. Returns (pages dropped, pages of written files kept).
fn drop_batch(
    dropper: &Dropper,
    batch: &[(FileKey, Vec<PageRange>)],
    fds: &[Option<Arc<OwnedFd>>],
    mappers: &Mappers,
    stayed: &mut Pending,
) -> (u64, u64) {
    let before: Vec<Vec<(Option<Measured>, bool)>> = batch
        .iter()
        .zip(fds)
        .map(|((key, ranges), fd)| match fd {
            Some(fd) => start_writeback(dropper, *key, fd.as_fd(), ranges),
            None => Vec::new(),
        })
        .collect();
    let droppable: Vec<&(FileKey, Vec<PageRange>)> = batch
        .iter()
        .zip(fds)
        .filter(|((key, _), fd)| fd.is_some() && !dropper.kept(key))
        .map(|(w, _)| w)
        .collect();
    dropper
        .page_out
        .page_out(&droppable, mappers, &dropper.tally);
    let (mut dropped, mut kept) = (0, 0);
    for (((key, ranges), fd), before) in batch.iter().zip(fds).zip(&before) {
        let Some(fd) = fd.as_ref().map(|f| f.as_fd()) else {
            let pages: u64 = ranges.iter().map(|r| r.count).sum();
            if dropper.is_metadata(key) {
                dropper.counts.lock().unwrap().metadata_bytes += pages * sys::page_size();
            } else if dropper.given_up(key) {
                dropper.counts.lock().unwrap().unreachable_bytes += pages * sys::page_size();
            } else {
                // Not seen yet while the command runs: the next pass tries again.
                stayed.files.entry(*key).or_default().extend(ranges);
                stayed.pages += pages;
            }
            continue;
        };
        if dropper.kept(key) {
            kept += before
                .iter()
                .filter_map(|b| b.0.as_ref().map(|m| m.cached))
                .sum::<u64>();
            continue;
        }
        dropped += drop_ranges(dropper, *key, fd, ranges, before, stayed);
    }
    (dropped, kept)
}

/// Drops a file's `ranges`, each with what was cached (and whether dirty) before; returns
/// the pages dropped (ranges where pages stayed go to `stayed`).
fn drop_ranges(
    dropper: &Dropper,
    key: FileKey,
    fd: BorrowedFd,
    ranges: &[PageRange],
    before: &[(Option<Measured>, bool)],
    stayed: &mut Pending,
) -> u64 {
    // Nothing to drop where cachestat finds nothing; mincore may not see pages still
    // being read in (see `Measured::stayed`), so its ranges are dropped all the same.
    ranges
        .iter()
        .zip(before)
        .filter(|(_, (m, _))| {
            !m.as_ref()
                .is_some_and(|m| m.pages.is_none() && m.cached == 0)
        })
        .map(|(&range, (m, dirty))| drop_range(dropper, key, fd, range, m.as_ref(), *dirty, stayed))
        .sum()
}

/// One measurement per range says what is cached and dirty: `(cached pages, dirty)` per
/// range (cached None: unknown). Writeback of everything dirty is started at once (unless
/// written files are kept), so the waits in [`drop_range`] overlap. Where dirty
/// pages cannot be counted (mincore), every range may be dirty: its writeback is started
/// and waited for all the same (cheap where nothing is dirty), and with `--keep-written`
/// a file modified since the run started counts as written.
fn start_writeback(
    dropper: &Dropper,
    key: FileKey,
    fd: BorrowedFd,
    ranges: &[PageRange],
) -> Vec<(Option<Measured>, bool)> {
    let page = sys::page_size();
    let mut v = Vec::with_capacity(ranges.len());
    for r in ranges {
        let (off, len) = r.bytes(page);
        let m = dropper.measure(key, fd, off, len);
        let known_dirty = m.as_ref().and_then(|m| m.dirty);
        let dirty = match known_dirty {
            Some(d) => d > 0,
            None => true,
        };
        let written = match known_dirty {
            Some(d) => d > 0,
            None => dropper.keep_written && dropper.modified_since_start(fd),
        };
        if written {
            dropper.written.lock().unwrap().insert(key);
        }
        if dirty && !dropper.kept(&key) {
            let _ = sys::sync_file_range(fd, off, len, sys::SFR_WRITE);
        }
        v.push((m, dirty));
    }
    v
}

/// Waits for the range's writeback when it was dirty, drops it, and returns the pages
/// dropped, measured (0 when the range could not be measured); a range where pages stayed
/// goes to `stayed`.
fn drop_range(
    dropper: &Dropper,
    key: FileKey,
    fd: BorrowedFd,
    range: PageRange,
    before: Option<&Measured>,
    dirty: bool,
    stayed: &mut Pending,
) -> u64 {
    let page = sys::page_size();
    let (off, len) = range.bytes(page);
    if dirty {
        let _ = sys::sync_file_range(fd, off, len, WRITE_AND_WAIT);
    }
    if let Err(e) = drop_seen(fd, range, before) {
        let name = file_name(key);
        let path = std::path::Path::new(&name);
        dropper
            .tally
            .error(FileError::io(path, Op::FadviseDontneed, &e));
        return 0;
    }
    let Some(before) = before else {
        return 0;
    };
    let Some(after) = dropper.measure(key, fd, off, len) else {
        return 0;
    };
    let (parts, pages) = before.stayed(&after, range);
    if pages > 0 {
        stayed.files.entry(key).or_default().extend(parts);
        stayed.pages += pages;
    }
    before.dropped(&after)
}

/// DONTNEED over the pages `range`; with mincore's page-by-page view `before`,
/// over the pages it saw cached only. A page it did not see may be one still being read in,
/// which DONTNEED would drop once its read completed, uncounted: it stays pending (see
/// [`Measured::stayed`]) and is dropped once seen.
pub(super) fn drop_seen(
    fd: BorrowedFd,
    range: PageRange,
    before: Option<&Measured>,
) -> std::io::Result<()> {
    let page = sys::page_size();
    let Some(seen) = before.and_then(|m| m.pages.as_ref()) else {
        let (off, len) = range.bytes(page);
        return sys::fadvise(fd, off, len, Advice::DontNeed);
    };
    let mut j = 0;
    while j < seen.len() {
        if !seen[j] {
            j += 1;
            continue;
        }
        let start = j;
        while j < seen.len() && seen[j] {
            j += 1;
        }
        let first = range.first + start as u64;
        sys::fadvise(
            fd,
            first * page,
            (j - start) as u64 * page,
            Advice::DontNeed,
        )?;
    }
    Ok(())
}

/// A file's page ranges sorted, overlapping and touching ones merged.
fn merge(mut ranges: Vec<PageRange>) -> Vec<PageRange> {
    ranges.sort_unstable();
    let mut merged: Vec<PageRange> = Vec::new();
    for r in ranges {
        match merged.last_mut() {
            Some(m) if r.first <= m.end() => m.count = m.count.max(r.end() - m.first),
            _ => merged.push(r),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_sorted_and_overlapping_or_touching_ones_merged() {
        let pr = PageRange::new;
        assert_eq!(merge(Vec::new()), Vec::<PageRange>::new());
        assert_eq!(
            merge(vec![
                pr(10, 5),
                pr(0, 4),
                pr(4, 2),
                pr(12, 1),
                pr(20, 1),
                pr(14, 3)
            ]),
            vec![pr(0, 6), pr(10, 7), pr(20, 1)]
        );
        // A range inside another leaves it as it is; one gap page keeps them apart.
        assert_eq!(merge(vec![pr(0, 10), pr(2, 3)]), vec![pr(0, 10)]);
        assert_eq!(merge(vec![pr(0, 2), pr(3, 2)]), vec![pr(0, 2), pr(3, 2)]);
    }
}
