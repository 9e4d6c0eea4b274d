//! The command's footprint: the pages its events say it brought into the cache (and, with
//! `--assist`, the windows prefetched for it), pending until they are dropped.

use super::pending::{Mappers, Pending};
use crate::assist::{Assistant, Prefetch};
use crate::residency::PageRange;
use crate::sys::FileId;
use crate::trace::tracefs::RawEvent;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A prefetched window `(file, pages)` and when it was issued.
type Prefetched = (Instant, FileId, PageRange);

/// Prefetched windows join the drop-behind once the command has used every page of them, or
/// after this long, so they are not dropped before the command reads them.
const PREFETCH_GRACE: Duration = Duration::from_millis(500);

/// How many of the most recent prefetched windows are searched for one the command has
/// used up (see [`Footprint::promote_consumed`]).
const CONSUMED_SEARCH: usize = 1024;

/// Threads remembered per file: a file mapped by more processes than this keeps the rest of
/// its mapped pages until they exit.
const USERS_PER_FILE: usize = 16;

/// Remembers thread `tid` as a user of a file.
fn user(users: &mut Vec<u32>, tid: u32) {
    if users.len() < USERS_PER_FILE && !users.contains(&tid) {
        users.push(tid);
    }
}

/// What the follower's callback fills and the drop-behind empties.
pub(super) struct Footprint {
    /// pagewise's own process when it follows a command (its events are not the command's);
    /// None when the process follows itself (`Dropping`).
    skip_pid: Option<u32>,
    page: u64,
    pending: Mutex<Pending>,
    /// Prefetched windows in their grace period, oldest first, and their pages.
    delayed: Mutex<VecDeque<Prefetched>>,
    delayed_pages: AtomicU64,
    /// Files the command (or `--assist`) added pages to, and the command's threads seen
    /// adding or faulting on their pages (at most [`USERS_PER_FILE`]): the processes that
    /// may map them (see `PageOut::page_out` in drop_behind/page_out.rs).
    pub files: Mutex<HashMap<FileId, Vec<u32>>>,
    /// Pages the command added.
    pub added: AtomicU64,
    /// The assistant, with `--assist`.
    pub assistant: Option<Mutex<Assistant>>,
}

impl Footprint {
    /// An empty footprint, with an assistant when `assist` is given; events of `skip_pid`
    /// are not counted.
    ///
    /// `seen`: the command's files as the witness saw them, for the assistant.
    pub fn new(
        assist: Option<&Prefetch>,
        page: u64,
        skip_pid: Option<u32>,
        seen: Arc<crate::trace::Witnessed>,
    ) -> Footprint {
        Footprint {
            skip_pid,
            page,
            pending: Mutex::default(),
            delayed: Mutex::default(),
            delayed_pages: AtomicU64::new(0),
            files: Mutex::default(),
            added: AtomicU64::new(0),
            assistant: assist.map(|a| Mutex::new(Assistant::with_witness(a, seen))),
        }
    }

    /// One event of the command's: prefetches for it (with `--assist`), and the pages it
    /// added become pending; the pages pending then when it added some.
    pub fn on_event(&self, e: RawEvent) -> Option<u64> {
        if Some(e.pid) == self.skip_pid {
            return None;
        }
        if let Some(a) = &self.assistant {
            let (windows, consumed) = {
                let mut a = a.lock().unwrap();
                (a.on_event(&e), a.take_consumed())
            };
            if !consumed.is_empty() {
                self.promote_consumed(consumed);
            }
            if !windows.is_empty() {
                let now = Instant::now();
                let mut files = self.files.lock().unwrap();
                let mut d = self.delayed.lock().unwrap();
                for (key, start, n) in windows {
                    user(files.entry(key).or_default(), e.pid);
                    d.push_back((now, key, PageRange::new(start, n)));
                    self.delayed_pages.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        let key = FileId(e.dev_major, e.dev_minor, e.ino);
        if e.mapped > 0 {
            return None;
        }
        if e.fault {
            if let Some(u) = self.files.lock().unwrap().get_mut(&key) {
                user(u, e.pid);
            }
            return None;
        }
        let r = PageRange::new(e.ofs / self.page, 1u64 << e.order.min(20));
        self.added.fetch_add(r.count, Ordering::Relaxed);
        let pending = {
            let mut p = self.pending.lock().unwrap();
            p.add(key, r);
            p.pages
        };
        user(self.files.lock().unwrap().entry(key).or_default(), e.pid);
        Some(pending)
    }

    /// Issues one piece of a prefetched window the assistant deferred (see
    /// `Assistant::issue_deferred`); false when none is left.
    pub fn issue_deferred(&self) -> bool {
        self.assistant
            .as_ref()
            .is_some_and(|a| a.lock().unwrap().issue_deferred())
    }

    /// The threads seen using each of these files.
    pub fn users(&self, keys: impl Iterator<Item = FileId>) -> Mappers {
        let files = self.files.lock().unwrap();
        keys.filter_map(|k| files.get(&k).map(|u| (k, u.clone())))
            .collect()
    }

    /// Prefetched windows the command has used every page of join its footprint before
    /// their grace time is over (found among the most recent windows; one not found there
    /// waits for its time).
    fn promote_consumed(&self, consumed: Vec<(FileId, u64, u64)>) {
        let mut d = self.delayed.lock().unwrap();
        let mut p = self.pending.lock().unwrap();
        for (key, start, n) in consumed {
            let from = d.len().saturating_sub(CONSUMED_SEARCH);
            let found = d
                .range(from..)
                .rposition(|x| x.1 == key && x.2 == PageRange::new(start, n))
                .map(|i| from + i);
            if let Some((_, key, r)) = found.and_then(|i| d.remove(i)) {
                self.delayed_pages.fetch_sub(r.count, Ordering::Relaxed);
                p.add(key, r);
            }
        }
    }

    /// Prefetched windows old enough at `now` join the command's footprint.
    pub fn promote_prefetches(&self, now: Instant) {
        let mut d = self.delayed.lock().unwrap();
        let mut p = self.pending.lock().unwrap();
        while d
            .front()
            .is_some_and(|x| now.saturating_duration_since(x.0) >= PREFETCH_GRACE)
        {
            let (_, key, r) = d.pop_front().unwrap();
            self.delayed_pages.fetch_sub(r.count, Ordering::Relaxed);
            p.add(key, r);
        }
    }

    /// The oldest prefetched windows join the command's footprint, in their grace time or
    /// not, until at most `keep` pages of windows are left in it.
    pub fn promote_oldest_prefetches(&self, keep: u64) {
        let mut d = self.delayed.lock().unwrap();
        let mut p = self.pending.lock().unwrap();
        while self.delayed_pages.load(Ordering::Relaxed) > keep {
            let Some((_, key, r)) = d.pop_front() else {
                break;
            };
            self.delayed_pages.fetch_sub(r.count, Ordering::Relaxed);
            p.add(key, r);
        }
    }

    /// Pages pending.
    pub fn pending_pages(&self) -> u64 {
        self.pending.lock().unwrap().pages
    }

    /// Pages of the prefetched windows still in their grace period.
    pub fn prefetch_pages(&self) -> u64 {
        self.delayed_pages.load(Ordering::Relaxed)
    }

    /// Everything pending, taken.
    pub fn take_pending(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().unwrap())
    }

    /// Everything pending, and the prefetched windows still in their grace period, taken:
    /// the final drop's work.
    pub fn take_all(&self) -> Pending {
        let mut last = self.take_pending();
        for (_, key, r) in std::mem::take(&mut *self.delayed.lock().unwrap()) {
            last.add(key, r);
        }
        self.delayed_pages.store(0, Ordering::Relaxed);
        last
    }

    /// Ranges where pages stayed, pending again for the next pass.
    pub fn requeue(&self, stayed: Pending) {
        self.pending.lock().unwrap().extend(stayed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(first: u64, count: u64) -> PageRange {
        PageRange::new(first, count)
    }

    #[test]
    fn split_front_holds_the_last_pages_of_the_largest_files() {
        let (a, b, c) = (FileId(1, 0, 1), FileId(1, 0, 2), FileId(1, 0, 3));
        let mut p = Pending::default();
        p.add(a, pr(0, 100));
        p.add(a, pr(100, 28)); // a: pages 0..128
        p.add(b, pr(10, 50)); // b: 10..60
        p.add(c, pr(0, 4)); // c: the smallest, left alone with files = 2
        let held = p.split_front(32, 2);
        assert_eq!(held.files[&a], vec![pr(96, 4), pr(100, 28)]);
        assert_eq!(held.files[&b], vec![pr(28, 32)]);
        assert!(!held.files.contains_key(&c));
        assert_eq!(p.files[&a], vec![pr(0, 96)]);
        assert_eq!(p.files[&b], vec![pr(10, 18)]);
        assert_eq!(p.files[&c], vec![pr(0, 4)]);
        assert_eq!(held.pages, 64);
        assert_eq!(p.pages, 182 - 64);
        // A file entirely inside its front leaves the pending set.
        let mut q = Pending::default();
        q.add(c, pr(0, 4));
        let h = q.split_front(32, 1);
        assert_eq!((h.pages, q.pages), (4, 0));
        assert!(q.files.is_empty());
    }

    /// A footprint holding prefetched windows `(issued, file, pages)`, oldest first, as the
    /// assistant's events would leave them.
    fn with_prefetches(windows: &[Prefetched]) -> Footprint {
        let f = Footprint::new(None, 4096, None, Arc::default());
        for &w in windows {
            f.delayed.lock().unwrap().push_back(w);
            f.delayed_pages.fetch_add(w.2.count, Ordering::Relaxed);
        }
        f
    }

    #[test]
    fn prefetches_join_the_footprint_once_their_grace_time_is_over() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (a, b) = (FileId(8, 1, 1), FileId(8, 1, 2));
        let f = with_prefetches(&[(t0, a, pr(0, 32)), (t0 + ms(100), b, pr(64, 16))]);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (48, 0));
        f.promote_prefetches(t0 + PREFETCH_GRACE - ms(1));
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (48, 0));
        f.promote_prefetches(t0 + PREFETCH_GRACE);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (16, 32));
        f.promote_prefetches(t0 + ms(100) + PREFETCH_GRACE);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (0, 48));
        let p = f.take_pending();
        assert_eq!(p.files[&a], vec![pr(0, 32)]);
        assert_eq!(p.files[&b], vec![pr(64, 16)]);
        // A clock behind the windows' (never earlier than issued) promotes nothing.
        let g = with_prefetches(&[(t0 + ms(10), a, pr(0, 1))]);
        g.promote_prefetches(t0);
        assert_eq!((g.prefetch_pages(), g.pending_pages()), (1, 0));
    }

    #[test]
    fn the_oldest_prefetches_join_early_until_at_most_keep_pages_are_left() {
        let t0 = Instant::now();
        let k = FileId(8, 1, 1);
        let f = with_prefetches(&[(t0, k, pr(0, 10)), (t0, k, pr(10, 10)), (t0, k, pr(20, 10))]);
        f.promote_oldest_prefetches(30);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (30, 0));
        f.promote_oldest_prefetches(15);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (10, 20));
        assert_eq!(f.take_pending().files[&k], vec![pr(0, 10), pr(10, 10)]);
        f.promote_oldest_prefetches(0);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (0, 10));
    }

    #[test]
    fn used_up_prefetches_join_before_their_time_and_others_wait() {
        let t0 = Instant::now();
        let (a, b) = (FileId(8, 1, 1), FileId(8, 1, 2));
        let f = with_prefetches(&[(t0, a, pr(0, 8)), (t0, b, pr(0, 8)), (t0, a, pr(8, 8))]);
        // One used up; one the footprint never held (not found: nothing happens).
        f.promote_consumed(vec![(a, 8, 8), (b, 100, 8)]);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (16, 8));
        assert_eq!(f.take_pending().files[&a], vec![pr(8, 8)]);
        let left: Vec<_> = f
            .delayed
            .lock()
            .unwrap()
            .iter()
            .map(|x| (x.1, x.2))
            .collect();
        assert_eq!(left, vec![(a, pr(0, 8)), (b, pr(0, 8))]);
    }

    #[test]
    fn the_final_drop_takes_pending_pages_and_prefetches_alike() {
        let t0 = Instant::now();
        let k = FileId(8, 1, 1);
        let f = with_prefetches(&[(t0, k, pr(100, 4))]);
        f.requeue({
            let mut p = Pending::default();
            p.add(k, pr(0, 2));
            p
        });
        let all = f.take_all();
        assert_eq!(all.pages, 6);
        assert_eq!(all.files[&k], vec![pr(0, 2), pr(100, 4)]);
        assert_eq!((f.prefetch_pages(), f.pending_pages()), (0, 0));
    }
}
