//! `pagewise exporter`: page-cache metrics for Prometheus over HTTP (`pagewise_core::exporter::http`, bounded: see there), or written
//! once for node_exporter's textfile collector. The metrics and the background refresh are the
//! library's (`pagewise_core::exporter`); this file is the configuration and the I/O.

use super::args::parse_duration;
use super::exit::{CliError, ExitCode};
use clap::Args;
use pagewise_core::exporter::metrics::Format;
use pagewise_core::exporter::state::TextfileState;
use pagewise_core::exporter::web::{BasicAuth, WebConfig};
use pagewise_core::exporter::{self, http, BuildInfo, Exporter, ExporterOptions, Mode};
use pagewise_core::walk::WalkOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use textfile::{
    lock_textfile_dir, open_textfile_dir, read_state, write_atomically, write_textfile, STATE,
};

mod textfile;

/// The `pagewise exporter --help` epilogue.
pub const EXAMPLES: &str = "\
Examples:
  pagewise exporter --listen 127.0.0.1:9847 --path /var/lib/postgresql --path /srv/models
  pagewise exporter --config /etc/pagewise/exporter.conf
  pagewise exporter --path /data --top 10 --interval 30s   also the 10 most cached files
  pagewise exporter --textfile /var/lib/prometheus/node-exporter --path /data   (from cron)
  pagewise exporter --once --path /data | promtool check metrics
  pagewise exporter --web-config /etc/pagewise/web.yml      TLS and basic auth
  pagewise exporter --cgroup-include '^/(system|kubepods)' --cgroup-exclude '\\.mount$'

Scrapes never wait for a walk: trees are measured in the background every --interval and a
scrape serves the latest snapshot (pagewise_snapshot_age_seconds says how old). /metrics
answers in OpenMetrics when the Accept header asks for it (Prometheus does), else in the
Prometheus text format. Metrics: pagewise_path_* {path}, pagewise_file_* {path,file} (--top),
pagewise_cgroup_* {id,hierarchy[,namespace,pod,container,runtime,container_id,pod_uid,unit]}
(id: the cgroup's path; namespace, pod, container: Kubernetes' names, from --kubelet-logs;
containers' and pods' cgroups at any depth, others down to --cgroup-depth),
pagewise_memory_* (machine; only with --memory-metrics: node exporter has them),
pagewise_cgroup_{added,dirtied,evicted}_bytes_total {id[,namespace,...]} (--cgroup-rates:
what each cgroup's processes did to the page cache, from the kernel's tracepoints; root),
pagewise_build_info{version,commit}, process_* and the exporter's own. cgroup figures
include their descendants': sum(pagewise_cgroup_file_self_bytes), not
sum(pagewise_cgroup_file_bytes), is the cache of the listed tree without double counting.
Per-cgroup and some files' figures need root. Label values (path, file, cgroup) show names
as pagewise's tables do: control characters and bytes that are not UTF-8 as \\xHH, a
backslash as \\\\ (and the exposition format escapes a backslash once more), so two names
are never one series.

HTTP: a request head may be 8 KiB (else 431) and must arrive within 5 s (else the connection
is closed, with 408 if it was half sent); at most a share of RLIMIT_NOFILE (up to 512)
connections are open at once, the longest-idle one closed for a new one. --web-config takes
the Prometheus exporter toolkit's web config file (tls_server_config: cert_file, key_file;
basic_auth_users: user: bcrypt hash); wrong or missing credentials are answered 401.

Textfile mode keeps its counters (pagewise_refreshes_total, pagewise_refresh_errors_total)
in DIR/.pagewise.state, so they increase from run to run; it writes no scrape counters, no
snapshot age (node_exporter's node_textfile_mtime_seconds is the file's) and no process_*.

Config file (--config): one setting a line, '#' comments; command-line flags add to it:
  listen 127.0.0.1:9847
  path /var/lib/postgresql
  top 10
  interval 30s
  cgroup /system.slice
  cgroup-depth 2
  cgroup-include ^/system\\.slice/
  cgroup-exclude \\.mount$
  no-cgroups
  memory-metrics
  cgroup-rates
  web-config /etc/pagewise/web.yml
  kubelet-logs /var/log
  rootfs /host

Exit codes: 0 success, 1 fatal error (bad configuration, address in use, textfile not written),
2 (--once, --textfile) some files, paths or cgroups could not be measured (metrics written,
without a figure for what could not be measured; why on stderr).";

#[derive(Args, Debug, Default)]
pub struct ExporterArgs {
    /// Address to serve /metrics on [default: 127.0.0.1:9847]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// A file or tree to report on; repeatable
    #[arg(long = "path", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Settings from FILE (see below)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Also report the N files with the most cached bytes of each path [default: 0]
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Time between background refreshes [default: 15s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Root of the cgroups to report [default: the memory hierarchy's root]
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Levels of cgroups below the root to report [default: 2]
    #[arg(long, value_name = "N")]
    pub cgroup_depth: Option<usize>,
    /// Report no cgroups
    #[arg(long, conflicts_with_all = ["cgroup", "cgroup_depth"])]
    pub no_cgroups: bool,
    /// Report only cgroups whose path (the cgroup label) matches this regex
    #[arg(long, value_name = "REGEX")]
    pub cgroup_include: Option<String>,
    /// Leave out cgroups whose path matches this regex
    #[arg(long, value_name = "REGEX")]
    pub cgroup_exclude: Option<String>,
    /// Also report the machine's totals (pagewise_memory_*; node exporter has them)
    #[arg(long)]
    pub memory_metrics: bool,
    /// Also follow the kernel's page-cache tracepoints and count each cgroup's traffic:
    /// pagewise_cgroup_{added,dirtied,evicted}_bytes_total (root or CAP_PERFMON; ~1.6% of a
    /// CPU per 100k page-cache events a second)
    #[arg(long, conflicts_with_all = ["textfile", "once"])]
    pub cgroup_rates: bool,
    /// TLS and basic auth from FILE (the Prometheus exporter toolkit's web config format)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["textfile", "once"])]
    pub web_config: Option<PathBuf>,
    /// Write DIR/pagewise.prom once (atomically: written beside, then renamed) for
    /// node_exporter's textfile collector, and exit; counters kept in DIR/.pagewise.state
    #[arg(long, value_name = "DIR", conflicts_with_all = ["listen", "once"])]
    pub textfile: Option<PathBuf>,
    /// Print the metrics once to stdout (Prometheus text format) and exit
    #[arg(long)]
    pub once: bool,
    /// Worker threads of a refresh [default: number of CPUs]
    #[arg(short = 'j', long, value_name = "N")]
    pub threads: Option<usize>,
    /// Where the kubelet's logs are: its containers/ and pods/ name each pod's and container's
    /// cgroup (namespace, pod, container labels) [default: /var/log]
    #[arg(long, value_name = "DIR")]
    pub kubelet_logs: Option<PathBuf>,
    /// The host's root as this process sees it (a container that mounts it at /host):
    /// --path and --kubelet-logs are read beneath it and labelled as given [default: /]
    #[arg(long, value_name = "DIR")]
    pub rootfs: Option<PathBuf>,
}

/// The settings of a run: the config file's, then the command line's on top.
#[derive(Debug, Default, PartialEq)]
struct Settings {
    listen: Option<String>,
    paths: Vec<PathBuf>,
    top: Option<usize>,
    interval: Option<Duration>,
    cgroup: Option<PathBuf>,
    cgroup_depth: Option<usize>,
    no_cgroups: bool,
    cgroup_include: Option<String>,
    cgroup_exclude: Option<String>,
    memory_metrics: bool,
    cgroup_rates: bool,
    web_config: Option<PathBuf>,
    kubelet_logs: Option<PathBuf>,
    rootfs: Option<PathBuf>,
}

/// Parses a config file's text (`name` for messages).
fn parse_config(text: &str, name: &str) -> Result<Settings, CliError> {
    let mut s = Settings::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once(char::is_whitespace)
            .map_or((line, ""), |(k, v)| (k, v.trim()));
        let bad = |why: String| CliError::Usage(format!("{name}:{}: {why}", i + 1));
        let need = || {
            if value.is_empty() {
                Err(bad(format!("{key} needs a value")))
            } else {
                Ok(value)
            }
        };
        let num = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| bad(format!("{key}: not a number: {v}")))
        };
        match key {
            "listen" => s.listen = Some(need()?.to_string()),
            "path" => s.paths.push(PathBuf::from(need()?)),
            "top" => s.top = Some(num(need()?)?),
            "interval" => s.interval = Some(parse_duration(need()?).map_err(&bad)?),
            "cgroup" => s.cgroup = Some(PathBuf::from(need()?)),
            "cgroup-depth" => s.cgroup_depth = Some(num(need()?)?),
            "no-cgroups" => s.no_cgroups = true,
            "cgroup-include" => s.cgroup_include = Some(need()?.to_string()),
            "cgroup-exclude" => s.cgroup_exclude = Some(need()?.to_string()),
            "memory-metrics" => s.memory_metrics = true,
            "cgroup-rates" => s.cgroup_rates = true,
            "web-config" => s.web_config = Some(PathBuf::from(need()?)),
            "kubelet-logs" => s.kubelet_logs = Some(PathBuf::from(need()?)),
            "rootfs" => s.rootfs = Some(PathBuf::from(need()?)),
            other => return Err(bad(format!("unknown setting {other}"))),
        }
    }
    Ok(s)
}

fn settings(a: &ExporterArgs) -> Result<Settings, CliError> {
    let mut s = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| CliError::file(p.display().to_string(), "read", e))?;
            parse_config(&text, &p.display().to_string())?
        }
        None => Settings::default(),
    };
    if a.listen.is_some() {
        s.listen.clone_from(&a.listen);
    }
    s.paths.extend(a.paths.iter().cloned());
    s.top = a.top.or(s.top);
    s.interval = a.interval.or(s.interval);
    if a.cgroup.is_some() {
        s.cgroup.clone_from(&a.cgroup);
    }
    s.cgroup_depth = a.cgroup_depth.or(s.cgroup_depth);
    s.no_cgroups |= a.no_cgroups;
    if a.cgroup_include.is_some() {
        s.cgroup_include.clone_from(&a.cgroup_include);
    }
    if a.cgroup_exclude.is_some() {
        s.cgroup_exclude.clone_from(&a.cgroup_exclude);
    }
    s.memory_metrics |= a.memory_metrics;
    s.cgroup_rates |= a.cgroup_rates;
    if a.web_config.is_some() {
        s.web_config.clone_from(&a.web_config);
    }
    if a.kubelet_logs.is_some() {
        s.kubelet_logs.clone_from(&a.kubelet_logs);
    }
    if a.rootfs.is_some() {
        s.rootfs.clone_from(&a.rootfs);
    }
    Ok(s)
}

fn options(s: &Settings, threads: Option<usize>) -> ExporterOptions {
    let d = ExporterOptions::default();
    ExporterOptions {
        paths: s.paths.clone(),
        top: s.top.unwrap_or(0),
        cgroups: !s.no_cgroups,
        cgroup_root: s.cgroup.clone(),
        cgroup_depth: s.cgroup_depth.unwrap_or(d.cgroup_depth),
        walk: WalkOptions {
            threads: threads.unwrap_or(d.walk.threads).max(1),
            ..WalkOptions::default()
        },
        interval: s.interval.unwrap_or(d.interval),
        cgroup_include: s.cgroup_include.clone(),
        cgroup_exclude: s.cgroup_exclude.clone(),
        memory: s.memory_metrics,
        cgroup_rates: s.cgroup_rates,
        kubelet_logs: s.kubelet_logs.clone().or(d.kubelet_logs),
        rootfs: s.rootfs.clone(),
        build: BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: env!("PAGEWISE_COMMIT").to_string(),
        },
    }
}

/// `--once` and `--textfile DIR`: one snapshot, written (textfile: with the counters of the
/// previous runs in DIR, which it then updates).
fn write_once(a: &ExporterArgs, opts: &ExporterOptions) -> Result<ExitCode, CliError> {
    use std::sync::atomic::Ordering::Relaxed;
    opts.validate()?;
    let dir = a.textfile.as_deref().map(open_textfile_dir).transpose()?;
    let lock = dir.as_ref().map(lock_textfile_dir).transpose()?;
    let before = match &dir {
        Some(dir) => read_state(dir),
        None => TextfileState::default(),
    };
    let snap = exporter::collect(opts);
    let after = before.after_run(snap.errors);
    let health = exporter::Health::default();
    health.refreshes.store(after.refreshes, Relaxed);
    health.refresh_errors.store(after.refresh_errors, Relaxed);
    let text = exporter::render(
        &snap,
        &health,
        &opts.build,
        Mode::Written,
        Format::Prometheus,
    );
    if let Some(dir) = &dir {
        write_textfile(dir, &text)?;
        write_atomically(dir, STATE, &after.to_text())?;
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
    }
    drop(lock);
    log_problems(&snap);
    let unmeasured = snap.unmeasured();
    log_unmeasured(&unmeasured);
    // A figure left out is a promise not kept, as an error is.
    Ok(ExitCode::from_errors(snap.errors + unmeasured.len() as u64))
}

/// `pagewise exporter`.
pub fn run(a: ExporterArgs) -> Result<ExitCode, CliError> {
    let s = settings(&a)?;
    let opts = options(&s, a.threads);
    if a.once || a.textfile.is_some() {
        if s.web_config.is_some() || s.cgroup_rates {
            let what = match s.web_config.is_some() {
                true => "web-config",
                false => "cgroup-rates (counters of a running exporter)",
            };
            return Err(CliError::Usage(format!(
                "exporter: {what} is for the HTTP server, not --once or --textfile"
            )));
        }
        return write_once(&a, &opts);
    }
    let (tls, auth) = match &s.web_config {
        Some(p) => web_config(p)?,
        None => (None, None),
    };
    let exp = Exporter::new(opts)?;
    for n in exp.notices() {
        eprintln!("pagewise exporter: note: {n}");
    }
    let listen = s.listen.as_deref().unwrap_or("127.0.0.1:9847");
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| CliError::Message(format!("exporter: listen on {listen} failed: {e}")))?;
    // Unmeasured files are said when the first refresh finds them and when that changes, not
    // every interval.
    let said = std::sync::Mutex::new(Vec::new());
    let _refresher = exp.start(move |snap| {
        log_problems(snap);
        let now = snap.unmeasured();
        let mut said = said.lock().unwrap_or_else(|e| e.into_inner());
        if *said != now {
            log_unmeasured(&now);
            *said = now;
        }
    });
    eprintln!(
        "pagewise exporter: serving {}://{}/metrics{}",
        if tls.is_some() { "https" } else { "http" },
        listener
            .local_addr()
            .map_or_else(|_| listen.to_string(), |a| a.to_string()),
        if auth.is_some() { " (basic auth)" } else { "" }
    );
    let handler = move |req: &http::Request<'_>| respond(&exp, auth.as_ref(), req);
    http::serve_tls(listener, http::Limits::default(), tls, Arc::new(handler))
}

type Tls = Option<exporter::web::TlsConfig>;

/// The web config file at `p`: its TLS configuration and basic auth (errors name the file).
fn web_config(p: &Path) -> Result<(Tls, Option<BasicAuth>), CliError> {
    use std::io::Read;
    let name = p.display().to_string();
    let mut text = String::new();
    std::fs::File::open(p)
        .and_then(|f| {
            f.take(exporter::web::MAX_CONFIG as u64 + 1)
                .read_to_string(&mut text)
        })
        .map_err(|e| CliError::file(name.clone(), "read", e))?;
    let dir = p.parent().unwrap_or(Path::new("."));
    let c = WebConfig::parse(&text, dir).map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
    let tls = c
        .server_config()
        .map_err(|e| CliError::Message(format!("exporter: {e}")))?;
    Ok((tls, BasicAuth::new(&c.users)))
}

/// A snapshot's errors on stderr (`pagewise exporter: PATH: OP failed: ...`), with how many
/// more there were.
fn log_problems(snap: &exporter::Snapshot) {
    for p in &snap.problems {
        eprintln!("pagewise exporter: {p}");
    }
    let more = snap.errors.saturating_sub(snap.problems.len() as u64);
    if more > 0 {
        eprintln!("pagewise exporter: ... and {more} more errors in this refresh");
    }
}

/// Paths with files whose residency could not be measured, one line each (their cached
/// figures have no sample).
fn log_unmeasured(lines: &[String]) {
    for l in lines {
        eprintln!("pagewise exporter: note: {l}");
    }
}

const INDEX: &str = "<html><head><title>pagewise exporter</title></head><body>\
<h1>pagewise exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

const TEXT: &str = "text/plain; charset=utf-8";

/// The answer to one request: /metrics (in the format the Accept header asks for), the index
/// page, 404 for other paths and 405 for methods other than GET and HEAD.
fn respond(exp: &Exporter, auth: Option<&BasicAuth>, req: &http::Request<'_>) -> http::Response {
    use http::Response;
    if auth.is_some_and(|a| !a.allows(req.header("Authorization"))) {
        let mut r = Response::text(401, TEXT, "unauthorized\n");
        r.headers.push((
            "WWW-Authenticate",
            "Basic realm=\"pagewise\", charset=\"UTF-8\"".into(),
        ));
        return r;
    }
    if !matches!(req.method, "GET" | "HEAD") {
        let mut r = Response::text(405, TEXT, "method not allowed\n");
        r.headers.push(("Allow", "GET, HEAD".into()));
        return r;
    }
    match req.path {
        "/metrics" => {
            let format = Format::negotiate(req.header("Accept"));
            Response::text(200, format.content_type(), exp.scrape(format))
        }
        "/" => Response::text(200, "text/html; charset=utf-8", INDEX),
        _ => Response::text(404, TEXT, "not found\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagewise_core::fuzzing::fuzz;
    use pagewise_core::shared_dir::SharedDir;

    #[test]
    fn config_file_settings_and_errors() {
        let s = parse_config(
            "# exporter\nlisten 127.0.0.1:1\npath /a b\npath /c\ntop 3\ninterval 30s\n\
             cgroup /x\ncgroup-depth 1\ncgroup-include ^/a #x\nmemory-metrics\n",
            "f",
        )
        .unwrap();
        assert_eq!(s.listen.as_deref(), Some("127.0.0.1:1"));
        assert_eq!(s.paths, [PathBuf::from("/a b"), PathBuf::from("/c")]);
        assert_eq!(s.top, Some(3));
        assert_eq!(s.interval, Some(Duration::from_secs(30)));
        assert_eq!(s.cgroup_depth, Some(1));
        assert_eq!(s.cgroup_include.as_deref(), Some("^/a"));
        assert!(s.memory_metrics);
        let e = parse_config("top x\n", "f").err().unwrap().to_string();
        assert_eq!(e, "f:1: top: not a number: x");
        let e = parse_config("\nbogus 1\n", "f").err().unwrap().to_string();
        assert_eq!(e, "f:2: unknown setting bogus");
    }

    #[test]
    fn command_line_adds_to_the_config() {
        let d = tempfile::tempdir().unwrap();
        let c = d.path().join("c");
        std::fs::write(&c, "path /a\ntop 2\n").unwrap();
        let a = ExporterArgs {
            config: Some(c),
            paths: vec!["/b".into()],
            top: Some(5),
            ..ExporterArgs::default()
        };
        let s = settings(&a).unwrap();
        assert_eq!(s.paths, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(s.top, Some(5));
    }

    #[test]
    fn textfile_is_replaced_whole() {
        let d = tempfile::tempdir().unwrap();
        let dir = SharedDir::open(d.path()).unwrap();
        let p = write_textfile(&dir, "a 1\n").unwrap();
        write_textfile(&dir, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(p).unwrap(), "a 2\n");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// Config files and exporter flags of any text: a setting or a message naming the file
    /// and line, never a panic.
    #[test]
    fn fuzz_config_and_flags() {
        use clap::Parser;
        use proptest::prelude::*;
        #[derive(Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            a: ExporterArgs,
        }
        let key = prop_oneof![
            Just("listen".to_string()),
            Just("path".to_string()),
            Just("top".to_string()),
            Just("interval".to_string()),
            Just("cgroup".to_string()),
            Just("cgroup-depth".to_string()),
            Just("no-cgroups".to_string()),
            Just("cgroup-include".to_string()),
            Just("cgroup-exclude".to_string()),
            Just("memory-metrics".to_string()),
            Just("cgroup-rates".to_string()),
            Just("web-config".to_string()),
            Just("kubelet-logs".to_string()),
            Just("rootfs".to_string()),
            "[a-z-]{0,12}",
        ];
        let value = prop_oneof![
            "[0-9]{0,25}(\\.[0-9]{0,5})?(us|ms|s|m|min|h|d|x|)",
            "-?[0-9e.+]{0,12}[a-z]{0,3}",
            any::<String>(),
            "[ \t#/a-z0-9:\\[\\]]{0,30}",
        ];
        let line = (key, "[ \t]{0,2}", value, "[ \t]{0,2}(#.*)?")
            .prop_map(|(k, s, v, c)| format!("{k}{s}{v}{c}"));
        let file = prop_oneof![
            proptest::collection::vec(line, 0..8).prop_map(|l| l.join("\n")),
            any::<String>(),
        ];
        fuzz("config", 256, file, |text| match parse_config(&text, "f") {
            Ok(s) => {
                let n = text
                    .lines()
                    .filter(|l| {
                        l.split('#')
                            .next()
                            .unwrap_or("")
                            .trim_start()
                            .starts_with("path")
                    })
                    .count();
                assert!(s.paths.len() <= n, "{text:?}");
                let _ = options(&s, None).validate();
            }
            Err(e) => assert!(e.to_string().starts_with("f:"), "{e} for {text:?}"),
        });
        let flag = prop_oneof![
            Just("--interval".to_string()),
            Just("--top".to_string()),
            Just("--cgroup-depth".to_string()),
            Just("--listen".to_string()),
            Just("--path".to_string()),
            Just("-j".to_string()),
            Just("--no-cgroups".to_string()),
            Just("--once".to_string()),
            Just("--cgroup-include".to_string()),
            Just("--cgroup-exclude".to_string()),
            Just("--kubelet-logs".to_string()),
            Just("--rootfs".to_string()),
            "-{0,2}[a-z-]{0,10}",
        ];
        let arg = prop_oneof![
            "[0-9]{0,25}(\\.[0-9]{0,5})?(us|ms|s|m|min|h|d|)",
            any::<String>(),
        ];
        let args = proptest::collection::vec((flag, arg), 0..5);
        fuzz("flags", 256, args, |args| {
            let argv = std::iter::once("pagewise".to_string())
                .chain(args.into_iter().flat_map(|(f, v)| [f, v]));
            if let Ok(c) = Cli::try_parse_from(argv) {
                if let Ok(s) = settings(&c.a) {
                    let _ = options(&s, c.a.threads).validate();
                }
            }
        });
    }
}
