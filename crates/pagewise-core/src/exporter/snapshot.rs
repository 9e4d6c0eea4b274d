//! One snapshot of what the exporter serves ([`Snapshot`]): each configured path's `stat`
//! with its top files, the cgroups' file cache, the machine's totals; and [`collect`], which
//! measures one.
//!
//! cgroup figures are hierarchical (a group's include its descendants'), so each listed group
//! also gets its *self* file cache: its figure less its listed children's. Within a snapshot
//! the self figures of all listed groups add up to the listed root's figure (the deepest listed
//! groups keep their descendants'), which is what a PromQL `sum()` needs.

use crate::cgroup::container::{self, Owner};
use crate::cgroup::kube::KubeNames;
use crate::cgroup::{self, CgroupStat, CgroupsOptions, Hierarchy};
use crate::stat::{self, FileStat, StatOptions, Totals};
use crate::verb::FileResult;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use super::ExporterOptions;

/// One path's figures.
#[derive(Debug, Clone)]
pub struct PathSnapshot {
    /// The path as configured.
    pub path: PathBuf,
    /// Its totals (`stat`).
    pub totals: Totals,
    /// The files with the most cached bytes, most first (`top` of them).
    pub top: Vec<FileStat>,
    /// The path could not be walked at all.
    pub failed: bool,
}

/// The machine's figures from `/proc/meminfo` and `/proc/vmstat`, in bytes.
#[derive(Debug, Clone, Default)]
pub struct MachineSnapshot {
    /// `Cached` (page cache, shmem included; buffers not).
    pub cached_bytes: Option<u64>,
    /// `Buffers`.
    pub buffers_bytes: Option<u64>,
    /// `Dirty`.
    pub dirty_bytes: Option<u64>,
    /// `Writeback`.
    pub writeback_bytes: Option<u64>,
    /// `workingset_refault_file` (count of pages; `workingset_refault` before 5.9).
    pub refaults: Option<u64>,
}

impl MachineSnapshot {
    /// Parses `/proc/meminfo` and `/proc/vmstat` text.
    pub fn parse(meminfo: &str, vmstat: &str) -> MachineSnapshot {
        let kib = |key: &str| crate::procfs::meminfo_bytes(meminfo, key);
        let vm = |key: &str| crate::procfs::vmstat_value(vmstat, key);
        MachineSnapshot {
            cached_bytes: kib("Cached"),
            buffers_bytes: kib("Buffers"),
            dirty_bytes: kib("Dirty"),
            writeback_bytes: kib("Writeback"),
            refaults: vm("workingset_refault_file").or_else(|| vm("workingset_refault")),
        }
    }
    /// Reads this machine's.
    pub fn read() -> MachineSnapshot {
        let (meminfo, vmstat) = crate::procfs::meminfo_and_vmstat();
        MachineSnapshot::parse(&meminfo, &vmstat)
    }
}

/// One listed cgroup: its figures, where it sits in the listed tree, and who owns it.
#[derive(Debug, Clone)]
pub struct CgroupEntry {
    /// Its figures (`memory.stat`, descendants included).
    pub stat: CgroupStat,
    /// No child of it is listed (a leaf, or at the depth limit).
    pub leaf: bool,
    /// Its file cache less its listed children's (0 if they were read larger: the groups are
    /// read one after another, not at one instant).
    pub self_file_bytes: u64,
    /// The container, pod or unit its path names.
    pub owner: Owner,
}

/// Everything one refresh measured.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When the refresh finished.
    pub taken_at: Instant,
    /// The same, as wall-clock time.
    pub taken_at_wall: SystemTime,
    /// How long it took, in seconds.
    pub duration_s: f64,
    /// Per path.
    pub paths: Vec<PathSnapshot>,
    /// The cgroups' hierarchy (None: cgroups off or none mounted).
    pub hierarchy: Option<Hierarchy>,
    /// Per cgroup, parents before their children; those the include/exclude regexes keep.
    pub cgroups: Vec<CgroupEntry>,
    /// Machine totals (None: not asked for, [`ExporterOptions::memory`]).
    pub machine: Option<MachineSnapshot>,
    /// Per-file and per-cgroup errors of this refresh, and paths or trees that failed.
    pub errors: u64,
    /// The first [`MAX_PROBLEMS`] of them, worded (`path: op failed: message`).
    pub problems: Vec<String>,
    /// Each cgroup's page-cache traffic since the exporter started (`cgroup_rates`).
    pub rates: Option<super::rates::RatesSnapshot>,
    /// The Kubernetes names of this node's pods and containers (empty without Kubernetes).
    pub kube: std::sync::Arc<KubeNames>,
}

impl Snapshot {
    /// One line per configured path with files whose residency could not be measured (not
    /// errors: the walk went on), saying how many and why: `PATH: N of M files: residency
    /// unknown (...): REASON`. Where none of a path's files could be measured it has no cached
    /// sample at all, which this line explains.
    pub fn unmeasured(&self) -> Vec<String> {
        self.paths
            .iter()
            .filter(|p| !p.failed && p.totals.unknown_files > 0)
            .map(|p| {
                let t = &p.totals;
                format!(
                    "{}: {} of {} files: residency unknown, so no pagewise_path_cached_bytes \
                     sample for it: {} (run as root, or grant CAP_DAC_OVERRIDE: the kernel \
                     answers only for files the caller owns or may write)",
                    p.path.display(),
                    t.unknown_files,
                    t.files,
                    t.unknown_reason.unwrap_or("the kernel did not say")
                )
            })
            .collect()
    }
}

/// Errors a snapshot keeps worded.
pub const MAX_PROBLEMS: usize = 20;

fn note(problems: &mut Vec<String>, text: String) {
    if problems.len() < MAX_PROBLEMS {
        problems.push(text);
    }
}

fn cmp_cached(a: &FileStat, b: &FileStat) -> std::cmp::Ordering {
    b.residency
        .cached
        .unwrap_or(0)
        .cmp(&a.residency.cached.unwrap_or(0))
        .then_with(|| a.path.cmp(&b.path))
}

/// Measures one snapshot (blocking: walks every path).
pub fn collect(options: &ExporterOptions) -> Snapshot {
    let start = Instant::now();
    let mut errors = 0;
    let mut problems = Vec::new();
    let paths = options
        .paths
        .iter()
        .map(|p| collect_path(p, options, &mut errors, &mut problems))
        .collect();
    let (hierarchy, cgroups) = if options.cgroups {
        collect_cgroups(options, &mut errors, &mut problems)
    } else {
        (None, Vec::new())
    };
    let kube = match &options.kubelet_logs {
        Some(dir) if options.cgroups => KubeNames::read(&options.on_host(dir)),
        _ => KubeNames::default(),
    };
    Snapshot {
        taken_at: Instant::now(),
        taken_at_wall: SystemTime::now(),
        duration_s: start.elapsed().as_secs_f64(),
        paths,
        hierarchy,
        cgroups,
        machine: options.memory.then(MachineSnapshot::read),
        errors,
        problems,
        rates: None,
        kube: std::sync::Arc::new(kube),
    }
}

/// One configured path: its `stat`, and its `top` files with the most cached bytes (kept
/// bounded while the walk runs). Its errors are counted in `errors` and worded in `problems`.
fn collect_path(
    p: &Path,
    options: &ExporterOptions,
    errors: &mut u64,
    problems: &mut Vec<String>,
) -> PathSnapshot {
    let top_n = options.top;
    let keep: Mutex<Vec<FileStat>> = Mutex::new(Vec::new());
    let on_file = |r: FileResult| {
        let FileResult::Stat(f) = r else { return };
        if f.residency.cached.unwrap_or(0) == 0 {
            return;
        }
        let mut k = keep.lock().unwrap();
        k.push(f);
        // Bounded memory: prune to the best N whenever the buffer doubles.
        if k.len() >= 2 * top_n.max(64) {
            k.sort_by(cmp_cached);
            k.truncate(top_n);
        }
    };
    let observer = crate::Watch {
        progress: None,
        on_file: Some(on_file),
        cancel: None,
    };
    let opts = StatOptions {
        roots: vec![options.on_host(p)],
        walk: options.walk.clone(),
        files: top_n > 0,
        ..StatOptions::default()
    };
    match stat::stat(&opts, &observer) {
        Ok(r) => {
            let failed = r.roots.is_empty();
            // A root that failed is one error of the walk already.
            *errors += r.outcome.error_count.max(failed as u64);
            for e in &r.outcome.errors {
                note(problems, e.to_string());
            }
            let mut top = keep.into_inner().unwrap();
            top.sort_by(cmp_cached);
            top.truncate(top_n);
            // Files labelled as the configured path names them (not beneath the rootfs).
            if let Some(root) = &options.rootfs {
                for f in &mut top {
                    if let Ok(rel) = f.path.strip_prefix(root) {
                        f.path = Path::new("/").join(rel);
                    }
                }
            }
            PathSnapshot {
                path: p.to_path_buf(),
                totals: r.total,
                top,
                failed,
            }
        }
        Err(e) => {
            *errors += 1;
            note(problems, format!("{}: {e}", p.display()));
            PathSnapshot {
                path: p.to_path_buf(),
                totals: Totals::default(),
                top: Vec::new(),
                failed: true,
            }
        }
    }
}

/// The groups reported: those down to `depth`, and deeper the ones a container or pod owns
/// (with their ancestors, so the tree stays whole and self figures add up).
fn listed(groups: Vec<CgroupStat>, depth: usize) -> Vec<CgroupStat> {
    let deep_owned: Vec<bool> = groups
        .iter()
        .map(|g| {
            g.depth > depth && {
                let o = container::owner(&g.cgroup);
                o.container.is_some() || o.pod_uid.is_some()
            }
        })
        .collect();
    // Every path above a deep owned group (its ancestors are listed too).
    let mut above = std::collections::HashSet::new();
    for g in groups
        .iter()
        .zip(&deep_owned)
        .filter(|(_, &o)| o)
        .map(|(g, _)| g)
    {
        let mut p = g.cgroup.as_str();
        while let Some((parent, _)) = p.rsplit_once('/') {
            if !above.insert(if parent.is_empty() { "/" } else { parent }) {
                break;
            }
            p = parent;
        }
    }
    let keep: Vec<bool> = groups
        .iter()
        .zip(&deep_owned)
        .map(|(g, &o)| g.depth <= depth || o || above.contains(g.cgroup.trim_end_matches('/')))
        .collect();
    groups
        .into_iter()
        .zip(keep)
        .filter_map(|(g, k)| k.then_some(g))
        .collect()
}

/// The listed groups (parents before children) with their place in the tree and self figure,
/// then those `filter` keeps.
pub(super) fn entries(groups: Vec<CgroupStat>, filter: &super::CgroupFilter) -> Vec<CgroupEntry> {
    let children = cgroup::children_file_bytes(&groups);
    groups
        .into_iter()
        .zip(children)
        .filter(|(g, _)| filter.keeps(&g.cgroup))
        .map(|(g, children)| CgroupEntry {
            leaf: children.is_none(),
            self_file_bytes: g.cache.file_bytes.saturating_sub(children.unwrap_or(0)),
            owner: container::owner(&g.cgroup),
            stat: g,
        })
        .collect()
}

/// The cgroups down to the configured depth, and their hierarchy (None and nothing when no
/// memory hierarchy is mounted: an error only when a root was configured).
fn collect_cgroups(
    options: &ExporterOptions,
    errors: &mut u64,
    problems: &mut Vec<String>,
) -> (Option<Hierarchy>, Vec<CgroupEntry>) {
    // The whole tree is walked: containers' and pods' groups are listed at any depth (a
    // Kubernetes container sits 3 or 4 levels down), others to the configured depth.
    let o = CgroupsOptions {
        root: options.cgroup_root.clone(),
        max_depth: None,
    };
    match cgroup::cgroups(&o, &()) {
        Ok(r) => {
            *errors += r.outcome.error_count;
            for e in &r.outcome.errors {
                note(problems, e.to_string());
            }
            // validate() compiled them already.
            let filter = options.cgroup_filter().unwrap_or_default();
            let groups = listed(r.groups, options.cgroup_depth);
            (Some(r.hierarchy), entries(groups, &filter))
        }
        Err(e) => {
            // No memory hierarchy mounted is not an error when none was asked for.
            if options.cgroup_root.is_some() {
                *errors += 1;
                note(problems, format!("cgroups: {e}"));
            }
            (None, Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_vmstat_parse() {
        let m = MachineSnapshot::parse(
            "Cached:   2048 kB\nSwapCached: 1 kB\n",
            "workingset_refault 9\n",
        );
        assert_eq!(m.cached_bytes, Some(2 << 20));
        assert_eq!(m.dirty_bytes, None);
        assert_eq!(m.refaults, Some(9));
    }

    fn group(path: &str, depth: usize, file_bytes: u64) -> CgroupStat {
        CgroupStat {
            path: format!("/sys/fs/cgroup{path}").trim_end_matches('/').into(),
            cgroup: path.into(),
            depth,
            cache: crate::cgroup::FileCache {
                file_bytes,
                ..Default::default()
            },
        }
    }

    #[test]
    fn deep_containers_are_listed_with_the_groups_above_them_only() {
        let id = "3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f3f4e5a6b7c8d9e0f";
        let pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0c1d2e3f_4a5b_6c7d_8e9f_0a1b2c3d4e5f.slice";
        let ctr = format!("{pod}/cri-containerd-{id}.scope");
        let groups = vec![
            group("/", 0, 9),
            group("/kubepods.slice", 1, 9),
            group("/kubepods.slice/kubepods-burstable.slice", 2, 9),
            group(pod, 3, 9),
            group(&ctr, 4, 9),
            group("/system.slice", 1, 1),
            group("/system.slice/a.service", 2, 1),
            group("/system.slice/a.service/deep", 3, 1),
        ];
        let kept: Vec<String> = listed(groups, 1).into_iter().map(|g| g.cgroup).collect();
        assert_eq!(
            kept,
            [
                "/",
                "/kubepods.slice",
                "/kubepods.slice/kubepods-burstable.slice",
                pod,
                ctr.as_str(),
                "/system.slice",
            ]
        );
    }

    #[test]
    fn self_figures_add_up_to_the_root_and_filters_only_drop_series() {
        let groups = vec![
            group("/", 0, 100),
            group("/a", 1, 60),
            group("/a/x", 2, 50),
            group("/system.slice", 1, 30),
            group("/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope", 2, 5),
        ];
        let all = entries(groups.clone(), &Default::default());
        let sum: u64 = all.iter().map(|e| e.self_file_bytes).sum();
        assert_eq!(sum, 100);
        let by = |c: &str| all.iter().find(|e| e.stat.cgroup == c).unwrap();
        assert_eq!(by("/").self_file_bytes, 10);
        assert_eq!(by("/a").self_file_bytes, 10);
        assert_eq!(by("/system.slice").self_file_bytes, 25);
        assert!(by("/a/x").leaf && !by("/system.slice").leaf && !by("/a").leaf);
        let docker = all
            .iter()
            .find(|e| e.owner.runtime == Some("docker"))
            .unwrap();
        assert_eq!(docker.owner.container.as_deref().map(str::len), Some(64));
        let o = ExporterOptions {
            cgroup_exclude: Some("^/a".into()),
            ..ExporterOptions::default()
        };
        let some = entries(groups, &o.cgroup_filter().unwrap());
        assert_eq!(some.len(), 3);
        // The root's self figure is still its own less all its children's.
        assert_eq!(some[0].self_file_bytes, 10);
    }
}
