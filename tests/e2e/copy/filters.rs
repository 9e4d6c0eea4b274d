//! `copy`'s rsync options against rsync itself, on the same tree with the same arguments:
//! filter rules (`--exclude`, `--include`, `--filter`, `--exclude-from`, `--include-from`),
//! `--delete` with excluded files and `--delete-excluded`, `-x`, `--max-size`/`--min-size`.
//! The trees rsync and pagewise leave are listed (name, type, size) and must be equal.

use crate::common::*;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// A tree with names the rules below pick apart: extensions, nested caches, anchored names,
/// character classes, a name with a newline and one that is not UTF-8.
fn tree(root: &Path) {
    let files: &[(&str, usize)] = &[
        ("top.txt", 10),
        ("top.log", 20),
        ("keep.log", 30),
        ("core", 5),
        ("src/main.c", 100),
        ("src/main.o", 200),
        ("src/lib/a.c", 40),
        ("src/lib/a.o", 50),
        ("src/lib/cache/blob", 4000),
        ("src/cache/x", 10),
        ("cache/top-cache-file", 7),
        ("logs/2024/jan.log", 60),
        ("logs/2024/feb.txt", 70),
        ("logs/current.log", 80),
        ("data/file1.bin", 3000),
        ("data/file2.bin", 300_000),
        ("data/fileX.bin", 1),
        ("data/deep/er/still/core", 9),
        ("data/deep/er/notes.txt", 11),
        ("weird/new\nline.txt", 3),
        ("empty/.keep", 0),
    ];
    for (name, size) in files {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        write_file(&p, *size);
    }
    fs::create_dir_all(root.join("emptydir/inner")).unwrap();
    let odd = root.join(std::ffi::OsStr::from_bytes(b"weird/bad\xffname.log"));
    write_file(&odd, 12);
    std::os::unix::fs::symlink("top.txt", root.join("link-to-top")).unwrap();
}

/// Every entry below `dir`: relative path, type and (for files) size; sorted.
fn listing(dir: &Path) -> Vec<String> {
    let out = Command::new("find")
        .arg(".")
        .args(["-mindepth", "1", "-printf", "%P %y %s\\0"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut v: Vec<String> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let s = String::from_utf8_lossy(l).into_owned();
            // Directory sizes depend on the file system's history; files' and links' do not.
            let mut parts = s.rsplitn(3, ' ');
            let (size, kind, path) = (parts.next(), parts.next(), parts.next());
            match (path, kind) {
                (Some(path), Some("d")) => format!("{path} d"),
                _ => format!(
                    "{} {} {}",
                    path.unwrap_or(""),
                    kind.unwrap_or(""),
                    size.unwrap_or("")
                ),
            }
        })
        .collect();
    v.sort();
    v
}

/// rsync `args` SRC/ A/ and pagewise copy -T `args` SRC B (both -a); the listings of A and B.
fn both(src: &Path, a: &Path, b: &Path, args: &[&str]) -> (Vec<String>, Vec<String>) {
    let r = Command::new("rsync")
        .arg("-a")
        .args(args)
        .arg(format!("{}/", src.display()))
        .arg(format!("{}/", a.display()))
        .output()
        .unwrap();
    assert!(r.status.success(), "rsync {args:?}: {r:?}");
    let p = run(bin().args(["copy", "-a", "-T"]).args(args).arg(src).arg(b));
    assert!(p.status.success(), "pagewise copy {args:?}: {}", stderr(&p));
    (listing(a), listing(b))
}

/// [`both`] into `r{i}` and `p{i}` below `base`, asserting the two trees are the same.
fn same_as_rsync(base: &Path, src: &Path, i: usize, rules: &[&str]) {
    let a = base.join(format!("r{i}"));
    let b = base.join(format!("p{i}"));
    let (ra, pb) = both(src, &a, &b, rules);
    assert_eq!(
        ra, pb,
        "rules {rules:?}: rsync (left) and pagewise (right) differ"
    );
}

/// The rule sets compared: rsync's man-page forms and combinations.
const RULE_SETS: &[&[&str]] = &[
    &["--exclude", "*.o"],
    &["--exclude", "*.log", "--include", "keep.log"],
    &["--include", "keep.log", "--exclude", "*.log"],
    &["--exclude", "/core"],
    &["--exclude", "core"],
    &["--exclude", "cache/"],
    &["--exclude", "src/lib"],
    &["--exclude", "/src/*/cache"],
    &["--exclude", "logs/**"],
    &["--exclude", "logs/***"],
    &["--exclude", "**/still"],
    &["--exclude", "file[0-9].bin"],
    &["--exclude", "file?.bin"],
    &["--exclude", "[!a-m]*"],
    &["--include", "*/", "--include", "*.txt", "--exclude", "*"],
    &["--include", "*/", "--include", "*.c", "--exclude", "*"],
    &[
        "--filter",
        "- *.log",
        "--filter",
        "+ src/***",
        "--filter",
        "- *",
    ],
    &["--filter", "-! */", "--filter", "+ *"],
    &["-f", "exclude data/"],
    &["--exclude", "*line*"],
    &["--exclude", "*\\*"],
];

#[test]
fn filters_leave_the_same_tree_as_rsync() {
    if !have_rsync() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    for (i, rules) in RULE_SETS.iter().enumerate() {
        same_as_rsync(t.path(), &src, i, rules);
    }
}

#[test]
fn rule_files_as_rsync_reads_them() {
    if !have_rsync() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let ex = t.path().join("excludes");
    fs::write(
        &ex,
        "# build output\n*.o\n; logs\n\n+ keep.log\n*.log\n/cache\n",
    )
    .unwrap();
    let inc = t.path().join("includes");
    fs::write(&inc, "*/\n*.c\n").unwrap();
    let ex_s = ex.to_str().unwrap();
    let inc_s = inc.to_str().unwrap();
    let sets: &[&[&str]] = &[
        &["--exclude-from", ex_s],
        &["--include-from", inc_s, "--exclude", "*"],
        &["--filter", &format!("merge,- {ex_s}")],
    ];
    for (i, rules) in sets.iter().enumerate() {
        same_as_rsync(t.path(), &src, i, rules);
    }
}

/// `--delete` leaves excluded destination files alone; `--delete-excluded` removes them;
/// `P` (protect) keeps a file even from `--delete-excluded`.
#[test]
fn delete_with_excluded_files_as_rsync() {
    if !have_rsync() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let sets: &[&[&str]] = &[
        &["--delete", "--exclude", "*.log"],
        &["--delete", "--delete-excluded", "--exclude", "*.log"],
        &[
            "--delete",
            "--delete-excluded",
            "--exclude",
            "*.log",
            "--filter",
            "P extra.log",
        ],
        &["--delete", "--exclude", "cache/"],
        &["--delete", "--delete-excluded", "--exclude", "/logs"],
        &["--delete", "--filter", "H *.o"],
        &["--delete", "--filter", "- *.o", "--filter", "R src/main.o"],
    ];
    for (i, rules) in sets.iter().enumerate() {
        let a = t.path().join(format!("r{i}"));
        let b = t.path().join(format!("p{i}"));
        for d in [&a, &b] {
            // The destination has what an earlier copy left and more: extra files matching
            // the rules and not, old logs, a cache only the destination has.
            Command::new("cp")
                .arg("-a")
                .arg(&src)
                .arg(d)
                .status()
                .unwrap();
            for (name, size) in [
                ("extra.log", 5),
                ("extra.txt", 6),
                ("src/old.o", 7),
                ("src/lib/cache/stale", 8),
                ("dst-only/cache/x", 9),
                ("logs/2023/dec.log", 10),
            ] {
                let p = d.join(name);
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                write_file(&p, size);
            }
        }
        same_as_rsync(t.path(), &src, i, rules);
    }
}

#[test]
fn size_limits_as_rsync() {
    if !have_rsync() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let sets: &[&[&str]] = &[
        &["--max-size", "100"],
        &["--min-size", "1K"],
        &["--max-size", "200K", "--min-size", "11"],
        &["--max-size", "2.9K"],
        &["--min-size", "1kb"],
    ];
    for (i, rules) in sets.iter().enumerate() {
        same_as_rsync(t.path(), &src, i, rules);
    }
}

/// `-x`: a file system mounted inside the source is copied as an empty directory, as rsync
/// -x does.
#[test]
fn one_file_system_as_rsync() {
    if !have_rsync() || !require_root("mounting a tmpfs inside the source") {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let mnt = src.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let fs2 = Mount::tmpfs("4m");
    let _inside = Mount::bind(fs2.path(), &mnt);
    write_file(&mnt.join("on-another-fs"), 100);
    let a = t.path().join("a");
    let b = t.path().join("b");
    let (ra, pb) = both(&src, &a, &b, &["-x"]);
    assert_eq!(ra, pb);
    assert!(pb.iter().any(|l| l.starts_with("mnt d")), "{pb:?}");
    assert!(!pb.iter().any(|l| l.contains("on-another-fs")));
}

/// Bad rules and rule files are refused before anything is written, naming what is wrong.
#[test]
fn bad_rules_are_refused_before_copying() {
    let t = tmp();
    let src = t.path().join("src");
    tree(&src);
    let dst = t.path().join("dst");
    for (args, says) in [
        (vec!["--filter", "x foo"], "unknown filter rule"),
        (vec!["--filter", "-/ abs"], "not supported"),
        (vec!["--filter", ": "], "unexpected end of filter rule"),
        (
            vec!["--exclude-from", "/nonexistent/rules"],
            "/nonexistent/rules",
        ),
        (vec!["--max-size", "lots"], "max-size"),
    ] {
        let out = run(bin().args(["copy", "-a"]).args(&args).arg(&src).arg(&dst));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        assert!(!dst.exists(), "{args:?} wrote something");
    }
    // A per-directory merge file planted as a symlink (here to a file outside) is not
    // followed: the directory's copy reports it, with the path and the call, and nothing of
    // the file it points at.
    fs::write(t.path().join("outside"), "- SECRET-LINE\n").unwrap();
    std::os::unix::fs::symlink(t.path().join("outside"), src.join(".rules")).unwrap();
    let out = run(bin()
        .args(["copy", "-a", "-f", ": .rules"])
        .arg(&src)
        .arg(&dst));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(".rules: open failed"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("SECRET-LINE"), "{}", stderr(&out));
    fs::remove_file(src.join(".rules")).unwrap();
    let _ = fs::remove_dir_all(&dst);
    // A FIFO as a rule file does not hang the copy.
    let fifo = mkfifo(&t.path().join("fifo"));
    let (out, took) = run_deadline(
        bin()
            .args(["copy", "-a", "--exclude-from"])
            .arg(&fifo)
            .arg(&src)
            .arg(&dst),
        20,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(took.as_secs() < 20);
}

/// Argument mistakes get plain words: a missing destination, and rsync's `host:path`.
#[test]
fn argument_errors_in_plain_words() {
    let t = tmp();
    let src = t.path().join("onlyone");
    write_file(&src, 10);
    let out = run(bin().arg("copy").arg(&src));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("copy needs a source and a destination"),
        "{}",
        stderr(&out)
    );
    let help = run(bin().args(["copy", "--help"]));
    assert!(stdout(&help).contains("pagewise copy [OPTIONS] SOURCE... DEST"));
    let out = run(bin().arg("copy").arg(&src).arg("backup-host:/tmp/x"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("backup-host:/tmp/x: remote destinations are not supported"),
        "{}",
        stderr(&out)
    );
    assert!(!t.path().join("backup-host:").exists());
    // A local name with a colon after a slash is a path like any other.
    let local = t.path().join("a:b");
    assert!(run(bin().arg("copy").arg(&src).arg(&local))
        .status
        .success());
    assert!(same(&src, &local));
}
