//! `pagewise copy` against a destination someone else can write into, and sources whose size
//! is not their content: nothing is written, chmod'ed or removed outside the destination,
//! nothing of the user's is taken for a temporary, /proc and /sys files are copied as `read`
//! returns them, `-a` leaves exactly the source's ACL, and `-u` carries metadata-only changes.
//! A file is never copied over itself (through symlinks, hard links), a directory never into
//! itself (also through a bind mount), and a FIFO source is refused without blocking.
//! Every assertion reads the files back from the kernel (content, stat, xattrs, getfacl).

use crate::common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// The case: `dst/x` is a symlink to a directory outside, the source has a directory
/// `x`. Nothing outside changes: not the file the copy would write, not the file `--delete`
/// would remove; the symlink is refused as cp refuses a non-directory, and the rest is copied.
#[test]
fn a_symlink_inside_the_destination_is_never_followed() {
    let t = tmp();
    let (src, dst, out) = (
        t.path().join("src"),
        t.path().join("dst"),
        t.path().join("out"),
    );
    fs::create_dir_all(src.join("x")).unwrap();
    fs::create_dir_all(&dst).unwrap();
    fs::create_dir_all(&out).unwrap();
    fs::write(src.join("x/p"), b"new").unwrap();
    fs::write(src.join("top"), b"top").unwrap();
    fs::write(out.join("p"), b"OLD").unwrap();
    fs::write(out.join("v"), b"VICTIM").unwrap();
    fs::set_permissions(&out, fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink(&out, dst.join("x")).unwrap();
    for flags in ["-aT", "-auT", "-acT"] {
        let o = run(bin()
            .args(["copy", flags, "--delete", "--json"])
            .arg(&src)
            .arg(&dst));
        assert_eq!(o.status.code(), Some(2), "{flags}: a per-file error");
        let v = json(&o);
        let errs = v["errors"].to_string();
        assert!(
            errs.contains("dst/x"),
            "{flags}: the error names the path: {errs}"
        );
        assert_eq!(fs::read(out.join("p")).unwrap(), b"OLD", "{flags}");
        assert_eq!(fs::read(out.join("v")).unwrap(), b"VICTIM", "{flags}");
        assert_eq!(
            fs::metadata(&out).unwrap().mode() & 0o7777,
            0o750,
            "{flags}: no chmod through the link"
        );
        assert!(fs::symlink_metadata(dst.join("x"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(dst.join("top")).unwrap(), b"top", "{flags}");
    }
}

/// Symlinks deeper in: a file's name in the destination is a symlink to a file outside (it
/// is replaced by the copy, the outside file keeps its bytes and mode, also under -c and -u
/// with metadata to bring over), and a directory planted as a symlink after the first copy
/// is never entered by `--delete`.
#[test]
fn planted_file_symlinks_are_replaced_and_their_targets_untouched() {
    let t = tmp();
    let (src, dst, out) = (
        t.path().join("src"),
        t.path().join("dst"),
        t.path().join("out"),
    );
    fs::create_dir_all(src.join("d")).unwrap();
    fs::create_dir_all(&out).unwrap();
    fs::write(src.join("d/f"), b"source data").unwrap();
    fs::write(src.join("d/g"), b"gg").unwrap();
    assert!(run(bin().args(["copy", "-aT"]).arg(&src).arg(&dst))
        .status
        .success());
    // Same size and time as the source: -u and -c would leave content, and look at metadata.
    fs::write(out.join("f"), b"other data!").unwrap();
    fs::set_permissions(out.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(dst.join("d/f")).unwrap();
    std::os::unix::fs::symlink(out.join("f"), dst.join("d/f")).unwrap();
    fs::set_permissions(src.join("d/f"), fs::Permissions::from_mode(0o755)).unwrap();
    for flags in ["-acT", "-auT", "-aT"] {
        let o = run(bin().args(["copy", flags]).arg(&src).arg(&dst));
        assert!(o.status.success(), "{flags}");
        assert_eq!(fs::read(out.join("f")).unwrap(), b"other data!", "{flags}");
        assert_eq!(fs::metadata(out.join("f")).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(fs::read(dst.join("d/f")).unwrap(), b"source data");
        assert!(fs::symlink_metadata(dst.join("d/f")).unwrap().is_file());
        fs::remove_file(dst.join("d/f")).unwrap();
        std::os::unix::fs::symlink(out.join("f"), dst.join("d/f")).unwrap();
    }
    // The directory d swapped for a link to out: --delete removes nothing there.
    fs::write(out.join("stale"), b"keep me").unwrap();
    fs::remove_dir_all(dst.join("d")).unwrap();
    std::os::unix::fs::symlink(&out, dst.join("d")).unwrap();
    let o = run(bin().args(["copy", "-auT", "--delete"]).arg(&src).arg(&dst));
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(fs::read(out.join("stale")).unwrap(), b"keep me");
    assert_eq!(fs::read(out.join("f")).unwrap(), b"other data!");
}

/// A pid that ran and is gone (a child reaped).
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// A user's file named like a temporary of a dead pagewise process is the user's: no run
/// removes it or counts it (with or without -u, --delete of a source that has it, -n), while a
/// real leftover temporary — marked by the copy that made it — is removed.
#[test]
fn files_that_merely_look_like_temporaries_are_left_alone() {
    let t = tmp();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    assert!(run(bin().args(["copy", "-aT"]).arg(&src).arg(&dst))
        .status
        .success());
    let name = format!(".a.pagewise-{}-0.tmp", dead_pid());
    fs::write(dst.join(&name), b"the user's own file").unwrap();
    fs::write(src.join(&name), b"the user's own file").unwrap();
    for flags in [
        vec!["-auT"],
        vec!["-aT"],
        vec!["-n", "-aT"],
        vec!["-auT", "--delete"],
    ] {
        let o = run(bin()
            .arg("copy")
            .args(&flags)
            .arg("--json")
            .arg(&src)
            .arg(&dst));
        assert!(o.status.success(), "{flags:?}");
        assert_eq!(json(&o)["stale_temporaries_removed"], 0, "{flags:?}");
        assert_eq!(
            fs::read(dst.join(&name)).unwrap(),
            b"the user's own file",
            "{flags:?}"
        );
    }
    // A temporary pagewise itself made and left (its process killed): marked, so removed.
    let leftover = format!(".b.pagewise-{}-3.tmp", dead_pid());
    fs::write(dst.join(&leftover), b"half").unwrap();
    let marked = Command::new("setfattr")
        .args(["-n", "user.pagewise.temporary", "-v", "1"])
        .arg(dst.join(&leftover))
        .status();
    if !require(
        marked.is_ok_and(|s| s.success()),
        "setfattr with user xattrs (apt package attr)",
    ) {
        return;
    }
    let o = run(bin().args(["copy", "-auT", "--json"]).args([&src, &dst]));
    assert_eq!(json(&o)["stale_temporaries_removed"], 1);
    assert!(!dst.join(&leftover).exists());
    assert!(dst.join(&name).exists());
}

/// /proc files say 0 bytes in stat, sysfs attributes 4096: the copy holds what `read`
/// returns, as `cat` shows it, not an empty or NUL-padded file.
#[test]
fn proc_and_sys_files_are_copied_as_read_returns_them() {
    let t = tmp();
    let sources = [
        "/proc/self/mounts",
        "/proc/version",
        "/proc/cpuinfo",
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/devices/system/cpu/online",
    ];
    for (i, s) in sources.iter().enumerate() {
        if !require(Path::new(s).exists(), &format!("{s} on this machine")) {
            continue;
        }
        let dst = t.path().join(format!("c{i}"));
        let o = run(bin().args(["copy", s]).arg(&dst));
        assert!(o.status.success(), "{s}");
        let want = Command::new("cat").arg(s).output().unwrap().stdout;
        let got = fs::read(&dst).unwrap();
        assert!(!got.is_empty(), "{s}: empty copy");
        assert!(!got.contains(&0), "{s}: NUL padding");
        if !s.contains("self") {
            assert_eq!(got, want, "{s}");
        }
    }
}

fn getfacl(p: &Path) -> String {
    let o = Command::new("getfacl")
        .args(["-c", "-p"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A destination directory with a default ACL: new and replaced files and directories of
/// `copy -a` carry exactly the source's ACL (none here), not the inherited entries.
#[test]
fn archive_leaves_exactly_the_sources_acl_under_a_default_acl() {
    if !require(
        Command::new("setfacl").arg("--version").output().is_ok(),
        "setfacl (apt package acl)",
    ) {
        return;
    }
    let t = tmp();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    fs::write(src.join("sub/g"), b"more").unwrap();
    fs::set_permissions(src.join("f"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::create_dir_all(&dst).unwrap();
    let st = Command::new("setfacl")
        .args(["-d", "-m", "u:65534:rwx,g::rwx,o::rwx"])
        .arg(&dst)
        .status()
        .unwrap();
    assert!(st.success());
    let plain = |p: &Path| {
        let acl = getfacl(p);
        !acl.lines()
            .any(|l| l.starts_with("user:65534") || l.starts_with("default:"))
    };
    for round in 0..2 {
        if round == 1 {
            fs::write(src.join("f"), b"changed").unwrap();
        }
        let o = run(bin().args(["copy", "-a"]).arg(&src).arg(&dst));
        assert!(o.status.success());
        for p in ["src/f", "src/sub", "src/sub/g"] {
            let d = dst.join(p);
            assert!(plain(&d), "round {round}: {p}: {}", getfacl(&d));
            let s = t.path().join(p);
            assert_eq!(
                fs::metadata(&d).unwrap().mode(),
                fs::metadata(&s).unwrap().mode(),
                "{p}"
            );
        }
    }
}

/// `-au` after a metadata-only change (mode, owner, xattr, ACL, mtime with the same size
/// and content length) brings it over, lists it under -i as `metadata`, counts it, and a
/// further run finds nothing.
#[test]
fn update_carries_metadata_only_changes() {
    let t = tmp();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    for n in ["m", "o", "x", "u"] {
        fs::write(src.join(n), b"same").unwrap();
    }
    assert!(run(bin().args(["copy", "-aT"]).arg(&src).arg(&dst))
        .status
        .success());
    fs::set_permissions(src.join("m"), fs::Permissions::from_mode(0o600)).unwrap();
    let root = pagewise_core::sys::euid() == 0;
    if root {
        std::os::unix::fs::chown(src.join("o"), Some(65534), Some(65534)).unwrap();
    }
    let xattr = Command::new("setfattr")
        .args(["-n", "user.tag", "-v", "blue"])
        .arg(src.join("x"))
        .status()
        .is_ok_and(|s| s.success());
    let xattr = require(xattr, "setfattr with user xattrs (apt package attr)") && xattr;
    let before = fs::metadata(dst.join("m")).unwrap().mode();
    let o = run(bin()
        .args(["copy", "-auT", "-i", "--dry-run"])
        .arg(&src)
        .arg(&dst));
    assert!(String::from_utf8_lossy(&o.stdout).contains("metadata"));
    assert_eq!(
        fs::metadata(dst.join("m")).unwrap().mode(),
        before,
        "a dry run changes nothing"
    );
    let o = run(bin().args(["copy", "-auT", "-i"]).arg(&src).arg(&dst));
    assert!(o.status.success());
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        listed.contains("metadata") && listed.contains("dst/m"),
        "{listed}"
    );
    assert!(!listed.contains("dst/u"), "{listed}");
    assert_eq!(fs::metadata(dst.join("m")).unwrap().mode() & 0o7777, 0o600);
    if root {
        let m = fs::metadata(dst.join("o")).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
    }
    if xattr {
        let g = Command::new("getfattr")
            .args(["--only-values", "-n", "user.tag"])
            .arg(dst.join("x"))
            .output()
            .unwrap();
        assert_eq!(g.stdout, b"blue");
    }
    let again = run(bin().args(["copy", "-auT", "--json"]).arg(&src).arg(&dst));
    let v = json(&again);
    assert_eq!(v["metadata_updated"], 0, "{v}");
    assert_eq!(v["skipped"], 4, "{v}");
}

/// A dry run's JSON counts what a copy would do; `-n` is a dry run (as in rsync and evict),
/// cp's no-clobber is `--no-clobber`.
#[test]
fn dry_run_counts_and_n_is_dry_run() {
    let t = tmp();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    fs::create_dir_all(src.join("d")).unwrap();
    for i in 0..5 {
        fs::write(src.join(format!("d/f{i}")), vec![b'x'; 1000]).unwrap();
    }
    for flag in ["--dry-run", "-n"] {
        let o = run(bin()
            .args(["copy", "-aT", flag, "--json"])
            .arg(&src)
            .arg(&dst));
        assert!(o.status.success());
        let v = json(&o);
        assert_eq!(v["files"], 5, "{flag}: {v}");
        assert_eq!(v["bytes"], 5000, "{flag}: {v}");
        assert_eq!(v["dry_run"], true);
        assert!(!dst.exists(), "{flag} changed something");
    }
}

/// Re-running `copy -au SRC DST` (without -T) after a copy of SRC's contents into DST nests a
/// second copy as DST/SRC: it goes on (that is what was asked) but says so.
#[test]
fn nesting_a_second_copy_is_warned_about() {
    let t = tmp();
    let (src, dst) = (t.path().join("data"), t.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    fs::write(src.join("b"), b"b").unwrap();
    assert!(run(bin().args(["copy", "-aT"]).arg(&src).arg(&dst))
        .status
        .success());
    let o = run(bin().args(["copy", "-au"]).arg(&src).arg(&dst));
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("-T"), "{err}");
    assert!(dst.join("data/a").exists());
    // A first copy into an empty directory says nothing.
    let fresh = t.path().join("fresh");
    fs::create_dir_all(&fresh).unwrap();
    let o = run(bin().args(["copy", "-au"]).arg(&src).arg(&fresh));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("-T"));
}

/// Sizes that cannot be allocated are refused with the flag's name, not an abort.
#[test]
fn impossible_sizes_are_refused_not_aborted() {
    let t = tmp();
    fs::write(t.path().join("f"), b"x").unwrap();
    for args in [
        vec!["--chunk", "64G"],
        vec!["--chunk", "16E"],
        vec!["--depth", "100000000"],
        vec!["--threads", "100000000"],
    ] {
        let o = run(bin()
            .arg("copy")
            .args(&args)
            .arg(t.path().join("f"))
            .arg(t.path().join("g")));
        assert!(o.status.code().is_some(), "{args:?}: killed by a signal");
        assert_ne!(o.status.code(), Some(0), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(args[0]), "{args:?}: {err}");
        assert!(!t.path().join("g").exists());
    }
}

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
