//! Child processes of the end-to-end tests: output captured to files, deadlines (the
//! never-block rule), /proc lookups, killing leftovers, signals sent to pagewise, and a small
//! RLIMIT_NOFILE.

use super::*;
use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// An anonymous file on the build's filesystem to take a command's output: unlike a pipe, a
/// background process keeping it open cannot make the reader wait for it.
pub fn capture_file() -> File {
    tempfile::tempfile_in(tmp_root()).unwrap()
}

/// Everything written to `f` (a [`capture_file`]).
pub fn read_back(mut f: File) -> Vec<u8> {
    let mut v = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Spawns with stdout/stderr going to files (see `capture_file`).
pub fn spawn_captured(cmd: &mut Command) -> (Child, File, File) {
    let (o, e) = (capture_file(), capture_file());
    let child = cmd
        .stdout(o.try_clone().unwrap())
        .stderr(e.try_clone().unwrap())
        .spawn()
        .unwrap();
    (child, o, e)
}

/// Waits at most `secs` for the child; None when it is still running then.
pub fn wait_deadline(child: &mut Child, secs: f64) -> Option<ExitStatus> {
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

/// The output of a finished [`spawn_captured`] child, echoed (shown when a test fails).
pub fn collect(cmd: &Command, status: ExitStatus, o: File, e: File) -> Output {
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
pub fn run_deadline(cmd: &mut Command, secs: u64) -> (Output, Duration) {
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

/// The command name of `pid` (/proc/PID/comm).
pub fn comm(pid: i32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// The process's state letter from /proc/PID/stat (None: no such process).
pub fn proc_state(pid: i32) -> Option<char> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Gone, or dead and waiting to be reaped (a zombie holds no resources).
pub fn is_dead(pid: i32) -> bool {
    matches!(proc_state(pid), None | Some('Z') | Some('X'))
}

/// Waits at most `secs` for `pid` to be dead ([`is_dead`]).
pub fn wait_dead(pid: i32, secs: f64) -> bool {
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
pub fn children_of(pid: i32) -> Vec<i32> {
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
pub fn wait_child_named(pid: i32, name: &str) -> i32 {
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
pub fn pids_with_cmdline(argv: &[&str]) -> Vec<i32> {
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
pub struct Reaper(pub Vec<(i32, &'static str)>);

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
pub struct KillArgv(pub &'static [&'static str]);

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

/// Starts `pagewise ARGS -- sleep 30`, sends `sig` to pagewise once sleep runs, and returns
/// pagewise's exit status (it must end within 5 s) after checking that sleep is gone too.
pub fn signal_case(dir: &Path, args: &[&str], sig: i32) -> Output {
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

/// [`signal_case`] of `pagewise run` in a fresh temp dir; None where tracing cannot run (said
/// through [`require_root`]).
pub fn run_signal_case(sig: i32) -> Option<Output> {
    if !require_root("tracing (run)") {
        return None;
    }
    let t = tmp();
    Some(signal_case(t.path(), &["run"], sig))
}

/// What `pagewise run` and `record` of a command that leaves a background job running must
/// do: exit 0 at once (`took`, within 3 s) with a note that something was still running.
pub fn assert_returned_at_once_with_a_note(out: &Output, took: Duration) {
    assert_eq!(out.status.code(), Some(0));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(
        stderr(out).contains("still running when it exited"),
        "{}",
        stderr(out)
    );
}

/// Runs `pagewise ARGS` with RLIMIT_NOFILE at `limit` (soft and hard: it cannot be raised).
pub fn with_nofile(limit: u32, args: &[&OsStr]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
        .arg(bin().get_program())
        .args(args);
    run(&mut cmd)
}

/// A tiny program that runs its arguments as a child and writes the child's peak resident set
/// (wait4's ru_maxrss, KiB) to the file it is given first: `maxrss OUT PROG ARGS...`. A child
/// of this test process records the test process's own resident set as its peak (exec keeps
/// the high-water mark of the memory it replaces, here the forked copy of this process: 78 MiB
/// once every end-to-end test ran in one binary); a grandchild forked from this small program
/// does not. The child dies with it (PR_SET_PDEATHSIG). None without a C compiler.
fn maxrss_helper() -> Option<&'static Path> {
    static HELPER: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    HELPER
        .get_or_init(|| {
            let dir = tmp_root().join(format!("maxrss-{}", std::process::id()));
            fs::create_dir_all(&dir).ok()?;
            compile_c(
                &dir,
                "maxrss",
                r#"#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 3) return 125;
    pid_t pid = fork();
    if (pid < 0) return 125;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execvp(argv[2], argv + 2);
        _exit(127);
    }
    int status; struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return 125;
    FILE *f = fopen(argv[1], "w");
    if (!f) return 125;
    fprintf(f, "%ld\n", ru.ru_maxrss);
    fclose(f);
    if (WIFSIGNALED(status)) { signal(WTERMSIG(status), SIG_DFL); raise(WTERMSIG(status)); }
    return WEXITSTATUS(status);
}
"#,
                false,
            )
        })
        .as_deref()
}

/// `pagewise` run through [`maxrss_helper`], for [`run_measured`]: its peak resident set
/// is then its own.
pub fn measured_bin() -> Command {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(helper) = maxrss_helper() else {
        panic!("run_measured needs a C compiler (cc) for its helper: install-deps installs one");
    };
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = helper.with_file_name(format!("out-{n}"));
    let mut c = Command::new(helper);
    c.arg(out).arg(bin().get_program());
    c
}

/// Runs `cmd` (made by [`measured_bin`]) with a deadline of `secs` and its address space
/// limited to `max_as` bytes (so a runaway allocation fails in the child instead of pressing
/// on the machine); returns the output and pagewise's own peak resident set in bytes (wait4's
/// ru_maxrss, as [`maxrss_helper`] took it). Killed, and the test failed, past the deadline.
pub fn run_measured(cmd: &mut Command, secs: f64, max_as: u64) -> (Output, u64) {
    assert_eq!(
        Some(cmd.get_program()),
        maxrss_helper().map(Path::as_os_str),
        "run_measured takes a command made by measured_bin()"
    );
    let out_file = std::path::PathBuf::from(cmd.get_args().next().unwrap());
    let _ = fs::remove_file(&out_file);
    let (out, _) = run_limited(cmd, secs, max_as);
    let kib: u64 = fs::read_to_string(&out_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{cmd:?}: the maxrss helper wrote no figure"));
    assert!(
        kib > 0,
        "{cmd:?}: a peak resident set of 0 KiB is no measurement"
    );
    (out, kib * 1024)
}

/// [`run_measured`]'s deadline and address-space limit, the rusage of `cmd` itself.
fn run_limited(cmd: &mut Command, secs: f64, max_as: u64) -> (Output, u64) {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    // SAFETY: setrlimit(2) only, between fork and exec; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: max_as,
                rlim_max: max_as,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (child, o, e) = spawn_captured(cmd);
    let pid = child.id() as i32;
    let start = Instant::now();
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value to be filled in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4(2) of our own child, with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > Duration::from_secs_f64(secs) {
            // SAFETY: kill(2) and wait4(2) of the child we started and have not reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::wait4(pid, &mut status, 0, &mut usage);
            }
            let _ = collect(cmd, ExitStatus::from_raw(status), o, e);
            panic!(
                "{cmd:?} still running after {secs} s (peak RSS {} MiB)",
                usage.ru_maxrss / 1024
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = collect(cmd, ExitStatus::from_raw(status), o, e);
    (out, usage.ru_maxrss as u64 * 1024)
}
