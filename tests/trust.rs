//! End-to-end tests pinning the trust fixes: copy refusing to clobber a file with itself or to
//! copy a directory into itself, ranges past EOF, dry runs that change nothing, output paths
//! checked before the command runs, signals forwarded with the command reaped, preallocation
//! that no longer fails a copy, traced files that became FIFOs, honest "unknown" numbers for
//! files you do not own, byte-exact JSON, lossless and aligned paths, `--map`, vmtouch
//! aliases, help texts, tmpfs residue, block devices, daemonising commands and JSON errors.
//! Every assertion on cache contents is on what the kernel reports (cachestat).

mod common;
use common::*;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

const PAGE: u64 = 4096;

// ---------------------------------------------------------------------------------------------
// Local helpers
// ---------------------------------------------------------------------------------------------

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An anonymous file on the build's filesystem to take a command's output: unlike a pipe, a
/// background process keeping it open cannot make the reader wait for it.
fn capture_file() -> File {
    tempfile::tempfile_in(tmp_root()).unwrap()
}

fn read_back(mut f: File) -> Vec<u8> {
    let mut v = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Spawns with stdout/stderr going to files (see `capture_file`).
fn spawn_captured(cmd: &mut Command) -> (Child, File, File) {
    let (o, e) = (capture_file(), capture_file());
    let child = cmd
        .stdout(o.try_clone().unwrap())
        .stderr(e.try_clone().unwrap())
        .spawn()
        .unwrap();
    (child, o, e)
}

/// Waits at most `secs` for the child; None when it is still running then.
fn wait_deadline(child: &mut Child, secs: f64) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if start.elapsed() > Duration::from_secs_f64(secs) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn collect(cmd: &Command, status: ExitStatus, o: File, e: File) -> Output {
    let out = Output {
        status,
        stdout: read_back(o),
        stderr: read_back(e),
    };
    eprintln!(
        "--- {:?}\nstatus {:?}\nstdout:\n{}\nstderr:\n{}",
        cmd,
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

/// Runs with a deadline (the never-block rule): killed, and the test failed, past it.
/// Returns the output and how long it took.
fn run_deadline(cmd: &mut Command, secs: u64) -> (Output, Duration) {
    let start = Instant::now();
    let (mut child, o, e) = spawn_captured(cmd);
    match wait_deadline(&mut child, secs as f64) {
        Some(st) => {
            let took = start.elapsed();
            (collect(cmd, st, o, e), took)
        }
        None => {
            let _ = child.kill();
            let st = child.wait().unwrap();
            let _ = collect(cmd, st, o, e);
            panic!("{cmd:?} blocked for more than {secs} s");
        }
    }
}

/// A mount (tmpfs or bind) unmounted on drop, also when the test fails.
struct Mount {
    at: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Mount {
    /// A size-limited tmpfs on a fresh directory. Panics when it cannot be mounted (root can).
    fn tmpfs(size: &str) -> Mount {
        Mount::tmpfs_opts(&format!("size={size}"))
    }
    /// A tmpfs with these mount options (size=, nr_inodes=).
    fn tmpfs_opts(opts: &str) -> Mount {
        let d = tmp();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(d.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t tmpfs -o {opts} failed");
        Mount {
            at: d.path().to_path_buf(),
            _dir: Some(d),
        }
    }
    fn bind(from: &Path, at: &Path) -> Mount {
        let ok = Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(at)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount --bind failed");
        Mount {
            at: at.to_path_buf(),
            _dir: None,
        }
    }
    fn path(&self) -> &Path {
        &self.at
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.at)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            // Busy (a process still inside): detach it lazily rather than leave it mounted.
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        }
    }
}

/// A loop device over an image file, detached on drop.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

fn comm(pid: i32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// The process's state letter from /proc/PID/stat (None: no such process).
fn proc_state(pid: i32) -> Option<char> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Gone, or dead and waiting to be reaped (a zombie holds no resources).
fn is_dead(pid: i32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

fn wait_dead(pid: i32, secs: f64) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs_f64(secs) {
        if is_dead(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    is_dead(pid)
}

/// The direct children of `pid`, from /proc/PID/task/*/children.
fn children_of(pid: i32) -> Vec<i32> {
    let mut v = Vec::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return v;
    };
    for t in tasks.flatten() {
        if let Ok(s) = fs::read_to_string(t.path().join("children")) {
            v.extend(s.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
        }
    }
    v
}

/// Waits (at most 5 s) for `pid` to have a child whose command name is `name`.
fn wait_child_named(pid: i32, name: &str) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(c) = children_of(pid)
            .into_iter()
            .find(|&c| comm(c).as_deref() == Some(name))
        {
            return c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no child {name} of {pid} after 5 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Processes with exactly this argv (read from /proc/*/cmdline).
fn pids_with_cmdline(argv: &[&str]) -> Vec<i32> {
    let mut want = Vec::new();
    for a in argv {
        want.extend_from_slice(a.as_bytes());
        want.push(0);
    }
    let mut v = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if fs::read(e.path().join("cmdline")).ok().as_deref() == Some(&want[..]) {
            v.push(pid);
        }
    }
    v
}

/// Kills, by PID, the processes this test started that may outlive it: each entry is a PID and
/// the command name it must still have (so a recycled PID is never hit).
struct Reaper(Vec<(i32, &'static str)>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for &(pid, name) in &self.0 {
            if !is_dead(pid) && comm(pid).as_deref() == Some(name) {
                // SAFETY: kill(2) with a PID we checked is still our process.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Kills, on drop, every process whose argv is exactly this (used with unique arguments such
/// as `sleep 7.123`, so only the test's own leftovers match).
struct KillArgv(&'static [&'static str]);

impl Drop for KillArgv {
    fn drop(&mut self) {
        for pid in pids_with_cmdline(self.0) {
            // SAFETY: kill(2) of a process with our unique argv.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Terminal display width: East Asian wide and fullwidth characters take two columns.
fn display_width(s: &str) -> usize {
    s.chars()
        .map(|c| {
            let u = c as u32;
            let wide = matches!(u,
                0x1100..=0x115F
                | 0x2E80..=0x303E
                | 0x3041..=0x33FF
                | 0x3400..=0x4DBF
                | 0x4E00..=0x9FFF
                | 0xA000..=0xA4CF
                | 0xAC00..=0xD7A3
                | 0xF900..=0xFAFF
                | 0xFE30..=0xFE4F
                | 0xFF00..=0xFF60
                | 0xFFE0..=0xFFE6
                | 0x20000..=0x3FFFD);
            if wide {
                2
            } else {
                1
            }
        })
        .sum()
}

/// The display column where `col` (a header word) ends in the table's header line.
fn header_end(header: &str, col: &str) -> usize {
    let i = header
        .find(col)
        .unwrap_or_else(|| panic!("no {col} in {header}"));
    display_width(&header[..i + col.len()])
}

/// The text of a right-aligned column in `row`, given where it ends (display columns) and its
/// header's width... returned as the `width` display columns ending there.
fn cell_ending_at(row: &str, end: usize, width: usize) -> String {
    let mut col = 0;
    let mut cells = Vec::new();
    for c in row.chars() {
        let w = display_width(&c.to_string());
        cells.push((col, col + w, c));
        col += w;
    }
    cells
        .iter()
        .filter(|(a, b, _)| *a >= end.saturating_sub(width) && *b <= end)
        .map(|(_, _, c)| *c)
        .collect()
}

/// Makes the directories above `p` traversable for others (the tmp root is under target/).
fn open_up_ancestors(p: &Path) {
    let mut a = p.to_path_buf();
    while let Some(parent) = a.parent() {
        let mode = fs::metadata(parent).unwrap().permissions().mode();
        if mode & 0o005 != 0o005 {
            let _ = fs::set_permissions(parent, fs::Permissions::from_mode(mode | 0o005));
        }
        a = parent.to_path_buf();
    }
}

fn cold_file(p: &Path, size: usize) {
    write_file(p, size);
    sync_and_evict(p);
    assert_eq!(cached(p), 0, "setup: {} evicted", p.display());
}

fn record_trace(dir: &Path, trace: &Path, file: &Path) {
    // cat's output goes to a file: it is data, not a test log.
    let sink = File::create(dir.join("cat.out")).unwrap();
    let mut cmd = bin();
    cmd.arg("record")
        .arg("-o")
        .arg(trace)
        .args(["--", "cat"])
        .arg(file)
        .stdout(sink);
    let out = cmd.output().unwrap();
    eprintln!(
        "--- {cmd:?}\nstatus {:?}\nstderr:\n{}",
        out.status,
        stderr(&out)
    );
    assert!(out.status.success(), "record");
    assert!(trace.exists());
}

fn names_in(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_vec())
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// 1. copy: a file is never copied over itself
// ---------------------------------------------------------------------------------------------

#[test]
fn copy_refuses_the_same_file_through_symlinks_and_hard_links() {
    let t = tmp();
    let d = t.path();
    let data = d.join("data");
    fs::write(&data, "x\n").unwrap();
    std::os::unix::fs::symlink("data", d.join("lnk")).unwrap();
    let intact = || {
        let m = fs::symlink_metadata(&data).unwrap();
        assert!(m.file_type().is_file(), "data is still a regular file");
        assert_eq!(fs::read(&data).unwrap(), b"x\n", "data still holds x");
    };

    // A symlink source over its own target (old: data became a symlink to itself).
    let out = run(bin().args(["copy", "lnk", "data"]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("are the same file"));
    intact();

    // A file over a symlink to itself.
    let out = run(bin().args(["copy", "data", "lnk"]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("are the same file"));
    intact();
    assert_eq!(fs::read_link(d.join("lnk")).unwrap(), Path::new("data"));

    // A file over a hard link to itself.
    fs::hard_link(&data, d.join("hl")).unwrap();
    let out = run(bin().args(["copy", "data", "hl"]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("are the same file"));
    intact();

    // Two symlinks to the same file: copying one link over the other is fine.
    std::os::unix::fs::symlink("data", d.join("lnk2")).unwrap();
    let out = run(bin().args(["copy", "lnk", "lnk2"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    let m = fs::symlink_metadata(d.join("lnk2")).unwrap();
    assert!(m.file_type().is_symlink(), "lnk2 is still a symlink");
    assert_eq!(fs::read_link(d.join("lnk2")).unwrap(), Path::new("data"));
    intact();
}

// ---------------------------------------------------------------------------------------------
// 2. copy: a directory is never copied into itself, also through a bind mount
// ---------------------------------------------------------------------------------------------

#[test]
fn copy_refuses_a_directory_into_itself_also_through_a_bind_mount() {
    if !require_root("mount --bind") {
        return;
    }
    let t = tmp();
    let src = t.path().join("d");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/f"), "f\n").unwrap();
    let m = t.path().join("m");
    fs::create_dir(&m).unwrap();
    {
        let bind = Mount::bind(&src, &m);
        let out = run_deadline(
            bin()
                .arg("copy")
                .arg(&src)
                .arg(format!("{}/x/", bind.path().display())),
            20,
        )
        .0;
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("into itself"), "{}", stderr(&out));
        assert_eq!(
            names_in(&src),
            vec![b"sub".to_vec()],
            "nothing created inside d"
        );
    }
    let out = run_deadline(bin().arg("copy").arg(&src).arg(src.join("inner")), 20).0;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("into itself"), "{}", stderr(&out));
    assert_eq!(names_in(&src), vec![b"sub".to_vec()]);
    assert_eq!(names_in(&src.join("sub")), vec![b"f".to_vec()]);
}

// ---------------------------------------------------------------------------------------------
// 3. --range past the end of the file covers nothing
// ---------------------------------------------------------------------------------------------

#[test]
fn range_past_eof_covers_nothing_for_stat_evict_and_load() {
    let t = tmp();
    let f = t.path().join("F");
    write_file(&f, 5000);
    fs::File::open(&f).unwrap().sync_all().unwrap();
    assert_eq!(cached(&f), 2, "setup: fully cached");

    let out = run(bin()
        .args(["stat", "--json", "-l", "--range", "1M-3M"])
        .arg(&f));
    assert!(out.status.success());
    let v = json(&out);
    assert_eq!(v["files"][0]["bytes"], 0);
    assert_eq!(v["files"][0]["cached_bytes"], 0);

    let out = run(bin().args(["evict", "--range", "1M-3M"]).arg(&f));
    assert!(out.status.success());
    assert_eq!(cached(&f), 2, "evict of a range past EOF dropped nothing");

    sync_and_evict(&f);
    assert_eq!(cached(&f), 0);
    let out = run(bin().args(["load", "--range", "1M-3M"]).arg(&f));
    assert!(out.status.success());
    assert_eq!(cached(&f), 0, "load of a range past EOF read nothing");
}

// ---------------------------------------------------------------------------------------------
// 4. evict --trace --dry-run only measures
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// 5. record -o / run --report: the output is created before the command runs
// ---------------------------------------------------------------------------------------------

#[test]
fn unwritable_output_path_fails_before_the_command_runs() {
    if !require_root("tracing (record, run)") {
        return;
    }
    let t = tmp();
    let d = t.path();
    let (out, _) = run_deadline(
        bin()
            .args(["record", "-o", "nodir/t", "--", "sh", "-c", "touch MARKER"])
            .current_dir(d),
        20,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nodir/t"), "{}", stderr(&out));
    assert!(!d.join("MARKER").exists(), "the command never ran");

    let (out, _) = run_deadline(
        bin()
            .args([
                "run",
                "--report",
                "nodir/r",
                "--",
                "sh",
                "-c",
                "touch MARKER2",
            ])
            .current_dir(d),
        20,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("nodir/r"), "{}", stderr(&out));
    assert!(!d.join("MARKER2").exists(), "the command never ran");
}

// ---------------------------------------------------------------------------------------------
// 6. Signals sent to pagewise reach the command; pagewise exits 128+N and leaves nothing behind
// ---------------------------------------------------------------------------------------------

/// Starts `pagewise ARGS -- sleep 30`, sends `sig` to pagewise once sleep runs, and returns
/// pagewise's exit status (it must end within 5 s) after checking that sleep is gone too.
fn signal_case(dir: &Path, args: &[&str], sig: i32) -> Output {
    let mut cmd = bin();
    cmd.args(args).args(["--", "sleep", "30"]).current_dir(dir);
    let (mut child, o, e) = spawn_captured(&mut cmd);
    let pw = child.id() as i32;
    let mut reaper = Reaper(vec![(pw, "pagewise")]);
    let sleeper = wait_child_named(pw, "sleep");
    reaper.0.push((sleeper, "sleep"));
    // Let pagewise settle in its wait loop, as a user pressing a key would.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) of the pagewise we started.
    assert_eq!(unsafe { libc::kill(pw, sig) }, 0);
    let st = wait_deadline(&mut child, 5.0);
    let Some(st) = st else {
        let _ = child.kill();
        let st = child.wait().unwrap();
        collect(&cmd, st, o, e);
        panic!("pagewise did not exit within 5 s of signal {sig}");
    };
    let out = collect(&cmd, st, o, e);
    assert!(
        wait_dead(sleeper, 2.0),
        "signal {sig}: the command (sleep, pid {sleeper}) is gone too, state {:?}",
        proc_state(sleeper)
    );
    drop(reaper);
    out
}

#[test]
fn run_exits_130_on_sigint_and_its_command_is_gone() {
    if !require_root("tracing (run)") {
        return;
    }
    let t = tmp();
    let out = signal_case(t.path(), &["run"], libc::SIGINT);
    assert_eq!(out.status.code(), Some(130), "128 + SIGINT (old: 143)");
}

#[test]
fn run_exits_129_on_sighup_and_its_command_is_gone() {
    if !require_root("tracing (run)") {
        return;
    }
    let t = tmp();
    let out = signal_case(t.path(), &["run"], libc::SIGHUP);
    assert_eq!(out.status.code(), Some(129), "128 + SIGHUP");
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
fn run_exits_131_on_sigquit_and_its_command_is_gone() {
    if !require_root("tracing (run)") {
        return;
    }
    let t = tmp();
    let out = signal_case(t.path(), &["run"], libc::SIGQUIT);
    assert_eq!(out.status.code(), Some(131), "128 + SIGQUIT");
}

// ---------------------------------------------------------------------------------------------
// 7. Preallocation: ENOSPC fails one file, as with cp, not the whole copy
// ---------------------------------------------------------------------------------------------

#[test]
fn copy_to_a_small_tmpfs_completes_one_of_two_files_and_leaves_no_temporaries() {
    if !require_root("mount -t tmpfs") {
        return;
    }
    let t = tmp();
    let (s1, s2) = (t.path().join("s1"), t.path().join("s2"));
    write_file(&s1, 5 << 20);
    let mut other = vec![0u8; 5 << 20];
    for (i, b) in other.iter_mut().enumerate() {
        *b = (i % 251) as u8 ^ 0x5a;
    }
    fs::write(&s2, &other).unwrap();

    let m = Mount::tmpfs("8m");
    // The two files are copied in parallel, so the outcome could depend on which write or
    // fallocate comes first: several rounds, each of which must keep exactly one file whole.
    for round in 0..10 {
        for n in names_in(m.path()) {
            fs::remove_file(m.path().join(OsStr::from_bytes(&n))).unwrap();
        }
        let out = run_deadline(
            bin()
                .arg("copy")
                .arg(&s1)
                .arg(&s2)
                .arg(format!("{}/", m.path().display())),
            30,
        )
        .0;
        assert_eq!(
            out.status.code(),
            Some(2),
            "round {round}: one file did not fit"
        );
        assert!(stderr(&out).contains("No space left"), "{}", stderr(&out));
        let names = names_in(m.path());
        assert_eq!(
            names.len(),
            1,
            "round {round}: exactly one destination file and no temporaries: {:?}",
            names
                .iter()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect::<Vec<_>>()
        );
        let name = &names[0];
        let src = match &name[..] {
            b"s1" => &s1,
            b"s2" => &s2,
            other => panic!("unexpected {}", String::from_utf8_lossy(other)),
        };
        let dst = m.path().join(OsStr::from_bytes(name));
        assert_eq!(fs::metadata(&dst).unwrap().len(), 5 << 20);
        assert!(
            fs::read(&dst).unwrap() == fs::read(src).unwrap(),
            "round {round}: the copy is complete and exact"
        );
    }

    // One 5 MiB file alone fits in 8 MiB.
    for n in names_in(m.path()) {
        fs::remove_file(m.path().join(OsStr::from_bytes(&n))).unwrap();
    }
    let out = run_deadline(
        bin()
            .arg("copy")
            .arg(&s1)
            .arg(format!("{}/", m.path().display())),
        30,
    )
    .0;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(names_in(m.path()), vec![b"s1".to_vec()]);
    assert!(fs::read(m.path().join("s1")).unwrap() == fs::read(&s1).unwrap());
}

// ---------------------------------------------------------------------------------------------
// 8. A traced file replaced by a FIFO is refused, never blocked on
// ---------------------------------------------------------------------------------------------

/// Records `cat F`, lets `replace` put a FIFO at F, then checks that `replay --direct` and
/// `evict --trace` end within 10 s, exit 2 and say it is a FIFO.
fn fifo_case(replace: fn(&Path)) {
    let t = tmp();
    let f = t.path().join("F");
    let trace = t.path().join("T");
    cold_file(&f, 64 << 10);
    record_trace(t.path(), &trace, &f);
    replace(&f);
    let m = fs::symlink_metadata(&f).unwrap();
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()),
        "setup: F is a FIFO"
    );

    let (out, _) = run_deadline(bin().args(["replay", "--direct"]).arg(&trace), 10);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).to_lowercase().contains("fifo"),
        "{}",
        stderr(&out)
    );

    let (out, _) = run_deadline(bin().args(["evict", "--trace"]).arg(&trace), 10);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.to_lowercase().contains("fifo"), "{err}");
    assert!(!err.contains("Illegal seek"), "{err}");
}

/// `rm F; mkfifo F`: ext4 usually gives the FIFO the freed inode number again.
#[test]
fn traced_file_replaced_by_a_fifo_is_refused_without_blocking() {
    if !require_root("tracing (record)") {
        return;
    }
    fifo_case(|f| {
        fs::remove_file(f).unwrap();
        mkfifo(f);
    });
}

/// The FIFO made beside F and renamed over it: it cannot have F's inode number.
#[test]
fn traced_file_replaced_by_a_fifo_with_a_new_inode_is_refused() {
    if !require_root("tracing (record)") {
        return;
    }
    fifo_case(|f| {
        let new = f.with_file_name("F.fifo");
        mkfifo(&new);
        fs::rename(&new, f).unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// 9. Files you do not own: "unknown", never false numbers; evict still works for readers
// ---------------------------------------------------------------------------------------------

#[test]
fn non_owner_sees_unknown_and_its_evict_drops_the_pages() {
    if !require_root("switching to user nobody") {
        return;
    }
    let t = tmp();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    open_up_ancestors(t.path());
    let f = t.path().join("F");
    write_file(&f, 16 << 20);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    sync_and_evict(&f);
    fs::read(&f).unwrap();
    let pages = (16u64 << 20) / PAGE;
    assert_eq!(cached(&f), pages, "setup: fully cached, clean");
    assert_eq!(cs(&f).dirty, 0);

    let out = run(as_nobody().arg("stat").arg(&f));
    let table = stdout(&out);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let row = lines
        .find(|l| l.starts_with(f.to_str().unwrap()))
        .expect("a row for F");
    let end = header_end(header, "CACHED");
    assert_eq!(
        cell_ending_at(row, end, "unknown".len()),
        "unknown",
        "CACHED column of: {row}"
    );
    assert!(!table.contains("0.0%*"), "{table}");

    let out = run(as_nobody().args(["stat", "--json", "-l"]).arg(&f));
    let v = json(&out);
    assert!(v["files"][0]["cached_bytes"].is_null());
    let reason = v["files"][0]["unknown_reason"].as_str().unwrap_or("");
    assert!(!reason.is_empty(), "unknown_reason explains it");

    let out = run(as_nobody().arg("evict").arg(&f));
    let said = stdout(&out);
    assert!(!said.contains("dropped 0 B of 0 B"), "{said}");
    assert!(said.contains("unknown"), "{said}");
    let left = cached(&f);
    assert!(
        left * 100 <= pages,
        "fadvise(DONTNEED) works for readers: {left} pages left"
    );
}

// ---------------------------------------------------------------------------------------------
// 10. stat --range: SIZE becomes IN RANGE
// ---------------------------------------------------------------------------------------------

#[test]
fn stat_range_shows_the_bytes_in_range() {
    let t = tmp();
    let f = t.path().join("F");
    write_file(&f, 1 << 20);
    let out = run(bin().args(["stat", "--range", "0-64K"]).arg(&f));
    assert!(out.status.success());
    let table = stdout(&out);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    assert!(header.contains("IN RANGE"), "{header}");
    let row = lines
        .find(|l| l.starts_with(f.to_str().unwrap()))
        .expect("a row for F");
    let end = header_end(header, "IN RANGE");
    assert_eq!(
        cell_ending_at(row, end, "64.0 KiB".len()),
        "64.0 KiB",
        "{row}"
    );

    let v = json(&run(bin()
        .args(["stat", "--json", "-l", "--range", "0-64K"])
        .arg(&f)));
    assert_eq!(v["files"][0]["bytes"], 65536);
    assert_eq!(v["files"][0]["size"], 1048576);
}

// ---------------------------------------------------------------------------------------------
// 11. Byte totals are exact, not rounded to pages
// ---------------------------------------------------------------------------------------------

#[test]
fn load_and_stat_totals_are_exact_bytes() {
    let t = tmp();
    let root = t.path().join("tree");
    fs::create_dir(&root).unwrap();
    let mut sum = 0u64;
    let mut files = Vec::new();
    for i in 1..=10usize {
        let size = i * 1000 + 7;
        let p = root.join(format!("f{i:02}"));
        cold_file(&p, size);
        sum += size as u64;
        files.push((p, size as u64));
    }
    let out = run(bin().args(["load", "--json"]).arg(&root));
    assert!(out.status.success());
    assert_eq!(json(&out)["total"]["bytes"], sum);
    for (p, size) in &files {
        assert_eq!(cached(p), size.div_ceil(PAGE), "{} loaded", p.display());
    }
    let out = run(bin().args(["stat", "--json"]).arg(&root));
    assert_eq!(json(&out)["total"]["bytes"], sum);
}

// ---------------------------------------------------------------------------------------------
// 12. A 2-byte dirty file is 2 dirty bytes, not a page
// ---------------------------------------------------------------------------------------------

#[test]
fn tiny_dirty_file_counts_its_bytes_not_a_page() {
    let t = tmp();
    let f = t.path().join("two");
    fs::write(&f, "ab").unwrap();
    assert_eq!(cs(&f).dirty, 1, "setup: the page is dirty");
    let v = json(&run(bin().args(["stat", "--json", "-l"]).arg(&f)));
    let dirty = v["files"][0]["dirty_bytes"].as_u64().unwrap();
    assert!(dirty <= 2, "dirty_bytes {dirty} (old: 4096)");
    assert_eq!(v["files"][0]["cached_bytes"], 2);
}

// ---------------------------------------------------------------------------------------------
// 13. run --report speaks bytes
// ---------------------------------------------------------------------------------------------

fn keys_starting_with(v: &serde_json::Value, prefix: &str, found: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k.starts_with(prefix) {
                    found.push(k.clone());
                }
                keys_starting_with(x, prefix, found);
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                keys_starting_with(x, prefix, found);
            }
        }
        _ => {}
    }
}

#[test]
fn run_report_is_in_bytes() {
    if !require_root("tracing (run)") {
        return;
    }
    let t = tmp();
    let f = t.path().join("F");
    cold_file(&f, 64 << 10);
    let report = t.path().join("R");
    let sink = File::create(t.path().join("cat.out")).unwrap();
    let mut cmd = bin();
    cmd.arg("run")
        .arg("--report")
        .arg(&report)
        .args(["--", "cat"])
        .arg(&f)
        .stdout(sink);
    let out = cmd.output().unwrap();
    eprintln!(
        "--- {cmd:?}\nstatus {:?}\nstderr:\n{}",
        out.status,
        stderr(&out)
    );
    assert!(out.status.success());
    let text = fs::read_to_string(&report).unwrap();
    eprintln!("report: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for k in ["added_bytes", "dropped_bytes", "left_bytes"] {
        assert!(v.get(k).is_some_and(|x| x.is_u64()), "{k} in {text}");
    }
    let mut pages = Vec::new();
    keys_starting_with(&v, "pages_", &mut pages);
    assert!(pages.is_empty(), "no pages_* keys: {pages:?}");
}

// ---------------------------------------------------------------------------------------------
// 14. Missing paths: an error, never a row
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_paths_are_errors_not_rows() {
    let t = tmp();
    let d = t.path();
    let missing = "MISSING-trust";
    write_file(&d.join("EXISTING"), 10000);

    let out = run(bin().args(["stat", missing]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(missing));
    assert!(!stdout(&out).contains(missing), "no row for it");

    let out = run(bin().args(["stat", "EXISTING", missing]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    let table = stdout(&out);
    assert!(!table.contains(missing), "no row for it: {table}");
    assert!(
        table.lines().any(|l| l.starts_with("EXISTING ")),
        "EXISTING's row: {table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("TOTAL")),
        "a TOTAL line: {table}"
    );

    let out = run(bin().args(["stat", "--json", missing]).current_dir(d));
    assert_eq!(out.status.code(), Some(2));
    let v = json(&out);
    assert_eq!(v["roots"], serde_json::json!([]));
    assert_eq!(v["errors"][0]["path"], missing);
}

// ---------------------------------------------------------------------------------------------
// 15. Names: non-UTF-8 bytes kept in JSON, control bytes escaped and wide names aligned in tables
// ---------------------------------------------------------------------------------------------

#[test]
fn non_utf8_names_are_lossless_in_json_and_copied_exactly() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("nd")).unwrap();
    let name: &[u8] = b"bad\xffname";
    fs::write(d.join("nd").join(OsStr::from_bytes(name)), "z").unwrap();
    let full: Vec<u8> = [b"nd/".as_slice(), name].concat();

    let out = run(bin().args(["stat", "-l", "--json", "nd"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    let f = &v["files"][0];
    let bytes: Vec<u8> = f["path_bytes"]
        .as_array()
        .expect("path_bytes")
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, full, "the raw bytes");
    assert_eq!(f["path"], String::from_utf8_lossy(&full).as_ref());

    let out = run(bin().args(["stat", "--json-lines", "nd"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    let mut file_lines = 0;
    for line in stdout(&out).lines() {
        assert_ne!(line.trim(), "null");
        let v: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert!(!v.is_null());
        if v.get("path_bytes").is_some() {
            let b: Vec<u8> = v["path_bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
                .collect();
            assert_eq!(b, full);
            file_lines += 1;
        }
    }
    assert_eq!(file_lines, 1, "the file's line has path_bytes");

    let out = run(bin().args(["copy", "--json", "nd", "dst"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    let _ = json(&out);
    assert_eq!(names_in(&d.join("dst")), vec![name.to_vec()]);
    assert_eq!(
        fs::read(d.join("dst").join(OsStr::from_bytes(name))).unwrap(),
        b"z"
    );
}

#[test]
fn newline_in_a_name_is_escaped_in_the_table_and_exact_in_json() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("nl")).unwrap();
    fs::write(d.join("nl").join("a\nb"), "hello").unwrap();

    let out = run(bin().args(["stat", "-l", "nl"]).current_dir(d));
    assert!(out.status.success());
    let table = stdout(&out);
    assert_eq!(table.lines().count(), 3, "header, one file, TOTAL: {table}");
    assert!(
        table.lines().any(|l| l.starts_with("nl/a\\x0ab ")),
        "{table}"
    );

    let v = json(&run(bin()
        .args(["stat", "-l", "--json", "nl"])
        .current_dir(d)));
    assert_eq!(v["files"][0]["path"], "nl/a\nb");
}

#[test]
fn wide_names_keep_table_columns_aligned() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("w")).unwrap();
    fs::write(d.join("w/日本語.txt"), "1\n").unwrap();
    fs::write(d.join("w/abc.txt"), "2\n").unwrap();
    let out = run(bin().args(["stat", "-l", "w"]).current_dir(d));
    assert!(out.status.success());
    let table = stdout(&out);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let want = header_end(header, "SIZE");
    let mut rows = 0;
    for row in lines {
        let path = if row.starts_with("w/日本語.txt") {
            "w/日本語.txt"
        } else if row.starts_with("w/abc.txt") {
            "w/abc.txt"
        } else {
            continue;
        };
        // After the path: an empty FILES column, then SIZE ("2 B").
        let rest = &row[path.len()..];
        let size_end = rest.find(" B").expect("a size") + 2;
        let end = display_width(path) + display_width(&rest[..size_end]);
        assert_eq!(end, want, "SIZE ends at column {want}: {row:?}");
        rows += 1;
    }
    assert_eq!(rows, 2, "{table}");
}

// ---------------------------------------------------------------------------------------------
// 16. --map takes an optional =WIDTH, never the next argument
// ---------------------------------------------------------------------------------------------

fn bar_lines(out: &Output) -> Vec<String> {
    stdout(out)
        .lines()
        .filter(|l| l.starts_with("  ["))
        .map(|l| l[2..].to_string())
        .collect()
}

#[test]
fn stat_map_takes_a_path_after_it_and_an_optional_width() {
    let t = tmp();
    let f = t.path().join("F");
    fs::write(&f, vec![1u8; 64 << 20]).unwrap();
    sync_and_evict(&f);
    assert_eq!(cached(&f), 0);

    let out = run(bin().args(["stat", "--map"]).arg(&f));
    assert_eq!(out.status.code(), Some(0), "F is a path, not a width");
    assert_eq!(bar_lines(&out).len(), 1, "a bar line");
    assert!(
        stdout(&out).lines().any(|l| l.starts_with("map:")),
        "a legend"
    );

    let out = run(bin().args(["stat", "--map=20"]).arg(&f));
    assert_eq!(out.status.code(), Some(0));
    let bars = bar_lines(&out);
    assert_eq!(bars.len(), 1);
    assert_eq!(bars[0].chars().count(), 22, "20 cells: {:?}", bars[0]);
    assert!(bars[0].starts_with('[') && bars[0].ends_with(']'));

    // One page at offset 0, no readahead.
    let file = File::open(&f).unwrap();
    // SAFETY: posix_fadvise on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    assert_eq!(rc, 0);
    let mut page = [0u8; PAGE as usize];
    file.read_exact_at(&mut page, 0).unwrap();
    assert_eq!(cached(&f), 1, "setup: exactly one page cached");

    let out = run(bin().args(["stat", "--map=8"]).arg(&f));
    assert_eq!(out.status.code(), Some(0));
    let bars = bar_lines(&out);
    assert_eq!(bars.len(), 1);
    let cells: Vec<char> = bars[0].chars().collect();
    assert_eq!(cells.len(), 10, "{:?}", bars[0]);
    assert_eq!(cells[1], '.', "one page is some: {:?}", bars[0]);
    assert!(
        cells[2..9].iter().all(|&c| c == ' '),
        "the rest is empty: {:?}",
        bars[0]
    );
}

// ---------------------------------------------------------------------------------------------
// 17. vmtouch-style short flags; record and run without `--`
// ---------------------------------------------------------------------------------------------

fn listed(out: &Output) -> Vec<String> {
    let mut v: Vec<String> = json(out)["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn vmtouch_include_ignore_flags_and_commands_without_double_dash() {
    let t = tmp();
    let d = t.path();
    fs::create_dir(d.join("ia")).unwrap();
    for n in ["x.a", "y.b", "z.a"] {
        fs::write(d.join("ia").join(n), n).unwrap();
    }
    let out = run(bin()
        .args(["stat", "-l", "--json", "-I", "*.a", "ia"])
        .current_dir(d));
    assert!(out.status.success());
    assert_eq!(listed(&out), ["ia/x.a", "ia/z.a"]);

    let out = run(bin()
        .args(["stat", "-l", "--json", "-i", "*.a", "ia"])
        .current_dir(d));
    assert!(out.status.success());
    assert_eq!(listed(&out), ["ia/y.b"]);

    let out = run(bin().args(["stat", "-e", "ia"]).current_dir(d));
    assert_eq!(out.status.code(), Some(1), "-e is not a flag of stat");

    if !require_root("tracing (record, run)") {
        return;
    }
    let out = run(bin().args(["record", "cat", "ia/x.a"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "x.a", "cat ran");
    assert!(d.join("pagewise.trace").exists());
    let out = run(bin().args(["run", "cat", "ia/y.b"]).current_dir(d));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "y.b", "cat ran");
}

// ---------------------------------------------------------------------------------------------
// 18. Help: every option and argument is described
// ---------------------------------------------------------------------------------------------

/// The brief's check on the one-line layout (`-h`): a line that is only a flag (with its value
/// name) or only a positional, with nothing after it.
fn bare_entry_line(line: &str) -> bool {
    let s = line.trim();
    if s.is_empty() {
        return false;
    }
    // A positional alone: <TRACE>, <PATHS>..., [PATHS]...
    if (s.starts_with('<') || s.starts_with('['))
        && !s.contains(char::is_whitespace)
        && (s.ends_with('>') || s.ends_with(']') || s.ends_with("..."))
    {
        return true;
    }
    // (-X, )?--name( <VALUE>)?
    let mut rest = s;
    let b = rest.as_bytes();
    if b.len() >= 4 && b[0] == b'-' && b[1].is_ascii_alphanumeric() && &rest[2..4] == ", " {
        rest = &rest[4..];
    }
    let Some(r) = rest.strip_prefix("--") else {
        return false;
    };
    let name_len = r
        .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
        .unwrap_or(r.len());
    if name_len == 0 {
        return false;
    }
    let r = &r[name_len..];
    if r.is_empty() {
        return true;
    }
    let Some(v) = r.strip_prefix(" <") else {
        return false;
    };
    let Some(close) = v.find('>') else {
        return false;
    };
    let inner = &v[..close];
    !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_uppercase() || matches!(c, '_' | '|' | '-'))
        && v[close + 1..].trim().is_empty()
}

/// Entries of the Arguments:/Options: sections without a description, in either clap layout:
/// the description on the entry's line (after two spaces), or on the next, deeper-indented
/// lines. "[default: ..]", "[possible values: ..]" or "Possible values:" alone are no
/// description.
fn undescribed(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let not_text = |s: &str| {
        let s = s.trim();
        s.is_empty()
            || s.starts_with("[default")
            || s.starts_with("[possible")
            || s.starts_with("[alias")
            || s.starts_with("Possible values")
    };
    let mut bad = Vec::new();
    let mut in_section = false;
    for (i, l) in lines.iter().enumerate() {
        if !l.starts_with(' ') && !l.is_empty() {
            in_section = *l == "Arguments:" || *l == "Options:";
            continue;
        }
        if !in_section || l.trim().is_empty() || indent(l) > 6 {
            continue;
        }
        let s = l.trim();
        if !(s.starts_with('-') || s.starts_with('<') || s.starts_with('[')) {
            continue;
        }
        let (entry, inline) = match s.find("  ") {
            Some(k) => (&s[..k], s[k..].trim()),
            None => (s, ""),
        };
        let desc = if !inline.is_empty() {
            inline
        } else {
            lines[i + 1..]
                .iter()
                .find(|n| !n.trim().is_empty())
                .filter(|n| indent(n) > 6)
                .map(|n| n.trim())
                .unwrap_or("")
        };
        if not_text(desc) {
            bad.push(format!("{entry} -> {desc:?}"));
        }
    }
    bad
}

#[test]
fn every_option_and_argument_has_a_description() {
    // The checks themselves, on both layouts (so a parser bug cannot make this pass).
    assert!(bare_entry_line("      --direct"));
    assert!(bare_entry_line("  -o, --output <OUTPUT>"));
    assert!(bare_entry_line("      --from <FILE|->"));
    assert!(bare_entry_line("  <TRACE>"));
    assert!(!bare_entry_line("      --direct   Read with O_DIRECT"));
    assert!(!bare_entry_line(
        "  <TRACE>  A trace written by `pagewise record`"
    ));
    let sample = concat!(
        "Arguments:\n  <TRACE>\n          A trace\n\n",
        "Options:\n      --a <X>\n          Possible values:\n\n",
        "      --b  [default: 1]\n  -c, --cc  Text\n      --d\n          Text\n      --e\n\n",
        "Examples:\n  --f\n",
    );
    assert_eq!(
        undescribed(sample),
        [
            "--a <X> -> \"Possible values:\"",
            "--b -> \"[default: 1]\"",
            "--e -> \"\"",
        ]
    );
    let mut bad = Vec::new();
    for verb in [
        "show", "replay", "assist", "record", "run", "copy", "stat", "evict", "load",
    ] {
        let out = bin().args([verb, "--help"]).output().unwrap();
        assert!(out.status.success(), "{verb} --help");
        let long = stdout(&out);
        assert!(long.contains("Options:"), "{verb}: {long}");
        for b in undescribed(&long) {
            bad.push(format!("{verb} --help: {b}"));
        }
        let out = bin().args([verb, "-h"]).output().unwrap();
        assert!(out.status.success(), "{verb} -h");
        let short = stdout(&out);
        for b in undescribed(&short) {
            bad.push(format!("{verb} -h: {b}"));
        }
        for l in short.lines().filter(|l| bare_entry_line(l)) {
            bad.push(format!("{verb} -h: bare line {l:?}"));
        }
    }
    assert!(bad.is_empty(), "without a description:\n{}", bad.join("\n"));
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

// ---------------------------------------------------------------------------------------------
// 19. tmpfs residue is explained
// ---------------------------------------------------------------------------------------------

#[test]
fn tmpfs_residue_says_no_backing_store() {
    if !require_root("mount -t tmpfs") {
        return;
    }
    let m = Mount::tmpfs("4m");
    let f = m.path().join("F");
    write_file(&f, 100_000);
    assert_eq!(cached(&f), 25);
    let v = json(&run(bin().args(["evict", "--json"]).arg(&f)));
    assert_eq!(v["residue"][0]["reason"], "no_backing_store");
    assert_eq!(cached(&f), 25, "tmpfs pages cannot be dropped");
    let out = run(bin().arg("evict").arg(&f));
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(all.contains("tmpfs"), "{all}");
}

// ---------------------------------------------------------------------------------------------
// 20. A block device named explicitly is sized
// ---------------------------------------------------------------------------------------------

#[test]
fn block_device_is_sized_by_its_capacity() {
    if !require_root("losetup") {
        return;
    }
    let t = tmp();
    let img = t.path().join("img");
    File::create(&img).unwrap().set_len(16 << 20).unwrap();
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "losetup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
    assert!(dev.0.starts_with("/dev/loop"), "{}", dev.0);
    // Only stat (read), never a write to the device.
    let out = run(bin().args(["stat", "--json", &dev.0]));
    assert!(out.status.success());
    assert_eq!(json(&out)["total"]["size"], 16777216u64, "(old: 0)");
}

// ---------------------------------------------------------------------------------------------
// 21. copy of a FIFO is refused, without blocking
// ---------------------------------------------------------------------------------------------

#[test]
fn copy_of_a_fifo_is_refused_without_blocking() {
    let t = tmp();
    let fifo = mkfifo(&t.path().join("fifo"));
    let dst = t.path().join("dst");
    let (out, _) = run_deadline(bin().arg("copy").arg(&fifo).arg(&dst), 10);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).to_lowercase().contains("fifo"),
        "{}",
        stderr(&out)
    );
    assert!(fs::symlink_metadata(&dst).is_err(), "nothing created");
}

// ---------------------------------------------------------------------------------------------
// 22. A command that daemonises: pagewise returns when the command does, with a note
// ---------------------------------------------------------------------------------------------

#[test]
fn daemonising_command_returns_at_once_with_a_note() {
    if !require_root("tracing (record, run)") {
        return;
    }
    let t = tmp();
    {
        let _kill = KillArgv(&["sleep", "7.123"]);
        let (out, took) = run_deadline(
            bin().args(["run", "--", "sh", "-c", "sleep 7.123 & exit 0"]),
            10,
        );
        assert_eq!(out.status.code(), Some(0));
        assert!(took < Duration::from_secs(3), "took {took:?}");
        assert!(
            stderr(&out).contains("still running when it exited"),
            "{}",
            stderr(&out)
        );
        assert!(
            !pids_with_cmdline(&["sleep", "7.123"]).is_empty(),
            "setup: the background job ran"
        );
    }
    {
        let _kill = KillArgv(&["sleep", "7.124"]);
        let (out, took) = run_deadline(
            bin().arg("record").arg("-o").arg(t.path().join("T")).args([
                "--",
                "sh",
                "-c",
                "sleep 7.124 & exit 0",
            ]),
            10,
        );
        assert_eq!(out.status.code(), Some(0));
        assert!(took < Duration::from_secs(3), "took {took:?}");
        assert!(
            stderr(&out).contains("still running when it exited"),
            "{}",
            stderr(&out)
        );
        assert!(t.path().join("T").exists());
    }
}

// ---------------------------------------------------------------------------------------------
// 23. Fatal errors under --json are JSON
// ---------------------------------------------------------------------------------------------

#[test]
fn fatal_errors_under_json_are_json_documents() {
    let out = run(bin().args(["stat", "--json", "--bogus"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["kind"], "usage");

    let out = run(bin().args(["stat", "--json", "--from", "/nonexistent/list"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["kind"], "fatal");
}

// ---------------------------------------------------------------------------------------------
// 24. Write errors name the destination file, not only its directory
// ---------------------------------------------------------------------------------------------

/// O_TMPFILE itself refused: a tmpfs with no inode left for a file (its root and `x` take
/// the two it has). The old message named only the directory ("t1/x: open(O_TMPFILE) failed").
#[test]
fn o_tmpfile_errors_name_each_destination_file() {
    if !require_root("mount -t tmpfs") {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 1..=3 {
        write_file(&src.join(format!("f{i}")), 8192);
    }
    let m = Mount::tmpfs_opts("size=1m,nr_inodes=2");
    let dst = m.path().join("x");
    let (out, _) = run_deadline(bin().arg("copy").arg(&src).arg(&dst), 20);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for i in 1..=3 {
        let want = format!("'{}/f{i}'", dst.display());
        assert!(
            err.lines().any(|l| l.contains(&want)),
            "an error names {want}: {err}"
        );
    }
    if dst.is_dir() {
        assert!(names_in(&dst).is_empty(), "nothing created in x");
    }
}

/// The brief's scenario: a tmpfs full of data (writes fail with ENOSPC).
#[test]
fn enospc_errors_name_each_destination_file() {
    if !require_root("mount -t tmpfs") {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 1..=3 {
        write_file(&src.join(format!("f{i}")), 8192);
    }
    let m = Mount::tmpfs("1m");
    {
        let mut fill = File::create(m.path().join("fill")).unwrap();
        let chunk = vec![7u8; PAGE as usize];
        loop {
            match fill.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
    }
    let dst = m.path().join("x");
    let (out, _) = run_deadline(bin().arg("copy").arg(&src).arg(&dst), 20);
    assert_eq!(out.status.code(), Some(2));
    let want = format!("{}/f", dst.display());
    assert!(
        stderr(&out).lines().any(|l| l.contains(&want)),
        "an error names {want}*: {}",
        stderr(&out)
    );
    // Whatever made it is complete.
    if dst.is_dir() {
        for n in names_in(&dst) {
            let p = dst.join(OsStr::from_bytes(&n));
            let s = src.join(OsStr::from_bytes(&n));
            assert!(s.exists(), "no temporary left: {}", p.display());
            assert!(fs::read(&p).unwrap() == fs::read(&s).unwrap());
        }
    }
}

/// Runs `pagewise ARGS` with RLIMIT_NOFILE at `limit` (soft and hard: it cannot be raised).
fn with_nofile(limit: u32, args: &[&OsStr]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
        .arg(bin().get_program())
        .args(args);
    run(&mut cmd)
}

/// A tree of 4,000 small files copied, evicted and loaded under a hard limit of 128 open
/// files: the verbs size their batches of open files from the limit (CI machines have 1024
/// where this one has 20000; a copy of 20,000 files once failed there with EMFILE).
#[test]
fn verbs_fit_a_small_open_file_limit() {
    let t = tmp();
    let src = t.path().join("src");
    let mut files = Vec::new();
    for d in 0..40 {
        let dir = src.join(format!("d{d:02}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            let p = dir.join(format!("f{f:03}"));
            write_file(&p, 1 + (d * 100 + f) * 61 % 20_000);
            files.push(p);
        }
    }
    let dst = t.path().join("dst");
    let out = with_nofile(
        128,
        &[
            "copy".as_ref(),
            "-a".as_ref(),
            "-T".as_ref(),
            src.as_os_str(),
            dst.as_os_str(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("Too many open files"),
        "{err}"
    );
    for p in &files {
        let q = dst.join(p.strip_prefix(&src).unwrap());
        assert_eq!(fs::read(p).unwrap(), fs::read(&q).unwrap(), "{q:?}");
    }
    // Everything cached now (just read); evict and load under the same limit.
    let out = with_nofile(128, &["evict".as_ref(), dst.as_os_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("Too many open files"),
        "{err}"
    );
    let left: u64 = files
        .iter()
        .map(|p| cached(&dst.join(p.strip_prefix(&src).unwrap())))
        .sum();
    assert_eq!(left, 0, "evict under a small limit leaves nothing cached");
    let out = with_nofile(128, &["load".as_ref(), dst.as_os_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("Too many open files"),
        "{err}"
    );
    let pages: u64 = files
        .iter()
        .map(|p| fs::metadata(p).unwrap().len().div_ceil(PAGE))
        .sum();
    let loaded: u64 = files
        .iter()
        .map(|p| cached(&dst.join(p.strip_prefix(&src).unwrap())))
        .sum();
    assert_eq!(loaded, pages, "load under a small limit caches every page");
}
