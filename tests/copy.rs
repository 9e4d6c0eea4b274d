//! End-to-end tests of `pagewise copy`: content (cmp), metadata, sparseness, links, cache residue
//! measured with cachestat, pre-cached source pages kept, ENOSPC and SIGINT leaving no partial
//! file under a final name.

mod common;
use common::*;
use pagewise_core::sys;
use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn evict(p: &Path) {
    let f = File::open(p).unwrap();
    f.sync_all().unwrap();
    sys::fadvise(f.as_fd(), 0, 0, sys::Advice::DontNeed).unwrap();
    assert_eq!(cached(p), 0);
}

fn same(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

fn leftovers(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".pagewise-"))
        .collect()
}

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
        let out = run(bin()
            .args(["copy", "--json", "--cache", strategy])
            .arg(&src)
            .arg(&dst));
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
        assert!(run(bin()
            .args(["copy", "--cache", strategy])
            .arg(&src)
            .arg(&dst))
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
    assert!(run(bin().args(["copy", "-p"]).arg(&src).arg(&dst))
        .status
        .success());
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
        assert!(run(bin()
            .args(["copy", "--cache", strategy])
            .arg(&src)
            .arg(&dst))
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
    let out = run(bin()
        .args(["copy", "--verify", "--fsync", "--json"])
        .arg(&src)
        .arg(&dst));
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

/// A size-limited tmpfs, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    /// None (with the reason printed: the test is skipped) where tmpfs cannot be mounted.
    fn new(size: &str) -> Option<Tmpfs> {
        let d = tmp();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !require(ok, "mounting a tmpfs (root)") {
            return None;
        }
        Some(Tmpfs(d))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn enospc_leaves_no_partial_file_and_other_files_are_copied() {
    let Some(fs_small) = Tmpfs::new("3m") else {
        return;
    };
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    write_file(&src.join("a-small"), 100_000);
    write_file(&src.join("b-big"), 8 << 20);
    for (i, extra) in [None, Some("--named-temp")].into_iter().enumerate() {
        let dst = fs_small.path().join(format!("dst{i}"));
        let out = run(bin().arg("copy").args(extra).arg(&src).arg(&dst));
        assert_eq!(out.status.code(), Some(2), "per-file failure: exit 2");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("b-big") && err.contains("No space left on device"),
            "{err}"
        );
        assert!(
            !dst.join("b-big").exists(),
            "no half file under the final name"
        );
        assert!(
            leftovers(&dst).is_empty(),
            "temporary removed: {:?}",
            leftovers(&dst)
        );
        assert!(same(&src.join("a-small"), &dst.join("a-small")));
    }
}

/// The batched small-file path on a full filesystem: the files that fit are complete, the
/// others are reported and absent — never a short file under a final name.
#[test]
fn enospc_in_a_small_file_batch_leaves_only_complete_files() {
    let Some(fs_small) = Tmpfs::new("2m") else {
        return;
    };
    let t = tmp();
    let src = t.path().join("many");
    fs::create_dir(&src).unwrap();
    for i in 0..60 {
        write_file(&src.join(format!("f{i:02}")), 50_000 + i * 97);
    }
    for (i, extra) in [None, Some("--named-temp")].into_iter().enumerate() {
        let dst = fs_small.path().join(format!("dst{i}"));
        let out = run(bin().arg("copy").args(extra).arg(&src).arg(&dst));
        assert_eq!(out.status.code(), Some(2), "per-file failure: exit 2");
        assert!(String::from_utf8_lossy(&out.stderr).contains("No space left on device"));
        let mut copied = 0;
        for e in fs::read_dir(&dst).unwrap().flatten() {
            assert!(
                same(&src.join(e.file_name()), &e.path()),
                "{}: complete or absent",
                e.path().display()
            );
            copied += 1;
        }
        assert!(copied > 0, "what fits is copied");
        assert!(leftovers(&dst).is_empty());
        fs::remove_dir_all(&dst).unwrap();
    }
}

#[test]
fn tmpfs_destination_works_whatever_its_direct_io_rules() {
    let Some(m) = Tmpfs::new("64m") else {
        return;
    };
    let t = tmp();
    let src = t.path().join("f");
    write_file(&src, (4 << 20) + 123);
    for strategy in ["direct", "dontcache", "auto"] {
        let dst = m.path().join(strategy);
        let out = run(bin()
            .args(["copy", "--cache", strategy])
            .arg(&src)
            .arg(&dst));
        assert!(
            out.status.success(),
            "{strategy}: falls back instead of failing"
        );
        assert!(same(&src, &dst));
    }
}

#[test]
fn sigint_leaves_no_partial_file() {
    let t = tmp();
    let src = t.path().join("big");
    write_file(&src, 256 << 20);
    evict(&src);
    let dst_dir = t.path().join("out");
    fs::create_dir(&dst_dir).unwrap();
    // drop-behind with tiny chunks and one I/O in flight waits on every chunk: slow enough.
    let child = bin()
        .args([
            "copy",
            "--cache",
            "drop-behind",
            "--chunk",
            "16K",
            "--depth",
            "1",
        ])
        .arg(&src)
        .arg(&dst_dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    if out.status.code() == Some(0) {
        // Finished before the signal: then the copy must be complete.
        assert!(same(&src, &dst_dir.join("big")));
        return;
    }
    assert_eq!(out.status.code(), Some(130));
    assert!(!dst_dir.join("big").exists(), "no final-named partial file");
    assert!(leftovers(&dst_dir).is_empty(), "temporary removed");
}

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
    let src = t.path().join("src");
    let sub = src.join("sub");
    fs::create_dir_all(&sub).unwrap();
    write_file(&src.join("data"), 10_000);
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
    let out = run(bin().args(["copy", "-p", "--json"]).arg(&src).arg(&dst));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let itemize = Command::new("rsync")
        .args(["-naHAXc", "--itemize-changes", "--specials", "--devices"])
        .arg(format!("{}/", src.display()))
        .arg(format!("{}/", dst.display()))
        .output()
        .unwrap();
    assert!(itemize.status.success());
    assert_eq!(
        String::from_utf8_lossy(&itemize.stdout),
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
        let out = run(bin().args(["copy", "-aT"]).arg(&src).arg(&dst));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(same(&src.join("a"), &dst.join("a")));
    assert!(!dst.join("src").exists(), "-T never copies into DST/SRC");
    let out = run(bin().args(["copy", "-T"]).arg(&src).arg(&src).arg(&dst));
    assert_eq!(out.status.code(), Some(1), "-T takes one source");
    let into = t.path().join("into");
    fs::create_dir(&into).unwrap();
    write_file(&into.join("kept"), 10);
    let out = run(bin().arg("copy").arg(src.join(".")).arg(&into));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// A copy killed (SIGKILL: no cleanup) at several moments is finished by the same command with
/// -u: rsync's itemize then finds nothing to change and no temporary is left; a further -u run
/// copies nothing.
/// rsync's own comparison of two trees: every difference it would transfer or change,
/// content compared by checksum, hard links, ACLs, xattrs, devices and specials included.
fn rsync_differences(src: &Path, dst: &Path) -> String {
    let itemize = Command::new("rsync")
        .args(["-naHAXc", "--itemize-changes", "--specials", "--devices"])
        .arg(format!("{}/", src.display()))
        .arg(format!("{}/", dst.display()))
        .output()
        .unwrap();
    assert!(itemize.status.success(), "rsync: {itemize:?}");
    String::from_utf8_lossy(&itemize.stdout).into_owned()
}

/// Root (devices, capabilities: `why`), rsync to compare trees and setfacl to make ACLs.
fn can_compare_with_rsync(why: &str) -> bool {
    require_root(why)
        && have_rsync()
        && require(
            Command::new("setfacl").arg("--version").output().is_ok(),
            "setfacl (apt package acl)",
        )
}

/// Runs `args` (a tool and its options) on `p`; it must succeed.
fn tool(args: &[&str], p: &Path) {
    let st = Command::new(args[0])
        .args(&args[1..])
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "{args:?} {}", p.display());
}

fn have_rsync() -> bool {
    require(
        Command::new("rsync").arg("--version").output().is_ok(),
        "rsync (apt package rsync)",
    )
}

/// Temporaries (`.NAME.pagewise-PID-N.tmp`) anywhere below `dir`.
fn stray_temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut out = leftovers(dir);
    for e in fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(stray_temporaries(&e.path()));
        }
    }
    out
}

/// SIGKILL at random moments of a 20,000-file copy (named temporaries twice, O_TMPFILE once),
/// then the same command with -u: rsync finds nothing to change, no temporary
/// is left, and a further -u run copies nothing.
#[test]
fn killed_copy_is_finished_by_update_and_leaves_no_temporaries() {
    if !have_rsync() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    // 4,000 files: the kills fall at moments spread over the whole copy (its length measured
    // below), so a bigger tree only makes the test slower (20,000 files took 87 s of CI).
    for d in 0..40 {
        let dir = src.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            write_file(
                &dir.join(format!("f{f:03}")),
                500 + (d * 100 + f) * 37 % 3_000,
            );
        }
    }
    let dst = t.path().join("dst");
    // How long an uninterrupted copy takes here: the kills fall inside it.
    let start = std::time::Instant::now();
    let out = run(bin().args(["copy", "-a", "-T"]).arg(&src).arg(&dst));
    let full = start.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::remove_dir_all(&dst).unwrap();
    // A fixed seed: the moments differ between rounds, and a failure can be replayed.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for round in 0..3 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = full.mul_f64(0.05 + (seed % 900) as f64 / 1000.0);
        let temp_flag = if round % 2 == 0 { "--named-temp" } else { "-v" };
        let mut child = bin()
            .args(["copy", "-a", "-T", temp_flag])
            .arg(&src)
            .arg(&dst)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        eprintln!("round {round}: killed after {at:?} of {full:?} ({temp_flag})");
        let out = run(bin()
            .args(["copy", "-a", "-u", "-T", "--json"])
            .arg(&src)
            .arg(&dst));
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(rsync_differences(&src, &dst), "", "round {round}");
        let stray = stray_temporaries(&dst);
        assert!(stray.is_empty(), "round {round}: {stray:?}");
        let again = run(bin()
            .args(["copy", "-a", "-u", "-T", "--json"])
            .arg(&src)
            .arg(&dst));
        let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        assert_eq!(v["files"], 0, "an up-to-date copy copies nothing: {v}");
        assert_eq!(v["skipped"], 4_000);
        assert_eq!(v["created"], 0);
        assert_eq!(v["updated"], 0);
        fs::remove_dir_all(&dst).unwrap();
    }
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
    let src = t.path().join("src");
    let sub = src.join("sub");
    fs::create_dir_all(&sub).unwrap();
    write_file(&src.join("data"), 10_000);
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
    let out = run(bin().args(["copy", "-a", "--json"]).arg(&src).arg(&dst));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let out = run(bin()
        .args(["copy", "-a", "-u", "-T", "--json"])
        .arg(&src)
        .arg(&dst));
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
    assert!(run(bin().args(["copy", "-aT"]).arg(&src).arg(&dst))
        .status
        .success());
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
    let out = run(bin().args(["copy", "-auT", "--json"]).arg(&src).arg(&dst));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["created"], 1, "only the new file: {v}");
    assert!(!same(&src.join("a"), &dst.join("a")));

    // Dry run: the list, and nothing touched.
    let before = tree_listing(&dst);
    let out = run(bin()
        .args(["copy", "-aT", "--checksum", "--delete", "--dry-run"])
        .arg(&src)
        .arg(&dst));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    for p in [
        src.join("a"),
        dst.join("a"),
        src.join("d/b"),
        dst.join("d/b"),
    ] {
        evict(&p);
    }
    let out = run(bin()
        .args(["copy", "-aT", "--checksum", "--delete", "--json-lines"])
        .arg(&src)
        .arg(&dst));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for p in [
        src.join("a"),
        dst.join("a"),
        src.join("d/b"),
        dst.join("d/b"),
    ] {
        assert_eq!(cached(&p), 0, "{} read without caching", p.display());
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

/// `ls -lR`-like listing with times to the nanosecond, to see that nothing changed.
fn tree_listing(dir: &Path) -> String {
    let out = Command::new("find")
        .arg(dir)
        .args(["-printf", "%p %s %T@ %m %y\n"])
        .output()
        .unwrap();
    let mut lines: Vec<_> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Destination errors say what could not be done to the path the user gave, in words, with
/// the syscall after it.
#[test]
fn destination_errors_are_plain_words() {
    let t = tmp();
    let f = t.path().join("f");
    write_file(&f, 10);
    let out = run(bin().arg("copy").arg(&f).arg("/nonexistent/dir/x"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot create '/nonexistent/dir/x': No such file or directory (open(O_DIRECTORY) of /nonexistent/dir)"),
        "{err}"
    );
    let out = run(bin().arg("copy").arg(t.path()).arg("/nonexistent/dir/y"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot create '/nonexistent/dir/y': No such file or directory (mkdir)"),
        "{err}"
    );
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
    assert!(run(bin().args(["copy", "-aT"]).arg(&src).arg(&dst))
        .status
        .success());
    fs::create_dir_all(dst.join("old/deep")).unwrap();
    write_file(&dst.join("old/deep/x"), 10);
    write_file(&dst.join("keep/stale"), 10);
    let out = run(bin().args(["copy", "-auT"]).arg(&src).arg(&dst));
    assert!(out.status.success());
    assert!(
        dst.join("old/deep/x").exists(),
        "nothing removed unless asked"
    );
    let out = run(bin()
        .args(["copy", "-auT", "--delete", "--json"])
        .arg(&src)
        .arg(&dst));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["deleted"], 2, "{v}");
    assert!(!dst.join("old").exists() && !dst.join("keep/stale").exists());
    assert!(dst.join("a").exists() && dst.join("keep/b").exists());
    fs::write(dst.join("a"), b"mine").unwrap();
    assert!(run(bin()
        .args(["copy", "--no-clobber", "-T"])
        .arg(&src)
        .arg(&dst))
    .status
    .success());
    assert_eq!(
        fs::read(dst.join("a")).unwrap(),
        b"mine",
        "-n keeps what exists"
    );
}
