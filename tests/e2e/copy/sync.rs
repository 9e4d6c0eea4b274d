//! `pagewise sync` against rsync itself: the same command line on copies of the same trees,
//! by rsync and by pagewise; their itemized output (sorted), exit codes and `--stats` figures
//! must be equal, and `rsync -naHAXc -i` between the two results empty. Then what only
//! pagewise's side can say: the trailing-slash rule, -h, --files-from, refusals.

use crate::common::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A source with what backups meet — files, a sparse image, hard links, symlinks (one leaving
/// the tree), a FIFO, an xattr, an ACL, an old mode and time, an empty directory — and a
/// destination that holds an older copy, an extra file, a backup-looking file and an old
/// directory tree.
fn scene(root: &Path) {
    let src = root.join("src");
    fs::create_dir_all(src.join("sub/deep")).unwrap();
    fs::create_dir_all(src.join("empty")).unwrap();
    fs::write(src.join("a"), "hello\n").unwrap();
    fs::write(src.join("sub/b"), "world\n").unwrap();
    write_file(&src.join("sub/deep/big"), 300_000);
    fs::hard_link(src.join("a"), src.join("h")).unwrap();
    std::os::unix::fs::symlink("a", src.join("l")).unwrap();
    std::os::unix::fs::symlink("sub", src.join("dl")).unwrap();
    fs::write(src.join("x.sh"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(src.join("x.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("../../etc/passwd", src.join("unsafe")).unwrap();
    mkfifo(&src.join("fifo"));
    let f = fs::File::create(src.join("sparse")).unwrap();
    f.set_len(10 << 20).unwrap();
    drop(f);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(src.join("sparse"))
        .unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(5_000_000)).unwrap();
    std::io::Write::write_all(&mut f, b"data").unwrap();
    tool(&["setfattr", "-n", "user.k", "-v", "v"], &src.join("a"));
    tool(&["setfacl", "-m", "u:nobody:r"], &src.join("sub/b"));
    fs::set_permissions(src.join("sub/b"), fs::Permissions::from_mode(0o640)).unwrap();
    tool(&["touch", "-d", "2020-01-01"], &src.join("sub/b"));
    // Per-directory rule files for -F, -C and `:` rules (plain files for the other sets).
    fs::write(src.join("sub/.rsync-filter"), "- b\n").unwrap();
    fs::write(src.join(".cvsignore"), "x.sh  unsafe\n").unwrap();
    fs::write(src.join("sub/.rules"), "- /deep\n").unwrap();
    tool(&["touch", "-d", "2020-01-01"], &src.join("sub"));
    let dst = root.join("dst");
    fs::create_dir_all(dst.join("sub")).unwrap();
    fs::create_dir_all(dst.join("olddir/x")).unwrap();
    fs::write(dst.join("sub/b"), "old\n").unwrap();
    fs::write(dst.join("extra"), "gone\n").unwrap();
    fs::write(dst.join("a~"), "keep\n").unwrap();
    fs::write(dst.join("x.sh"), "old\n").unwrap();
    fs::set_permissions(dst.join("x.sh"), fs::Permissions::from_mode(0o604)).unwrap();
    fs::write(dst.join("olddir/x/y"), "y\n").unwrap();
    fs::write(dst.join(".rules"), "P extra\n").unwrap();
    // The roots' times set, not left to the clock (both tools compare whole seconds).
    for d in [&src, &dst] {
        tool(&["touch", "-d", "2021-01-01 10:00"], d);
    }
}

/// Runs `prog` (with `flags`, split on spaces) from `dir` on `src/ dst/`.
pub(super) fn run_in(dir: &Path, prog: Command, flags: &str) -> std::process::Output {
    let mut cmd = prog;
    cmd.current_dir(dir);
    cmd.args(flags.split_whitespace()).args(["src/", "dst/"]);
    cmd.output().unwrap()
}

pub(super) fn rsync() -> Command {
    Command::new("rsync")
}

pub(super) fn sync() -> Command {
    let mut c = bin();
    c.arg("sync");
    c
}

/// What both print that must be the same, sorted: rsync's protocol figures, file-list times
/// and directory notes left out, and the one naming difference allowed — which name of a
/// hard-linked group is copied and which linked to it (rsync copies the last).
fn comparable(out: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(out);
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| {
            ![
                "File list",
                "Total bytes",
                "sent ",
                "total size",
                "cannot delete non-empty",
                "sending incremental",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .map(|l| {
            let l = l.split(" => ").next().unwrap_or(l);
            match l {
                "hf+++++++++ a" | ">f+++++++++ a" => "HL a".into(),
                "hf+++++++++ h" | ">f+++++++++ h" => "HL h".into(),
                l => l.to_string(),
            }
        })
        .collect();
    lines.sort();
    lines
}

/// The differences between two trees as rsync -naHAXc sees them, directory times left out
/// (rsync leaves a directory that received a backup with the backup's time).
pub(super) fn tree_differences(a: &Path, b: &Path) -> String {
    let out = Command::new("rsync")
        .args(["-naHAXc", "-i", "--delete"])
        .arg(format!("{}/", a.display()))
        .arg(format!("{}/", b.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with(".d..t......"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Two fresh copies of `base` (`r` for rsync, `p` for pagewise) in `dir`.
fn fresh_copies(dir: &Path, base: &Path) -> (PathBuf, PathBuf) {
    let (r, p) = (dir.join("r"), dir.join("p"));
    for d in [&r, &p] {
        let _ = fs::remove_dir_all(d);
        let st = Command::new("cp")
            .arg("-a")
            .arg(base)
            .arg(d)
            .status()
            .unwrap();
        assert!(st.success());
    }
    (r, p)
}

/// The command lines rsync users type, each run by both on the same scene, twice.
const FLAG_SETS: &[&str] = &[
    "-ai",
    "-aHAXi",
    "-aHAXSi --delete",
    "-ai --delete-before",
    "-ai --delete-after",
    "-ai --delete-delay",
    "-ain --delete",
    "-ai --delete --backup",
    "-ai --delete --backup --backup-dir=../bk",
    "-ai --delete-after --backup --suffix=.old",
    "-ai --size-only",
    "-aic",
    "-ai --existing",
    "-ai --ignore-existing",
    "-ai -u",
    "-ai -I",
    "-ai --chmod=Fa-w,Dg+s",
    "-ai --chown=nobody:nogroup",
    "-ai --numeric-ids",
    "-ai -O",
    "-rlptDi",
    "-rlti",
    "-ri",
    "-ai --safe-links",
    "-aii",
    "-ai --info=name2",
    "-av",
    "-avn --delete",
    "-aHi --stats",
    "-ai --exclude=deep --delete",
    "-ai --max-size=100K",
    "-ai --modify-window=1",
    "-ai --inplace",
    "-ai --append",
    "-ai --delay-updates",
    "-ai --copy-unsafe-links",
    "-ai --force",
    "-aiJ",
    "-dlti",
    "-rlkti",
    "-rEi",
    "-aSi",
    "-ai --no-super",
    "-aim --delete --include=*/ --include=b --exclude=*",
    "-aim",
    "-aiF",
    "-aiFF --delete",
    "-aiC",
    "-aiC --delete",
    "-ai --delete -f:_.rules",
    "-ai -f:n-_.rsync-filter -f:e_.rules",
    "-ai -f-C -f:C",
];

#[test]
fn sync_matches_rsync_on_the_same_trees() {
    if !can_compare_with_rsync("sync is compared with rsync") {
        return;
    }
    let t = tmp();
    let base = t.path().join("base");
    scene(&base);
    let mut failures = Vec::new();
    for (i, flags) in FLAG_SETS.iter().enumerate() {
        let (r, p) = (
            t.path().join(format!("r{i}")),
            t.path().join(format!("p{i}")),
        );
        for d in [&r, &p] {
            let st = Command::new("cp")
                .arg("-a")
                .arg(&base)
                .arg(d)
                .status()
                .unwrap();
            assert!(st.success());
        }
        for round in 1..=2 {
            let ro = run_in(&r, rsync(), flags);
            let po = run_in(&p, sync(), flags);
            let what = format!("{flags} (run {round})");
            if ro.status.code() != po.status.code() {
                failures.push(format!(
                    "{what}: exit {:?} (rsync) vs {:?}: {}",
                    ro.status.code(),
                    po.status.code(),
                    stderr(&po)
                ));
            }
            let (rl, pl) = (comparable(&ro.stdout), comparable(&po.stdout));
            if rl != pl {
                failures.push(format!(
                    "{what}: output\nrsync:\n{rl:#?}\npagewise:\n{pl:#?}"
                ));
            }
            let mut d = tree_differences(&r.join("dst"), &p.join("dst"));
            // Without -t a copy has the time it was made at: the two runs' differ (with -J
            // a symlink's: -aiJ's links differed when the two runs fell in two seconds).
            let times_kept = flags.contains("-a") || flags.contains('t');
            let link_times = !flags.contains('J');
            if !times_kept || !link_times {
                d = d
                    .lines()
                    .filter(|l| {
                        !(l.starts_with(".L..t......")
                            || !times_kept && l.starts_with(".f..t......"))
                    })
                    .map(|l| format!("{l}\n"))
                    .collect();
            }
            if !d.is_empty() {
                failures.push(format!("{what}: the trees differ:\n{d}"));
            }
            if r.join("bk").exists() {
                let d = tree_differences(&r.join("bk"), &p.join("bk"));
                if !d.is_empty() {
                    failures.push(format!("{what}: the backups differ:\n{d}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `(path, inode)` of every regular file below `dir`.
fn inodes(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                out.push((e.path().strip_prefix(dir).unwrap().to_path_buf(), m.ino()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn link_dest_snapshots_share_inodes_exactly_where_rsync_s_do() {
    if !can_compare_with_rsync("--link-dest is compared with rsync") {
        return;
    }
    let t = tmp();
    scene(&t.path().join("r"));
    let _ = fs::remove_dir_all(t.path().join("r/dst"));
    let st = Command::new("cp")
        .arg("-a")
        .arg(t.path().join("r"))
        .arg(t.path().join("p"))
        .status()
        .unwrap();
    assert!(st.success());
    let snap = |dir: &Path, prog: Command, args: &[&str]| {
        let mut cmd = prog;
        cmd.current_dir(dir).args(args);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        comparable(&out.stdout)
    };
    for (dir, mk) in [
        (t.path().join("r"), rsync as fn() -> Command),
        (t.path().join("p"), sync),
    ] {
        snap(&dir, mk(), &["-aHAX", "src/", "snap1/"]);
        // A day later: one file changed, one added, one removed.
        fs::write(dir.join("src/sub/b"), "changed\n").unwrap();
        fs::write(dir.join("src/new"), "new\n").unwrap();
        fs::remove_file(dir.join("src/sub/deep/big")).unwrap();
        // Times set, not left to the clock: the two sides are changed moments apart, and
        // both compare whole seconds.
        for p in ["src", "src/sub/deep", "src/sub/b", "src/new"] {
            tool(&["touch", "-d", "2021-06-01 12:00"], &dir.join(p));
        }
    }
    let mut outputs = Vec::new();
    for kind in ["--link-dest", "--compare-dest", "--copy-dest"] {
        for (dir, mk) in [
            (t.path().join("r"), rsync as fn() -> Command),
            (t.path().join("p"), sync),
        ] {
            let name = format!("snap2{kind}");
            let arg = format!("{kind}=../snap1");
            outputs.push(snap(
                &dir,
                mk(),
                &["-aHAXi", &arg, "src/", &format!("{name}/")],
            ));
        }
        let name = format!("snap2{kind}");
        let (r, p) = (t.path().join("r"), t.path().join("p"));
        // Which files of the new snapshot are the old snapshot's (same inode), per tool.
        let shared = |dir: &Path| -> Vec<(PathBuf, bool)> {
            let old: std::collections::HashMap<_, _> =
                inodes(&dir.join("snap1")).into_iter().collect();
            inodes(&dir.join(&name))
                .into_iter()
                .map(|(p, ino)| {
                    let same = old.get(&p) == Some(&ino);
                    (p, same)
                })
                .collect()
        };
        let (rs, ps) = (shared(&r), shared(&p));
        assert_eq!(rs, ps, "{kind}: files shared with the earlier snapshot");
        if kind == "--link-dest" {
            assert!(rs.iter().filter(|(_, s)| *s).count() >= 3, "{rs:?}");
        }
        assert_eq!(
            tree_differences(&r.join(&name), &p.join(&name)),
            "",
            "{kind}"
        );
    }
    for pair in outputs.chunks(2) {
        assert_eq!(pair[0], pair[1], "itemized output of the snapshot");
    }
}

/// The `--stats` figures that mean the same in both: every line but the protocol's.
#[test]
fn stats_figures_equal_rsync_s() {
    if !can_compare_with_rsync("--stats is compared with rsync") {
        return;
    }
    let t = tmp();
    let base = t.path().join("base");
    scene(&base);
    for flags in [
        "-a --stats",
        "-aH --stats --delete",
        "-a --stats -h",
        "-a --stats -hh",
    ] {
        let (r, p) = fresh_copies(t.path(), &base);
        let ro = String::from_utf8_lossy(&run_in(&r, rsync(), flags).stdout).into_owned();
        let po = String::from_utf8_lossy(&run_in(&p, sync(), flags).stdout).into_owned();
        let figures = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| {
                    l.starts_with("Number of")
                        || l.starts_with("Total file size")
                        || l.starts_with("Total transferred")
                        || l.starts_with("Literal data")
                        || l.starts_with("Matched data")
                })
                .map(str::to_string)
                .collect()
        };
        assert_eq!(figures(&ro), figures(&po), "{flags}:\n{ro}\n{po}");
        assert_eq!(figures(&po).len(), 8, "{po}");
        // The closing lines are there, in rsync's words.
        assert!(
            po.contains("\nsent ") && po.contains("total size is "),
            "{po}"
        );
    }
}

#[test]
fn trailing_slash_and_destination_rules_are_rsync_s() {
    let t = tmp();
    let src = t.path().join("s");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("f"), "x").unwrap();
    let go = |args: &[&str]| {
        let out = run(sync().current_dir(t.path()).args(args));
        (out.status.code(), stdout(&out), stderr(&out))
    };
    // `s` goes into DEST under its name (DEST made), `s/` puts the contents there.
    assert_eq!(go(&["-a", "s", "n1"]).0, Some(0));
    assert!(t.path().join("n1/s/f").exists() && t.path().join("n1/s/d").is_dir());
    assert_eq!(go(&["-a", "s/", "n2"]).0, Some(0));
    assert!(t.path().join("n2/f").exists());
    // The nightly habit: the same command again lands in the same place, nothing nested.
    assert_eq!(
        go(&["-ai", "s/", "n2"]),
        (Some(0), String::new(), String::new())
    );
    assert!(!t.path().join("n2/s").exists());
    // A file to a new name is the copy itself; `created directory` as rsync says it.
    assert_eq!(go(&["-a", "s/f", "copy-of-f"]).0, Some(0));
    assert_eq!(fs::read(t.path().join("copy-of-f")).unwrap(), b"x");
    let (code, out, _) = go(&["-ai", "s/", "n3"]);
    assert_eq!(code, Some(0));
    assert!(
        out.starts_with("created directory n3\ncd+++++++++ ./\n"),
        "{out}"
    );
    // Without -r a directory is skipped, as rsync says.
    let (code, _, err) = go(&["s/f", "s", "n4"]);
    assert!(err.contains("skipping directory s"), "{err}");
    assert_eq!(code, Some(0));
    // One file left in the list: DEST is that file, as rsync makes it.
    assert_eq!(fs::read(t.path().join("n4")).unwrap(), b"x");
    // Several files onto a file: rsync's refusal, exit 1 (syntax or usage).
    fs::write(t.path().join("plain"), "p").unwrap();
    let (code, _, err) = go(&["s/f", "s/f", "plain"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("must be a directory"), "{err}");
    assert_eq!(fs::read(t.path().join("plain")).unwrap(), b"p");
    // --mkpath makes the whole path; without it the missing parent is an error (11).
    assert_eq!(go(&["-a", "s/", "deep/er/n5"]).0, Some(11));
    assert_eq!(go(&["-a", "--mkpath", "s/", "deep/er/n5"]).0, Some(0));
    assert!(t.path().join("deep/er/n5/f").exists());
}

#[test]
fn letters_keep_rsync_s_meanings_and_unknown_flags_are_refused_by_name() {
    let t = tmp();
    let src = t.path().join("s");
    fs::create_dir_all(&src).unwrap();
    write_file(&src.join("f"), 2 << 20);
    // -h is --human-readable, not help: it copies, and --stats shows M.
    let out = run(sync()
        .current_dir(t.path())
        .args(["-ah", "--stats", "s/", "d1"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(t.path().join("d1/f").exists());
    assert!(
        stdout(&out).contains("Total file size: 2.10M bytes"),
        "{}",
        stdout(&out)
    );
    // --help is the help.
    let out = run(sync().arg("--help"));
    assert!(out.status.success() && stdout(&out).contains("-rlptgoD"));
    // -P is --partial --progress: the progress line on stderr.
    let out = run(sync().current_dir(t.path()).args(["-aP", "s/", "d2"]));
    assert_eq!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("sync"), "{}", stderr(&out));
    // -H keeps hard links; without it each name is a file of its own (rsync -a).
    fs::hard_link(src.join("f"), src.join("g")).unwrap();
    assert_eq!(
        run(sync().current_dir(t.path()).args(["-a", "s/", "d3"]))
            .status
            .code(),
        Some(0)
    );
    assert_eq!(fs::metadata(t.path().join("d3/g")).unwrap().nlink(), 1);
    assert_eq!(
        run(sync().current_dir(t.path()).args(["-aH", "s/", "d4"]))
            .status
            .code(),
        Some(0)
    );
    assert_eq!(fs::metadata(t.path().join("d4/g")).unwrap().nlink(), 2);
    // A remote place keeps its refusal; an rsync flag pagewise lacks is named, no guess.
    let out = run(sync().current_dir(t.path()).args(["-a", "s/", "host:/x"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("remote paths are not supported"),
        "{}",
        stderr(&out)
    );
    let out = run(sync()
        .current_dir(t.path())
        .args(["-a", "--fake-super", "s/", "d5"]));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("--fake-super is rsync's") && !err.contains("tip:"),
        "{err}"
    );
    let out = run(bin()
        .current_dir(t.path())
        .args(["copy", "--inplace", "s/", "d5"]));
    assert!(stderr(&out).contains("pagewise sync takes rsync's command line"));
    assert!(!stderr(&out).contains("--ionice"), "no unrelated guess");
    // A source that is missing: rsync's partial-transfer code, 23, and the rest copied.
    let out = run(sync()
        .current_dir(t.path())
        .args(["-a", "missing", "s/f", "d6/"]));
    assert_eq!(out.status.code(), Some(23), "{}", stderr(&out));
    assert!(t.path().join("d6/f").exists());
}

#[test]
fn files_from_relative_max_delete_and_remove_source_files() {
    if !can_compare_with_rsync("--files-from is compared with rsync") {
        return;
    }
    let t = tmp();
    let base = t.path().join("base");
    scene(&base);
    fs::write(
        base.join("list"),
        "sub/b\n# comment\nsub/deep/big\n/a\nempty\n",
    )
    .unwrap();
    fs::write(base.join("list0"), "sub/b\0sub/deep/big\0a\0").unwrap();
    for flags in [
        "-ai --files-from=list",
        "-ai -0 --files-from=list0",
        "-air --files-from=list",
    ] {
        let (r, p) = fresh_copies(t.path(), &base);
        for d in [&r, &p] {
            let _ = fs::remove_dir_all(d.join("dst"));
        }
        let ro = run_in(&r, rsync(), flags);
        let po = run_in(&p, sync(), flags);
        assert_eq!(
            ro.status.code(),
            po.status.code(),
            "{flags}: {}",
            stderr(&po)
        );
        assert_eq!(comparable(&ro.stdout), comparable(&po.stdout), "{flags}");
        assert_eq!(
            tree_differences(&r.join("dst"), &p.join("dst")),
            "",
            "{flags}"
        );
    }
    // -R: the path after /./ is kept.
    let (r, p) = (t.path().join("r"), t.path().join("p"));
    for (d, prog) in [(&r, rsync as fn() -> Command), (&p, sync)] {
        let _ = fs::remove_dir_all(d.join("rel"));
        let out = run(prog()
            .current_dir(d)
            .args(["-aR", "src/./sub/deep", "src/./a", "rel/"]));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(tree_differences(&r.join("rel"), &p.join("rel")), "");
    assert!(p.join("rel/sub/deep/big").exists() && p.join("rel/a").exists());
    // --max-delete: at most N deleted, exit 25, said.
    let d = t.path().join("md");
    fs::create_dir_all(d.join("src")).unwrap();
    fs::create_dir_all(d.join("dst")).unwrap();
    for i in 0..5 {
        fs::write(d.join(format!("dst/x{i}")), "x").unwrap();
    }
    let out = run_in(&d, sync(), "-a --delete --max-delete=2");
    assert_eq!(out.status.code(), Some(25), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--max-delete limit (3 skipped)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read_dir(d.join("dst")).unwrap().count(), 3);
    // --remove-source-files: sources of copied and up-to-date files go, directories stay.
    let d = t.path().join("rs");
    fs::create_dir_all(d.join("src/sub")).unwrap();
    fs::write(d.join("src/sub/a"), "a").unwrap();
    fs::write(d.join("src/b"), "b").unwrap();
    let out = run_in(&d, sync(), "-a --remove-source-files");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(d.join("dst/sub/a").exists() && d.join("dst/b").exists());
    assert!(!d.join("src/sub/a").exists() && !d.join("src/b").exists());
    assert!(d.join("src/sub").is_dir());
}
