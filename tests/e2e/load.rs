//! End-to-end tests of `load`: a cold tree and a big file brought in, --range, and --lock
//! (pages kept against evict, the bytes the kernel locked: VmLck); each count from the
//! kernel, never from what pagewise says it did.

use crate::cache_verbs::{mincore_pages, tree};
use crate::common::*;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn load_brings_a_cold_tree_and_big_file_in() {
    let t = tmp();
    let files = tree(t.path(), 5, 40, 6000);
    let big = t.path().join("big");
    // Not a multiple of the 2 MiB folios the large-file path reads in: the tail must load too.
    let big_len: u64 = (80 << 20) + 5000;
    write_file(&big, big_len as usize);
    run(bin().arg("evict").arg(t.path()));
    assert_eq!(files.iter().map(|p| cached(p)).sum::<u64>(), 0);
    assert_eq!(cached(&big), 0);
    let out = run(bin().args(["load", "--json"]).arg(t.path()));
    assert!(out.status.success());
    let v = json(&out);
    // >= 99% of the pages: DAMON pageout runs on these machines and may evict a few freshly
    // loaded pages before they are counted (CI once saw 39 of 11,676 go); a file load skipped
    // loses all of its pages, and the tail past the last 2 MiB folio is checked page by page.
    let want: u64 = files
        .iter()
        .map(|p| fs::metadata(p).unwrap().len().div_ceil(PAGE))
        .sum();
    let got: u64 = files.iter().map(|p| cached(p)).sum();
    assert!(got * 100 >= want * 99, "{got} of {want} small-file pages");
    let untouched: Vec<_> = files.iter().filter(|p| cached(p) == 0).collect();
    assert!(untouched.len() <= 2, "not loaded at all: {untouched:?}");
    let big_pages = big_len.div_ceil(PAGE);
    for (name, got) in [
        ("cachestat", cached(&big)),
        ("mincore", mincore_pages(&big)),
    ] {
        assert!(got * 100 >= big_pages * 99, "{name}: {got} of {big_pages}");
    }
    assert!(page_cached(&big, big_pages - 1) && page_cached(&big, big_pages - 2));
    assert_eq!(v["total"]["files"], 201);
    // A second load finds everything cached and reads nothing.
    // (All but what DAMON may have taken meanwhile, as above.)
    let v = json(&run(bin().args(["load", "--json"]).arg(t.path())));
    let again = v["total"]["already_cached_files"].as_u64().unwrap();
    assert!(
        (198..=201).contains(&again),
        "{again} of 201 already cached"
    );
}

#[test]
fn load_range_reads_only_the_range() {
    let t = tmp();
    let p = t.path().join("f");
    write_file(&p, 8 << 20);
    sync_and_evict(&p);
    run(bin().args(["load", "--range", "2M-4M"]).arg(&p));
    let f = File::open(&p).unwrap();
    assert_eq!(resident_pages(&f, 2 << 20, 2 << 20), 512);
    // Outside the range only what kernel readahead may add; far outside nothing.
    assert_eq!(resident_pages(&f, 6 << 20, 0), 0);
}

#[test]
fn load_lock_keeps_pages_resident_against_evict() {
    let t = tmp();
    let p = t.path().join("f");
    write_file(&p, 2 << 20);
    sync_and_evict(&p);
    let mut holder = bin()
        .args(["load", "--lock", "--for", "30s"])
        .arg(&p)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = first_line(holder.stderr.take().unwrap());
    assert!(line.contains("holding"), "{line}");
    let out = run(bin().args(["evict", "--why", "--json"]).arg(&p));
    let v = json(&out);
    assert_eq!(cached(&p), 512, "locked pages stay");
    assert_eq!(v["residue"][0]["reason"], "locked");
    // SIGINT ends the hold cleanly.
    Command::new("kill")
        .args(["-INT", &holder.id().to_string()])
        .status()
        .unwrap();
    let st = holder.wait().unwrap();
    assert!(st.success(), "{st:?}");
    run(bin().arg("evict").arg(&p));
    assert_eq!(cached(&p), 0);
}

/// `VmLck` of /proc/PID/status, in bytes: the kernel's count of a process's locked memory.
fn vm_locked(pid: u32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// Runs `load --lock --json ARGS` until it holds, reads its VmLck, ends it with SIGINT:
/// (the report, VmLck in bytes).
fn lock_and_measure(args: &[&str], paths: &[&Path]) -> (serde_json::Value, u64) {
    let mut holder = bin()
        .args(["load", "--lock", "--for", "30s", "--json"])
        .args(args)
        .args(paths)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = first_line(holder.stderr.take().unwrap());
    assert!(line.contains("holding"), "{line}");
    let locked = vm_locked(holder.id());
    Command::new("kill")
        .args(["-INT", &holder.id().to_string()])
        .status()
        .unwrap();
    let out = holder.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    (json(&out), locked)
}

#[test]
fn load_lock_reports_the_bytes_the_kernel_locked() {
    let t = tmp();
    // Not a page multiple: 10,000 bytes are locked, not three pages.
    let small = t.path().join("small");
    write_file(&small, 10_000);
    // Sparse: 16 MiB with 1 MiB of data at 4 MiB; its holes are not brought in nor locked.
    let sparse = t.path().join("sparse");
    {
        use std::os::unix::fs::FileExt;
        let f = File::create(&sparse).unwrap();
        f.set_len(16 << 20).unwrap();
        f.write_all_at(&vec![3u8; 1 << 20], 4 << 20).unwrap();
    }
    sync_and_evict(&small);
    sync_and_evict(&sparse);
    let (v, vmlck) = lock_and_measure(&[], &[&small, &sparse]);
    let size = fs::metadata(&small).unwrap().len();
    // Readahead around the data may bring some zeros in (unlocked); the holes are not locked.
    assert!(cached(&sparse) * PAGE >= 1 << 20, "the data is in");
    assert_eq!(v["total"]["locked_files"], 2);
    assert_eq!(v["total"]["locked_bytes"], size + (1 << 20));
    // The kernel locked whole pages of exactly those bytes.
    assert_eq!(vmlck, size.div_ceil(PAGE) * PAGE + (1 << 20));
    // A range: its bytes in the file, not the pages around them.
    let big = t.path().join("big");
    write_file(&big, 1 << 20);
    sync_and_evict(&big);
    let (v, vmlck) = lock_and_measure(&["--range", "5000-20000"], &[&big]);
    assert_eq!(v["total"]["locked_bytes"], 15_000);
    assert_eq!(vmlck, 20_480 - 4096);
    assert!(v["total"]["locked_bytes"].as_u64().unwrap() <= vmlck);
}
