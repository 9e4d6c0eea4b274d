//! What `stat`, `evict` and `load` share, tested on all three: real files on the build's
//! filesystem, every assertion on what the kernel reports (cachestat, cross-checked with
//! mincore), never on what pagewise says it did. Bad input (missing paths, FIFOs, symlink
//! loops, files vanishing mid-walk, sparse and empty files), ranges past EOF, exact byte
//! totals, "unknown" (never false numbers) for a user who does not own the file or lacks
//! CAP_FOWNER, and tmpfs residue explained. Each verb's own behaviour is in its module
//! (`stat`, `evict`, `load`); the helpers here serve them too.

use crate::common::*;
use pagewise_core::sys;
use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A second opinion from mincore (root owns everything here, so mincore tells the truth).
pub(crate) fn mincore_pages(p: &Path) -> u64 {
    let f = File::open(p).unwrap();
    let len = f.metadata().unwrap().len();
    sys::mincore_count(f.as_fd(), 0, len, None).unwrap()
}

pub(crate) fn tree(root: &Path, dirs: usize, per_dir: usize, size: usize) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for d in 0..dirs {
        let dir = root.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for i in 0..per_dir {
            let p = dir.join(format!("f{i:04}"));
            write_file(&p, size + i * 97);
            v.push(p);
        }
    }
    v
}

#[test]
fn missing_path_is_counted_named_and_exits_2() {
    let t = tmp();
    write_file(&t.path().join("ok"), 100);
    for verb in ["stat", "evict", "load"] {
        let out = run(bin()
            .arg(verb)
            .arg(t.path().join("nope"))
            .arg(t.path().join("ok")));
        assert_eq!(out.status.code(), Some(2), "{verb}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("nope: stat failed: No such file or directory"),
            "{verb}: {err}"
        );
    }
}

#[test]
fn fifos_sockets_never_block() {
    let t = tmp();
    let fifo = mkfifo(&t.path().join("fifo"));
    write_file(&t.path().join("f"), 100);
    for verb in ["stat", "evict", "load"] {
        // Inside a tree: skipped and counted.
        let (out, _) = run_deadline(bin().args([verb, "--json"]).arg(t.path()), 20);
        assert!(out.status.success(), "{verb}");
        assert_eq!(json(&out)["walk"]["special_skipped"], 1);
        // Named explicitly: a clear error, still no blocking.
        let (out, _) = run_deadline(bin().arg(verb).arg(&fifo), 20);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("is a FIFO"));
    }
}

#[test]
fn symlink_loops_are_reported_not_followed_forever() {
    let t = tmp();
    fs::create_dir(t.path().join("d")).unwrap();
    write_file(&t.path().join("d/f"), 100);
    std::os::unix::fs::symlink("..", t.path().join("d/up")).unwrap();
    std::os::unix::fs::symlink("self", t.path().join("self")).unwrap();
    let (out, _) = run_deadline(bin().args(["stat", "-L", "--json"]).arg(t.path()), 20);
    assert_eq!(out.status.code(), Some(2));
    let v = json(&out);
    assert_eq!(v["total"]["files"], 1);
    let errs = v["errors"].to_string();
    assert!(
        errs.contains("symlink loop") || errs.contains("Too many levels"),
        "{errs}"
    );
    // Without -L the links are skipped quietly.
    let out = run(bin().args(["stat", "--json"]).arg(t.path()));
    assert!(out.status.success());
    assert_eq!(json(&out)["walk"]["symlinks_skipped"], 2);
    // A looping symlink named explicitly: an error naming it.
    let out = run(bin().arg("stat").arg(t.path().join("self")));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symlink loop"));
}

#[test]
fn sparse_terabyte_file_is_fast_and_loads_only_data() {
    let t = tmp();
    let p = t.path().join("sparse");
    let f = File::create(&p).unwrap();
    f.set_len(1 << 40).unwrap();
    use std::os::unix::fs::FileExt;
    let data = vec![7u8; 1 << 20];
    f.write_all_at(&data, 1 << 39).unwrap();
    drop(f);
    sync_and_evict(&p);
    let start = Instant::now();
    let (out, _) = run_deadline(bin().args(["stat", "--json"]).arg(&p), 60);
    assert!(out.status.success());
    assert_eq!(json(&out)["total"]["bytes"], 1u64 << 40);
    let (out, _) = run_deadline(bin().args(["load", "--json"]).arg(&p), 60);
    assert!(out.status.success());
    let k = cs(&p);
    assert!(k.cache >= 256, "the data extent is loaded: {}", k.cache);
    assert!(
        k.cache < 256 * 64,
        "holes are not loaded: {} pages",
        k.cache
    );
    let (out, _) = run_deadline(bin().arg("evict").arg(&p), 60);
    assert!(out.status.success());
    assert_eq!(cached(&p), 0);
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
fn empty_files_are_fine() {
    let t = tmp();
    let p = t.path().join("empty");
    File::create(&p).unwrap();
    for verb in ["stat", "evict", "load"] {
        let out = run(bin().args([verb, "--json"]).arg(&p));
        assert!(out.status.success(), "{verb}");
        assert_eq!(json(&out)["total"]["files"], 1);
    }
}

#[test]
fn files_vanishing_mid_walk_are_not_errors() {
    let t = tmp();
    let files = tree(t.path(), 20, 500, 100);
    let root = t.path().to_path_buf();
    let deleter = std::thread::spawn(move || {
        for p in files.iter().rev() {
            let _ = fs::remove_file(p);
        }
    });
    let out = run(bin().args(["stat", "--json"]).arg(&root));
    deleter.join().unwrap();
    assert!(
        out.status.success(),
        "vanished files are counted, not failures"
    );
    let v = json(&out);
    assert_eq!(v["error_count"], 0);
}

/// Root without CAP_FOWNER and CAP_DAC_OVERRIDE (a systemd unit with a capability bounding
/// set) is like any user for mincore(2): of a file it neither owns nor may write, the kernel
/// calls every page resident. Such a figure is "unknown", never 100%.
#[test]
fn root_without_fowner_gets_unknown_from_mincore() {
    if !require_root("dropping capabilities of root") {
        return;
    }
    let t = tmp();
    let theirs = t.path().join("theirs");
    write_file(&theirs, 64 << 10);
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    sync_and_evict(&theirs);
    assert_eq!(cached(&theirs), 0);
    let out = run(Command::new("setpriv")
        .args([
            "--bounding-set=-fowner,-dac_override",
            "--inh-caps=-fowner,-dac_override",
        ])
        .arg(env!("CARGO_BIN_EXE_pagewise"))
        .args(["stat", "--json", "--method", "mincore"])
        .arg(&theirs));
    let v = json(&out);
    assert_eq!(v["total"]["unknown_files"], 1, "never a false number: {v}");
    assert_eq!(v["total"]["cached_bytes"], 0, "{v}");
    // With its capabilities, root's mincore is true: known, 0 bytes cached.
    let v = json(&run(bin()
        .args(["stat", "--json", "--method", "mincore"])
        .arg(&theirs)));
    assert_eq!(v["total"]["unknown_files"], 0, "{v}");
    assert_eq!(v["total"]["cached_bytes"], 0, "{v}");
}

#[test]
fn unprivileged_user_gets_errors_and_unknown_never_false_numbers() {
    if !require_root("switching to user nobody") {
        return;
    }
    let t = tmp();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let secret = t.path().join("secret");
    let readable = t.path().join("readable");
    write_file(&secret, 8192);
    write_file(&readable, 64 << 10);
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&readable, fs::Permissions::from_mode(0o644)).unwrap();
    sync_and_evict(&readable);
    assert_eq!(cached(&readable), 0);
    // Make the target dir traversable for nobody: the tmp root is under target/.
    let mut a = t.path().to_path_buf();
    while let Some(parent) = a.parent() {
        let _ = fs::set_permissions(
            parent,
            fs::Permissions::from_mode(fs::metadata(parent).unwrap().permissions().mode() | 0o005),
        );
        a = parent.to_path_buf();
    }
    let out = run(as_nobody().args(["stat", "--json", "-l"]).arg(t.path()));
    assert_eq!(
        out.status.code(),
        Some(2),
        "permission denied is a per-file error"
    );
    let v = json(&out);
    let errs = v["errors"].to_string();
    assert!(
        errs.contains("secret") && errs.contains("openat") && errs.contains("Permission denied"),
        "{errs}"
    );
    // The readable file: cachestat refuses (EPERM) and mincore would claim 100%: "unknown".
    let f = &v["files"][0];
    assert!(f["path"].as_str().unwrap().ends_with("readable"));
    assert_eq!(f["method"], "unknown", "never a false number");
    assert!(f["cached_bytes"].is_null());
    // --owned as root skips files owned by someone else.
    std::os::unix::fs::chown(&readable, Some(65534), Some(65534)).unwrap();
    fs::read(&readable).unwrap();
    let v = json(&run(bin()
        .args(["evict", "--owned", "--json"])
        .arg(&readable)));
    assert_eq!(v["total"]["not_owned_skipped"], 1);
    assert!(cached(&readable) > 0, "not owned: left alone");
}

#[test]
fn help_man_and_completions() {
    let out = run(bin().args(["stat", "--help"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Examples:"));
    let t = tmp();
    assert!(run(bin().arg("man").arg(t.path())).status.success());
    assert!(t.path().join("pagewise-evict.1").exists());
    let out = run(bin().args(["completions", "bash"]));
    assert!(String::from_utf8_lossy(&out.stdout).contains("pagewise"));
    let out = run(bin().args(["stat", "--range", "9-1"]));
    assert_eq!(out.status.code(), Some(1), "usage errors are fatal: exit 1");
}

/// Pages the range or the file's end covers only in part count for the bytes of them that are
/// covered: a 12,388-byte file with only its last page cached has 100 bytes cached (not a
/// page), evict says it dropped those 100 bytes, and a range 1000-2000 is 1000 bytes.
#[test]
fn partial_pages_count_for_the_bytes_they_cover() {
    let t = tmp();
    let p = t.path().join("part");
    write_file(&p, 12_388);
    sync_and_evict(&p);
    let f = File::open(&p).unwrap();
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::Random).unwrap();
    let mut b = [0u8; 10];
    sys::pread(f.as_fd(), &mut b, 12_300).unwrap();
    assert_eq!(cached(&p), 1, "the kernel has the last page only");
    let v = json(&run(bin().args(["stat", "--json", "-l"]).arg(&p)));
    assert_eq!(v["files"][0]["cached_bytes"], 12_388 - 3 * PAGE);
    let v = json(&run(bin().args(["evict", "--json"]).arg(&p)));
    assert_eq!(v["total"]["cached_bytes_before"], 100);
    assert_eq!(v["total"]["dropped_bytes"], 100);
    assert_eq!(cached(&p), 0);
    let v = json(&run(bin()
        .args(["stat", "--json", "-l", "--range", "1000-2000"])
        .arg(&p)));
    assert_eq!(v["files"][0]["bytes"], 1000);
    assert_eq!(v["files"][0]["cached_bytes"], 0);
    sys::pread(f.as_fd(), &mut b, 0).unwrap();
    assert_eq!(cached(&p), 1, "the first page only");
    let v = json(&run(bin()
        .args(["stat", "--json", "-l", "--range", "1000-5000"])
        .arg(&p)));
    assert_eq!(v["files"][0]["bytes"], 4000);
    assert_eq!(
        v["files"][0]["cached_bytes"],
        PAGE - 1000,
        "the first page's part in range"
    );
}

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
