//! The option structs' layouts: stat, evict and load embed one `pagewise_walk_options`, whose
//! flags and `reserved` are checked like the verbs' own; and a program built against the 0.1.0
//! header, whose structs had the walk fields inline, still works: the library knows those
//! structs by their size and reads every field from where 0.1.0 put it.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::null_mut;

use pagewise::*;

fn last_error() -> String {
    unsafe { CStr::from_ptr(pagewise_last_error()) }
        .to_str()
        .unwrap()
        .to_owned()
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// A directory on a disk filesystem (tmpfs pages cannot be evicted).
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

/// `pagewise_stat_options` and `pagewise_evict_options` as the 0.1.0 header declared them.
#[repr(C)]
struct TreeOptions010 {
    size: u32,
    flags: u32,
    threads: u32,
    max_depth: u32,
    method: u32,
    reserved: u32,
    range_start: u64,
    range_end: u64,
    include: *const *const c_char,
    include_count: usize,
    exclude: *const *const c_char,
    exclude_count: usize,
    progress: Option<unsafe extern "C" fn(u64, u64, *mut c_void) -> c_int>,
    user: *mut c_void,
}

/// `pagewise_load_options` as the 0.1.0 header declared it.
#[repr(C)]
struct LoadOptions010 {
    size: u32,
    flags: u32,
    threads: u32,
    max_depth: u32,
    method: u32,
    depth: u32,
    range_start: u64,
    range_end: u64,
    include: *const *const c_char,
    include_count: usize,
    exclude: *const *const c_char,
    exclude_count: usize,
    progress: Option<unsafe extern "C" fn(u64, u64, *mut c_void) -> c_int>,
    user: *mut c_void,
    batch_files: u64,
    window: u64,
}

/// The 0.1.0 struct `v` passed where the current header's struct is taken (a fresh pointer
/// each call, so the writes to `v` before it are seen).
fn as_new<T, U>(v: &T) -> *const U {
    (v as *const T).cast()
}

fn zeroed<T>() -> T {
    let mut v: T = unsafe { std::mem::zeroed() };
    unsafe { *(&mut v as *mut T).cast::<u32>() = std::mem::size_of::<T>() as u32 };
    v
}

unsafe extern "C" fn count_calls(_files: u64, _bytes: u64, user: *mut c_void) -> c_int {
    unsafe { *user.cast::<u32>() += 1 };
    1
}

#[test]
fn structs_of_the_0_1_0_header_are_read_as_0_1_0_laid_them_out() {
    assert_eq!(std::mem::size_of::<TreeOptions010>(), 88);
    assert_eq!(std::mem::size_of::<LoadOptions010>(), 104);
    let dir = scratch();
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    let (a, b) = (tree.join("a.dat"), tree.join("b.log"));
    std::fs::write(&a, vec![1u8; 200_000]).unwrap();
    std::fs::write(&b, vec![2u8; 300_000]).unwrap();
    let root = c(&tree);
    let paths = [root.as_ptr()];
    let glob = CString::new("*.dat").unwrap();
    let globs = [glob.as_ptr()];
    unsafe {
        // stat: `include` and the range read from their 0.1.0 places.
        let mut so: TreeOptions010 = zeroed();
        (so.include, so.include_count) = (globs.as_ptr(), 1);
        (so.range_start, so.range_end) = (4096, 8192);
        let mut sr: pagewise_stat_report = report();
        assert_eq!(pagewise_stat(paths.as_ptr(), 1, as_new(&so), &mut sr), 0);
        assert_eq!((sr.files, sr.size_bytes, sr.bytes), (1, 200_000, 4096));
        // ... its walk flags (in 0.1.0's one `flags`), threads and reserved too.
        so.flags = PAGEWISE_FOLLOW | PAGEWISE_ONE_FILE_SYSTEM | PAGEWISE_NOATIME;
        assert_eq!(pagewise_stat(paths.as_ptr(), 1, as_new(&so), null_mut()), 0);
        so.flags = 1 << 30;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, as_new(&so), null_mut()),
            -libc::EINVAL
        );
        so.flags = 0;
        so.threads = u32::MAX;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, as_new(&so), null_mut()),
            -libc::EINVAL
        );
        assert!(last_error().contains("threads"), "{}", last_error());
        so.threads = 0;
        so.reserved = 1;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, as_new(&so), null_mut()),
            -libc::EINVAL
        );
        assert!(
            last_error().contains("pagewise_stat_options.reserved"),
            "{}",
            last_error()
        );
        so.reserved = 0;
        // ... and the progress callback with its `user`.
        let mut calls = 0u32;
        so.progress = Some(count_calls);
        so.user = (&mut calls as *mut u32).cast();
        let mut sr: pagewise_stat_report = report();
        assert_eq!(pagewise_stat(paths.as_ptr(), 1, as_new(&so), &mut sr), 0);
        assert_eq!((sr.interrupted, calls), (1, 1));

        // evict: the verb's flags beside the walk's in 0.1.0's `flags`.
        let mut eo: TreeOptions010 = zeroed();
        eo.flags = PAGEWISE_EVICT_DRY_RUN | PAGEWISE_NOATIME;
        (eo.include, eo.include_count) = (globs.as_ptr(), 1);
        let before = cached(&a);
        assert!(before > 0, "setup: cached");
        let mut er: pagewise_evict_report = report();
        assert_eq!(pagewise_evict(paths.as_ptr(), 1, as_new(&eo), &mut er), 0);
        assert_eq!(er.files, 1, "the include glob");
        assert_eq!(cached(&a), before, "a dry run: nothing dropped");
        eo.flags = PAGEWISE_NOATIME;
        assert_eq!(pagewise_evict(paths.as_ptr(), 1, as_new(&eo), &mut er), 0);
        assert_eq!((er.files, cached(&a)), (1, 0));
        assert!(cached(&b) > 0, "excluded by the include glob");

        // load: `depth`, `batch_files` and `window` from their 0.1.0 places.
        let mut lo: LoadOptions010 = zeroed();
        (lo.include, lo.include_count) = (globs.as_ptr(), 1);
        (lo.batch_files, lo.window) = (1, 64 << 20);
        let mut lr: pagewise_load_report = report();
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, as_new(&lo), &mut lr, null_mut()),
            0
        );
        assert_eq!((lr.files, lr.cached_bytes_after), (1, 200_000));
        lo.depth = u32::MAX;
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, as_new(&lo), null_mut(), null_mut()),
            -libc::EINVAL
        );
        assert!(last_error().contains("depth"), "{}", last_error());
    }
}

#[test]
fn the_walk_struct_is_checked_in_every_verb() {
    let dir = scratch();
    let f = dir.path().join("f");
    std::fs::write(&f, vec![5u8; 100_000]).unwrap();
    let p = c(&f);
    let paths = [p.as_ptr()];
    unsafe {
        let mut so: pagewise_stat_options = zeroed();
        so.walk.flags = 1 << 30;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, &so, null_mut()),
            -libc::EINVAL
        );
        assert!(
            last_error().contains("pagewise_stat_options.walk.flags"),
            "{}",
            last_error()
        );
        so.walk.flags = 0;
        so.walk.reserved[1] = 1;
        assert_eq!(
            pagewise_stat(paths.as_ptr(), 1, &so, null_mut()),
            -libc::EINVAL
        );
        assert!(
            last_error().contains("pagewise_stat_options.walk.reserved"),
            "{}",
            last_error()
        );

        // The walk flags are the walk's; the verb's own flags word takes none of them.
        let mut eo: pagewise_evict_options = zeroed();
        eo.flags = PAGEWISE_ONE_FILE_SYSTEM;
        assert_eq!(
            pagewise_evict(paths.as_ptr(), 1, &eo, null_mut()),
            -libc::EINVAL
        );
        eo.flags = PAGEWISE_EVICT_DRY_RUN;
        eo.walk.flags = PAGEWISE_ONE_FILE_SYSTEM;
        eo.walk.reserved[0] = 1;
        assert_eq!(
            pagewise_evict(paths.as_ptr(), 1, &eo, null_mut()),
            -libc::EINVAL
        );
        eo.walk.reserved[0] = 0;
        assert_eq!(pagewise_evict(paths.as_ptr(), 1, &eo, null_mut()), 0);

        let mut lo: pagewise_load_options = zeroed();
        lo.reserved = 1;
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, &lo, null_mut(), null_mut()),
            -libc::EINVAL
        );
        assert!(
            last_error().contains("pagewise_load_options.reserved"),
            "{}",
            last_error()
        );
        lo.reserved = 0;
        lo.walk.method = 99;
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, &lo, null_mut(), null_mut()),
            -libc::EINVAL
        );
        assert!(
            last_error().contains("pagewise_load_options.walk.method"),
            "{}",
            last_error()
        );
        lo.walk.method = PAGEWISE_METHOD_AUTO;
        let mut lr: pagewise_load_report = report();
        assert_eq!(
            pagewise_load(paths.as_ptr(), 1, &lo, &mut lr, null_mut()),
            0
        );
        assert_eq!(lr.files, 1);
    }
}
