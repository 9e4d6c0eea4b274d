//! `evict --cgroup`: reclaim a cgroup's file cache, measured before and after from its
//! `memory.stat`.
//!
//! - cgroup v2: `memory.reclaim` (Linux 5.19) with `swappiness=0` (Linux 6.13) so that only
//!   file pages go; a kernel that refuses the argument (EINVAL) is asked without it, with a
//!   notice that anonymous pages may then be swapped too. A kernel without `memory.reclaim`
//!   is refused before anything is read or asked.
//! - cgroup v1: `memory.force_empty`, which reclaims all it can of the group: there is no
//!   partial reclaim in v1, so `bytes` is refused there.
//!
//! Reclaim drops clean pages only; dirty ones are written back first with `sync(2)` unless
//! `sync` is off (direct reclaim does not write file pages back itself).

use crate::cgroup::{
    cgroup_name, memory_mounts, mount_of, resolve, CgroupDir, FileCache, Hierarchy,
};
use crate::error::FileError;
use crate::verb::{Observer, Outcome, Tally};
use serde::Serialize;
use std::path::PathBuf;

/// Options of `evict --cgroup`.
#[derive(Debug, Clone)]
pub struct CgroupEvictOptions {
    /// The group: a cgroup directory, or a cgroup path under the memory hierarchy. Required.
    pub cgroup: PathBuf,
    /// Bytes to reclaim (v2 only; default: all of the group's file cache).
    pub bytes: Option<u64>,
    /// Write dirty pages back first with sync(2) (default true).
    pub sync: bool,
    /// Measure only; reclaim nothing (default false).
    pub dry_run: bool,
}

impl CgroupEvictOptions {
    /// Reclaim all of `cgroup`'s file cache, dirty pages written back first.
    pub fn new(cgroup: PathBuf) -> Self {
        CgroupEvictOptions {
            cgroup,
            bytes: None,
            sync: true,
            dry_run: false,
        }
    }
    /// Checks the options: `bytes`, when given, is not 0.
    pub fn validate(&self) -> Result<(), crate::Error> {
        if self.bytes == Some(0) {
            return Err(crate::Error::Invalid {
                what: "bytes",
                message: "must be more than 0".into(),
            });
        }
        Ok(())
    }
}

/// How the kernel was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ReclaimMethod {
    /// v2 `memory.reclaim` with `swappiness=0`: file pages only.
    #[serde(rename = "memory.reclaim swappiness=0")]
    ReclaimFileOnly,
    /// v2 `memory.reclaim` without `swappiness` (kernel before 6.13): anon pages too.
    #[serde(rename = "memory.reclaim")]
    Reclaim,
    /// v1 `memory.force_empty`: everything the group holds that can be reclaimed.
    #[serde(rename = "memory.force_empty")]
    ForceEmpty,
    /// `dry_run`: nothing was asked.
    #[serde(rename = "none")]
    None,
}

/// What `evict --cgroup` did, as the group's `memory.stat` shows it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CgroupEvictReport {
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    /// The group's directory.
    pub path: PathBuf,
    /// Its cgroup path.
    pub cgroup: String,
    /// v1 or v2.
    pub hierarchy: Hierarchy,
    /// How the kernel was asked.
    pub method: ReclaimMethod,
    /// Bytes asked for (null: all; v1 always all).
    pub requested_bytes: Option<u64>,
    /// The group's file cache before.
    pub before: FileCache,
    /// And after.
    pub after: FileCache,
    /// `before.file_bytes - after.file_bytes` (0 when the group grew meanwhile).
    pub dropped_bytes: u64,
    /// `dry_run` was set.
    pub dry_run: bool,
    /// Errors, notices, elapsed time.
    #[serde(flatten)]
    pub outcome: Outcome,
}

fn fatal(e: FileError) -> crate::Error {
    crate::Error::Io {
        path: e.path,
        op: e.op,
        source: std::io::Error::from_raw_os_error(e.errno.unwrap_or(libc::EIO)),
    }
}

/// Reclaims the file cache of `options.cgroup` and reports its `memory.stat` before and after.
///
/// A kernel that could not reclaim all that was asked (v2 EAGAIN, v1 EBUSY: pages in use,
/// anonymous memory without swap) is not an error: the report says what went, with a notice.
pub fn evict_cgroup(
    options: &CgroupEvictOptions,
    observer: &dyn Observer,
) -> Result<CgroupEvictReport, crate::Error> {
    options.validate()?;
    // Opened once, O_NOFOLLOW, and checked to be on a cgroup file system before anything in
    // it is read or written: everything below goes through its descriptor.
    let group = CgroupDir::open(&resolve(&options.cgroup)?)?;
    let dir = group.path().to_path_buf();
    let hierarchy = group.hierarchy();
    if hierarchy == Hierarchy::V1 && options.bytes.is_some() {
        return Err(crate::Error::Invalid {
            what: "bytes",
            message: format!(
                "{} is a cgroup v1 group: v1 has no partial reclaim (memory.force_empty \
                 reclaims all it can); leave out `bytes`",
                dir.display()
            ),
        });
    }
    if hierarchy == Hierarchy::V2 && !dir.join("memory.reclaim").exists() {
        // Lowering memory.high would reclaim too, but it throttles the group's processes
        // meanwhile, takes anonymous memory as well, and stays lowered if pagewise is killed.
        return Err(crate::Error::Invalid {
            what: "cgroup",
            message: format!(
                "{}: this kernel has no memory.reclaim (cgroup v2 reclaim came in Linux 5.19), \
                 so a v2 group's file cache cannot be reclaimed here; evict its files by path",
                dir.display()
            ),
        });
    }
    let tally = Tally::new();
    let before = group.file_cache().map_err(fatal)?;
    let mut method = ReclaimMethod::None;
    if !options.dry_run && !tally.stop_requested(observer) {
        if options.sync && before.dirty_bytes + before.writeback_bytes > 0 {
            rustix::fs::sync();
        }
        method = match hierarchy {
            Hierarchy::V2 => reclaim_v2(&group, options.bytes.unwrap_or(before.file_bytes), &tally),
            Hierarchy::V1 => force_empty_v1(&group, &tally)?,
        };
    }
    let after = group.file_cache().map_err(fatal)?;
    observer.progress(1, before.file_bytes.saturating_sub(after.file_bytes));
    Ok(CgroupEvictReport {
        cgroup: cgroup_name(&dir, &memory_mounts()),
        path: dir,
        hierarchy,
        method,
        requested_bytes: options.bytes,
        dropped_bytes: before.file_bytes.saturating_sub(after.file_bytes),
        before,
        after,
        dry_run: options.dry_run,
        outcome: tally.finish(Vec::new()),
    })
}

/// cgroup v2: asks `memory.reclaim` for `amount` bytes of file pages (`swappiness=0`), or
/// without the argument when the kernel refuses it (with a notice); nothing for 0 bytes.
fn reclaim_v2(dir: &CgroupDir, amount: u64, tally: &Tally) -> ReclaimMethod {
    let mut method = ReclaimMethod::ReclaimFileOnly;
    if amount == 0 {
        return method;
    }
    let mut r = dir.write_knob("memory.reclaim", &format!("{amount} swappiness=0"));
    if r.as_ref().err().and_then(|e| e.errno) == Some(libc::EINVAL) {
        method = ReclaimMethod::Reclaim;
        tally.notice(
            "this kernel refuses memory.reclaim swappiness=0 (before Linux 6.13): \
             reclaimed without it, so anonymous pages may have been swapped out too",
        );
        r = dir.write_knob("memory.reclaim", &amount.to_string());
    }
    match r {
        Err(e) if e.errno == Some(libc::EAGAIN) => tally.notice(
            "memory.reclaim: the kernel reclaimed less than asked (EAGAIN): pages in use or dirty stay",
        ),
        Err(e) => tally.error(e),
        Ok(()) => {}
    }
    method
}

/// cgroup v1: `memory.force_empty`; refused for the root of the hierarchy.
fn force_empty_v1(group: &CgroupDir, tally: &Tally) -> Result<ReclaimMethod, crate::Error> {
    let dir = group.path();
    match group.write_knob("memory.force_empty", "0") {
        Err(e) if e.errno == Some(libc::EBUSY) => tally.notice(
            "memory.force_empty: the group keeps pages it could not reclaim (EBUSY: \
             anonymous memory without swap, pages in use)",
        ),
        Err(e) if e.errno == Some(libc::EINVAL) && dir == mount_of(dir) => {
            return Err(crate::Error::Invalid {
                what: "cgroup",
                message: format!(
                    "{}: memory.force_empty cannot empty the root of the v1 hierarchy; name a child group",
                    dir.display()
                ),
            })
        }
        Err(e) => tally.error(e),
        Ok(()) => {}
    }
    Ok(ReclaimMethod::ForceEmpty)
}
