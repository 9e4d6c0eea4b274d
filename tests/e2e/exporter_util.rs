//! Helpers of the exporter's end-to-end tests (`exporter`, `exporter::ops`, `hostile`):
//! servers killed by PID on drop, free loopback ports, HTTP GETs, Prometheus's HTTP API,
//! `promtool check metrics`, an exporter started and waited for.

use crate::common::*;
use serde_json::Value;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (by PID) and reaped on drop.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A log file in the test's temp dir for a server's output (read when a test fails).
pub fn log(dir: &Path, name: &str) -> File {
    File::create(dir.join(name)).unwrap()
}

/// GET over HTTP/1.0 (no chunking, the server closes): (status line and headers, body).
pub fn get(port: u16, path: &str, accept: &str) -> Option<(String, String)> {
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
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
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

/// `promtool check metrics` of `text`: must succeed and say nothing.
pub fn promtool_check(text: &str) {
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
pub fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The instant vector Prometheus holds for `query` (None until it has samples).
pub fn query(port: u16, q: &str) -> Option<Vec<Value>> {
    let (_, body) = get(port, &format!("/api/v1/query?query={}", encode(q)), "*/*")?;
    let v: Value = serde_json::from_str(&body).ok()?;
    let r = v["data"]["result"].as_array()?.clone();
    (!r.is_empty()).then_some(r)
}

pub fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

/// An exporter on a free loopback port (no cgroups, the given extra args), once it answers.
pub fn exporter_on(dir: &Path, pre: &[&str], args: &[&std::ffi::OsStr]) -> (Server, u16) {
    let xp = free_port();
    let mut cmd = if pre.is_empty() {
        bin()
    } else {
        let mut c = Command::new(pre[0]);
        c.args(&pre[1..]).arg(env!("CARGO_BIN_EXE_pagewise"));
        c
    };
    cmd.args([
        "exporter",
        "--no-cgroups",
        "--listen",
        &format!("127.0.0.1:{xp}"),
    ])
    .args(args)
    .stderr(log(dir, "exporter.log"));
    let s = Server(cmd.spawn().unwrap());
    wait_for(30, "the exporter answers", || {
        get(xp, "/metrics", "text/plain")
    });
    (s, xp)
}

/// VmRSS of a process in KiB, from /proc/PID/status.
pub fn rss_kib(pid: u32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

pub fn alive(s: &mut Server) -> bool {
    s.0.try_wait().unwrap().is_none()
}

/// A real Prometheus server on 127.0.0.1:`port` with the configuration `conf` (its data beside
/// it), logging into `logs`; ended (by PID) when dropped.
pub fn prometheus(conf: &Path, port: u16, logs: &Path) -> Server {
    let data = conf.parent().unwrap().join("data");
    Server(
        std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log(logs, "prometheus.out"))
            .stderr(log(logs, "prometheus.log"))
            .spawn()
            .unwrap(),
    )
}

/// (labels, value) of each sample of `name`.
pub fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, v) = rest.rsplit_once("} ")?;
            Some((labels, v.parse().ok()?))
        })
        .collect()
}
