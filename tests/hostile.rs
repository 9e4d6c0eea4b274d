//! pagewise as root beside users who can write where it writes, and under limits that make
//! its promises fail: the exporter's textfile directory (its temporaries, its lock, its state)
//! and a pidfile in a world-writable directory never write through a symlink or adopt another
//! user's file; `evict --cgroup` writes nothing outside a cgroup file system; figures that
//! cannot be measured are no samples, not zeros; a file truncated while `load` reads it and a
//! lock the process may not take are said, not reported as done.
//!
//! The "other user" is nobody (uid 65534, through setpriv). Every assertion reads the kernel's
//! view: file bytes, owners and existence, exit codes, live processes, cachestat.

mod common;
use common::*;
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
