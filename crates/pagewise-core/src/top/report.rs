//! One interval of `top`, named: rows by process, cgroup and file, largest first.

use super::aggregate::{Bounded, Counts, FileKey, IntMap};
use super::names::{self, FileName, FileNames};
use crate::cgroup::container::{self, Owner};
use serde::Serialize;
use std::collections::HashMap;

/// What one interval counted, before naming: handed from the sampler's reader to
/// `Sampler::drain`, which names it with [`interval`].
pub(super) struct Raw {
    pub processes: Bounded<u32>,
    pub cgroups: Bounded<u32>,
    pub files: Bounded<FileKey>,
    /// A process seen using each file (the first of the interval), to name the file through
    /// its /proc/PID/fd and maps where the inode number alone cannot (XFS, btrfs, no
    /// CAP_DAC_READ_SEARCH). At most as many as `files` has keys.
    pub file_pids: IntMap<FileKey, u32>,
    pub totals: Counts,
    pub pids: Vec<(u32, names::ProcInfo)>,
    pub cgroup_table: Vec<names::CgroupEntry>,
    pub bdis: Vec<(String, String)>,
    pub lost: u64,
    /// The interval's number (from 1).
    pub seq: u64,
}

/// A process's row.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProcessRow {
    /// Process id.
    pub pid: u32,
    /// Its command (`/proc/PID/comm`, its bytes); null when it exited before it was read. In
    /// JSON as a path is: `comm`, and `comm_bytes` when it is not UTF-8.
    #[serde(flatten, serialize_with = "crate::json::opt_comm")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::OptCommKeys"))]
    pub comm: Option<Vec<u8>>,
    /// Its memory cgroup (as `pagewise cgroups` shows it); null when unknown.
    pub cgroup: Option<String>,
    /// What it did to the page cache.
    #[serde(flatten)]
    pub counts: Counts,
}

/// A memory cgroup's row.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CgroupRow {
    /// The cgroup path (`/system.slice/x.service`); null when unknown.
    pub cgroup: Option<String>,
    /// Why `cgroup` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_unknown: Option<String>,
    /// Container, pod or unit, read from the path (`docker 3f4e5a6b7c8d`); null for none.
    pub name: Option<String>,
    /// The parts of that name.
    pub owner: Owner,
    /// File pages evicted then read again, over the interval (memory.stat
    /// `workingset_refault_file`, hierarchical); null where unknown.
    pub workingset_refaults: Option<u64>,
    /// Why `workingset_refaults` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refaults_unknown: Option<String>,
    /// What its processes did to the page cache.
    #[serde(flatten)]
    pub counts: Counts,
}

/// A file's row.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileRow {
    /// The filesystem's device `MAJOR:MINOR`; null for a backing device that names none.
    pub dev: Option<String>,
    /// Inode number (0 with `dev` null).
    pub ino: u64,
    /// Its path; null when it has none (see `path_unknown`).
    #[serde(flatten, serialize_with = "crate::json::opt_path_bytes")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::OptPathKeys"))]
    pub path: Option<Vec<u8>>,
    /// The file is deleted (`path` is the name it had).
    pub deleted: bool,
    /// Why `path` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_unknown: Option<String>,
    /// What happened to its pages.
    #[serde(flatten)]
    pub counts: Counts,
}

/// The rows of one view, and what did not fit.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Rows<R> {
    /// One row per key, largest total first.
    pub rows: Vec<R>,
    /// Events of keys past the `max_keys` bound, together; null when none.
    pub other: Option<Counts>,
    /// Rows past `max_rows` (counted, not named), together; null when none.
    pub rest: Option<Counts>,
    /// How many rows `rest` sums.
    pub rest_rows: u64,
}

/// One interval.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Interval {
    /// Its length, seconds.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub elapsed_s: f64,
    /// Every event counted, together.
    pub totals: Counts,
    /// Events the kernel dropped (ring full): the figures are short by them.
    pub lost_events: u64,
    /// Dirtied bytes are counted (the kernel has a dirtying tracepoint).
    pub dirtied_counted: bool,
    /// By process, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<Rows<ProcessRow>>,
    /// By memory cgroup, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<Rows<CgroupRow>>,
    /// By file, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Rows<FileRow>>,
}

fn sorted<K: Copy, R>(
    b: &Bounded<K>,
    max_rows: Option<usize>,
    mut row: impl FnMut(K, Counts) -> R,
) -> Rows<R> {
    let mut keys: Vec<(K, Counts)> = b.by_key.iter().map(|(k, c)| (*k, *c)).collect();
    keys.sort_by_key(|(_, c)| std::cmp::Reverse(c.total()));
    let listed = max_rows.unwrap_or(usize::MAX).min(keys.len());
    let mut rest: Option<Counts> = None;
    for (_, c) in &keys[listed..] {
        rest.get_or_insert_with(Counts::default).merge(c);
    }
    Rows {
        rest_rows: (keys.len() - listed) as u64,
        rest,
        rows: keys.drain(..listed).map(|(k, c)| row(k, c)).collect(),
        other: b.overflowed.then_some(b.other),
    }
}

/// Names an interval's counts (`raw` None: the reader is gone, nothing counted).
pub(super) fn interval(
    raw: Option<Raw>,
    elapsed_s: f64,
    files: &mut FileNames,
    refaults: &mut HashMap<String, (u64, u64)>,
    dirtied_counted: bool,
    views: super::Views,
    max_rows: Option<usize>,
) -> Interval {
    let Some(raw) = raw else {
        return Interval {
            elapsed_s,
            totals: Counts::default(),
            lost_events: 0,
            dirtied_counted,
            processes: None,
            cgroups: None,
            files: None,
        };
    };
    let table = &raw.cgroup_table;
    let path_of = |i: u32| table.get(i as usize).and_then(|c| c.path.clone());
    let pids: HashMap<u32, &names::ProcInfo> = raw.pids.iter().map(|(p, i)| (*p, i)).collect();
    let processes = views.process.then(|| {
        sorted(&raw.processes, max_rows, |pid, counts| ProcessRow {
            pid,
            comm: pids.get(&pid).and_then(|i| i.comm.clone()),
            cgroup: pids.get(&pid).and_then(|i| path_of(i.cgroup)),
            counts,
        })
    });
    let now = read_refaults(&raw);
    let cgroups = views.cgroup.then(|| {
        sorted(&raw.cgroups, max_rows, |i, counts| {
            cgroup_row(i, counts, table, &now, refaults, raw.seq)
        })
    });
    for (i, n) in &now {
        if let (Some(p), Some(n)) = (table[*i as usize].path.clone(), n) {
            if refaults.len() < 65_536 || refaults.contains_key(&p) {
                refaults.insert(p, (*n, raw.seq));
            }
        }
    }
    let file_rows = views.file.then(|| {
        sorted(&raw.files, max_rows, |k, counts| {
            file_row(k, counts, files, &raw.bdis, raw.file_pids.get(&k).copied())
        })
    });
    Interval {
        elapsed_s,
        totals: raw.totals,
        lost_events: raw.lost,
        dirtied_counted,
        processes,
        cgroups,
        files: file_rows,
    }
}

/// Cgroups with more entries than this have their memory.stat read only for the groups with
/// events (each read is tens of microseconds on v1, which sums the hierarchy).
const REFAULT_READS: usize = 1024;

/// The refault counts now of the groups of the interval's table: all of them when there are
/// few (so the next interval has its starting figure even for a group idle in this one).
fn read_refaults(raw: &Raw) -> HashMap<u32, Option<u64>> {
    let table = &raw.cgroup_table;
    let all = table.len() <= REFAULT_READS;
    let idx: Vec<u32> = if all {
        (0..table.len() as u32).collect()
    } else {
        raw.cgroups.by_key.keys().copied().collect()
    };
    idx.into_iter()
        .filter_map(|i| {
            let dir = table.get(i as usize)?.dir.as_deref()?;
            Some((i, names::refaults(dir)))
        })
        .collect()
}

fn cgroup_row(
    i: u32,
    counts: Counts,
    table: &[names::CgroupEntry],
    now: &HashMap<u32, Option<u64>>,
    last: &HashMap<String, (u64, u64)>,
    seq: u64,
) -> CgroupRow {
    let e = table.get(i as usize);
    let path = e.and_then(|e| e.path.clone());
    let owner = path.as_deref().map(container::owner).unwrap_or_default();
    let at_end = now.get(&i).copied().flatten();
    // The figure at the interval's start: read at the previous interval's end, or when the
    // group was first seen (this interval).
    let before = path
        .as_ref()
        .and_then(|p| last.get(p))
        .filter(|(_, s)| *s + 1 == seq)
        .map(|(v, _)| *v)
        .or(e
            .filter(|e| e.first_seen == seq)
            .and_then(|e| e.first_refaults));
    let (refaults, why) = match (at_end, before) {
        (Some(n), Some(b)) => (Some(n.saturating_sub(b)), None),
        (None, _) if e.is_some_and(|e| e.dir.is_some()) => (
            None,
            Some("memory.stat has no workingset_refault_file (or could not be read)"),
        ),
        (None, _) => (None, Some("the cgroup is unknown")),
        (Some(_), None) => (
            None,
            Some("memory.stat was not read at the interval's start"),
        ),
    };
    CgroupRow {
        cgroup: path,
        cgroup_unknown: e.and_then(|e| e.unknown.clone()),
        name: owner.short(),
        owner,
        workingset_refaults: refaults,
        refaults_unknown: why.map(str::to_string),
        counts,
    }
}

fn file_row(
    key: FileKey,
    counts: Counts,
    names: &mut FileNames,
    bdis: &[(String, String)],
    pid: Option<u32>,
) -> FileRow {
    let id = match key {
        FileKey::File(id) => Some(id),
        FileKey::UnresolvedBdi { .. } => None,
    };
    let (path, deleted, why) = match names.name(key, bdis, pid) {
        FileName::Path(p, d) => (Some(p), d, None),
        FileName::Unknown(w) => (None, false, Some(w)),
    };
    FileRow {
        dev: id.map(|id| format!("{}:{}", id.0, id.1)),
        ino: id.map_or(0, |id| id.2),
        path,
        deleted,
        path_unknown: why,
        counts,
    }
}
