//! End-to-end tests of the exporter's operations side: textfile counters that survive
//! rewrites, cgroup figures a PromQL `sum()` does not double-count (checked against the
//! kernel's memory.stat and in a real Prometheus), container labels and the include/exclude
//! regexes, TLS and basic auth from a web config file (Prometheus scraping over TLS, curl for
//! the 401s), and 2,000 idle connections beside 200 concurrent scrapes.
//!
//! Servers listen on 127.0.0.1 only and are killed by PID on drop; cgroups are made only
//! beneath this process's own memory cgroup and removed on drop.

use crate::common::*;
use crate::exporter_util::*;
use pagewise_core::cgroup;
use pagewise_core::sys;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The value of the unlabelled sample `name` in an exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

fn textfile_run(dir: &Path, paths: &[&Path]) -> std::process::Output {
    let mut c = bin();
    c.args(["exporter", "--no-cgroups", "--textfile"]).arg(dir);
    for p in paths {
        c.arg("--path").arg(p);
    }
    run(&mut c)
}

#[test]
fn textfile_counters_increase_across_runs_and_served_only_figures_are_left_out() {
    let t = tmp();
    let dir = t.path().join("textfile");
    fs::create_dir(&dir).unwrap();
    let f = t.path().join("f");
    write_file(&f, 8192);
    let missing = t.path().join("missing");
    assert!(textfile_run(&dir, &[&f]).status.success());
    assert_eq!(textfile_run(&dir, &[&f, &missing]).status.code(), Some(2));
    assert!(textfile_run(&dir, &[&f]).status.success());
    let text = fs::read_to_string(dir.join("pagewise.prom")).unwrap();
    assert_eq!(
        sample(&text, "pagewise_refreshes_total"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "pagewise_refresh_errors_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "pagewise_refresh_snapshot_errors"), Some(0.0));
    for gone in [
        "pagewise_scrapes_total",
        "pagewise_snapshot_age_seconds",
        "pagewise_last_scrape_duration_seconds",
        "process_",
        "pagewise_memory_",
    ] {
        assert!(!text.contains(gone), "{gone} in\n{text}");
    }
    assert!(text.contains("\npagewise_build_info{version=\""), "{text}");
    if on_path("promtool") {
        promtool_check(&text);
    }
    // node_exporter reads *.prom only: the state and the lock are not.
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [".pagewise.lock", ".pagewise.state", "pagewise.prom"]
    );
    // A state that is not ours: said, and counting starts again (a counter reset).
    fs::write(dir.join(".pagewise.state"), "refreshes 99\n").unwrap();
    let out = textfile_run(&dir, &[&f]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains(".pagewise.state: not a pagewise state file; counting from 0"),
        "{}",
        stderr(&out)
    );
    let text = fs::read_to_string(dir.join("pagewise.prom")).unwrap();
    assert_eq!(sample(&text, "pagewise_refreshes_total"), Some(1.0));
    // --once is written too: no scrape counters, no age.
    let out = run(bin()
        .args(["exporter", "--once", "--no-cgroups", "--path"])
        .arg(&f));
    assert!(!stdout(&out).contains("pagewise_snapshot_age_seconds"));
}

const DOCKER_ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A group P beneath ours with children `app` (1 MiB of a file read in it) and a docker-named
/// scope (2 MiB): children first in the vector, so they are removed before P.
fn cgroup_tree(dir: &Path) -> Option<Vec<ChildCgroup>> {
    let own = match cgroup::own_memory_cgroup() {
        Ok(o) => o,
        Err(e) => {
            require(false, &format!("no memory cgroup: {e}"));
            return None;
        }
    };
    if !require_root("making cgroups") {
        return None;
    }
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = ChildCgroup::under(&own, &format!("pagewise-exp-{}-{n}", std::process::id()));
    let app = ChildCgroup::under(&p.dir, "app");
    let docker = ChildCgroup::under(&p.dir, &format!("docker-{DOCKER_ID}.scope"));
    for (g, size) in [(&app, 1 << 20), (&docker, 2 << 20)] {
        let f = dir.join(format!("data-{size}"));
        write_file(&f, size);
        sync_and_evict(&f);
        g.read_in(&f);
    }
    Some(vec![app, docker, p])
}

#[test]
fn cgroup_self_figures_sum_to_the_root_without_double_counting() {
    let t = tmp();
    let Some(groups) = cgroup_tree(t.path()) else {
        return;
    };
    let (app, docker, p) = (&groups[0], &groups[1], &groups[2]);
    let out = run(bin().args(["exporter", "--once", "--cgroup"]).arg(&p.dir));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let kernel_app = app.file_bytes();
    let whole = samples(&text, "pagewise_cgroup_file_bytes");
    let own = samples(&text, "pagewise_cgroup_file_self_bytes");
    eprintln!(
        "{whole:?}\n{own:?}\nkernel: app {kernel_app}, P {}",
        p.file_bytes()
    );
    assert_eq!(whole.len(), 3, "{text}");
    // The listed root: the shortest id (its children's ids extend it).
    let root = whole.iter().min_by_key(|(l, _)| l.len()).unwrap().1;
    // No label changes when the tree around a group changes shape.
    assert!(
        whole
            .iter()
            .all(|(l, _)| !l.contains("depth=") && !l.contains("leaf=")),
        "{whole:?}"
    );
    // The documented query: sum of the self figures is the listed root's figure ...
    let sum_self: f64 = own.iter().map(|s| s.1).sum();
    assert_eq!(sum_self, root, "{text}");
    // ... while a sum of the hierarchical figures counts the children twice.
    let sum_whole: f64 = whole.iter().map(|s| s.1).sum();
    assert!(
        sum_whole >= root + (3 << 20) as f64 * 0.9,
        "{sum_whole} vs {root}"
    );
    // The children's figures are the kernel's (read just after; nothing else runs there).
    let app_line = whole.iter().find(|(l, _)| l.contains("/app\",")).unwrap();
    let near = |a: f64, b: f64| (a - b).abs() <= b * 0.05;
    assert!(
        near(app_line.1, kernel_app as f64),
        "{app_line:?} vs {kernel_app}"
    );
    assert!(app_line.1 >= (1 << 20) as f64 * 0.95, "{app_line:?}");
    // The docker scope is named as such; the app group has no owner labels.
    let d = whole.iter().find(|(l, _)| l.contains("docker-")).unwrap();
    assert!(
        d.0.ends_with(&format!("runtime=\"docker\",container_id=\"{DOCKER_ID}\"")),
        "{d:?}"
    );
    assert!(near(d.1, docker.file_bytes() as f64), "{d:?}");
    assert!(!app_line.0.contains("runtime="), "{app_line:?}");
    // Include/exclude act on the cgroup path.
    let out = run(bin()
        .args([
            "exporter",
            "--once",
            "--cgroup-exclude",
            "/docker-",
            "--cgroup",
        ])
        .arg(&p.dir));
    let text = stdout(&out);
    let some = samples(&text, "pagewise_cgroup_file_bytes");
    assert_eq!(some.len(), 2, "{some:?}");
    assert!(some.iter().all(|(l, _)| !l.contains("docker")));
    let out = run(bin()
        .args(["exporter", "--once", "--cgroup-include", "app$", "--cgroup"])
        .arg(&p.dir));
    let text = stdout(&out);
    let some = samples(&text, "pagewise_cgroup_file_bytes");
    assert_eq!(some.len(), 1, "{some:?}");
    let out = run(bin().args(["exporter", "--once", "--cgroup-include", "("]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cgroup_include"), "{}", stderr(&out));
}

/// A self-signed certificate for 127.0.0.1 and localhost: (cert, key) files in `dir`.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let out = run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt));
    assert!(out.status.success(), "openssl: {}", stderr(&out));
    (crt, key)
}

/// curl's response head (`-D -`) for `url` with `args`; None when curl fails (no TLS, ...).
fn curl(url: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-D", "-", "-o", "-"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// curl over TLS: 401 with a challenge without credentials, with a wrong password and with an
/// unknown user; 200 with the right ones; plain HTTP to the TLS port gets no answer.
fn answers_only_good_credentials(xp: u16, ca: &str) {
    let url = format!("https://127.0.0.1:{xp}/metrics");
    // No credentials, then wrong ones: 401 with a challenge.
    let head = wait_for(30, "the exporter answers over TLS", || {
        curl(&url, &["--cacert", ca])
    });
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    assert!(
        head.contains("WWW-Authenticate: Basic realm=\"pagewise\""),
        "{head}"
    );
    let head = curl(&url, &["--cacert", ca, "-u", "prom:wrong"]).unwrap();
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    let head = curl(&url, &["--cacert", ca, "-u", "nobody:s3cret"]).unwrap();
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    let body = curl(&url, &["--cacert", ca, "-u", "prom:s3cret"]).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 "), "{body}");
    assert!(body.contains("\nprocess_open_fds "), "{body}");
    // Plain HTTP to the TLS port: refused, the exporter goes on.
    assert!(get(xp, "/metrics", "*/*").is_none_or(|(h, _)| !h.contains(" 200 ")));
}

/// A Prometheus configuration in `dir/prometheus/` scraping the exporter on `xp` over TLS
/// (CA `ca`), as `prom` with the right password (job pagewise) and a wrong one (wrongpass):
/// (Prometheus's port, the file).
fn prometheus_config(dir: &Path, xp: u16, ca: &str) -> (u16, PathBuf) {
    let pp = free_port();
    let pdir = dir.join("prometheus");
    fs::create_dir(&pdir).unwrap();
    let job = |name: &str, pass: &str| {
        format!(
            "\x20 - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: {ca}\n\
             \x20     server_name: localhost\n    basic_auth:\n      username: prom\n\
             \x20     password: {pass}\n    static_configs:\n      - targets: ['127.0.0.1:{xp}']\n"
        )
    };
    let conf = pdir.join("prometheus.yml");
    fs::write(
        &conf,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{}{}",
            job("pagewise", "s3cret"),
            job("wrongpass", "nope")
        ),
    )
    .unwrap();
    (pp, conf)
}

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth_and_curl_gets_401s() {
    if !require(
        on_path("prometheus") && on_path("openssl") && on_path("curl"),
        "prometheus (Debian's package), openssl and curl are needed",
    ) {
        return;
    }
    let t = tmp();
    let groups = cgroup_tree(t.path());
    let (crt, _key) = certificate(t.path());
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    let web = t.path().join("web.yml");
    fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n\
             basic_auth_users:\n  prom: '{hash}'\n"
        ),
    )
    .unwrap();
    let xp = free_port();
    let mut cmd = bin();
    cmd.args([
        "exporter",
        "--listen",
        &format!("127.0.0.1:{xp}"),
        "--interval",
        "1s",
    ])
    .arg("--web-config")
    .arg(&web)
    .stderr(log(t.path(), "exporter.log"));
    match &groups {
        Some(g) => cmd.arg("--cgroup").arg(&g[2].dir),
        None => cmd.arg("--no-cgroups"),
    };
    let mut exporter = Server(cmd.spawn().unwrap());
    let ca = crt.to_str().unwrap();
    answers_only_good_credentials(xp, ca);
    assert!(alive(&mut exporter));

    let (pp, conf) = prometheus_config(t.path(), xp, ca);
    let _prom = prometheus(&conf, pp, t.path());
    let up = |job: &str, want: f64| {
        let q = format!("up{{job=\"{job}\"}}");
        wait_for(60, &q, || {
            (value(query(pp, &q)?.first()?) == want).then_some(())
        })
    };
    up("pagewise", 1.0);
    up("wrongpass", 0.0);
    let q = "pagewise_build_info{job=\"pagewise\"}";
    let info = wait_for(30, q, || query(pp, q));
    let commit = info[0]["metric"]["commit"].as_str().unwrap().to_string();
    assert!(!commit.is_empty(), "{info:?}");
    for q in [
        "process_resident_memory_bytes{job=\"pagewise\"}",
        "process_max_fds{job=\"pagewise\"}",
    ] {
        assert!(value(&wait_for(30, q, || query(pp, q))[0]) > 0.0, "{q}");
    }
    if groups.is_some() {
        // The documented PromQL, evaluated by Prometheus: no double counting.
        // (The listed root has the largest figure: it counts its descendants'.)
        let q = "sum(pagewise_cgroup_file_self_bytes{job=\"pagewise\"}) \
                 - max(pagewise_cgroup_file_bytes{job=\"pagewise\"})";
        let r = wait_for(30, q, || query(pp, q));
        assert_eq!(value(&r[0]), 0.0, "{r:?}");
        let q = "max(pagewise_cgroup_file_bytes{job=\"pagewise\"})";
        assert!(value(&wait_for(30, q, || query(pp, q))[0]) >= (3 << 20) as f64 * 0.9);
    }
    assert!(alive(&mut exporter));
}

/// Descriptors `pid` has open (/proc/PID/fd).
fn fds(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// One scrape over HTTP/1.0: the status line, how long it took.
fn timed_scrape(port: u16) -> (String, Duration) {
    let start = Instant::now();
    let line = (|| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        Some(text.lines().next()?.to_string())
    })();
    (line.unwrap_or_default(), start.elapsed())
}

#[test]
fn two_thousand_idle_connections_and_two_hundred_concurrent_scrapes() {
    assert!(
        sys::raise_nofile_limit() > 2_600,
        "RLIMIT_NOFILE of the test"
    );
    let t = tmp();
    let f = t.path().join("f");
    write_file(&f, 8192);
    let (mut s, xp) = exporter_on(t.path(), &[], &["--path".as_ref(), f.as_os_str()]);
    let pid = s.0.id();
    // Baseline: after a scrape, with every connection closed.
    timed_scrape(xp);
    std::thread::sleep(Duration::from_millis(300));
    let baseline = fds(pid);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], xp));
    let start = Instant::now();
    let mut idle = Vec::new();
    while idle.len() < 2_000 && start.elapsed() < Duration::from_secs(10) {
        if let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            idle.push(c);
        }
    }
    assert_eq!(
        idle.len(),
        2_000,
        "idle connections made in {:?}",
        start.elapsed()
    );
    let during = fds(pid);
    let gate = Arc::new(Barrier::new(200));
    let scrapes: Vec<_> = (0..200)
        .map(|_| {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || {
                gate.wait();
                timed_scrape(xp)
            })
        })
        .collect();
    let results: Vec<(String, Duration)> = scrapes.into_iter().map(|h| h.join().unwrap()).collect();
    let mut took: Vec<Duration> = results.iter().map(|r| r.1).collect();
    took.sort();
    let worst = took[199];
    let ok = results
        .iter()
        .filter(|r| r.0.starts_with("HTTP/1.1 200"))
        .count();
    eprintln!(
        "2000 idle in {:?}; exporter fds: baseline {baseline}, with idle {during}; \
         200 concurrent scrapes: {ok} answered 200, median {:?}, 99th {:?}, slowest {worst:?}",
        start.elapsed(),
        took[100],
        took[198]
    );
    assert_eq!(ok, 200, "{results:?}");
    assert!(worst < Duration::from_secs(1), "slowest scrape {worst:?}");
    drop(idle);
    let closed = Instant::now();
    let back = wait_for(10, "the exporter's descriptors back to baseline", || {
        (fds(pid) <= baseline).then(|| closed.elapsed())
    });
    eprintln!("descriptors back to {baseline} {back:?} after the idle connections closed");
    assert!(alive(&mut s));
}
