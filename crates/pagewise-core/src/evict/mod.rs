//! `evict`: drop files, ranges or trees from the page cache, dirty pages included, and measure
//! what really went.
//!
//! Dirty pages cannot be dropped, and fadvise(DONTNEED) only *starts* their writeback. We write
//! them back with sync_file_range rather than fdatasync: eviction needs clean pages, not
//! durability, and fdatasync forces a journal commit per file (ext4/xfs), which costs far more
//! than the data on a tree of small files. Writeback is batched per worker: each dirty file gets
//! SYNC_FILE_RANGE_WRITE (start, no wait) when it is met, and only when a batch is full do we wait
//! (WAIT_BEFORE|WRITE|WAIT_AFTER) and advise — so the device sees many writes at once and we wait
//! once per batch, not once per file.
//!
//! The other modes of `evict`, each in its own file: `--trace` ([`evict_trace`], trace.rs) and
//! `--cgroup` ([`evict_cgroup`], cgroup.rs).

mod cgroup;
mod trace;
pub use cgroup::{evict_cgroup, CgroupEvictOptions, CgroupEvictReport, ReclaimMethod};
pub(crate) use trace::{drop_ranges, drop_traced};
pub use trace::{evict_trace, TraceEvictOptions};

use crate::error::{FileError, Op};
use crate::residency::{ByteRange, Meter, Method, Residency};
use crate::sys::{self, Advice};
use crate::verb::{FileResult, Observer, Outcome, Tally};
use crate::walk::{self, Batched, FileRef, Merged, WalkOptions, WalkSummary};
use serde::Serialize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

/// Options of `evict`.
#[derive(Debug, Clone)]
pub struct EvictOptions {
    /// Files and trees to evict (directories recurse). Required: at least one.
    pub roots: Vec<PathBuf>,
    /// How to walk the trees (default: [`WalkOptions::default`] with [`default_threads`]).
    pub walk: WalkOptions,
    /// Part of every file to drop (default: all of it). The kernel drops whole pages.
    pub range: ByteRange,
    /// How to measure before and after (default: [`Method::Auto`]).
    pub method: Method,
    /// Write dirty pages back first so they can be dropped (default on).
    pub sync: bool,
    /// Only files owned by the caller (default off).
    pub owned: bool,
    /// Measure and report what would be dropped, change nothing (default off).
    pub dry_run: bool,
    /// Name the processes that keep pages in, by scanning /proc/*/maps (default off).
    pub why: bool,
    /// Hand each file's [`EvictFile`] to the observer (default off).
    pub files: bool,
}

/// `evict`'s walker threads when none are asked for: twice the CPUs (a worker spends most of
/// its time in the kernel, writing back and measuring). What the CLI's `-j`, Python's
/// `threads` and C's `threads = 0` default to.
pub fn default_threads() -> usize {
    crate::walk::default_threads() * 2
}

impl Default for EvictOptions {
    fn default() -> Self {
        EvictOptions {
            roots: Vec::new(),
            walk: WalkOptions {
                threads: default_threads(),
                ..WalkOptions::default()
            },
            range: ByteRange::default(),
            method: Method::Auto,
            sync: true,
            owned: false,
            dry_run: false,
            why: false,
            files: false,
        }
    }
}

impl EvictOptions {
    /// Options evicting `roots` whole, with the defaults above.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        EvictOptions {
            roots,
            ..EvictOptions::default()
        }
    }
    /// Checks the options: at least one root, a valid walk.
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.walk.validate(&self.roots)
    }
}

/// Why pages stayed in the cache after eviction.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum StayReason {
    /// Still dirty (`--no-sync`, or written again meanwhile).
    Dirty,
    /// Still under writeback.
    Writeback,
    /// Mapped by a process (pages in use are never dropped by DONTNEED).
    Mapped,
    /// Mapped and mlocked.
    Locked,
    /// Not dirty, not under writeback, no mapping found (`--why` not asked, or a short-lived user).
    InUse,
    /// Only the edges of a `--range` stayed: the kernel caches in large folios (up to 2 MiB) and
    /// drops a folio only when the range covers all of it.
    PartialFolio,
    /// tmpfs / shmem pages: they have no backing file to be dropped to (only swap), so
    /// DONTNEED leaves them; deleting the file frees them.
    NoBackingStore,
    /// A block device with a filesystem mounted on it: the filesystem keeps its metadata
    /// blocks (superblock, group descriptors, bitmaps, journal) referenced in the device's
    /// cache, so DONTNEED cannot drop them; unmounting releases them.
    Mounted,
}

/// One file's eviction, as the kernel showed it before and after.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EvictFile {
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    /// The file, as found.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Residency before the eviction.
    pub before: Residency,
    /// Residency after it (as before with `dry_run`).
    pub after: Residency,
    /// Null when the residency is unknown (see `before.unknown_reason`).
    pub dropped_bytes: Option<u64>,
    /// Bytes still cached afterwards (null when unknown).
    pub stayed_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Why pages stayed (when some did).
    pub reason: Option<StayReason>,
    /// Processes mapping the file (with `--why`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
    /// Device and inode (to find the processes mapping it).
    #[serde(skip)]
    pub dev_ino: sys::FileId,
}

/// Totals of an eviction, in bytes (each file's counts capped at its measured bytes). The
/// cached figures cover the files whose residency is known; `unknown_files` were advised out
/// all the same, but what they held cannot be measured.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EvictTotals {
    /// Files evicted (or measured, with `dry_run`).
    pub files: u64,
    /// Bytes measured: the files' sizes, or their parts in the range.
    pub bytes: u64,
    /// Cached bytes before, over the known files.
    pub cached_bytes_before: u64,
    /// Cached bytes after, over the known files.
    pub cached_bytes_after: u64,
    /// Bytes that left the cache.
    pub dropped_bytes: u64,
    /// Bytes still cached afterwards.
    pub stayed_bytes: u64,
    /// Dirty bytes written back so they could be dropped; None (`null`) when some file's
    /// dirty count is unknown (measured by mincore: before Linux 6.5 only cachestat(2)
    /// counts dirty pages), though its pages were written back all the same.
    pub dirty_bytes_written: Option<u64>,
    /// Files where some pages stayed.
    pub files_with_residue: u64,
    /// Files left alone because another user owns them (`owned`).
    pub not_owned_skipped: u64,
    /// Files whose residency could not be measured.
    pub unknown_files: u64,
    /// Their bytes.
    pub unknown_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Why they could not be measured.
    pub unknown_reason: Option<&'static str>,
}

impl Default for EvictTotals {
    fn default() -> Self {
        EvictTotals {
            files: 0,
            bytes: 0,
            cached_bytes_before: 0,
            cached_bytes_after: 0,
            dropped_bytes: 0,
            stayed_bytes: 0,
            dirty_bytes_written: Some(0),
            files_with_residue: 0,
            not_owned_skipped: 0,
            unknown_files: 0,
            unknown_bytes: 0,
            unknown_reason: None,
        }
    }
}

/// What `evict` did.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EvictReport {
    /// Nothing was dropped: only measured.
    pub dry_run: bool,
    /// The kernel's page size, in bytes.
    pub page_size: u64,
    /// Sums over all files.
    pub total: EvictTotals,
    /// Files where pages stayed, with the reason (at most 10,000, largest residue first).
    pub residue: Vec<EvictFile>,
    /// What the walk met besides the files evicted.
    pub walk: WalkSummary,
    /// Errors, notices, elapsed time.
    #[serde(flatten)]
    pub outcome: Outcome,
}

struct Pending {
    path: PathBuf,
    fd: OwnedFd,
    size: u64,
    before: Residency,
    dev_ino: sys::FileId,
}

#[derive(Default)]
struct Local {
    pending: Vec<Pending>,
    totals: EvictTotals,
    residue: Vec<EvictFile>,
}

/// Dirty files a worker starts writing back before it waits for them all.
const WRITEBACK_BATCH: usize = 512;
const MAX_RESIDUE: usize = 10_000;

struct Ctx<'a> {
    opts: &'a EvictOptions,
    /// Dirty files a worker holds open before it waits for them (at most
    /// [`WRITEBACK_BATCH`]; less under a small RLIMIT_NOFILE).
    writeback_batch: usize,
    meter: Meter,
    tally: Tally,
    observer: &'a dyn Observer,
}

impl Merged for Ctx<'_> {
    fn merge(&self, m: &mut Local, local: Local) {
        merge_totals(&mut m.totals, &local.totals);
        let room = MAX_RESIDUE.saturating_sub(m.residue.len());
        m.residue.extend(local.residue.into_iter().take(room));
    }
}

impl Batched for Ctx<'_> {
    type Local = Local;

    fn visit(&self, local: &mut Local, f: FileRef<'_>) {
        if self.opts.owned && f.stat.uid != sys::euid() {
            local.totals.not_owned_skipped += 1;
            return;
        }
        let (off, len) = self.opts.range.clamp(f.stat.size);
        let before = match self.meter.measure(&f, self.opts.range) {
            Ok(r) => r,
            Err(e) => return self.tally.error(e),
        };
        let dev_ino = sys::FileId::from_dev(f.stat.dev, f.stat.ino);
        if self.opts.dry_run || before.cached == Some(0) {
            let after = before.clone();
            let would = if self.opts.dry_run {
                before.cached_or_zero()
            } else {
                0
            };
            self.finish(
                local,
                f.path.to_path_buf(),
                f.stat.size,
                before,
                after,
                would,
                dev_ino,
                None,
            );
            return;
        }
        let dirty = before.dirty.unwrap_or(1) + before.writeback.unwrap_or(0);
        if self.opts.sync && dirty > 0 {
            if let Err(e) = sys::sync_file_range(f.fd(), off, len, sys::SFR_WRITE) {
                self.tally
                    .error(FileError::io(f.path, Op::SyncFileRangeWrite, &e));
            }
            local.totals.dirty_bytes_written = local
                .totals
                .dirty_bytes_written
                .zip(before.dirty)
                .map(|(a, b)| a + b);
            local.pending.push(Pending {
                path: f.path.to_path_buf(),
                size: f.stat.size,
                fd: f.fd,
                before,
                dev_ino,
            });
            if local.pending.len() >= self.writeback_batch {
                self.drain(local);
            }
            return;
        }
        let path = f.path.to_path_buf();
        self.advise(
            local,
            path,
            f.fd,
            f.stat.size,
            before,
            dev_ino,
            off,
            len,
            false,
        );
    }

    /// Waits for the batch's writeback, then drops each file.
    fn drain(&self, local: &mut Local) {
        let pending = std::mem::take(&mut local.pending);
        for p in pending {
            let (off, len) = self.opts.range.clamp(p.size);
            self.advise(
                local, p.path, p.fd, p.size, p.before, p.dev_ino, off, len, true,
            );
        }
    }
}

impl Ctx<'_> {
    #[allow(clippy::too_many_arguments)]
    fn advise(
        &self,
        local: &mut Local,
        path: PathBuf,
        fd: OwnedFd,
        size: u64,
        before: Residency,
        dev_ino: sys::FileId,
        off: u64,
        len: u64,
        wait: bool,
    ) {
        if wait {
            let flags = sys::SFR_WAIT_BEFORE | sys::SFR_WRITE | sys::SFR_WAIT_AFTER;
            if let Err(e) = sys::sync_file_range(fd.as_fd(), off, len, flags) {
                self.tally
                    .error(FileError::io(&path, Op::SyncFileRangeWait, &e));
            }
        }
        if let Err(e) = sys::fadvise(fd.as_fd(), off, len, Advice::DontNeed) {
            return self
                .tally
                .error(FileError::io(&path, Op::FadviseDontneed, &e));
        }
        // The mincore fallback's ownership check was made on the real file before.
        let (start, end) = self.opts.range.span(size);
        let measure = || {
            self.meter
                .measure_fd(&path, fd.as_fd(), start, end, || !before.is_unknown())
        };
        let mut after = measure();
        // Clean pages that stayed may only have been out of reach for a moment: reclaim
        // (DAMON pageout runs on these machines) isolates folios from the LRU while it works
        // on them, and fadvise skips isolated ones — CI once saw a whole 4 MiB range stay
        // "in use" that nothing mapped. One more try before they are reported as staying.
        if let Ok(a) = &after {
            if a.cached_or_zero() > 0 && a.dirty.unwrap_or(0) == 0 && a.writeback.unwrap_or(0) == 0
            {
                let _ = sys::fadvise(fd.as_fd(), off, len, Advice::DontNeed);
                after = measure();
            }
        }
        match after {
            Ok(after) => {
                let dropped = before
                    .cached_or_zero()
                    .saturating_sub(after.cached_or_zero());
                let edges_only = after.cached_or_zero() > 0
                    && after.dirty == Some(0)
                    && after.writeback == Some(0)
                    && (off, len) != (0, size.div_ceil(sys::page_size()) * sys::page_size())
                    && self.interior_is_clear(&fd, off, len);
                // A block device's node is on devtmpfs, which fstatfs calls tmpfs: its pages
                // are the device's, not shmem's (a mounted loop device was called
                // `no_backing_store`). What a device keeps, its mounted filesystem holds.
                let device = if after.cached_or_zero() > 0 {
                    sys::fstat(fd.as_fd())
                        .ok()
                        .filter(|st| st.is_block_device())
                } else {
                    None
                };
                let mounted = device.as_ref().is_some_and(|st| is_mounted(st.rdev));
                let shmem =
                    device.is_none() && after.cached_or_zero() > 0 && sys::is_shmem(fd.as_fd());
                // Known before the sink sees the file, so every view gives the same reason.
                let clean_reason = if mounted {
                    Some(StayReason::Mounted)
                } else if shmem {
                    Some(StayReason::NoBackingStore)
                } else if edges_only {
                    Some(StayReason::PartialFolio)
                } else {
                    None
                };
                self.finish(
                    local,
                    path,
                    size,
                    before,
                    after,
                    dropped,
                    dev_ino,
                    clean_reason,
                );
            }
            Err(e) => self.tally.error(e),
        }
    }

    /// True when nothing is cached in `[off, off+len)` once a largest-folio span is cut off
    /// each end: what stayed is folios straddling the range's edges.
    fn interior_is_clear(&self, fd: &OwnedFd, off: u64, len: u64) -> bool {
        let f = max_folio_bytes();
        let a = off.div_ceil(f) * f;
        let b = ((off + len) / f) * f;
        if b <= a {
            return true;
        }
        crate::residency::cached_pages(fd.as_fd(), a, b - a).is_some_and(|c| c == 0)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        local: &mut Local,
        path: PathBuf,
        size: u64,
        before: Residency,
        after: Residency,
        dropped: u64,
        dev_ino: sys::FileId,
        clean_reason: Option<StayReason>,
    ) {
        let stayed = if self.opts.dry_run {
            0
        } else {
            after.cached_or_zero()
        };
        let reason = if stayed == 0 {
            None
        } else if after.dirty.unwrap_or(0) > 0 {
            Some(StayReason::Dirty)
        } else if after.writeback.unwrap_or(0) > 0 {
            Some(StayReason::Writeback)
        } else {
            Some(clean_reason.unwrap_or(StayReason::InUse))
        };
        let unknown = before.is_unknown();
        let t = &mut local.totals;
        t.files += 1;
        t.bytes += before.bytes;
        if unknown {
            t.unknown_files += 1;
            t.unknown_bytes += before.bytes;
            t.unknown_reason = before.unknown_reason;
        } else {
            t.cached_bytes_before += before.cached_or_zero();
            t.cached_bytes_after += after.cached_or_zero();
            t.dropped_bytes += dropped;
            t.stayed_bytes += stayed;
        }
        t.files_with_residue += (stayed > 0) as u64;
        let (dropped_bytes, stayed_bytes) = if unknown {
            (None, None)
        } else {
            (Some(dropped), Some(stayed))
        };
        self.observer.progress(1, size);
        let ef = EvictFile {
            path,
            size,
            before,
            after,
            dropped_bytes,
            stayed_bytes,
            reason,
            pids: Vec::new(),
            dev_ino,
        };
        let keep = stayed > 0 && local.residue.len() < MAX_RESIDUE;
        if self.opts.files {
            if keep {
                local.residue.push(ef.clone());
            }
            self.observer.file(FileResult::Evict(ef));
        } else if keep {
            local.residue.push(ef);
        }
    }
}

/// Evicts every file under `options.roots` and measures what went; with `options.files`,
/// each file's result goes to `observer.file` as [`FileResult::Evict`].
///
/// ```
/// use pagewise_core::evict::{evict, EvictOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let f = dir.path().join("f");
/// std::fs::write(&f, vec![1u8; 1 << 20]).unwrap();
/// let report = evict(&EvictOptions::new(vec![f]), &()).unwrap();
/// assert_eq!(report.total.files, 1);
/// // What the kernel still holds, and why, is in the report (tmpfs keeps its pages).
/// assert!(report.total.stayed_bytes == 0 || !report.residue.is_empty());
/// ```
pub fn evict(options: &EvictOptions, observer: &dyn Observer) -> Result<EvictReport, crate::Error> {
    options.validate()?;
    let opts = options;
    let per_worker = sys::fd_budget_per_worker(opts.walk.threads);
    let ctx = Ctx {
        opts,
        writeback_batch: per_worker.clamp(1, WRITEBACK_BATCH),
        meter: Meter::new(opts.method),
        tally: Tally::new(),
        observer,
    };
    let (mut m, summary) = walk::walk_merged(&opts.roots, &opts.walk, &ctx.tally, observer, &ctx)?;
    if opts.why && !m.residue.is_empty() {
        explain(&mut m.residue);
    }
    m.residue.sort_by(|a, b| {
        b.stayed_bytes
            .cmp(&a.stayed_bytes)
            .then(a.path.cmp(&b.path))
    });
    let mut notices = ctx.meter.take_notices();
    if !opts.sync && m.totals.stayed_bytes > 0 {
        notices.push("`sync` off: dirty pages were not written back and stay cached".into());
    }
    Ok(EvictReport {
        dry_run: opts.dry_run,
        page_size: sys::page_size(),
        total: m.totals,
        residue: m.residue,
        walk: summary,
        outcome: ctx.tally.finish(notices),
    })
}

fn merge_totals(a: &mut EvictTotals, b: &EvictTotals) {
    a.files += b.files;
    a.bytes += b.bytes;
    a.cached_bytes_before += b.cached_bytes_before;
    a.cached_bytes_after += b.cached_bytes_after;
    a.dropped_bytes += b.dropped_bytes;
    a.stayed_bytes += b.stayed_bytes;
    a.dirty_bytes_written = a
        .dirty_bytes_written
        .zip(b.dirty_bytes_written)
        .map(|(a, b)| a + b);
    a.files_with_residue += b.files_with_residue;
    a.not_owned_skipped += b.not_owned_skipped;
    a.unknown_files += b.unknown_files;
    a.unknown_bytes += b.unknown_bytes;
    a.unknown_reason = a.unknown_reason.or(b.unknown_reason);
}

/// Largest page-cache folio: the PMD size (2 MiB on x86-64), from sysfs when it is there.
fn max_folio_bytes() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2 << 20)
}

mod why;
use why::explain;

/// True when a filesystem is mounted on the block device `rdev`: its `major:minor` is the
/// third field of a line of /proc/self/mountinfo (proc_pid_mountinfo(5)).
fn is_mounted(rdev: u64) -> bool {
    let want = (libc::major(rdev), libc::minor(rdev));
    crate::procfs::mounts().iter().any(|m| m.dev == Some(want))
}

/// True when a line of `mountinfo` names the device `major:minor`.
#[cfg(test)]
fn mounted_in(mountinfo: &str, dev: &str) -> bool {
    let want = crate::procfs::parse_dev(dev);
    crate::procfs::parse_mountinfo(mountinfo.as_bytes())
        .iter()
        .any(|m| want.is_some() && m.dev == want)
}
pub use why::{find_mappers, ProcMapping};

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_lines_name_their_device() {
        let m = "22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                 98 22 7:0 / /mnt/x rw,relatime shared:50 - ext4 /dev/loop0 rw\n";
        assert!(super::mounted_in(m, "7:0"));
        assert!(super::mounted_in(m, "253:1"));
        assert!(!super::mounted_in(m, "7:1"));
        assert!(!super::mounted_in(m, "98"));
    }
}
