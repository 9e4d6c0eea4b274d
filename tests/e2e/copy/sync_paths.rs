//! `pagewise sync`'s paths: sources merged into one destination as rsync merges them
//! (`SRC1/ SRC2/ DEST/`, `-R` paths that meet), and the paths the operator names walked as
//! rsync 3.5 walks them.

use super::sync::{rsync, run_in, sync, tree_differences};
use crate::common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Sources merged into one destination: the first source that has a name gives it, a
/// directory two sources have merges, and --delete removes only what no source has — a
/// second run changes nothing (before, each source's pass deleted the other's files and
/// they were copied again). The tree is rsync's.
#[test]
fn sources_merged_into_one_destination_as_rsync_s() {
    if !can_compare_with_rsync("merged sources are compared with rsync") {
        return;
    }
    let t = tmp();
    let base = t.path();
    for (p, text) in [
        ("s1/a", "1"),
        ("s1/same", "first"),
        ("s1/sub/c", "3"),
        ("s1/both-kinds/inside", "dir"),
        ("s2/b", "2"),
        ("s2/same", "second"),
        ("s2/sub/e", "4"),
        ("s2/both-kinds", "file"),
    ] {
        let p = base.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    for d in ["r", "p"] {
        let dst = base.join(d);
        fs::create_dir_all(&dst).unwrap();
        fs::write(dst.join("extra"), "gone").unwrap();
    }
    let run = |prog: Command, d: &str| {
        let out = prog_run(prog, base, &["-ai", "--delete", "s1/", "s2/", d]);
        assert!(out.status.success(), "{d}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(rsync(), "r/");
    run(sync(), "p/");
    assert_eq!(tree_differences(&base.join("r"), &base.join("p")), "");
    assert_eq!(fs::read_to_string(base.join("p/same")).unwrap(), "first");
    assert!(base.join("p/both-kinds/inside").exists() && base.join("p/sub/e").exists());
    assert!(!base.join("p/extra").exists());
    let again = run(sync(), "p/");
    assert!(
        !again.contains("deleting"),
        "a second run deletes nothing: {again}"
    );
    assert!(
        !again.contains(">f"),
        "a second run copies nothing: {again}"
    );
    // -R: a file named from another base lands inside a directory synced with --delete.
    fs::create_dir_all(base.join("x/sub")).unwrap();
    fs::write(base.join("x/sub/extra"), "kept").unwrap();
    let out = prog_run(
        sync(),
        base,
        &["-aiR", "--delete", "s1/./sub", "x/./sub/extra", "rel/"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = prog_run(
        sync(),
        base,
        &["-aiR", "--delete", "s1/./sub", "x/./sub/extra", "rel/"],
    );
    assert!(!stdout(&out).contains("deleting"), "{}", stdout(&out));
    assert!(base.join("rel/sub/extra").exists() && base.join("rel/sub/c").exists());
}

fn prog_run(mut prog: Command, dir: &Path, args: &[&str]) -> std::process::Output {
    prog.current_dir(dir).args(args).output().unwrap()
}

/// The paths the operator names are walked as rsync 3.5 walks them: a symlink another user
/// owns is not followed (a --link-dest left out with a warning; --backup-dir, --log-file
/// refused before anything is written), the operator's own is, and --insecure-links follows
/// any.
#[test]
fn operator_paths_follow_only_root_s_and_the_user_s_own_symlinks() {
    if !require_root("symlinks owned by another user") {
        return;
    }
    let t = tmp();
    let d = t.path();
    fs::create_dir_all(d.join("src")).unwrap();
    fs::create_dir_all(d.join("outside")).unwrap();
    fs::write(d.join("src/f"), "same\n").unwrap();
    fs::write(d.join("outside/f"), "same\n").unwrap();
    tool(&["touch", "-d", "2020-01-01"], &d.join("src/f"));
    tool(&["touch", "-d", "2020-01-01"], &d.join("outside/f"));
    std::os::unix::fs::symlink(d.join("outside"), d.join("planted")).unwrap();
    tool(&["chown", "-h", "65534:65534"], &d.join("planted"));
    std::os::unix::fs::symlink(d.join("outside"), d.join("mine")).unwrap();
    let ino = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
    let linked_out = |dst: &str| ino(&d.join(dst).join("f")) == ino(&d.join("outside/f"));

    let out = run_in(d, sync(), "-a --link-dest=../planted");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("owned by uid 65534"),
        "{}",
        stderr(&out)
    );
    assert!(!linked_out("dst"), "the planted link was followed");
    fs::remove_dir_all(d.join("dst")).unwrap();
    let out = run_in(d, sync(), "-a --link-dest=../mine");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(linked_out("dst"), "the operator's own link is followed");
    fs::remove_dir_all(d.join("dst")).unwrap();
    let out = run_in(d, sync(), "-a --insecure-links --link-dest=../planted");
    assert!(
        linked_out("dst"),
        "--insecure-links follows: {}",
        stderr(&out)
    );

    // A relative basis is taken from the destination directory, also when DEST is new and
    // named without a trailing slash (`sync -a . ../new`).
    let out = sync()
        .current_dir(d.join("src"))
        .args(["-a", "--link-dest=../outside", ".", "../new"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        linked_out("new"),
        "linked from ../outside, relative to ../new"
    );

    // Refused before acting: nothing written through the planted link, nothing copied.
    fs::remove_dir_all(d.join("dst")).unwrap();
    for flags in [
        "-a --backup-dir=../planted/bak",
        "-a --log-file=planted/log",
        "-a --files-from=planted/list",
    ] {
        let out = run_in(d, sync(), flags);
        assert_eq!(out.status.code(), Some(1), "{flags}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("planted"),
            "{flags}: {}",
            stderr(&out)
        );
        assert!(!d.join("dst").exists(), "{flags}");
    }
    let names: Vec<_> = fs::read_dir(d.join("outside")).unwrap().collect();
    assert_eq!(names.len(), 1, "only f is outside");
}

/// Where files are written before their names, as rsync's: `--temp-dir` (relative to the
/// destination; on its file system, else refused before acting), `--partial-dir` (a stopped
/// file kept there and resumed from there; the directory neither copied nor deleted, and
/// removed when empty), `--delay-updates` (finished files wait in `.~tmp~`, gone at the end).
#[test]
fn temp_dir_partial_dir_and_delay_updates_as_rsync_s() {
    let t = tmp();
    let d = t.path();
    fs::create_dir_all(d.join("src/sub")).unwrap();
    fs::create_dir_all(d.join("src/.part")).unwrap();
    fs::write(d.join("src/.part/x"), "never copied").unwrap();
    let size = 48usize << 20;
    write_file(&d.join("src/big"), size);
    fs::write(d.join("src/sub/a"), "a").unwrap();
    fs::create_dir_all(d.join("tmpd")).unwrap();

    let out = run_in(d, sync(), "-a --temp-dir=../tmpd");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(same(&d.join("src/big"), &d.join("dst/big")));
    assert_eq!(fs::read_dir(d.join("tmpd")).unwrap().count(), 0);
    let shm = Path::new("/dev/shm");
    let other_fs = fs::metadata(shm).is_ok_and(|m| m.dev() != fs::metadata(d).unwrap().dev());
    if other_fs {
        fs::remove_dir_all(d.join("dst")).unwrap();
        let out = run_in(d, sync(), "-a --temp-dir=/dev/shm");
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("file system"), "{}", stderr(&out));
        assert!(!d.join("dst").exists(), "refused before acting");
    }

    // Stopped: kept in .part; resumed from there; .part gone after.
    let _ = fs::remove_dir_all(d.join("dst"));
    sync_and_evict(&d.join("src/big"));
    let mut child = sync()
        .current_dir(d)
        .args(["-a", "--partial-dir=.part", "--bwlimit=8M", "src/", "dst/"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3000));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(20), "rsync's exit code for SIGINT");
    let kept: Vec<_> = fs::read_dir(d.join("dst/.part")).unwrap().collect();
    assert_eq!(kept.len(), 1, "the stopped file is kept in .part");
    assert!(
        !d.join("dst/big").exists(),
        "never a half file under its name"
    );
    let out = sync()
        .current_dir(d)
        .args(["-a", "--partial-dir=.part", "--json", "src/", "dst/"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["resumed_files"], 1, "{v}");
    assert!(v["resumed_bytes"].as_u64().unwrap() >= 16 << 20, "{v}");
    assert!(same(&d.join("src/big"), &d.join("dst/big")));
    assert!(!d.join("dst/.part").exists(), "removed when empty");
    // Protected from --delete, and the source's own .part is not copied.
    fs::create_dir_all(d.join("dst/.part")).unwrap();
    fs::write(d.join("dst/.part/mine"), "kept").unwrap();
    let out = run_in(d, sync(), "-a --delete --partial-dir=.part");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(d.join("dst/.part/mine").exists());
    assert!(!d.join("dst/.part/x").exists());

    let out = run_in(d, sync(), "-ai --delay-updates --delete");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    fs::write(d.join("src/sub/a"), "changed").unwrap();
    let out = run_in(d, sync(), "-ai --delay-updates");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(d.join("dst/sub/a")).unwrap(), "changed");
    assert!(!d.join("dst/.~tmp~").exists() && !d.join("dst/sub/.~tmp~").exists());
}

/// rsync -S: runs of zeros written in a file (not holes in the source) become holes in the
/// copy, as rsync's do — by every strategy that writes in chunks, and over an existing file
/// with --inplace; without -S the copy is as allocated as its source. Allocation is what
/// the file system reports (st_blocks), the content is compared byte for byte.
#[test]
fn sparse_turns_written_zeros_into_holes() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    let mut data = vec![0u8; 8 << 20];
    for (i, b) in data[..(1 << 20)].iter_mut().enumerate() {
        *b = (i % 251) as u8 + 1;
    }
    data[(7 << 20) + 5..].fill(7);
    fs::write(src.join("image"), &data).unwrap();
    let allocated = |p: &Path| fs::metadata(p).unwrap().blocks() * 512;
    assert!(
        allocated(&src.join("image")) >= 8 << 20,
        "the source is not sparse"
    );
    for (i, extra) in [&[][..], &["--cache", "direct"], &["--cache", "drop-behind"]]
        .iter()
        .enumerate()
    {
        let dst = t.path().join(format!("s{i}"));
        let o = run(sync()
            .args(["-aS"])
            .args(*extra)
            .arg(format!("{}/", src.display()))
            .arg(&dst));
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {}", stderr(&o));
        let a = allocated(&dst.join("image"));
        assert!(
            a <= 2 << 20,
            "{extra:?}: {a} bytes allocated of 8 MiB, 6 MiB zeros"
        );
        assert_eq!(fs::read(dst.join("image")).unwrap(), data, "{extra:?}");
    }
    let plain = t.path().join("plain");
    let o = run(sync()
        .arg("-a")
        .arg(format!("{}/", src.display()))
        .arg(&plain));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        allocated(&plain.join("image")) >= 8 << 20,
        "without -S zeros are written"
    );
    // --inplace -S over that fully allocated copy (-I: the same second, the same size): its
    // zero runs are punched.
    let mut changed = data.clone();
    changed[0] = 0xfe;
    fs::write(src.join("image"), &changed).unwrap();
    let o = run(sync()
        .args(["-aSI", "--inplace"])
        .arg(format!("{}/", src.display()))
        .arg(&plain));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(allocated(&plain.join("image")) <= 2 << 20);
    assert_eq!(fs::read(plain.join("image")).unwrap(), changed);
}

/// rsync -m: chains of directories that would end up empty (empty in the source, or emptied
/// by the filter rules) are not made; a populated chain is; a chain deeper than the look
/// goes (300 levels) ends without a crash and is kept, as without -m.
#[test]
fn prune_empty_dirs_leaves_out_empty_chains_and_survives_deep_ones() {
    let t = tmp();
    let src = t.path().join("src");
    for d in ["empty/e1/e2", "full/d1/d2", "logs/sub"] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    fs::write(src.join("full/d1/d2/file"), "data").unwrap();
    fs::write(src.join("logs/sub/a.log"), "log").unwrap();
    let mut deep = src.join("deep");
    for _ in 0..300 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    let dst = t.path().join("dst");
    let o = run(sync()
        .args(["-am", "--exclude=*.log"])
        .arg(format!("{}/", src.display()))
        .arg(&dst));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(dst.join("full/d1/d2/file").is_file());
    assert!(!dst.join("empty").exists(), "an empty chain is pruned");
    assert!(
        !dst.join("logs").exists(),
        "a chain emptied by the filters is pruned"
    );
    assert!(dst.join("deep/d/d").is_dir(), "beyond the look, kept");
}

/// `--stop-at HH:MM` (the next minute, or the one after when it is under 10 s away) stops a
/// copy throttled to outlast it, as rsync's does: exit 30, `stopping at requested limit`, the
/// unfinished file neither under its name nor as a temporary; the small file before it done.
/// Bad values are refused with rsync's messages and exit 1 before anything is copied.
#[test]
fn stop_at_ends_a_copy_at_the_minute_named() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    write_file(&src.join("a-small"), 4096);
    write_file(&src.join("b-big"), 96 << 20);
    let dst = t.path().join("dst");
    for (args, message) in [
        (["--stop-at", "25:00"], "invalid --stop-at format: 25:00"),
        (
            ["--stop-at", "2000-01-01"],
            "--stop-at time is not in the future",
        ),
        (["--stop-after", "0"], "invalid --stop-after value: 0"),
    ] {
        let o = run(sync().arg("-a").args(args).arg(&src).arg(&dst));
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(message), "{args:?}: {}", stderr(&o));
        assert!(!dst.exists());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = (now / 60 + 1) * 60 + if 60 - now % 60 < 10 { 60 } else { 0 };
    let hm = Command::new("date")
        .arg("+%H:%M")
        .arg("-d")
        .arg(format!("@{at}"))
        .output()
        .unwrap();
    let hm = String::from_utf8(hm.stdout).unwrap().trim().to_string();
    let started = std::time::Instant::now();
    let o = run(sync()
        .args(["-a", "--bwlimit", "1M", "--stop-at", &hm])
        .arg(format!("{}/", src.display()))
        .arg(&dst));
    let took = started.elapsed().as_secs();
    assert_eq!(o.status.code(), Some(30), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("stopping at requested limit"),
        "{}",
        stderr(&o)
    );
    let waited = at.saturating_sub(now);
    assert!(
        took + 2 >= waited && took <= waited + 5,
        "{took} s for {waited} s"
    );
    assert!(same(&src.join("a-small"), &dst.join("a-small")));
    let left: Vec<_> = fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["a-small"], "the unfinished file is gone");
}

/// `--usermap`/`--groupmap` give the owners and groups rsync's give, rule by rule (an id
/// range, a name, a wildcard, `*`), and imply -o / -g as rsync's do; `--numeric-ids` leaves
/// the name rules out; bad maps get rsync's messages and exit 1.
#[test]
fn usermap_and_groupmap_own_as_rsync_s() {
    if !can_compare_with_rsync("--usermap is compared with rsync") {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    for (name, uid, gid) in [
        ("a", 0, 0),
        ("b", 1500, 2500),
        ("d/c", 65534, 65534),
        ("d/e", 4000, 1),
    ] {
        write_file(&src.join(name), 10);
        std::os::unix::fs::lchown(src.join(name), Some(uid), Some(gid)).unwrap();
    }
    std::os::unix::fs::lchown(src.join("d"), Some(1200), Some(3)).unwrap();
    let owners = |root: &Path| -> Vec<(String, u32, u32)> {
        ["a", "b", "d", "d/c", "d/e"]
            .iter()
            .map(|n| {
                let m = fs::symlink_metadata(root.join(n)).unwrap();
                (n.to_string(), m.uid(), m.gid())
            })
            .collect()
    };
    let maps = [
        "--usermap=1000-2000:4242,root:77,nobod?:5,*:6",
        "--groupmap=2500:88,*:99",
    ];
    for extra in [&["-a"][..], &["-a", "--numeric-ids"], &["-rt"]] {
        let (r, p) = (t.path().join("r"), t.path().join("p"));
        for (dst, mut prog) in [(&r, rsync()), (&p, sync())] {
            let _ = fs::remove_dir_all(dst);
            let o = run(prog
                .args(extra)
                .args(maps)
                .arg(format!("{}/", src.display()))
                .arg(dst));
            assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        }
        assert_eq!(owners(&p), owners(&r), "{extra:?}");
        assert_eq!(tree_differences(&r, &p), "", "{extra:?}");
    }
    let p = owners(&t.path().join("p"));
    assert_eq!(
        p[1],
        ("b".into(), 4242, 88),
        "-rt with the maps keeps owners"
    );
    for (arg, message) in [
        ("--usermap=a", "No colon found in --usermap: a"),
        ("--groupmap=5:", "No name found after colon --groupmap: 5:"),
        ("--usermap=1-x:0", "Invalid number in --usermap: 1-x"),
        (
            "--usermap=*:no-such-user",
            "Unknown --usermap name on receiver: no-such-user",
        ),
    ] {
        let o = run(sync()
            .args(["-a", arg])
            .arg(&src)
            .arg(t.path().join("never")));
        assert_eq!(o.status.code(), Some(1), "{arg}");
        assert!(stderr(&o).contains(message), "{arg}: {}", stderr(&o));
    }
}
