//! `copy --bwlimit` and `--ionice`, checked with what the kernel reports: the bytes the
//! process wrote (`wchar` of /proc/PID/io) over time, and the I/O priority of each of its
//! threads (ioprio_get).

use crate::common::*;
use std::time::{Duration, Instant};

/// `wchar` of /proc/PID/io: bytes the process passed to write calls.
fn wchar(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|v| v.trim().parse().ok())
}

/// The I/O priority class of each thread of `pid` but the progress line's (ioprio_get; 3 is
/// idle).
fn io_classes(pid: u32) -> Vec<i64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok())
        // The CLI's progress line (it does no I/O) is not the copy's.
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .is_ok_and(|c| c.trim() != "pw-progress")
        })
        .map(|tid| {
            // SAFETY: ioprio_get(IOPRIO_WHO_PROCESS, tid) takes plain integers.
            let v = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, tid) };
            if v < 0 {
                -1
            } else {
                v >> 13
            }
        })
        .collect()
}

/// 1 GiB at `--bwlimit 50M` takes 20.5 s (19.5–21.5), no 10 s window moves more than 5 %
/// over the rate, with `--ionice idle` every thread of the copy is in the idle class, and
/// `--progress` into a pipe writes a line a second with the totals and an ETA.
#[test]
fn bandwidth_limit_and_io_priority() {
    let t = tmp();
    let src = t.path().join("one-gib");
    write_file(&src, 1 << 30);
    sync_and_evict(&src);
    let dst = t.path().join("copy");
    let start = Instant::now();
    let mut child = bin()
        .args(["copy", "--bwlimit", "50M", "--ionice", "idle", "--progress"])
        .arg(&src)
        .arg(&dst)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // --progress where stderr is a pipe: one line a second, read as it comes.
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let pid = child.id();
    let mut samples: Vec<(f64, u64)> = Vec::new();
    let mut classes = Vec::new();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if let Some(w) = wchar(pid) {
            samples.push((start.elapsed().as_secs_f64(), w));
        }
        if samples.len() == 10 {
            classes = io_classes(pid);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still copying after 60 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let took = start.elapsed().as_secs_f64();
    let stderr = reader.join().unwrap();
    assert!(status.success(), "{stderr}");
    let progress: Vec<&str> = stderr.lines().filter(|l| l.starts_with("copy ")).collect();
    assert!(
        progress.len() >= 15 && progress.iter().all(|l| l.contains("/s")),
        "expected a progress line a second: {stderr}"
    );
    assert!(
        progress
            .iter()
            .any(|l| l.contains("/1.0 GiB ") && l.contains("ETA 0:")),
        "the totals are known and an ETA is shown: {stderr}"
    );
    assert!(same(&src, &dst));
    assert!(
        (19.5..=21.5).contains(&took),
        "1 GiB at 50 MiB/s took {took:.2} s"
    );
    let rate = 50.0 * 1024.0 * 1024.0;
    let mut worst: f64 = 0.0;
    for (i, &(t0, w0)) in samples.iter().enumerate() {
        if let Some(&(t1, w1)) = samples[i..].iter().find(|(t1, _)| t1 - t0 >= 10.0) {
            worst = worst.max((w1 - w0) as f64 / (t1 - t0) / rate);
        }
    }
    eprintln!(
        "1 GiB at --bwlimit 50M: {took:.2} s; busiest 10 s window {worst:.3}x the limit; \
         thread I/O classes {classes:?}"
    );
    assert!(worst > 0.0, "no 10 s window sampled: {samples:?}");
    assert!(worst <= 1.05, "a 10 s window moved {worst:.3}x the limit");
    assert!(
        !classes.is_empty() && classes.iter().all(|&c| c == 3),
        "{classes:?}"
    );
}

#[test]
fn bad_rates_and_classes_are_refused() {
    let t = tmp();
    let src = t.path().join("f");
    write_file(&src, 10);
    for (flag, value) in [
        ("--bwlimit", "fast"),
        ("--ionice", "realtime"),
        ("--ionice", "best-effort:9"),
        ("--ionice", "idle:3"),
    ] {
        let out = run(bin()
            .arg("copy")
            .args([flag, value])
            .arg(&src)
            .arg(t.path().join("d")));
        assert_eq!(out.status.code(), Some(1), "{flag} {value}");
        assert!(stderr(&out).contains(flag), "{}", stderr(&out));
    }
}

/// The I/O scheduler of the device holding `p`, as the kernel shows it (the bracketed name of
/// its sysfs `queue/scheduler`, or the parent disk's for a partition).
fn scheduler_of(p: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let d = std::fs::metadata(p).ok()?.dev();
    let (major, minor) = (libc::major(d), libc::minor(d));
    ["queue", "../queue"].iter().find_map(|q| {
        let t = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/{q}/scheduler"))
            .ok()?;
        let s = t.split('[').nth(1)?.split(']').next()?.to_string();
        Some(s)
    })
}

/// `--ionice` says, once per device, when the device's I/O scheduler ignores I/O priorities
/// (none, kyber) and is silent where it serves them (bfq, mq-deadline): on the test directory's
/// disk and on a loop device (whose scheduler is set to none for the test, if it is not).
#[test]
fn ionice_says_when_a_devices_scheduler_ignores_priorities() {
    let t = tmp();
    let src = t.path().join("src");
    write_file(&src, 1 << 20);
    let said = |dest: &std::path::Path| {
        let out = run(bin().args(["copy", "--ionice", "idle"]).arg(&src).arg(dest));
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
            .matches("--ionice: the I/O scheduler of device")
            .count()
    };
    let ignores = |s: &Option<String>| matches!(s.as_deref(), Some("none" | "kyber"));
    let here = scheduler_of(t.path());
    assert_eq!(
        said(&t.path().join("dst")),
        usize::from(ignores(&here)),
        "scheduler {here:?}"
    );
    let Some(m) = LoopMount::new(t.path()) else {
        return;
    };
    let dev = m
        .dev
        .as_deref()
        .expect("a loop device")
        .trim_start_matches("/dev/");
    let sched = format!("/sys/block/{dev}/queue/scheduler");
    if !std::fs::read_to_string(&sched).is_ok_and(|s| s.contains("[none]")) {
        std::fs::write(&sched, "none").unwrap();
    }
    let loop_dest = m.mnt.join("dst");
    assert_eq!(scheduler_of(&m.mnt).as_deref(), Some("none"));
    // Source on the disk, destination on the loop device: one notice (the loop's), or two.
    assert_eq!(said(&loop_dest), 1 + usize::from(ignores(&here)));
}

/// `--bwlimit auto` on a loop device of its own: with nobody else reading it, the copy is not
/// limited and says so; with a reader doing small O_DIRECT reads on the same device, the
/// device's read latency before the copy is the baseline, the rate is set while the copy runs
/// (the report says between which rates and how often it was halved), and the copy is exact.
/// Without a block device under the copy (tmpfs) it says so too.
#[test]
fn bwlimit_auto_follows_the_device_s_readers() {
    let t = tmp();
    let Some(m) = LoopMount::new(t.path()) else {
        return;
    };
    // The loop file system is 32 MiB.
    let src = m.mnt.join("src");
    write_file(&src, 6 << 20);
    let copy = |dst: &std::path::Path| {
        let out = run(bin()
            .args(["copy", "--json", "--bwlimit", "auto"])
            .arg(&src)
            .arg(dst));
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(same(&src, dst));
        json(&out)
    };
    let quiet = copy(&m.mnt.join("dst1"));
    let notices = quiet["notices"].to_string();
    assert!(notices.contains("no other reads on"), "{quiet}");
    assert!(quiet["auto_rate"]["baseline_ms"].is_null(), "{quiet}");
    std::fs::remove_file(m.mnt.join("dst1")).unwrap();
    // A reader: 4 KiB O_DIRECT reads at random offsets of a file on the same device.
    let db = m.mnt.join("db");
    write_file(&db, 8 << 20);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::{FileExt, OpenOptionsExt};
            let f = std::fs::File::options()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&db)
                .unwrap();
            let mut buf = pagewise_core::sys::AlignedBuf::new(4096, 4096);
            let mut x: u64 = 88172645463325252;
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = (x % ((8 << 20) / 4096)) * 4096;
                f.read_at(&mut buf[..4096], off).unwrap();
                reads += 1;
            }
            reads
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let busy = copy(&m.mnt.join("dst2"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 100);
    let a = &busy["auto_rate"];
    assert!(a["baseline_ms"].as_f64().is_some_and(|b| b > 0.0), "{busy}");
    assert_eq!(a["devices"].as_array().unwrap().len(), 1, "{busy}");
    let (lo, hi) = (
        a["min_rate"].as_f64().unwrap(),
        a["max_rate"].as_f64().unwrap(),
    );
    assert!(lo >= (1 << 20) as f64 && lo <= hi, "{busy}");
    // No block device at all.
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let s2 = shm.path().join("s");
    write_file(&s2, 1 << 20);
    let out = run(bin()
        .args(["copy", "--bwlimit", "auto"])
        .arg(&s2)
        .arg(shm.path().join("d")));
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("no block device under the copy"),
        "{}",
        stderr(&out)
    );
}
