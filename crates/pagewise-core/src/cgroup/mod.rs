//! cgroups and their file cache: `memory.stat` of cgroup v2 and of cgroup v1's memory
//! controller, the cgroup tree (the `cgroups` verb), and the cgroupfs reads and writes the
//! verbs' cgroup modes use: group directories by inode (`stat --by-cgroup`,
//! [`crate::stat::charged`]), writing a knob and the mount a group is under (`evict --cgroup`,
//! [`crate::evict::evict_cgroup`]).
//!
//! Both hierarchies report the same [`FileCache`] figures, hierarchical (a group includes its
//! descendants): v2's `memory.stat` is hierarchical itself; v1's `total_*` lines are (v1's plain
//! lines count the group alone). A group is v2 when it has `cgroup.controllers`, else v1.
//!
//! Everything here reads and writes cgroupfs files with ordinary `read`/`write`: no `unsafe`.

pub mod container;
pub mod kube;
mod mounts;
mod rank;
pub(crate) use mounts::{cgroup_inodes, mount_of};
pub use mounts::{
    cgroup_name, group_dir, memory_mounts, own_memory_cgroup, parse_memory_mounts,
    parse_proc_cgroup, resolve, MemoryMount,
};
pub use rank::{children_file_bytes, rank, SortKey};

use crate::error::{FileError, Op};
use crate::verb::{Observer, Outcome, Tally};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Which cgroup hierarchy a group belongs to.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hierarchy {
    /// cgroup v1's memory controller (`/sys/fs/cgroup/memory/...`).
    V1,
    /// The unified hierarchy (cgroup v2) with the memory controller enabled.
    V2,
}

impl Hierarchy {
    /// The hierarchy of the group at `dir`: v2 when it has `cgroup.controllers`.
    pub fn of(dir: &Path) -> Hierarchy {
        if dir.join("cgroup.controllers").exists() {
            Hierarchy::V2
        } else {
            Hierarchy::V1
        }
    }
}

/// A cgroup's file cache, from its `memory.stat`, in bytes (hierarchical: descendants
/// included).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileCache {
    /// File-backed pages charged to the group, shmem/tmpfs included (v2 `file`, v1 `cache`).
    pub file_bytes: u64,
    /// Dirty file pages (v2 `file_dirty`, v1 `dirty`).
    pub dirty_bytes: u64,
    /// File pages under writeback (v2 `file_writeback`, v1 `writeback`).
    pub writeback_bytes: u64,
    /// File pages mapped into processes (v2 `file_mapped`, v1 `mapped_file`).
    pub mapped_bytes: u64,
    /// File pages on the active LRU list (`active_file`).
    pub active_bytes: u64,
    /// File pages on the inactive LRU list, the first to be reclaimed (`inactive_file`).
    pub inactive_bytes: u64,
    /// Of `file_bytes`, shmem and tmpfs pages (`shmem`): they cannot be dropped, only swapped.
    pub shmem_bytes: u64,
    /// Refaults of file pages: evicted pages read again soon after (`workingset_refault_file`;
    /// a count of pages, not bytes). Null when the kernel does not report it (v1 before 5.9).
    pub workingset_refaults: Option<u64>,
}

impl FileCache {
    /// Parses `memory.stat` text of hierarchy `h`. Unknown lines are ignored; missing ones are 0.
    ///
    /// ```
    /// use pagewise_core::cgroup::{FileCache, Hierarchy};
    /// let v2 = "anon 4096\nfile 81920\nfile_dirty 8192\nfile_writeback 0\nfile_mapped 4096\n\
    ///           shmem 0\nactive_file 40960\ninactive_file 40960\nworkingset_refault_file 3\n";
    /// let c = FileCache::parse(v2, Hierarchy::V2);
    /// assert_eq!((c.file_bytes, c.dirty_bytes, c.workingset_refaults), (81920, 8192, Some(3)));
    /// ```
    pub fn parse(text: &str, h: Hierarchy) -> FileCache {
        let mut c = FileCache::default();
        // v1: the `total_*` lines are hierarchical (as v2's are); take them when present.
        let v1_total = h == Hierarchy::V1 && text.lines().any(|l| l.starts_with("total_cache "));
        for line in text.lines() {
            let Some((key, value)) = line.split_once(' ') else {
                continue;
            };
            let Ok(v) = value.trim().parse::<u64>() else {
                continue;
            };
            let key = match h {
                Hierarchy::V1 if v1_total => match key.strip_prefix("total_") {
                    Some(k) => k,
                    None => continue,
                },
                _ => key,
            };
            let slot = match (h, key) {
                (Hierarchy::V2, "file") | (Hierarchy::V1, "cache") => &mut c.file_bytes,
                (Hierarchy::V2, "file_dirty") | (Hierarchy::V1, "dirty") => &mut c.dirty_bytes,
                (Hierarchy::V2, "file_writeback") | (Hierarchy::V1, "writeback") => {
                    &mut c.writeback_bytes
                }
                (Hierarchy::V2, "file_mapped") | (Hierarchy::V1, "mapped_file") => {
                    &mut c.mapped_bytes
                }
                (_, "active_file") => &mut c.active_bytes,
                (_, "inactive_file") => &mut c.inactive_bytes,
                (_, "shmem") => &mut c.shmem_bytes,
                // `workingset_refault` before 5.9 counted file refaults only.
                (_, "workingset_refault_file") => {
                    c.workingset_refaults = Some(v);
                    continue;
                }
                (_, "workingset_refault") => {
                    c.workingset_refaults.get_or_insert(v);
                    continue;
                }
                _ => continue,
            };
            *slot = v;
        }
        c
    }

    /// Reads and parses `DIR/memory.stat`.
    pub fn read(dir: &Path) -> Result<FileCache, FileError> {
        let p = dir.join("memory.stat");
        let text = std::fs::read_to_string(&p).map_err(|e| FileError::io(&p, Op::Read, &e))?;
        Ok(FileCache::parse(&text, Hierarchy::of(dir)))
    }
}

/// A group directory to write control files of, checked to be one: opened `O_DIRECTORY |
/// O_NOFOLLOW`, on a cgroup file system (fstatfs: `CGROUP2_SUPER_MAGIC` or
/// `CGROUP_SUPER_MAGIC`), its files opened relative to that descriptor with `O_NOFOLLOW`. A
/// directory elsewhere (an ordinary one holding a `memory.stat`, a tmpfs) is refused before
/// anything is read or written in it: a symlink planted at a control file's name there could
/// point anywhere.
#[derive(Debug)]
pub struct CgroupDir {
    fd: std::os::fd::OwnedFd,
    path: PathBuf,
    hierarchy: Hierarchy,
}

impl CgroupDir {
    /// Opens the group directory `path` (as [`resolve`] gives it) and checks its file system.
    pub fn open(path: &Path) -> Result<CgroupDir, crate::Error> {
        use std::os::fd::AsFd;
        let how = crate::sys::OpenFlags {
            directory: true,
            nofollow: true,
            ..Default::default()
        };
        let fd = crate::sys::open_path(path, how).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR)
                if crate::sys::stat_path(path, false).is_ok_and(|s| s.is_symlink()) =>
            {
                crate::Error::Invalid {
                    what: "cgroup",
                    message: format!(
                        "{}: is a symlink: give the cgroup directory itself; nothing written",
                        path.display()
                    ),
                }
            }
            _ => crate::Error::Io {
                path: path.to_path_buf(),
                op: Op::OpenDirectory,
                source: e,
            },
        })?;
        let f_type = crate::sys::fs_type(fd.as_fd()).map_err(|e| crate::Error::Io {
            path: path.to_path_buf(),
            op: Op::Fstat,
            source: e,
        })?;
        let hierarchy = match f_type {
            crate::sys::CGROUP2_SUPER_MAGIC => Hierarchy::V2,
            crate::sys::CGROUP_SUPER_MAGIC => Hierarchy::V1,
            other => {
                let what = match crate::sys::fs_type_name(other) {
                    Some(name) => format!("{name}, f_type {other:#x}"),
                    None => format!("f_type {other:#x}"),
                };
                return Err(crate::Error::Invalid {
                    what: "cgroup",
                    message: format!(
                        "{}: not a cgroup file system ({what}); nothing written",
                        path.display()
                    ),
                });
            }
        };
        Ok(CgroupDir {
            fd,
            path: path.to_path_buf(),
            hierarchy,
        })
    }

    /// The directory as opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// v1 or v2, from the file system's type.
    pub fn hierarchy(&self) -> Hierarchy {
        self.hierarchy
    }

    /// Reads and parses its `memory.stat` (opened relative to the directory, `O_NOFOLLOW`).
    pub fn file_cache(&self) -> Result<FileCache, FileError> {
        use std::io::Read;
        use std::os::fd::AsFd;
        let p = self.path.join("memory.stat");
        let mut text = String::new();
        crate::sys::open_read_at(self.fd.as_fd(), "memory.stat".as_ref())
            .and_then(|fd| std::fs::File::from(fd).read_to_string(&mut text))
            .map_err(|e| FileError::io(&p, Op::Read, &e))?;
        Ok(FileCache::parse(&text, self.hierarchy))
    }

    /// Writes `value` to the control file `knob` in one write(2) (opened relative to the
    /// directory, `O_WRONLY | O_NOFOLLOW`).
    pub fn write_knob(&self, knob: &str, value: &str) -> Result<(), FileError> {
        use std::os::fd::AsFd;
        let p = self.path.join(knob);
        let fd = crate::sys::open_write_at(self.fd.as_fd(), knob.as_ref())
            .map_err(|e| FileError::io(&p, Op::Open, &e))?;
        // One write(2): the kernel parses the whole value at once.
        std::fs::File::from(fd)
            .write(value.as_bytes())
            .map(|_| ())
            .map_err(|e| FileError::io(&p, Op::Write, &e))
    }
}

/// Options of `cgroups`.
#[derive(Debug, Clone, Default)]
pub struct CgroupsOptions {
    /// The group whose tree to list: a directory of a cgroup filesystem, or a cgroup path
    /// under the memory hierarchy (default: the whole memory hierarchy, v1's memory controller
    /// first, else v2).
    pub root: Option<PathBuf>,
    /// Levels below the root to list (default: all; 0 = the root alone).
    pub max_depth: Option<usize>,
}

impl CgroupsOptions {
    /// Checks the options (nothing to check beyond what [`cgroups`] resolves).
    pub fn validate(&self) -> Result<(), crate::Error> {
        Ok(())
    }
    /// The group directory the tree starts at.
    pub fn root_dir(&self) -> Result<PathBuf, crate::Error> {
        match &self.root {
            Some(r) => resolve(r),
            None => memory_mounts()
                .into_iter()
                .next()
                .map(|m| m.mount_point)
                .ok_or_else(|| crate::Error::Invalid {
                    what: "cgroup",
                    message: "no memory cgroup hierarchy is mounted (neither v1's memory controller nor v2 with memory)".into(),
                }),
        }
    }
}

/// One cgroup's line of a `cgroups` report.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct CgroupStat {
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    /// The group's directory.
    pub path: PathBuf,
    /// Its cgroup path (`/process_api/x`; `/` for the hierarchy's root).
    pub cgroup: String,
    /// Levels below the listed root (0 for the root).
    pub depth: usize,
    #[serde(flatten)]
    /// Its file cache (descendants included).
    pub cache: FileCache,
}

/// What `cgroups` found.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct CgroupsReport {
    /// The hierarchy listed.
    pub hierarchy: Hierarchy,
    /// The groups, parents before their children (directory order within a parent).
    pub groups: Vec<CgroupStat>,
    /// Errors, notices, elapsed time.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Lists the cgroup tree under `options.root` with each group's file cache.
///
/// A group that disappears while it is listed is left out; one whose `memory.stat` cannot be
/// read is a counted error. v2 groups without the memory controller enabled (no
/// `memory.stat`, the v2 root among them) are left out with a notice.
pub fn cgroups(
    options: &CgroupsOptions,
    observer: &dyn Observer,
) -> Result<CgroupsReport, crate::Error> {
    options.validate()?;
    let root = options.root_dir()?;
    let hierarchy = Hierarchy::of(&root);
    let mounts = memory_mounts();
    let tally = Tally::new();
    let mut groups = Vec::new();
    let mut stack = vec![(root, 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if tally.stop_requested(observer) {
            break;
        }
        match FileCache::read(&dir) {
            Ok(cache) => {
                observer.progress(1, cache.file_bytes);
                groups.push(CgroupStat {
                    cgroup: cgroup_name(&dir, &mounts),
                    path: dir.clone(),
                    depth,
                    cache,
                });
            }
            Err(e) if e.errno == Some(libc::ENOENT) => {
                if dir.exists() {
                    tally.notice(
                        "v2 groups without the memory controller (no memory.stat) are left out",
                    );
                }
            }
            // Removed while it was read: cgroupfs answers ENODEV for the files of a group
            // being removed (a parallel test's group was reported as an error, exit 2).
            Err(e) if e.errno == Some(libc::ENODEV) => continue,
            Err(e) => tally.error(e),
        }
        if options.max_depth.is_some_and(|m| depth >= m) {
            continue;
        }
        let mut children: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect(),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => {
                tally.error(FileError::io(&dir, Op::Readdir, &e));
                continue;
            }
        };
        children.sort();
        // Popped in name order.
        stack.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
    }
    Ok(CgroupsReport {
        hierarchy,
        groups,
        outcome: tally.finish(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "cache 45510656\nrss 132079616\nshmem 0\nmapped_file 1208320\n\
dirty 24760320\nwriteback 0\nworkingset_refault_file 5062\ninactive_file 24739840\n\
active_file 20770816\ntotal_cache 55510656\ntotal_shmem 4096\ntotal_mapped_file 1208320\n\
total_dirty 24760320\ntotal_writeback 8192\ntotal_workingset_refault_file 6000\n\
total_inactive_file 34739840\ntotal_active_file 20770816\n";

    #[test]
    fn v1_takes_the_hierarchical_total_lines() {
        let c = FileCache::parse(V1, Hierarchy::V1);
        assert_eq!(
            c,
            FileCache {
                file_bytes: 55510656,
                dirty_bytes: 24760320,
                writeback_bytes: 8192,
                mapped_bytes: 1208320,
                active_bytes: 20770816,
                inactive_bytes: 34739840,
                shmem_bytes: 4096,
                workingset_refaults: Some(6000),
            }
        );
    }

    #[test]
    fn v1_without_totals_and_old_refault_name() {
        let c = FileCache::parse(
            "cache 8192\ndirty 4096\nworkingset_refault 7\n",
            Hierarchy::V1,
        );
        assert_eq!(c.file_bytes, 8192);
        assert_eq!(c.dirty_bytes, 4096);
        assert_eq!(c.workingset_refaults, Some(7));
        assert_eq!(
            FileCache::parse("cache 1\n", Hierarchy::V1).workingset_refaults,
            None
        );
    }

    #[test]
    fn v2_memory_stat() {
        // As a 6.x kernel writes it (abridged).
        let text = "anon 1052672\nfile 2654208\nkernel 389120\nshmem 0\nfile_mapped 1187840\n\
file_dirty 4096\nfile_writeback 0\nanon_thp 0\ninactive_anon 1040384\nactive_anon 12288\n\
inactive_file 1449984\nactive_file 1204224\nworkingset_refault_anon 0\n\
workingset_refault_file 12\nworkingset_activate_file 2\n";
        let c = FileCache::parse(text, Hierarchy::V2);
        assert_eq!(c.file_bytes, 2654208);
        assert_eq!(c.mapped_bytes, 1187840);
        assert_eq!(c.dirty_bytes, 4096);
        assert_eq!(c.active_bytes, 1204224);
        assert_eq!(c.inactive_bytes, 1449984);
        assert_eq!(c.workingset_refaults, Some(12));
    }

    #[test]
    fn proc_cgroup_prefers_v1_memory_then_v2() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n";
        assert_eq!(
            parse_proc_cgroup(hybrid),
            Some((Hierarchy::V1, "/process_api/abc".into()))
        );
        let unified = "0::/user.slice/session-1.scope\n";
        assert_eq!(
            parse_proc_cgroup(unified),
            Some((Hierarchy::V2, "/user.slice/session-1.scope".into()))
        );
        assert_eq!(parse_proc_cgroup("3:cpu,memory:/a\n").unwrap().1, "/a");
    }

    #[test]
    fn mountinfo_finds_v1_memory_and_v2_with_memory() {
        let mi = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n\
31 25 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
33 25 0:29 /ns /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n";
        let m = parse_memory_mounts(mi, &|p| {
            Some(
                if p.ends_with("unified") {
                    "hugetlb"
                } else {
                    "cpu memory io"
                }
                .into(),
            )
        });
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].hierarchy, Hierarchy::V1);
        assert_eq!(m[0].mount_point, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(m[1].hierarchy, Hierarchy::V2);
        assert_eq!(m[1].mount_point, Path::new("/mnt/cg two"));
        assert_eq!(m[1].mount_root, "/ns");
    }

    #[test]
    fn the_root_group_is_the_mount_point_itself() {
        let m = Path::new("/sys/fs/cgroup");
        // A process in the root cgroup (a VM's init, a container without its own group).
        for root in ["", "/", "//"] {
            assert_eq!(group_dir(m, root).as_os_str(), "/sys/fs/cgroup", "{root:?}");
        }
        assert_eq!(group_dir(m, "/a/b"), Path::new("/sys/fs/cgroup/a/b"));
        // /proc/PID/cgroup names groups from the namespace's root, the mount's root.
        let mount = MemoryMount {
            hierarchy: Hierarchy::V2,
            mount_point: m.into(),
            mount_root: "/ns".into(),
        };
        assert_eq!(mount.dir_of("/ns/a"), Path::new("/sys/fs/cgroup/a"));
        assert_eq!(mount.dir_of("/ns").as_os_str(), "/sys/fs/cgroup");
        assert_eq!(mount.dir_of("/other"), Path::new("/sys/fs/cgroup/other"));
        assert_eq!(group_dir(m, "a/b/").as_os_str(), "/sys/fs/cgroup/a/b");
    }

    #[test]
    fn names_are_relative_to_their_mount() {
        let mounts = vec![MemoryMount {
            hierarchy: Hierarchy::V1,
            mount_point: "/sys/fs/cgroup/memory".into(),
            mount_root: "/".into(),
        }];
        assert_eq!(
            cgroup_name(Path::new("/sys/fs/cgroup/memory"), &mounts),
            "/"
        );
        assert_eq!(
            cgroup_name(Path::new("/sys/fs/cgroup/memory/a/b"), &mounts),
            "/a/b"
        );
    }
}
