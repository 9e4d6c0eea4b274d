//! `evict --why`: which processes keep a file's pages in, from /proc/PID/maps (mapped) and
//! /proc/PID/smaps (locked).

use super::{EvictFile, StayReason};
use std::collections::HashMap;

/// A mapping of a file by a process, from /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcMapping {
    /// The process.
    pub pid: u32,
    /// It has the file's pages mlocked.
    pub locked: bool,
}

/// ((major, minor), inode) of a mapped file as /proc/PID/maps shows it.
type MapsKey = ((u32, u32), u64);

/// Parses one /proc/PID/maps line into ((major, minor), inode, start address).
fn parse_maps_line(line: &str) -> Option<((u32, u32), u64, u64)> {
    let mut it = line.split_ascii_whitespace();
    let range = it.next()?;
    let _perms = it.next()?;
    let _off = it.next()?;
    let dev = it.next()?;
    let ino: u64 = it.next()?.parse().ok()?;
    if ino == 0 {
        return None;
    }
    let (maj, min) = dev.split_once(':')?;
    let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
    Some((
        (
            u32::from_str_radix(maj, 16).ok()?,
            u32::from_str_radix(min, 16).ok()?,
        ),
        ino,
        start,
    ))
}

/// Which processes map each of the given (dev, inode) files, and whether they mlocked them.
/// Reads /proc/*/maps (and smaps only for processes that map a wanted file).
pub fn find_mappers(wanted: &[(u64, u64)]) -> HashMap<(u64, u64), Vec<ProcMapping>> {
    let want: std::collections::HashSet<((u32, u32), u64)> = wanted
        .iter()
        .map(|&(dev, ino)| ((libc::major(dev), libc::minor(dev)), ino))
        .collect();
    let mut out: HashMap<(u64, u64), Vec<ProcMapping>> = HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        let mut hits: Vec<(MapsKey, u64)> = Vec::new();
        for line in maps.lines() {
            if let Some((d, ino, start)) = parse_maps_line(line) {
                if want.contains(&(d, ino)) {
                    hits.push(((d, ino), start));
                }
            }
        }
        if hits.is_empty() {
            continue;
        }
        let locked_starts = locked_mappings(pid);
        for ((d, ino), start) in hits {
            let dev = libc::makedev(d.0, d.1);
            let v = out.entry((dev, ino)).or_default();
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

/// Start addresses of a process's mappings with a non-zero `Locked:` line in smaps.
fn locked_mappings(pid: u32) -> Vec<u64> {
    let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return Vec::new();
    };
    let mut cur = None;
    let mut out = Vec::new();
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("Locked:") {
            let kb: u64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            if kb > 0 {
                if let Some(s) = cur {
                    out.push(s);
                }
            }
        } else if line.contains('-') && line.split_ascii_whitespace().count() >= 5 {
            if let Some(r) = line.split_ascii_whitespace().next() {
                if let Some(s) = r
                    .split('-')
                    .next()
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                {
                    cur = Some(s);
                }
            }
        }
    }
    out
}

pub(super) fn explain(residue: &mut [EvictFile]) {
    let keys: Vec<(u64, u64)> = residue.iter().map(|f| f.dev_ino).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let l = "7f0c1a200000-7f0c1a222000 r--p 00000000 fd:01 1234567                    /usr/lib/x.so";
        assert_eq!(
            parse_maps_line(l),
            Some(((0xfd, 1), 1234567, 0x7f0c1a200000))
        );
        assert_eq!(
            parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0 [stack]"),
            None
        );
        assert_eq!(parse_maps_line("garbage"), None);
    }
}
