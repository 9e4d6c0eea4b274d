//! `auto`'s choice between RWF_DONTCACHE and O_DIRECT for a large file, measured on the file
//! itself. Neither wins everywhere (2 GiB, cold source, with the final `sync`): on an ext4 on
//! a RAM-backed loop device O_DIRECT took 0.62 s and RWF_DONTCACHE 1.00 s (a copy through the
//! cache costs CPU that a fast device leaves in view); on this machine's virtio disk
//! RWF_DONTCACHE took 1.43 s and O_DIRECT 2.96 s. So the first [`WINDOWS`] windows of the
//! file's data are copied alternately each way, each timed with its writes on the device
//! (RWF_DONTCACHE's window waits for its write-back, as O_DIRECT's writes are done when they
//! return), and the rest goes the faster way. Measured once per pair of devices in a run;
//! later large files between them go the way measured. Nothing is copied twice: the windows
//! are the file's own data.

use crate::copy::engine::{Job, Moved, PrecachedBlocks, Unsupported};
use crate::copy::options::Strategy;
use crate::copy::report::AutoChoice;
use crate::sys;
use std::sync::Mutex;
use std::time::Instant;

/// Files from this size are measured (the windows are half of the smallest).
pub(super) const PROBE_MIN: u64 = 1 << 30;
/// Bytes per measured window.
const WINDOW: u64 = 64 << 20;
/// Windows measured, alternately RWF_DONTCACHE and O_DIRECT.
const WINDOWS: u64 = 4;
/// O_DIRECT is chosen only when it is this much faster: RWF_DONTCACHE keeps pages others had
/// cached in the cache and needs no alignment, so it stays the default on a tie, and on the
/// virtio disk here (where it is the faster, 2 GiB in 1.4-2.7 s against 2.4-3.1 s) windows
/// measured O_DIRECT at 0.8-1.0x RWF_DONTCACHE's rate; on the RAM-backed ext4 (where O_DIRECT
/// is the faster, 0.50-0.57 s against 0.92-1.6 s) at 1.4-1.9x.
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

/// The way chosen from the rates measured each way.
fn choose(dontcache: f64, direct: f64) -> Strategy {
    match direct > dontcache * MARGIN {
        true => Strategy::Direct,
        false => Strategy::Dontcache,
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
    /// when it is large, its data starts with [`WINDOWS`] whole windows, `chain` (the
    /// strategies open to it, under `auto`) has both ways, and nothing was measured between
    /// its devices yet. `move_data` moves a part of the file one way.
    pub(super) fn measure(
        &self,
        job: &Job<'_>,
        devs: (u64, u64),
        size: u64,
        chain: &[Strategy],
        move_data: impl Fn(&Job<'_>, Strategy) -> Moved,
    ) -> Probe {
        let measurable = size >= PROBE_MIN
            && job.depth > 1
            && WINDOW.is_multiple_of(job.chunk as u64)
            && job.extents.first().is_some_and(|e| e.1 >= WINDOWS * WINDOW)
            && chain.contains(&Strategy::Dontcache)
            && chain.contains(&Strategy::Direct);
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
        let probe = self.windows(job, devs, move_data);
        precached.drop_all(job.src);
        probe
    }

    /// Copies the windows of [`Choices::measure`] and chooses.
    fn windows(
        &self,
        job: &Job<'_>,
        devs: (u64, u64),
        move_data: impl Fn(&Job<'_>, Strategy) -> Moved,
    ) -> Probe {
        let start = job.extents[0].0;
        let ways = [Strategy::Dontcache, Strategy::Direct];
        let mut spent = [0.0f64; 2];
        for k in 0..WINDOWS {
            let from = start + k * WINDOW;
            let window = [(from, WINDOW)];
            let part = Job {
                extents: &window,
                drop_source_after: false,
                ..*job
            };
            let way = (k % 2) as usize;
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
        let each = WINDOWS / 2 * WINDOW;
        let rate = |s: f64| each as f64 / s.max(1e-9);
        let (dontcache, direct) = (rate(spent[0]), rate(spent[1]));
        let choice = AutoChoice {
            source_device: device(devs.0),
            dest_device: device(devs.1),
            measured_bytes: each,
            dontcache_bytes_per_s: dontcache,
            direct_bytes_per_s: direct,
            chosen: choose(dontcache, direct),
        };
        self.0.lock().unwrap().push((devs, choice));
        Probe::Chose {
            upto: start + WINDOWS * WINDOW,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_only_when_clearly_faster() {
        assert_eq!(choose(1.0e9, 1.0e9), Strategy::Dontcache);
        assert_eq!(choose(1.0e9, 1.2e9), Strategy::Dontcache);
        assert_eq!(choose(1.0e9, 1.3e9), Strategy::Direct);
        assert_eq!(choose(2.0e9, 1.0e9), Strategy::Dontcache);
        // A window that took no measurable time does not win by division.
        assert_eq!(choose(f64::INFINITY, 1.0e9), Strategy::Dontcache);
        assert_eq!(device(libc::makedev(254, 3)), "254:3");
    }

    #[test]
    fn windows_fit_in_the_smallest_file_measured() {
        const { assert!(WINDOWS * WINDOW <= PROBE_MIN / 2) };
        const { assert!(WINDOWS.is_multiple_of(2), "as many windows each way") };
    }
}
