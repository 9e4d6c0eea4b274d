//! Prometheus metrics of the page cache: per configured path (file or tree), per cgroup, and
//! the machine's totals, with the exporter's own health.
//!
//! [`collect`] takes one [`Snapshot`] (a `stat` of every path, the cgroup tree's
//! `memory.stat`, `/proc/meminfo` and `/proc/vmstat`); [`render`] writes a snapshot as
//! Prometheus text or OpenMetrics ([`metrics`]). [`Exporter`] refreshes snapshots on a
//! background thread so that a scrape never waits for a walk: it serves the latest snapshot,
//! whose age is a metric. [`http`] is the bounded HTTP/1.1 server the CLI serves it with; the
//! textfile writer is the CLI's.
//!
//! Cardinality is bounded by the configuration: one series per path and figure, the top N
//! files per path, the cgroups down to a depth.

pub mod http;
pub mod metrics;

use crate::cgroup::{self, CgroupStat, CgroupsOptions, Hierarchy};
use crate::stat::{self, FileStat, StatOptions, Totals};
use crate::verb::FileResult;
use crate::walk::WalkOptions;
use metrics::{Format, Kind, Writer};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Options of the exporter.
#[derive(Debug, Clone)]
pub struct ExporterOptions {
    /// Files and trees to report on (default: none).
    pub paths: Vec<PathBuf>,
    /// Files per path reported on their own, those with the most cached bytes (default 0).
    pub top: usize,
    /// Report cgroups (default true, when a memory hierarchy is mounted).
    pub cgroups: bool,
    /// The cgroup tree's root (default: the memory hierarchy's root).
    pub cgroup_root: Option<PathBuf>,
    /// Levels of cgroups below the root (default 2).
    pub cgroup_depth: usize,
    /// How paths are walked (default: [`WalkOptions::default`]).
    pub walk: WalkOptions,
    /// Time between background refreshes (default 15 s, Prometheus's default scrape interval).
    pub interval: Duration,
}

impl Default for ExporterOptions {
    fn default() -> Self {
        ExporterOptions {
            paths: Vec::new(),
            top: 0,
            cgroups: true,
            cgroup_root: None,
            cgroup_depth: 2,
            walk: WalkOptions::default(),
            interval: Duration::from_secs(15),
        }
    }
}

impl ExporterOptions {
    /// Checks the options: a valid walk over the paths, an interval of at least 100 ms.
    pub fn validate(&self) -> Result<(), crate::Error> {
        if !self.paths.is_empty() {
            self.walk.validate(&self.paths)?;
        }
        if self.interval < Duration::from_millis(100) {
            return Err(crate::Error::Invalid {
                what: "interval",
                message: "must be at least 100ms".into(),
            });
        }
        Ok(())
    }
}

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
    /// Per cgroup.
    pub cgroups: Vec<CgroupStat>,
    /// Machine totals.
    pub machine: MachineSnapshot,
    /// Per-file and per-cgroup errors of this refresh, and paths or trees that failed.
    pub errors: u64,
    /// The first [`MAX_PROBLEMS`] of them, worded (`path: op failed: message`).
    pub problems: Vec<String>,
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
    let mut paths = Vec::with_capacity(options.paths.len());
    for p in &options.paths {
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
            roots: vec![p.clone()],
            walk: options.walk.clone(),
            files: top_n > 0,
            ..StatOptions::default()
        };
        match stat::stat(&opts, &observer) {
            Ok(r) => {
                let failed = r.roots.is_empty();
                // A root that failed is one error of the walk already.
                errors += r.outcome.error_count.max(failed as u64);
                for e in &r.outcome.errors {
                    note(&mut problems, e.to_string());
                }
                let mut top = keep.into_inner().unwrap();
                top.sort_by(cmp_cached);
                top.truncate(top_n);
                paths.push(PathSnapshot {
                    path: p.clone(),
                    totals: r.total,
                    top,
                    failed,
                });
            }
            Err(e) => {
                errors += 1;
                note(&mut problems, format!("{}: {e}", p.display()));
                paths.push(PathSnapshot {
                    path: p.clone(),
                    totals: Totals::default(),
                    top: Vec::new(),
                    failed: true,
                });
            }
        }
    }
    let (hierarchy, cgroups) = if options.cgroups {
        let o = CgroupsOptions {
            root: options.cgroup_root.clone(),
            max_depth: Some(options.cgroup_depth),
        };
        match cgroup::cgroups(&o, &()) {
            Ok(r) => {
                errors += r.outcome.error_count;
                for e in &r.outcome.errors {
                    note(&mut problems, e.to_string());
                }
                (Some(r.hierarchy), r.groups)
            }
            Err(e) => {
                // No memory hierarchy mounted is not an error when none was asked for.
                if options.cgroup_root.is_some() {
                    errors += 1;
                    note(&mut problems, format!("cgroups: {e}"));
                }
                (None, Vec::new())
            }
        }
    } else {
        (None, Vec::new())
    };
    Snapshot {
        taken_at: Instant::now(),
        taken_at_wall: SystemTime::now(),
        duration_s: start.elapsed().as_secs_f64(),
        paths,
        hierarchy,
        cgroups,
        machine: MachineSnapshot::read(),
        errors,
        problems,
    }
}

/// The exporter's own counters, kept across refreshes and scrapes.
#[derive(Debug, Default)]
pub struct Health {
    /// Refreshes finished.
    pub refreshes: AtomicU64,
    /// Errors over all refreshes.
    pub refresh_errors: AtomicU64,
    /// Scrapes served.
    pub scrapes: AtomicU64,
    /// Duration of the previous scrape, in nanoseconds.
    pub last_scrape_ns: AtomicU64,
}

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
/// Writes `snap` in `format`, with the exporter's health and the snapshot's age at `now`.
pub fn render(snap: &Snapshot, health: &Health, now: Instant, format: Format) -> String {
    let mut w = Writer::new(format);
    let path_text = |p: &std::path::Path| crate::names::escape(p.as_os_str().as_bytes());
    // Per path.
    type PathFig = fn(&PathSnapshot) -> Option<u64>;
    let per_path: [(&str, &str, PathFig); 8] = [
        (
            "pagewise_path_size_bytes",
            "Size of the files under the configured path.",
            |p| Some(p.totals.size),
        ),
        (
            "pagewise_path_cached_bytes",
            "Bytes of the path's files in the page cache (cachestat).",
            |p| Some(p.totals.cached_bytes),
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
    if snap.paths.iter().any(|p| !p.top.is_empty()) {
        for (name, help, cached) in [
            (
                "pagewise_file_cached_bytes",
                "Cached bytes of the top files of a configured path.",
                true,
            ),
            (
                "pagewise_file_size_bytes",
                "Size of the top files of a configured path.",
                false,
            ),
        ] {
            w.family(name, Kind::Gauge, help);
            for p in &snap.paths {
                let root = path_text(&p.path);
                for f in &p.top {
                    let v = if cached {
                        f.residency.cached.unwrap_or(0)
                    } else {
                        f.size
                    };
                    w.sample(
                        name,
                        &[("path", &root), ("file", &path_text(&f.path))],
                        v as f64,
                    );
                }
            }
        }
    }
    // Per cgroup.
    if !snap.cgroups.is_empty() {
        let h = match snap.hierarchy {
            Some(Hierarchy::V2) => "v2",
            _ => "v1",
        };
        type CgFig = fn(&CgroupStat) -> Option<u64>;
        let per_cg: [(&str, Kind, &str, CgFig); 8] = [
            ("pagewise_cgroup_file_bytes", Kind::Gauge, "File cache charged to the cgroup, descendants included (memory.stat file / total_cache).", |c| Some(c.cache.file_bytes)),
            ("pagewise_cgroup_file_dirty_bytes", Kind::Gauge, "Dirty file cache of the cgroup.", |c| Some(c.cache.dirty_bytes)),
            ("pagewise_cgroup_file_writeback_bytes", Kind::Gauge, "File cache of the cgroup under writeback.", |c| Some(c.cache.writeback_bytes)),
            ("pagewise_cgroup_file_mapped_bytes", Kind::Gauge, "File cache of the cgroup mapped into processes.", |c| Some(c.cache.mapped_bytes)),
            ("pagewise_cgroup_file_active_bytes", Kind::Gauge, "File cache of the cgroup on the active LRU list.", |c| Some(c.cache.active_bytes)),
            ("pagewise_cgroup_file_inactive_bytes", Kind::Gauge, "File cache of the cgroup on the inactive LRU list.", |c| Some(c.cache.inactive_bytes)),
            ("pagewise_cgroup_shmem_bytes", Kind::Gauge, "Shmem and tmpfs pages of the cgroup (part of its file cache).", |c| Some(c.cache.shmem_bytes)),
            ("pagewise_cgroup_file_refaults_total", Kind::Counter, "Refaults of file pages in the cgroup (workingset_refault_file, pages).", |c| c.cache.workingset_refaults),
        ];
        for (name, kind, help, f) in per_cg {
            if snap.cgroups.iter().all(|c| f(c).is_none()) {
                continue;
            }
            w.family(name, kind, help);
            for c in &snap.cgroups {
                if let Some(v) = f(c) {
                    w.sample(
                        name,
                        &[("cgroup", &cgroup_text(c)), ("hierarchy", h)],
                        v as f64,
                    );
                }
            }
        }
    }
    // Machine.
    let m = &snap.machine;
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
    // The exporter itself.
    let age = now.saturating_duration_since(snap.taken_at).as_secs_f64();
    w.single(
        "pagewise_snapshot_age_seconds",
        Kind::Gauge,
        "Age of the snapshot this scrape serves.",
        age,
    );
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
    w.finish()
}

/// Snapshots refreshed in the background: scrapes read the latest without waiting.
pub struct Exporter {
    options: ExporterOptions,
    latest: Mutex<Arc<Snapshot>>,
    /// The exporter's own counters.
    pub health: Health,
    stop: AtomicBool,
    wake: (Mutex<()>, Condvar),
}

impl Exporter {
    /// Validates the options. Nothing is measured yet: scrapes serve an empty snapshot (no
    /// path or cgroup series, `pagewise_refreshes_total` 0) until the refresh thread
    /// ([`Exporter::start`]) has finished its first walk, so even the first scrape of a slow
    /// tree does not wait for it.
    pub fn new(options: ExporterOptions) -> Result<Arc<Exporter>, crate::Error> {
        options.validate()?;
        let empty = Snapshot {
            taken_at: Instant::now(),
            taken_at_wall: SystemTime::now(),
            duration_s: 0.0,
            paths: Vec::new(),
            hierarchy: None,
            cgroups: Vec::new(),
            machine: MachineSnapshot::read(),
            errors: 0,
            problems: Vec::new(),
        };
        Ok(Arc::new(Exporter {
            options,
            latest: Mutex::new(Arc::new(empty)),
            health: Health::default(),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
        }))
    }

    /// Starts the background refresh thread: a refresh at once, then one every `interval`
    /// measured from the end of the previous one, so a slow tree never piles refreshes up.
    /// `on_refresh` sees each new snapshot (the CLI logs its problems).
    pub fn start(
        self: &Arc<Self>,
        on_refresh: impl Fn(&Snapshot) + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("pagewise-refresh".into())
            .spawn(move || loop {
                if me.stop.load(Ordering::Relaxed) {
                    return;
                }
                on_refresh(&me.refresh());
                let g = me.wake.0.lock().unwrap();
                let _ = me.wake.1.wait_timeout(g, me.options.interval).unwrap();
            })
            .expect("spawn the refresh thread")
    }

    /// Takes a snapshot now (blocking), makes it the latest and returns it.
    pub fn refresh(&self) -> Arc<Snapshot> {
        let s = Arc::new(collect(&self.options));
        self.health.refreshes.fetch_add(1, Ordering::Relaxed);
        self.health
            .refresh_errors
            .fetch_add(s.errors, Ordering::Relaxed);
        *self.latest.lock().unwrap() = s.clone();
        s
    }

    /// The latest snapshot.
    pub fn latest(&self) -> Arc<Snapshot> {
        self.latest.lock().unwrap().clone()
    }

    /// One scrape: the latest snapshot in `format`, counted and timed.
    pub fn scrape(&self, format: Format) -> String {
        let t = Instant::now();
        self.health.scrapes.fetch_add(1, Ordering::Relaxed);
        let text = render(&self.latest(), &self.health, t, format);
        self.health
            .last_scrape_ns
            .store(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        text
    }

    /// Stops the refresh thread (it ends after the refresh in progress, if any).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake.1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::FileCache;
    use crate::residency::{MeasuredBy, Residency};

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
            cgroups: vec![CgroupStat {
                path: "/sys/fs/cgroup/memory/app".into(),
                cgroup: "/app".into(),
                depth: 1,
                cache: FileCache {
                    file_bytes: 1 << 20,
                    workingset_refaults: Some(5),
                    ..FileCache::default()
                },
            }],
            machine: MachineSnapshot::parse(
                "Buffers: 10 kB\nCached:  100 kB\nDirty: 4 kB\nWriteback: 0 kB\n",
                "workingset_refault_anon 1\nworkingset_refault_file 42\n",
            ),
            errors: 0,
            problems: Vec::new(),
        }
    }

    #[test]
    fn renders_every_family_from_a_hand_made_snapshot() {
        let s = snapshot();
        let h = Health::default();
        let text = render(
            &s,
            &h,
            s.taken_at + Duration::from_millis(1500),
            Format::Prometheus,
        );
        for line in [
            "pagewise_path_cached_bytes{path=\"/data\"} 4096",
            "pagewise_path_measured{path=\"/data\"} 1",
            "pagewise_path_size_bytes{path=\"/data\"} 8192",
            "pagewise_path_recently_evicted_bytes{path=\"/data\"} 4096",
            "pagewise_file_cached_bytes{path=\"/data\",file=\"/data/a\\\"b\"} 4096",
            "pagewise_cgroup_file_bytes{cgroup=\"/app\",hierarchy=\"v1\"} 1048576",
            "# TYPE pagewise_cgroup_file_refaults_total counter",
            "pagewise_cgroup_file_refaults_total{cgroup=\"/app\",hierarchy=\"v1\"} 5",
            "pagewise_memory_cached_bytes 102400",
            "pagewise_memory_file_refaults_total 42",
            "pagewise_snapshot_age_seconds 1.5",
            "pagewise_snapshot_timestamp_seconds 1700000000",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        let om = render(&s, &h, s.taken_at, Format::OpenMetrics);
        assert!(om.ends_with("# EOF\n"));
        assert!(om.contains("# TYPE pagewise_scrapes counter\n"));
        assert!(om.contains("\npagewise_scrapes_total 0\n"));
    }

    #[test]
    fn scrapes_before_the_first_refresh_serve_an_empty_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let exp = Exporter::new(ExporterOptions {
            paths: vec![dir.path().into()],
            cgroups: false,
            ..ExporterOptions::default()
        })
        .unwrap();
        let first = exp.scrape(Format::Prometheus);
        assert!(!first.contains("pagewise_path_"), "{first}");
        assert!(first.contains("\npagewise_refreshes_total 0\n"));
        exp.refresh();
        let second = exp.scrape(Format::Prometheus);
        assert!(second.contains("pagewise_path_files{path="), "{second}");
        assert!(second.contains("\npagewise_refreshes_total 1\n"));
        assert!(second.contains("\npagewise_scrapes_total 2\n"));
        exp.stop();
    }

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
}
