//! `stat`: how much of each file and tree is in the page cache. Each file is measured by the
//! [`Meter`] every verb shares; per-file lines go to the observer as they are measured, so
//! memory stays flat on any tree, and only totals are kept.
//!
//! `stat --by-cgroup` ([`charged`]: which memory cgroup the cached pages are charged to) is in
//! `by_cgroup.rs`.

mod by_cgroup;
pub use by_cgroup::{charged, Charge, ChargeOptions, ChargeReport, ChargeTotals, FileCharge};

use crate::error::FileError;
use crate::residency::{ByteRange, Meter, Method, Residency};
use crate::sys;
use crate::verb::{FileResult, Observer, Outcome, Tally};
use crate::walk::{self, FileRef, WalkOptions, WalkSummary};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Mutex;
/// One file's line of a stat report.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileStat {
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    /// The file, as found (a root's path joined with the names below it).
    pub path: PathBuf,
    /// The file's size; `bytes` (below) is the part measured: all of it, or its part in the range.
    pub size: u64,
    /// Bytes allocated on disk (sparse files have fewer).
    pub allocated_bytes: u64,
    #[serde(flatten)]
    /// What the kernel holds of it.
    pub residency: Residency,
    /// Per-cell cached % for `--map` (null: unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(inner(range(max = 100))))]
    pub map: Option<Vec<Option<u8>>>,
    #[serde(skip)]
    /// Index of the root it was found under.
    pub root: usize,
}

impl FileStat {
    /// Cached share of the measured range, 0.0..=100.0 (None when unknown).
    pub fn percent(&self) -> Option<f64> {
        let c = self.residency.cached?;
        Some(if self.residency.bytes == 0 {
            0.0
        } else {
            c as f64 * 100.0 / self.residency.bytes as f64
        })
    }
    /// Cached bytes of the measured range (None when unknown).
    pub fn cached_bytes(&self) -> Option<u64> {
        self.residency.cached
    }
}

/// Sums over many files, in bytes (each file's counts capped at its measured bytes).
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Totals {
    /// Files measured.
    pub files: u64,
    /// Sum of the files' sizes.
    pub size: u64,
    /// Bytes measured: the files' sizes, or their parts in the range.
    pub bytes: u64,
    /// Of the known files only; see `unknown_files`.
    pub cached_bytes: u64,
    /// These four over the files whose method knows them (cachestat); null when none does
    /// (mincore knows only what is cached). `detail_unknown_files` says how many do not.
    pub dirty_bytes: Option<u64>,
    /// Bytes under writeback (see `dirty_bytes`).
    pub writeback_bytes: Option<u64>,
    /// Bytes evicted (see `dirty_bytes`).
    pub evicted_bytes: Option<u64>,
    /// Bytes recently evicted (see `dirty_bytes`).
    pub recently_evicted_bytes: Option<u64>,
    /// Files whose dirty / writeback / evicted figures are unknown.
    pub detail_unknown_files: u64,
    /// Files whose residency could not be known (see `unknown_reason`), and their bytes: the
    /// cached figures above leave them out.
    pub unknown_files: u64,
    /// Their bytes.
    pub unknown_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Why they are unknown.
    pub unknown_reason: Option<&'static str>,
}

/// Adds a figure that may be unknown to a sum of the known ones (null until one is known).
fn add_known(sum: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *sum = Some(sum.unwrap_or(0) + v);
    }
}

impl Totals {
    /// Adds one file of `size` bytes measured as `r`.
    pub fn add(&mut self, size: u64, r: &Residency) {
        self.files += 1;
        self.size += size;
        self.bytes += r.bytes;
        if r.is_unknown() {
            self.unknown_files += 1;
            self.unknown_bytes += r.bytes;
            self.unknown_reason = self.unknown_reason.or(r.unknown_reason);
        }
        self.cached_bytes += r.cached.unwrap_or(0);
        add_known(&mut self.dirty_bytes, r.dirty);
        add_known(&mut self.writeback_bytes, r.writeback);
        add_known(&mut self.evicted_bytes, r.evicted);
        add_known(&mut self.recently_evicted_bytes, r.recently_evicted);
        self.detail_unknown_files += r.dirty.is_none() as u64;
    }
    /// Adds another sum.
    pub fn merge(&mut self, o: &Totals) {
        self.files += o.files;
        self.size += o.size;
        self.bytes += o.bytes;
        self.cached_bytes += o.cached_bytes;
        add_known(&mut self.dirty_bytes, o.dirty_bytes);
        add_known(&mut self.writeback_bytes, o.writeback_bytes);
        add_known(&mut self.evicted_bytes, o.evicted_bytes);
        add_known(&mut self.recently_evicted_bytes, o.recently_evicted_bytes);
        self.detail_unknown_files += o.detail_unknown_files;
        self.unknown_files += o.unknown_files;
        self.unknown_bytes += o.unknown_bytes;
        self.unknown_reason = self.unknown_reason.or(o.unknown_reason);
    }
    /// Cached share of the bytes whose residency is known (None when none is).
    pub fn percent(&self) -> Option<f64> {
        let known = self.bytes - self.unknown_bytes;
        if self.unknown_files == self.files && self.files > 0 {
            return None;
        }
        Some(if known == 0 {
            0.0
        } else {
            self.cached_bytes as f64 * 100.0 / known as f64
        })
    }
}

/// Options of `stat`.
#[derive(Debug, Clone, Default)]
pub struct StatOptions {
    /// Files and trees to measure (directories recurse). Required: at least one.
    pub roots: Vec<PathBuf>,
    /// How to walk the trees (default: [`WalkOptions::default`]).
    pub walk: WalkOptions,
    /// Part of every file to measure (default: all of it).
    pub range: ByteRange,
    /// How to measure (default: [`Method::Auto`], cachestat with the mincore fallback).
    pub method: Method,
    /// Cells of the per-file residency map, 0 for none (default 0).
    pub map_cells: usize,
    /// Hand each file's [`FileStat`] to the observer (default off: totals only, the fastest
    /// walk).
    pub files: bool,
}

impl StatOptions {
    /// Options measuring `roots` whole, with the defaults above.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        StatOptions {
            roots,
            ..StatOptions::default()
        }
    }
    /// Checks the options: at least one root, a valid walk.
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.walk.validate(&self.roots)
    }
}

/// One root argument's totals.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RootTotals {
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    /// The root as given.
    pub path: PathBuf,
    #[serde(flatten)]
    /// Its sums.
    pub totals: Totals,
}

/// What `stat` measured. Per-file lines go to the observer as they are measured, so memory
/// stays flat on any tree; only totals are kept here.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatReport {
    /// The kernel's page size, in bytes.
    pub page_size: u64,
    /// One line per root that could be walked (a root that failed has its error instead).
    pub roots: Vec<RootTotals>,
    /// Sum over all roots.
    pub total: Totals,
    /// What the walk met besides the files measured.
    pub walk: WalkSummary,
    /// Errors, notices, elapsed time.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Builds a [`FileStat`] for one open file: the one measurement routine every verb reports with.
pub fn file_stat(
    meter: &Meter,
    f: &FileRef<'_>,
    range: ByteRange,
    map_cells: usize,
) -> Result<FileStat, FileError> {
    let (off, len) = range.clamp(f.stat.size);
    let residency = meter.measure(f, range)?;
    let map = if map_cells > 0 {
        Some(meter.map(f, off, len, map_cells)?)
    } else {
        None
    };
    Ok(FileStat {
        path: f.path.to_path_buf(),
        size: f.stat.size,
        allocated_bytes: f.stat.allocated,
        residency,
        map,
        root: f.root,
    })
}

/// Measures every file under `options.roots`; with `options.files`, each file's line goes to
/// `observer.file` as [`FileResult::Stat`] (from many threads).
///
/// ```
/// use pagewise_core::stat::{stat, StatOptions};
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("f"), vec![1u8; 10_000]).unwrap();
/// let report = stat(&StatOptions::new(vec![dir.path().into()]), &()).unwrap();
/// assert_eq!(report.total.files, 1);
/// assert_eq!(report.total.bytes, 10_000);
/// assert!(report.outcome.is_clean());
/// ```
pub fn stat(options: &StatOptions, observer: &dyn Observer) -> Result<StatReport, crate::Error> {
    options.validate()?;
    let opts = options;
    let roots = &options.roots;
    let meter = Meter::new(opts.method);
    let tally = Tally::new();
    let totals: Mutex<Vec<Totals>> = Mutex::new(vec![Totals::default(); roots.len()]);
    let summary = walk::walk(
        roots,
        &opts.walk,
        &tally,
        observer,
        || vec![Totals::default(); roots.len()],
        |local: &mut Vec<Totals>, f| {
            if opts.files {
                match file_stat(&meter, &f, opts.range, opts.map_cells) {
                    Ok(fs) => {
                        local[fs.root].add(fs.size, &fs.residency);
                        observer.progress(1, fs.residency.bytes);
                        observer.file(FileResult::Stat(fs));
                    }
                    Err(e) => tally.error(e),
                }
                return;
            }
            // Totals only: no per-file record, no path copy.
            match meter.measure(&f, opts.range) {
                Ok(r) => {
                    local[f.root].add(f.stat.size, &r);
                    observer.progress(1, r.bytes);
                }
                Err(e) => tally.error(e),
            }
        },
        |local| {
            let mut t = totals.lock().unwrap();
            for (a, b) in t.iter_mut().zip(local.iter()) {
                a.merge(b);
            }
        },
    )?;
    let per_root = totals.into_inner().unwrap();
    let mut total = Totals::default();
    for t in &per_root {
        total.merge(t);
    }
    Ok(StatReport {
        page_size: sys::page_size(),
        // A root that could not be walked has its error, not a row of zeros.
        roots: roots
            .iter()
            .zip(per_root)
            .enumerate()
            .filter(|(i, _)| !summary.failed_roots.contains(i))
            .map(|(_, (p, totals))| RootTotals {
                path: p.clone(),
                totals,
            })
            .collect(),
        total,
        walk: summary,
        outcome: tally.finish(meter.take_notices()),
    })
}
