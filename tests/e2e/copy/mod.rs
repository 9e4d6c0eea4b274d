//! End-to-end tests of `pagewise copy`: content (cmp) by every strategy, small-file batches,
//! metadata, sparseness, links, --verify, a tmpfs destination, cache residue measured with
//! cachestat and pre-cached source pages kept. Options as cp and rsync define them are
//! tests/copy_options.rs; ENOSPC, signals and limits tests/copy_faults.rs; hostile
//! destinations tests/copy_hostile.rs.

mod faults;
mod filters;
mod hostile;
mod limits;
mod options;
mod output;
mod resume;
mod sync;
mod sync_paths;

use crate::common::*;
use pagewise_core::sys;
use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

const SIZES: [usize; 7] = [0, 1, 4095, 4096, 4097, (1 << 20) + 1, 5 << 20];

#[test]
fn every_strategy_copies_exact_bytes_and_leaves_no_cache() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    for s in SIZES {
        write_file(&src.join(format!("f{s}")), s);
    }
    for s in SIZES {
        evict(&src.join(format!("f{s}")));
    }
    for strategy in ["auto", "direct", "dontcache", "drop-behind", "buffered"] {
        let dst = t.path().join(format!("dst-{strategy}"));
        let out = run_copy(&["--json", "--cache", strategy], &src, &dst);
        assert!(out.status.success(), "{strategy}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["files"], SIZES.len());
        let mut src_left = 0;
        let mut dst_left = 0;
        // Measure first: cmp itself reads both files into the cache.
        for s in SIZES {
            let (a, b) = (src.join(format!("f{s}")), dst.join(format!("f{s}")));
            src_left += cached(&a);
            dst_left += cached(&b);
        }
        for s in SIZES {
            let (a, b) = (src.join(format!("f{s}")), dst.join(format!("f{s}")));
            assert!(same(&a, &b), "{strategy}: {s} bytes identical");
            assert_eq!(fs::metadata(&b).unwrap().len(), s as u64);
        }
        let pages: u64 = SIZES.iter().map(|&s| (s as u64).div_ceil(4096)).sum();
        if strategy == "buffered" {
            assert!(
                dst_left > pages / 2,
                "buffered leaves the copy cached, like cp"
            );
        } else {
            // <= 1% of the data, as the kernel reports it.
            assert!(
                src_left * 100 <= pages,
                "{strategy}: source residue {src_left} of {pages} pages"
            );
            assert!(
                dst_left * 100 <= pages,
                "{strategy}: destination residue {dst_left} of {pages} pages"
            );
            assert_eq!(
                v["residue"]["dest_cached_bytes"].as_u64().unwrap(),
                dst_left * 4096
            );
        }
        for s in SIZES {
            evict(&src.join(format!("f{s}")));
        }
        assert!(leftovers(&dst).is_empty());
    }
}

/// Trees of small files go through the batched path (io_uring reads, write-back in batches):
/// exact bytes, nothing of the copy left cached, and source files cached before stay cached —
/// with unnamed (O_TMPFILE) and named temporary files.
#[test]
fn small_file_batches_copy_exactly_and_keep_precached_files() {
    let t = tmp();
    let src = t.path().join("src");
    let mut files = Vec::new();
    for d in 0..3 {
        let dir = src.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for i in 0..120usize {
            // 0 bytes to 300 KiB: mostly batched, a few above the batch limit.
            let size = (i * 7919 + d * 131) % (300 << 10);
            let p = dir.join(format!("f{i:03}"));
            write_file(&p, if i % 40 == 0 { 0 } else { size });
            files.push(p);
        }
    }
    for p in &files {
        evict(p);
    }
    // Every third file is in someone's cache.
    let precached: Vec<&PathBuf> = files.iter().step_by(3).collect();
    for p in &precached {
        fs::read(p).unwrap();
    }
    let pages = |ps: &[&PathBuf]| -> u64 {
        ps.iter()
            .map(|p| fs::metadata(p).unwrap().len().div_ceil(4096))
            .sum()
    };
    let pre_pages = pages(&precached);
    let others: Vec<&PathBuf> = files
        .iter()
        .skip(1)
        .step_by(3)
        .chain(files.iter().skip(2).step_by(3))
        .collect();
    let other_pages = pages(&others);
    for (i, extra) in [None, Some("--named-temp")].into_iter().enumerate() {
        let dst = t.path().join(format!("dst{i}"));
        let out = run(bin()
            .args(["copy", "--json"])
            .args(extra)
            .arg(&src)
            .arg(&dst));
        assert!(out.status.success(), "{extra:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["files"], files.len());
        let dst_of = |p: &Path| dst.join(p.strip_prefix(&src).unwrap());
        let dst_left: u64 = files.iter().map(|p| cached(&dst_of(p))).sum();
        let pre_left: u64 = precached.iter().map(|p| cached(p)).sum();
        for p in &precached {
            let want = fs::metadata(p).unwrap().len().div_ceil(4096);
            if cached(p) != want {
                eprintln!("{}: {} of {want} pages cached", p.display(), cached(p));
            }
        }
        let other_left: u64 = others.iter().map(|p| cached(p)).sum();
        // This machine runs DAMON pageout (paddr), which evicts whole physical regions it
        // judges cold, page cache included: a few of these pages can go behind our back
        // (measured: up to 40 of 4191). A copy that dropped them would lose far more.
        assert!(
            pre_left * 100 >= pre_pages * 98,
            "{extra:?}: pre-cached sources stay cached ({pre_left} of {pre_pages} pages)"
        );
        assert!(
            other_left * 100 <= other_pages,
            "{extra:?}: source residue {other_left} of {other_pages} pages"
        );
        assert!(
            dst_left * 100 <= pre_pages + other_pages,
            "{extra:?}: destination residue {dst_left} pages"
        );
        for p in &files {
            assert!(same(p, &dst_of(p)), "{}", p.display());
        }
        for d in 0..3 {
            assert!(leftovers(&dst.join(format!("d{d}"))).is_empty());
        }
        for p in &others {
            evict(p);
        }
    }
}

#[test]
fn precached_source_pages_stay_cached() {
    let t = tmp();
    let src = t.path().join("src");
    write_file(&src, 8 << 20);
    evict(&src);
    // Another user of the file has its first 2 MiB cached.
    let f = File::open(&src).unwrap();
    let mut buf = vec![0u8; 2 << 20];
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::Random).unwrap();
    sys::pread(f.as_fd(), &mut buf, 0).unwrap();
    let before_head = resident_pages(&f, 0, 2 << 20);
    assert_eq!(before_head, 512);
    for strategy in ["direct", "dontcache", "drop-behind"] {
        let dst = t.path().join(format!("dst-{strategy}"));
        assert!(run_copy(&["--cache", strategy], &src, &dst)
            .status
            .success());
        let head = resident_pages(&f, 0, 2 << 20);
        let tail = resident_pages(&f, 2 << 20, 0);
        // >= 98%: DAMON pageout may take a few behind our back (see above); dropping one
        // 128 KiB block of them would lose 32.
        assert!(
            head >= 502,
            "{strategy}: pages cached before stay cached ({head} of 512)"
        );
        assert!(
            tail <= 16,
            "{strategy}: pages the copy read are gone again ({tail})"
        );
        assert_eq!(cached(&dst), 0, "{strategy}: the copy is not cached");
        assert!(same(&src, &dst));
        // cmp read the whole source: put it back to "first 2 MiB cached".
        sys::fadvise(f.as_fd(), 2 << 20, 0, sys::Advice::DontNeed).unwrap();
    }
}

#[test]
fn preserve_keeps_mode_owner_times_xattrs_and_links() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    let f = src.join("d/file");
    write_file(&f, 10_000);
    fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
    // The xattr is set with setxattr(2) itself: no tool to be missing, nothing to skip.
    let cpath = std::ffi::CString::new(f.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C strings and a 3-byte value.
    let r = unsafe {
        libc::setxattr(
            cpath.as_ptr(),
            c"user.pagewise".as_ptr(),
            b"yes".as_ptr().cast(),
            3,
            0,
        )
    };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
    if sys::euid() == 0 {
        std::os::unix::fs::chown(&f, Some(1234), Some(4321)).unwrap();
    }
    let old = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(old)
        .unwrap();
    fs::set_permissions(src.join("d"), fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("d/file", src.join("link")).unwrap();
    fs::hard_link(&f, src.join("hard")).unwrap();
    let dst = t.path().join("dst");
    assert!(run_copy(&["-p"], &src, &dst).status.success());
    let m = fs::metadata(dst.join("d/file")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o640);
    assert_eq!(m.modified().unwrap(), old);
    if sys::euid() == 0 {
        assert_eq!((m.uid(), m.gid()), (1234, 4321));
    }
    let cdst = std::ffi::CString::new(dst.join("d/file").as_os_str().as_bytes()).unwrap();
    let mut val = [0u8; 16];
    // SAFETY: valid C strings; val is writable for its length.
    let n = unsafe {
        libc::getxattr(
            cdst.as_ptr(),
            c"user.pagewise".as_ptr(),
            val.as_mut_ptr().cast(),
            val.len(),
        )
    };
    assert_eq!(n, 3, "getxattr: {}", std::io::Error::last_os_error());
    assert_eq!(&val[..3], b"yes");
    assert_eq!(fs::metadata(dst.join("d")).unwrap().mode() & 0o7777, 0o750);
    assert_eq!(
        fs::read_link(dst.join("link")).unwrap(),
        PathBuf::from("d/file")
    );
    let h = fs::metadata(dst.join("hard")).unwrap();
    assert_eq!(h.ino(), m.ino(), "hard links stay hard links");
    assert_eq!(m.nlink(), 2);
}

#[test]
fn sparse_files_stay_sparse() {
    let t = tmp();
    let src = t.path().join("sparse");
    let f = File::create(&src).unwrap();
    f.set_len(1 << 30).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[1u8; 8192], 300 << 20).unwrap();
    f.write_all_at(&[2u8; 100], (1 << 30) - 100).unwrap();
    drop(f);
    for strategy in ["auto", "direct", "dontcache", "drop-behind", "buffered"] {
        let dst = t.path().join(format!("dst-{strategy}"));
        assert!(run_copy(&["--cache", strategy], &src, &dst)
            .status
            .success());
        let m = fs::metadata(&dst).unwrap();
        assert_eq!(m.len(), 1 << 30);
        assert!(
            m.blocks() * 512 < 1 << 20,
            "{strategy}: {} bytes allocated",
            m.blocks() * 512
        );
        assert!(same(&src, &dst), "{strategy}");
    }
}

#[test]
fn verify_reads_back_from_disk() {
    let t = tmp();
    let src = t.path().join("f");
    write_file(&src, 3 << 20);
    let dst = t.path().join("g");
    let out = run_copy(&["--verify", "--fsync", "--json"], &src, &dst);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verified_files"], 1);
    assert_eq!(v["verify_mismatches"], 0);
    assert_eq!(
        cached(&dst),
        0,
        "verification does not leave the copy cached"
    );
}

#[test]
fn tmpfs_destination_works_whatever_its_direct_io_rules() {
    let Some(m) = Mount::try_tmpfs("64m") else {
        return;
    };
    let t = tmp();
    let src = t.path().join("f");
    write_file(&src, (4 << 20) + 123);
    for strategy in ["direct", "dontcache", "auto"] {
        let dst = m.path().join(strategy);
        let out = run_copy(&["--cache", strategy], &src, &dst);
        assert!(
            out.status.success(),
            "{strategy}: falls back instead of failing"
        );
        assert!(same(&src, &dst));
    }
}

/// A sparse image whose first data extent starts at offset 0: no strategy leaves any of the
/// source cached — readahead past an extent fills the hole after it with zero pages, which
/// the last drop pass now covers (cachestat of the real file). Before: 4 MiB (the first
/// extent's size of readahead into the hole) stayed cached per image with the default
/// strategy and drop-behind.
#[test]
fn a_sparse_source_is_left_uncached_holes_included() {
    let t = tmp();
    let src = t.path().join("image");
    {
        use std::os::unix::fs::FileExt;
        let f = File::create(&src).unwrap();
        f.set_len(1 << 30).unwrap();
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        f.write_all_at(&data[..2 << 20], 500 << 20).unwrap();
        f.sync_all().unwrap();
    }
    for strategy in ["auto", "dontcache", "drop-behind", "direct"] {
        let dst = t.path().join(format!("copy-{strategy}"));
        sync_and_evict(&src);
        assert_eq!(cs(&src).cache, 0, "the source must start cold");
        let o = run(bin()
            .args(["copy", "--cache", strategy])
            .arg(&src)
            .arg(&dst));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(
            cs(&src).cache,
            0,
            "{strategy}: source pages left cached: {}",
            stderr(&o)
        );
        assert!(same(&src, &dst), "{strategy}");
        assert!(
            fs::metadata(&dst).unwrap().blocks() * 512 <= 8 << 20,
            "{strategy}: holes must stay holes"
        );
    }
}

/// `auto` on a file of 1 GiB and more measures O_DIRECT and RWF_DONTCACHE on its first 256
/// MiB (64 MiB windows, each way in turn) and copies the rest the faster way: the report says what
/// it measured and chose, the copy is exact (also by `--verify`'s per-chunk digest, which the
/// windows feed), the pages of the source cached before stay and the others are gone
/// (cachestat of the real files).
#[test]
fn auto_measures_each_way_on_a_large_file() {
    let t = tmp();
    let src = t.path().join("big");
    write_file(&src, (1 << 30) + 12345);
    sync_and_evict(&src);
    // 8 MiB of the source cached before the copy: someone else's, kept.
    let f = File::open(&src).unwrap();
    sys::fadvise(f.as_fd(), 600 << 20, 8 << 20, sys::Advice::WillNeed).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let before = cs(&src).cache;
    let dst = t.path().join("copy");
    let o = run(bin()
        .args(["copy", "--json", "--verify"])
        .arg(&src)
        .arg(&dst));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let choices = v["auto_choices"].as_array().expect("auto_choices");
    assert_eq!(choices.len(), 1, "{v}");
    let c = &choices[0];
    assert_eq!(c["measured_bytes"], 128u64 << 20);
    let ways = ["direct", "dontcache"];
    for w in ways {
        assert!(c["rates_bytes_per_s"][w].as_f64().unwrap() > 0.0, "{c}");
    }
    let chosen = c["chosen"].as_str().unwrap();
    assert!(ways.contains(&chosen), "{c}");
    assert_eq!(v["strategies"][chosen], 1, "{v}");
    assert_eq!(v["verify_mismatches"], 0);
    assert_eq!(v["verified_files"], 1);
    let after = cs(&src).cache;
    assert!(
        after <= before && after * 100 >= before * 99,
        "source pages: {before} cached before, {after} after"
    );
    assert_eq!(cs(&dst).cache, 0, "nothing of the copy cached");
    assert!(same(&src, &dst));
}
