//! End-to-end tests of `pagewise copy`'s options, as cp and rsync define them: where the
//! destination lands (-t, -T, `.`), modes without -p, -a of every file type (rsync finds no
//! difference), dereference flags, --checksum, --dry-run, --json-lines, --delete and -n.

use crate::common::*;
use pagewise_core::sys;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn cp_rules_for_destinations() {
    let t = tmp();
    let a = t.path().join("a");
    let b = t.path().join("b");
    write_file(&a, 10);
    write_file(&b, 20);
    // Several sources need a directory.
    let out = run(bin()
        .arg("copy")
        .arg(&a)
        .arg(&b)
        .arg(t.path().join("nodir")));
    assert_eq!(out.status.code(), Some(1));
    let d = t.path().join("d");
    fs::create_dir(&d).unwrap();
    assert!(run(bin().arg("copy").arg(&a).arg(&b).arg(&d))
        .status
        .success());
    assert!(same(&a, &d.join("a")) && same(&b, &d.join("b")));
    // cp -r / -R: taken (directories are always copied with what they hold).
    for flag in ["-r", "-R"] {
        let to = t.path().join(format!("r{flag}"));
        assert!(run(bin().args(["copy", flag]).arg(&d).arg(&to))
            .status
            .success());
        assert!(same(&a, &to.join("a")) && same(&b, &to.join("b")));
    }
    // Overwrite an existing file atomically.
    assert!(run(bin().arg("copy").arg(&b).arg(&a)).status.success());
    assert!(same(&a, &b));
    // Missing source: exit 2, named.
    let out = run(bin().arg("copy").arg(t.path().join("missing")).arg(&d));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing: lstat failed"));
    // Into itself.
    let out = run(bin().arg("copy").arg(&d).arg(d.join("inner")));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("into itself"));
}

/// `copy -u` is cp -u: a destination file newer than its source is left even when its size
/// differs (it was the quick check alone, which replaced it); an older one is replaced, a
/// missing one made, an equal one left. Compared with GNU cp -u on the same two trees.
#[test]
fn update_never_replaces_a_newer_file_as_cp_u_does() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    let touch = |p: &Path, when: &str| {
        let ok = Command::new("touch")
            .args(["-m", "-d", when])
            .arg(p)
            .status();
        assert!(ok.unwrap().success());
    };
    for (name, size) in [("older", 10), ("newer", 20), ("same", 30), ("missing", 40)] {
        write_file(&src.join(name), size);
        touch(&src.join(name), "2024-01-02 03:04:05");
    }
    let mut outputs = Vec::new();
    for tool in ["cp", "pagewise"] {
        let dst = t.path().join(format!("dst-{tool}"));
        fs::create_dir(&dst).unwrap();
        for (name, size, when) in [
            ("older", 11, "2023-01-01"),
            ("newer", 21, "2025-01-01"),
            ("same", 30, "2024-01-02 03:04:05"),
        ] {
            fs::write(dst.join(name), vec![b'd'; size]).unwrap();
            touch(&dst.join(name), when);
        }
        let o = match tool {
            "cp" => run(Command::new("cp")
                .arg("-u")
                .arg(src.join("older"))
                .args([src.join("newer"), src.join("same"), src.join("missing")])
                .arg(&dst)),
            _ => run(bin().args(["copy", "-u"]).arg(src.join(".")).arg(&dst)),
        };
        assert!(o.status.success(), "{tool}: {}", stderr(&o));
        let tree: Vec<(String, Vec<u8>)> = ["older", "newer", "same", "missing"]
            .iter()
            .map(|n| (n.to_string(), fs::read(dst.join(n)).unwrap()))
            .collect();
        outputs.push(tree);
    }
    assert_eq!(outputs[0], outputs[1], "cp -u and copy -u differ");
    let got = &outputs[1];
    assert_eq!(
        got[0].1,
        fs::read(src.join("older")).unwrap(),
        "older: replaced"
    );
    assert_eq!(got[1].1, vec![b'd'; 21], "newer: left");
    assert_eq!(
        got[3].1,
        fs::read(src.join("missing")).unwrap(),
        "missing: made"
    );
}

/// A FIFO (or device) standing at the destination is not replaced by the copy.
#[test]
fn a_fifo_at_the_destination_is_refused_not_replaced() {
    let t = tmp();
    let a = t.path().join("a");
    write_file(&a, 1000);
    let fifo = mkfifo(&t.path().join("fifo"));
    for extra in [None, Some("--named-temp")] {
        let out = run(bin().arg("copy").args(extra).arg(&a).arg(&fifo));
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("FIFO"));
        use std::os::unix::fs::FileTypeExt;
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(leftovers(t.path()).is_empty());
    }
}

#[test]
fn without_preserve_mode_is_the_sources_less_umask_and_no_set_id_bits() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    let umask = fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
        .unwrap();
    for (name, mode) in [("a", 0o754), ("b", 0o4755), ("c", 0o400)] {
        let p = src.join(name);
        fs::write(&p, vec![7u8; 5000]).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    let dst = t.path().join("dst");
    assert!(run(bin().arg("copy").arg(&src).arg(&dst)).status.success());
    for (name, mode) in [("a", 0o754), ("b", 0o4755), ("c", 0o400)] {
        let m = fs::metadata(dst.join(name)).unwrap();
        assert_eq!(m.mode() & 0o7777, mode & 0o777 & !umask, "{name}");
        assert_eq!(fs::read(dst.join(name)).unwrap(), vec![7u8; 5000]);
    }
}

/// Every file type with -p: FIFO, socket and char device recreated (never opened), symlinks
/// (a dangling one too) with their own times, a directory's xattr and default ACL kept — rsync
/// -naHAXc --itemize-changes --specials --devices then finds nothing to change.
#[test]
fn preserve_keeps_special_files_symlink_times_and_directory_acls() {
    if !can_compare_with_rsync("mknod of a character device") {
        return;
    }
    let t = tmp();
    let (src, sub) = src_with_sub(t.path());
    sys::mknod(&src.join("fifo"), sys::NodeKind::Fifo, 0o640, 0).unwrap();
    sys::mknod(&src.join("sock"), sys::NodeKind::Socket, 0o600, 0).unwrap();
    // Device 1:3 as a source node only: nothing opens or writes it.
    let dev = libc::makedev(1, 3);
    sys::mknod(&src.join("chr"), sys::NodeKind::CharDevice, 0o600, dev).unwrap();
    std::os::unix::fs::symlink("data", src.join("lnk")).unwrap();
    std::os::unix::fs::symlink("nowhere", src.join("dangling")).unwrap();
    for p in ["lnk", "dangling", "fifo", "sock", "chr"] {
        sys::set_times_nofollow(&src.join(p), (1_500_000_000, 0), (1_600_000_000, 123)).unwrap();
    }
    tool(&["setfattr", "-n", "user.origin", "-v", "test"], &sub);
    tool(&["setfacl", "-d", "-m", "u:65534:rx"], &sub);
    let dst = t.path().join("dst");
    let out = run_copy(&["-p", "--json"], &src, &dst);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["specials"], 3, "{v}");
    let ft = |p: &str| fs::symlink_metadata(dst.join(p)).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(ft("fifo").file_type().is_fifo());
    assert!(ft("sock").file_type().is_socket());
    assert!(ft("chr").file_type().is_char_device());
    assert_eq!(ft("chr").rdev(), dev);
    assert_eq!(
        (ft("lnk").mtime(), ft("lnk").mtime_nsec()),
        (1_600_000_000, 123)
    );
    assert_eq!(
        rsync_differences(&src, &dst),
        "",
        "rsync finds differences after copy -p"
    );
    assert!(leftovers(&dst).is_empty());
}

/// cp's forms for re-running: `-T` and `SRC/.` copy into the same place the second time
/// (a plain second `copy SRC DST` lands in DST/SRC, as cp's does).
#[test]
fn no_target_directory_and_dot_land_in_the_same_place_again() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    write_file(&src.join("a"), 5000);
    let dst = t.path().join("dst");
    for _ in 0..2 {
        let out = run_copy(&["-aT"], &src, &dst);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert!(same(&src.join("a"), &dst.join("a")));
    assert!(!dst.join("src").exists(), "-T never copies into DST/SRC");
    let out = run(bin().args(["copy", "-T"]).arg(&src).arg(&src).arg(&dst));
    assert_eq!(out.status.code(), Some(1), "-T takes one source");
    let into = t.path().join("into");
    fs::create_dir(&into).unwrap();
    write_file(&into.join("kept"), 10);
    let out = run(bin().arg("copy").arg(src.join(".")).arg(&into));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        same(&src.join("a"), &into.join("a")),
        "SRC/. copies the contents"
    );
    assert!(into.join("kept").exists() && !into.join("src").exists());
}

/// cp's dereference flags: -P (default) keeps symlinks, -H follows the named source only, -L
/// follows all of them and stops at a symlink loop with an error instead of copying forever.
#[test]
fn dereference_flags_follow_as_cp_does() {
    let t = tmp();
    let real = t.path().join("real");
    fs::create_dir(&real).unwrap();
    write_file(&real.join("f"), 3000);
    std::os::unix::fs::symlink("f", real.join("lf")).unwrap();
    let top = t.path().join("top");
    std::os::unix::fs::symlink(&real, &top).unwrap();
    let kind = |p: &Path| fs::symlink_metadata(p).unwrap().file_type();
    let out = run(bin().arg("copy").arg(&top).arg(t.path().join("p")));
    assert!(out.status.success());
    assert!(
        kind(&t.path().join("p")).is_symlink(),
        "-P: the link itself"
    );
    let out = run(bin().args(["copy", "-H"]).arg(&top).arg(t.path().join("h")));
    assert!(out.status.success());
    assert!(kind(&t.path().join("h")).is_dir());
    assert!(
        kind(&t.path().join("h/lf")).is_symlink(),
        "-H: inner links kept"
    );
    let out = run(bin().args(["copy", "-L"]).arg(&top).arg(t.path().join("l")));
    assert!(out.status.success());
    assert!(
        kind(&t.path().join("l/lf")).is_file(),
        "-L: inner links followed"
    );
    assert!(same(&real.join("f"), &t.path().join("l/lf")));
    std::os::unix::fs::symlink("..", real.join("up")).unwrap();
    let (out, took) = {
        let start = std::time::Instant::now();
        let o = run(bin()
            .args(["copy", "-L"])
            .arg(&real)
            .arg(t.path().join("loop")));
        (o, start.elapsed())
    };
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("symlink loop"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < Duration::from_secs(20));
}

/// Every file type in one tree — regular, empty, sparse, hard links, symlinks (one
/// dangling), FIFO, socket, character device, names with a newline and with invalid UTF-8,
/// an xattr, an ACL, a default ACL, a file capability —: after `copy -a`, rsync finds nothing
/// to change, and the kernel shows the sparse file sparse and the capability in place.
#[test]
fn archive_copy_of_every_file_type_leaves_nothing_for_rsync() {
    if !can_compare_with_rsync("mknod of a character device, security.capability") {
        return;
    }
    let t = tmp();
    let (src, sub) = src_with_sub(t.path());
    write_file(&src.join("empty"), 0);
    {
        let f = File::create(src.join("sparse")).unwrap();
        f.set_len(8 << 20).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&[7u8; 4096], 4 << 20).unwrap();
    }
    write_file(&src.join("h1"), 5000);
    fs::hard_link(src.join("h1"), sub.join("h2")).unwrap();
    std::os::unix::fs::symlink("data", src.join("lnk")).unwrap();
    std::os::unix::fs::symlink("nowhere", sub.join("dangling")).unwrap();
    sys::mknod(&src.join("fifo"), sys::NodeKind::Fifo, 0o640, 0).unwrap();
    sys::mknod(&src.join("sock"), sys::NodeKind::Socket, 0o600, 0).unwrap();
    let dev = libc::makedev(1, 3);
    sys::mknod(&sub.join("chr"), sys::NodeKind::CharDevice, 0o600, dev).unwrap();
    write_file(&src.join("new\nline"), 300);
    write_file(&src.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), 301);
    tool(
        &["setfattr", "-n", "user.origin", "-v", "test"],
        &src.join("data"),
    );
    tool(&["setfacl", "-m", "u:65534:r"], &src.join("data"));
    tool(&["setfacl", "-d", "-m", "u:65534:rx"], &sub);
    // cap_net_raw+ep as the kernel stores it (VFS_CAP_REVISION_2, effective).
    let cap = "0x0100000200200000000000000000000000000000";
    tool(
        &["setfattr", "-n", "security.capability", "-v", cap],
        &src.join("h1"),
    );
    let dst = t.path().join("dst");
    let out = run_copy(&["-a", "--json"], &src, &dst);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rsync_differences(&src, &dst), "", "rsync finds differences");
    let sparse = fs::metadata(dst.join("sparse")).unwrap();
    assert_eq!(sparse.len(), 8 << 20);
    assert!(sparse.blocks() * 512 < 1 << 20, "the copy stays sparse");
    assert_eq!(
        fs::metadata(dst.join("h1")).unwrap().ino(),
        fs::metadata(dst.join("sub/h2")).unwrap().ino()
    );
    let getcap = |p: &Path| {
        Command::new("getfattr")
            .args(["-e", "hex", "-n", "security.capability"])
            .arg(p)
            .output()
            .unwrap()
            .stdout
    };
    let got = String::from_utf8_lossy(&getcap(&dst.join("h1"))).into_owned();
    assert!(got.contains(&format!("security.capability={cap}")), "{got}");
    assert!(stray_temporaries(&dst).is_empty());
    // Run again with -u: every entry, hard link included, is up to date and left alone.
    let out = run_copy(&["-a", "-u", "-T", "--json"], &src, &dst);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["created"].as_u64(), v["updated"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["skipped"], 12, "{v}");
    assert_eq!(rsync_differences(&src, &dst), "");
}

/// --checksum finds a same-size, same-time file whose content differs (which -u leaves), and
/// reads both sides without caching them; --dry-run lists what would change and changes
/// nothing; --json-lines streams one line per entry, then the summary.
#[test]
fn checksum_dry_run_and_json_lines() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    write_file(&src.join("a"), 3 << 20);
    write_file(&src.join("d/b"), 5000);
    write_file(&src.join("gone-soon"), 10);
    let dst = t.path().join("dst");
    assert!(run_copy(&["-aT"], &src, &dst).status.success());
    // Same size and mtime, other bytes: -u's quick check cannot see it.
    let mut bytes = fs::read(dst.join("a")).unwrap();
    bytes[1 << 20] ^= 0xff;
    fs::write(dst.join("a"), &bytes).unwrap();
    let mtime = fs::metadata(src.join("a")).unwrap().modified().unwrap();
    File::options()
        .write(true)
        .open(dst.join("a"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    fs::remove_file(src.join("gone-soon")).unwrap();
    write_file(&src.join("new"), 100);
    let out = run_copy(&["-auT", "--json"], &src, &dst);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["created"], 1, "only the new file: {v}");
    assert!(!same(&src.join("a"), &dst.join("a")));

    // Dry run: the list, and nothing touched.
    let before = tree_listing(&dst);
    let out = run_copy(&["-aT", "--checksum", "--delete", "--dry-run"], &src, &dst);
    assert!(out.status.success(), "{}", stderr(&out));
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let a = format!("updated  file     {}\n", dst.join("a").display());
    let gone = format!("deleted  file     {}\n", dst.join("gone-soon").display());
    assert!(list.contains(&a) && list.contains(&gone), "{list}");
    assert_eq!(
        list.lines().count(),
        2,
        "only what changes is listed: {list}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("dry run, nothing changed"));
    assert_eq!(tree_listing(&dst), before, "a dry run changes nothing");
    assert!(!same(&src.join("a"), &dst.join("a")));

    // --checksum for real, both sides cold before: they stay cold.
    let both_sides = [
        src.join("a"),
        dst.join("a"),
        src.join("d/b"),
        dst.join("d/b"),
    ];
    for p in &both_sides {
        evict(p);
    }
    let out = run_copy(
        &["-aT", "--checksum", "--delete", "--json-lines"],
        &src,
        &dst,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for p in &both_sides {
        assert_eq!(cached(p), 0, "{} read without caching", p.display());
    }
    assert!(same(&src.join("a"), &dst.join("a")));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let action = |path: &Path| {
        lines
            .iter()
            .find(|l| l["type"] == "entry" && l["path"] == path.to_str().unwrap())
            .map(|l| l["action"].as_str().unwrap().to_string())
    };
    assert_eq!(action(&dst.join("a")).as_deref(), Some("updated"));
    assert_eq!(action(&dst.join("d/b")).as_deref(), Some("skipped"));
    assert_eq!(action(&dst.join("gone-soon")).as_deref(), Some("deleted"));
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "summary");
    assert_eq!(
        (last["updated"].as_u64(), last["deleted"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(rsync_differences(&src, &dst), "");
}

/// --delete removes what the source no longer has (files and whole directories), only inside
/// the directories the copy enters and only when asked; -n never replaces.
#[test]
fn delete_removes_what_the_source_lost_and_no_clobber_keeps() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("keep")).unwrap();
    write_file(&src.join("a"), 100);
    write_file(&src.join("keep/b"), 100);
    let dst = t.path().join("dst");
    assert!(run_copy(&["-aT"], &src, &dst).status.success());
    fs::create_dir_all(dst.join("old/deep")).unwrap();
    write_file(&dst.join("old/deep/x"), 10);
    write_file(&dst.join("keep/stale"), 10);
    let out = run_copy(&["-auT"], &src, &dst);
    assert!(out.status.success());
    assert!(
        dst.join("old/deep/x").exists(),
        "nothing removed unless asked"
    );
    let out = run_copy(&["-auT", "--delete", "--json"], &src, &dst);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every entry removed counts, as rsync counts them: old/, old/deep/, old/deep/x, keep/stale.
    assert_eq!(v["deleted"], 4, "{v}");
    assert!(!dst.join("old").exists() && !dst.join("keep/stale").exists());
    assert!(dst.join("a").exists() && dst.join("keep/b").exists());
    fs::write(dst.join("a"), b"mine").unwrap();
    assert!(run_copy(&["--no-clobber", "-T"], &src, &dst)
        .status
        .success());
    assert_eq!(
        fs::read(dst.join("a")).unwrap(),
        b"mine",
        "-n keeps what exists"
    );
}
