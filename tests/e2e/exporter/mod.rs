//! End-to-end tests of `pagewise exporter`: a real Prometheus server (Debian's package) on
//! loopback scrapes the exporter and the textfile (served as a static file), and every figure
//! is compared, through Prometheus's HTTP API, with what cachestat reports. `promtool check
//! metrics` must find nothing to say about either output.
//!
//! Servers listen on 127.0.0.1 only, on ports free at test time; they are killed by PID (a Drop
//! guard) also when a test fails; Prometheus keeps its data in a temp dir.

mod kube;
mod ops;

use crate::common::*;
use crate::exporter_util::*;
use pagewise_core::fuzzing::fuzz;
use pagewise_core::sys;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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
    let mut names: Vec<_> = fs::read_dir(&textdir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    // The finished file, the counters' state and the lock: no temporary is left.
    assert_eq!(
        names,
        [".pagewise.lock", ".pagewise.state", "pagewise.prom"],
        "only the finished files are left"
    );
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
            .args(["--top", "2", "--interval", "1s", "--memory-metrics"])
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
    let _prom = prometheus(&conf, pp, t.path());
    let path = f.to_str().unwrap();
    let cached_q = format!("pagewise_path_cached_bytes{{job=\"pagewise\",path=\"{path}\"}}");
    // The figure Prometheus stored is what cachestat says of the file. The kernel may reclaim
    // pages between a snapshot and this comparison (DAMON pageout runs on these machines), so
    // a later scrape that matches the kernel's figure at that moment is waited for.
    wait_for(60, "Prometheus has scraped the kernel's figure", || {
        let r = query(pp, &cached_q)?;
        (value(r.first()?) as u64 == cached(&f) * PAGE).then_some(())
    });
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
    ] {
        let r = wait_for(30, &q, || query(pp, &q));
        assert_eq!(value(&r[0]) as u64, want, "{q}");
    }
    // The per-file series: like the path's, matched against the kernel's figure at that moment.
    let file_q =
        format!("pagewise_file_cached_bytes{{job=\"pagewise\",path=\"{path}\",file=\"{path}\"}}");
    wait_for(60, "Prometheus has scraped the file's cached bytes", || {
        let r = query(pp, &file_q)?;
        (value(r.first()?) as u64 == cached(&f) * PAGE).then_some(())
    });
    // The tree's cached bytes: the sum of cachestat over its files (at the moment compared).
    let q = format!(
        "pagewise_path_cached_bytes{{job=\"pagewise\",path=\"{}\"}}",
        tree.display()
    );
    wait_for(60, "Prometheus has scraped the tree's cached bytes", || {
        let tree_cached: u64 = (0..5)
            .map(|i| cs(&tree.join(format!("f{i}"))).cache * PAGE)
            .sum();
        (value(query(pp, &q)?.first()?) as u64 == tree_cached).then_some(())
    });
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
    assert_eq!(cached(&f), 0);
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
        cached(&f) * PAGE
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

#[test]
fn many_idle_connections_under_a_small_fd_limit_leave_scrapes_served() {
    if !require(on_path("prlimit"), "prlimit (util-linux) is not installed") {
        return;
    }
    // This test holds 2,000 sockets itself.
    assert!(
        sys::raise_nofile_limit() > 2_100,
        "RLIMIT_NOFILE of the test"
    );
    let t = tmp();
    let f = t.path().join("f");
    write_file(&f, 8192);
    let (mut s, xp) = exporter_on(
        t.path(),
        &["prlimit", "--nofile=128:128", "--"],
        &[std::ffi::OsStr::new("--path"), f.as_os_str()],
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], xp));
    let start = Instant::now();
    let mut idle = Vec::new();
    while idle.len() < 2_000 && start.elapsed() < Duration::from_secs(8) {
        if let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            idle.push(c);
        }
    }
    eprintln!("{} idle connections in {:?}", idle.len(), start.elapsed());
    // While they are all still open, a scrape is served (within a few seconds).
    let (head, body) = wait_for(10, "a scrape among idle connections", || {
        get(xp, "/metrics", "text/plain")
    });
    assert!(head.contains(" 200 "), "{head}");
    assert!(body.contains("pagewise_path_measured{path="), "{body}");
    assert!(alive(&mut s), "the exporter exited");
    drop(idle);
    // And after they are gone.
    let (head, _) = wait_for(10, "a scrape after", || get(xp, "/metrics", "text/plain"));
    assert!(head.contains(" 200 "), "{head}");
    assert!(alive(&mut s), "the exporter exited");
}

#[test]
fn an_oversized_header_gets_an_error_and_memory_stays_bounded() {
    let t = tmp();
    let (mut s, xp) = exporter_on(t.path(), &[], &[]);
    let pid = s.0.id();
    let before = rss_kib(pid);
    let mut c = TcpStream::connect(("127.0.0.1", xp)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = c.try_clone().unwrap();
    // 64 MiB of one header line, until the server stops reading.
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ");
        let chunk = vec![b'a'; 1 << 20];
        let mut sent = 0usize;
        while sent < 64 << 20 && w.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
        sent
    });
    let mut resp = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = c.read(&mut buf) {
        if n == 0 {
            break;
        }
        resp.extend_from_slice(&buf[..n]);
    }
    let sent = writer.join().unwrap();
    let after = rss_kib(pid);
    let text = String::from_utf8_lossy(&resp);
    eprintln!("sent {sent} bytes; RSS {before} KiB -> {after} KiB; answer {text:?}");
    assert!(
        text.starts_with("HTTP/1.1 431") || text.starts_with("HTTP/1.1 400"),
        "{text:?}"
    );
    assert!(
        after < before + 16 * 1024,
        "RSS {before} KiB -> {after} KiB"
    );
    assert!(alive(&mut s));
    assert!(get(xp, "/metrics", "text/plain")
        .unwrap()
        .0
        .contains(" 200 "));
}

#[test]
fn idle_and_half_sent_requests_are_closed_after_the_timeout() {
    let t = tmp();
    let (mut s, xp) = exporter_on(t.path(), &[], &[]);
    let start = Instant::now();
    let idle = TcpStream::connect(("127.0.0.1", xp)).unwrap();
    let mut half = TcpStream::connect(("127.0.0.1", xp)).unwrap();
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut ends = Vec::new();
    for mut c in [idle, half] {
        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut got = Vec::new();
        let r = c.read_to_end(&mut got);
        ends.push((
            r.is_ok(),
            start.elapsed(),
            String::from_utf8_lossy(&got).into_owned(),
        ));
    }
    eprintln!("{ends:?}");
    for (closed, at, _) in &ends {
        assert!(*closed, "not closed by the server within 15 s");
        assert!(
            *at >= Duration::from_secs(1) && *at < Duration::from_secs(12),
            "{at:?}"
        );
    }
    // The half-sent request is told why.
    assert!(ends[1].2.starts_with("HTTP/1.1 408"), "{:?}", ends[1].2);
    assert!(alive(&mut s));
}

#[test]
fn paths_differing_only_in_invalid_bytes_are_distinct_series() {
    use std::os::unix::ffi::OsStrExt;
    let t = tmp();
    let a = t.path().join(std::ffi::OsStr::from_bytes(b"a\xff"));
    let b = t.path().join(std::ffi::OsStr::from_bytes(b"a\xfe"));
    let c = t.path().join("a\\xff");
    for p in [&a, &b, &c] {
        write_file(p, 4096);
    }
    let out = run(bin()
        .args(["exporter", "--once", "--no-cgroups", "--path"])
        .arg(&a)
        .arg("--path")
        .arg(&b)
        .arg("--path")
        .arg(&c));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let dir = t.path().to_str().unwrap();
    let measured: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("pagewise_path_measured{"))
        .collect();
    // Label values escape `\` as `\\`: the names' text \xff (byte), \xfe (byte), \\xff (the
    // four characters).
    for want in [
        format!("pagewise_path_measured{{path=\"{dir}/a\\\\xff\"}} 1"),
        format!("pagewise_path_measured{{path=\"{dir}/a\\\\xfe\"}} 1"),
        format!("pagewise_path_measured{{path=\"{dir}/a\\\\\\\\xff\"}} 1"),
    ] {
        assert!(measured.contains(&want.as_str()), "{want} in {measured:?}");
    }
    if on_path("promtool") {
        promtool_check(&text);
    }
}

/// Request heads: random bytes, and requests built from plausible and hostile parts.
fn request_heads() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let method = prop_oneof![
        Just("GET".to_string()),
        Just("HEAD".to_string()),
        Just("POST".to_string()),
        "[A-Za-z\\-]{0,8}",
        any::<String>(),
    ];
    let target = prop_oneof![
        Just("/metrics".to_string()),
        Just("/".to_string()),
        Just("*".to_string()),
        "(http://[a-z0-9.:]{0,12})?/[!-~]{0,40}",
        "[ -~]{0,40}",
    ];
    let version = prop_oneof![
        Just("HTTP/1.1".to_string()),
        Just("HTTP/1.0".to_string()),
        "HTTP/[0-9]\\.[0-9]",
        "[ -~]{0,10}",
    ];
    let name = prop_oneof![
        Just("Content-Length".to_string()),
        Just("Transfer-Encoding".to_string()),
        Just("Connection".to_string()),
        Just("Accept".to_string()),
        Just("Host".to_string()),
        "[!-~]{0,16}",
        "[ \\t]?[A-Za-z-]{1,10}[ \\t]?",
    ];
    let value = prop_oneof![
        "[0-9, ]{0,30}",
        "(close|keep-alive|chunked|[ ,])*",
        "application/openmetrics-text;version=1\\.0\\.0;q=0(\\.[0-9]{1,3})?",
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|v| String::from_utf8_lossy(&v).into_owned()),
        proptest::collection::vec(b'a'..=b'z', 0..9000)
            .prop_map(|v| String::from_utf8(v).unwrap_or_default()),
    ];
    let eol = prop_oneof![Just("\r\n"), Just("\n"), Just("\r"), Just("")];
    let header = (name, value, eol.clone()).prop_map(|(n, v, e)| format!("{n}:{v}{e}"));
    let built = (
        "(\r\n){0,3}",
        method,
        " {1,2}",
        target,
        " {0,2}",
        version,
        eol.clone(),
        proptest::collection::vec(header, 0..120),
        eol,
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(pre, m, s1, t, s2, v, e1, hs, e2, tail)| {
            let mut b = format!("{pre}{m}{s1}{t}{s2}{v}{e1}{}{e2}", hs.concat()).into_bytes();
            b.extend_from_slice(&tail);
            b
        });
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..10_000), built]
}

#[test]
fn fuzz_request_head_parsing() {
    use pagewise_core::exporter::http::{parse_head, HeadError, MAX_HEAD, MAX_HEADERS};
    fuzz("http-parse", 512, request_heads(), |buf| {
        match parse_head(&buf) {
            Ok((req, n)) => {
                assert!(n <= buf.len() && n <= MAX_HEAD, "{n} of {}", buf.len());
                assert!(req.path.starts_with('/') || req.path == "*", "{req:?}");
                assert!(req.headers.len() <= MAX_HEADERS);
                assert!(!(req.has_body && req.keep_alive), "{req:?}");
                // The head alone parses the same; bytes after it do not change it.
                assert_eq!(parse_head(&buf[..n]), Ok((req.clone(), n)));
                let mut more = buf[..n].to_vec();
                more.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
                assert_eq!(parse_head(&more), Ok((req, n)));
            }
            Err(HeadError::Incomplete) => {
                assert!(buf.len() <= MAX_HEAD, "{} bytes incomplete", buf.len());
                // Any prefix is incomplete too.
                assert_eq!(
                    parse_head(&buf[..buf.len() / 2]),
                    Err(HeadError::Incomplete)
                );
            }
            Err(e) => {
                let (status, _) = e.status();
                assert!(matches!(status, 400 | 431 | 505), "{e:?}");
            }
        }
    });
}

#[test]
fn fuzz_requests_to_a_live_server() {
    use pagewise_core::exporter::http::{serve, Limits, Request, Response};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let limits = Limits {
        max_connections: 8,
        head_timeout: Duration::from_millis(300),
        write_timeout: Duration::from_secs(5),
    };
    let handler = |r: &Request<'_>| {
        if r.path == "/panic" {
            panic!("a handler that panics");
        }
        Response::text(200, "text/plain", format!("{} {}\n", r.method, r.path))
    };
    std::thread::spawn(move || serve(l, limits, std::sync::Arc::new(handler)));
    let exchange = |bytes: &[u8]| -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    };
    fuzz("http-server", 64, request_heads(), |buf| {
        let out = exchange(&buf);
        assert!(
            out.is_empty() || out.starts_with(b"HTTP/1.1 "),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
    });
    let ok = exchange(b"GET /metrics?x HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert!(ok.starts_with(b"HTTP/1.1 200 OK\r\n"), "{ok:?}");
    assert!(ok.ends_with(b"\r\n\r\nGET /metrics\n"), "{ok:?}");
    let p = exchange(b"GET /panic HTTP/1.0\r\n\r\n");
    assert!(p.starts_with(b"HTTP/1.1 500 "), "{p:?}");
    // Two pipelined requests on one connection, then HEAD: Content-Length without a body.
    let two = exchange(b"GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\nConnection: close\r\n\r\n");
    let t = String::from_utf8_lossy(&two);
    assert!(
        t.contains("GET /a\n") && t.matches("HTTP/1.1 200").count() == 2,
        "{t}"
    );
    assert!(
        t.ends_with("Content-Length: 8\r\nConnection: close\r\n\r\n"),
        "{t}"
    );
}

#[test]
fn accept_failing_for_want_of_descriptors_is_survived() {
    if !require(on_path("prlimit"), "prlimit (util-linux) is not installed") {
        return;
    }
    assert!(sys::raise_nofile_limit() > 400, "RLIMIT_NOFILE of the test");
    let t = tmp();
    let f = t.path().join("f");
    write_file(&f, 8192);
    // 24 descriptors: fewer than the connection cap (32), so accept(2) fails with EMFILE.
    let (mut s, xp) = exporter_on(
        t.path(),
        &["prlimit", "--nofile=24:24", "--"],
        &[std::ffi::OsStr::new("--path"), f.as_os_str()],
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], xp));
    let start = Instant::now();
    let mut idle = Vec::new();
    while idle.len() < 300 && start.elapsed() < Duration::from_secs(5) {
        if let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            idle.push(c);
        }
    }
    let (head, _) = wait_for(10, "a scrape while descriptors run out", || {
        get(xp, "/metrics", "text/plain")
    });
    assert!(head.contains(" 200 "), "{head}");
    let said = fs::read_to_string(t.path().join("exporter.log")).unwrap();
    assert!(
        said.contains("accept failed: Too many open files"),
        "{said}"
    );
    drop(idle);
    let (head, _) = wait_for(10, "a scrape after", || get(xp, "/metrics", "text/plain"));
    assert!(head.contains(" 200 "), "{head}");
    assert!(alive(&mut s), "the exporter exited");
}
