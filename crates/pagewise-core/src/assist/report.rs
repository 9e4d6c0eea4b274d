//! What the assistant reports: [`AssistReport`], and the latency counters and histogram
//! behind its figures.

use crate::trace::Source;
use crate::verb::Outcome;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the assistant saw and did.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AssistReport {
    /// Page faults of the target on file mappings.
    pub faults: u64,
    /// Faults on pages not known to be cached.
    pub misses: u64,
    /// Faults on pages we had prefetched: misses avoided or shortened (an estimate: pages the
    /// kernel mapped by fault-around without a fault are not counted).
    pub faults_on_prefetched: u64,
    /// Windows prefetched (`fadvise(WILLNEED)` calls).
    pub prefetches: u64,
    /// Of `prefetches`, by the sequential detector.
    pub prefetches_sequential: u64,
    /// Of `prefetches`, by the stride detector.
    pub prefetches_stride: u64,
    /// Of `prefetches`, by the range detector.
    pub prefetches_range: u64,
    /// Bytes of the windows prefetched.
    pub prefetched_bytes: u64,
    /// Bytes of prefetched windows the command never faulted in: a lower bound of the waste
    /// (a window faulted in at all counts as used; its other pages may have been mapped
    /// without a fault).
    pub wasted_bytes_estimate: u64,
    /// Time from the fault (tracepoint time stamp) to the prefetch being issued (its
    /// `fadvise(WILLNEED)` entering the kernel), microseconds: the median.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub issue_latency_us_p50: f64,
    /// The 90th percentile of the same.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub issue_latency_us_p90: f64,
    /// The 99th percentile of the same.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub issue_latency_us_p99: f64,
    /// Time from the fault to the kernel having queued the prefetch's reads (the
    /// `fadvise(WILLNEED)` of its last piece returned: windows of more than 32 pages are
    /// issued in pieces of 16, the faulting one first), microseconds: the median. The
    /// difference to `issue_latency_us_p50` is the kernel's own submission time (page
    /// allocation, the block layer, the device driver), and for long windows the events
    /// handled between their pieces.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub submit_latency_us_p50: f64,
    /// The 99th percentile of the same.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub submit_latency_us_p99: f64,
    /// Files the target faulted on or read.
    pub files: u64,
    /// Files that could not be opened by handle (gone, or a filesystem without handles).
    pub files_unreachable: u64,
    /// Issue latency as a histogram: prefetches issued within `le_us` microseconds of their
    /// fault (and above the previous bucket's bound); the last bucket (`le_us: null`) holds
    /// the rest. Empty when nothing was prefetched.
    pub issue_latency_us_histogram: Vec<LatencyBucket>,
    /// Events the kernel lost (ring buffer overrun).
    pub lost_events: u64,
    /// How the faults were followed (`perf` or `tracefs`); null in a simulation.
    pub source: Option<Source>,
    /// Elapsed time (for `run --assist`: the command's run time); `interrupted` when the
    /// observer stopped the assistant before the processes exited or the time was up.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// One bucket of [`AssistReport::issue_latency_us_histogram`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LatencyBucket {
    /// Upper bound in microseconds (inclusive); null for the last bucket.
    pub le_us: Option<u64>,
    /// Prefetches in this bucket.
    pub count: u64,
}

/// Upper bounds of the histogram's buckets, microseconds.
const LATENCY_BOUNDS_US: [u64; 10] = [10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000];

/// The histogram of a per-microsecond count vector (`lat[us]`; its last slot: above).
pub(super) fn histogram(lat: &[u64]) -> Vec<LatencyBucket> {
    if lat.iter().all(|&n| n == 0) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut from = 0usize;
    for &b in &LATENCY_BOUNDS_US {
        let to = (b as usize + 1).min(lat.len());
        out.push(LatencyBucket {
            le_us: Some(b),
            count: lat[from.min(to)..to].iter().sum(),
        });
        from = to;
    }
    out.push(LatencyBucket {
        le_us: None,
        count: lat[from.min(lat.len())..].iter().sum(),
    });
    out
}

/// Microsecond latencies counted per microsecond up to 100 ms (the last slot: above).
pub(super) struct Latencies(Vec<AtomicU64>);

impl Latencies {
    pub(super) fn new() -> Latencies {
        Latencies((0..=100_000).map(|_| AtomicU64::new(0)).collect())
    }
    pub(super) fn add(&self, us: u64) {
        let last = self.0.len() - 1;
        self.0[(us as usize).min(last)].fetch_add(1, Ordering::Relaxed);
    }
    pub(super) fn counts(&self) -> Vec<u64> {
        self.0.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }
}

/// The percentile `q` of per-microsecond counts (0 when empty).
pub(super) fn percentile(lat: &[u64], q: f64) -> f64 {
    let total: u64 = lat.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let want = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut acc = 0;
    for (us, n) in lat.iter().enumerate() {
        acc += n;
        if acc >= want {
            return us as f64;
        }
    }
    (lat.len() - 1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_inclusive_and_the_last_takes_the_rest() {
        let mut lat = vec![0u64; 100_001];
        lat[0] = 1;
        lat[10] = 2;
        lat[11] = 3;
        lat[10_000] = 4;
        lat[10_001] = 5;
        lat[100_000] = 6;
        let h = histogram(&lat);
        assert_eq!(h.len(), LATENCY_BOUNDS_US.len() + 1);
        assert_eq!(
            h[0],
            LatencyBucket {
                le_us: Some(10),
                count: 3
            }
        );
        assert_eq!(
            h[1],
            LatencyBucket {
                le_us: Some(20),
                count: 3
            }
        );
        assert_eq!(
            h[9],
            LatencyBucket {
                le_us: Some(10_000),
                count: 4
            }
        );
        assert_eq!(
            h[10],
            LatencyBucket {
                le_us: None,
                count: 11
            }
        );
        assert_eq!(h.iter().map(|b| b.count).sum::<u64>(), 21);
        assert!(histogram(&vec![0; 100]).is_empty());
    }
}
