//! End-to-end tests of `cgroups` and `evict --cgroup` on this machine's memory hierarchy (v1's
//! memory controller on a hybrid layout, or v2 with memory): a child cgroup made beneath the
//! test's own cgroup, a child process moved into it that reads a file, and every assertion on
//! what the kernel reports (the group's memory.stat, cachestat of the file).
//!
//! Safety: groups are made only beneath this process's own memory cgroup and removed by a Drop
//! guard, also when a test fails; only processes the test starts are moved into them.

use crate::common::*;
use pagewise_core::cgroup::{self, Hierarchy};
use std::fs;
use std::path::Path;
use std::process::Stdio;

/// How far memory.stat may lag the charges: MEMCG_CHARGE_BATCH pages per CPU (64; 32 before
/// 6.1). Before Linux 5.13 (rstat) each CPU's batch reaches memory.stat only once it is full,
/// with no flush ever: 5.10 showed 8 MiB read in a group as 2046 pages, for good. Since 6.8
/// the kernel's periodic flush (every 2 s) catches up.
fn stat_batch() -> u64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    64 * PAGE * cpus
}

#[test]
fn cgroups_shows_a_child_groups_reads_and_evict_cgroup_drops_them() {
    let Some(cg) = ChildCgroup::new() else { return };
    let t = tmp();
    let f = t.path().join("f");
    write_file(&f, 8 << 20);
    sync_and_evict(&f);
    assert_eq!(cached(&f), 0);
    cg.read_in(&f);
    let pages = cached(&f);
    assert_eq!(pages, 2048, "the child read the whole file");
    // memory.stat lags by up to MEMCG_CHARGE_BATCH pages per CPU: for good before 5.13 (5.10:
    // 2 pages short), until the kernel's periodic flush since 6.8 (6.12 once showed 19 pages
    // short right after the read).
    let charged = cg.file_bytes_once(|b| b >= 8 << 20);
    assert!(
        charged + stat_batch() >= 8 << 20 && charged <= (8 << 20) + stat_batch(),
        "memory.stat shows the reads: {charged}"
    );

    // `cgroups PATH` reports what memory.stat says (no process left in the group: stable).
    let out = run(bin().args(["cgroups", "--json"]).arg(&cg.dir));
    assert!(out.status.success());
    let v = json(&out);
    let shown = v["groups"][0]["file_bytes"].as_u64().unwrap();
    assert!(shown.abs_diff(cg.file_bytes()) <= stat_batch(), "{shown}");
    assert_eq!(v["groups"][0]["depth"], 0);
    // From our own group, the child is one level down, by its cgroup name.
    let name = cg.dir.file_name().unwrap().to_str().unwrap().to_string();
    let out = run(bin().args(["cgroups", "--self", "--json", "-d", "1"]));
    assert!(out.status.success());
    let v = json(&out);
    let child = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["cgroup"].as_str().unwrap().ends_with(&format!("/{name}")))
        .expect("the child group is listed");
    assert_eq!(child["depth"], 1);
    assert!(child["file_bytes"].as_u64().unwrap() + stat_batch() >= 8 << 20);
    // The table names it too, and --top 1 of the child alone is the child.
    let out = run(bin().args(["cgroups", "--top", "1"]).arg(&cg.dir));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&name));

    // evict --cgroup: the kernel shows the group's file cache and the file's pages gone.
    if !reclaim_or_refused(&cg, &f, 2048) {
        return;
    }
    let out = run(bin().args(["evict", "--json", "--cgroup"]).arg(&cg.dir));
    assert!(out.status.success());
    let v = json(&out);
    assert!(v["before"]["file_bytes"].as_u64().unwrap() + stat_batch() >= 8 << 20);
    let after = cg.file_bytes_once(|b| b < 256 << 10);
    assert!(after <= stat_batch(), "memory.stat after evict: {after}");
    // What evict reported is what memory.stat showed then: the same figure, or on 6.8+ one
    // the periodic flush has since moved by at most the per-CPU batches.
    let reported = v["after"]["file_bytes"].as_u64().unwrap();
    assert!(
        reported.abs_diff(after) <= stat_batch(),
        "{reported} vs {after}"
    );
    assert_eq!(cached(&f), 0, "cachestat: the file's pages are gone");
    // Before Linux 6.13 memory.reclaim takes no swappiness: plain memory.reclaim, said so.
    let refused = v["notices"].as_array().unwrap().iter().any(|n| {
        n.as_str()
            .unwrap()
            .contains("refuses memory.reclaim swappiness=0")
    });
    assert_eq!(
        v["method"],
        match Hierarchy::of(&cg.dir) {
            Hierarchy::V1 => "memory.force_empty",
            Hierarchy::V2 if refused => "memory.reclaim",
            Hierarchy::V2 => "memory.reclaim swappiness=0",
        },
        "{v}"
    );
}

/// True when the kernel can reclaim a group (v1's memory.force_empty, v2's memory.reclaim). A
/// v2 group without memory.reclaim (before Linux 5.19: Debian 11's 5.10) cannot be reclaimed:
/// `evict --cgroup` must refuse, dry run or not, with one line naming what is missing and
/// before acting — the group's memory.stat and the file's `pages` cached pages as they were —
/// and the test is skipped, saying so.
fn reclaim_or_refused(cg: &ChildCgroup, f: &Path, pages: u64) -> bool {
    if Hierarchy::of(&cg.dir) == Hierarchy::V1 || cg.dir.join("memory.reclaim").exists() {
        return true;
    }
    let stat = cg.file_bytes();
    for dry in [false, true] {
        let mut c = bin();
        c.args(["evict", "--cgroup"]).arg(&cg.dir);
        if dry {
            c.arg("--dry-run");
        }
        let out = run(&mut c);
        assert_eq!(out.status.code(), Some(1), "refused (dry run: {dry})");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("no memory.reclaim") && err.contains("5.19"),
            "{err}"
        );
        assert!(stdout(&out).is_empty(), "nothing reported");
        assert_eq!(cg.file_bytes(), stat, "memory.stat as it was");
        assert_eq!(cached(f), pages, "the file's pages stay");
    }
    require(
        false,
        "evict --cgroup: cgroup v2 has no memory.reclaim before Linux 5.19 (refused, checked)",
    )
}

#[test]
fn evict_cgroup_table_and_dry_run() {
    let Some(cg) = ChildCgroup::new() else { return };
    let t = tmp();
    let f = t.path().join("g");
    write_file(&f, 1 << 20);
    sync_and_evict(&f);
    cg.read_in(&f);
    if !reclaim_or_refused(&cg, &f, 256) {
        return;
    }
    let before = cg.file_bytes_once(|b| b >= 1 << 20);
    let out = run(bin().args(["evict", "--dry-run", "--cgroup"]).arg(&cg.dir));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("would reclaim"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("before")), "{text}");
    // A dry run reclaims nothing: cachestat shows every page; memory.stat the same figure, up
    // to its per-CPU lag (6.8+).
    assert_eq!(cached(&f), 256);
    let now = cg.file_bytes();
    assert!(now.abs_diff(before) <= stat_batch(), "{now} vs {before}");
    let out = run(bin().args(["evict", "--cgroup"]).arg(&cg.dir));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("dropped"));
    assert_eq!(cached(&f), 0);
}

#[test]
fn v1_refuses_a_partial_reclaim_and_errors_name_the_path() {
    let Some(cg) = ChildCgroup::new() else { return };
    if Hierarchy::of(&cg.dir) == Hierarchy::V1 {
        let out = run(bin()
            .args(["evict", "--bytes", "1M", "--cgroup"])
            .arg(&cg.dir));
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("v1 has no partial reclaim"), "{err}");
    }
    let out = run(bin().args(["cgroups", "/no/such/cgroup"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/no/such/cgroup/memory.stat: open failed"),
        "{err}"
    );
}

#[test]
fn stat_by_cgroup_names_the_group_that_read_the_pages() {
    let Some(cg) = ChildCgroup::new() else { return };
    let t = tmp();
    let theirs = t.path().join("theirs");
    let ours = t.path().join("ours");
    write_file(&theirs, 2 << 20);
    write_file(&ours, 1 << 20);
    sync_and_evict(&theirs);
    sync_and_evict(&ours);
    cg.read_in(&theirs);
    // Our own reads are charged to our own group.
    fs::read(&ours).unwrap();
    let own = cgroup::own_memory_cgroup().unwrap();
    let name = |dir: &Path| cgroup::cgroup_name(dir, &cgroup::memory_mounts());
    let out = run(bin()
        .args(["stat", "--by-cgroup", "-l", "--json"])
        .arg(&theirs)
        .arg(&ours));
    assert!(out.status.success());
    let v = json(&out);
    let per_file = |p: &Path| {
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p.to_str().unwrap())
            .unwrap()
            .clone()
    };
    let f = per_file(&theirs);
    assert_eq!(f["cgroups"][0]["cgroup"], name(&cg.dir));
    assert_eq!(f["cgroups"][0]["bytes"], cached(&theirs) * 4096);
    assert_eq!(f["cgroups"].as_array().unwrap().len(), 1);
    let f = per_file(&ours);
    assert_eq!(f["cgroups"][0]["cgroup"], name(&own));
    assert_eq!(f["cgroups"][0]["bytes"], cached(&ours) * 4096);
    assert_eq!(
        v["total"]["cached_bytes"],
        (cached(&theirs) + cached(&ours)) * 4096
    );
    // Not root: said before any work.
    if require(on_path("setpriv"), "setpriv (util-linux) is missing") {
        let out = run(as_nobody().args(["stat", "--by-cgroup"]).arg(&ours));
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("known only to root"));
    }
}

/// Sum of the per-cgroup bytes of a `stat --by-cgroup` report.
fn per_cgroup_sum(v: &serde_json::Value) -> u64 {
    v["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap())
        .sum()
}

#[test]
fn stat_by_cgroup_figures_add_up_to_the_total() {
    if !require_root("stat --by-cgroup") {
        return;
    }
    let t = tmp();
    // Sizes that are not page multiples: each file's last page holds fewer bytes than a page.
    let sizes = [1usize, 5000, 10_000, 3 * 4096 + 7];
    let mut want = 0;
    for (i, &s) in sizes.iter().enumerate() {
        let p = t.path().join(format!("f{i}"));
        write_file(&p, s);
        sync_and_evict(&p);
        fs::read(&p).unwrap();
        // The kernel's figure: the cached pages' bytes, the last one only up to the size.
        want += (cached(&p) * 4096).min(s as u64);
    }
    assert_eq!(
        want,
        sizes.iter().sum::<usize>() as u64,
        "all of them cached"
    );
    let out = run(bin()
        .args(["stat", "--by-cgroup", "-l", "--json"])
        .arg(t.path()));
    assert!(out.status.success());
    let v = json(&out);
    assert_eq!(v["total"]["cached_bytes"], want);
    assert_eq!(v["total"]["unresolved_bytes"], 0);
    assert_eq!(per_cgroup_sum(&v), want, "{v}");
    for f in v["files"].as_array().unwrap() {
        let sum: u64 = f["cgroups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(f["cached_bytes"], sum, "{f}");
        assert!(sum <= f["size"].as_u64().unwrap(), "{f}");
    }
}

#[test]
fn stat_by_cgroup_of_a_huge_sparse_file_is_fast_and_exact() {
    if !require_root("stat --by-cgroup") {
        return;
    }
    use std::os::unix::fs::FileExt;
    let t = tmp();
    let p = t.path().join("sparse");
    let f = fs::File::create(&p).unwrap();
    // 100 TiB where the filesystem allows it, else its largest (ext4: 16 TiB - 4 KiB).
    let size = if f.set_len(100 << 40).is_ok() {
        100u64 << 40
    } else {
        let s = (16u64 << 40) - 4096;
        f.set_len(s).unwrap();
        s
    };
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    f.write_all_at(&vec![5u8; 512 << 10], size / 3 / 4096 * 4096)
        .unwrap();
    f.sync_all().unwrap();
    // A read of a hole caches its zero pages: they are charged like any other.
    let mut buf = vec![0u8; 512 << 10];
    f.read_exact_at(&mut buf, size / 3 * 2 / 4096 * 4096)
        .unwrap();
    let kernel = cached(&p) * 4096;
    assert_eq!(kernel, 1 << 20);
    let start = std::time::Instant::now();
    let mut child = bin()
        .args(["stat", "--by-cgroup", "--json"])
        .arg(&p)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(10) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("stat --by-cgroup of a {size}-byte sparse file ran past 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v = json(&out);
    assert_eq!(v["total"]["cached_bytes"], kernel, "{v}");
    assert_eq!(per_cgroup_sum(&v), kernel, "{v}");
}
