//! Resuming inside a file: a copy under named temporaries killed mid-file (SIGKILL) or
//! stopped with `--partial` (SIGINT) keeps its checkpointed prefix, and the next run reads
//! only the rest — measured with the kernel's I/O accounting (`read_bytes` of /proc/PID/io,
//! which a shell holds for the children it waited for) — and leaves a byte-identical copy;
//! a source that changed, or a kept prefix that differs from it, is copied from the start.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A /proc/PID/io field of a running process.
fn io_field(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(": "))
        .and_then(|v| v.trim().parse().ok())
}

/// Starts `pagewise copy ARGS SRC DST` and sends `signal` once it has written `at` bytes
/// (`wchar`); returns its exit status and stderr once it ended.
fn stop_at(args: &[&str], src: &Path, dst: &Path, at: u64, signal: i32) -> (ExitStatus, String) {
    let mut child = bin()
        .arg("copy")
        .args(args)
        .arg(src)
        .arg(dst)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the copy ended before {at} bytes were written"
        );
        if io_field(pid, "wchar").is_some_and(|w| w >= at) {
            // SAFETY: kill(2) of the child this test started, by its PID.
            unsafe { libc::kill(pid as i32, signal) };
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = child.wait().unwrap();
    let err = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    (status, err)
}

/// `pagewise copy ARGS SRC DST --json` under a shell that then prints its own /proc/PID/io
/// (its children's I/O included once waited for): the report and the bytes read from disk.
fn copy_counting_reads(args: &[&str], src: &Path, dst: &Path) -> (serde_json::Value, u64) {
    let script = r#"b=$1; shift; "$b" copy --json "$@"; s=$?; cat /proc/$$/io >&2; exit $s"#;
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(env!("CARGO_BIN_EXE_pagewise"))
        .args(args)
        .arg(src)
        .arg(dst)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let read = err
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no read_bytes in {err}"));
    (json(&out), read)
}

/// One test at a time: each checkpoint waits for an fdatasync, and a second copy writing to
/// the same disk makes those waits (and the data a kill loses) longer.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn partial_temporaries(dir: &Path) -> Vec<std::path::PathBuf> {
    leftovers(dir)
}

/// The issue's figure: SIGKILL at 90% of a 1 GiB file, then `-u` reads at most 15% of it again.
#[test]
fn killed_at_90_percent_resumes_reading_the_rest() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let src = t.path().join("one-gib");
    let size: u64 = 1 << 30;
    write_file(&src, size as usize);
    sync_and_evict(&src);
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("copy");
    // Named temporaries (the default unnamed O_TMPFILE file dies with its process).
    stop_at(
        &["--named-temp", "--bwlimit", "100M"],
        &src,
        &dst,
        size * 9 / 10,
        libc::SIGKILL,
    );
    assert!(!dst.exists(), "nothing stands under the final name");
    assert_eq!(partial_temporaries(&out).len(), 1, "the partial copy stays");
    sync_and_evict(&src);
    let (report, read) = copy_counting_reads(&["-u"], &src, &dst);
    eprintln!(
        "resumed {} of {} bytes; the resuming run read {read} bytes from disk ({:.1}% of the file)",
        report["resumed_bytes"],
        size,
        read as f64 * 100.0 / size as f64
    );
    assert_eq!(report["resumed_files"], 1, "{report}");
    let kept = report["resumed_bytes"].as_u64().unwrap();
    assert!(kept >= size * 3 / 4, "kept {kept}");
    assert!(
        read <= size * 15 / 100,
        "read {read} bytes again (more than 15% of {size})"
    );
    assert!(same(&src, &dst), "the resumed copy differs from its source");
    assert!(partial_temporaries(&out).is_empty());
}

/// `--partial`: Ctrl-C keeps the temporary; the next run resumes it. A source that changed
/// meanwhile, or a kept prefix that does not match the source, starts over — and the copy is
/// right either way.
#[test]
fn partial_on_interrupt_and_what_is_not_trusted() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let src = t.path().join("data");
    let size: u64 = 96 << 20;
    write_file(&src, size as usize);
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("data");
    let stop = |signal| {
        sync_and_evict(&src);
        stop_at(
            &["--partial", "--bwlimit", "30M"],
            &src,
            &dst,
            size * 6 / 10,
            signal,
        )
    };

    // SIGINT with --partial: exit 130, the temporary stays (with its checkpoint).
    let (status, err) = stop(libc::SIGINT);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("kept as partial temporaries"), "{err}");
    assert_eq!(partial_temporaries(&out).len(), 1, "{err}");
    // --verify: the kept prefix's hashes come from the source on disk, the whole file compares.
    let (report, _) = copy_counting_reads(&["--verify"], &src, &dst);
    assert_eq!(report["resumed_files"], 1, "{report}");
    assert_eq!(report["verified_files"], 1, "{report}");
    assert_eq!(report["verify_mismatches"], 0, "{report}");
    assert!(same(&src, &dst));

    // The source changed (its mtime) after the kill: copied from the start.
    std::fs::remove_file(&dst).unwrap();
    stop(libc::SIGKILL);
    assert_eq!(partial_temporaries(&out).len(), 1);
    let now = std::time::SystemTime::now() + Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_modified(now)
        .unwrap();
    let (report, _) = copy_counting_reads(&[], &src, &dst);
    assert_eq!(report["resumed_files"], 0, "{report}");
    assert!(same(&src, &dst));
    assert!(partial_temporaries(&out).is_empty());

    // The kept prefix was changed behind the copy's back (its first block, always sampled):
    // discarded, with a notice, and copied from the start.
    std::fs::remove_file(&dst).unwrap();
    stop(libc::SIGKILL);
    let temps = partial_temporaries(&out);
    assert_eq!(temps.len(), 1);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options()
            .write(true)
            .open(&temps[0])
            .unwrap();
        f.write_all_at(b"not the source", 4096).unwrap();
        f.sync_all().unwrap();
    }
    let o = run(bin().args(["copy", "--json"]).arg(&src).arg(&dst));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report = json(&o);
    assert_eq!(report["resumed_files"], 0);
    assert!(
        report["notices"]
            .to_string()
            .contains("did not match its source"),
        "{report}"
    );
    assert!(same(&src, &dst));
    assert!(partial_temporaries(&out).is_empty());
}
