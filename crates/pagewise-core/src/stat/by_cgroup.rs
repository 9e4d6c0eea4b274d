//! `stat --by-cgroup`: which memory cgroup each file's cached pages are charged to, from the
//! pages' frames ([`sys::page_cgroups`]: `/proc/self/pagemap` of a mapping, then
//! `/proc/kpagecgroup`). Root only. No peer tool has this: pcstat, vmtouch and fincore see a
//! file's residency, not who pays for it.

use crate::cgroup::cgroup_inodes;
use crate::error::{FileError, Op};
use crate::residency::cached_spans;
use crate::sys;
use crate::verb::{Observer, Outcome, Tally};
use crate::walk::{self, FileRef, WalkOptions, WalkSummary};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

/// Options of `stat --by-cgroup`.
#[derive(Debug, Clone, Default)]
pub struct ChargeOptions {
    /// Files and trees (directories recurse). Required: at least one.
    pub roots: Vec<PathBuf>,
    /// How to walk them (default: [`WalkOptions::default`]).
    pub walk: WalkOptions,
    /// Hand each file's [`FileCharge`] to the observer (default off).
    pub files: bool,
}

impl ChargeOptions {
    /// Options over `roots` with the defaults above.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        ChargeOptions {
            roots,
            ..ChargeOptions::default()
        }
    }
    /// Checks the options: at least one root, a valid walk.
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.walk.validate(&self.roots)
    }
}

/// Cached bytes charged to one cgroup.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Charge {
    /// The cgroup path (`/system.slice/x`), `(inode N)` when no mounted hierarchy has a
    /// directory with that inode (removed since), `(none)` for pages charged to no cgroup.
    pub cgroup: String,
    /// The memory cgroup's inode, as `/proc/kpagecgroup` gives it.
    pub inode: u64,
    /// Cached bytes charged to it.
    pub bytes: u64,
    /// Files with at least one page charged to it.
    pub files: u64,
}

/// One file's pages per cgroup.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileCharge {
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub size: u64,
    /// Its cached bytes whose cgroup was found.
    pub cached_bytes: u64,
    /// Cached bytes whose frame could not be found (evicted while looked at).
    pub unresolved_bytes: u64,
    /// Per cgroup, most bytes first (`files` is 1).
    pub cgroups: Vec<Charge>,
}

/// Sums over all files of a `stat --by-cgroup`.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChargeTotals {
    /// Files looked at.
    pub files: u64,
    /// Their sizes.
    pub size: u64,
    /// Cached bytes whose cgroup was found.
    pub cached_bytes: u64,
    /// Cached bytes whose frame could not be found.
    pub unresolved_bytes: u64,
}

/// What `stat --by-cgroup` found.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChargeReport {
    /// Sums over all files.
    pub total: ChargeTotals,
    /// Per cgroup, most bytes first.
    pub cgroups: Vec<Charge>,
    /// What the walk met.
    pub walk: WalkSummary,
    /// Errors, notices, elapsed time.
    #[serde(flatten)]
    pub outcome: Outcome,
}

fn name_of(names: &HashMap<u64, String>, ino: u64) -> String {
    match (ino, names.get(&ino)) {
        (0, _) => "(none)".into(),
        (_, Some(n)) => n.clone(),
        (i, None) => format!("(inode {i})"),
    }
}

fn sorted(m: BTreeMap<u64, (u64, u64)>, names: &HashMap<u64, String>) -> Vec<Charge> {
    let mut v: Vec<Charge> = m
        .into_iter()
        .map(|(inode, (bytes, files))| Charge {
            cgroup: name_of(names, inode),
            inode,
            bytes,
            files,
        })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.cgroup.cmp(&b.cgroup)));
    v
}

/// The cached bytes of one file per memory cgroup inode, and the cached bytes whose frame
/// could not be found.
fn file_charges(
    f: &FileRef<'_>,
    kfiles: &sys::KpageFiles,
    page: u64,
) -> Result<(BTreeMap<u64, u64>, u64), FileError> {
    // Bytes per cgroup: a page counts for its bytes inside the file, so the partial last page
    // of a 5,000-byte file counts 904 bytes, not 4,096 (per-cgroup figures used to add up to
    // more than the capped total).
    let size = f.stat.size;
    let mut per: BTreeMap<u64, u64> = BTreeMap::new();
    let mut unresolved = 0u64;
    let mut look = |o: u64, l: u64| -> Result<(), FileError> {
        sys::page_cgroups_in(f.fd(), o, l, kfiles, &mut |at, ino| {
            let bytes = page.min(size.saturating_sub(at));
            match ino {
                Some(i) => *per.entry(i).or_default() += bytes,
                None => unresolved += bytes,
            }
        })
        .map_err(|e| {
            let op = if e.raw_os_error() == Some(libc::EPERM) {
                Op::Read
            } else {
                Op::MmapMincore
            };
            FileError::io(f.path, op, &e)
        })
    };
    // Only where cachestat finds cached pages (holes included): a 16 TiB sparse file with
    // 1 MiB cached is ~50 calls, not 262,144 mapping windows.
    let span = size.div_ceil(page) * page;
    if !cached_spans(f.path, f.fd(), 0, span, &mut look)? {
        look(0, span)?;
    }
    Ok((per, unresolved))
}

/// Finds the cgroup every cached page under `options.roots` is charged to.
///
/// Needs root (`/proc/kpagecgroup` is mode 0400, and pagemap shows frame numbers only to
/// CAP_SYS_ADMIN): otherwise [`crate::Error::Invalid`] says so before any work.
pub fn charged(
    options: &ChargeOptions,
    observer: &dyn Observer,
) -> Result<ChargeReport, crate::Error> {
    options.validate()?;
    if sys::euid() != 0 {
        return Err(crate::Error::Invalid {
            what: "by-cgroup",
            message: "which cgroup pages are charged to is known only to root \
                      (/proc/kpagecgroup, and frame numbers in /proc/self/pagemap)"
                .into(),
        });
    }
    let kfiles = sys::KpageFiles::open().map_err(|(p, e)| crate::Error::Io {
        path: p.into(),
        op: Op::Open,
        source: e,
    })?;
    let names = cgroup_inodes();
    let page = sys::page_size();
    let tally = Tally::new();
    // inode -> (bytes, files)
    type Sums = (BTreeMap<u64, (u64, u64)>, u64, u64, u64, u64);
    let total: Mutex<Sums> = Mutex::new(Default::default());
    let summary = walk::walk(
        &options.roots,
        &options.walk,
        &tally,
        observer,
        Sums::default,
        |local: &mut Sums, f| {
            let (per, unresolved) = match file_charges(&f, &kfiles, page) {
                Ok(found) => found,
                Err(e) => {
                    tally.error(e);
                    return;
                }
            };
            let cached: u64 = per.values().sum();
            local.1 += 1;
            local.2 += f.stat.size;
            local.3 += cached;
            local.4 += unresolved;
            for (&ino, &b) in &per {
                let e = local.0.entry(ino).or_default();
                e.0 += b;
                e.1 += 1;
            }
            observer.progress(1, f.stat.size);
            if options.files {
                let m = per.into_iter().map(|(i, b)| (i, (b, 1))).collect();
                observer.file(crate::FileResult::Charge(FileCharge {
                    path: f.path.to_path_buf(),
                    size: f.stat.size,
                    cached_bytes: cached,
                    unresolved_bytes: unresolved,
                    cgroups: sorted(m, &names),
                }));
            }
        },
        |local| {
            let mut t = total.lock().unwrap();
            for (ino, (b, n)) in local.0 {
                let e = t.0.entry(ino).or_default();
                e.0 += b;
                e.1 += n;
            }
            t.1 += local.1;
            t.2 += local.2;
            t.3 += local.3;
            t.4 += local.4;
        },
    )?;
    let (groups, files, size, cached_bytes, unresolved_bytes) = total.into_inner().unwrap();
    Ok(ChargeReport {
        total: ChargeTotals {
            files,
            size,
            cached_bytes,
            unresolved_bytes,
        },
        cgroups: sorted(groups, &names),
        walk: summary,
        outcome: tally.finish(Vec::new()),
    })
}
