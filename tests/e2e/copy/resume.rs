//! Resuming inside a file: a copy under named temporaries killed mid-file (SIGKILL) or
//! stopped with `--partial` (SIGINT) keeps its checkpointed prefix, and the next run reads
//! only the rest — measured with the kernel's I/O accounting (`read_bytes` of /proc/PID/io,
//! which a shell holds for the children it waited for) — and leaves a byte-identical copy;
//! a source that changed, or a kept prefix that differs from it, is copied from the start.

use crate::common::*;
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
    let (r, read, _) = copy_counting_io(args, src, dst);
    (r, read)
}

/// As [`copy_counting_reads`], with the bytes written to disk too.
fn copy_counting_io(args: &[&str], src: &Path, dst: &Path) -> (serde_json::Value, u64, u64) {
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
    let field = |f: &str| -> u64 {
        err.lines()
            .find_map(|l| l.strip_prefix(f)?.strip_prefix(": "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {f} in {err}"))
    };
    (json(&out), field("read_bytes"), field("write_bytes"))
}

/// One test at a time: each checkpoint waits for an fdatasync, and a second copy writing to
/// the same disk makes those waits (and the data a kill loses) longer.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn partial_temporaries(dir: &Path) -> Vec<std::path::PathBuf> {
    leftovers(dir)
}

/// SIGKILL at 90% of a 1 GiB file, then `-u` writes only the rest, and reads the rest plus
/// the kept prefix on each side once (the byte-for-byte check: `resume_compared_bytes`).
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
    let (report, read, written) = copy_counting_io(&["-u"], &src, &dst);
    eprintln!(
        "resumed {} of {} bytes; the resuming run read {read} bytes from disk ({:.1}% of the file) and wrote {written} ({:.1}%)",
        report["resumed_bytes"],
        size,
        read as f64 * 100.0 / size as f64,
        written as f64 * 100.0 / size as f64,
    );
    assert_eq!(report["resumed_files"], 1, "{report}");
    let kept = report["resumed_bytes"].as_u64().unwrap();
    assert!(kept >= size * 3 / 4, "kept {kept}");
    assert_eq!(
        report["resume_compared_bytes"].as_u64(),
        Some(kept),
        "{report}"
    );
    let rest = size - kept;
    assert!(
        read <= 2 * kept + rest + size / 20,
        "read {read} bytes: more than the kept prefix on each side plus the rest"
    );
    assert!(
        written <= rest + size / 20,
        "wrote {written} bytes: more than the rest ({rest})"
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

// ---- Trust: only a temporary this user provably made alone is taken up, and a resumed
// file is the source byte for byte or is not published (issue 39).

use pagewise_core::sys;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A PID that is gone: a child started and reaped.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// Plants, as another user would, a temporary for `name` in `dir` with the copies' mark, a
/// checkpoint for `src` keeping `kept` bytes, and the source's first `kept` bytes; owned by
/// uid/gid 65534, mode 0666. Returns its path and an open, writable descriptor to it (the
/// planter's).
fn plant(
    dir: &Path,
    name: &str,
    src: &Path,
    kept: u64,
    checkpoint: bool,
) -> (std::path::PathBuf, std::fs::File) {
    let p = dir.join(format!(".{name}.pagewise-{}-0.tmp", dead_pid()));
    let data = std::fs::read(src).unwrap();
    std::fs::write(&p, &data[..kept as usize]).unwrap();
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    sys::set_xattr(f.as_fd(), c"user.pagewise.temporary", b"1").unwrap();
    if checkpoint {
        let m = std::fs::metadata(src).unwrap();
        let c = format!(
            "pagewise-resume 1 {} {} {} {} {} {kept}",
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec()
        );
        sys::set_xattr(f.as_fd(), c"user.pagewise.resume", c.as_bytes()).unwrap();
    }
    std::os::unix::fs::fchown(&f, Some(65534), Some(65534)).unwrap();
    f.set_permissions(std::fs::Permissions::from_mode(0o666))
        .unwrap();
    (p, f)
}

/// Root copying into a world-writable directory (sticky or not) never takes up — nor
/// removes — a temporary another user planted there, mark, checkpoint and data included:
/// the published file is a new file of root's, not the planted one (whose planter still
/// holds a writable descriptor to it). Before: the planted file was published, owned by
/// uid 65534, and `-a --verify` said "0 mismatches".
#[test]
fn a_planted_temporary_is_never_adopted_nor_removed() {
    if !require_root("copying into a world-writable directory as root") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let src = t.path().join("data");
    write_file(&src, 40 << 20);
    for mode in [0o1777, 0o777] {
        let out = t.path().join(format!("shared-{mode:o}"));
        std::fs::create_dir(&out).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(mode)).unwrap();
        let (planted, _planter) = plant(&out, "data", &src, 32 << 20, true);
        let (stale, _) = plant(&out, "data", &src, 1 << 20, false);
        let planted_ino = std::fs::metadata(&planted).unwrap().ino();
        for args in [
            &["-a", "--verify", "--partial"][..],
            &["--partial"],
            &["-u"],
        ] {
            let dst = out.join("data");
            let _ = std::fs::remove_file(&dst);
            let o = run(bin()
                .args(["copy", "--json"])
                .args(args)
                .arg(&src)
                .arg(&dst));
            assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
            let r = json(&o);
            assert_eq!(r["resumed_files"], 0, "{args:?} {r}");
            let m = std::fs::metadata(&dst).unwrap();
            assert_eq!(m.uid(), 0, "{args:?}: the copy must be root's own file");
            assert_ne!(
                m.ino(),
                planted_ino,
                "{args:?}: the planted file was published"
            );
            assert!(same(&src, &dst), "{args:?}");
            assert!(
                planted.exists() && stale.exists(),
                "{args:?}: someone else's file was removed"
            );
            assert!(
                r["notices"].to_string().contains("left alone"),
                "{args:?} {r}"
            );
        }
    }
}

/// A 96 MiB source and a destination directory, for copies killed (SIGKILL) at 60% under
/// `--partial`.
struct Killed {
    src: std::path::PathBuf,
    out: std::path::PathBuf,
    dst: std::path::PathBuf,
}

impl Killed {
    const SIZE: u64 = 96 << 20;

    fn new(dir: &Path) -> Killed {
        let src = dir.join("data");
        write_file(&src, Self::SIZE as usize);
        let out = dir.join("out");
        std::fs::create_dir(&out).unwrap();
        let dst = out.join("data");
        Killed { src, out, dst }
    }

    /// Starts a `--partial` copy, kills it at 60%: the one temporary it left.
    fn kill(&self) -> std::path::PathBuf {
        sync_and_evict(&self.src);
        stop_at(
            &["--partial", "--bwlimit", "30M"],
            &self.src,
            &self.dst,
            Self::SIZE * 6 / 10,
            libc::SIGKILL,
        );
        let temps = partial_temporaries(&self.out);
        assert_eq!(temps.len(), 1);
        temps[0].clone()
    }
}

/// Kept data that differs from the source anywhere — not only where a sample would look —
/// is not resumed; a clean resume reports what the byte-for-byte check read. Before: a byte
/// changed at 1 MiB + 12345 (between the sampled blocks) was published, exit 0.
#[test]
fn kept_data_must_equal_the_source_byte_for_byte() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let k = Killed::new(t.path());
    let (src, out, dst) = (k.src.clone(), k.out.clone(), k.dst.clone());
    let kill = || k.kill();
    let temp = kill();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options().write(true).open(&temp).unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, (1 << 20) + 12345).ok();
        f.write_all_at(&[!b[0]], (1 << 20) + 12345).unwrap();
        f.sync_all().unwrap();
    }
    let o = run(bin().args(["copy", "--json"]).arg(&src).arg(&dst));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = json(&o);
    assert_eq!(r["resumed_files"], 0, "{r}");
    assert!(r["notices"].to_string().contains("did not match"), "{r}");
    assert!(same(&src, &dst), "a resumed file differs from its source");
    assert!(partial_temporaries(&out).is_empty());

    // A clean resume: the check reads the kept bytes on each side, and the file is right.
    std::fs::remove_file(&dst).unwrap();
    kill();
    let (r, _) = copy_counting_reads(&[], &src, &dst);
    assert_eq!(r["resumed_files"], 1, "{r}");
    let kept = r["resumed_bytes"].as_u64().unwrap();
    assert_eq!(r["resume_compared_bytes"].as_u64(), Some(kept), "{r}");
    assert!(same(&src, &dst));
}

/// A temporary of ours that another process holds open when the copy would take it up is
/// not taken up (it could be written behind the copy's back); one that grows while the rest
/// is written is not published, exit 2. Before: both were published, exit 0 — the second
/// longer than its source.
#[test]
fn a_temporary_open_elsewhere_or_written_to_meanwhile_is_not_published() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let k = Killed::new(t.path());
    let (src, dst) = (k.src.clone(), k.dst.clone());
    let kill = || k.kill();

    let temp = kill();
    let holder = std::fs::File::options().write(true).open(&temp).unwrap();
    let o = run(bin().args(["copy", "--json"]).arg(&src).arg(&dst));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = json(&o);
    assert_eq!(r["resumed_files"], 0, "{r}");
    assert!(
        r["notices"]
            .to_string()
            .contains("another process has it open"),
        "{r}"
    );
    assert!(same(&src, &dst));
    let held = holder.metadata().unwrap().ino();
    assert_ne!(std::fs::metadata(&dst).unwrap().ino(), held);
    drop(holder);

    // Appended to while the rest is written.
    std::fs::remove_file(&dst).unwrap();
    let temp = kill();
    let mut child = bin()
        .args(["copy", "--bwlimit", "20M"])
        .arg(&src)
        .arg(&dst)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    {
        use std::io::Write;
        let mut f = std::fs::File::options().append(true).open(&temp).unwrap();
        f.write_all(b"appended behind the copy's back").unwrap();
    }
    let status = child.wait().unwrap();
    let err = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("grew past the source's size"), "{err}");
    assert!(!dst.exists(), "a file longer than its source was published");
}

/// `--verify` that finds a copied file different from its source removes it from its final
/// name (exit 2): here the first file is changed on disk after its commit while the second,
/// slow one is still copied. Before: exit 2, and the wrong file stayed under its name.
#[test]
fn a_file_verify_finds_wrong_is_not_left_under_its_name() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    write_file(&src.join("a"), 1 << 20);
    write_file(&src.join("b"), 48 << 20);
    let dst = t.path().join("dst");
    let mut child = bin()
        .args(["copy", "-j", "1", "--verify", "--bwlimit", "16M"])
        .arg(format!("{}/", src.display()))
        .arg(&dst)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let a = dst.join("a");
    let start = Instant::now();
    while !a.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a was never copied"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options().write(true).open(&a).unwrap();
        f.write_all_at(b"corrupted", 4096).unwrap();
        f.sync_all().unwrap();
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "b was copied before a was changed"
    );
    let status = child.wait().unwrap();
    let err = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("differs from the source"), "{err}");
    assert!(
        !a.exists(),
        "the file --verify found wrong stayed under its name: {err}"
    );
    assert!(same(&src.join("b"), &dst.join("b")));
}

/// `--partial` keeps what was written when the destination runs out of space, and the next
/// run (once there is room) resumes it. Before: nothing was kept.
#[test]
fn partial_keeps_a_copy_that_ran_out_of_space() {
    if !require_root("a small ext4 image on a loop device") {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let Some(m) = LoopMount::new(t.path()) else {
        return;
    };
    let src = t.path().join("data");
    write_file(&src, 24 << 20);
    let filler = m.mnt.join("filler");
    write_file(&filler, 8 << 20);
    let dst = m.mnt.join("data");
    let o = run(bin().args(["copy", "--partial"]).arg(&src).arg(&dst));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("No space left"), "{}", stderr(&o));
    assert!(!dst.exists());
    assert_eq!(
        leftovers(&m.mnt).len(),
        1,
        "--partial kept nothing: {}",
        stderr(&o)
    );
    std::fs::remove_file(&filler).unwrap();
    let o = run(bin().args(["copy", "--json"]).arg(&src).arg(&dst));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json(&o)["resumed_files"], 1, "{}", stdout(&o));
    assert!(same(&src, &dst));
    assert!(leftovers(&m.mnt).is_empty());
}

/// A single-file copy under a named temporary killed before its first checkpoint leaves a
/// temporary with nothing to resume; the next copy of that file removes it (tree copies
/// already did). While written, a named temporary is 0600 — nobody else can open it — and
/// the published file gets the source's mode less the umask. Before: the temporary stayed
/// forever, and was as open as the source (0666 here).
#[test]
fn named_temporaries_are_private_and_cleaned_by_single_file_copies() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = tmp();
    let src = t.path().join("data");
    write_file(&src, 64 << 20);
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("data");
    let script = r#"umask 0; exec "$@""#;
    let mut child = Command::new("sh")
        .args([
            "-c",
            script,
            "sh",
            env!("CARGO_BIN_EXE_pagewise"),
            "copy",
            "--named-temp",
            "--bwlimit",
            "8M",
        ])
        .arg(&src)
        .arg(&dst)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let temp = loop {
        if let Some(p) = partial_temporaries(&out).pop() {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no temporary seen"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let mode = std::fs::metadata(&temp).unwrap().permissions().mode() & 0o7777;
    // SAFETY: kill(2) of the child this test started, by its PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    assert_eq!(
        mode, 0o600,
        "a named temporary must be private while written"
    );
    assert_eq!(partial_temporaries(&out).len(), 1);
    let o = run(Command::new("sh")
        .args([
            "-c",
            script,
            "sh",
            env!("CARGO_BIN_EXE_pagewise"),
            "copy",
            "--json",
            "--named-temp",
        ])
        .arg(&src)
        .arg(&dst));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json(&o)["stale_temporaries_removed"], 1, "{}", stdout(&o));
    assert!(
        partial_temporaries(&out).is_empty(),
        "{:?}",
        partial_temporaries(&out)
    );
    assert_eq!(
        std::fs::metadata(&dst).unwrap().permissions().mode() & 0o777,
        0o666
    );
    assert!(same(&src, &dst));
}
