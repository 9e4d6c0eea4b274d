//! End-to-end tests of `pagewise top`: two processes in two child memory cgroups read two
//! cold files while `top --once --json` runs; each process (pid, comm), each cgroup and each
//! file is named with the bytes cachestat shows it brought into the cache (within 5%). An
//! eviction while top runs shows as that file's evicted bytes, a write as its dirtied bytes,
//! both against what cachestat shows.
//!
//! Safety: groups are made only beneath this process's own memory cgroup and removed by a Drop
//! guard, also when a test fails; only processes the test starts are moved into them.

use crate::common::*;
use serde_json::Value;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Ends a reader (closing its stdin) and waits for it.
fn finish(mut c: Child) {
    drop(c.stdin.take());
    let _ = c.wait();
}

/// Starts `top --once --json` for `secs` with the views `by`, and waits until it is tracing
/// (its perf events are open once it has read the tracepoints' format files: a second).
fn start_top(by: &str) -> Child {
    start_top_as(by, &["--json"])
}

/// [`start_top`] with the output flags `out` (none: the table).
fn start_top_as(by: &str, out: &[&str]) -> Child {
    // A long interval, ended by SIGINT once the test's I/O is done (top_document): however
    // slow the machine (an emulated guest), the interval covers all of it.
    let c = bin()
        .args(["top", "--once"])
        .args(out)
        .args(["--by", by, "--interval", "10m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_tracing(c.id());
    c
}

/// Waits until `pid` has its perf events open (at least two tracepoints per online CPU),
/// then a little more for the reader to start.
fn wait_tracing(pid: u32) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let perf_fds = || {
        fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
            d.flatten()
                .filter(|e| {
                    fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
                })
                .count()
        })
    };
    let start = std::time::Instant::now();
    while perf_fds() < 2 * cpus {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "top did not start tracing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// Ends top's interval (SIGINT) and reads the one interval it prints.
fn top_document(c: Child) -> Value {
    // SAFETY: kill(2) of the process this test started, by its PID.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let out = c.wait_with_output().unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 130)),
        "top failed: {out:?}"
    );
    let doc = json(&out);
    assert_eq!(doc["interval_count"], 1, "{doc}");
    doc["intervals"][0].clone()
}

fn rows<'a>(i: &'a Value, view: &str) -> &'a Vec<Value> {
    i[view]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no {view}: {i}"))
}

fn within_5pct(got: &Value, want: u64, what: &str) {
    let got = got
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: not a number: {got}"));
    eprintln!("{what}: top {got} bytes, the kernel {want}");
    let d = got.abs_diff(want) as f64;
    assert!(
        d <= want as f64 * 0.05,
        "{what}: top says {got} bytes, the kernel shows {want}"
    );
}

fn file_row<'a>(i: &'a Value, p: &Path) -> &'a Value {
    rows(i, "files")
        .iter()
        .find(|r| r["path"] == p.to_str().unwrap())
        .unwrap_or_else(|| panic!("no row for {}: {i}", p.display()))
}

#[test]
fn top_names_each_process_cgroup_and_file_with_the_bytes_they_added() {
    if !can_trace() {
        return;
    }
    let (Some(ca), Some(cb)) = (ChildCgroup::new(), ChildCgroup::new()) else {
        return;
    };
    let t = tmp();
    let (fa, fb) = (t.path().join("a"), t.path().join("b"));
    write_file(&fa, 24 << 20);
    write_file(&fb, 40 << 20);
    for f in [&fa, &fb] {
        run(bin().arg("evict").arg(f));
        assert_eq!(cached(f), 0, "setup: {} is cold", f.display());
    }
    let top = start_top("process,cgroup,file");
    let ra = ca.reader(&fa);
    let rb = cb.reader(&fb);
    let (pa, pb) = (ra.id(), rb.id());
    // Both files read whole (the readers then wait on their stdin).
    let start = std::time::Instant::now();
    while cached(&fa) * PAGE < 24 << 20 || cached(&fb) * PAGE < 40 << 20 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the readers did not finish"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let i = top_document(top);
    finish(ra);
    finish(rb);
    for (pid, cg, f) in [(pa, &ca, &fa), (pb, &cb, &fb)] {
        let added = cached(f) * PAGE;
        assert!(added > 0, "{} was read", f.display());
        let p = rows(&i, "processes")
            .iter()
            .find(|r| r["pid"] == pid)
            .unwrap_or_else(|| panic!("no row for pid {pid}: {i}"));
        assert_eq!(p["comm"], "cksum", "{p}");
        assert_eq!(p["cgroup"], cg.shown(), "{p}");
        within_5pct(&p["added_bytes"], added, &format!("process {pid}"));
        let c = rows(&i, "cgroups")
            .iter()
            .find(|r| r["cgroup"] == cg.shown())
            .unwrap_or_else(|| panic!("no row for {}: {i}", cg.shown()));
        within_5pct(&c["added_bytes"], added, &format!("cgroup {}", cg.shown()));
        assert!(
            c["workingset_refaults"].is_u64() || c["refaults_unknown"].is_string(),
            "{c}"
        );
        within_5pct(
            &file_row(&i, f)["added_bytes"],
            added,
            &f.display().to_string(),
        );
    }
}

#[test]
fn top_shows_an_eviction_as_evicted_bytes_and_a_write_as_dirtied_bytes() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let (old, new) = (t.path().join("old"), t.path().join("new"));
    write_file(&old, 32 << 20);
    fs::File::open(&old).unwrap().sync_all().unwrap();
    let before = cached(&old) * PAGE;
    assert!(before > 0, "setup: {} is cached", old.display());
    let top = start_top("file");
    run(bin().arg("evict").arg(&old));
    let evicted = before - cached(&old) * PAGE;
    let mut f = fs::File::create(&new).unwrap();
    f.write_all(&vec![7u8; 8 << 20]).unwrap();
    let dirty = dirty_pages(&new).map_or(8 << 20, |d| d * PAGE);
    let i = top_document(top);
    within_5pct(&file_row(&i, &old)["evicted_bytes"], evicted, "evicted");
    let w = file_row(&i, &new);
    within_5pct(&w["dirtied_bytes"], dirty, "dirtied");
    within_5pct(&w["added_bytes"], 8 << 20, "added by the write");
}

#[test]
fn top_refuses_in_one_line_without_tracing() {
    // As nobody, perf events of every process are refused (perf_event_paranoid >= 0).
    if !require_root("switching to nobody") || !on_path("setpriv") {
        return;
    }
    let out = as_nobody()
        .args(["top", "--once", "--interval", "100ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("top needs"), "{err}");
}

/// `exporter --cgroup-rates`: a reader in a child cgroup shows as that cgroup's
/// `pagewise_cgroup_added_bytes_total`, the bytes cachestat shows it brought in (within 5%),
/// scraped from the running exporter on loopback.
#[test]
fn exporter_counts_each_cgroups_added_bytes() {
    if !can_trace() {
        return;
    }
    let Some(cg) = ChildCgroup::new() else {
        return;
    };
    let t = tmp();
    let f = t.path().join("c");
    write_file(&f, 32 << 20);
    run(bin().arg("evict").arg(&f));
    assert_eq!(cached(&f), 0, "setup: cold");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut exp = bin()
        .args([
            "exporter",
            "--cgroup-rates",
            "--no-cgroups",
            "--interval",
            "200ms",
        ])
        .args(["--listen", &listen])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let scrape = || -> String {
        let get = || -> std::io::Result<String> {
            let mut s = std::net::TcpStream::connect(&listen)?;
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut s, &mut text)?;
            Ok(text)
        };
        get().unwrap_or_default()
    };
    let series = format!(
        "pagewise_cgroup_added_bytes_total{{id=\"{}\"}} ",
        cg.shown()
    );
    let value = |text: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    };
    // Serving and tracing (the families appear once the first refresh drained the sampler).
    let start = std::time::Instant::now();
    while !scrape().contains("pagewise_cgroup_rates_lost_events_total") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "exporter not tracing"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The reader stays alive (its stdin open) until the exporter has counted its reads: on
    // cgroup v1 its group is looked up in /proc/PID/cgroup when its events are read, and a
    // reader gone by then is nobody's (the series was missing 1 in 3 full runs here).
    let reader = cg.reader(&f);
    let size_pages = fs::metadata(&f).unwrap().len().div_ceil(PAGE);
    let read_at = std::time::Instant::now();
    while cached(&f) < size_pages && read_at.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let added = cached(&f) * PAGE;
    let mut got = None;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        got = value(&scrape());
        if got.is_some_and(|g| g.abs_diff(added) as f64 <= added as f64 * 0.05) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    finish(reader);
    let _ = exp.kill();
    let _ = exp.wait();
    let got = got.unwrap_or_else(|| panic!("no series {series}"));
    within_5pct(
        &Value::from(got),
        added,
        &format!("exporter, cgroup {}", cg.shown()),
    );
}

/// A process whose command holds a newline, an escape sequence and a byte that is not UTF-8
/// (it exec'd through a symlink of that name: the kernel takes its comm from the name) is
/// named in the table escaped as file names are (`\x0a`, `\x1b`, `\xff`), and in JSON
/// losslessly as paths are (`comm`, plus `comm_bytes` with the exact bytes).
#[test]
fn top_names_a_process_with_an_odd_command_escaped_and_lossless() {
    if !can_trace() {
        return;
    }
    use std::os::unix::ffi::OsStrExt;
    let t = tmp();
    let f = t.path().join("data");
    write_file(&f, 8 << 20);
    run(bin().arg("evict").arg(&f));
    assert_eq!(cached(&f), 0, "setup: cold");
    let name: &[u8] = b"a\nb\x1b[31mc\xff";
    let exe = t.path().join(std::ffi::OsStr::from_bytes(name));
    std::os::unix::fs::symlink("/usr/bin/cksum", &exe).unwrap();
    let json_top = start_top_as("process", &["--json"]);
    let _reaper = Reaper(vec![(json_top.id() as i32, "pagewise")]);
    let text_top = start_top_as("process", &[]);
    let _reaper2 = Reaper(vec![(text_top.id() as i32, "pagewise")]);
    // Reads the file, then its stdin (held open: alive until its comm is read).
    let reader = std::process::Command::new(&exe)
        .arg(&f)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = reader.id();
    // The kernel's comm, once the child has exec'd.
    let want = [name, b"\n"].concat();
    let start = std::time::Instant::now();
    while fs::read(format!("/proc/{pid}/comm")).unwrap() != want {
        assert!(start.elapsed() < Duration::from_secs(5), "comm never set");
        std::thread::sleep(Duration::from_millis(10));
    }
    let start = std::time::Instant::now();
    while cached(&f) * PAGE < 8 << 20 {
        assert!(start.elapsed() < Duration::from_secs(60), "not read");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) of the process this test started, by its PID.
    unsafe { libc::kill(text_top.id() as i32, libc::SIGINT) };
    let text = text_top.wait_with_output().unwrap();
    let i = top_document(json_top);
    finish(reader);
    let table = String::from_utf8(text.stdout).expect("the table is UTF-8");
    eprintln!("{table}");
    let row = table
        .lines()
        .find(|l| l.split_whitespace().any(|c| c == pid.to_string()))
        .unwrap_or_else(|| panic!("no row for pid {pid}: {table}"));
    assert!(
        row.contains(r"a\x0ab\x1b[31mc\xff"),
        "escaped command in {row:?}"
    );
    assert!(!table.contains('\x1b'), "no escape byte in the table");
    let p = rows(&i, "processes")
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("no row for pid {pid}: {i}"));
    assert_eq!(p["comm"], String::from_utf8_lossy(name).as_ref(), "{p}");
    let bytes: Vec<u8> = p["comm_bytes"]
        .as_array()
        .unwrap_or_else(|| panic!("no comm_bytes: {p}"))
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, name, "{p}");
}

/// Where perf events are refused (as nobody, perf_event_paranoid >= 0, no CAP_PERFMON) but
/// tracefs is open to the user (CAP_DAC_OVERRIDE: tracefs is mode 0700), `top` follows the same
/// tracepoints through a tracefs instance of its own, says so, and counts a read it sees as
/// the bytes cachestat shows it brought in (within 5%).
#[test]
fn top_takes_the_tracefs_route_where_perf_events_are_refused() {
    if !require_root("switching to nobody") || !require(on_path("setpriv"), "setpriv") {
        return;
    }
    let t = tmp();
    let f = t.path().join("read-by-test");
    cold_file(&f, 16 << 20);
    let top = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["--inh-caps=+dac_override", "--ambient-caps=+dac_override"])
        .arg(env!("CARGO_BIN_EXE_pagewise"))
        .args([
            "top",
            "--once",
            "--json",
            "--by",
            "file",
            "--interval",
            "10m",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Tracing once one of pagewise's instances has the add event on.
    let on = || {
        fs::read_dir("/sys/kernel/tracing/instances").is_ok_and(|d| {
            d.flatten().any(|i| {
                fs::read_to_string(
                    i.path()
                        .join("events/filemap/mm_filemap_add_to_page_cache/enable"),
                )
                .is_ok_and(|v| v.trim() == "1")
            })
        })
    };
    let start = std::time::Instant::now();
    while !on() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "top did not start tracing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    fs::read(&f).unwrap();
    let added = cached(&f) * PAGE;
    std::thread::sleep(Duration::from_millis(500));
    let top_pid = top.id();
    // SAFETY: kill(2) of the process this test started, by its PID.
    unsafe { libc::kill(top_pid as i32, libc::SIGINT) };
    let out = top.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 130)), "{out:?}");
    let doc = json(&out);
    let said = format!("{err}{doc}");
    assert!(said.contains("through tracefs instead"), "{said}");
    // A private instance (the shared one was busy) is removed by its run; as nobody that
    // rmdir can be refused: the test, root, removes what is left of it.
    let _ = fs::remove_dir(format!(
        "/sys/kernel/tracing/instances/pagewise-{}",
        top_pid
    ));
    let i = &doc["intervals"][0];
    // As nobody the file is found by its inode (naming it needs CAP_DAC_READ_SEARCH: the row
    // says so instead of a path).
    let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&f).unwrap());
    let row = rows(i, "files")
        .iter()
        .find(|r| r["ino"] == ino)
        .unwrap_or_else(|| panic!("no row for inode {ino}: {i}"));
    within_5pct(&row["added_bytes"], added, "added, through tracefs");
}
