//! Rendering a [`Snapshot`] as Prometheus text or OpenMetrics: one family per figure, per
//! configured path (and its top files), per cgroup, for the machine, and the exporter's own
//! health and the snapshot's age.
//!
//! Served over HTTP ([`Mode::Served`]) the exposition also has the scrape counters, the
//! snapshot's age and the `process_*` figures; written once ([`Mode::Written`]: a textfile
//! for node_exporter, `--once`) it has none of those: no scrape reaches pagewise there, an age
//! written is always ~0 (node_exporter's `node_textfile_mtime_seconds` tells the file's), and
//! node_exporter serves its own `process_*` (a textfile's would clash with them).

use super::metrics::{Format, Kind, Writer};
use super::process::ProcessSnapshot;
use super::{BuildInfo, CgroupEntry, Health, PathSnapshot, Snapshot};
use crate::cgroup::container::Owner;
use crate::cgroup::kube::KubeNames;
use crate::cgroup::{CgroupStat, Hierarchy};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

/// A cgroup's label value: its name (`/a/b`, below the hierarchy's root) with the bytes of its
/// directory escaped as [`crate::names::escape`] does (its `cgroup` text is lossy).
fn cgroup_text(c: &CgroupStat) -> String {
    let depth = c.cgroup.split('/').filter(|s| !s.is_empty()).count();
    let parts: Vec<&std::ffi::OsStr> = c.path.iter().filter(|p| p.as_bytes() != b"/").collect();
    if !c.cgroup.starts_with('/') || depth > parts.len() {
        return crate::names::escape(c.cgroup.as_bytes());
    }
    let mut name = Vec::new();
    for p in &parts[parts.len() - depth..] {
        name.push(b'/');
        name.extend_from_slice(p.as_bytes());
    }
    if name.is_empty() {
        name.push(b'/');
    }
    crate::names::escape(&name)
}

/// Label values are names escaped as in tables ([`crate::names::escape`]: control characters
/// and bytes that are not UTF-8 as `\xHH`, `\` as `\\`), so that names differing only in
/// such bytes stay distinct series; the exposition format then escapes `\` and `"` again.
///
/// Writes `snap` in `format`, with the exporter's health and build, as `mode` says.
pub fn render(
    snap: &Snapshot,
    health: &Health,
    build: &BuildInfo,
    mode: Mode,
    format: Format,
) -> String {
    let mut w = Writer::new(format);
    render_paths(&mut w, snap);
    render_top_files(&mut w, snap);
    render_cgroups(&mut w, snap);
    render_rates(&mut w, snap);
    render_machine(&mut w, snap);
    w.family(
        "pagewise_build_info",
        Kind::Gauge,
        "The version and git commit pagewise was built from; always 1.",
    );
    w.sample(
        "pagewise_build_info",
        &[("version", &build.version), ("commit", &build.commit)],
        1.0,
    );
    render_exporter(&mut w, snap, health, mode);
    if let Mode::Served { .. } = mode {
        ProcessSnapshot::read().render(&mut w);
    }
    w.finish()
}

/// How the exposition is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Scraped over HTTP at `now`: scrape counters, the snapshot's age, `process_*`.
    Served {
        /// The scrape's start.
        now: Instant,
    },
    /// Written once (textfile, `--once`): none of those.
    Written,
}

/// A path's label value.
fn path_text(p: &std::path::Path) -> String {
    crate::names::escape(p.as_os_str().as_bytes())
}

/// Whether each configured path could be walked, and its figures (paths that failed have
/// none; a figure no path has is left out).
fn render_paths(w: &mut Writer, snap: &Snapshot) {
    type PathFig = fn(&PathSnapshot) -> Option<u64>;
    let per_path: [(&str, &str, PathFig); 8] = [
        (
            "pagewise_path_size_bytes",
            "Size of the files under the configured path.",
            |p| Some(p.totals.size),
        ),
        (
            "pagewise_path_cached_bytes",
            "Bytes of the path's files in the page cache (cachestat); no sample when the residency of any of its files could not be measured (pagewise_path_unknown_files > 0: never a figure that leaves them out).",
            |p| (p.totals.unknown_files == 0).then_some(p.totals.cached_bytes),
        ),
        (
            "pagewise_path_dirty_bytes",
            "Dirty bytes of the path's files in the page cache.",
            |p| p.totals.dirty_bytes,
        ),
        (
            "pagewise_path_writeback_bytes",
            "Bytes of the path's files under writeback.",
            |p| p.totals.writeback_bytes,
        ),
        (
            "pagewise_path_evicted_bytes",
            "Bytes of the path's files evicted from the page cache (cachestat nr_evicted).",
            |p| p.totals.evicted_bytes,
        ),
        (
            "pagewise_path_recently_evicted_bytes",
            "Bytes of the path's files evicted recently (cachestat nr_recently_evicted).",
            |p| p.totals.recently_evicted_bytes,
        ),
        (
            "pagewise_path_files",
            "Regular files under the configured path.",
            |p| Some(p.totals.files),
        ),
        (
            "pagewise_path_unknown_files",
            "Files whose residency could not be measured (left out of the cached figures).",
            |p| Some(p.totals.unknown_files),
        ),
    ];
    if !snap.paths.is_empty() {
        let name = "pagewise_path_measured";
        w.family(name, Kind::Gauge, "1 when the configured path could be walked in the snapshot, 0 when it could not (missing, unreadable).");
        for p in &snap.paths {
            w.sample(
                name,
                &[("path", &path_text(&p.path))],
                (!p.failed) as u8 as f64,
            );
        }
    }
    for (name, help, f) in per_path {
        if snap.paths.iter().all(|p| p.failed || f(p).is_none()) {
            continue;
        }
        w.family(name, Kind::Gauge, help);
        for p in snap.paths.iter().filter(|p| !p.failed) {
            if let Some(v) = f(p) {
                w.sample(name, &[("path", &path_text(&p.path))], v as f64);
            }
        }
    }
}

/// The top files of each configured path: cached bytes and size.
fn render_top_files(w: &mut Writer, snap: &Snapshot) {
    if snap.paths.iter().all(|p| p.top.is_empty()) {
        return;
    }
    // A file whose residency is unknown has no cached sample (never a 0).
    type FileFig = fn(&crate::stat::FileStat) -> Option<u64>;
    let per_file: [(&str, &str, FileFig); 2] = [
        (
            "pagewise_file_cached_bytes",
            "Cached bytes of the top files of a configured path.",
            |f| f.residency.cached,
        ),
        (
            "pagewise_file_size_bytes",
            "Size of the top files of a configured path.",
            |f| Some(f.size),
        ),
    ];
    for (name, help, fig) in per_file {
        w.family(name, Kind::Gauge, help);
        for p in &snap.paths {
            let root = path_text(&p.path);
            for f in &p.top {
                let labels = [("path", root.as_str()), ("file", &path_text(&f.path))];
                if let Some(v) = fig(f) {
                    w.sample(name, &labels, v as f64);
                }
            }
        }
    }
}

/// A cgroup's labels, as cAdvisor names them where it has the same: `id` (the cgroup's path),
/// `namespace`, `pod`, `container` (the Kubernetes names, from the kubelet's logs), and
/// `runtime`, `container_id`, `pod_uid`, `unit` from the path. None changes when the tree
/// around the cgroup changes shape.
fn owner_labels(id: &str, o: &Owner, kube: &KubeNames) -> Vec<(&'static str, String)> {
    let k = kube.labels(o);
    let known = [
        ("namespace", k.namespace.map(str::to_string)),
        ("pod", k.pod.map(str::to_string)),
        ("container", k.container.map(str::to_string)),
        ("runtime", o.runtime.map(str::to_string)),
        ("container_id", o.container.clone()),
        ("pod_uid", o.pod_uid.clone()),
        ("unit", o.unit.clone()),
    ];
    let mut l = vec![("id", id.to_string())];
    l.extend(known.into_iter().filter_map(|(k, v)| Some((k, v?))));
    l
}

/// A listed cgroup's labels: [`owner_labels`] and its hierarchy.
fn cgroup_labels(
    e: &CgroupEntry,
    h: &'static str,
    kube: &KubeNames,
) -> Vec<(&'static str, String)> {
    let mut l = owner_labels(&cgroup_text(&e.stat), &e.owner, kube);
    l.insert(1, ("hierarchy", h.to_string()));
    l
}

/// The file cache of each cgroup (a figure no cgroup has is left out), and each one's self
/// file cache (its figure less its listed children's).
fn render_cgroups(w: &mut Writer, snap: &Snapshot) {
    if snap.cgroups.is_empty() {
        return;
    }
    let h = match snap.hierarchy {
        Some(Hierarchy::V2) => "v2",
        _ => "v1",
    };
    let labels: Vec<Vec<(&str, String)>> = snap
        .cgroups
        .iter()
        .map(|e| cgroup_labels(e, h, &snap.kube))
        .collect();
    type CgFig = fn(&CgroupEntry) -> Option<u64>;
    let per_cg: [(&str, Kind, &str, CgFig); 9] = [
        ("pagewise_cgroup_file_bytes", Kind::Gauge, "File cache charged to the cgroup, descendants included (memory.stat file / total_cache); sum() double-counts: sum pagewise_cgroup_file_self_bytes instead.", |e| Some(e.stat.cache.file_bytes)),
        ("pagewise_cgroup_file_self_bytes", Kind::Gauge, "File cache of the cgroup less its listed children's (the deepest listed keep their descendants'): sums to the listed root's pagewise_cgroup_file_bytes.", |e| Some(e.self_file_bytes)),
        ("pagewise_cgroup_file_dirty_bytes", Kind::Gauge, "Dirty file cache of the cgroup, descendants included.", |e| Some(e.stat.cache.dirty_bytes)),
        ("pagewise_cgroup_file_writeback_bytes", Kind::Gauge, "File cache of the cgroup under writeback, descendants included.", |e| Some(e.stat.cache.writeback_bytes)),
        ("pagewise_cgroup_file_mapped_bytes", Kind::Gauge, "File cache of the cgroup mapped into processes, descendants included.", |e| Some(e.stat.cache.mapped_bytes)),
        ("pagewise_cgroup_file_active_bytes", Kind::Gauge, "File cache of the cgroup on the active LRU list, descendants included.", |e| Some(e.stat.cache.active_bytes)),
        ("pagewise_cgroup_file_inactive_bytes", Kind::Gauge, "File cache of the cgroup on the inactive LRU list, descendants included.", |e| Some(e.stat.cache.inactive_bytes)),
        ("pagewise_cgroup_shmem_bytes", Kind::Gauge, "Shmem and tmpfs pages of the cgroup (part of its file cache), descendants included.", |e| Some(e.stat.cache.shmem_bytes)),
        ("pagewise_cgroup_file_refaults_total", Kind::Counter, "Refaults of file pages in the cgroup (workingset_refault_file, pages), descendants included.", |e| e.stat.cache.workingset_refaults),
    ];
    for (name, kind, help, f) in per_cg {
        if snap.cgroups.iter().all(|e| f(e).is_none()) {
            continue;
        }
        w.family(name, kind, help);
        for (e, l) in snap.cgroups.iter().zip(&labels) {
            if let Some(v) = f(e) {
                let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
                w.sample(name, &l, v as f64);
            }
        }
    }
}

/// Each cgroup's page-cache traffic since the exporter started (`cgroup_rates`).
fn render_rates(w: &mut Writer, snap: &Snapshot) {
    let Some(r) = &snap.rates else { return };
    type Fig = fn(&super::rates::Traffic) -> u64;
    let families: [(&str, &str, Fig, bool); 3] = [
        ("pagewise_cgroup_added_bytes_total", "Bytes the cgroup's processes added to the page cache (reads and read-ahead; mm_filemap_add_to_page_cache) since the exporter started.", |t| t.added_bytes, true),
        ("pagewise_cgroup_dirtied_bytes_total", "Bytes of page cache the cgroup's processes made dirty (writeback_dirty_folio) since the exporter started.", |t| t.dirtied_bytes, r.dirtied_counted),
        ("pagewise_cgroup_evicted_bytes_total", "Bytes removed from the page cache while the cgroup's processes ran (mm_filemap_delete_from_page_cache: reclaim, truncation, eviction) since the exporter started.", |t| t.evicted_bytes, true),
    ];
    for (name, help, f, known) in families {
        if !known {
            continue;
        }
        w.family(name, Kind::Counter, help);
        for (cgroup, t) in &r.groups {
            let l = owner_labels(cgroup, &t.owner, &snap.kube);
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            w.sample(name, &l, f(t) as f64);
        }
    }
    w.family(
        "pagewise_cgroup_rates_lost_events_total",
        Kind::Counter,
        "Page-cache events the kernel dropped (its ring buffer full): the traffic counters are short by them.",
    );
    w.sample(
        "pagewise_cgroup_rates_lost_events_total",
        &[],
        r.lost_events as f64,
    );
}

/// The machine's totals, those /proc has.
fn render_machine(w: &mut Writer, snap: &Snapshot) {
    let Some(m) = &snap.machine else { return };
    for (name, kind, help, v) in [
        (
            "pagewise_memory_cached_bytes",
            Kind::Gauge,
            "Page cache of the machine (/proc/meminfo Cached).",
            m.cached_bytes,
        ),
        (
            "pagewise_memory_buffers_bytes",
            Kind::Gauge,
            "Block device buffers of the machine (/proc/meminfo Buffers).",
            m.buffers_bytes,
        ),
        (
            "pagewise_memory_dirty_bytes",
            Kind::Gauge,
            "Dirty page cache of the machine (/proc/meminfo Dirty).",
            m.dirty_bytes,
        ),
        (
            "pagewise_memory_writeback_bytes",
            Kind::Gauge,
            "Page cache under writeback (/proc/meminfo Writeback).",
            m.writeback_bytes,
        ),
        (
            "pagewise_memory_file_refaults_total",
            Kind::Counter,
            "Refaults of file pages on the machine (/proc/vmstat workingset_refault_file, pages).",
            m.refaults,
        ),
    ] {
        if let Some(v) = v {
            w.single(name, kind, help, v as f64);
        }
    }
}

/// The exporter itself: the snapshot's time (and age, served), its refresh, and `health`.
fn render_exporter(w: &mut Writer, snap: &Snapshot, health: &Health, mode: Mode) {
    if let Mode::Served { now } = mode {
        let age = now.saturating_duration_since(snap.taken_at).as_secs_f64();
        w.single(
            "pagewise_snapshot_age_seconds",
            Kind::Gauge,
            "Age of the snapshot this scrape serves.",
            age,
        );
    }
    let wall = snap
        .taken_at_wall
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    w.single(
        "pagewise_snapshot_timestamp_seconds",
        Kind::Gauge,
        "When the snapshot was taken (Unix time).",
        wall,
    );
    w.single(
        "pagewise_refresh_duration_seconds",
        Kind::Gauge,
        "Duration of the refresh that took the snapshot.",
        snap.duration_s,
    );
    w.single(
        "pagewise_refresh_snapshot_errors",
        Kind::Gauge,
        "Errors of the refresh that took the snapshot (files, cgroups, paths).",
        snap.errors as f64,
    );
    w.single(
        "pagewise_refreshes_total",
        Kind::Counter,
        "Refreshes finished.",
        health.refreshes.load(Ordering::Relaxed) as f64,
    );
    w.single(
        "pagewise_refresh_errors_total",
        Kind::Counter,
        "Errors over all refreshes (files, cgroups, paths).",
        health.refresh_errors.load(Ordering::Relaxed) as f64,
    );
    if let Mode::Written = mode {
        return;
    }
    w.single(
        "pagewise_scrapes_total",
        Kind::Counter,
        "Scrapes served, this one included.",
        health.scrapes.load(Ordering::Relaxed) as f64,
    );
    w.single(
        "pagewise_last_scrape_duration_seconds",
        Kind::Gauge,
        "Duration of the previous scrape (rendering the snapshot).",
        health.last_scrape_ns.load(Ordering::Relaxed) as f64 / 1e9,
    );
}

#[cfg(test)]
mod tests {
    use super::super::MachineSnapshot;
    use super::*;
    use crate::cgroup::FileCache;
    use crate::residency::{MeasuredBy, Residency};
    use crate::stat::{FileStat, Totals};
    use std::time::Duration;

    fn snapshot() -> Snapshot {
        let mut totals = Totals::default();
        let r = Residency {
            bytes: 8192,
            cached: Some(4096),
            dirty: Some(0),
            writeback: Some(0),
            evicted: Some(4096),
            recently_evicted: Some(4096),
            method: MeasuredBy::Cachestat,
            unknown_reason: None,
        };
        totals.add(8192, &r);
        let now = Instant::now();
        Snapshot {
            taken_at: now,
            taken_at_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            duration_s: 0.5,
            paths: vec![PathSnapshot {
                path: "/data".into(),
                totals,
                top: vec![FileStat {
                    path: "/data/a\"b".into(),
                    size: 8192,
                    allocated_bytes: 8192,
                    residency: r,
                    map: None,
                    root: 0,
                }],
                failed: false,
            }],
            hierarchy: Some(Hierarchy::V1),
            cgroups: super::super::snapshot::entries(
                vec![CgroupStat {
                    path: "/sys/fs/cgroup/memory/system.slice/docker-3f4e5a6b7c8d.scope".into(),
                    cgroup: "/system.slice/docker-3f4e5a6b7c8d.scope".into(),
                    depth: 1,
                    cache: FileCache {
                        file_bytes: 1 << 20,
                        workingset_refaults: Some(5),
                        ..FileCache::default()
                    },
                }],
                &Default::default(),
            ),
            machine: Some(MachineSnapshot::parse(
                "Buffers: 10 kB\nCached:  100 kB\nDirty: 4 kB\nWriteback: 0 kB\n",
                "workingset_refault_anon 1\nworkingset_refault_file 42\n",
            )),
            errors: 0,
            problems: Vec::new(),
            rates: Some(super::super::rates::RatesSnapshot {
                groups: vec![(
                    "/system.slice/nginx.service".into(),
                    super::super::rates::Traffic {
                        added_bytes: 1 << 20,
                        dirtied_bytes: 4096,
                        evicted_bytes: 8192,
                        owner: crate::cgroup::container::owner("/system.slice/nginx.service"),
                    },
                )],
                dirtied_counted: true,
                lost_events: 3,
            }),
            kube: Default::default(),
        }
    }

    #[test]
    fn renders_every_family_from_a_hand_made_snapshot() {
        let s = snapshot();
        let h = Health::default();
        let b = BuildInfo {
            version: "1.2.3".into(),
            commit: "0123456789ab".into(),
        };
        let now = s.taken_at + Duration::from_millis(1500);
        let text = render(&s, &h, &b, Mode::Served { now }, Format::Prometheus);
        for line in [
            "pagewise_path_cached_bytes{path=\"/data\"} 4096",
            "pagewise_path_measured{path=\"/data\"} 1",
            "pagewise_path_size_bytes{path=\"/data\"} 8192",
            "pagewise_path_recently_evicted_bytes{path=\"/data\"} 4096",
            "pagewise_file_cached_bytes{path=\"/data\",file=\"/data/a\\\"b\"} 4096",
            "pagewise_cgroup_file_bytes{id=\"/system.slice/docker-3f4e5a6b7c8d.scope\",hierarchy=\"v1\",runtime=\"docker\",container_id=\"3f4e5a6b7c8d\"} 1048576",
            "pagewise_cgroup_file_self_bytes{id=\"/system.slice/docker-3f4e5a6b7c8d.scope\",hierarchy=\"v1\",runtime=\"docker\",container_id=\"3f4e5a6b7c8d\"} 1048576",
            "# TYPE pagewise_cgroup_file_refaults_total counter",
            "pagewise_build_info{version=\"1.2.3\",commit=\"0123456789ab\"} 1",
            "pagewise_cgroup_added_bytes_total{id=\"/system.slice/nginx.service\",unit=\"nginx.service\"} 1048576",
            "pagewise_cgroup_dirtied_bytes_total{id=\"/system.slice/nginx.service\",unit=\"nginx.service\"} 4096",
            "pagewise_cgroup_evicted_bytes_total{id=\"/system.slice/nginx.service\",unit=\"nginx.service\"} 8192",
            "pagewise_cgroup_rates_lost_events_total 3",
            "pagewise_memory_cached_bytes 102400",
            "pagewise_memory_file_refaults_total 42",
            "pagewise_snapshot_age_seconds 1.5",
            "pagewise_snapshot_timestamp_seconds 1700000000",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");
        let now = s.taken_at;
        let om = render(&s, &h, &b, Mode::Served { now }, Format::OpenMetrics);
        assert!(om.ends_with("# EOF\n"));
        assert!(om.contains("# TYPE pagewise_scrapes counter\n"));
        assert!(om.contains("\npagewise_scrapes_total 0\n"));
        // Written once: no scrapes, no age, no process_* (node_exporter has its own).
        let written = render(&s, &h, &b, Mode::Written, Format::Prometheus);
        for gone in [
            "pagewise_scrapes_total",
            "pagewise_snapshot_age_seconds",
            "process_",
        ] {
            assert!(!written.contains(gone), "{gone} in\n{written}");
        }
        assert!(
            written.contains("\npagewise_refreshes_total 0\n"),
            "{written}"
        );
    }

    /// A path none of whose files could be measured has no cached sample (not 0), and a top
    /// file of unknown residency none either; the note says why.
    #[test]
    fn unknown_residency_is_no_sample() {
        let mut snap = snapshot();
        let unknown = Residency {
            bytes: 8192,
            cached: None,
            dirty: None,
            writeback: None,
            evicted: None,
            recently_evicted: None,
            method: MeasuredBy::Unknown,
            unknown_reason: Some(crate::residency::UNKNOWN_NOT_WRITABLE),
        };
        let mut totals = Totals::default();
        totals.add(8192, &unknown);
        totals.add(8192, &unknown);
        snap.paths[0].totals = totals;
        snap.paths[0].top[0].residency = unknown.clone();
        let text = render(
            &snap,
            &Health::default(),
            &BuildInfo::default(),
            Mode::Written,
            Format::Prometheus,
        );
        for gone in [
            "\npagewise_path_cached_bytes{",
            "\npagewise_path_dirty_bytes{",
            "\npagewise_file_cached_bytes{",
        ] {
            assert!(!text.contains(gone), "{gone} in\n{text}");
        }
        assert!(text.contains("\npagewise_path_unknown_files{path=\"/data\"} 2\n"));
        assert!(text.contains("\npagewise_file_size_bytes{"), "{text}");
        // One file measured (an empty one: 0 cached) beside an unknown one: still no sample —
        // a 0 that leaves a file out would read as "nothing cached" on a dashboard.
        let mut partial = Totals::default();
        partial.add(
            0,
            &Residency {
                bytes: 0,
                cached: Some(0),
                ..unknown.clone()
            },
        );
        partial.add(8192, &unknown);
        let mut snap2 = snap.clone();
        snap2.paths[0].totals = partial;
        let text2 = render(
            &snap2,
            &Health::default(),
            &BuildInfo::default(),
            Mode::Written,
            Format::Prometheus,
        );
        assert!(!text2.contains("\npagewise_path_cached_bytes{"), "{text2}");
        assert!(
            text2.contains("\npagewise_path_unknown_files{path=\"/data\"} 1\n"),
            "{text2}"
        );
        let notes = snap.unmeasured();
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with("/data: 2 of 2 files: residency unknown, so no ")
                && notes[0].contains(crate::residency::UNKNOWN_NOT_WRITABLE)
                && notes[0].contains("CAP_DAC_OVERRIDE"),
            "{notes:?}"
        );
    }
}
