//! Dropping the command's pages: the [`Dropper`] that writes back and drops pending ranges,
//! measuring them before and after (cachestat(2), or mmap+mincore(2) where the kernel has no
//! cachestat: the [`Meter`] every verb measures with), and the [`DropBehind`] thread that calls
//! it whenever the command's outstanding footprint passes `max_cache`.
//!
//! Here: the thread and its passes (when to drop, what front of a stream to hold back). The
//! [`Dropper`] (open files, measurements, counts) in `dropper`; functions over it: the drops
//! of ranges in `ranges`, the final measure in `left`; paging out of mapped pages (its own
//! state) in `page_out`; a range's measurement in `measured`; the retry schedule of ranges
//! that stayed in `retries`.

mod dropper;
mod left;
mod measured;
mod page_out;
mod ranges;
mod retries;

pub(super) use dropper::{Counts, Dropper};
pub(super) use left::measure_left;
pub(super) use ranges::drop_pending;

use super::footprint::Footprint;
use super::pending::Pending;
use super::priority::Priority;
use crate::sys;
use retries::Retries;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The drop-behind thread: drops whenever the outstanding footprint passes the limit.
pub(super) struct DropBehind {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Pending>,
}

impl DropBehind {
    /// Starts the thread, dropping whenever more than `limit_pages` are pending.
    pub fn start(
        footprint: Arc<Footprint>,
        dropper: Arc<Dropper>,
        priority: Arc<Priority>,
        limit_pages: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pw-drop-behind".into())
            .spawn(move || {
                let mut retries = Retries::default();
                priority.start(&dropper.tally);
                while !stop2.load(Ordering::Acquire) {
                    let pause = pass(&footprint, &dropper, limit_pages, &mut retries, &priority);
                    if !pause.is_zero() {
                        std::thread::sleep(pause);
                    }
                }
                retries.take()
            })
            .expect("spawning the drop-behind thread");
        DropBehind { stop, thread }
    }

    /// Stops the thread after its current pass; returns the ranges it was still retrying
    /// (or had parked), for the final drop.
    pub fn stop(self) -> Pending {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// Drops `p` while the command runs: the ranges of files its threads were seen using are
/// paged out of their processes first (see [`drop_pending`]).
fn drop_running(dropper: &Dropper, footprint: &Footprint, p: Pending) -> Pending {
    let mappers = footprint.users(p.files.keys().copied());
    drop_pending(dropper, p, &mappers)
}

/// One look at the footprint, and a drop when it is over the limit; returns how long to wait
/// before the next.
fn pass(
    footprint: &Footprint,
    dropper: &Dropper,
    limit_pages: u64,
    retries: &mut Retries,
    priority: &Priority,
) -> Duration {
    footprint.promote_prefetches(Instant::now());
    // Prefetches past their grace time count as waiting, so a thread that got no CPU for a
    // while sees how far behind it is.
    priority.adjust(footprint.pending_pages(), &dropper.tally);
    retries.retry(Instant::now, |p| drop_running(dropper, footprint, p));
    // Windows prefetched for the command count against the limit from the moment they are
    // issued, but are dropped only once used or after their grace time (see `Footprint`);
    // when they alone would pass the limit, the oldest go early (so the limit holds while
    // the assistant prefetches faster than the command reads: they are the likeliest to have
    // been read, or never to be).
    let held = retries.pages();
    if footprint.prefetch_pages() + held > limit_pages {
        footprint.promote_oldest_prefetches(limit_pages.saturating_sub(held));
    }
    let droppable = footprint.pending_pages();
    if droppable == 0 || droppable + footprint.prefetch_pages() + retries.pages() <= limit_pages {
        return Duration::from_millis(if retries.pages() > 0 { 1 } else { 5 });
    }
    let mut now = footprint.take_pending();
    // The front of a sequential stream (read-ahead not read yet) waits for a later pass, or
    // the final drop; at most half the limit is held so (see `front_hold`).
    let (front, files) = front_hold(limit_pages);
    let held = now.split_front(front, files);
    footprint.requeue(held);
    if now.pages == 0 {
        return Duration::from_millis(5);
    }
    let stayed = drop_running(dropper, footprint, now);
    dropper.counts.lock().unwrap().drops_while_running += 1;
    retries.stayed(stayed, Instant::now());
    Duration::ZERO
}

/// Pages of read-ahead a sequential reader may have ahead of it: the kernel keeps up to two
/// windows of `read_ahead_kb` in flight (the current one and the asynchronous next one), so
/// twice the largest `read_ahead_kb` of the machine's devices (read once; 128 KiB, the
/// kernel's default, where sysfs cannot tell), at least 2 MiB (one large folio).
fn readahead_pages() -> u64 {
    static PAGES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGES.get_or_init(|| {
        let kb = std::fs::read_dir("/sys/class/bdi")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("read_ahead_kb")).ok())
            .filter_map(|s| s.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(128)
            .clamp(128, 1 << 20);
        ((4 * kb) << 10).max(2 << 20) / sys::page_size()
    })
}

/// How much of each streaming file's front a pass keeps pending, and for how many files:
/// the read-ahead window per file ([`readahead_pages`]), both cut so that at most half of
/// `--max-cache` is held back — the limit still holds, and a pass always has something to
/// drop once the rest passes the other half.
fn front_hold(limit_pages: u64) -> (u64, usize) {
    let half = limit_pages / 2;
    let front = readahead_pages().min(half);
    if front == 0 {
        return (0, 0);
    }
    (front, (half / front).clamp(1, 64) as usize)
}
