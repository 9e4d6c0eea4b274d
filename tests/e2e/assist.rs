//! End-to-end tests of `pagewise assist`: a program reading 128 KiB chunks at random offsets
//! through mmap (MADV_RANDOM, so the kernel reads one page per fault) takes one major fault per
//! chunk when assisted instead of one per page — counted by the kernel (getrusage ru_majflt) —
//! and the simulator says the same from a recorded trace.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};

/// Maps the file, waits for `go`, reads chunk 0 page by page (the predictor learns a cluster
/// of the chunk's pages: 32 for the default 128 KiB, or the KiB given as a third argument), then
/// three far-apart chunks: first page, a pause for the prefetch (200 ms, or
/// PAGEWISE_TEST_PAUSE_MS: the kernel matrix's emulated guests, ~30x slower, give 1000), the
/// other pages. Prints the major faults of the three chunks.
const READER: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
int main(int c, char **v) {
  int fd = open(v[1], O_RDONLY); long sz = lseek(fd, 0, SEEK_END);
  volatile char *m = mmap(0, sz, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return 1;
  madvise((void *)m, sz, MADV_RANDOM);
  while (access(v[2], F_OK)) usleep(10000);
  volatile char s = 0; long chunk = (c > 3 ? atol(v[3]) : 128) * 1024;
  const char *p = getenv("PAGEWISE_TEST_PAUSE_MS"); long pause = p ? atol(p) : 200;
  for (long o = 0; o < chunk; o += 4096) s += m[o];
  struct rusage r0, r1; getrusage(RUSAGE_SELF, &r0);
  long offs[3] = {16L << 20, 40L << 20, 8L << 20};
  for (int i = 0; i < 3; i++) {
    s += m[offs[i]];
    usleep(pause * 1000);
    for (long o = 4096; o < chunk; o += 4096) s += m[offs[i] + o];
  }
  getrusage(RUSAGE_SELF, &r1);
  printf("%ld\n", r1.ru_majflt - r0.ru_majflt);
  return 0;
}"#;

/// A test's files: the compiled reader, a cold 64 MiB data file, and the reader's `go` file
/// (present: the reader starts at once).
struct Setup {
    t: tempfile::TempDir,
    exe: std::path::PathBuf,
    data: std::path::PathBuf,
    go: std::path::PathBuf,
}

fn setup() -> Option<Setup> {
    if !require_root("assist (tracing)") {
        return None;
    }
    let t = tmp();
    // Static: the reader maps no shared library, so every file it faults on is one the test
    // made (a kernel-matrix guest's libc is on 9p, which cannot be opened by handle).
    let exe = compile_c(t.path(), "chunks", READER, true);
    if !require(exe.is_some(), "a C compiler (cc)") {
        return None;
    }
    let exe = exe.unwrap();
    let data = t.path().join("data");
    write_file(&data, 64 << 20);
    sync_and_evict(&data);
    assert_eq!(cached(&data), 0);
    let go = t.path().join("go");
    std::fs::write(&go, b"").unwrap();
    Some(Setup { t, exe, data, go })
}

fn major_faults(out: &std::process::Output) -> u64 {
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Up to three assisted runs (`one` returns a run's major faults), until one takes at most 12:
/// this machine runs DAMON pageout, which evicts physical regions it judges cold, page cache
/// included, and can take prefetched pages before the reader gets to them (an assist that
/// does not work fails all three). The major faults of each run.
fn attempts(mut one: impl FnMut() -> u64) -> Vec<u64> {
    let mut faults = Vec::new();
    while faults.len() < 3 {
        faults.push(one());
        if faults[faults.len() - 1] <= 12 {
            break;
        }
    }
    faults
}

/// The reader's pause for the prefetch, ms: PAGEWISE_TEST_PAUSE_MS (the kernel matrix's
/// emulated guests set 1000), else 200.
fn pause_ms() -> u64 {
    std::env::var("PAGEWISE_TEST_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Waits (up to 60 s) until the child holds a perf event file descriptor, then half the
/// reader's pause more (100 ms; 500 ms in an emulated guest, where 100 ms once let the
/// reader's first faults pass before the events were enabled) for the events to be enabled;
/// returns at once if the child exits (its status tells why).
fn wait_for_perf_events(child: &mut std::process::Child) {
    let pid = child.id();
    let start = std::time::Instant::now();
    let has = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(Result::ok).any(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.as_os_str() == "anon_inode:[perf_event]")
                })
            })
            .unwrap_or(false)
    };
    while !has() {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "assist (pid {pid}) opened no perf event within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(pause_ms() / 2));
}

/// `pagewise assist -p` of the reader started cold, with `env` set for pagewise, in up to
/// three [`attempts`]: the reader's major faults of each, and the last assist report.
fn assist_by_pid(
    exe: &Path,
    data: &Path,
    go: &Path,
    env: &[(&str, &str)],
) -> (Vec<u64>, serde_json::Value) {
    let mut v = serde_json::Value::Null;
    let faults = attempts(|| {
        sync_and_evict(data);
        let _ = std::fs::remove_file(go);
        let reader = start_reader(exe, data, go);
        let mut assist = bin()
            .envs(env.iter().copied())
            .args(["assist", "--json", "-p", &reader.id().to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader begins once the assistant has its perf events open (a fixed sleep was
        // too short on a loaded, emulated guest: the reader finished before `assist` looked).
        wait_for_perf_events(&mut assist);
        std::fs::write(go, b"").unwrap();
        let out = reader.wait_with_output().unwrap();
        let rep = assist.wait_with_output().unwrap();
        assert!(rep.status.success());
        v = serde_json::from_slice(&rep.stdout).unwrap();
        major_faults(&out)
    });
    (faults, v)
}

/// `pagewise run --assist` of the reader (ENV and the reader's EXTRA arguments added), retried
/// by [`attempts`] from a cold file each time: every run succeeds and leaves nothing of the file
/// cached, the last takes at most 12 major faults, and its report counts >= 3 prefetches.
/// Returns the report.
fn run_assisted(
    t: &Path,
    exe: &Path,
    data: &Path,
    go: &Path,
    env: &[(&str, &str)],
    extra: &[&str],
) -> serde_json::Value {
    let report = t.join("r.json");
    let faults = attempts(|| {
        sync_and_evict(data);
        let out = run(bin()
            .envs(env.iter().copied())
            .args(["run", "--assist", "--report"])
            .arg(&report)
            .arg("--")
            .arg(exe)
            .arg(data)
            .arg(go)
            .args(extra));
        assert!(out.status.success());
        assert_eq!(cached(data), 0, "prefetched pages must be dropped too");
        major_faults(&out)
    });
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert!(
        faults[faults.len() - 1] <= 12,
        "run --assist: {faults:?} major faults; {r}"
    );
    assert!(r["assist"]["prefetches"].as_u64().unwrap() >= 3, "{r}");
    r
}

fn start_reader(exe: &Path, data: &Path, go: &Path) -> std::process::Child {
    Command::new(exe)
        .arg(data)
        .arg(go)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn assisted_reader_takes_one_major_fault_per_chunk() {
    let Some(Setup {
        t: _dir,
        exe,
        data,
        go,
    }) = setup()
    else {
        return;
    };
    // Unassisted: every page of every chunk is a major fault.
    let bare = start_reader(&exe, &data, &go).wait_with_output().unwrap();
    assert!(bare.status.success());
    assert!(major_faults(&bare) >= 90, "bare: {}", major_faults(&bare));

    // Assisted, attached by PID.
    let (faults, v) = assist_by_pid(&exe, &data, &go, &[]);
    assert!(
        faults[faults.len() - 1] <= 12,
        "assisted: {faults:?} major faults; last report {v}"
    );
    assert!(v["prefetches_range"].as_u64().unwrap() >= 3, "{v}");
    assert!(v["faults"].as_u64().unwrap() >= 32 + 3, "{v}");
    assert_eq!(v["files_unreachable"].as_u64(), Some(0), "{v}");
    // Followed through perf events on the target's threads (root here), with a histogram
    // that counts every prefetch.
    // (Where the kernel has no mm_filemap_fault tracepoint, as Debian's 6.1: from perf's
    // sampled page faults.)
    let traced = Path::new("/sys/kernel/tracing/events/filemap/mm_filemap_fault").exists();
    assert_eq!(
        v["source"],
        if traced { "perf" } else { "perf-faults" },
        "{v}"
    );
    let hist: u64 = v["issue_latency_us_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(hist, v["prefetches"].as_u64().unwrap(), "{v}");
    // The prefetched chunks are in the cache (cachestat), chunk by chunk (less a page DAMON
    // pageout may take meanwhile).
    let f = std::fs::File::open(&data).unwrap();
    for off in [16u64 << 20, 40 << 20, 8 << 20] {
        let n = resident_pages(&f, off, 128 << 10);
        assert!((31..=32).contains(&n), "chunk at {off}: {n} pages");
    }
}

#[test]
fn run_assist_drops_its_prefetches_and_simulate_reads_a_fault_trace() {
    let Some(Setup { t, exe, data, go }) = setup() else {
        return;
    };
    // run --assist: fewer major faults, and nothing of the file left cached afterwards.
    run_assisted(t.path(), &exe, &data, &go, &[], &[]);

    // record --faults, then the simulator: the range detector turns the chunks' faults into hits.
    sync_and_evict(&data);
    let trace = t.path().join("t.trace");
    let out = run(bin()
        .args(["record", "--faults", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .arg(&data)
        .arg(&go));
    assert!(out.status.success());
    let out = run(bin().args(["assist", "--json", "--simulate"]).arg(&trace));
    assert!(out.status.success(), "{out:?}");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let rate = |i: usize| rows[i]["hit_rate"].as_f64().unwrap();
    let accesses = rows[0]["accesses"].as_u64().unwrap();
    assert!(accesses >= 32 + 3 * 32);
    // Without prefetching, no fault on the data hits: the reader touches each page once.
    // Where the kernel has the mm_filemap_fault tracepoint, no fault at all hits. Where faults
    // come from perf's page-fault events (Debian's 6.1), the reader's own write to a page of
    // its private .data that a read fault had mapped (fault-around maps cached pages
    // read-only) is a second fault on a cached page — a true hit, which the tracepoint never
    // sees (the kernel copies the page without asking the cache): at most the faults beyond
    // the data's 128 may hit.
    if Path::new("/sys/kernel/tracing/events/filemap/mm_filemap_fault").exists() {
        assert_eq!(rate(0), 0.0, "{rows:?}");
    } else {
        let hits = rows[0]["hits"].as_u64().unwrap() + rows[0]["late_hits"].as_u64().unwrap();
        assert!(hits <= accesses - (32 + 3 * 32), "{rows:?}");
    }
    assert!(rate(3) > 0.6, "forward range: {rows:?}");
    // A trace without faults is refused with the reason.
    let plain = t.path().join("plain.trace");
    assert!(run(bin()
        .args(["record", "-o"])
        .arg(&plain)
        .args(["--", "true"]))
    .status
    .success());
    let out = run(bin().args(["assist", "--simulate"]).arg(&plain));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--faults"));
}

/// The nice value of a thread, from /proc (field 19 of its stat, after the command name).
fn thread_nice(pid: u32, tid: &str) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(16)?.parse().ok()
}

/// A thread's time slice in ns as /proc/PID/task/TID/sched reports it (`se.slice`, shown by
/// kernels with EEVDF, 6.6+), None where the kernel does not show it.
fn thread_slice(pid: u32, tid: &str) -> Option<u64> {
    let sched = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched")).ok()?;
    let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
    line.rsplit(':').next()?.trim().parse().ok()
}

/// `run --assist`'s event reader, which issues the prefetches, runs at nice -10 with a 0.1 ms
/// time slice (as the kernel reports them), and only that thread: the launcher and drop-behind
/// keep their own.
#[test]
fn the_prefetching_thread_runs_at_higher_priority() {
    if !require_root("assist (tracing, nice below 0)") {
        return;
    }
    let child = bin()
        .args(["run", "--assist", "--", "sleep", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut seen = std::collections::HashMap::new();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
        {
            let tid = t.file_name().to_string_lossy().to_string();
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if let Some(n) = thread_nice(pid, &tid) {
                seen.insert(comm.trim().to_string(), (n, thread_slice(pid, &tid)));
            }
        }
        // The reader's priority is set just after it starts: wait until it shows.
        let reader_set = seen.get("pw-events").is_some_and(|(n, _)| *n == -10);
        if reader_set && seen.contains_key("pw-drop-behind") {
            break;
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nice = |t: &str| seen.get(t).map(|(n, _)| *n);
    // The other threads keep the nice value they inherit (the suite's own, under `nice`).
    let own = std::process::id().to_string();
    let base = thread_nice(std::process::id(), &own);
    assert_eq!(nice("pw-events"), Some(-10), "{seen:?}");
    assert_eq!(nice("pw-drop-behind"), base, "{seen:?}");
    assert_eq!(nice("pw-launcher"), base, "{seen:?}");
    match seen["pw-events"].1 {
        Some(slice) => {
            assert_eq!(slice, 100_000, "the reader's se.slice: {seen:?}");
            let other = seen["pw-launcher"].1.unwrap();
            assert!(
                other > slice,
                "the launcher keeps the default slice: {seen:?}"
            );
        }
        None => {
            require(
                false,
                "the slice check: se.slice in /proc/PID/task/TID/sched (EEVDF, Linux 6.6+)",
            );
        }
    }
}

/// `run --assist` of a reader of 1 MiB chunks: its windows (256 pages) are issued in pieces,
/// the faulting one first and the rest by the event reader when no event waits, and the
/// kernel counts one major fault per chunk (getrusage), as for whole windows.
#[test]
fn windows_issued_in_pieces_cover_whole_1m_chunks() {
    let Some(Setup { t, exe, data, go }) = setup() else {
        return;
    };
    // Unassisted: every page of the three chunks is a major fault.
    sync_and_evict(&data);
    let out = run(Command::new(&exe).arg(&data).arg(&go).arg("1024"));
    assert!(out.status.success());
    let bare = major_faults(&out);
    assert!(bare >= 3 * 250, "bare: {bare} major faults");
    let r = run_assisted(t.path(), &exe, &data, &go, &[], &["1024"]);
    assert!(
        r["assist"]["prefetched_bytes"].as_u64().unwrap() >= 3 << 20,
        "{r}"
    );
}

#[test]
fn assist_refuses_a_kernel_thread_at_once() {
    // PID 2 is kthreadd on Linux; check it is a kernel thread here (PF_KTHREAD in the flags,
    // the ninth field of /proc/2/stat) and has no memory map.
    let stat = std::fs::read_to_string("/proc/2/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let flags: u64 = rest.split(' ').nth(6).unwrap().parse().unwrap();
    assert!(flags & 0x0020_0000 != 0, "PID 2 is a kernel thread: {stat}");
    assert_eq!(std::fs::read_to_string("/proc/2/maps").unwrap(), "");
    let mut child = bin()
        .args(["assist", "-p", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(5) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("assist -p 2 (a kernel thread) waited instead of refusing");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("PID 2") && err.contains("kernel thread"),
        "{err}"
    );
}

/// Where the kernel has no `mm_filemap_fault` tracepoint (Linux 6.1), the faults come from
/// perf's software events (major and minor page faults sampled with their address, resolved
/// through /proc/PID/maps); `PAGEWISE_FAULTS_FROM=samples` takes that route here. Attached
/// by PID and under `run --assist`, the reader takes about one major fault per chunk instead of
/// one per page (getrusage), the chunks are in the cache right after (cachestat), and
/// `run --assist` drops them at the end.
#[test]
fn sampled_faults_drive_the_assistant_without_the_fault_tracepoint() {
    let Some(Setup { t, exe, data, go }) = setup() else {
        return;
    };
    let bare = start_reader(&exe, &data, &go).wait_with_output().unwrap();
    assert!(major_faults(&bare) >= 90, "bare: {}", major_faults(&bare));

    // assist -p, forced onto the samples.
    let (faults, v) = assist_by_pid(&exe, &data, &go, &[("PAGEWISE_FAULTS_FROM", "samples")]);
    assert_eq!(v["source"], "perf-faults", "{v}");
    assert!(
        faults[faults.len() - 1] <= 12,
        "assisted: {faults:?} major faults; last report {v}"
    );
    assert!(v["faults"].as_u64().unwrap() >= 32 + 3, "{v}");
    assert!(v["prefetches"].as_u64().unwrap() >= 3, "{v}");
    let f = std::fs::File::open(&data).unwrap();
    // All 32 pages of each chunk, less one DAMON pageout may take meanwhile (a full run of
    // the end-to-end binary saw 31 once); a chunk not prefetched has a few.
    for off in [16u64 << 20, 40 << 20, 8 << 20] {
        let n = resident_pages(&f, off, 128 << 10);
        assert!((31..=32).contains(&n), "chunk at {off}: {n} pages; {v}");
    }

    // run --assist, forced onto the samples: fewer major faults, nothing left cached.
    let r = run_assisted(
        t.path(),
        &exe,
        &data,
        &go,
        &[("PAGEWISE_FAULTS_FROM", "samples")],
        &[],
    );
    assert_eq!(r["assist"]["source"], "perf-faults", "{r}");
}

/// `assist -p` of a zombie (a process that has exited, its parent not having reaped it yet)
/// refuses at once with one line saying so (exit 1, as for no such process), instead of
/// waiting for it to exit, which it never will. The test is bounded: 20 s, then it fails.
#[test]
fn assist_refuses_a_zombie_at_once() {
    if !can_trace() {
        return;
    }
    // A child of this test that exits and is not waited for: a zombie until it is.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    let start = std::time::Instant::now();
    while proc_state(pid) != Some('Z') {
        assert!(start.elapsed().as_secs() < 5, "true never became a zombie");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (out, _) = run_deadline(bin().args(["assist", "-p", &pid.to_string()]), 20);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("PID {pid}")) && err.contains("zombie"),
        "{err}"
    );
    child.wait().unwrap();
}

/// A process that exits while assisted, and stays a zombie (its parent, this test, does not
/// reap it), ends the assistance as an exit does: at once, exit 0, with a line saying so.
#[test]
fn assist_ends_when_its_process_becomes_a_zombie() {
    if !can_trace() {
        return;
    }
    let mut child = Command::new("sleep").arg("1.0707").spawn().unwrap();
    let pid = child.id() as i32;
    let reaper = Reaper(vec![(pid, "sleep")]);
    let (out, took) = run_deadline(bin().args(["assist", "-p", &pid.to_string()]), 20);
    let err = stderr(&out);
    assert_eq!(
        proc_state(pid),
        Some('Z'),
        "not reaped by anyone but this test"
    );
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(took.as_secs_f64() < 5.0, "took {took:?}");
    assert!(
        err.contains(&format!("PID {pid}")) && err.contains("zombie"),
        "{err}"
    );
    drop(reaper);
    child.wait().unwrap();
}
