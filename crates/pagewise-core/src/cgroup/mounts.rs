//! The memory hierarchies mounted here and the names of their groups: which mounts carry the
//! memory controller (v1's `memory`, v2's root with `memory` in `cgroup.controllers`), a
//! process's own memory cgroup, a group's directory from its cgroup path and back, and the
//! inode -> cgroup path map `stat --by-cgroup` labels pages with.

use super::Hierarchy;
use crate::error::Op;
use serde::Serialize;
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A mounted cgroup hierarchy that has the memory controller.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryMount {
    /// v1 or v2.
    pub hierarchy: Hierarchy,
    /// Where it is mounted (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup`).
    pub mount_point: PathBuf,
    /// The cgroup the mount shows at its top (`/` unless mounted inside a cgroup namespace
    /// from outside it).
    pub mount_root: String,
}

/// The memory hierarchies in `mountinfo` text (`/proc/self/mountinfo`): v1 mounts whose
/// options name `memory`, and v2 mounts whose root lists `memory` in `cgroup.controllers`
/// (`controllers` reads that file; injected for tests).
pub fn parse_memory_mounts(
    mountinfo: &str,
    controllers: &dyn Fn(&Path) -> Option<String>,
) -> Vec<MemoryMount> {
    memory_mounts_in(
        crate::procfs::parse_mountinfo(mountinfo.as_bytes()),
        controllers,
    )
}

impl MemoryMount {
    /// The directory of the group `path` names as /proc/PID/cgroup does (from the cgroup
    /// namespace's root, which is this mount's [`MemoryMount::mount_root`]): the one way from
    /// a process's cgroup to its directory.
    pub fn dir_of(&self, path: &str) -> PathBuf {
        let rel = path
            .strip_prefix(self.mount_root.trim_end_matches('/'))
            .unwrap_or(path);
        group_dir(&self.mount_point, rel)
    }
}

/// [`parse_memory_mounts`] of mounts already parsed.
fn memory_mounts_in(
    mounts: Vec<crate::procfs::Mount>,
    controllers: &dyn Fn(&Path) -> Option<String>,
) -> Vec<MemoryMount> {
    let mut v = Vec::new();
    for m in mounts {
        let mount_point = m.mount_point;
        let mount_root = m.root.to_string_lossy().into_owned();
        let hierarchy = match m.fstype.as_str() {
            "cgroup" if m.super_options.split(',').any(|o| o == "memory") => Hierarchy::V1,
            "cgroup2"
                if controllers(&mount_point)
                    .is_some_and(|c| c.split_whitespace().any(|c| c == "memory")) =>
            {
                Hierarchy::V2
            }
            _ => continue,
        };
        v.push(MemoryMount {
            hierarchy,
            mount_point,
            mount_root,
        });
    }
    v
}

/// The memory hierarchies mounted here: v1's memory controller first (where memory is
/// accounted on a hybrid layout), then v2 when its root has the memory controller.
pub fn memory_mounts() -> Vec<MemoryMount> {
    let mut v = memory_mounts_in(crate::procfs::mounts(), &|p| {
        std::fs::read_to_string(p.join("cgroup.controllers")).ok()
    });
    v.sort_by_key(|m| m.hierarchy != Hierarchy::V1);
    v
}

/// The memory cgroup of a process from its `/proc/PID/cgroup` text: the v1 line whose
/// controllers include `memory`, else the v2 line (`0::/path`). Returns (hierarchy, path).
pub fn parse_proc_cgroup(text: &str) -> Option<(Hierarchy, String)> {
    let mut v2 = None;
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if ctrl.split(',').any(|c| c == "memory") {
            return Some((Hierarchy::V1, path.to_string()));
        }
        if id == "0" && ctrl.is_empty() {
            v2 = Some((Hierarchy::V2, path.to_string()));
        }
    }
    v2
}

/// The directory of the calling process's own memory cgroup (`/proc/self/cgroup` joined to
/// its hierarchy's mount point).
pub fn own_memory_cgroup() -> Result<PathBuf, crate::Error> {
    let text = crate::procfs::cgroup_text(None).map_err(|e| crate::Error::Io {
        path: "/proc/self/cgroup".into(),
        op: Op::Read,
        source: e,
    })?;
    let mounts = memory_mounts();
    let invalid = |message: String| crate::Error::Invalid {
        what: "cgroup",
        message,
    };
    let (h, path) = parse_proc_cgroup(&text)
        .filter(|(h, _)| mounts.iter().any(|m| m.hierarchy == *h))
        .or_else(|| {
            // Memory on v2 only: the 0:: line, when the v2 mount has memory.
            let v2 = text.lines().find_map(|l| l.strip_prefix("0::"))?;
            mounts
                .iter()
                .any(|m| m.hierarchy == Hierarchy::V2)
                .then(|| (Hierarchy::V2, v2.to_string()))
        })
        .ok_or_else(|| invalid("no memory cgroup hierarchy is mounted (neither v1's memory controller nor v2 with memory)".into()))?;
    let m = mounts.iter().find(|m| m.hierarchy == h).unwrap();
    Ok(m.dir_of(&path))
}

/// The directory of cgroup path `cgroup` (`/a/b`, relative to the hierarchy's root) under the
/// hierarchy's mount point: the mount point itself for the root, not `mount_point/` (a process
/// in the root cgroup, as in a VM, was shown its group as `/sys/fs/cgroup/`).
pub fn group_dir(mount_point: &Path, cgroup: &str) -> PathBuf {
    let rel = cgroup.trim_matches('/');
    if rel.is_empty() {
        mount_point.to_path_buf()
    } else {
        mount_point.join(rel)
    }
}

/// Resolves what a user gave as a cgroup: a directory with `memory.stat` as is; else a cgroup
/// path (`/system.slice/x`) under the memory hierarchy's mount point.
pub fn resolve(given: &Path) -> Result<PathBuf, crate::Error> {
    if given.join("memory.stat").exists() {
        return Ok(given.to_path_buf());
    }
    for m in memory_mounts() {
        let p = group_dir(&m.mount_point, &given.to_string_lossy());
        if p.join("memory.stat").exists() {
            return Ok(p);
        }
    }
    Err(crate::Error::Io {
        path: given.join("memory.stat"),
        op: Op::Open,
        source: io::Error::from_raw_os_error(libc::ENOENT),
    })
}

/// The cgroup path of a group directory (`/process_api/x`): relative to the memory mount it
/// is under, `/` for the mount itself.
pub fn cgroup_name(dir: &Path, mounts: &[MemoryMount]) -> String {
    let best = mounts
        .iter()
        .filter(|m| dir.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len());
    match best {
        Some(m) => {
            let rel = dir.strip_prefix(&m.mount_point).unwrap_or(dir);
            format!("/{}", rel.to_string_lossy())
        }
        None => dir.to_string_lossy().into_owned(),
    }
}

/// Inode -> cgroup path for every directory of the mounted memory hierarchies.
pub(crate) fn cgroup_inodes() -> HashMap<u64, String> {
    let mounts = memory_mounts();
    let mut map = HashMap::new();
    for m in &mounts {
        let mut stack = vec![m.mount_point.clone()];
        while let Some(d) = stack.pop() {
            if let Ok(md) = std::fs::metadata(&d) {
                map.entry(md.ino())
                    .or_insert_with(|| cgroup_name(&d, &mounts));
            }
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(
                    rd.filter_map(|e| e.ok())
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
    }
    map
}

/// The mount point a group directory is under (itself when none is known).
pub(crate) fn mount_of(dir: &Path) -> PathBuf {
    memory_mounts()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|m| dir.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
        .unwrap_or_else(|| dir.to_path_buf())
}
