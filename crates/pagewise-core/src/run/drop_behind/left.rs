//! What stays of the command's pages after the final drop: each range that stayed is
//! dropped once more and measured ([`measure_left`]), and the left figures of the
//! [`Counts`](super::Counts) are set from what is still cached.

use super::super::pending::PageMap;
use super::dropper::{Dropper, WRITE_AND_WAIT};
use super::measured::Measured;
use super::ranges::drop_seen;
use crate::residency::{MeasuredBy, PageRange};
use crate::sys;
use crate::sys::FileId as FileKey;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;

/// After the final drop: what of the command's pages in `ranges` (those that stayed) is
/// still cached, and why (a range still cached is dropped once more first).
/// With mincore, dirty pages cannot be told from clean ones: `left_dirty_bytes` and
/// `left_mapped_or_busy_bytes` are unknown (None) once anything is left.
pub(in crate::run) fn measure_left(dropper: &Dropper, ranges: &PageMap) {
    let page = sys::page_size();
    let (mut left, mut dirty) = (0, Some(0u64));
    for (key, ranges) in ranges {
        if dropper.kept(key) {
            continue;
        }
        let Some(fd) = dropper.fd(*key, &[]) else {
            continue;
        };
        for r in ranges {
            let (off, len) = r.bytes(page);
            if let Some(m) = last_try(dropper, *key, fd.as_fd(), off, len) {
                left += m.cached;
                if m.cached > 0 {
                    dirty = dirty.zip(m.dirty).map(|(a, b)| a + b);
                }
            }
        }
    }
    dropper.finish_notices();
    let mut c = dropper.counts.lock().unwrap();
    c.left_bytes = left * page;
    c.left_dirty_bytes = dirty.map(|d| d * page);
    c.left_mapped_or_busy_bytes = dirty.map(|d| left.saturating_sub(d) * page);
    c.method = if dropper.used_mincore.load(Ordering::Relaxed) {
        MeasuredBy::Mincore
    } else {
        MeasuredBy::Cachestat
    };
}

/// A range missed by the passes so far (e.g. a lost retry) is dropped now; returns what
/// stays of it (None: it cannot be measured).
fn last_try(
    dropper: &Dropper,
    key: FileKey,
    fd: BorrowedFd,
    off: u64,
    len: u64,
) -> Option<Measured> {
    let m = dropper.measure(key, fd, off, len)?;
    if m.cached == 0 {
        return Some(m);
    }
    let _ = sys::sync_file_range(fd, off, len, WRITE_AND_WAIT);
    let page = sys::page_size();
    let _ = drop_seen(fd, PageRange::new(off / page, len / page), Some(&m));
    let after = dropper.measure(key, fd, off, len)?;
    dropper.counts.lock().unwrap().dropped_bytes += m.dropped(&after) * sys::page_size();
    Some(after)
}
