//! `auto`'s choice between O_DIRECT and RWF_DONTCACHE for a large file, measured on the file
//! itself. O_DIRECT is the faster on both devices of this machine (2 GiB, cold source, with
//! the final `sync`: 0.50-0.57 s against 0.92-1.6 s on an ext4 on a RAM-backed loop device;
//! 1.18-1.31 s against 1.4-2.9 s on the virtio disk), but only since its buffers are huge
//! pages ([`AlignedBuf`](crate::sys::AlignedBuf)): in 4 KiB pages the virtio disk split each
//! 4 MiB request into ~527 KiB ones and O_DIRECT took 2.7-3.1 s, behind RWF_DONTCACHE. A
//! device or file system that serves O_DIRECT badly is not known before. So the file's first
//! windows are copied by each way in turn, [`ROUNDS`] times, each window timed with its writes
//! on the device (RWF_DONTCACHE's window waits for its write-back; O_DIRECT's writes are on
//! the device when they return), and the rest goes the faster way. Measured once per pair of
//! devices in a run; later large files between them go the way measured. Nothing is copied
//! twice: the windows are the file's own data. (Drop-behind is not measured: its windows,
//! each starting with cold readahead and ending with a drained write-back, measured it at
//! half its rate over a whole file.)

use crate::copy::engine::{Job, Moved, PrecachedBlocks, Unsupported};
use crate::copy::options::Strategy;
use crate::copy::report::AutoChoice;
use crate::sys;
use std::sync::Mutex;
use std::time::Instant;

/// Files from this size are measured (the windows are under half of the smallest).
pub(super) const PROBE_MIN: u64 = 1 << 30;
/// Bytes per measured window.
const WINDOW: u64 = 64 << 20;
/// The ways measured, in the order preferred on a tie: O_DIRECT costs the least CPU (a 4 GiB
/// copy: 0.25 s against 2.1 s) and never puts the copy's pages in the cache.
const WAYS: [Strategy; 2] = [Strategy::Direct, Strategy::Dontcache];
/// Windows measured each way, the ways taking turns.
const ROUNDS: u64 = 2;
/// A way other than the preferred one is chosen only when it is this much faster. Windows
/// measured O_DIRECT at 1.4-1.9x RWF_DONTCACHE's rate on the RAM-backed ext4 and 1.5-1.7x on
/// the virtio disk (where, in 4 KiB pages, it was 0.8-1.0x).
const MARGIN: f64 = 1.25;

/// How the measuring of one file ended.
pub(super) enum Probe {
    /// Not measured: the chain as it is.
    Skip,
    /// The file's data below `upto` is copied; the rest goes the way chosen (see
    /// [`Choices::chosen`]).
    Chose { upto: u64 },
    /// The file system refused `way` (`why`) before it wrote anything of a window: the data
    /// below `upto` is copied.
    Refused {
        upto: u64,
        way: Strategy,
        why: Unsupported,
    },
    /// The copy failed or was stopped in a window.
    Ended(Moved),
}

/// The way chosen from the rates measured (in [`WAYS`]' order): the fastest, when it is more
/// than [`MARGIN`] times as fast as the most preferred; else the most preferred.
fn choose(rates: &[(Strategy, f64)]) -> Strategy {
    let (first, base) = rates[0];
    let best = rates
        .iter()
        .copied()
        .filter(|r| r.1.is_finite())
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(rates[0]);
    match best.1 > base * MARGIN {
        true => best.0,
        false => first,
    }
}

fn device(dev: u64) -> String {
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

/// `auto`'s measured choices for large files, per (source, destination) device, in the order
/// measured (the workers own them).
#[derive(Default)]
pub(super) struct Choices(Mutex<Vec<((u64, u64), AutoChoice)>>);

impl Choices {
    /// The measured choice for files of `size` between `devs` (source, destination), if any.
    pub(super) fn chosen(&self, devs: (u64, u64), size: u64) -> Option<Strategy> {
        if size < PROBE_MIN {
            return None;
        }
        let choices = self.0.lock().unwrap();
        choices.iter().find(|c| c.0 == devs).map(|c| c.1.chosen)
    }

    /// What was measured in this run, in the order measured.
    pub(super) fn all(&self) -> Vec<AutoChoice> {
        let choices = self.0.lock().unwrap();
        choices.iter().map(|c| c.1.clone()).collect()
    }

    /// Measures the file of `job` (`job.extents`: what is still to copy; `size`: the file's)
    /// when it is large, `chain` (the strategies open to it, under `auto`) has two of the
    /// [`WAYS`] or more, its data starts with [`ROUNDS`] whole windows for each, and nothing
    /// was measured between its devices yet. `move_data` moves a part of the file one way.
    pub(super) fn measure(
        &self,
        job: &Job<'_>,
        devs: (u64, u64),
        size: u64,
        chain: &[Strategy],
        move_data: impl Fn(&Job<'_>, Strategy) -> Moved,
    ) -> Probe {
        let ways: Vec<Strategy> = WAYS.into_iter().filter(|w| chain.contains(w)).collect();
        let windows = ways.len() as u64 * ROUNDS;
        let measurable = size >= PROBE_MIN
            && ways.len() >= 2
            && job.depth > 1
            && WINDOW.is_multiple_of(job.chunk as u64)
            && job.extents.first().is_some_and(|e| e.1 >= windows * WINDOW);
        if !measurable || self.chosen(devs, size).is_some() {
            return Probe::Skip;
        }
        // Which source blocks were cached before, taken once, and the others dropped once
        // after the windows: a RWF_DONTCACHE window's own drop would take what an earlier
        // window's readahead left for someone else's, readahead past a window into an
        // O_DIRECT one is dropped by nobody else (the rest may go by O_DIRECT: under a loaded
        // test run 8 MiB of a cold source stayed), and each window's drop waited for the
        // readahead into the next.
        let precached = PrecachedBlocks::snapshot(job);
        let probe = self.windows(job, devs, &ways, move_data);
        precached.drop_all(job.src);
        probe
    }

    /// Copies the windows of [`Choices::measure`] and chooses.
    fn windows(
        &self,
        job: &Job<'_>,
        devs: (u64, u64),
        ways: &[Strategy],
        move_data: impl Fn(&Job<'_>, Strategy) -> Moved,
    ) -> Probe {
        let start = job.extents[0].0;
        let windows = ways.len() as u64 * ROUNDS;
        let mut spent = vec![0.0f64; ways.len()];
        for k in 0..windows {
            let from = start + k * WINDOW;
            let window = [(from, WINDOW)];
            let way = (k % ways.len() as u64) as usize;
            // O_DIRECT checks its first chunk for pages the file system cached (see
            // `copy_direct`) in its first window only: later, an earlier window's readahead
            // may have cached them.
            let direct_again = k >= ways.len() as u64 && ways[way] == Strategy::Direct;
            let part = Job {
                extents: &window,
                drop_source_after: false,
                src_cached_before: if direct_again {
                    None
                } else {
                    job.src_cached_before
                },
                ..*job
            };
            let t = Instant::now();
            match move_data(&part, ways[way]) {
                Moved::Done => {}
                Moved::Fallback(why) => {
                    return Probe::Refused {
                        upto: from,
                        way: ways[way],
                        why,
                    }
                }
                other => return Probe::Ended(other),
            }
            if ways[way] == Strategy::Dontcache {
                let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
                let _ = sys::sync_file_range(job.dst, from, WINDOW, flags);
            }
            spent[way] += t.elapsed().as_secs_f64();
        }
        let each = ROUNDS * WINDOW;
        let rates: Vec<(Strategy, f64)> = ways
            .iter()
            .zip(&spent)
            .map(|(w, s)| (*w, each as f64 / s.max(1e-9)))
            .collect();
        let choice = AutoChoice {
            source_device: device(devs.0),
            dest_device: device(devs.1),
            measured_bytes: each,
            rates_bytes_per_s: rates.iter().copied().collect(),
            chosen: choose(&rates),
        };
        self.0.lock().unwrap().push((devs, choice));
        Probe::Chose {
            upto: start + windows * WINDOW,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_way_only_when_clearly_faster() {
        use Strategy::{Direct, Dontcache, DropBehind};
        let two = |a, b| choose(&[(Direct, a), (Dontcache, b)]);
        assert_eq!(two(1.0e9, 1.0e9), Direct);
        assert_eq!(two(1.0e9, 1.2e9), Direct);
        assert_eq!(two(1.0e9, 1.3e9), Dontcache);
        assert_eq!(two(2.0e9, 1.0e9), Direct);
        // A window that took no measurable time does not win by division.
        assert_eq!(two(f64::INFINITY, 1.0e9), Direct);
        assert_eq!(two(1.0e9, f64::INFINITY), Direct);
        // More ways: the fastest, when clearly faster than the first.
        let three = |a, b, c| choose(&[(Direct, a), (Dontcache, b), (DropBehind, c)]);
        assert_eq!(three(1.0e9, 1.1e9, 1.2e9), Direct);
        assert_eq!(three(1.0e9, 1.3e9, 1.4e9), DropBehind);
        assert_eq!(three(1.0e9, 1.5e9, 1.4e9), Dontcache);
        assert_eq!(device(libc::makedev(254, 3)), "254:3");
    }

    #[test]
    fn windows_fit_in_the_smallest_file_measured() {
        const { assert!(WAYS.len() as u64 * ROUNDS * WINDOW < PROBE_MIN / 2) };
    }
}
