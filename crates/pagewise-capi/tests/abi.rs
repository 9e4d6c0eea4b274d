//! The C functions called as C would call them (through the rlib): the errno convention, the
//! per-thread message, versioned structs, handles; results checked with what the kernel shows.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::{null, null_mut};

use pagewise::*;

fn last_error() -> String {
    let p = pagewise_last_error();
    assert!(!p.is_null());
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn scratch() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let f = std::fs::File::open(tmp.path()).unwrap();
    if !pagewise_core::sys::is_shmem(f.as_fd()) {
        return tmp;
    }
    let exe = std::env::current_exe().unwrap();
    tempfile::tempdir_in(exe.ancestors().nth(3).unwrap()).unwrap()
}

fn cached(p: &Path) -> u64 {
    let f = std::fs::File::open(p).unwrap();
    pagewise_core::sys::cachestat(f.as_fd(), 0, 0)
        .unwrap()
        .cache
        * pagewise_core::sys::page_size()
}

fn report<T>() -> T {
    let mut r: T = unsafe { std::mem::zeroed() };
    unsafe { *(&mut r as *mut T).cast::<u32>() = std::mem::size_of::<T>() as u32 };
    r
}

#[test]
fn version_is_the_crates() {
    let v = unsafe { CStr::from_ptr(pagewise_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

/// `pagewise_build_info()` names the commit git has checked out (the CLI's `--version` and
/// Python's `build_info()` are checked against the same commit).
#[test]
fn build_info_names_the_checked_out_commit() {
    let line = unsafe { CStr::from_ptr(pagewise_build_info()) }
        .to_str()
        .unwrap()
        .to_owned();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim()[..12].to_owned());
    let commit = head.unwrap_or_else(|| "unknown".to_owned());
    let prefix = format!("{} (commit {commit}, built ", env!("CARGO_PKG_VERSION"));
    assert!(
        line.starts_with(&prefix),
        "{line:?} does not start with {prefix:?}"
    );
    let rest = &line[prefix.len()..];
    let (date, target) = rest.split_once(", ").unwrap();
    assert!(
        date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-',
        "{line:?}"
    );
    assert!(
        target.starts_with("x86_64-") || target.ends_with("-linux-gnu)"),
        "{line:?}"
    );
    assert!(target.ends_with(')'), "{line:?}");
}

#[test]
fn file_handles_round_trip_and_fail_with_errno_and_message() {
    let dir = scratch();
    let p = dir.path().join("f");
    let cp = c(&p);
    unsafe {
        // Failures: NULL and errno set, the message names the path and the call.
        assert!(pagewise_open(null(), PAGEWISE_READ, PAGEWISE_DIRECT).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(pagewise_open(cp.as_ptr(), PAGEWISE_READ, PAGEWISE_DIRECT).is_null());
        assert_eq!(errno(), libc::ENOENT);
        assert_eq!(
            last_error(),
            format!(
                "{}: open(O_DIRECT) failed: No such file or directory (os error 2)",
                p.display()
            )
        );
        assert!(pagewise_open(cp.as_ptr(), 1 << 20, PAGEWISE_DIRECT).is_null());
        assert!(
            last_error().contains("unknown flag bits 0x100000"),
            "{}",
            last_error()
        );
        assert!(pagewise_open(cp.as_ptr(), PAGEWISE_READ, 7).is_null());
        assert!(pagewise_open(cp.as_ptr(), PAGEWISE_CREATE, PAGEWISE_DIRECT).is_null());
        assert_eq!(errno(), libc::EINVAL, "{}", last_error());

        let flags = PAGEWISE_READ | PAGEWISE_WRITE | PAGEWISE_CREATE | PAGEWISE_EXCL;
        let f = pagewise_open(cp.as_ptr(), flags, PAGEWISE_DIRECT);
        assert!(!f.is_null(), "{}", last_error());
        assert_eq!(pagewise_file_policy(f), PAGEWISE_DIRECT as c_int);
        assert!(pagewise_file_notice(f).is_null());
        let (mut mem, mut off) = (0usize, 0usize);
        assert_eq!(pagewise_file_alignment(f, &mut mem, &mut off), 0);
        assert!(mem.is_power_of_two() && off.is_power_of_two() && off >= 512);

        let data: Vec<u8> = (0..1_000_003u32)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        let n = pagewise_pwrite(f, data.as_ptr().cast(), data.len(), 3);
        assert_eq!(n, data.len() as isize);
        assert_eq!(pagewise_file_size(f), data.len() as i64 + 3);
        let mut align = mem;
        let buf = pagewise_aligned_alloc(2 << 20, &mut align).cast::<u8>();
        assert_eq!((align, buf as usize % mem), (mem, 0));
        let n = pagewise_pread(f, buf.cast(), 2 << 20, 0);
        assert_eq!(n, data.len() as isize + 3);
        let back = std::slice::from_raw_parts(buf, n as usize);
        assert!(back[..3] == [0, 0, 0] && back[3..] == data[..]);
        assert_eq!(
            pagewise_pread(f, buf.cast(), 10, 1 << 40),
            0,
            "past the end"
        );
        assert_eq!(pagewise_pread(f, null_mut(), 10, 0), -libc::EFAULT as isize);
        assert_eq!(pagewise_file_truncate(f, 1000), 0);
        assert_eq!(pagewise_file_sync(f), 0);
        assert_eq!(pagewise_close(f), 0);
        pagewise_aligned_free(buf.cast());
        pagewise_aligned_free(0x1000 as *mut c_void); // not ours: ignored
        pagewise_aligned_free(null_mut());
        assert_eq!(pagewise_close(null_mut()), 0);
        assert_eq!(std::fs::read(&p).unwrap()[3..], data[..997]);
        let _ = std::fs::File::open(&p).map(|f| {
            pagewise_core::sys::fadvise(f.as_fd(), 0, 0, pagewise_core::sys::Advice::DontNeed)
        });
        assert_eq!(cached(&p), 0);

        // A read-only handle refuses writes with EBADF, naming the call.
        let f = pagewise_open(cp.as_ptr(), PAGEWISE_READ, PAGEWISE_DONTCACHE);
        assert_eq!(pagewise_file_policy(f), PAGEWISE_DONTCACHE as c_int);
        assert_eq!(
            pagewise_pwrite(f, b"x".as_ptr().cast(), 1, 0),
            -libc::EBADF as isize
        );
        assert!(last_error().ends_with("pwrite failed: Bad file descriptor (os error 9)"));
        assert_eq!(pagewise_close(f), 0);
        assert_eq!(pagewise_file_policy(null()), -libc::EBADF);
    }
}

unsafe extern "C" fn stop_at_once(_files: u64, _bytes: u64, user: *mut c_void) -> c_int {
    unsafe { *user.cast::<u32>() += 1 };
    1
}

#[test]
fn verbs_take_versioned_options_and_report_what_the_kernel_shows() {
    let dir = scratch();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    for (i, n) in [10_000usize, 1 << 20, 77].iter().enumerate() {
        std::fs::write(tree.join(format!("sub/f{i}")), vec![i as u8 + 1; *n]).unwrap();
    }
    let total = 10_000 + (1 << 20) + 77;
    let root = c(&tree);
    let paths = [root.as_ptr()];
    unsafe {
        // load, locked: the pages stay until the lock goes.
        let mut lr: pagewise_load_report = report();
        let mut lock: *mut pagewise_lock = null_mut();
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, null(), &mut lr, &mut lock),
            0
        );
        assert!(!lock.is_null());
        assert_eq!(
            (lr.files, lr.bytes, lr.cached_bytes_after),
            (3, total, total)
        );
        assert!(lr.locked_bytes >= total && lr.size as usize == std::mem::size_of_val(&lr));
        let mut sr: pagewise_stat_report = report();
        assert_eq!(pagewise_stat(paths.as_ptr(), 1, null(), &mut sr), 0);
        assert_eq!(
            (sr.files, sr.size_bytes, sr.cached_bytes),
            (3, total, total)
        );
        // Just written: dirty, and cachestat knows it.
        assert!(sr.dirty_bytes != PAGEWISE_UNKNOWN && sr.dirty_bytes <= total);
        pagewise_lock_free(lock);

        // evict with an options struct from an older header (shorter): defaults beyond it.
        let mut eo: pagewise_evict_options = std::mem::zeroed();
        eo.size = 8;
        let mut er: pagewise_evict_report = report();
        assert_eq!(pagewise_evict(paths.as_ptr(), 1, &eo, &mut er), 0);
        assert_eq!(
            (er.files, er.cached_bytes_before, er.dropped_bytes),
            (3, total, total)
        );
        let mut sr: pagewise_stat_report = report();
        assert_eq!(pagewise_stat(paths.as_ptr(), 1, null(), &mut sr), 0);
        assert_eq!(sr.cached_bytes, 0, "evicted, per cachestat");

        // A report from an older header (shorter) gets only its bytes.
        let mut short = [16u32, 0xaaaa_aaaa, 0xaaaa_aaaa, 0xaaaa_aaaa, 0xbbbb_bbbb];
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, null(), short.as_mut_ptr().cast()),
            0
        );
        assert_eq!(short, [16, 0, 3, 0, 0xbbbb_bbbb]);

        // Bad options fail before anything runs.
        let mut so: pagewise_stat_options = std::mem::zeroed();
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, &so, null_mut()),
            -libc::EINVAL
        );
        assert!(last_error().contains("size is 0"), "{}", last_error());
        so.size = std::mem::size_of_val(&so) as u32;
        so.flags = 1 << 30;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, &so, null_mut()),
            -libc::EINVAL
        );
        so.flags = 0;
        let bad_glob = CString::new("[").unwrap();
        let globs = [bad_glob.as_ptr()];
        so.walk.include = globs.as_ptr();
        so.walk.include_count = 1;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, &so, null_mut()),
            -libc::EINVAL
        );
        assert!(
            last_error().starts_with("stat: invalid"),
            "{}",
            last_error()
        );
        assert_eq!(pagewise_stat(null(), 0, null(), null_mut()), -libc::EINVAL);
        assert!(last_error().contains("roots"), "{}", last_error());

        // Per-file errors are counted; the first is the message; the verb goes on.
        let missing = CString::new(dir.path().join("missing").as_os_str().as_bytes()).unwrap();
        let two = [missing.as_ptr(), root.as_ptr()];
        let mut sr: pagewise_stat_report = report();
        assert_eq!(pagewise_stat(two.as_ptr(), 2, null(), &mut sr), 1);
        assert_eq!((sr.error_count, sr.files), (1, 3));
        assert!(last_error().starts_with("stat: ") && last_error().contains("missing"));

        // The progress callback stops the verb: the report says so.
        let mut calls = 0u32;
        let mut so: pagewise_stat_options = std::mem::zeroed();
        so.size = std::mem::size_of_val(&so) as u32;
        so.progress = Some(stop_at_once);
        so.user = (&mut calls as *mut u32).cast();
        let mut sr: pagewise_stat_report = report();
        assert_eq!(pagewise_stat(paths.as_ptr(), 1, &so, &mut sr), 0);
        assert_eq!((sr.interrupted, calls), (1, 1));

        // copy: the destination is identical, and left uncached.
        let dest = c(&dir.path().join("copy"));
        let mut co: pagewise_copy_options = std::mem::zeroed();
        co.size = std::mem::size_of_val(&co) as u32;
        co.flags = PAGEWISE_COPY_VERIFY;
        let mut cr: pagewise_copy_report = report();
        assert_eq!(
            pagewise_copy(paths.as_ptr(), 1, dest.as_ptr(), &co, &mut cr),
            0
        );
        assert_eq!((cr.files, cr.bytes, cr.verified_files), (3, total, 3));
        let used = cr.direct_files + cr.dontcache_files + cr.drop_behind_files + cr.buffered_files;
        assert_eq!(used, 3);
        let big = dir.path().join("copy/sub/f1");
        assert_eq!(cached(&big), 0);
        assert_eq!(std::fs::read(&big).unwrap(), vec![2u8; 1 << 20]);
        co.strategy = 99;
        assert_eq!(
            pagewise_copy(paths.as_ptr(), 1, dest.as_ptr(), &co, null_mut()),
            -libc::EINVAL
        );
    }
}

#[test]
fn the_message_is_per_thread() {
    let bad: *const c_char = null();
    unsafe { assert!(pagewise_open(bad, PAGEWISE_READ, PAGEWISE_DIRECT).is_null()) };
    let mine = last_error();
    std::thread::spawn(|| assert!(pagewise_last_error().is_null()))
        .join()
        .unwrap();
    assert_eq!(last_error(), mine);
}

/// An unmounted-on-drop tmpfs in a temporary directory.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount() -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m", "pagewise-capi-test"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs (tests run as root here)");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

/// pagewise_pwrite past the end, every policy, on a disk filesystem and on tmpfs: the size
/// (stat) is the write's end at once and pagewise_pread of the gap gives zeros, not the end.
#[test]
fn a_write_past_the_end_leaves_zeros_and_the_size() {
    let disk = scratch();
    let shm = Tmpfs::mount();
    for dir in [disk.path(), shm.0.path()] {
        for policy in [PAGEWISE_DIRECT, PAGEWISE_DONTCACHE, PAGEWISE_DROP_BEHIND] {
            for (at, len) in [(10_000u64, 4usize), ((1 << 20) + 3, 70_000), (8192, 5000)] {
                let what = format!("{} policy {policy}: {len} at {at}", dir.display());
                let p = dir.join("gap");
                std::fs::write(&p, b"head").unwrap();
                let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
                let cp = c(&p);
                unsafe {
                    let f = pagewise_open(cp.as_ptr(), PAGEWISE_READ | PAGEWISE_WRITE, policy);
                    assert!(!f.is_null(), "{}", last_error());
                    let n = pagewise_pwrite(f, data.as_ptr().cast(), len, at);
                    assert_eq!(n, len as isize, "{what}");
                    let end = at + len as u64;
                    assert_eq!(std::fs::metadata(&p).unwrap().len(), end, "{what}: stat");
                    let mut gap = vec![0xAAu8; at as usize];
                    let n = pagewise_pread(f, gap.as_mut_ptr().cast(), gap.len(), 0);
                    assert_eq!(n, at as isize, "{what}: the gap");
                    assert!(
                        gap[..4] == *b"head" && gap[4..].iter().all(|&b| b == 0),
                        "{what}"
                    );
                    assert_eq!(pagewise_close(f), 0, "{what}");
                }
                let got = std::fs::read(&p).unwrap();
                assert_eq!(got.len() as u64, at + len as u64, "{what}");
                assert!(got[at as usize..] == data[..], "{what}");
            }
        }
    }
}

/// Sizes, alignments, offsets and counts no call can honour: -EINVAL or -ENOMEM (NULL and
/// errno for the allocator) with the message naming the function, never an abort.
#[test]
fn impossible_arguments_are_errors_not_aborts() {
    let dir = scratch();
    let p = dir.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    let cp = c(&p);
    unsafe {
        for size in [
            1usize << 62,
            usize::MAX,
            usize::MAX - 4095,
            isize::MAX as usize,
        ] {
            let mut align = 4096usize;
            assert!(pagewise_aligned_alloc(size, &mut align).is_null(), "{size}");
            assert_eq!(errno(), libc::ENOMEM, "{size}: {}", last_error());
            assert!(
                last_error().starts_with("pagewise_aligned_alloc: "),
                "{}",
                last_error()
            );
        }
        for bad in [1usize << 31, 1 << 40, usize::MAX, (1 << 62) + 1] {
            let mut align = bad;
            assert!(pagewise_aligned_alloc(16, &mut align).is_null(), "{bad}");
            assert_eq!(errno(), libc::EINVAL, "align {bad}: {}", last_error());
            assert!(last_error().contains("alignment"), "{}", last_error());
        }
        let mut align = 1usize << 30;
        let b = pagewise_aligned_alloc(16, &mut align);
        assert!(!b.is_null() && (b as usize).is_multiple_of(1 << 30) && align == 1 << 30);
        pagewise_aligned_free(b);

        for policy in [PAGEWISE_DIRECT, PAGEWISE_DONTCACHE, PAGEWISE_DROP_BEHIND] {
            let f = pagewise_open(cp.as_ptr(), PAGEWISE_READ | PAGEWISE_WRITE, policy);
            assert!(!f.is_null(), "{}", last_error());
            let mut buf = [0u8; 16];
            for off in [u64::MAX, i64::MAX as u64, (i64::MAX - 5) as u64, 1 << 63] {
                let n = pagewise_pread(f, buf.as_mut_ptr().cast(), 16, off);
                assert_eq!(
                    n,
                    -libc::EINVAL as isize,
                    "pread at {off}: {}",
                    last_error()
                );
                assert!(
                    last_error().starts_with(p.to_str().unwrap()),
                    "{}",
                    last_error()
                );
                let n = pagewise_pwrite(f, buf.as_ptr().cast(), 16, off);
                assert_eq!(
                    n,
                    -libc::EINVAL as isize,
                    "pwrite at {off}: {}",
                    last_error()
                );
            }
            assert_eq!(pagewise_file_truncate(f, u64::MAX), -libc::EINVAL);
            assert_eq!(pagewise_file_policy(f), policy as c_int, "no fallback");
            assert_eq!(pagewise_pread(f, buf.as_mut_ptr().cast(), 0, u64::MAX), 0);
            assert_eq!(pagewise_pread(f, buf.as_mut_ptr().cast(), 16, 0), 10);
            assert_eq!(pagewise_close(f), 0);
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"0123456789");

        // Counts and sizes of the verbs: zero is the default, absurd is EINVAL.
        let paths = [cp.as_ptr()];
        let mut lo: pagewise_load_options = std::mem::zeroed();
        lo.size = std::mem::size_of_val(&lo) as u32;
        lo.depth = u32::MAX;
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, &lo, null_mut(), null_mut()),
            -libc::EINVAL
        );
        assert!(last_error().contains("depth"), "{}", last_error());
        lo.depth = 0;
        lo.walk.threads = u32::MAX;
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, &lo, null_mut(), null_mut()),
            -libc::EINVAL
        );
        assert!(last_error().contains("threads"), "{}", last_error());
        let mut so: pagewise_stat_options = std::mem::zeroed();
        so.size = std::mem::size_of_val(&so) as u32;
        so.walk.threads = u32::MAX;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, &so, null_mut()),
            -libc::EINVAL
        );
        let dest = c(&dir.path().join("copy"));
        for (chunk, depth, threads, what) in [
            (1u64 << 40, 0, 0, "chunk"),
            (u64::MAX - 4095, 0, 0, "chunk"),
            (0, u32::MAX, 0, "depth"),
            (0, 0, u32::MAX, "threads"),
        ] {
            let mut co: pagewise_copy_options = std::mem::zeroed();
            co.size = std::mem::size_of_val(&co) as u32;
            (co.chunk, co.depth, co.threads) = (chunk, depth, threads);
            let r = pagewise_copy(paths.as_ptr(), 1, dest.as_ptr(), &co, null_mut());
            assert_eq!(r, -libc::EINVAL, "{what}: {}", last_error());
            assert!(last_error().contains(what), "{}", last_error());
        }
        assert!(!dir.path().join("copy").exists(), "nothing ran");
    }
}

/// A `reserved` field that is not zero is refused (-EINVAL, errno-style, with a message naming
/// the struct and field) before anything runs, in every option struct that has one, so a
/// later version can give it a meaning without old callers' garbage being taken for it.
#[test]
fn reserved_fields_must_be_zero() {
    let dir = scratch();
    let f = dir.path().join("f");
    std::fs::write(&f, vec![5u8; 100_000]).unwrap();
    let src = c(&f);
    let paths = [src.as_ptr()];
    let dest_path = dir.path().join("dest");
    let dest = c(&dest_path);
    unsafe {
        for bits in [1u32, 0x8000_0000] {
            let mut so: pagewise_stat_options = std::mem::zeroed();
            so.size = std::mem::size_of_val(&so) as u32;
            so.reserved = bits;
            let mut sr: pagewise_stat_report = report();
            assert_eq!(
                pagewise_stat(paths.as_ptr(), 1, &so, &mut sr),
                -libc::EINVAL
            );
            assert!(
                last_error().contains("pagewise_stat_options.reserved"),
                "{}",
                last_error()
            );
            assert_eq!(sr.files, 0, "nothing ran");

            let mut eo: pagewise_evict_options = std::mem::zeroed();
            eo.size = std::mem::size_of_val(&eo) as u32;
            eo.reserved = bits;
            let before = cached(&f);
            assert!(before > 0, "setup: cached");
            assert_eq!(
                pagewise_evict(paths.as_ptr(), 1, &eo, null_mut()),
                -libc::EINVAL
            );
            assert!(
                last_error().contains("pagewise_evict_options.reserved"),
                "{}",
                last_error()
            );
            assert_eq!(cached(&f), before, "nothing evicted");

            let mut co: pagewise_copy_options = std::mem::zeroed();
            co.size = std::mem::size_of_val(&co) as u32;
            co.reserved = bits;
            assert_eq!(
                pagewise_copy(paths.as_ptr(), 1, dest.as_ptr(), &co, null_mut()),
                -libc::EINVAL
            );
            assert!(
                last_error().contains("pagewise_copy_options.reserved"),
                "{}",
                last_error()
            );
            assert!(!dest_path.exists(), "nothing copied");
        }
        // Zero is the field's one value.
        let mut so: pagewise_stat_options = std::mem::zeroed();
        so.size = std::mem::size_of_val(&so) as u32;
        assert_eq!(pagewise_stat(paths.as_ptr(), 1, &so, null_mut()), 0);
    }
}
