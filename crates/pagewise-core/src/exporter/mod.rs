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
//! files per path, the cgroups down to a depth (and through the include/exclude regexes).
//!
//! [`state`] keeps the counters of textfile mode across runs; [`process`] reads the standard
//! `process_*` figures from `/proc/self`; `web` (with the `web` feature) is the web config
//! file (TLS, basic auth).

mod head;
pub mod http;
pub mod metrics;
pub mod process;
pub mod rates;
pub mod state;
#[cfg(feature = "web")]
pub mod web;

mod render;
mod snapshot;

pub use render::{render, Mode};
pub use snapshot::{collect, CgroupEntry, MachineSnapshot, PathSnapshot, Snapshot, MAX_PROBLEMS};

use crate::walk::WalkOptions;
use metrics::Format;
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
    /// Levels of cgroups below the root (default 2); the cgroups of containers and Kubernetes
    /// pods are reported at any depth (one per container or pod: bounded by what the node
    /// runs).
    pub cgroup_depth: usize,
    /// How paths are walked (default: [`WalkOptions::default`]).
    pub walk: WalkOptions,
    /// Time between background refreshes (default 15 s, Prometheus's default scrape interval).
    pub interval: Duration,
    /// Only cgroups whose path (`/system.slice/x.service`, as the `cgroup` label) this regex
    /// matches (default: all). Unanchored, as `regex::Regex::is_match`.
    pub cgroup_include: Option<String>,
    /// Leave out cgroups whose path this regex matches (default: none); applied after
    /// `cgroup_include`.
    pub cgroup_exclude: Option<String>,
    /// Report the machine's totals (`pagewise_memory_*`, default false: node exporter's
    /// `node_memory_*` and `node_vmstat_*` have them).
    pub memory: bool,
    /// What `pagewise_build_info` says (default: this library's version, commit `unknown`).
    pub build: BuildInfo,
    /// Follow the kernel's page-cache tracepoints for the exporter's life and report each
    /// cgroup's traffic as counters (`pagewise_cgroup_{added,dirtied,evicted}_bytes_total`;
    /// see [`rates`]): root, or CAP_PERFMON with tracefs. Only a running exporter
    /// ([`Exporter::new`]); default false.
    pub cgroup_rates: bool,
    /// Where the kubelet's logs are (`/var/log`: its `containers/` and `pods/` name every
    /// container and pod, [`crate::cgroup::kube`]): cgroups of pods and containers get
    /// `namespace`, `pod` and `container` labels. None, or a directory without them: no names.
    pub kubelet_logs: Option<PathBuf>,
    /// The host's root as this process sees it (`/host` in a container that mounts it there;
    /// default: `/`): configured paths and `kubelet_logs` are read beneath it and labelled as
    /// given.
    pub rootfs: Option<PathBuf>,
}

/// The version and commit `pagewise_build_info` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// The version (`0.1.0`).
    pub version: String,
    /// The git commit (`unknown` when not known).
    pub commit: String,
}

impl Default for BuildInfo {
    fn default() -> Self {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: "unknown".to_string(),
        }
    }
}

/// A regex option compiled, or the error naming the option.
fn compile(what: &'static str, re: &Option<String>) -> Result<Option<regex::Regex>, crate::Error> {
    re.as_deref()
        .map(|r| {
            regex::RegexBuilder::new(r)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| crate::Error::Invalid {
                    what,
                    message: e.to_string(),
                })
        })
        .transpose()
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
            cgroup_include: None,
            cgroup_exclude: None,
            memory: false,
            build: BuildInfo::default(),
            cgroup_rates: false,
            kubelet_logs: Some(PathBuf::from("/var/log")),
            rootfs: None,
        }
    }
}

impl ExporterOptions {
    /// `p` (absolute, as configured) beneath [`ExporterOptions::rootfs`].
    pub fn on_host(&self, p: &std::path::Path) -> PathBuf {
        match &self.rootfs {
            Some(r) => r.join(p.strip_prefix("/").unwrap_or(p)),
            None => p.to_path_buf(),
        }
    }

    /// Checks the options: a valid walk over the paths, an interval of at least 100 ms, regexes
    /// that compile (within 1 MiB).
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.cgroup_filter()?;
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

    /// The compiled `cgroup_include` and `cgroup_exclude`.
    pub fn cgroup_filter(&self) -> Result<CgroupFilter, crate::Error> {
        Ok(CgroupFilter {
            include: compile("cgroup_include", &self.cgroup_include)?,
            exclude: compile("cgroup_exclude", &self.cgroup_exclude)?,
        })
    }
}

/// Which cgroups are reported: `cgroup_include` and `cgroup_exclude` compiled.
#[derive(Debug, Clone, Default)]
pub struct CgroupFilter {
    include: Option<regex::Regex>,
    exclude: Option<regex::Regex>,
}

impl CgroupFilter {
    /// Whether the cgroup of path `cgroup` (`/a/b`) is reported.
    pub fn keeps(&self, cgroup: &str) -> bool {
        self.include.as_ref().is_none_or(|r| r.is_match(cgroup))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(cgroup))
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

/// Snapshots refreshed in the background: scrapes read the latest without waiting.
pub struct Exporter {
    options: ExporterOptions,
    latest: Mutex<Arc<Snapshot>>,
    /// The per-cgroup traffic, with `cgroup_rates`.
    rates: Option<rates::CgroupRates>,
    /// The compiled include/exclude regexes.
    filter: CgroupFilter,
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
            machine: options.memory.then(MachineSnapshot::read),
            errors: 0,
            problems: Vec::new(),
            rates: None,
            kube: Default::default(),
        };
        let rates = match options.cgroup_rates {
            true => Some(
                rates::CgroupRates::start().map_err(|message| crate::Error::Invalid {
                    what: "cgroup_rates",
                    message: format!("needs the kernel's page-cache tracepoints: {message}"),
                })?,
            ),
            false => None,
        };
        let filter = options.cgroup_filter()?;
        Ok(Arc::new(Exporter {
            options,
            rates,
            filter,
            latest: Mutex::new(Arc::new(empty)),
            health: Health::default(),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
        }))
    }

    /// What the cgroup rates' sampler said at start (the route it took, tracepoints this
    /// kernel lacks); empty without rates.
    pub fn notices(&self) -> Vec<String> {
        self.rates
            .as_ref()
            .map(|r| r.notices.clone())
            .unwrap_or_default()
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
        let mut s = collect(&self.options);
        s.rates = self.rates.as_ref().map(|r| r.update(&self.filter));
        let s = Arc::new(s);
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
        let mode = Mode::Served { now: t };
        let text = render(
            &self.latest(),
            &self.health,
            &self.options.build,
            mode,
            format,
        );
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
        assert!(second.contains("\nprocess_open_fds "), "{second}");
        assert!(!second.contains("pagewise_memory_"), "{second}");
        exp.stop();
    }

    #[test]
    fn cgroup_filters_compile_or_name_the_option() {
        let o = ExporterOptions {
            cgroup_include: Some("^/system\\.slice".into()),
            cgroup_exclude: Some("docker".into()),
            ..ExporterOptions::default()
        };
        let f = o.cgroup_filter().unwrap();
        assert!(f.keeps("/system.slice/a.service"));
        assert!(!f.keeps("/system.slice/docker-1.scope"));
        assert!(!f.keeps("/user.slice"));
        let bad = ExporterOptions {
            cgroup_exclude: Some("(".into()),
            ..ExporterOptions::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("cgroup_exclude"), "{e}");
    }
}
