//! End-to-end tests of `evict`: dirty pages synced and dropped, --no-sync, --range, pages a
//! mapping keeps, a mounted loop device, and a file another user owns; each count from
//! cachestat (cross-checked with mincore), never from what pagewise says it did.

use crate::cache_verbs::{mincore_pages, tree};
use crate::common::*;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn evict_drops_dirty_pages_of_a_tree() {
    let t = tmp();
    let files = tree(t.path(), 4, 50, 8192);
    // Fresh writes: dirty in the cache.
    // (Dirty counts need cachestat, 6.5+; before that the setup is taken on trust.)
    let dirty: Option<u64> = files.iter().map(|p| dirty_pages(p)).sum();
    assert!(
        dirty.is_none_or(|d| d > 0),
        "files were written just now and should be dirty"
    );
    let out = run(bin().args(["evict", "--json"]).arg(t.path()));
    assert!(out.status.success());
    let v = json(&out);
    let left: u64 = files.iter().map(|p| cached(p)).sum();
    let left_mincore: u64 = files.iter().map(|p| mincore_pages(p)).sum();
    assert_eq!(
        left, 0,
        "every page, dirty ones included, is gone (cachestat)"
    );
    assert_eq!(left_mincore, 0, "mincore agrees");
    assert_eq!(v["total"]["stayed_bytes"], 0);
    assert_eq!(v["total"]["files"], 200);
    assert!(v["total"]["dropped_bytes"].as_u64().unwrap() >= 400 * PAGE);
}

#[test]
fn evict_no_sync_leaves_dirty_pages_and_says_so() {
    let t = tmp();
    let p = t.path().join("f");
    write_file(&p, 64 << 10);
    assert!(cs(&p).dirty > 0);
    let out = run(bin().args(["evict", "--no-sync", "--json"]).arg(&p));
    let v = json(&out);
    let k = cs(&p);
    // Whatever the kernel still holds is exactly what pagewise reports as stayed.
    assert_eq!(v["total"]["stayed_bytes"], k.cache * PAGE);
    if k.dirty > 0 {
        assert_eq!(v["residue"][0]["reason"], "dirty");
    }
}

#[test]
fn evict_range_drops_only_the_range() {
    let t = tmp();
    let p = t.path().join("f");
    write_file(&p, 8 << 20);
    // A range on large-folio boundaries (2 MiB) is dropped exactly.
    let out = run(bin().args(["evict", "--range", "2M-6M"]).arg(&p));
    assert!(out.status.success());
    let f = File::open(&p).unwrap();
    assert_eq!(resident_pages(&f, 2 << 20, 4 << 20), 0);
    assert_eq!(resident_pages(&f, 0, 2 << 20), 512);
    assert_eq!(resident_pages(&f, 6 << 20, 0), 512);
    // An unaligned range: whatever stays is reported as the kernel shows it, with the reason.
    let p2 = t.path().join("g");
    write_file(&p2, 4 << 20);
    let v = json(&run(bin()
        .args(["evict", "--json", "--range", "1M-3M"])
        .arg(&p2)));
    let f2 = File::open(&p2).unwrap();
    let inside = resident_pages(&f2, 1 << 20, 2 << 20);
    assert_eq!(v["total"]["stayed_bytes"], inside * PAGE);
    if inside > 0 {
        assert_eq!(v["residue"][0]["reason"], "partial_folio");
    }
    assert_eq!(resident_pages(&f2, 0, 1 << 20), 256, "outside untouched");
}

#[test]
fn evict_reports_pages_kept_by_a_mapping_process() {
    let t = tmp();
    let p = t.path().join("mapped");
    write_file(&p, 1 << 20);
    // A child that maps the file and touches every page, then sleeps.
    let script = format!(
        "import mmap,sys,time\nf=open('{}','rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\ns=sum(m[i] for i in range(0,len(m),4096))\nprint('ready',flush=True)\ntime.sleep(60)\n",
        p.display()
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let line = first_line(child.stdout.take().unwrap());
    assert_eq!(line.trim(), "ready");
    let out = run(bin().args(["evict", "--why", "--json"]).arg(&p));
    child.kill().unwrap();
    child.wait().unwrap();
    let v = json(&out);
    let stayed = v["total"]["stayed_bytes"].as_u64().unwrap() / PAGE;
    assert!(stayed > 0, "mapped pages cannot be dropped");
    assert_eq!(
        stayed,
        cached(&p),
        "what we report is what the kernel shows"
    );
    assert_eq!(v["residue"][0]["reason"], "mapped");
    let pids: Vec<u64> = v["residue"][0]["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert!(
        pids.contains(&(child.id() as u64)),
        "{pids:?} names the mapping process"
    );
    // Once the mapper is gone, the pages can go.
    run(bin().arg("evict").arg(&p));
    assert_eq!(cached(&p), 0);
}

#[test]
fn evict_of_a_mounted_loop_device_says_mounted() {
    if !require_root("losetup and mount") {
        return;
    }
    let t = tmp();
    let Some(lm) = LoopMount::new(t.path()) else {
        return;
    };
    let dev = PathBuf::from(lm.dev.clone().unwrap());
    write_file(&lm.mnt.join("f"), 1 << 20);
    assert!(Command::new("sync").status().unwrap().success());
    let (out, _) = run_deadline(bin().args(["evict", "--json"]).arg(&dev), 20);
    let v = json(&out);
    // What the filesystem holds of its device (superblock, group descriptors, journal) stays.
    let kernel = cached(&dev);
    assert!(kernel > 0, "a mounted filesystem holds pages of its device");
    let r = &v["residue"][0];
    assert_eq!(r["path"], dev.to_str().unwrap());
    assert_eq!(r["stayed_bytes"], kernel * PAGE);
    assert_eq!(r["reason"], "mounted", "{v}");
    // The image file under the loop device is not the device: its residue is no tmpfs either.
    let (out, _) = run_deadline(
        bin().args(["evict", "--json"]).arg(t.path().join("img")),
        20,
    );
    let v = json(&out);
    if let Some(r) = v["residue"].get(0) {
        assert_ne!(r["reason"], "no_backing_store", "{v}");
    }
}

#[test]
fn non_owner_sees_unknown_and_its_evict_drops_the_pages() {
    if !require_root("switching to user nobody") {
        return;
    }
    let t = tmp();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    open_up_ancestors(t.path());
    let f = t.path().join("F");
    write_file(&f, 16 << 20);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o644)).unwrap();
    sync_and_evict(&f);
    fs::read(&f).unwrap();
    let pages = (16u64 << 20) / PAGE;
    assert_eq!(cached(&f), pages, "setup: fully cached, clean");
    assert_eq!(cs(&f).dirty, 0);

    let out = run(as_nobody().arg("stat").arg(&f));
    let table = stdout(&out);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let row = lines
        .find(|l| l.starts_with(f.to_str().unwrap()))
        .expect("a row for F");
    let end = header_end(header, "CACHED");
    assert_eq!(
        cell_ending_at(row, end, "unknown".len()),
        "unknown",
        "CACHED column of: {row}"
    );
    assert!(!table.contains("0.0%*"), "{table}");

    let out = run(as_nobody().args(["stat", "--json", "-l"]).arg(&f));
    let v = json(&out);
    assert!(v["files"][0]["cached_bytes"].is_null());
    let reason = v["files"][0]["unknown_reason"].as_str().unwrap_or("");
    assert!(!reason.is_empty(), "unknown_reason explains it");

    let out = run(as_nobody().arg("evict").arg(&f));
    let said = stdout(&out);
    assert!(!said.contains("dropped 0 B of 0 B"), "{said}");
    assert!(said.contains("unknown"), "{said}");
    let left = cached(&f);
    assert!(
        left * 100 <= pages,
        "fadvise(DONTNEED) works for readers: {left} pages left"
    );
}
