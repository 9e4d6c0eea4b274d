//! End-to-end tests of `pagewise exporter`: a real Prometheus server (Debian's package) on
//! loopback scrapes the exporter and the textfile (served as a static file), and every figure
//! is compared, through Prometheus's HTTP API, with what cachestat reports. `promtool check
//! metrics` must find nothing to say about either output.
//!
//! Servers listen on 127.0.0.1 only, on ports free at test time; they are killed by PID (a Drop
//! guard) also when a test fails; Prometheus keeps its data in a temp dir.

mod common;
use common::*;
use pagewise_core::sys;
use serde_json::Value;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PAGE: u64 = 4096;

/// A child process killed (by PID) and reaped on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A log file in the test's temp dir for a server's output (read when a test fails).
fn log(dir: &Path, name: &str) -> File {
    File::create(dir.join(name)).unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET over HTTP/1.0 (no chunking, the server closes): (status line and headers, body).
fn get(port: u16, path: &str, accept: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

/// Polls `f` every 200 ms until it gives a value; panics after `secs` naming `what`.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// `promtool check metrics` of `text`: must succeed and say nothing.
fn promtool_check(text: &str) {
    let mut c = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
}

/// Percent-encodes a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The instant vector Prometheus holds for `query` (None until it has samples).
fn query(port: u16, q: &str) -> Option<Vec<Value>> {
    let (_, body) = get(port, &format!("/api/v1/query?query={}", encode(q)), "*/*")?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let r = v["data"]["result"].as_array()?.clone();
    (!r.is_empty()).then_some(r)
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

/// A file with exactly its first 1 MiB cached (MADV_RANDOM-style reads, no readahead).
fn partly_cached(p: &Path) {
    write_file(p, 4 << 20);
    sync_and_evict(p);
    let f = File::open(p).unwrap();
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::Random).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    sys::pread(f.as_fd(), &mut buf, 0).unwrap();
}

#[test]
fn prometheus_scrapes_the_exporter_and_the_textfile_with_cachestats_figures() {
    if !require(
        on_path("prometheus") && on_path("promtool"),
        "prometheus and promtool (Debian's prometheus package) are not installed",
    ) {
        return;
    }
    let t = tmp();
    let f = t.path().join("data.db");
    partly_cached(&f);
    let tree = t.path().join("tree");
    fs::create_dir(&tree).unwrap();
    for i in 0..5 {
        write_file(&tree.join(format!("f{i}")), 64 << 10);
    }
    let kernel = cs(&f);
    assert_eq!(kernel.cache, 256, "the first MiB is cached");

    // The textfile, written once.
    let textdir = t.path().join("textfile");
    fs::create_dir(&textdir).unwrap();
    let out = run(bin()
        .args(["exporter", "--textfile"])
        .arg(&textdir)
        .arg("--path")
        .arg(&f));
    assert!(out.status.success());
    let names: Vec<_> = fs::read_dir(&textdir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["pagewise.prom"], "only the finished file is left");
    let textfile = fs::read_to_string(textdir.join("pagewise.prom")).unwrap();
    promtool_check(&textfile);

    // The exporter.
    let xp = free_port();
    let _exporter = Server(
        bin()
            .args(["exporter", "--listen", &format!("127.0.0.1:{xp}")])
            .arg("--path")
            .arg(&f)
            .arg("--path")
            .arg(&tree)
            .args(["--top", "2", "--interval", "1s"])
            .stderr(log(t.path(), "exporter.log"))
            .spawn()
            .unwrap(),
    );
    let (head, body) = wait_for(30, "the exporter answers", || {
        get(xp, "/metrics", "text/plain")
    });
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    promtool_check(&body);
    let (head, om) = get(
        xp,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    )
    .unwrap();
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(om.ends_with("# EOF\n"));
    assert!(get(xp, "/nope", "*/*").unwrap().0.contains(" 404 "));

    // The textfile served as a static file, for Prometheus to scrape the same way.
    let sp = free_port();
    let _static = Server(
        Command::new("python3")
            .args(["-m", "http.server", &sp.to_string(), "--bind", "127.0.0.1"])
            .arg("--directory")
            .arg(&textdir)
            .stdout(log(t.path(), "http.server.log"))
            .stderr(log(t.path(), "http.server.err"))
            .spawn()
            .unwrap(),
    );
    wait_for(30, "the static server answers", || {
        get(sp, "/pagewise.prom", "*/*")
    });

    // Prometheus, scraping both every second.
    let pp = free_port();
    let pdir = t.path().join("prometheus");
    fs::create_dir(&pdir).unwrap();
    let conf = pdir.join("prometheus.yml");
    fs::write(
        &conf,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n\
             \x20 - job_name: pagewise\n    static_configs:\n      - targets: ['127.0.0.1:{xp}']\n\
             \x20 - job_name: textfile\n    metrics_path: /pagewise.prom\n    static_configs:\n      - targets: ['127.0.0.1:{sp}']\n"
        ),
    )
    .unwrap();
    let _prom = Server(
        Command::new("prometheus")
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                pdir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{pp}"))
            .stdout(log(t.path(), "prometheus.out"))
            .stderr(log(t.path(), "prometheus.log"))
            .spawn()
            .unwrap(),
    );
    let path = f.to_str().unwrap();
    let cached_q = format!("pagewise_path_cached_bytes{{job=\"pagewise\",path=\"{path}\"}}");
    let r = wait_for(60, "Prometheus has scraped the exporter", || {
        query(pp, &cached_q)
    });
    let kernel = cs(&f);
    assert_eq!(value(&r[0]) as u64, kernel.cache * PAGE);
    for (q, want) in [
        (
            format!("pagewise_path_size_bytes{{job=\"pagewise\",path=\"{path}\"}}"),
            4u64 << 20,
        ),
        (
            format!("pagewise_path_dirty_bytes{{job=\"pagewise\",path=\"{path}\"}}"),
            kernel.dirty * PAGE,
        ),
        (
            format!("pagewise_path_writeback_bytes{{job=\"pagewise\",path=\"{path}\"}}"),
            kernel.writeback * PAGE,
        ),
        (
            format!(
                "pagewise_path_files{{job=\"pagewise\",path=\"{}\"}}",
                tree.display()
            ),
            5,
        ),
        (
            format!(
                "pagewise_file_cached_bytes{{job=\"pagewise\",path=\"{path}\",file=\"{path}\"}}"
            ),
            kernel.cache * PAGE,
        ),
    ] {
        let r = wait_for(30, &q, || query(pp, &q));
        assert_eq!(value(&r[0]) as u64, want, "{q}");
    }
    // The tree's cached bytes: the sum of cachestat over its files.
    let tree_cached: u64 = (0..5)
        .map(|i| cs(&tree.join(format!("f{i}"))).cache * PAGE)
        .sum();
    let q = format!(
        "pagewise_path_cached_bytes{{job=\"pagewise\",path=\"{}\"}}",
        tree.display()
    );
    assert_eq!(
        value(&wait_for(30, &q, || query(pp, &q))[0]) as u64,
        tree_cached
    );
    // Cgroups, machine totals and the exporter's own series are there.
    for q in [
        "pagewise_cgroup_file_bytes{job=\"pagewise\"}",
        "pagewise_memory_cached_bytes{job=\"pagewise\"}",
        "pagewise_memory_file_refaults_total{job=\"pagewise\"}",
        "pagewise_snapshot_age_seconds{job=\"pagewise\"}",
        "pagewise_refresh_duration_seconds{job=\"pagewise\"}",
        "pagewise_scrapes_total{job=\"pagewise\"}",
        "pagewise_refresh_errors_total{job=\"pagewise\"}",
    ] {
        wait_for(30, q, || query(pp, q));
    }
    // Refreshed in the background: a snapshot is never much older than the interval.
    let age = value(&query(pp, "pagewise_snapshot_age_seconds{job=\"pagewise\"}").unwrap()[0]);
    assert!(age < 5.0, "snapshot age {age}");
    // The exporter follows the kernel: evict the file, and Prometheus sees 0.
    assert!(run(bin().arg("evict").arg(&f)).status.success());
    assert_eq!(cs(&f).cache, 0);
    wait_for(30, "Prometheus sees the eviction", || {
        let r = query(pp, &cached_q)?;
        (value(&r[0]) == 0.0).then_some(())
    });

    // The textfile, scraped by the same Prometheus: the figures cachestat gave when written.
    let q = format!("pagewise_path_cached_bytes{{job=\"textfile\",path=\"{path}\"}}");
    let r = wait_for(60, "Prometheus has scraped the textfile", || query(pp, &q));
    assert_eq!(value(&r[0]) as u64, 256 * PAGE);
    let q = format!("pagewise_path_size_bytes{{job=\"textfile\",path=\"{path}\"}}");
    assert_eq!(
        value(&wait_for(30, &q, || query(pp, &q))[0]) as u64,
        4 << 20
    );
    // Both targets up.
    let up = wait_for(30, "up", || {
        let r = query(pp, "up")?;
        (r.len() == 2).then_some(r)
    });
    assert!(up.iter().all(|s| value(s) == 1.0), "{up:?}");
}

#[test]
fn once_prints_checkable_metrics_and_bad_configs_fail() {
    let t = tmp();
    let f = t.path().join("a");
    partly_cached(&f);
    let out = run(bin()
        .args(["exporter", "--once", "--no-cgroups", "--path"])
        .arg(&f));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = format!(
        "pagewise_path_cached_bytes{{path=\"{}\"}} {}",
        f.display(),
        cs(&f).cache * PAGE
    );
    assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    assert!(!text.contains("pagewise_cgroup_"));
    if on_path("promtool") {
        promtool_check(&text);
    }
    // A configured path that is missing: metrics still written, the path marked, exit 2.
    let missing = t.path().join("missing");
    let out = run(bin()
        .args(["exporter", "--once", "--no-cgroups", "--path"])
        .arg(&f)
        .arg("--path")
        .arg(&missing));
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stdout).unwrap();
    let m = |p: &Path, v: u8| format!("pagewise_path_measured{{path=\"{}\"}} {v}", p.display());
    assert!(text.lines().any(|l| l == m(&missing, 0)), "{text}");
    assert!(text.lines().any(|l| l == m(&f, 1)), "{text}");
    assert!(
        text.contains("\npagewise_refresh_snapshot_errors 1\n"),
        "{text}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("pagewise exporter: {}", missing.display())),
        "{err}"
    );
    let conf = t.path().join("c.conf");
    fs::write(&conf, "path /x\nfrobnicate 1\n").unwrap();
    let out = run(bin().args(["exporter", "--once", "--config"]).arg(&conf));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("c.conf:2: unknown setting frobnicate"));
    // An address in use is a fatal error naming it.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let out = run(bin()
        .args(["exporter", "--listen", &addr, "--path"])
        .arg(&f));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("listen on {addr} failed")));
}

#[test]
fn contrib_rules_config_and_rule_tests_pass_promtool() {
    if !require(
        on_path("promtool"),
        "promtool (Debian's prometheus package) is not installed",
    ) {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus");
    for args in [
        ["check", "rules", "pagewise.rules.yml"],
        ["check", "config", "prometheus.yml"],
        ["test", "rules", "pagewise.rules.test.yml"],
    ] {
        let out = run(Command::new("promtool").args(args).current_dir(&dir));
        assert!(out.status.success(), "promtool {args:?}");
    }
}
