//! `pagewise exporter`: page-cache metrics for Prometheus over HTTP (`pagewise_core::exporter::http`, bounded: see there), or written
//! once for node_exporter's textfile collector. The metrics and the background refresh are the
//! library's (`pagewise_core::exporter`); this file is the configuration and the I/O.

use super::args::parse_duration;
use super::exit::{CliError, ExitCode};
use clap::Args;
use pagewise_core::exporter::metrics::Format;
use pagewise_core::exporter::{self, http, Exporter, ExporterOptions};
use pagewise_core::walk::WalkOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The `pagewise exporter --help` epilogue.
pub const EXAMPLES: &str = "\
Examples:
  pagewise exporter --listen 127.0.0.1:9847 --path /var/lib/postgresql --path /srv/models
  pagewise exporter --config /etc/pagewise/exporter.conf
  pagewise exporter --path /data --top 10 --interval 30s   also the 10 most cached files
  pagewise exporter --textfile /var/lib/prometheus/node-exporter --path /data   (from cron)
  pagewise exporter --once --path /data | promtool check metrics

Scrapes never wait for a walk: trees are measured in the background every --interval and a
scrape serves the latest snapshot (pagewise_snapshot_age_seconds says how old). /metrics
answers in OpenMetrics when the Accept header asks for it (Prometheus does), else in the
Prometheus text format. Metrics: pagewise_path_* {path}, pagewise_file_* {path,file} (--top),
pagewise_cgroup_* {cgroup,hierarchy}, pagewise_memory_* (machine), and the exporter's own.
Per-cgroup and some files' figures need root. Label values (path, file, cgroup) show names
as pagewise's tables do: control characters and bytes that are not UTF-8 as \\xHH, a
backslash as \\\\ (and the exposition format escapes a backslash once more), so two names
are never one series.

HTTP: a request head may be 8 KiB (else 431) and must arrive within 5 s (else the connection
is closed, with 408 if it was half sent); at most a share of RLIMIT_NOFILE (up to 512)
connections are open at once, the longest-idle one closed for a new one.

Config file (--config): one setting a line, '#' comments; command-line flags add to it:
  listen 127.0.0.1:9847
  path /var/lib/postgresql
  top 10
  interval 30s
  cgroup /system.slice
  cgroup-depth 2
  no-cgroups

Exit codes: 0 success, 1 fatal error (bad configuration, address in use, textfile not written),
2 (--once, --textfile) some files, paths or cgroups could not be measured (metrics written;
errors on stderr).";

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
    /// Write DIR/pagewise.prom once (atomically: written beside, then renamed) for
    /// node_exporter's textfile collector, and exit
    #[arg(long, value_name = "DIR", conflicts_with_all = ["listen", "once"])]
    pub textfile: Option<PathBuf>,
    /// Print the metrics once to stdout (Prometheus text format) and exit
    #[arg(long)]
    pub once: bool,
    /// Worker threads of a refresh [default: number of CPUs]
    #[arg(short = 'j', long, value_name = "N")]
    pub threads: Option<usize>,
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
    }
}

/// Writes `text` to `dir/pagewise.prom` atomically: a temporary beside it, fsync, rename, so
/// node_exporter never reads half a file.
fn write_textfile(dir: &Path, text: &str) -> Result<PathBuf, CliError> {
    let dest = dir.join("pagewise.prom");
    // node_exporter reads only *.prom: the temporary is not one.
    let tmp = dir.join(format!(".pagewise.prom.{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(CliError::file(tmp.display().to_string(), "write", e));
    }
    std::fs::rename(&tmp, &dest).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::file(dest.display().to_string(), "rename", e)
    })?;
    Ok(dest)
}

/// `pagewise exporter`.
pub fn run(a: ExporterArgs) -> Result<ExitCode, CliError> {
    let s = settings(&a)?;
    let opts = options(&s, a.threads);
    if a.once || a.textfile.is_some() {
        opts.validate()?;
        let snap = exporter::collect(&opts);
        let health = exporter::Health::default();
        health
            .refreshes
            .store(1, std::sync::atomic::Ordering::Relaxed);
        health
            .refresh_errors
            .store(snap.errors, std::sync::atomic::Ordering::Relaxed);
        let text = exporter::render(
            &snap,
            &health,
            std::time::Instant::now(),
            Format::Prometheus,
        );
        if let Some(dir) = &a.textfile {
            write_textfile(dir, &text)?;
        } else {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
        }
        log_problems(&snap);
        return Ok(ExitCode::from_errors(snap.errors));
    }
    let exp = Exporter::new(opts)?;
    let listen = s.listen.as_deref().unwrap_or("127.0.0.1:9847");
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| CliError::Message(format!("exporter: listen on {listen} failed: {e}")))?;
    let _refresher = exp.start(log_problems);
    eprintln!(
        "pagewise exporter: serving http://{}/metrics",
        listener
            .local_addr()
            .map_or_else(|_| listen.to_string(), |a| a.to_string())
    );
    let handler = move |req: &http::Request<'_>| respond(&exp, req);
    http::serve(listener, http::Limits::default(), Arc::new(handler))
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

const INDEX: &str = "<html><head><title>pagewise exporter</title></head><body>\
<h1>pagewise exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

const TEXT: &str = "text/plain; charset=utf-8";

/// The answer to one request: /metrics (in the format the Accept header asks for), the index
/// page, 404 for other paths and 405 for methods other than GET and HEAD.
fn respond(exp: &Exporter, req: &http::Request<'_>) -> http::Response {
    use http::Response;
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

    #[test]
    fn config_file_settings_and_errors() {
        let s = parse_config(
            "# exporter\nlisten 127.0.0.1:1\npath /a b\npath /c\ntop 3\ninterval 30s\n\
             cgroup /x\ncgroup-depth 1\n",
            "f",
        )
        .unwrap();
        assert_eq!(s.listen.as_deref(), Some("127.0.0.1:1"));
        assert_eq!(s.paths, [PathBuf::from("/a b"), PathBuf::from("/c")]);
        assert_eq!(s.top, Some(3));
        assert_eq!(s.interval, Some(Duration::from_secs(30)));
        assert_eq!(s.cgroup_depth, Some(1));
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
        let p = write_textfile(d.path(), "a 1\n").unwrap();
        write_textfile(d.path(), "a 2\n").unwrap();
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
