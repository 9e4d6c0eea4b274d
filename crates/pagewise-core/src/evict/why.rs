//! `evict --why`: which processes keep a file's pages in, from /proc/PID/maps (mapped) and
//! /proc/PID/smaps (locked), both read by [`crate::procfs`].

use super::{EvictFile, StayReason};
use crate::procfs;
use crate::sys::FileId;
use std::collections::HashMap;

/// A mapping of a file by a process, from /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcMapping {
    /// The process.
    pub pid: u32,
    /// It has the file's pages mlocked.
    pub locked: bool,
}

/// Which processes map each of the given files, and whether they mlocked them.
/// Reads /proc/*/maps (and smaps only for processes that map a wanted file).
pub fn find_mappers(wanted: &[FileId]) -> HashMap<FileId, Vec<ProcMapping>> {
    let want: std::collections::HashSet<FileId> = wanted.iter().copied().collect();
    let mut out: HashMap<FileId, Vec<ProcMapping>> = HashMap::new();
    for pid in procfs::pids() {
        let Ok(maps) = procfs::file_mappings(pid) else {
            continue;
        };
        let hits: Vec<(FileId, u64)> = maps
            .iter()
            .map(|m| (m.file(), m.start))
            .filter(|(f, _)| want.contains(f))
            .collect();
        if hits.is_empty() {
            continue;
        }
        let locked_starts = procfs::locked_mappings(pid);
        for (file, start) in hits {
            let v = out.entry(file).or_default();
            let locked = locked_starts.contains(&start);
            if let Some(m) = v.iter_mut().find(|m| m.pid == pid) {
                m.locked |= locked;
            } else {
                v.push(ProcMapping { pid, locked });
            }
        }
    }
    out
}

pub(super) fn explain(residue: &mut [EvictFile]) {
    let keys: Vec<FileId> = residue.iter().map(|f| f.dev_ino).collect();
    let mappers = find_mappers(&keys);
    for f in residue.iter_mut() {
        if let Some(ms) = mappers.get(&f.dev_ino) {
            f.pids = ms.iter().map(|m| m.pid).collect();
            f.pids.sort_unstable();
            if f.reason == Some(StayReason::InUse) {
                f.reason = Some(if ms.iter().any(|m| m.locked) {
                    StayReason::Locked
                } else {
                    StayReason::Mapped
                });
            }
        }
    }
}
