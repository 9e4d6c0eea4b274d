//! The one reader and parser of the kernel's /proc files pagewise looks at: a process's
//! mappings (`/proc/PID/maps`, and `Locked:` of `/proc/PID/smaps`), the mounts
//! (`/proc/self/mountinfo`, fully unescaped), `/proc/PID/status`, `/proc/PID/stat` (and with
//! it every process's parent), a process's threads (`/proc/PID/task`) and the machine's
//! `/proc/meminfo` and `/proc/vmstat`, and `kernel.perf_event_paranoid`.
//!
//! Every parser takes the text the kernel wrote and never panics, whatever it is handed (the
//! property tests below feed them arbitrary bytes); a reader that cannot read its file gives
//! what the caller treats as "unknown" (None, an empty list) unless it says otherwise. No
//! `unsafe` here: these are plain reads.

use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// A process's mapping of a file: addresses `[start, end)` show the file from byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMapping {
    /// First address.
    pub start: u64,
    /// Address past the end.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// The file's device (major, minor).
    pub dev: (u32, u32),
    /// The file's inode.
    pub ino: u64,
}

impl FileMapping {
    /// Where bytes `[off, off + len)` of the file are mapped here: `(address, bytes)`, None
    /// when this mapping shows none of them.
    pub fn addresses_of(&self, off: u64, len: u64) -> Option<(u64, u64)> {
        let (from, to) = (
            off.max(self.offset),
            off.saturating_add(len).min(
                self.offset
                    .saturating_add(self.end.saturating_sub(self.start)),
            ),
        );
        (from < to).then(|| (self.start.saturating_add(from - self.offset), to - from))
    }

    /// The mapped file's identity.
    pub fn file(&self) -> crate::sys::FileId {
        crate::sys::FileId(self.dev.0, self.dev.1, self.ino)
    }
}

/// The file mappings of process `pid`, from `/proc/PID/maps` (anonymous ones left out).
pub fn file_mappings(pid: u32) -> io::Result<Vec<FileMapping>> {
    let text = std::fs::read(format!("/proc/{pid}/maps"))?;
    Ok(parse_maps(&text))
}

/// The file mappings in `/proc/PID/maps` text (anonymous ones and malformed lines left out).
pub fn parse_maps(text: &[u8]) -> Vec<FileMapping> {
    text.split(|&b| b == b'\n')
        .filter_map(parse_maps_line)
        .collect()
}

/// One line of `/proc/PID/maps`: `start-end perms offset major:minor inode [path]`, numbers
/// in hex except the inode. None for anonymous mappings (inode 0) and malformed lines.
pub fn parse_maps_line(line: &[u8]) -> Option<FileMapping> {
    let line = std::str::from_utf8(line.get(..line.len().min(120))?)
        .ok()
        .or_else(|| {
            // The path may be cut inside a UTF-8 sequence: the numbers come before it.
            let end = line.iter().position(|&b| b >= 0x80)?;
            std::str::from_utf8(line.get(..end)?).ok()
        })?;
    let mut f = line.split_ascii_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let _perms = f.next()?;
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let ino: u64 = f.next()?.parse().ok()?;
    if ino == 0 {
        return None;
    }
    Some(FileMapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset,
        dev: (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        ino,
    })
}

/// The files process `pid` maps, with the path /proc/PID/maps gives each (bytes, without a
/// " (deleted)" suffix; lines whose path does not start with '/' are left out), keyed as the
/// page-cache tracepoints key them (the device and inode of the inode holding the pages).
/// Each file once.
pub fn mapped_paths(pid: u32) -> Vec<(crate::sys::FileId, Vec<u8>)> {
    let Ok(text) = std::fs::read(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut out: Vec<(crate::sys::FileId, Vec<u8>)> = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let Some(m) = parse_maps_line(line) else {
            continue;
        };
        // The path starts at the first '/' after the five fields.
        let Some(at) = line.iter().position(|&b| b == b'/') else {
            continue;
        };
        let mut path = line[at..].to_vec();
        if path.ends_with(b" (deleted)") {
            path.truncate(path.len() - 10);
        }
        let key = m.file();
        if !out.iter().any(|(k, _)| *k == key) {
            out.push((key, path));
        }
    }
    out
}

/// Current number of memory mappings of this process: lines of `/proc/self/maps` (0 when it
/// cannot be read).
pub fn own_map_count() -> u64 {
    std::fs::read("/proc/self/maps")
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0)
}

/// Current number of memory mappings of this process (lines of /proc/self/maps) and the
/// system's vm.max_map_count (`/proc/sys/vm/max_map_count`, 65530 when unreadable), for a
/// clear message before mapping thousands of files.
pub fn map_count_and_limit() -> (u64, u64) {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65530);
    (own_map_count(), limit)
}

/// Start addresses of process `pid`'s mappings with a non-zero `Locked:` line in
/// `/proc/PID/smaps` (empty when it cannot be read).
pub fn locked_mappings(pid: u32) -> Vec<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .map(|s| parse_smaps_locked(&s))
        .unwrap_or_default()
}

/// The start addresses of the mappings in `/proc/PID/smaps` text whose `Locked:` is not 0.
pub fn parse_smaps_locked(smaps: &str) -> Vec<u64> {
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
            if let (true, Some(s)) = (kb > 0, cur) {
                out.push(s);
            }
        } else if line.contains('-') && line.split_ascii_whitespace().count() >= 5 {
            let start = line
                .split_ascii_whitespace()
                .next()
                .and_then(|r| r.split('-').next())
                .and_then(|s| u64::from_str_radix(s, 16).ok());
            if let Some(s) = start {
                cur = Some(s);
            }
        }
    }
    out
}

/// One line of `/proc/self/mountinfo` (proc_pid_mountinfo(5)), its paths unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The filesystem's device `(major, minor)` (None when the field is malformed).
    pub dev: Option<(u32, u32)>,
    /// The directory of the filesystem shown at the mount point (`/` for its root).
    pub root: PathBuf,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The filesystem type (`ext4`, `cgroup2`).
    pub fstype: String,
    /// The per-superblock options (`rw,memory`), empty when absent.
    pub super_options: String,
}

/// The mounts of this process's namespace, from `/proc/self/mountinfo` (empty when it cannot
/// be read).
pub fn mounts() -> Vec<Mount> {
    std::fs::read("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// The mounts in `mountinfo` text, lines of `id parent maj:min root mount-point options
/// [optional...] - fstype source super-options`. Lines without the ` - ` separator or with
/// fewer than five fields before it are left out.
pub fn parse_mountinfo(text: &[u8]) -> Vec<Mount> {
    text.split(|&b| b == b'\n')
        .filter_map(parse_mountinfo_line)
        .collect()
}

fn parse_mountinfo_line(line: &[u8]) -> Option<Mount> {
    let sep = line.windows(3).position(|w| w == b" - ")?;
    let (pre, post) = (line.get(..sep)?, line.get(sep + 3..)?);
    let f: Vec<&[u8]> = pre.split(|&b| b == b' ').collect();
    let g: Vec<&[u8]> = post.split(|&b| b == b' ').collect();
    if f.len() < 5 {
        return None;
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let dev = std::str::from_utf8(f[2]).ok().and_then(parse_dev);
    Some(Mount {
        dev,
        root: PathBuf::from(std::ffi::OsString::from_vec(unescape(f[3]))),
        mount_point: PathBuf::from(std::ffi::OsString::from_vec(unescape(f[4]))),
        fstype: g.first().map(|b| text(b)).unwrap_or_default(),
        super_options: g.get(2).map(|b| text(b)).unwrap_or_default(),
    })
}

/// `major:minor` in decimal, as mountinfo writes a device.
pub fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Undoes mountinfo's escapes: every `\NNN` (three octal digits, at most `\377`) becomes its
/// byte — the kernel writes space, tab, newline and backslash so, and any byte may come so
/// from a bind mount's path; a backslash not followed by such digits stays as it is.
pub fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let digits = s.get(i + 1..i + 4).filter(|d| {
            (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|c| (b'0'..=b'7').contains(c))
        });
        match (s[i], digits) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The value of the `key:` line of `/proc/PID/status` text, trimmed (`Tgid`, `Umask`).
pub fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// The process (thread group) a thread belongs to, from `/proc/TID/status`.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status_field(&s, "Tgid")?.parse().ok()
}

/// The process's umask, from `/proc/self/status` (no syscall that changes it).
pub fn own_umask() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    u32::from_str_radix(status_field(&s, "Umask")?, 8).ok()
}

/// What pagewise reads of a `/proc/PID/stat` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// The command name (between the parentheses; it may hold spaces and parentheses).
    pub comm: String,
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: String,
    /// The parent's PID.
    pub ppid: u32,
    /// The kernel's `PF_*` flags (None when the line is cut before them).
    pub flags: Option<u64>,
}

/// PF_KTHREAD of `<linux/sched.h>`: the task is a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

impl Stat {
    /// PF_KTHREAD is in the flags: a kernel thread (no memory map, no page faults).
    pub fn is_kernel_thread(&self) -> bool {
        self.flags.is_some_and(|f| f & PF_KTHREAD != 0)
    }
}

/// Parses a `/proc/PID/stat` line: `pid (comm) state ppid pgrp session tty_nr tpgid flags
/// ...`. The fields after the comm start after its last `)`.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let mut f = stat.get(close + 1..)?.split_ascii_whitespace();
    let state = f.next()?.to_string();
    let ppid = f.next()?.parse().ok()?;
    // pgrp, session, tty_nr, tpgid, flags
    let flags = f.nth(4).and_then(|v| v.parse().ok());
    Some(Stat {
        comm: comm.to_string(),
        state,
        ppid,
        flags,
    })
}

/// `/proc/PID/stat` of process `pid`, parsed (None when it is gone or unreadable).
pub fn stat_of(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The processes now: the numeric entries of /proc (empty when it cannot be read).
pub fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// Every process and its parent `(pid, ppid)`, from /proc/PID/stat, zombies excluded.
fn parents() -> Vec<(u32, u32)> {
    pids()
        .into_iter()
        .filter_map(|child| {
            let s = stat_of(child).filter(|s| s.state != "Z")?;
            Some((child, s.ppid))
        })
        .collect()
}

/// Processes whose parent is `pid` (from /proc/PID/stat), zombies excluded.
pub fn children_of(pid: u32) -> Vec<u32> {
    parents()
        .into_iter()
        .filter(|&(_, ppid)| ppid == pid)
        .map(|(child, _)| child)
        .collect()
}

/// Processes descending from `pids` now (children, their children, ...; `pids` themselves
/// not included), zombies excluded: one scan of /proc.
pub fn descendants_of(pids: &[u32]) -> Vec<u32> {
    let all = parents();
    let mut out = Vec::new();
    let mut todo: Vec<u32> = pids.to_vec();
    while let Some(p) = todo.pop() {
        for &(child, _) in all.iter().filter(|&&(_, ppid)| ppid == p) {
            if !out.contains(&child) && !pids.contains(&child) {
                out.push(child);
                todo.push(child);
            }
        }
    }
    out
}

/// The threads of process `pid`, from `/proc/PID/task` (the ids to follow it by).
pub fn threads_of(pid: u32) -> io::Result<Vec<u32>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(t) = e?.file_name().to_str().and_then(|s| s.parse().ok()) {
            v.push(t);
        }
    }
    Ok(v)
}

/// Process `pid` still has a /proc entry (running, or a zombie not yet reaped).
pub fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Process `pid` has exited and is a zombie (or dead, `X`): every thread of it in state `Z`
/// or `X` in /proc/PID/task/TID/stat — a leader that ended with pthread_exit(3) is a zombie
/// while its other threads run. False when it is gone (no /proc entry: see [`exists`]) or
/// cannot be read.
pub fn is_zombie(pid: u32) -> bool {
    let dead = |s: &Stat| s.state == "Z" || s.state == "X";
    let Some(leader) = stat_of(pid) else {
        return false;
    };
    if !dead(&leader) {
        return false;
    }
    let Ok(tids) = threads_of(pid) else {
        return true;
    };
    tids.into_iter().all(|t| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat"))
            .ok()
            .and_then(|l| parse_stat(&l))
            .is_none_or(|s| dead(&s))
    })
}

/// Process `pid` is alive (not gone, not a zombie) and runs pagewise: its command name starts
/// with `pagewise`, or its executable is this process's own (pagewise under another name). What
/// a stale temporary of pagewise's is told by: its PID in the name is no pagewise now.
pub fn is_live_pagewise(pid: u32) -> bool {
    let Some(st) = stat_of(pid) else {
        return false;
    };
    if st.state == "Z" || st.state == "X" {
        return false;
    }
    // The kernel cuts the name to 15 bytes: `pagewise-0.1.0-x86_64-linux` runs as "pagewise-0.1.0-".
    if st.comm.starts_with("pagewise") {
        return true;
    }
    exe_of(Some(pid)).is_some_and(|e| Some(e) == exe_of(None))
}

/// The executable of process `pid` (None: this process), from the /proc/PID/exe link.
pub fn exe_of(pid: Option<u32>) -> Option<std::path::PathBuf> {
    std::fs::read_link(match pid {
        Some(p) => format!("/proc/{p}/exe"),
        None => "/proc/self/exe".to_string(),
    })
    .ok()
}

/// The /proc magic link of thread `tid`'s descriptor `fd` (opening it reopens the file).
pub fn fd_link(tid: u32, fd: u32) -> String {
    format!("/proc/{tid}/fd/{fd}")
}

/// The /proc magic link of thread `tid`'s executable.
pub fn exe_link(tid: u32) -> String {
    format!("/proc/{tid}/exe")
}

/// The descriptor numbers thread `tid`'s process has open (none when it is gone or hidden).
pub fn open_fds(tid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{tid}/fd"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// How many descriptors this process has open (/proc/self/fd).
pub fn own_open_fds() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64)
}

/// Process `pid`'s command name (/proc/PID/comm) without the newline the kernel ends it with;
/// a newline in the name itself stays.
pub fn comm_of(pid: u32) -> Option<Vec<u8>> {
    let mut c = std::fs::read(format!("/proc/{pid}/comm")).ok()?;
    if c.last() == Some(&b'\n') {
        c.pop();
    }
    Some(c)
}

/// Process `pid`'s /proc/PID/cgroup (None: this process's), as text.
pub fn cgroup_text(pid: Option<u32>) -> io::Result<String> {
    std::fs::read_to_string(match pid {
        Some(p) => format!("/proc/{p}/cgroup"),
        None => "/proc/self/cgroup".to_string(),
    })
}

/// This process's /proc/self/stat, as text (the exporter's process_* figures).
pub fn own_stat_text() -> Option<String> {
    std::fs::read_to_string("/proc/self/stat").ok()
}

/// The machine's /proc/stat (boot time), as text.
pub fn machine_stat_text() -> Option<String> {
    std::fs::read_to_string("/proc/stat").ok()
}

/// This process's resource limits (/proc/self/limits), as text.
pub fn own_limits_text() -> Option<String> {
    std::fs::read_to_string("/proc/self/limits").ok()
}

/// `kernel.perf_event_paranoid` (/proc/sys/kernel/perf_event_paranoid), None when unreadable
/// (no perf events in this kernel): named in the error when perf_event_open is refused.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The `key:` line of `/proc/meminfo` text in bytes (the kernel writes kB).
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let n: u64 = rest.split_whitespace().next()?.parse().ok()?;
        n.checked_mul(1024)
    })
}

/// The `key value` line of `/proc/vmstat` text.
pub fn vmstat_value(vmstat: &str, key: &str) -> Option<u64> {
    vmstat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// The text of `/proc/meminfo` and `/proc/vmstat` (each empty when it cannot be read).
pub fn meminfo_and_vmstat() -> (String, String) {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    (read("/proc/meminfo"), read("/proc/vmstat"))
}

#[cfg(test)]
mod tests;
