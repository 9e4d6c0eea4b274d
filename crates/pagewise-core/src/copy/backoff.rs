//! `--bwlimit auto`: a copy that backs off when others need the disk. The copy's rate limit
//! ([`Bandwidth`]) is set every [`TICK`] from what the block devices under the copy report in
//! `/sys/dev/block/MAJ:MIN/stat`: the mean latency of the reads completed in the tick (the
//! copy's own reads are few and large; a database's many and small, so the mean is theirs),
//! against the same mean measured before the copy starts. Above [`SLOWER`] times it, the rate
//! is halved; otherwise it grows by [`STEP`] (additive increase, multiplicative decrease).
//! With no other reads before the copy there is nobody to protect: the copy is not limited
//! (said in a notice), and the same when no block device is under it (tmpfs, NFS, overlay's
//! upper directory on one is found through its device).

use super::limits::Bandwidth;
use crate::sys::{self, BlockStat};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the rate is set.
pub(super) const TICK: Duration = Duration::from_millis(100);
/// How long the devices are watched before the copy starts (the baseline).
const PROBE: Duration = Duration::from_millis(1000);
/// Reads a tick needs for its mean latency to count.
const MIN_READS: u64 = 8;
/// The read latency the copy tolerates, as a multiple of the baseline.
const SLOWER: f64 = 1.3;
/// The additive increase per tick, and the floor and the start.
const STEP: f64 = (16 << 20) as f64;
const FLOOR: f64 = (1 << 20) as f64;
const START: f64 = (64 << 20) as f64;

/// What the controller did, for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AutoRate {
    /// The devices watched (`MAJ:MIN`).
    pub devices: Vec<String>,
    /// The mean read latency before the copy, in milliseconds (None: no reads to protect).
    pub baseline_ms: Option<f64>,
    /// The lowest rate set, bytes per second.
    pub min_rate: f64,
    /// The highest rate set, bytes per second.
    pub max_rate: f64,
    /// Ticks in which the rate was halved.
    pub decreases: u64,
}

/// The controller for one copy: the devices and the baseline read latency.
pub(super) struct Backoff {
    devs: Vec<u64>,
    baseline_ms: Option<f64>,
    ceiling: f64,
}

/// Sums the stats of `devs` (None if any cannot be read).
fn sample(devs: &[u64]) -> Option<BlockStat> {
    let mut total = BlockStat::default();
    for &d in devs {
        let s = sys::block_stat(d)?;
        total.reads += s.reads;
        total.read_ticks_ms += s.read_ticks_ms;
        total.writes += s.writes;
        total.write_ticks_ms += s.write_ticks_ms;
    }
    Some(total)
}

/// The mean latency (ms) of the others' reads completed between two samples, when enough
/// were: the devices' reads less `own` (the copy's reads meanwhile and their time in µs —
/// one request each where the device takes a chunk whole, as it does since O_DIRECT's
/// buffers are huge pages). The copy's reads are few and long, and weighed in the mean far
/// beyond their number: with them in it, `bench/copy-live`'s `--bwlimit auto` copied at
/// 142 MB/s, 68% of the fixed 200M that kept the database's p99 within 1.5x; without them
/// (and with O_DIRECT, see `probe`'s skip under a limit) 223 MB/s, 106%, p99 1.11x alone.
fn read_latency(a: &BlockStat, b: &BlockStat, own: (u64, u64)) -> Option<f64> {
    let reads = b.reads.checked_sub(a.reads)?.saturating_sub(own.0);
    let ticks = b.read_ticks_ms.checked_sub(a.read_ticks_ms)? as f64;
    let ticks = (ticks - own.1 as f64 / 1000.0).max(0.0);
    (reads >= MIN_READS).then(|| ticks / reads as f64)
}

impl Backoff {
    /// Finds the block devices under the copy's paths and measures their read latency for
    /// [`PROBE`]; `ceiling`: a fixed --bwlimit given too (bytes per second). The notices say
    /// when nothing will be limited.
    pub(super) fn start(
        paths: &[&std::path::Path],
        ceiling: Option<u64>,
        notice: &dyn Fn(String),
    ) -> Option<Backoff> {
        use std::os::unix::fs::MetadataExt;
        let mut devs: Vec<u64> = paths
            .iter()
            .filter_map(|p| {
                std::fs::metadata(p)
                    .or_else(|_| std::fs::metadata(p.parent().unwrap_or(p)))
                    .ok()
            })
            .map(|m| m.dev())
            .filter(|&d| sys::block_stat(d).is_some())
            .collect();
        devs.sort_unstable();
        devs.dedup();
        if devs.is_empty() {
            notice(
                "--bwlimit auto: no block device under the copy (tmpfs, NFS?): not limited".into(),
            );
            return None;
        }
        let before = sample(&devs)?;
        std::thread::sleep(PROBE);
        let after = sample(&devs)?;
        let baseline_ms = read_latency(&before, &after, (0, 0)).map(|l| l.max(0.05));
        if baseline_ms.is_none() {
            notice(format!(
                "--bwlimit auto: no other reads on {} before the copy: not limited",
                names(&devs)
            ));
        }
        Some(Backoff {
            devs,
            baseline_ms,
            ceiling: ceiling.map_or(f64::INFINITY, |c| c as f64),
        })
    }

    /// Sets `bw`'s rate every tick until `done`; what it did.
    pub(super) fn run(&self, bw: &Bandwidth, done: &AtomicBool) -> AutoRate {
        let mut report = AutoRate {
            devices: self.devs.iter().map(|&d| name(d)).collect(),
            baseline_ms: self.baseline_ms,
            min_rate: f64::INFINITY,
            max_rate: 0.0,
            decreases: 0,
        };
        let Some(base) = self.baseline_ms else {
            bw.set_rate(self.ceiling);
            return report;
        };
        let mut rate = START.min(self.ceiling);
        bw.set_rate(rate);
        let mut prev = sample(&self.devs);
        let mut own = bw.own_reads();
        let mut next = Instant::now() + TICK;
        while !done.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now < next {
                std::thread::sleep((next - now).min(Duration::from_millis(20)));
                continue;
            }
            next += TICK;
            let cur = sample(&self.devs);
            let own_now = bw.own_reads();
            let own_tick = (own_now.0 - own.0, own_now.1 - own.1);
            let lat = match (&prev, &cur) {
                (Some(a), Some(b)) => read_latency(a, b, own_tick),
                _ => None,
            };
            (prev, own) = (cur, own_now);
            let next_rate = next_rate(rate, lat, base, self.ceiling);
            if next_rate < rate {
                report.decreases += 1;
            }
            rate = next_rate;
            bw.set_rate(rate);
            report.min_rate = report.min_rate.min(rate);
            report.max_rate = report.max_rate.max(rate);
        }
        if !report.min_rate.is_finite() {
            report.min_rate = rate;
            report.max_rate = rate;
        }
        report
    }
}

/// One tick of AIMD: halved (not below [`FLOOR`]) when the reads of the tick took longer than
/// [`SLOWER`] times the baseline `base` (ms), else raised by [`STEP`] up to `ceiling`.
fn next_rate(rate: f64, lat: Option<f64>, base: f64, ceiling: f64) -> f64 {
    match lat {
        Some(l) if l > base * SLOWER => (rate / 2.0).max(FLOOR),
        _ => (rate + STEP).min(ceiling),
    }
}

fn name(d: u64) -> String {
    format!("{}:{}", libc::major(d), libc::minor(d))
}

fn names(devs: &[u64]) -> String {
    devs.iter().map(|&d| name(d)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additive_increase_multiplicative_decrease() {
        let inf = f64::INFINITY;
        assert_eq!(next_rate(START, Some(1.0), 1.0, inf), START + STEP);
        assert_eq!(
            next_rate(START, None, 1.0, inf),
            START + STEP,
            "no reads: nobody waits"
        );
        assert_eq!(next_rate(START, Some(1.31), 1.0, inf), START / 2.0);
        assert_eq!(
            next_rate(FLOOR, Some(9.0), 1.0, inf),
            FLOOR,
            "never below the floor"
        );
        assert_eq!(
            next_rate(START, Some(0.5), 1.0, START),
            START,
            "never above a ceiling"
        );
        // Held at a latency above the target, the rate falls to the floor in a few ticks.
        let mut r = 1e9;
        for _ in 0..12 {
            r = next_rate(r, Some(2.0), 1.0, inf);
        }
        assert_eq!(r, FLOOR);
    }

    #[test]
    fn latency_needs_enough_reads_and_never_goes_backwards() {
        let a = BlockStat {
            reads: 100,
            read_ticks_ms: 50,
            ..Default::default()
        };
        let b = BlockStat {
            reads: 120,
            read_ticks_ms: 90,
            ..Default::default()
        };
        assert_eq!(read_latency(&a, &b, (0, 0)), Some(2.0));
        let few = BlockStat {
            reads: 103,
            read_ticks_ms: 60,
            ..Default::default()
        };
        assert_eq!(read_latency(&a, &few, (0, 0)), None);
        assert_eq!(
            read_latency(&b, &a, (0, 0)),
            None,
            "a counter reset is no sample"
        );
        // The copy's own 10 reads of 3 ms each are not the others': 10 reads in 10 ms.
        assert_eq!(read_latency(&a, &b, (10, 30_000)), Some(1.0));
        // More of its own than the device saw (requests split, merged): never below zero.
        assert_eq!(read_latency(&a, &b, (15, 900_000)), None);
        let many = BlockStat {
            reads: 200,
            read_ticks_ms: 60,
            ..Default::default()
        };
        assert_eq!(read_latency(&a, &many, (10, 900_000)), Some(0.0));
    }
}
