//! Names for what the events carry as numbers: a process's command and memory cgroup (from
//! /proc/PID, read when the process is first seen in an interval, or the cgroup v2 id of
//! PERF_SAMPLE_CGROUP mapped to its path), the filesystem behind a bdi name, and a file's
//! path from (device, inode), opened by handle as `record` resolves its files. What cannot be
//! named is `unknown` with the reason.

use super::aggregate::{DevKey, FileKey, IntMap};
use crate::cgroup::{self, FileCache, Hierarchy, MemoryMount};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A memory cgroup as `pagewise cgroups` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupEntry {
    /// The cgroup path (`/process_api/x/y`), or None when unknown.
    pub path: Option<String>,
    /// Why the path is unknown.
    pub unknown: Option<String>,
    /// Its directory (for memory.stat).
    pub dir: Option<PathBuf>,
    /// Its refault count when it was first seen.
    pub first_refaults: Option<u64>,
    /// The interval (numbered from 1) it was first seen in.
    pub first_seen: u64,
}

/// Interned cgroups seen at most before the table is started again (at an interval's end).
const MAX_CGROUPS: usize = 16_384;

/// A process as first seen in an interval: its command and the index of its cgroup.
#[derive(Debug, Clone)]
pub struct ProcInfo {
    /// `/proc/PID/comm` (its bytes: a command may hold any but NUL), when it could be read.
    pub comm: Option<Vec<u8>>,
    /// Index into [`Procs::cgroups`].
    pub cgroup: u32,
}

/// Processes and cgroups of the reader thread.
pub struct Procs {
    /// Process info of this interval.
    pub pids: IntMap<u32, ProcInfo>,
    /// Interned cgroups (0: unknown, the process exited before it was read).
    pub cgroups: Vec<CgroupEntry>,
    index: HashMap<String, u32>,
    by_id: IntMap<u64, u32>,
    mounts: Vec<MemoryMount>,
    /// The v2 tree was walked for ids this interval (at most once an interval).
    walked: bool,
    /// The current interval, numbered from 1.
    pub interval: u64,
    /// The last process looked up and its cgroup (events come in runs of one process).
    last: Option<(u32, u32)>,
}

impl Default for Procs {
    fn default() -> Self {
        Procs::new()
    }
}

impl Procs {
    /// An empty table.
    pub fn new() -> Procs {
        let mut p = Procs {
            pids: IntMap::default(),
            cgroups: Vec::new(),
            index: HashMap::new(),
            by_id: IntMap::default(),
            mounts: cgroup::memory_mounts(),
            walked: false,
            interval: 1,
            last: None,
        };
        p.reset();
        p
    }

    fn reset(&mut self) {
        self.cgroups.clear();
        self.index.clear();
        self.by_id.clear();
        self.cgroups.push(CgroupEntry {
            path: None,
            unknown: Some("the process exited before /proc/PID/cgroup was read".into()),
            dir: None,
            first_refaults: None,
            first_seen: 0,
        });
    }

    /// At an interval's end: processes are looked up again (pids are reused); the cgroup
    /// table is started again when it grew past its bound.
    pub fn next_interval(&mut self) {
        self.pids.clear();
        self.last = None;
        self.walked = false;
        self.interval += 1;
        if self.cgroups.len() > MAX_CGROUPS {
            self.reset();
        }
    }

    /// The cgroup index of process `pid` ([`Procs::process`], the last one remembered).
    #[inline]
    pub fn cgroup_of(&mut self, pid: u32) -> u32 {
        if let Some((p, cg)) = self.last {
            if p == pid {
                return cg;
            }
        }
        let cg = self.process(pid).cgroup;
        self.last = Some((pid, cg));
        cg
    }

    /// Process `pid` exec'd: it is read from /proc again when next seen.
    pub fn forget(&mut self, pid: u32) {
        self.pids.remove(&pid);
        self.last = None;
    }

    /// The process `pid`, read from /proc when first seen this interval.
    #[inline]
    pub fn process(&mut self, pid: u32) -> &ProcInfo {
        if !self.pids.contains_key(&pid) {
            let info = self.read_process(pid);
            self.pids.insert(pid, info);
        }
        &self.pids[&pid]
    }

    fn read_process(&mut self, pid: u32) -> ProcInfo {
        let comm = crate::procfs::comm_of(pid);
        let text = crate::procfs::cgroup_text(Some(pid)).ok();
        let cgroup = match text.as_deref().and_then(cgroup::parse_proc_cgroup) {
            Some((h, path)) => self.intern_path(h, &path),
            None => 0,
        };
        ProcInfo { comm, cgroup }
    }

    /// The index of the cgroup `path` of hierarchy `h` (as /proc/PID/cgroup names it).
    fn intern_path(&mut self, h: Hierarchy, path: &str) -> u32 {
        let Some(m) = self.mounts.iter().find(|m| m.hierarchy == h) else {
            return self.intern_unknown(format!(
                "{path}: its hierarchy ({h:?}) has no memory controller mounted"
            ));
        };
        let dir = m.dir_of(path);
        let shown = cgroup::cgroup_name(&dir, &self.mounts);
        self.intern(shown, Some(dir))
    }

    fn intern_unknown(&mut self, why: String) -> u32 {
        let key = format!("\0{why}");
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        self.cgroups.push(CgroupEntry {
            path: None,
            unknown: Some(why),
            dir: None,
            first_refaults: None,
            first_seen: 0,
        });
        let i = (self.cgroups.len() - 1) as u32;
        self.index.insert(key, i);
        i
    }

    fn intern(&mut self, shown: String, dir: Option<PathBuf>) -> u32 {
        if let Some(&i) = self.index.get(&shown) {
            return i;
        }
        let first_refaults = dir.as_deref().and_then(refaults);
        self.cgroups.push(CgroupEntry {
            path: Some(shown.clone()),
            unknown: None,
            dir,
            first_refaults,
            first_seen: self.interval,
        });
        let i = (self.cgroups.len() - 1) as u32;
        self.index.insert(shown, i);
        i
    }

    /// The index of the cgroup v2 `id` (PERF_SAMPLE_CGROUP: the inode of its directory),
    /// walking the v2 tree again (once an interval at most) for an id not seen before.
    #[inline]
    pub fn cgroup_id(&mut self, id: u64) -> u32 {
        if let Some(&i) = self.by_id.get(&id) {
            return i;
        }
        if !self.walked {
            self.walked = true;
            for (ino, path) in cgroup::cgroup_inodes() {
                let dir = self
                    .mounts
                    .iter()
                    .find(|m| m.hierarchy == Hierarchy::V2)
                    .map(|m| cgroup::group_dir(&m.mount_point, &path));
                let i = self.intern(path, dir);
                self.by_id.insert(ino, i);
            }
            if let Some(&i) = self.by_id.get(&id) {
                return i;
            }
        }
        let i = self.intern_unknown(format!("cgroup id {id}: no such group (removed)"));
        self.by_id.insert(id, i);
        i
    }
}

/// File refaults of a group (`workingset_refault_file`, or `workingset_refault` where that is
/// what the kernel has; hierarchical), None where memory.stat has neither.
pub fn refaults(dir: &Path) -> Option<u64> {
    FileCache::read(dir).ok()?.workingset_refaults
}

/// Backing-device names of the dirtying tracepoint -> the filesystem they hold.
#[derive(Default)]
pub struct Bdis {
    map: HashMap<[u8; 32], DevKey>,
    /// The bdi names, by their index in a [`DevKey::UnresolvedBdi`], and why.
    pub unresolved: Vec<(String, String)>,
}

impl Bdis {
    /// The file key's device for the bdi `name`: the one mounted filesystem on that block
    /// device (itself or one of its partitions), else an unresolved bdi's index.
    #[inline]
    pub fn dev(&mut self, name: &[u8; 32]) -> DevKey {
        if let Some(&d) = self.map.get(name) {
            return d;
        }
        let text =
            String::from_utf8_lossy(name.split(|&b| b == 0).next().unwrap_or(&[])).into_owned();
        let d = match bdi_filesystem(&text) {
            Ok((major, minor)) => DevKey::Known { major, minor },
            Err(why) => {
                self.unresolved.push((text, why));
                DevKey::UnresolvedBdi((self.unresolved.len() - 1) as u32)
            }
        };
        if self.map.len() < 4096 {
            self.map.insert(*name, d);
        }
        d
    }
}

/// The one mounted filesystem on the block device a bdi is named after (`MAJ:MIN`).
fn bdi_filesystem(name: &str) -> Result<(u32, u32), String> {
    let disk = crate::procfs::parse_dev(name)
        .ok_or_else(|| format!("backing device {name} is not a block device number"))?;
    let mut devs: Vec<(u32, u32)> = crate::procfs::mounts()
        .into_iter()
        .filter_map(|m| m.dev)
        .filter(|&(maj, min)| {
            (maj, min) == disk || {
                let sys = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
                sys.join("partition").exists()
                    && std::fs::read_to_string(sys.join("../dev"))
                        .is_ok_and(|d| crate::procfs::parse_dev(d.trim()) == Some(disk))
            }
        })
        .collect();
    devs.sort_unstable();
    devs.dedup();
    match devs.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!("backing device {name} holds no mounted filesystem")),
        many => Err(format!(
            "backing device {name} holds {} mounted filesystems (the dirtying tracepoint \
             does not say which)",
            many.len()
        )),
    }
}

/// A file's name, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileName {
    /// Its path (and whether it is deleted: the path it had).
    Path(Vec<u8>, bool),
    /// Why there is no path.
    Unknown(String),
}

/// Files' paths from (device, inode), cached and checked again at each use.
#[derive(Default)]
pub struct FileNames {
    cache: HashMap<FileKey, Vec<u8>>,
    mounts: crate::trace::Mounts,
    /// Each device's mount, opened once an interval (None: could not be).
    mount_fds: HashMap<(u32, u32), Option<std::os::fd::OwnedFd>>,
    /// Files found through a process's /proc/PID/fd and maps, once an interval.
    seen: crate::trace::Witnessed,
}

/// Paths cached at most.
const MAX_NAMES: usize = 65_536;

impl FileNames {
    /// Reads the mount table again at its next use (once an interval).
    pub fn next_interval(&mut self) {
        self.mounts = crate::trace::Mounts::default();
        self.mount_fds.clear();
        self.seen = crate::trace::Witnessed::default();
    }

    /// The name of `key` (`bdis` names the devices of unresolved dirtying records); `pid`, a
    /// process seen using the file, is asked (its /proc/PID/fd and maps) where the inode
    /// number alone cannot name it.
    pub fn name(&mut self, key: FileKey, bdis: &[(String, String)], pid: Option<u32>) -> FileName {
        use std::os::unix::ffi::OsStrExt;
        let (maj, min, ino) = match key {
            FileKey::File(id) => (id.0, id.1, id.2),
            FileKey::UnresolvedBdi { bdi, .. } => {
                let why = bdis
                    .get(bdi as usize)
                    .map_or("an unknown backing device", |b| &b.1);
                return FileName::Unknown(format!("made dirty through {why}"));
            }
        };
        if let Some(p) = self.cache.get(&key) {
            let md = std::fs::metadata(std::ffi::OsStr::from_bytes(p));
            if md.is_ok_and(|m| m.ino() == ino && libc::major(m.dev()) == maj) {
                return FileName::Path(p.clone(), false);
            }
            self.cache.remove(&key);
        }
        let mounts = &self.mounts;
        let mfd = self.mount_fds.entry((maj, min)).or_insert_with(|| {
            let dir = crate::sys::OpenFlags {
                directory: true,
                ..Default::default()
            };
            let mp = mounts.of((maj, min))?;
            crate::sys::open_path(&mp, dir).ok()
        });
        let Some(mfd) = mfd else {
            return FileName::Unknown(format!(
                "device {maj}:{min} is not mounted (an internal filesystem: pipes, sockets, \
                 memfd, shared memory), or its mount could not be opened"
            ));
        };
        use std::os::fd::AsFd;
        let found = match crate::sys::open_by_inode(mfd.as_fd(), ino) {
            Ok(fd) => Ok(std::sync::Arc::new(fd)),
            Err(e) => {
                let id = crate::sys::FileId(maj, min, ino);
                pid.and_then(|p| self.seen.find(id, p).ok()).ok_or(e)
            }
        };
        let fd = match found {
            Ok(fd) => fd,
            Err(e) => {
                // Only ext2/3/4 and squashfs take an inode number without its generation:
                // their ESTALE means the inode is free; elsewhere it says nothing of the file.
                let gen_zero = self
                    .mounts
                    .fstype((maj, min))
                    .is_some_and(|t| matches!(t.as_str(), "ext2" | "ext3" | "ext4" | "squashfs"));
                return FileName::Unknown(match e.raw_os_error() {
                    Some(libc::ENOENT | libc::ESTALE) if gen_zero => "gone: deleted since".into(),
                    Some(libc::ESTALE) => format!(
                        "cannot be named: this file system checks the inode's generation, which \
                         the tracepoint does not give (open_by_handle_at({maj}:{min} inode {ino}): {e})"
                    ),
                    Some(libc::EPERM) => format!(
                        "cannot be named without CAP_DAC_READ_SEARCH (open_by_handle_at: {e})"
                    ),
                    _ => format!("open_by_handle_at({maj}:{min} inode {ino}) failed: {e}"),
                });
            }
        };
        let link = std::fs::read_link(crate::sys::fd_path(fd.as_fd()));
        let Ok(link) = link else {
            return FileName::Unknown("readlink of its /proc/self/fd entry failed".into());
        };
        let mut b = link.as_os_str().as_bytes().to_vec();
        let deleted = b.ends_with(b" (deleted)");
        if deleted {
            b.truncate(b.len() - 10);
        } else if b.first() == Some(&b'/') {
            if self.cache.len() >= MAX_NAMES {
                self.cache.clear();
            }
            self.cache.insert(key, b.clone());
        }
        if b.first() != Some(&b'/') {
            return FileName::Unknown("its filesystem gives no path (not a mounted file)".into());
        }
        FileName::Path(b, deleted)
    }
}
