//! pagewise as root beside users who can write where it writes, and under limits that make
//! its promises fail: the exporter's textfile directory (its temporaries, its lock, its state)
//! and a pidfile in a world-writable directory never write through a symlink or adopt another
//! user's file; `evict --cgroup` writes nothing outside a cgroup file system; figures that
//! cannot be measured are no samples, not zeros; a file truncated while `load` reads it and a
//! lock the process may not take are said, not reported as done.
//!
//! The "other user" is nobody (uid 65534, through setpriv). Every assertion reads the kernel's
//! view: file bytes, owners and existence, exit codes, live processes, cachestat.

use crate::common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `argv` as nobody (uid and gid 65534, no groups), checking it succeeded.
fn as_nobody_ok(argv: &[&std::ffi::OsStr]) {
    let ok = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(argv)
        .status()
        .unwrap()
        .success();
    assert!(ok, "as nobody: {argv:?}");
}

/// A symlink `link` -> `target`, made by nobody.
fn nobody_symlink(target: &Path, link: &Path) {
    as_nobody_ok(&["ln".as_ref(), "-s".as_ref(), target.as_ref(), link.as_ref()]);
    assert_eq!(fs::symlink_metadata(link).unwrap().uid(), 65534);
}

/// A world-writable directory owned by root (`mode`: 0o777 or 0o1777) that nobody can reach,
/// and beside it a root-only directory holding a root-only file `secret`.
struct SharedSetup {
    _t: tempfile::TempDir,
    shared: PathBuf,
    secret: PathBuf,
    /// A name in the root-only directory that does not exist (a planted link's target that
    /// root must never create).
    absent: PathBuf,
}

const SECRET: &[u8] = b"root only: must not change\n";

fn shared_setup(mode: u32) -> Option<SharedSetup> {
    if !require_root("planting files as another user (setpriv)") {
        return None;
    }
    let t = tmp();
    open_up_ancestors(t.path());
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let shared = t.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(mode)).unwrap();
    let private = t.path().join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let secret = private.join("secret");
    fs::write(&secret, SECRET).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    Some(SharedSetup {
        absent: private.join("created"),
        _t: t,
        shared,
        secret,
    })
}

impl SharedSetup {
    /// The root-only file and directory are as they were.
    fn assert_untouched(&self) {
        assert_eq!(
            String::from_utf8_lossy(&fs::read(&self.secret).unwrap()),
            String::from_utf8_lossy(SECRET),
            "the root-only file"
        );
        assert!(
            !self.absent.exists() && fs::symlink_metadata(&self.absent).is_err(),
            "{} was created through a planted symlink",
            self.absent.display()
        );
    }
}

/// `sh -c 'PLANT; exec pagewise ARGS'`: PLANT runs first with `$$` already the PID pagewise
/// will have (exec keeps it), so names that embed the PID can be planted before it starts.
fn with_pid_known(plant: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("{plant} && exec \"$0\" \"$@\""))
        .arg(bin().get_program())
        .args(args);
    run(&mut c)
}

/// A line of the exposition that names `name` with a value.
fn has_sample(text: &str, name: &str) -> bool {
    text.lines()
        .any(|l| l.starts_with(name) && !l.starts_with('#'))
}

/// Issue 1: the textfile directory's temporaries (`.pagewise.prom.PID`, `.pagewise.state.PID`)
/// planted as nobody's symlinks to a root-only file, in a 0777 and in a sticky 1777 directory:
/// the file keeps its bytes, no file is created through a dangling one, and the metrics are
/// written all the same.
#[test]
fn textfile_temporaries_planted_as_symlinks_are_never_written_through() {
    for mode in [0o777, 0o1777] {
        let Some(s) = shared_setup(mode) else { return };
        let data = s.shared.parent().unwrap().join("data");
        write_file(&data, 8192);
        // $$ is the PID pagewise will have; nobody plants both temporaries' names.
        let plant = format!(
            "setpriv --reuid=65534 --regid=65534 --clear-groups ln -s '{secret}' \"{dir}/.pagewise.prom.$$\" && \
             setpriv --reuid=65534 --regid=65534 --clear-groups ln -s '{absent}' \"{dir}/.pagewise.state.$$\"",
            secret = s.secret.display(),
            absent = s.absent.display(),
            dir = s.shared.display()
        );
        let out = with_pid_known(
            &plant,
            &[
                "exporter".as_ref(),
                "--no-cgroups".as_ref(),
                "--textfile".as_ref(),
                s.shared.as_os_str(),
                "--path".as_ref(),
                data.as_os_str(),
            ],
        );
        s.assert_untouched();
        assert_eq!(
            out.status.code(),
            Some(0),
            "mode {mode:o}: {}",
            stderr(&out)
        );
        let prom = s.shared.join("pagewise.prom");
        let m = fs::symlink_metadata(&prom).unwrap();
        assert!(m.is_file() && m.uid() == 0 && m.nlink() == 1, "{m:?}");
        let text = fs::read_to_string(&prom).unwrap();
        assert!(has_sample(&text, "pagewise_path_cached_bytes"), "{text}");
        assert!(has_sample(&text, "pagewise_refreshes_total"), "{text}");
        let state = fs::symlink_metadata(s.shared.join(".pagewise.state")).unwrap();
        assert!(state.is_file() && state.uid() == 0, "{state:?}");
    }
}

/// Issue 1: `.pagewise.lock` planted by nobody — a symlink to where a root-only file would be
/// created, or nobody's own regular file — is refused in one line naming it; nothing is
/// created or written, and no metrics are written under a lock that is not ours.
#[test]
fn a_planted_textfile_lock_is_refused_and_nothing_is_written_through_it() {
    for planted in ["symlink", "file"] {
        let Some(s) = shared_setup(0o777) else { return };
        let lock = s.shared.join(".pagewise.lock");
        match planted {
            "symlink" => nobody_symlink(&s.absent, &lock),
            _ => as_nobody_ok(&["touch".as_ref(), lock.as_os_str()]),
        }
        let out = run(bin()
            .args(["exporter", "--no-cgroups", "--textfile"])
            .arg(&s.shared)
            .arg("--path")
            .arg(&s.secret));
        s.assert_untouched();
        assert_eq!(out.status.code(), Some(1), "{planted}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(&lock.display().to_string()) && err.contains("refusing to use it"),
            "{planted}: {err}"
        );
        assert!(!s.shared.join("pagewise.prom").exists(), "{planted}");
        // What nobody planted is still nobody's and still what it was.
        let m = fs::symlink_metadata(&lock).unwrap();
        assert_eq!(m.uid(), 65534);
        assert_eq!(m.is_symlink(), planted == "symlink");
    }
}

/// Files nobody may read but cannot measure: root's, mode 0644 (cachestat refuses a file that
/// is neither yours nor writable, and mincore says such files are wholly cached), one of them
/// cached. Returns the temp dir and the directory holding them.
fn unmeasurable_tree() -> Option<(tempfile::TempDir, PathBuf)> {
    if !require_root("switching to nobody (setpriv)") {
        return None;
    }
    let t = tmp();
    open_up_ancestors(t.path());
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let d = t.path().join("data");
    fs::create_dir(&d).unwrap();
    for i in 0..3 {
        let f = d.join(format!("f{i}"));
        write_file(&f, 64 << 10);
        fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    }
    // f0 is cached for certain: a 0 figure would be wrong, not just unknown.
    fs::read(d.join("f0")).unwrap();
    Some((t, d))
}

/// The samples of family `name` (its lines that are not comments).
fn samples_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(['{', ' ']))
        })
        .collect()
}

/// What every written or served exposition of the unmeasurable tree must say: the files are
/// counted, all of them unknown, and no cached (or dirty, writeback, evicted) sample at all.
fn assert_unknown_is_no_sample(text: &str) {
    assert_eq!(samples_of(text, "pagewise_path_files").len(), 1, "{text}");
    let unknown = samples_of(text, "pagewise_path_unknown_files");
    assert!(
        unknown.len() == 1 && unknown[0].ends_with(" 3"),
        "{unknown:?}\n{text}"
    );
    for fam in [
        "pagewise_path_cached_bytes",
        "pagewise_path_dirty_bytes",
        "pagewise_path_writeback_bytes",
        "pagewise_path_evicted_bytes",
        "pagewise_path_recently_evicted_bytes",
        "pagewise_file_cached_bytes",
    ] {
        assert_eq!(samples_of(text, fam), Vec::<&str>::new(), "{fam}:\n{text}");
    }
}

/// The one stderr line that says why the figures are missing.
fn assert_says_why(err: &str) {
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("unknown")).collect();
    assert_eq!(lines.len(), 1, "one line saying why: {err}");
    assert!(
        lines[0].contains("3 of 3 files") && lines[0].contains("cachestat"),
        "{}",
        lines[0]
    );
}

/// Issue 2: `exporter --once` and `--textfile` as a user who cannot measure the files: no
/// `pagewise_path_cached_bytes 0` beside `pagewise_path_unknown_files 3`, one line on stderr
/// saying why, and (issue 44) exit status 2: a figure was not given.
#[test]
fn once_and_textfile_leave_out_what_could_not_be_measured_and_say_why() {
    let Some((t, d)) = unmeasurable_tree() else {
        return;
    };
    let out = run(as_nobody()
        .args(["exporter", "--once", "--no-cgroups", "--top", "5", "--path"])
        .arg(&d));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_unknown_is_no_sample(&stdout(&out));
    assert_says_why(&stderr(&out));

    let tf = t.path().join("textfile");
    fs::create_dir(&tf).unwrap();
    std::os::unix::fs::chown(&tf, Some(65534), Some(65534)).unwrap();
    let out = run(as_nobody()
        .args(["exporter", "--no-cgroups", "--textfile"])
        .arg(&tf)
        .arg("--path")
        .arg(&d));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_unknown_is_no_sample(&fs::read_to_string(tf.join("pagewise.prom")).unwrap());
    assert_says_why(&stderr(&out));
}

/// Issue 2, served: the same exposition over HTTP (the renderer is shared), from an exporter
/// running as nobody; the reason is said once, not at every refresh.
#[test]
fn the_served_exposition_leaves_out_what_could_not_be_measured_and_says_why_once() {
    let Some((t, d)) = unmeasurable_tree() else {
        return;
    };
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let (_server, port) = crate::exporter_util::exporter_on(
        t.path(),
        &nobody,
        &[
            "--interval".as_ref(),
            "200ms".as_ref(),
            "--path".as_ref(),
            d.as_os_str(),
        ],
    );
    let refreshes = |text: &str| {
        samples_of(text, "pagewise_refreshes_total")
            .first()
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let text = crate::exporter_util::wait_for(30, "three refreshes", || {
        let (_, body) = crate::exporter_util::get(port, "/metrics", "text/plain")?;
        (refreshes(&body) >= 3).then_some(body)
    });
    assert_unknown_is_no_sample(&text);
    let (_, om) =
        crate::exporter_util::get(port, "/metrics", "application/openmetrics-text").unwrap();
    assert_unknown_is_no_sample(&om);
    assert_says_why(&fs::read_to_string(t.path().join("exporter.log")).unwrap());
}

/// Issue 3: `evict --cgroup DIR` where DIR is no cgroup file system — an ordinary directory and
/// a tmpfs — holding a `memory.stat` and a `memory.force_empty` that is a symlink to a file:
/// the file keeps its bytes, the exit code is non-zero, and one line names DIR and says what
/// it is. The real group beside it (beneath our own cgroup) is still reclaimed.
#[test]
fn evict_cgroup_writes_nothing_outside_a_cgroup_file_system() {
    if !require_root("a tmpfs mount") {
        return;
    }
    let t = tmp();
    let victim = t.path().join("victim");
    fs::write(&victim, b"precious\n").unwrap();
    let ordinary = t.path().join("fake");
    fs::create_dir(&ordinary).unwrap();
    let tmpfs = Mount::tmpfs("1M");
    for (dir, kind) in [(ordinary.as_path(), "ext2/3/4"), (tmpfs.path(), "tmpfs")] {
        fs::write(dir.join("memory.stat"), "cache 4096\ntotal_cache 4096\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("memory.force_empty")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("memory.reclaim")).unwrap();
        let out = run(bin().args(["evict", "--cgroup"]).arg(dir));
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n", "{kind}");
        assert_eq!(out.status.code(), Some(1), "{kind}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&dir.display().to_string()) && err.contains("not a cgroup file system"),
            "{err}"
        );
        // ext4 is what this machine's build directory is on; other file systems say theirs.
        if kind == "tmpfs" || fs_is_ext4(dir) {
            assert!(err.contains(kind), "{kind}: {err}");
        }
    }
    // A real group still works.
    let Some(cg) = ChildCgroup::new() else { return };
    let out = run(bin().args(["evict", "--cgroup"]).arg(&cg.dir));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// True when `dir` is on ext2/3/4 (stat -f).
fn fs_is_ext4(dir: &Path) -> bool {
    let out = Command::new("stat")
        .args(["-f", "-c", "%t"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "ef53"
}

/// Issue 4: `load --lock --daemon --pidfile P` started twice at the same moment, 20 times:
/// each time exactly one starter succeeds, exactly one daemon stays alive, and the pidfile
/// names it; the other starter exits 1 saying why. The daemons are stopped by PID.
#[test]
fn two_daemons_started_at_once_with_one_pidfile_leave_exactly_one() {
    if !require_root("mlock (CAP_IPC_LOCK)") {
        return;
    }
    let t = tmp();
    let f = t.path().join("data");
    write_file(&f, 1 << 20);
    let pidfile = t.path().join("lock.pid");
    let argv: Vec<std::ffi::OsString> = [
        "load".as_ref(),
        "--lock".as_ref(),
        "--daemon".as_ref(),
        "--pidfile".as_ref(),
        pidfile.as_os_str(),
        f.as_os_str(),
    ]
    .iter()
    .map(|s: &&std::ffi::OsStr| s.to_os_string())
    .collect();
    let exe = bin().get_program().to_os_string();
    let cmdline: Vec<String> = std::iter::once(&exe)
        .chain(&argv)
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let daemons = || {
        let c: Vec<&str> = cmdline.iter().map(String::as_str).collect();
        pids_with_cmdline(&c)
            .into_iter()
            .filter(|&p| !is_dead(p))
            .collect::<Vec<i32>>()
    };
    // Kills whatever daemons of this test are left, also when it fails.
    struct Stop<'a>(&'a dyn Fn() -> Vec<i32>);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            for pid in (self.0)() {
                let _ = pagewise_core::sys::kill(pid as u32, libc::SIGKILL);
                wait_dead(pid, 5.0);
            }
        }
    }
    let _stop = Stop(&daemons);
    for round in 0..20 {
        let barrier = std::sync::Barrier::new(2);
        let outs: Vec<std::process::Output> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        Command::new(&exe).args(&argv).output().unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        codes.sort();
        let errs: Vec<String> = outs.iter().map(stderr).collect();
        let alive = daemons();
        let named = fs::read_to_string(&pidfile).unwrap_or_default();
        assert_eq!(
            (codes.as_slice(), alive.len()),
            (&[Some(0), Some(1)][..], 1),
            "round {round}: daemons {alive:?}, pidfile {named:?}, stderr {errs:?}"
        );
        assert_eq!(named, format!("{}\n", alive[0]), "round {round}");
        let loser = stderr(outs.iter().find(|o| o.status.code() == Some(1)).unwrap());
        assert_eq!(loser.lines().count(), 1, "{loser}");
        assert!(
            loser.contains("lock.pid") && loser.contains("running"),
            "{loser}"
        );
        // Stop it by PID: SIGTERM ends the hold and removes the pidfile.
        pagewise_core::sys::kill(alive[0] as u32, libc::SIGTERM).unwrap();
        assert!(wait_dead(alive[0], 10.0), "round {round}: still running");
        let t0 = std::time::Instant::now();
        while pidfile.exists() && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!pidfile.exists(), "round {round}: the pidfile is removed");
    }
}

/// Issue 4: a pidfile in a world-writable directory where nobody planted the name first — a
/// symlink to where a root-only file would be created, or nobody's own file with a stale PID
/// in it — is refused in one line naming it; nothing is created or written through it.
#[test]
fn a_planted_pidfile_is_refused_and_never_written_through() {
    for planted in ["symlink", "file"] {
        let Some(s) = shared_setup(0o1777) else {
            return;
        };
        let f = s.shared.parent().unwrap().join("data");
        write_file(&f, 64 << 10);
        let pidfile = s.shared.join("lock.pid");
        match planted {
            "symlink" => nobody_symlink(&s.absent, &pidfile),
            _ => {
                let sh = format!("echo 999999 > '{}'", pidfile.display());
                as_nobody_ok(&["sh".as_ref(), "-c".as_ref(), sh.as_ref()]);
            }
        }
        let out = run(bin()
            .args(["load", "--lock", "--for", "1s", "--pidfile"])
            .arg(&pidfile)
            .arg(&f));
        s.assert_untouched();
        assert_eq!(out.status.code(), Some(1), "{planted}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("lock.pid") && err.contains("refusing to use it"),
            "{planted}: {err}"
        );
        let m = fs::symlink_metadata(&pidfile).unwrap();
        assert_eq!((m.uid(), m.is_symlink()), (65534, planted == "symlink"));
    }
}

/// True when process `pid` has `p` open (a link in /proc/PID/fd names it).
fn has_open(pid: u32, p: &Path) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|e| fs::read_link(e.path()).is_ok_and(|l| l == p))
}

/// Issue 5: a cold 512 MiB file truncated to 16 MiB by another process as soon as `load` has
/// it open (with and without `--lock`, up to 10 runs): never "Bad address"; the figures are
/// the kernel's after the fact (bytes, read and locked at most the new size, cached at most
/// what cachestat says); the change is said; and the exit code is 0 only when what is left
/// is all loaded.
#[test]
fn a_file_truncated_while_loading_is_said_and_its_figures_are_the_kernels() {
    if !require_root("mlock (CAP_IPC_LOCK)") {
        return;
    }
    let t = tmp();
    let p = t.path().join("big");
    let new_size: u64 = 16 << 20;
    let mut hit = 0;
    for round in 0..10 {
        cold_file(&p, 512 << 20);
        let mut cmd = bin();
        cmd.args(["load", "--json"]);
        if round % 2 == 1 {
            cmd.args(["--lock", "--for", "10ms"]);
        }
        cmd.arg(&p);
        let (mut child, o, e) = spawn_captured(&mut cmd);
        let start = std::time::Instant::now();
        while !has_open(child.id(), &p) && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::yield_now();
        }
        fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(new_size)
            .unwrap();
        // Still loading once the truncation is done (else this round proves nothing).
        let during = child.try_wait().unwrap().is_none();
        let st = wait_deadline(&mut child, 60.0).expect("load ends");
        let out = collect(&cmd, st, o, e);
        let (err, text) = (stderr(&out), stdout(&out));
        assert!(
            !err.contains("Bad address") && !text.contains("Bad address"),
            "round {round}: {err}{text}"
        );
        if !during {
            continue;
        }
        let j = json(&out);
        let total = &j["total"];
        let kernel = cached(&p) * PAGE;
        let figure = |k: &str| total[k].as_u64().unwrap();
        assert!(figure("bytes") <= new_size, "round {round}: {total}");
        assert!(figure("read_bytes") <= new_size, "round {round}: {total}");
        assert!(figure("locked_bytes") <= new_size, "round {round}: {total}");
        assert!(
            figure("cached_bytes_after") <= kernel,
            "round {round}: {total} but the kernel has {kernel} bytes cached"
        );
        let said = j["notices"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(j["errors"].as_array().into_iter().flatten())
            .any(|n| n.to_string().contains("shrank while it was loaded"));
        if said {
            hit += 1;
            // Exit 0 only when what is left is all cached (and, with --lock, locked).
            let complete = figure("cached_bytes_after") == new_size
                && (round % 2 == 0 || figure("locked_bytes") == new_size);
            assert_eq!(
                out.status.code(),
                Some(if complete { 0 } else { 2 }),
                "round {round}: {total}"
            );
        }
    }
    assert!(hit > 0, "the truncation never landed while a load ran");
}

/// `pagewise ARGS` as root without CAP_IPC_LOCK (dropped from the bounding set, so the exec
/// does not get it back) and with RLIMIT_MEMLOCK at 1 MiB.
fn without_ipc_lock(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut c = Command::new("setpriv");
    c.args([
        "--inh-caps=-ipc_lock",
        "--bounding-set=-ipc_lock",
        "sh",
        "-c",
    ])
    .arg("ulimit -l 1024 && exec \"$0\" \"$@\"")
    .arg(bin().get_program())
    .args(args);
    run(&mut c)
}

/// Issue 6: `load --lock` of a 64 MiB file without CAP_IPC_LOCK and with 1 MiB of
/// RLIMIT_MEMLOCK is refused before anything is read (the file stays cold), in one line that
/// names the need; of a tree (whose size is known only by walking it) no success figure (no
/// rate, no "cached now") is printed for the lock that failed, and the exit code is non-zero.
#[test]
fn a_lock_the_process_may_not_take_is_refused_or_said_never_reported_as_done() {
    if !require_root("dropping CAP_IPC_LOCK (setpriv)") {
        return;
    }
    let t = tmp();
    let d = t.path().join("tree");
    fs::create_dir(&d).unwrap();
    let p = d.join("data");
    cold_file(&p, 64 << 20);
    let out = without_ipc_lock(&["load".as_ref(), "--lock".as_ref(), p.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out), "", "no summary of a refused start");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("CAP_IPC_LOCK") && err.contains("RLIMIT_MEMLOCK") && err.contains("67108864"),
        "{err}"
    );
    assert_eq!(cached(&p), 0, "refused before anything was read");

    let out = without_ipc_lock(&[
        "load".as_ref(),
        "--lock".as_ref(),
        "--for".as_ref(),
        "1s".as_ref(),
        d.as_os_str(),
    ]);
    assert_ne!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        !text.contains("/s") && !text.contains("cached now"),
        "a success figure for a lock that failed: {text}"
    );
    assert!(
        text.contains("--lock failed: 0 B of 64.0 MiB locked"),
        "{text}"
    );
    assert!(stderr(&out).contains("RLIMIT_MEMLOCK"), "{}", stderr(&out));
}

/// Issue 7 (`run --report`, `record -o`: src/cli/out_file.rs): the report's name in a 0777
/// directory planted by nobody — a symlink to a root-only file, a symlink to where one would
/// be created, a FIFO of nobody's — is refused before the command runs, in one line naming it;
/// the root-only file keeps its bytes and nothing is created, written or blocked on. A symlink
/// of root's own there is still followed (the documented behaviour).
#[test]
fn a_planted_report_name_is_refused_before_the_command_runs() {
    for planted in ["symlink", "dangling", "fifo"] {
        let Some(s) = shared_setup(0o777) else { return };
        let report = s.shared.join("report.json");
        match planted {
            "symlink" => nobody_symlink(&s.secret, &report),
            "dangling" => nobody_symlink(&s.absent, &report),
            _ => as_nobody_ok(&["mkfifo".as_ref(), report.as_os_str()]),
        }
        let marker = s.shared.parent().unwrap().join("ran");
        let (out, _) = run_deadline(
            bin()
                .args(["run", "--report"])
                .arg(&report)
                .args(["--", "touch"])
                .arg(&marker),
            60,
        );
        s.assert_untouched();
        assert_eq!(out.status.code(), Some(1), "{planted}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("report.json") && err.contains("others can write to"),
            "{planted}: {err}"
        );
        assert!(!marker.exists(), "{planted}: the command ran");
        assert_eq!(fs::symlink_metadata(&report).unwrap().uid(), 65534);
    }
    // Root's own symlink in the same kind of directory: followed, the file it names replaced.
    let Some(s) = shared_setup(0o777) else { return };
    let mine = s.shared.parent().unwrap().join("mine.json");
    std::os::unix::fs::symlink(&mine, s.shared.join("report.json")).unwrap();
    let out = run(bin()
        .args(["run", "--report"])
        .arg(s.shared.join("report.json"))
        .args(["--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(json(&std::process::Output {
        stdout: fs::read(&mine).unwrap(),
        ..out
    })
    .is_object());
}

/// Issue 7 (`pagewise man DIR`, src/main.rs): a page's name planted by nobody in a 0777 DIR as
/// a symlink to a root-only file is replaced, never written through.
#[test]
fn man_pages_are_never_written_through_a_planted_symlink() {
    let Some(s) = shared_setup(0o777) else { return };
    nobody_symlink(&s.secret, &s.shared.join("pagewise.1"));
    nobody_symlink(&s.absent, &s.shared.join("pagewise-load.1"));
    let out = run(bin().arg("man").arg(&s.shared));
    s.assert_untouched();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for page in ["pagewise.1", "pagewise-load.1"] {
        let m = fs::symlink_metadata(s.shared.join(page)).unwrap();
        assert!(m.is_file() && m.uid() == 0, "{page}: {m:?}");
        assert!(fs::read_to_string(s.shared.join(page))
            .unwrap()
            .contains(".TH"));
    }
}

/// Issue 7 (bench/slowdisk, crates/slowdisk): a SLOWDISK_DIR another user made first (the
/// default is in /var/tmp) is refused before anything is created in it or run from it.
#[test]
fn the_slow_disk_refuses_a_state_directory_another_user_owns() {
    if !require_root("setting up as nobody") {
        return;
    }
    let t = tmp();
    open_up_ancestors(t.path());
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let state = t.path().join("state");
    fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    fs::set_permissions(&state, fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/slowdisk"))
            .args(["up"])
            .arg(t.path().join("mnt"))
            .env("SLOWDISK_DIR", &state),
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("owned by uid 65534") && stderr(&out).contains("must be root's"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        names_in(&state),
        Vec::<Vec<u8>>::new(),
        "nothing made in it"
    );
}
