//! End-to-end tests of `record`, `show`, `replay`, `evict --trace` and `load --trace`, against
//! the kernel's own page-cache tracepoint and cachestat: also record's exit on SIGTERM (the
//! trace still written), `evict --trace --dry-run`, and show's and assist's usage errors.
//! Crafted, corrupt and empty traces are tests/trace_hostile.rs.

mod hostile;

use crate::common::*;
use pagewise_core::trace::Trace;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The backends to test: both, unless this kernel refuses perf events (then the reason is
/// printed and only tracefs is tested; `auto` must then have fallen back with a notice).
fn backends() -> Vec<&'static str> {
    static PERF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let perf = *PERF.get_or_init(|| {
        let out = bin()
            .args([
                "record",
                "--backend",
                "perf",
                "-o",
                "/dev/null",
                "--",
                "true",
            ])
            .output()
            .unwrap();
        if !out.status.success() {
            eprintln!(
                "skipped the perf backend: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        out.status.success()
    });
    if perf {
        vec!["perf", "tracefs"]
    } else {
        vec!["tracefs"]
    }
}

fn record(trace: &Path, cmd: &[String]) -> Trace {
    record_with(trace, cmd, "auto")
}

fn record_with(trace: &Path, cmd: &[String], backend: &str) -> Trace {
    let out = run(bin()
        .args(["record", "--backend", backend, "-o"])
        .arg(trace)
        .arg("--")
        .args(cmd));
    assert!(out.status.success(), "{backend}");
    let err = String::from_utf8_lossy(&out.stderr);
    if backend == "auto" {
        // Perf events where the kernel allows them; else tracefs, said in a notice.
        let want = if backends().contains(&"perf") {
            "record (perf)"
        } else {
            "recording through tracefs"
        };
        assert!(err.contains(want), "{err}");
    } else {
        assert!(err.contains(&format!("record ({backend})")), "{err}");
    }
    Trace::from_bytes(&fs::read(trace).unwrap()).unwrap()
}

fn pages_of(t: &Trace, path: &Path) -> Vec<u64> {
    let p = path.to_string_lossy();
    let Some(id) = t.files.iter().position(|f| f.path.as_deref() == Some(&*p)) else {
        return Vec::new();
    };
    let mut v: Vec<u64> = t
        .events
        .iter()
        .filter(|e| e.file as usize == id)
        .flat_map(|e| e.index..e.index + e.pages as u64)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn records_exactly_the_pages_an_mmap_reader_faults_in() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let data = t.path().join("data");
    write_pages(&data, 64);
    let cmd = toucher_of(t.path(), &data, &["3", "17", "40"]);
    // Both ways of collecting see the same pages.
    for backend in backends() {
        sync_and_evict(&data);
        let tr = record_with(&t.path().join("a.trace"), &cmd, backend);
        assert_eq!(tr.lost_events, 0);
        let pages = pages_of(&tr, &data);
        for p in [3, 17, 40] {
            assert!(
                pages.contains(&p),
                "{backend}: page {p} recorded: {pages:?}"
            );
        }
    }
    sync_and_evict(&data);
    let tr = record(&t.path().join("a.trace"), &cmd);
    assert_eq!(tr.lost_events, 0);
    let pages = pages_of(&tr, &data);
    for p in [3, 17, 40] {
        assert!(pages.contains(&p), "page {p} recorded: {pages:?}");
    }
    assert!(
        pages.len() <= 3 * 16,
        "MADV_RANDOM: no big readahead around the touches: {pages:?}"
    );
    assert!(
        !pages.contains(&63),
        "an untouched far page is not in the trace: {pages:?}"
    );
    // The text views name the file and the offsets.
    let out = run(bin()
        .args(["show", "--format", "text"])
        .arg(t.path().join("a.trace")));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{} {}", data.display(), 17 * PAGE)),
        "{text}"
    );
    let out = run(bin()
        .args(["show", "--format", "grouped"])
        .arg(t.path().join("a.trace")));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&data.display().to_string()));
}

/// The trace holds what the command read, not what pagewise read to start it: between its fork
/// and its exec the command's process still runs pagewise's code (and tracefs follows
/// pagewise's launching and witnessing threads too), so a cold pagewise executable had its own
/// pages recorded as the command's — 5.10's guest, whose build is on a 9p share, recorded
/// pagewise's and libc's pages in every trace, and `load --trace` then loaded them. The pages
/// exec reads of the command's own (cold) program are the command's and stay.
#[test]
fn record_leaves_out_the_pages_pagewise_reads_to_start_the_command() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let data = t.path().join("data");
    write_pages(&data, 8);
    // The programs on a device without readahead (ours: a loop device), as on the 9p share:
    // each page pagewise's code faults on is read alone, so one that only the forked child
    // runs is read by it and reaches the tracepoint as its own.
    let Some(m) = LoopMount::new(t.path()) else {
        return;
    };
    let dev = m.dev.as_ref().unwrap().trim_start_matches("/dev/");
    fs::write(format!("/sys/block/{dev}/queue/read_ahead_kb"), "0").unwrap();
    // Dropped before the mount, also when the test fails: waits for perf's lingering holder.
    let _idle = NoProcessRuns(&m.mnt);
    for backend in backends() {
        // Cold copies of pagewise and of the command: whatever of them is read while
        // recording is read from disk, so it reaches the tracepoint. One pagewise a backend:
        // perf's events outlive `record` for a few seconds in a process of its own, which
        // keeps its executable mapped.
        let pw = m.mnt.join(format!("pw-{backend}"));
        let cat = m.mnt.join(format!("cat-{backend}"));
        fs::copy(env!("CARGO_BIN_EXE_pagewise"), &pw).unwrap();
        fs::copy(Path::new("/bin/cat"), &cat).unwrap();
        for f in [&pw, &cat, &data] {
            evict(f);
        }
        let trace = t.path().join(format!("{backend}.trace"));
        let out = run(Command::new(&pw)
            .args(["record", "--backend", backend, "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&cat)
            .arg(&data)
            .stdout(std::process::Stdio::null()));
        assert!(out.status.success(), "{backend}");
        let tr = Trace::from_bytes(&fs::read(&trace).unwrap()).unwrap();
        let names: Vec<String> = tr.files.iter().map(|f| f.display()).collect();
        assert_eq!(
            pages_of(&tr, &pw),
            Vec::<u64>::new(),
            "{backend}: pagewise's own pages are not the command's: {names:?}"
        );
        // Every page of the file (5.10 adds one past its end too: a read at the end did).
        let read = pages_of(&tr, &data);
        assert!((0..8).all(|p| read.contains(&p)), "{backend}: {read:?}");
        // exec read the program's header: after the fork, in the command's own exec.
        assert!(
            pages_of(&tr, &cat).contains(&0),
            "{backend}: the command's program: {names:?}"
        );
    }
}

/// On drop, waits (up to 15 s) until no process runs a program under its path: perf's events
/// outlive `record` for a few seconds in a process of its own (the recorder's executable), and
/// a busy file system cannot be unmounted.
struct NoProcessRuns<'a>(&'a Path);

impl Drop for NoProcessRuns<'_> {
    fn drop(&mut self) {
        let runs = || {
            fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .any(|e| fs::read_link(e.path().join("exe")).is_ok_and(|x| x.starts_with(self.0)))
        };
        let start = std::time::Instant::now();
        while runs() && start.elapsed() < std::time::Duration::from_secs(15) {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// With a ring far too small, every page the command brought into the cache is either in the
/// trace or counted as lost: nothing is dropped silently (both backends). Writing a new file
/// 4 KiB at a time adds pages faster than any reader can take them from a 4 KiB ring.
#[test]
fn overruns_are_counted_not_silently_dropped() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let n = 16384u64;
    let mut any_lost = false;
    for backend in backends() {
        // Perf rings report losses in a PERF_RECORD_LOST record that the kernel writes only
        // once the ring has room again; samples lost in the last moments before the events
        // are disabled can go uncounted (seen under heavy load: 14127 + 1593 < 16384). Known
        // gap, filed; perf gets a second try, tracefs none.
        let tries = if backend == "perf" { 2 } else { 1 };
        for attempt in 1..=tries {
            let w = t.path().join(format!("w-{backend}-{attempt}"));
            let trace = t.path().join("small.trace");
            let out = run(bin()
                .args(["record", "--buffer-kb", "4", "--backend", backend, "-o"])
                .arg(&trace)
                .args(["--", "dd", "if=/dev/zero", "bs=4k", "status=none"])
                .arg(format!("count={n}"))
                .arg(format!("of={}", w.display())));
            assert!(out.status.success(), "{backend}");
            let tr = Trace::from_bytes(&fs::read(&trace).unwrap()).unwrap();
            let got = pages_of(&tr, &w).len() as u64;
            sync_and_evict(&w);
            if got + tr.lost_events < n && attempt < tries {
                eprintln!(
                    "{backend}: {got} recorded + {} lost < {n}: uncounted losses, trying again",
                    tr.lost_events
                );
                continue;
            }
            assert!(
                got + tr.lost_events >= n,
                "{backend}: {got} pages recorded + {} lost < {n} written",
                tr.lost_events
            );
            if tr.lost_events > 0 {
                any_lost = true;
                assert!(String::from_utf8_lossy(&out.stderr).contains("events lost"));
            }
            break;
        }
    }
    assert!(any_lost, "a 4 KiB ring overran at least once");
}

/// `-o` naming a FIFO or a symlink: the FIFO gets the trace (it is not replaced by a file),
/// the symlink stays and the file it names gets the trace.
#[test]
fn output_to_a_fifo_or_through_a_symlink() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let fifo = mkfifo(&t.path().join("fifo"));
    let f2 = fifo.clone();
    let reader = std::thread::spawn(move || fs::read(&f2).unwrap());
    let out = run(bin()
        .args(["record", "--format", "text", "-o"])
        .arg(&fifo)
        .args(["--", "true"]));
    assert!(out.status.success());
    let got = reader.join().unwrap();
    assert!(String::from_utf8_lossy(&got).starts_with("# pagewise trace"));
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());

    let link = t.path().join("link.trace");
    let real = t.path().join("real.trace");
    std::os::unix::fs::symlink("real.trace", &link).unwrap();
    for _ in 0..2 {
        // Dangling the first time, then naming an existing file.
        assert!(run(bin()
            .arg("record")
            .arg("-o")
            .arg(&link)
            .args(["--", "true"]))
        .status
        .success());
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        Trace::from_bytes(&fs::read(&real).unwrap()).unwrap();
    }
}

/// The process that keeps the perf events alive after a recording holds no other descriptor:
/// a pipeline reading pagewise's output (stdout, or another inherited pipe) ends at once, not
/// when that process exits 5 s later.
#[test]
fn a_recording_in_a_pipeline_ends_at_once() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let script = format!(
        "{} record -o - -- true 3>&1 | cat >/dev/null",
        env!("CARGO_BIN_EXE_pagewise")
    );
    let start = std::time::Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(t.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let took = start.elapsed();
    assert!(took < std::time::Duration::from_secs(3), "took {took:?}");
}

#[test]
fn records_a_python_import_through_children() {
    if !can_trace() {
        return;
    }
    let out = Command::new("python3")
        .args(["-c", "import json,os;print(os.path.dirname(json.__file__))"])
        .output()
        .unwrap();
    let json_dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // Make the module cold, so importing it must read it.
    assert!(run(bin().arg("evict").arg(&json_dir)).status.success());
    let t = tmp();
    // Through a shell: the pages are read by a child of the recorded command.
    for backend in backends() {
        assert!(run(bin().arg("evict").arg(&json_dir)).status.success());
        let tr = record_with(
            &t.path().join("py.trace"),
            &[
                "sh".into(),
                "-c".into(),
                "python3 -c 'import json' && true".into(),
            ],
            backend,
        );
        let dir = json_dir.to_string_lossy();
        assert!(
            tr.files
                .iter()
                .any(|f| f.path.as_deref().is_some_and(|p| p.starts_with(&*dir))),
            "{backend}: a file of {dir} was read from disk: {:?}",
            tr.files.iter().map(|f| f.display()).collect::<Vec<_>>()
        );
    }
}

#[test]
fn evict_and_load_by_trace_touch_only_the_traced_pages() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let data = t.path().join("data");
    write_pages(&data, 64);
    let cmd = toucher_of(t.path(), &data, &["5", "30", "50"]);
    let trace = t.path().join("a.trace");
    let tr = record(&trace, &cmd);
    let traced = pages_of(&tr, &data);
    assert!(!traced.is_empty());
    // Everything cached, then evict by trace: traced pages gone, all others stay.
    fs::read(&data).unwrap();
    assert!(run(bin().arg("evict").arg("--trace").arg(&trace))
        .status
        .success());
    for p in 0..64 {
        assert_eq!(page_cached(&data, p), !traced.contains(&p), "page {p}");
    }
    // Cold file, then load by trace: exactly the traced pages come in.
    assert!(run(bin().arg("evict").arg(&data)).status.success());
    let out = run(bin().args(["load", "--json", "--trace"]).arg(&trace));
    assert!(out.status.success());
    for p in 0..64 {
        assert_eq!(page_cached(&data, p), traced.contains(&p), "page {p}");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["cached_bytes_after"].as_u64().unwrap(),
        traced.len() as u64 * PAGE
    );
}

#[test]
fn replay_orders_read_the_same_bytes_in_different_orders() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let a = t.path().join("a");
    let b = t.path().join("b");
    write_pages(&a, 64);
    write_pages(&b, 64);
    let tool = toucher(t.path());
    // Interleave two files, backwards: recorded order is neither per-file nor sorted.
    let script = format!(
        "{0} {1} 60 40 20 && {0} {2} 50 && {0} {1} 10 && {0} {2} 5",
        tool.join(" "),
        a.display(),
        b.display()
    );
    let trace = t.path().join("x.trace");
    let tr = record(&trace, &["sh".into(), "-c".into(), script]);
    let total = tr.bytes();
    let mut bytes = Vec::new();
    for order in ["recorded", "file", "disk"] {
        for direct in [false, true] {
            assert!(run(bin().arg("evict").arg("--trace").arg(&trace))
                .status
                .success());
            let mut c = bin();
            c.args(["replay", "--json", "--order", order]).arg(&trace);
            if direct {
                c.arg("--direct");
            }
            let out = run(&mut c);
            assert!(out.status.success());
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            bytes.push(v[0]["bytes"].as_u64().unwrap());
            if direct {
                // O_DIRECT reads leave the cache as it was: cold.
                assert!(!page_cached(&a, 60) && !page_cached(&b, 50));
            }
        }
    }
    assert!(bytes.iter().all(|&x| x == total), "{bytes:?} vs {total}");
    let out = run(bin()
        .args(["replay", "--compare", "--runs", "1", "--direct"])
        .arg(&trace));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("recorded (direct)") && table.contains("disk (direct)"),
        "{table}"
    );
}

#[test]
fn record_passes_the_exit_status_through() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let out = run(bin()
        .arg("record")
        .arg("-o")
        .arg(t.path().join("x"))
        .args(["--", "sh", "-c", "exit 3"]));
    assert_eq!(out.status.code(), Some(3));
    let out = run(bin()
        .arg("record")
        .arg("-o")
        .arg(t.path().join("y"))
        .args(["--", "/nonexistent/cmd"]));
    // As env(1), timeout(1) and shells say: 127 not found, 126 not executable.
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/cmd: cannot run it"));
    assert!(
        !t.path().join("y").exists(),
        "no trace for a command that never ran"
    );
    let noexec = t.path().join("noexec");
    fs::write(&noexec, "#!/bin/sh\n").unwrap();
    for verb in ["record", "run"] {
        let mut c = bin();
        c.arg(verb);
        if verb == "record" {
            c.arg("-o").arg(t.path().join("z"));
        }
        let out = run(c.arg(&noexec));
        assert_eq!(out.status.code(), Some(126), "{verb}");
        let out = run(bin().args([verb, "/nonexistent/cmd"]).current_dir(t.path()));
        assert_eq!(out.status.code(), Some(127), "{verb}");
    }
    let leftovers: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporaries removed: {leftovers:?}");
}

#[test]
fn record_exits_143_on_sigterm_and_still_writes_a_readable_trace() {
    if !require_root("tracing (record)") {
        return;
    }
    let t = tmp();
    let trace = t.path().join("T");
    let out = signal_case(
        t.path(),
        &["record", "-o", trace.to_str().unwrap()],
        libc::SIGTERM,
    );
    assert_eq!(out.status.code(), Some(143), "128 + SIGTERM");
    assert!(trace.exists(), "the trace is written when the command ends");
    let out = run(bin().arg("show").arg(&trace));
    assert!(out.status.success(), "the trace is readable");
}

#[test]
fn evict_trace_dry_run_changes_nothing_and_the_real_run_drops() {
    if !require_root("tracing (record)") {
        return;
    }
    let t = tmp();
    let f = t.path().join("F");
    let trace = t.path().join("T");
    cold_file(&f, 1 << 20);
    record_trace(t.path(), &trace, &f);
    fs::read(&f).unwrap();
    let pages = (1u64 << 20) / PAGE;
    assert_eq!(cached(&f), pages, "setup: fully cached");

    let out = run(bin()
        .args(["evict", "--dry-run", "--trace"])
        .arg(&trace)
        .arg("--json"));
    assert!(out.status.success());
    assert_eq!(json(&out)["dry_run"], true);
    assert_eq!(cached(&f), pages, "--dry-run dropped nothing");

    let out = run(bin().args(["evict", "--trace"]).arg(&trace));
    assert!(out.status.success());
    let left = cached(&f);
    assert!(
        left * 100 <= pages,
        "evict --trace dropped them: {left} left"
    );
}

#[test]
fn show_refuses_binary_and_assist_names_a_missing_process() {
    let out = run(bin().args(["assist", "-p", "999999"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no such process: 999999"),
        "{}",
        stderr(&out)
    );
    if !require_root("tracing (record, for a valid trace)") {
        return;
    }
    let t = tmp();
    let trace = t.path().join("T");
    let out = run(bin()
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .args(["--", "true"]));
    assert!(out.status.success());
    // The trace is valid: only the format can make show fail.
    assert!(run(bin().arg("show").arg(&trace)).status.success());
    let out = run(bin().args(["show", "--format", "binary"]).arg(&trace));
    assert_eq!(out.status.code(), Some(1), "binary is not a show format");
}

/// Starts `pagewise record -o OUT -- sleep SECS` (SECS unique to the caller), kills pagewise with
/// SIGKILL once sleep runs, then sleep; returns pagewise's PID (dead now).
fn kill_a_record_mid_run(out: &Path, secs: &'static str) -> i32 {
    let mut cmd = bin();
    cmd.args(["record", "-o"])
        .arg(out)
        .args(["--", "sleep", secs]);
    let (mut child, o, e) = spawn_captured(&mut cmd);
    let pw = child.id() as i32;
    let mut reaper = Reaper(vec![(pw, "pagewise")]);
    let sleeper = wait_child_named(pw, "sleep");
    reaper.0.push((sleeper, "sleep"));
    // SAFETY: kill(2) of the pagewise this test started.
    assert_eq!(unsafe { libc::kill(pw, libc::SIGKILL) }, 0);
    let st = wait_deadline(&mut child, 5.0).expect("SIGKILL ends pagewise");
    collect(&cmd, st, o, e);
    drop(reaper);
    assert!(wait_dead(sleeper, 5.0), "sleep {sleeper} killed");
    pw
}

/// A PID that no process has now: that of a `true` that ran and was reaped.
fn dead_pid() -> i32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id() as i32;
    c.wait().unwrap();
    pid
}

/// `record -o X` killed with SIGKILL leaves nothing in X's directory (the trace is written
/// through an unnamed O_TMPFILE there, which the kernel frees with its last descriptor), and
/// the next `record` to the same name works.
#[test]
fn a_record_killed_with_sigkill_leaves_no_temporary() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let out = t.path().join("T.trace");
    kill_a_record_mid_run(&out, "30.0101");
    let names: Vec<String> = names_in(t.path())
        .into_iter()
        .map(|n| String::from_utf8_lossy(&n).into_owned())
        .collect();
    assert!(names.is_empty(), "left behind: {names:?}");
    let out2 = run(bin().arg("record").arg("-o").arg(&out).args(["--", "true"]));
    assert!(out2.status.success());
    Trace::from_bytes(&fs::read(&out).unwrap()).unwrap();
    assert_eq!(names_in(t.path()), vec![b"T.trace".to_vec()]);
}

/// Where the file system has no O_TMPFILE (FUSE through bindfs), the trace goes through a
/// named temporary, which a SIGKILL leaves; the next `record` into that directory removes it —
/// and only what is provably such a temporary: ours (our uid), a regular file with one link,
/// of the name pattern, its PID dead or not a pagewise, and not locked by anyone.
#[test]
fn a_killed_records_named_temporary_is_removed_by_the_next_record_and_nothing_else() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let back = t.path().join("back");
    let mnt = t.path().join("mnt");
    fs::create_dir_all(&back).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    let Some(_fuse) = Mount::bindfs(&back, &mnt) else {
        return;
    };
    let out = mnt.join("T.trace");
    let killed = kill_a_record_mid_run(&out, "30.0202");
    let prefix = format!("T.trace.pagewise-{killed}-");
    let left: Vec<String> = names_in(&back)
        .into_iter()
        .map(|n| String::from_utf8_lossy(&n).into_owned())
        .collect();
    assert!(
        left.len() == 1 && left[0].starts_with(&prefix) && left[0].ends_with(".tmp"),
        "the killed record's named temporary (the fallback was taken): {left:?}"
    );

    // Look-alikes that are not provably a dead record's temporary: all must stay.
    let dead = dead_pid();
    let mut keep: Vec<std::path::PathBuf> = Vec::new();
    let theirs = back.join(format!("a.trace.pagewise-{dead}-1.tmp"));
    fs::write(&theirs, "").unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    keep.push(theirs);
    let linked = back.join(format!("b.trace.pagewise-{dead}-2.tmp"));
    fs::write(&linked, "").unwrap();
    fs::hard_link(&linked, back.join("b.link")).unwrap();
    keep.push(linked);
    keep.push(back.join("b.link"));
    let link = back.join(format!("c.trace.pagewise-{dead}-3.tmp"));
    std::os::unix::fs::symlink("T.trace", &link).unwrap();
    keep.push(link);
    let dir = back.join(format!("d.trace.pagewise-{dead}-4.tmp"));
    fs::create_dir(&dir).unwrap();
    keep.push(dir);
    // copy's own temporaries (a leading dot), which a later copy may resume from.
    let copys = back.join(format!(".e.pagewise-{dead}-5.tmp"));
    fs::write(&copys, "").unwrap();
    keep.push(copys);
    let other = back.join(format!("f.trace.pagewise-{dead}-6.tmp.orig"));
    fs::write(&other, "").unwrap();
    keep.push(other);
    // Locked: some process (here the test, through the FUSE mount) still writes it.
    let locked_name = format!("g.trace.pagewise-{dead}-7.tmp");
    fs::write(back.join(&locked_name), "").unwrap();
    let lock = fs::File::open(mnt.join(&locked_name)).unwrap();
    assert!(pagewise_core::sys::try_lock_exclusive(std::os::fd::AsFd::as_fd(&lock)).unwrap());
    keep.push(back.join(&locked_name));
    // A live pagewise (blocked opening a FIFO no one writes).
    let fifo = mkfifo(&t.path().join("fifo"));
    let mut live = bin().arg("show").arg(&fifo).spawn().unwrap();
    let live_pid = live.id() as i32;
    let reaper = Reaper(vec![(live_pid, "pagewise")]);
    let alive = back.join(format!("h.trace.pagewise-{live_pid}-8.tmp"));
    fs::write(&alive, "").unwrap();
    keep.push(alive);
    // Removed: a live process that is not a pagewise (this test), and a dead one.
    let not_pagewise = back.join(format!("i.trace.pagewise-{}-9.tmp", std::process::id()));
    fs::write(&not_pagewise, "").unwrap();
    let dead_one = back.join(format!("j.trace.pagewise-{dead}-a.tmp"));
    fs::write(&dead_one, "").unwrap();

    let out2 = run(bin().arg("record").arg("-o").arg(&out).args(["--", "true"]));
    assert!(out2.status.success());
    Trace::from_bytes(&fs::read(back.join("T.trace")).unwrap()).unwrap();
    for k in &keep {
        assert!(fs::symlink_metadata(k).is_ok(), "kept: {}", k.display());
    }
    for gone in [&not_pagewise, &dead_one] {
        assert!(
            fs::symlink_metadata(gone).is_err(),
            "removed: {}",
            gone.display()
        );
    }
    let left: Vec<String> = names_in(&back)
        .into_iter()
        .map(|n| String::from_utf8_lossy(&n).into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(
        left.is_empty(),
        "the killed record's temporary removed: {left:?}"
    );
    drop(reaper);
    let _ = live.wait();
    drop(lock);
}

/// `-o` naming a symlink someone else planted (another uid's link in a sticky shared
/// directory, as in /tmp) is not followed: record refuses before the command runs, and the
/// file the link names is untouched.
#[test]
fn record_does_not_follow_a_symlink_planted_by_another_user() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let shared = t.path().join("shared");
    fs::create_dir(&shared).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = t.path().join("victim");
    fs::write(&victim, "keep me").unwrap();
    let planted = shared.join("T.trace");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).unwrap();
    let out = run(bin()
        .arg("record")
        .arg("-o")
        .arg(&planted)
        .args(["--", "touch"])
        .arg(t.path().join("ran")));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("symlink"), "{}", stderr(&out));
    assert!(
        !t.path().join("ran").exists(),
        "refused before the command ran"
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me");
    assert!(fs::symlink_metadata(&planted).unwrap().is_symlink());
    assert_eq!(names_in(&shared), vec![b"T.trace".to_vec()]);
}

/// The tracefs instances pagewise keeps: `instances/pagewise` (shared between runs, idle
/// between them, guarded by a lock on /run/pagewise-tracefs.lock) and `instances/pagewise-PID`
/// (a run's own, when another holds the shared one).
fn tracefs_instances() -> Vec<(String, std::path::PathBuf)> {
    let root = tracefs_root_dir().join("instances");
    let mut v: Vec<(String, std::path::PathBuf)> = fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| n == "pagewise" || n.starts_with("pagewise-"))
        .collect();
    v.sort();
    v
}

/// Where tracefs is mounted.
fn tracefs_root_dir() -> std::path::PathBuf {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.join("instances").is_dir())
        .expect("tracefs is mounted (record --backend tracefs ran)")
}

/// An instance's state: whether any of its events is on (`events/enable` reads 0 when none
/// is), and the PIDs it follows.
fn instance_state(dir: &Path) -> (bool, Vec<i32>) {
    let on = fs::read_to_string(dir.join("events/enable"))
        .map(|s| s.trim() != "0")
        .unwrap_or(false);
    let pids = fs::read_to_string(dir.join("set_event_pid"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    (on, pids)
}

/// Takes the shared instance's lock (waiting at most 5 s for whoever holds it to finish):
/// while it is held, no pagewise uses `instances/pagewise` and it must be idle.
fn lock_shared_instance() -> fs::File {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/pagewise-tracefs.lock")
        .unwrap();
    let start = std::time::Instant::now();
    while !pagewise_core::sys::try_lock_exclusive(std::os::fd::AsFd::as_fd(&f)).unwrap() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "the shared instance's lock stayed taken for 5 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    f
}

/// No instance of ours is left on, nor follows `pid`; none named after `dead` remains. The
/// shared one is checked under its lock; a private one only when its pagewise is gone (other
/// pagewise runs on this machine may be tracing now).
fn assert_no_instance_left(dead: i32, pid: i32, when: &str) {
    let _lock = lock_shared_instance();
    for (name, dir) in tracefs_instances() {
        let owner = name
            .strip_prefix("pagewise-")
            .and_then(|p| p.parse::<i32>().ok());
        assert_ne!(
            owner,
            Some(dead),
            "{when}: instance {name} of the dead run remains"
        );
        if owner.is_some_and(|o| !is_dead(o) && comm(o).as_deref() == Some("pagewise")) {
            continue; // another pagewise's, tracing now
        }
        let (on, pids) = instance_state(&dir);
        assert!(!on, "{when}: instance {name} is still enabled");
        assert!(
            !pids.contains(&pid),
            "{when}: instance {name} still follows {pid}: {pids:?}"
        );
    }
}

/// `record --backend tracefs` killed with SIGKILL while its command goes on: its tracefs
/// instance is quieted at once (events off, the command's PID no longer followed; a run's
/// own instance removed), and after the next run nothing of the dead run remains and nothing
/// of ours is left on.
#[test]
fn a_tracefs_record_killed_with_sigkill_leaves_no_instance_enabled() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let mut cmd = bin();
    cmd.args(["record", "--backend", "tracefs", "-o"])
        .arg(t.path().join("T"))
        .args(["--", "sleep", "30.0404"]);
    let (mut child, o, e) = spawn_captured(&mut cmd);
    let pw = child.id() as i32;
    let mut reaper = Reaper(vec![(pw, "pagewise")]);
    let sleeper = wait_child_named(pw, "sleep");
    reaper.0.push((sleeper, "sleep"));
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: kill(2) of the pagewise this test started.
    assert_eq!(unsafe { libc::kill(pw, libc::SIGKILL) }, 0);
    let st = wait_deadline(&mut child, 5.0).expect("SIGKILL ends pagewise");
    collect(&cmd, st, o, e);
    // The command goes on (SIGKILL is not forwarded), and must no longer be followed.
    assert!(!is_dead(sleeper));
    assert_no_instance_left(pw, sleeper, "right after the SIGKILL");
    // The next run follows its own command only: the PIDs the shared instance follows while
    // it runs, as its command reads them, are not the dead run's.
    let shared = tracefs_root_dir().join("instances/pagewise/set_event_pid");
    let out = run(bin()
        .args(["record", "--backend", "tracefs", "-o"])
        .arg(t.path().join("U"))
        .args(["--", "cat"])
        .arg(&shared));
    assert!(out.status.success());
    let followed: Vec<i32> = stdout(&out)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(
        !followed.contains(&sleeper),
        "the next record also followed the dead run's command {sleeper}: {followed:?}"
    );
    assert!(!is_dead(sleeper));
    assert_no_instance_left(pw, sleeper, "after the next record");
    drop(reaper);
}

/// After a normal exit, and after SIGINT and SIGTERM, of a tracefs-backed `record` and `run`,
/// nothing of ours is left on or following anyone.
#[test]
fn a_tracefs_run_leaves_no_instance_enabled_on_exit_or_signal() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    for verb in ["record", "run"] {
        let mut c = bin();
        c.args([verb, "--backend", "tracefs"]);
        if verb == "record" {
            c.arg("-o").arg(t.path().join("T"));
        }
        let out = run(c.args(["--", "true"]));
        assert!(out.status.success(), "{verb}");
        assert_no_instance_left(0, 0, &format!("{verb}: normal exit"));
        for sig in [libc::SIGINT, libc::SIGTERM] {
            let mut args = vec![verb, "--backend", "tracefs"];
            let trace = t.path().join("S");
            if verb == "record" {
                args.extend(["-o", trace.to_str().unwrap()]);
            }
            let out = signal_case(t.path(), &args, sig);
            assert_eq!(out.status.code(), Some(128 + sig), "{verb}: signal {sig}");
            assert_no_instance_left(0, 0, &format!("{verb}: signal {sig}"));
        }
    }
}

/// The files of [`a_small_open_file_limit`]'s cases: 300 files of 4 pages in `dir/d`.
fn three_hundred_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let d = dir.join("d");
    fs::create_dir(&d).unwrap();
    (1..=300)
        .map(|i| {
            let p = d.join(format!("f{i}"));
            write_pages(&p, 4);
            p
        })
        .collect()
}

/// `sh -c 'cat "$@" >/dev/null' sh FILES...`: reads every file.
fn cat_all(files: &[std::path::PathBuf]) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec![
        "sh".into(),
        "-c".into(),
        "cat \"$@\" >/dev/null".into(),
        "sh".into(),
    ];
    v.extend(files.iter().map(|p| p.as_os_str().to_owned()));
    v
}

/// How many of `files` hold `pages` cached pages (the kernel's view).
fn files_cached(files: &[std::path::PathBuf], pages: u64) -> usize {
    files.iter().filter(|p| cached(p) == pages).count()
}

/// Under RLIMIT_NOFILE 64 (soft and hard: it cannot be raised), every trace verb acts on all
/// 300 files of a trace (the kernel's residency says so) and exits 0: none holds a descriptor
/// per file.
#[test]
fn trace_verbs_act_on_every_file_under_a_small_open_file_limit() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let files = three_hundred_files(t.path());
    let trace = t.path().join("all.trace");
    let os = |s: &str| std::ffi::OsString::from(s);
    let evict_all = || files.iter().for_each(|p| evict(p));

    // record, itself under the limit: every file traced and resolved to its path.
    evict_all();
    let mut args = vec![
        os("record"),
        os("-o"),
        trace.clone().into_os_string(),
        os("--"),
    ];
    args.extend(cat_all(&files));
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let out = with_nofile(64, &refs);
    assert_eq!(out.status.code(), Some(0), "record");
    let tr = Trace::from_bytes(&fs::read(&trace).unwrap()).unwrap();
    for p in &files {
        assert_eq!(pages_of(&tr, p).len(), 4, "record: {} traced", p.display());
    }

    // load --trace and replay: every file read in again.
    for verb in [&["load", "--trace"][..], &["replay"][..]] {
        evict_all();
        let mut args: Vec<&std::ffi::OsStr> = verb.iter().map(std::ffi::OsStr::new).collect();
        args.push(trace.as_os_str());
        let out = with_nofile(64, &args);
        assert_eq!(out.status.code(), Some(0), "{verb:?}");
        assert_eq!(files_cached(&files, 4), 300, "{verb:?}: every file read in");
    }

    // evict --trace: every file dropped.
    assert_eq!(files_cached(&files, 4), 300);
    let out = with_nofile(
        64,
        &[
            os("evict").as_os_str(),
            os("--trace").as_os_str(),
            trace.as_os_str(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "evict --trace");
    assert_eq!(
        files_cached(&files, 0),
        300,
        "evict --trace: every file dropped"
    );

    // With almost no descriptor to spare (4: stdio and one), whatever cannot be opened is an
    // error that says so, naming the file and the call, and the exit is 2 — never 0 with
    // files left out, never a reason that is not the one.
    for verb in [
        &["load", "--trace"][..],
        &["evict", "--trace"][..],
        &["replay"][..],
    ] {
        let mut args: Vec<&std::ffi::OsStr> = verb.iter().map(std::ffi::OsStr::new).collect();
        args.push(trace.as_os_str());
        let out = with_nofile(4, &args);
        let err = stderr(&out);
        match out.status.code() {
            Some(0) => assert!(!err.contains("skipped"), "{verb:?}: {err}"),
            Some(2) => {
                assert!(
                    err.contains("open failed: Too many open files"),
                    "{verb:?}: {err}"
                );
                assert!(
                    err.contains(&*t.path().join("d").to_string_lossy()),
                    "{err}"
                );
                assert!(!err.contains("mounted nowhere"), "{verb:?}: {err}");
            }
            c => panic!("{verb:?}: exit {c:?}: {err}"),
        }
    }

    // run and run --assist: every page the command brought in dropped again.
    for assist in [false, true] {
        evict_all();
        let mut args = vec![os("run")];
        if assist {
            args.push(os("--assist"));
        }
        args.push(os("--"));
        args.extend(cat_all(&files));
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let out = with_nofile(64, &refs);
        assert_eq!(out.status.code(), Some(0), "run (assist: {assist})");
        assert_eq!(
            files_cached(&files, 0),
            300,
            "run (assist: {assist}): every file dropped"
        );
    }
}
