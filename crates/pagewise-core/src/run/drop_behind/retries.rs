//! The retry schedule of ranges whose pages stayed cached after a drop: tried again after
//! 1, 2, 4, 8 and 16 ms (read I/O still in flight), then parked (pages the command maps) and
//! tried after 1, 2, 4 s, then every 8 s. The clock and the drop are passed in.

use super::super::pending::Pending;
#[cfg(test)]
use crate::sys::FileId as FileKey;
use std::time::{Duration, Instant};

/// A range whose pages stayed cached is tried again after 1 ms, then after twice as long each
/// time while that stays under this (read I/O still in flight completes within it).
const RETRY_AFTER: Duration = Duration::from_millis(1);
const RETRY_LAST: Duration = Duration::from_millis(16);
/// Parked ranges are tried again after this long, then twice as long each time, up to
/// [`PARKED_RETRY_MAX`].
const PARKED_RETRY: Duration = Duration::from_secs(1);
const PARKED_RETRY_MAX: Duration = Duration::from_secs(8);

/// Ranges whose pages stayed cached after a drop. Pages still under read I/O drop a moment
/// later, so a range is tried again 1, 2, 4, 8 and 16 ms later; pages the command has mapped
/// (an mmap it keeps: fio's whole file, a database's) cannot be dropped while they are
/// mapped, so what stays then is parked: tried again after 1 s, 2 s, 4 s, then every 8 s,
/// and in the final drop (after the command's exit, when its mappings are gone). Parked pages
/// are not counted against `--max-cache`: counting what cannot be dropped would make every
/// pass retry all of it (measured: fio mmap randread under `run --assist` spent the CPU it
/// needed on passes over the pages it had mapped, 3 system calls per range each time).
#[derive(Default)]
pub(super) struct Retries {
    /// Ranges that stayed: when to try them next, the wait before that try, the ranges.
    retrying: Vec<(Instant, Duration, Pending)>,
    parked: Pending,
    /// When the parked ranges are tried next, and the wait after that.
    parked_next: Option<(Instant, Duration)>,
}

impl Retries {
    /// Pages of the ranges being retried (not the parked ones).
    pub(super) fn pages(&self) -> u64 {
        self.retrying.iter().map(|(_, _, p)| p.pages).sum()
    }

    /// Ranges that stayed in a drop at `now`.
    pub(super) fn stayed(&mut self, p: Pending, now: Instant) {
        if p.pages > 0 {
            self.retrying.push((now + RETRY_AFTER, RETRY_AFTER, p));
        }
    }

    /// Everything still retried or parked.
    pub(super) fn take(&mut self) -> Pending {
        let mut all = std::mem::take(&mut self.parked);
        for (_, _, p) in self.retrying.drain(..) {
            all.extend(p);
        }
        all
    }

    /// Ranges that stayed through the last retry, parked at `now`.
    fn park(&mut self, p: Pending, now: Instant) {
        if p.pages > 0 {
            self.parked.extend(p);
            self.parked_next
                .get_or_insert((now + PARKED_RETRY, PARKED_RETRY));
        }
    }

    /// The next try (with `drop`, which returns what stayed) of ranges that stayed, whose
    /// time has come (what stays after the last parks), and of the parked ranges when their
    /// time has come; `now` reads the clock (after each drop, which takes time).
    pub(super) fn retry(
        &mut self,
        now: impl Fn() -> Instant,
        mut drop: impl FnMut(Pending) -> Pending,
    ) {
        if let Some((at, wait)) = self.parked_next {
            if now() >= at {
                let parked = std::mem::take(&mut self.parked);
                let stayed = drop(parked);
                self.parked_next = (stayed.pages > 0).then(|| {
                    let next = (wait * 2).min(PARKED_RETRY_MAX);
                    (now() + next, next)
                });
                self.parked.extend(stayed);
            }
        }
        let at_now = now();
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retrying)
            .into_iter()
            .partition(|(at, _, _)| *at <= at_now);
        self.retrying = wait;
        for (_, waited, work) in due {
            let stayed = drop(work);
            if stayed.pages == 0 {
                continue;
            }
            if waited >= RETRY_LAST {
                self.park(stayed, now());
            } else {
                let next = waited * 2;
                self.retrying.push((now() + next, next, stayed));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::residency::PageRange;

    const KEY: FileKey = FileKey(8, 1, 42);

    fn pages(n: u64) -> Pending {
        let mut p = Pending::default();
        p.add(KEY, PageRange::new(0, n));
        p
    }

    /// When each range being retried is tried next, and after what wait, relative to `t0`.
    fn schedule(r: &Retries, t0: Instant) -> Vec<(Duration, Duration, u64)> {
        r.retrying
            .iter()
            .map(|(at, wait, p)| (*at - t0, *wait, p.pages))
            .collect()
    }

    #[test]
    fn a_range_that_stays_is_retried_after_1_2_4_8_16_ms_then_parked() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = Retries::default();
        r.stayed(pages(0), t0);
        assert!(r.retrying.is_empty(), "nothing stayed: nothing to retry");
        r.stayed(pages(5), t0);
        assert_eq!(schedule(&r, t0), vec![(ms(1), ms(1), 5)]);
        assert_eq!(r.pages(), 5);
        // Not due yet: not dropped.
        r.retry(|| t0, |_| panic!("dropped before its time"));
        assert_eq!(schedule(&r, t0), vec![(ms(1), ms(1), 5)]);
        // Due at each step, and the pages stay: the wait doubles.
        let mut at = t0;
        let mut tries = 0;
        for (wait, next) in [(1, 2), (2, 4), (4, 8), (8, 16)] {
            at += ms(wait);
            r.retry(
                || at,
                |p| {
                    tries += 1;
                    p
                },
            );
            assert_eq!(schedule(&r, t0), vec![(at - t0 + ms(next), ms(next), 5)]);
        }
        assert_eq!(tries, 4);
        // After the 16 ms wait, what stays is parked for 1 s and no longer counted.
        at += ms(16);
        r.retry(|| at, |p| p);
        assert!(r.retrying.is_empty());
        assert_eq!(r.pages(), 0);
        assert_eq!(r.parked.pages, 5);
        assert_eq!(r.parked_next, Some((at + ms(1000), ms(1000))));
    }

    #[test]
    fn parked_ranges_are_retried_after_1_2_4_then_every_8_s_until_they_go() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut r = Retries::default();
        r.park(pages(3), t0);
        assert_eq!(r.parked_next, Some((t0 + s(1), s(1))));
        r.retry(
            || t0 + s(1) - Duration::from_nanos(1),
            |_| panic!("too early"),
        );
        let mut at = t0;
        for (wait, next) in [(1, 2), (2, 4), (4, 8), (8, 8), (8, 8)] {
            at += s(wait);
            r.retry(|| at, |p| p);
            assert_eq!(r.parked_next, Some((at + s(next), s(next))));
            assert_eq!(r.parked.pages, 3);
        }
        // Dropped at last: nothing parked, no next time.
        at += s(8);
        r.retry(|| at, |_| Pending::default());
        assert_eq!(r.parked_next, None);
        assert_eq!(r.parked.pages, 0);
    }

    #[test]
    fn only_what_stays_is_retried_and_take_returns_everything() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = Retries::default();
        r.stayed(pages(4), t0);
        r.stayed(pages(6), t0 + ms(5));
        // At 1 ms only the first is due; half of it stays.
        r.retry(
            || t0 + ms(1),
            |p| {
                assert_eq!(p.pages, 4);
                pages(2)
            },
        );
        assert_eq!(schedule(&r, t0), vec![(ms(6), ms(1), 6), (ms(3), ms(2), 2)]);
        r.park(pages(7), t0);
        let all = r.take();
        assert_eq!(all.pages, 15);
        assert!(r.retrying.is_empty() && r.parked.pages == 0);
    }
}
