//! `assist --simulate`: replays the page faults of a recorded trace (`record --faults`) through
//! the predictor against a simulated page cache and counts what prefetching would have done.
//!
//! The model: the cache starts empty; a fault on a page that is not cached is a miss and brings
//! in that page alone (the kernel's behaviour once it has given up on mmap readaround); every
//! window the predictor returns is loaded too, becoming ready `latency` after the fault that
//! triggered it. A fault on a prefetched page that is not ready yet is a *late* hit: the program
//! still waits, but for less than a whole miss. Pages prefetched and never faulted are wasted.
//! The access stream is the fault stream: pages the kernel mapped by fault-around without a
//! fault are not seen, in the recording or here.

use super::predictor::{Access, Config, Detector, Predictor, Window};
use crate::trace::{Trace, TraceError};
use serde::Serialize;
use std::collections::HashMap;

/// Options of [`compare`] and [`simulate`] (`pagewise assist --simulate TRACE`).
#[derive(Debug, Clone)]
pub struct SimulateOptions {
    /// A trace recorded with its page faults (`record --faults`). Default: an empty trace
    /// without faults, which [`SimulateOptions::validate`] refuses.
    pub trace: Trace,
    /// The predictor's settings ([`compare`] varies the detectors from these). Default:
    /// [`Config::for_page_size`] of this system's page size.
    pub config: Config,
    /// Time from a fault to its prefetch being ready, ns. Default: 0.
    pub latency_ns: u64,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            trace: Trace::default(),
            config: Config::for_page_size(crate::sys::page_size()),
            latency_ns: 0,
        }
    }
}

impl SimulateOptions {
    /// Checks the options: the trace must be consistent and have its page faults.
    pub fn validate(&self) -> Result<(), SimError> {
        self.trace.check()?;
        if self.trace.faults.is_none() {
            return Err(SimError::NoFaults);
        }
        Ok(())
    }
}

/// Why a trace cannot be simulated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The trace was recorded without `--faults`.
    #[error("the trace has no page faults: record it with `pagewise record --faults`")]
    NoFaults,
    /// The trace is not consistent (see [`Trace::check`]).
    #[error(transparent)]
    Trace(#[from] TraceError),
}

impl From<SimError> for crate::Error {
    fn from(e: SimError) -> crate::Error {
        match e {
            SimError::Trace(t) => crate::Error::Trace(t),
            other => crate::Error::Invalid {
                what: "trace",
                message: other.to_string(),
            },
        }
    }
}

/// What the predictor would have done on a trace.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SimReport {
    /// Which predictor (its detectors).
    pub label: String,
    /// Page faults replayed.
    pub accesses: u64,
    /// Faults on pages already cached and ready.
    pub hits: u64,
    /// Faults on pages prefetched but still in flight.
    pub late_hits: u64,
    /// Faults on pages neither cached nor prefetched.
    pub misses: u64,
    /// (hits + late hits) / accesses.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub hit_rate: f64,
    /// Windows the predictor returned.
    pub windows: u64,
    /// Of `windows`, by the sequential detector.
    pub windows_sequential: u64,
    /// Of `windows`, by the stride detector.
    pub windows_stride: u64,
    /// Of `windows`, by the range detector.
    pub windows_range: u64,
    /// Bytes the windows would have loaded (within the files' sizes).
    pub prefetched_bytes: u64,
    /// Prefetched and never faulted.
    pub wasted_bytes: u64,
}

struct Page {
    ready_ns: u64,
    prefetched: bool,
    used: bool,
}

/// Runs the trace's faults through a predictor with `opts.config`; the report is named
/// `label`.
pub fn simulate(opts: &SimulateOptions, label: &str) -> Result<SimReport, SimError> {
    opts.validate()?;
    Ok(run(
        &opts.trace,
        opts.config.clone(),
        opts.latency_ns,
        label,
    ))
}

/// Runs the faults of a trace that has them through a predictor with `cfg`.
fn run(trace: &Trace, cfg: Config, latency_ns: u64, label: &str) -> SimReport {
    let faults = trace.faults.as_deref().unwrap_or_default();
    let page = trace.page_size as u64;
    let mut sim = Cache {
        pages: HashMap::new(),
        sizes: trace.files.iter().map(|f| f.size.div_ceil(page)).collect(),
        latency_ns,
        r: SimReport {
            label: label.to_string(),
            ..Default::default()
        },
    };
    let mut pred = Predictor::new(cfg);
    let mut ordered: Vec<&crate::trace::Fault> = faults.iter().collect();
    ordered.sort_by_key(|f| f.ts_ns);
    for f in ordered {
        let hit = sim.fault(f.file, f.index, f.ts_ns);
        for w in pred.access(Access {
            file: super::predictor::stream(f.file as u64, f.pid),
            page: f.index,
            hit,
            t_ns: f.ts_ns,
        }) {
            sim.prefetch(f.file, &w, f.ts_ns);
        }
    }
    let mut r = sim.r;
    let wasted = sim.pages.values().filter(|p| p.prefetched && !p.used);
    r.wasted_bytes = wasted.count() as u64 * page;
    r.hit_rate = if r.accesses == 0 {
        0.0
    } else {
        (r.hits + r.late_hits) as f64 / r.accesses as f64
    };
    r.prefetched_bytes *= page;
    r
}

/// The simulated page cache, and the counts so far (`prefetched_bytes` in pages until the
/// end).
struct Cache {
    pages: HashMap<(u32, u64), Page>,
    /// Pages of each file (0: unknown).
    sizes: Vec<u64>,
    latency_ns: u64,
    r: SimReport,
}

impl Cache {
    /// A fault on `page` of `file` at `t`: true when the page was cached (ready or not); a
    /// miss brings that page alone in.
    fn fault(&mut self, file: u32, page: u64, t: u64) -> bool {
        self.r.accesses += 1;
        let Some(pg) = self.pages.get_mut(&(file, page)) else {
            self.r.misses += 1;
            let pg = Page {
                ready_ns: t,
                prefetched: false,
                used: true,
            };
            self.pages.insert((file, page), pg);
            return false;
        };
        if pg.ready_ns <= t {
            self.r.hits += 1;
        } else {
            self.r.late_hits += 1;
        }
        pg.used = true;
        true
    }

    /// Loads window `w` of `file` (within its size), ready `latency_ns` after `t`.
    fn prefetch(&mut self, file: u32, w: &Window, t: u64) {
        self.r.windows += 1;
        match w.detector {
            Detector::Sequential => self.r.windows_sequential += 1,
            Detector::Stride => self.r.windows_stride += 1,
            Detector::Range => self.r.windows_range += 1,
        }
        let limit = match self.sizes[file as usize] {
            0 => u64::MAX,
            n => n,
        };
        let ready_ns = t + self.latency_ns;
        for pg in w.start..(w.start + w.pages).min(limit) {
            self.pages.entry((file, pg)).or_insert_with(|| {
                self.r.prefetched_bytes += 1;
                Page {
                    ready_ns,
                    prefetched: true,
                    used: false,
                }
            });
        }
    }
}

/// The comparison `assist --simulate` prints: no prefetching, sequential+stride alone, and with
/// the range detector (Lustre's centred window, and the forward one), each from
/// `opts.config`.
pub fn compare(opts: &SimulateOptions) -> Result<Vec<SimReport>, SimError> {
    opts.validate()?;
    let base = &opts.config;
    let none = Config {
        sequential: false,
        stride: false,
        range: false,
        ..base.clone()
    };
    let no_range = Config {
        range: false,
        ..base.clone()
    };
    let centred = Config {
        range: true,
        forward: false,
        ..base.clone()
    };
    let forward = Config {
        range: true,
        forward: true,
        ..base.clone()
    };
    let runs = [
        (none, "no prefetching"),
        (no_range, "sequential + stride"),
        (centred, "sequential + stride + range (centred, Lustre)"),
        (forward, "sequential + stride + range (forward)"),
    ];
    Ok(runs
        .into_iter()
        .map(|(cfg, label)| run(&opts.trace, cfg, opts.latency_ns, label))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Fault;

    fn trace(faults: Vec<Fault>) -> Trace {
        Trace {
            faults: Some(faults),
            ..crate::replay::test_trace(&[(1, 8 << 30)])
        }
    }

    fn options(trace: Trace, config: Config, latency_ns: u64) -> SimulateOptions {
        SimulateOptions {
            trace,
            config,
            latency_ns,
        }
    }

    /// fio-like: 128 KiB chunks at random offsets, read upwards one page per fault, 20 us apart.
    fn fio_like(chunks: u64) -> Trace {
        let mut v = Vec::new();
        let mut x: u64 = 99;
        let mut t = 0;
        for _ in 0..chunks {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let base = (x >> 33) % (2 << 20) / 32 * 32;
            for pg in base..base + 32 {
                t += 20_000;
                v.push(Fault {
                    ts_ns: t,
                    file: 0,
                    pid: 1,
                    index: pg,
                });
            }
        }
        trace(v)
    }

    #[test]
    fn range_detector_turns_random_chunk_faults_into_hits() {
        let t = fio_like(500);
        let cfg = Config::for_page_size(4096);
        let r = compare(&options(t, cfg, 0)).unwrap();
        // Without prefetching only a chunk drawn twice hits.
        assert!(r[0].hit_rate < 0.01, "{:?}", r[0]);
        assert!(r[1].hit_rate < 0.01, "sequential+stride alone: {:?}", r[1]);
        // Forward range: one miss per chunk after the first.
        assert!(r[3].hit_rate > 0.95, "{:?}", r[3]);
        // Waste only where two random chunks fell within --range of each other and made one
        // wider cluster.
        assert!(r[3].wasted_bytes * 50 < r[3].prefetched_bytes, "{:?}", r[3]);
        // Centred (Lustre): half of each first window lands before the chunk.
        assert!(
            r[2].hit_rate > 0.5 && r[2].hit_rate < r[3].hit_rate,
            "{:?}",
            r[2]
        );
        assert!(r[2].wasted_bytes > 0);
    }

    #[test]
    fn latency_makes_hits_late() {
        let t = fio_like(100);
        let cfg = Config::for_page_size(4096);
        let r = simulate(&options(t, cfg, 100_000), "x").unwrap();
        // Pages 1-4 of each chunk come within 100 us of the miss.
        assert!(r.late_hits > 0 && r.hits > r.late_hits, "{r:?}");
    }

    #[test]
    fn trace_without_faults_is_refused() {
        let mut t = fio_like(1);
        t.faults = None;
        let e = simulate(&options(t, Config::for_page_size(4096), 0), "x").unwrap_err();
        assert!(e.to_string().contains("--faults"), "{e}");
    }
}
