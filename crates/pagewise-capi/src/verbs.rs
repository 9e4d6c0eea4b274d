//! The verbs: `pagewise_stat`, `pagewise_evict`, `pagewise_load` (with `pagewise_lock`) and
//! `pagewise_copy`. Each reads its option struct into the verb's options, runs the verb with
//! the progress callback as its observer, and writes the report's totals.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};

use pagewise_core::copy::{copy, CopyOptions, Strategy};
use pagewise_core::evict::{evict, EvictOptions};
use pagewise_core::load::{load, LoadOptions, LockSet};
use pagewise_core::stat::{stat, StatOptions};
use pagewise_core::{ByteRange, Method, Outcome, WalkOptions};

use crate::ffi::{self, call_int, pagewise_progress_fn, CallbackObserver, Failure, Sized32};

/// A figure the kernel could not tell (e.g. dirty bytes measured with mincore).
pub const PAGEWISE_UNKNOWN: u64 = u64::MAX;

/// Walk flag: follow symlinks met inside trees (roots are always followed).
pub const PAGEWISE_FOLLOW: u32 = 1;
/// Walk flag: do not cross into other filesystems below a root.
pub const PAGEWISE_ONE_FILE_SYSTEM: u32 = 2;
/// Walk flag: open files with O_NOATIME where allowed.
pub const PAGEWISE_NOATIME: u32 = 4;
/// Evict flag: do not write dirty pages back first (they stay cached).
pub const PAGEWISE_EVICT_NO_SYNC: u32 = 0x100;
/// Evict flag: only files the caller owns.
pub const PAGEWISE_EVICT_OWNED: u32 = 0x200;
/// Evict flag: measure what would be dropped, change nothing.
pub const PAGEWISE_EVICT_DRY_RUN: u32 = 0x400;
/// Evict flag: find the processes that keep pages in (scans /proc/*/maps).
pub const PAGEWISE_EVICT_WHY: u32 = 0x800;

/// Measuring method: cachestat, falling back to mincore (the default).
pub const PAGEWISE_METHOD_AUTO: u32 = 0;
/// Measuring method: cachestat(2) only (Linux 6.5+).
pub const PAGEWISE_METHOD_CACHESTAT: u32 = 1;
/// Measuring method: mmap + mincore(2) only (dirty and writeback figures unknown).
pub const PAGEWISE_METHOD_MINCORE: u32 = 2;

/// Copy strategy: the fastest cache-clean one the filesystems support (the default).
pub const PAGEWISE_COPY_AUTO: u32 = 0;
/// Copy strategy: RWF_DONTCACHE reads and writes (Linux 6.14+).
pub const PAGEWISE_COPY_DONTCACHE: u32 = 1;
/// Copy strategy: O_DIRECT.
pub const PAGEWISE_COPY_DIRECT: u32 = 2;
/// Copy strategy: buffered, written back and dropped behind.
pub const PAGEWISE_COPY_DROP_BEHIND: u32 = 3;
/// Copy strategy: plain buffered copy (copy_file_range); leaves both files cached, like cp.
pub const PAGEWISE_COPY_BUFFERED: u32 = 4;
/// Copy flag: keep mode, owner (as root), timestamps and xattrs.
pub const PAGEWISE_COPY_PRESERVE: u32 = 1;
/// Copy flag: do not fallocate destinations first.
pub const PAGEWISE_COPY_NO_PREALLOCATE: u32 = 2;
/// Copy flag: fsync each file before it is put in place.
pub const PAGEWISE_COPY_FSYNC: u32 = 4;
/// Copy flag: re-read each destination from disk and compare checksums.
pub const PAGEWISE_COPY_VERIFY: u32 = 8;
/// Copy flag: write under hidden temporary names even where O_TMPFILE works.
pub const PAGEWISE_COPY_NAMED_TEMP: u32 = 16;

const WALK_FLAGS: u32 = PAGEWISE_FOLLOW | PAGEWISE_ONE_FILE_SYSTEM | PAGEWISE_NOATIME;
const EVICT_FLAGS: u32 =
    PAGEWISE_EVICT_NO_SYNC | PAGEWISE_EVICT_OWNED | PAGEWISE_EVICT_DRY_RUN | PAGEWISE_EVICT_WHY;
const COPY_FLAGS: u32 = PAGEWISE_COPY_PRESERVE
    | PAGEWISE_COPY_NO_PREALLOCATE
    | PAGEWISE_COPY_FSYNC
    | PAGEWISE_COPY_VERIFY
    | PAGEWISE_COPY_NAMED_TEMP;

/// Options of `pagewise_stat`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_stat_options {
    /// sizeof(pagewise_stat_options).
    pub size: u32,
    /// PAGEWISE_FOLLOW | PAGEWISE_ONE_FILE_SYSTEM | PAGEWISE_NOATIME.
    pub flags: u32,
    /// Walker threads (0: one per CPU; at most 1024).
    pub threads: u32,
    /// Levels to descend below the roots (0: no limit).
    pub max_depth: u32,
    /// PAGEWISE_METHOD_* (0: auto).
    pub method: u32,
    /// Zero.
    pub reserved: u32,
    /// First byte of each file to measure (0: the start).
    pub range_start: u64,
    /// End (exclusive) of the range of each file to measure (0: the end of each file).
    pub range_end: u64,
    /// Globs a file must match (its name or its path below its root); NULL: all files.
    pub include: *const *const c_char,
    /// Entries in `include`.
    pub include_count: usize,
    /// Globs that exclude files and prune directories.
    pub exclude: *const *const c_char,
    /// Entries in `exclude`.
    pub exclude_count: usize,
    /// Called with the progress, may stop the verb (NULL: none).
    pub progress: pagewise_progress_fn,
    /// Handed to `progress`.
    pub user: *mut c_void,
}

/// Totals of `pagewise_stat`, in bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_stat_report {
    /// In: sizeof(pagewise_stat_report); out: the bytes filled.
    pub size: u32,
    /// 1 when the progress callback stopped the run.
    pub interrupted: u32,
    /// Files measured.
    pub files: u64,
    /// Sum of their sizes.
    pub size_bytes: u64,
    /// Bytes measured (the sizes, or the parts in the range).
    pub bytes: u64,
    /// Of those, cached (over the files whose residency is known).
    pub cached_bytes: u64,
    /// Dirty bytes (PAGEWISE_UNKNOWN when no file's method tells).
    pub dirty_bytes: u64,
    /// Bytes under writeback (PAGEWISE_UNKNOWN when unknown).
    pub writeback_bytes: u64,
    /// Bytes evicted whose shadow entries remain (PAGEWISE_UNKNOWN when unknown).
    pub evicted_bytes: u64,
    /// Evicted bytes that would still be cached had they not been evicted.
    pub recently_evicted_bytes: u64,
    /// Files whose residency could not be known (not writable, cachestat refused).
    pub unknown_files: u64,
    /// Their bytes.
    pub unknown_bytes: u64,
    /// Files (and roots) that failed; pagewise_last_error() has the first.
    pub error_count: u64,
    /// Wall time, seconds.
    pub elapsed_s: f64,
}

/// Options of `pagewise_evict`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_evict_options {
    /// sizeof(pagewise_evict_options).
    pub size: u32,
    /// Walk flags, and PAGEWISE_EVICT_NO_SYNC | _OWNED | _DRY_RUN | _WHY.
    pub flags: u32,
    /// Walker threads (0: one per CPU; at most 1024).
    pub threads: u32,
    /// Levels to descend below the roots (0: no limit).
    pub max_depth: u32,
    /// PAGEWISE_METHOD_* (0: auto).
    pub method: u32,
    /// Zero.
    pub reserved: u32,
    /// First byte of each file to drop (0: the start).
    pub range_start: u64,
    /// End (exclusive) of the range to drop (0: the end of each file).
    pub range_end: u64,
    /// Globs a file must match; NULL: all files.
    pub include: *const *const c_char,
    /// Entries in `include`.
    pub include_count: usize,
    /// Globs that exclude files and prune directories.
    pub exclude: *const *const c_char,
    /// Entries in `exclude`.
    pub exclude_count: usize,
    /// Called with the progress, may stop the verb (NULL: none).
    pub progress: pagewise_progress_fn,
    /// Handed to `progress`.
    pub user: *mut c_void,
}

/// Totals of `pagewise_evict`, in bytes, as the kernel showed them before and after.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_evict_report {
    /// In: sizeof(pagewise_evict_report); out: the bytes filled.
    pub size: u32,
    /// 1 when the progress callback stopped the run.
    pub interrupted: u32,
    /// Files evicted (or measured, with PAGEWISE_EVICT_DRY_RUN).
    pub files: u64,
    /// Bytes in the ranges evicted.
    pub bytes: u64,
    /// Cached before.
    pub cached_bytes_before: u64,
    /// Cached after.
    pub cached_bytes_after: u64,
    /// Dropped from the cache.
    pub dropped_bytes: u64,
    /// Still cached (mapped, locked, dirty, tmpfs...).
    pub stayed_bytes: u64,
    /// Dirty bytes written back so they could be dropped (PAGEWISE_UNKNOWN when unknown:
    /// before Linux 6.5 only cachestat counts dirty pages).
    pub dirty_bytes_written: u64,
    /// Files where some pages stayed.
    pub files_with_residue: u64,
    /// Files left alone because another user owns them (PAGEWISE_EVICT_OWNED).
    pub not_owned_skipped: u64,
    /// Files whose residency could not be measured (advised out all the same).
    pub unknown_files: u64,
    /// Files (and roots) that failed; pagewise_last_error() has the first.
    pub error_count: u64,
    /// Wall time, seconds.
    pub elapsed_s: f64,
}

/// Options of `pagewise_load`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_load_options {
    /// sizeof(pagewise_load_options).
    pub size: u32,
    /// Walk flags.
    pub flags: u32,
    /// Walker threads (0: one per CPU; at most 1024).
    pub threads: u32,
    /// Levels to descend below the roots (0: no limit).
    pub max_depth: u32,
    /// PAGEWISE_METHOD_* (0: auto).
    pub method: u32,
    /// Threads reading one large file (0: 16; at most 1024).
    pub depth: u32,
    /// First byte of each file to load (0: the start).
    pub range_start: u64,
    /// End (exclusive) of the range to load (0: the end of each file).
    pub range_end: u64,
    /// Globs a file must match; NULL: all files.
    pub include: *const *const c_char,
    /// Entries in `include`.
    pub include_count: usize,
    /// Globs that exclude files and prune directories.
    pub exclude: *const *const c_char,
    /// Entries in `exclude`.
    pub exclude_count: usize,
    /// Called with the progress, may stop the verb (NULL: none).
    pub progress: pagewise_progress_fn,
    /// Handed to `progress`.
    pub user: *mut c_void,
    /// Files per worker whose readahead is queued before it waits (0: 256).
    pub batch_files: u64,
    /// Bytes in flight within one large file (0: 256 MiB).
    pub window: u64,
}

/// Totals of `pagewise_load`, in bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_load_report {
    /// In: sizeof(pagewise_load_report); out: the bytes filled.
    pub size: u32,
    /// 1 when the progress callback stopped the run.
    pub interrupted: u32,
    /// Files loaded or found cached.
    pub files: u64,
    /// Bytes in the ranges.
    pub bytes: u64,
    /// Cached before.
    pub cached_bytes_before: u64,
    /// Cached after.
    pub cached_bytes_after: u64,
    /// Files that were fully cached already.
    pub already_cached_files: u64,
    /// Bytes of the files that were read.
    pub read_bytes: u64,
    /// Bytes locked (with a lock asked for).
    pub locked_bytes: u64,
    /// Files locked.
    pub locked_files: u64,
    /// Files whose residency before could not be known.
    pub unknown_files: u64,
    /// Files (and roots) that failed; pagewise_last_error() has the first.
    pub error_count: u64,
    /// Wall time, seconds.
    pub elapsed_s: f64,
    /// Bytes newly brought in per second.
    pub rate_bytes_per_s: f64,
}

/// Options of `pagewise_copy`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_copy_options {
    /// sizeof(pagewise_copy_options).
    pub size: u32,
    /// PAGEWISE_COPY_PRESERVE | _NO_PREALLOCATE | _FSYNC | _VERIFY | _NAMED_TEMP.
    pub flags: u32,
    /// PAGEWISE_COPY_AUTO (0), _DONTCACHE, _DIRECT, _DROP_BEHIND, _BUFFERED.
    pub strategy: u32,
    /// Files copied in parallel (0: 16; at most 1024).
    pub threads: u32,
    /// I/Os in flight within one large file (0: 8; at most 1024).
    pub depth: u32,
    /// Zero.
    pub reserved: u32,
    /// Bytes per I/O, a multiple of 4096 (0: 4 MiB; at most 1 GiB).
    pub chunk: u64,
    /// Under auto, files below this size never try O_DIRECT (0: 1 MiB).
    pub direct_min: u64,
    /// Called with the progress, may stop the copy (NULL: none). Finished files are complete;
    /// the one being copied is removed.
    pub progress: pagewise_progress_fn,
    /// Handed to `progress`.
    pub user: *mut c_void,
}

/// What `pagewise_copy` did, in bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_copy_report {
    /// In: sizeof(pagewise_copy_report); out: the bytes filled.
    pub size: u32,
    /// 1 when the progress callback stopped the copy.
    pub interrupted: u32,
    /// Regular files copied.
    pub files: u64,
    /// Directories made or entered.
    pub dirs: u64,
    /// Symlinks copied.
    pub symlinks: u64,
    /// Hard links recreated.
    pub hardlinks: u64,
    /// FIFOs, sockets and devices recreated.
    pub specials: u64,
    /// Logical bytes of the files copied.
    pub bytes: u64,
    /// Bytes actually moved (holes excluded).
    pub data_bytes: u64,
    /// Files copied with O_DIRECT.
    pub direct_files: u64,
    /// Files copied with RWF_DONTCACHE.
    pub dontcache_files: u64,
    /// Files copied with drop-behind.
    pub drop_behind_files: u64,
    /// Files copied buffered.
    pub buffered_files: u64,
    /// Source pages cached after the copy that were not before.
    pub source_added_bytes: u64,
    /// Destination pages still cached at the end.
    pub dest_cached_bytes: u64,
    /// Files re-read and found equal (PAGEWISE_COPY_VERIFY).
    pub verified_files: u64,
    /// Files re-read and found different (each also an error).
    pub verify_mismatches: u64,
    /// Files that failed; pagewise_last_error() has the first.
    pub error_count: u64,
    /// Wall time of the copy, seconds.
    pub elapsed_s: f64,
    /// data_bytes per second.
    pub rate_bytes_per_s: f64,
}

// SAFETY: all are #[repr(C)], start with a u32 size, and hold only integers, floats, raw
// pointers and optional function pointers, for which zero is valid.
unsafe impl Sized32 for pagewise_stat_options {}
unsafe impl Sized32 for pagewise_stat_report {}
unsafe impl Sized32 for pagewise_evict_options {}
unsafe impl Sized32 for pagewise_evict_report {}
unsafe impl Sized32 for pagewise_load_options {}
unsafe impl Sized32 for pagewise_load_report {}
unsafe impl Sized32 for pagewise_copy_options {}
unsafe impl Sized32 for pagewise_copy_report {}

/// Pages locked by `pagewise_load`; they stay resident until `pagewise_lock_free`.
pub struct pagewise_lock {
    _locks: LockSet,
}

/// The walk, range and method fields the three tree verbs share.
struct Walked {
    walk: WalkOptions,
    range: ByteRange,
    method: Method,
}

#[allow(clippy::too_many_arguments)]
/// # Safety
/// The glob arrays are as `ffi::string_array` requires.
unsafe fn walked(
    what: &str,
    flags: u32,
    threads: u32,
    max_depth: u32,
    method: u32,
    range: (u64, u64),
    include: (*const *const c_char, usize),
    exclude: (*const *const c_char, usize),
) -> Result<Walked, Failure> {
    let mut walk = WalkOptions {
        follow: flags & PAGEWISE_FOLLOW != 0,
        one_file_system: flags & PAGEWISE_ONE_FILE_SYSTEM != 0,
        noatime: flags & PAGEWISE_NOATIME != 0,
        max_depth: (max_depth > 0).then_some(max_depth as usize),
        ..WalkOptions::default()
    };
    at_most(&format!("{what}.threads"), threads.into(), MAX_THREADS)?;
    if threads > 0 {
        walk.threads = threads as usize;
    }
    // SAFETY: as the caller promised.
    walk.include = unsafe { ffi::text_array(include.0, include.1, &format!("{what}.include")) }?;
    // SAFETY: as the caller promised.
    walk.exclude = unsafe { ffi::text_array(exclude.0, exclude.1, &format!("{what}.exclude")) }?;
    let method = match method {
        PAGEWISE_METHOD_AUTO => Method::Auto,
        PAGEWISE_METHOD_CACHESTAT => Method::Cachestat,
        PAGEWISE_METHOD_MINCORE => Method::Mincore,
        m => {
            return Err(Failure::invalid(format!(
                "{what}.method: unknown method {m}"
            )))
        }
    };
    if range.1 != 0 && range.1 < range.0 {
        return Err(Failure::invalid(format!(
            "{what}: range_end {} before range_start {}",
            range.1, range.0
        )));
    }
    let range = ByteRange {
        start: range.0,
        end: (range.1 != 0).then_some(range.1),
    };
    Ok(Walked {
        walk,
        range,
        method,
    })
}

/// The most threads a verb takes (walkers, copy workers): far above any machine's useful
/// parallelism, far below what would exhaust the process's threads (each is spawned).
const MAX_THREADS: u64 = 1024;
/// The most requests in flight within one file (`depth` of load and copy; one thread each).
const MAX_DEPTH: u64 = 1024;
/// The largest copy chunk, 1 GiB: each request in flight holds a buffer of this size.
const MAX_CHUNK: u64 = 1 << 30;

/// EINVAL when `value` is beyond `max` (`what` names the option).
fn at_most(what: &str, value: u64, max: u64) -> Result<(), Failure> {
    if value > max {
        return Err(Failure::invalid(format!(
            "{what}: {value} is more than the most allowed ({max})"
        )));
    }
    Ok(())
}

fn check_flags(what: &str, flags: u32, known: u32) -> Result<(), Failure> {
    if flags & !known != 0 {
        return Err(Failure::invalid(format!(
            "{what}.flags: unknown bits {:#x}",
            flags & !known
        )));
    }
    Ok(())
}

/// Publishes the outcome on this thread: its notices, and its first error as the last error.
/// Returns the error count as the verb's `int` result (saturated).
fn finish(outcome: &Outcome, verb: &str) -> c_int {
    ffi::set_last_notices(&outcome.notices);
    if let Some(first) = outcome.errors.first() {
        let more = outcome.error_count - 1;
        let tail = if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        };
        ffi::set_last_error(&format!("{verb}: {first}{tail}"));
    }
    outcome.error_count.min(c_int::MAX as u64) as c_int
}

fn known(v: Option<u64>) -> u64 {
    v.unwrap_or(PAGEWISE_UNKNOWN)
}

/// Measures how much of the files and trees `paths[0..n]` is in the page cache.
///
/// Returns the number of files that failed (0: all measured; the first failure is in
/// pagewise_last_error()), or a negative errno when nothing could run.
///
/// # Safety
/// `paths` points to `n` NUL-terminated strings; `opts` is NULL or a valid struct with its
/// size set; `out` is NULL or a report struct with its size set.
#[no_mangle]
pub unsafe extern "C" fn pagewise_stat(
    paths: *const *const c_char,
    n: usize,
    opts: *const pagewise_stat_options,
    out: *mut pagewise_stat_report,
) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let o = unsafe { ffi::read_options(opts, "pagewise_stat_options") }?;
        // SAFETY: as the caller promised.
        unsafe { ffi::check_report(out, "pagewise_stat_report") }?;
        check_flags("pagewise_stat_options", o.flags, WALK_FLAGS)?;
        // SAFETY: as the caller promised.
        let roots = unsafe { ffi::path_array(paths, n, "paths") }?;
        // SAFETY: the option struct's arrays, as the caller promised.
        let w = unsafe {
            walked(
                "pagewise_stat_options",
                o.flags,
                o.threads,
                o.max_depth,
                o.method,
                (o.range_start, o.range_end),
                (o.include, o.include_count),
                (o.exclude, o.exclude_count),
            )
        }?;
        let options = StatOptions {
            walk: w.walk,
            range: w.range,
            method: w.method,
            ..StatOptions::new(roots)
        };
        let observer = CallbackObserver::new(o.progress, o.user);
        let r = stat(&options, &observer).map_err(|e| Failure::verb("stat", &e))?;
        let t = &r.total;
        let report = pagewise_stat_report {
            size: 0,
            interrupted: r.outcome.interrupted as u32,
            files: t.files,
            size_bytes: t.size,
            bytes: t.bytes,
            cached_bytes: t.cached_bytes,
            dirty_bytes: known(t.dirty_bytes),
            writeback_bytes: known(t.writeback_bytes),
            evicted_bytes: known(t.evicted_bytes),
            recently_evicted_bytes: known(t.recently_evicted_bytes),
            unknown_files: t.unknown_files,
            unknown_bytes: t.unknown_bytes,
            error_count: r.outcome.error_count,
            elapsed_s: r.outcome.elapsed_s,
        };
        // SAFETY: checked above.
        unsafe { ffi::write_report(out, report) };
        Ok(finish(&r.outcome, "stat"))
    })
}

/// Drops the files and trees `paths[0..n]` from the page cache (writing dirty pages back
/// first), and measures what stayed.
///
/// Returns the number of files that failed (0: all evicted; the first failure is in
/// pagewise_last_error()), or a negative errno when nothing could run.
///
/// # Safety
/// As pagewise_stat.
#[no_mangle]
pub unsafe extern "C" fn pagewise_evict(
    paths: *const *const c_char,
    n: usize,
    opts: *const pagewise_evict_options,
    out: *mut pagewise_evict_report,
) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let o = unsafe { ffi::read_options(opts, "pagewise_evict_options") }?;
        // SAFETY: as the caller promised.
        unsafe { ffi::check_report(out, "pagewise_evict_report") }?;
        check_flags("pagewise_evict_options", o.flags, WALK_FLAGS | EVICT_FLAGS)?;
        // SAFETY: as the caller promised.
        let roots = unsafe { ffi::path_array(paths, n, "paths") }?;
        // SAFETY: the option struct's arrays, as the caller promised.
        let w = unsafe {
            walked(
                "pagewise_evict_options",
                o.flags,
                o.threads,
                o.max_depth,
                o.method,
                (o.range_start, o.range_end),
                (o.include, o.include_count),
                (o.exclude, o.exclude_count),
            )
        }?;
        let options = EvictOptions {
            walk: w.walk,
            range: w.range,
            method: w.method,
            sync: o.flags & PAGEWISE_EVICT_NO_SYNC == 0,
            owned: o.flags & PAGEWISE_EVICT_OWNED != 0,
            dry_run: o.flags & PAGEWISE_EVICT_DRY_RUN != 0,
            why: o.flags & PAGEWISE_EVICT_WHY != 0,
            ..EvictOptions::new(roots)
        };
        let observer = CallbackObserver::new(o.progress, o.user);
        let r = evict(&options, &observer).map_err(|e| Failure::verb("evict", &e))?;
        let t = &r.total;
        let report = pagewise_evict_report {
            size: 0,
            interrupted: r.outcome.interrupted as u32,
            files: t.files,
            bytes: t.bytes,
            cached_bytes_before: t.cached_bytes_before,
            cached_bytes_after: t.cached_bytes_after,
            dropped_bytes: t.dropped_bytes,
            stayed_bytes: t.stayed_bytes,
            dirty_bytes_written: known(t.dirty_bytes_written),
            files_with_residue: t.files_with_residue,
            not_owned_skipped: t.not_owned_skipped,
            unknown_files: t.unknown_files,
            error_count: r.outcome.error_count,
            elapsed_s: r.outcome.elapsed_s,
        };
        // SAFETY: checked above.
        unsafe { ffi::write_report(out, report) };
        Ok(finish(&r.outcome, "evict"))
    })
}

/// Brings the files and trees `paths[0..n]` into the page cache with deep parallel reads.
/// With `lock_out` non-NULL the loaded pages are also locked (mmap + mlock; RLIMIT_MEMLOCK
/// applies) and `*lock_out` receives the lock, which keeps them resident until
/// pagewise_lock_free (NULL when nothing could be locked).
///
/// Returns the number of files that failed (0: all loaded; the first failure is in
/// pagewise_last_error()), or a negative errno when nothing could run.
///
/// # Safety
/// As pagewise_stat; `lock_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pagewise_load(
    paths: *const *const c_char,
    n: usize,
    opts: *const pagewise_load_options,
    out: *mut pagewise_load_report,
    lock_out: *mut *mut pagewise_lock,
) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let o = unsafe { ffi::read_options(opts, "pagewise_load_options") }?;
        // SAFETY: as the caller promised.
        unsafe { ffi::check_report(out, "pagewise_load_report") }?;
        check_flags("pagewise_load_options", o.flags, WALK_FLAGS)?;
        // SAFETY: as the caller promised.
        let roots = unsafe { ffi::path_array(paths, n, "paths") }?;
        // SAFETY: the option struct's arrays, as the caller promised.
        let w = unsafe {
            walked(
                "pagewise_load_options",
                o.flags,
                o.threads,
                o.max_depth,
                o.method,
                (o.range_start, o.range_end),
                (o.include, o.include_count),
                (o.exclude, o.exclude_count),
            )
        }?;
        let mut options = LoadOptions {
            walk: w.walk,
            range: w.range,
            method: w.method,
            lock: !lock_out.is_null(),
            ..LoadOptions::new(roots)
        };
        at_most("pagewise_load_options.depth", o.depth.into(), MAX_DEPTH)?;
        if o.depth > 0 {
            options.depth = o.depth as usize;
        }
        if o.batch_files > 0 {
            options.batch_files = o.batch_files as usize;
        }
        if o.window > 0 {
            options.window = o.window;
        }
        let observer = CallbackObserver::new(o.progress, o.user);
        let mut r = load(&options, &observer).map_err(|e| Failure::verb("load", &e))?;
        let t = &r.total;
        let report = pagewise_load_report {
            size: 0,
            interrupted: r.outcome.interrupted as u32,
            files: t.files,
            bytes: t.bytes,
            cached_bytes_before: t.cached_bytes_before,
            cached_bytes_after: t.cached_bytes_after,
            already_cached_files: t.already_cached_files,
            read_bytes: t.read_bytes,
            locked_bytes: t.locked_bytes,
            locked_files: t.locked_files,
            unknown_files: t.unknown_files,
            error_count: r.outcome.error_count,
            elapsed_s: r.outcome.elapsed_s,
            rate_bytes_per_s: r.rate_bytes_per_s,
        };
        // SAFETY: checked above.
        unsafe { ffi::write_report(out, report) };
        if !lock_out.is_null() {
            let locks = std::mem::take(&mut r.locks);
            let lock = if locks.is_empty() {
                std::ptr::null_mut()
            } else {
                Box::into_raw(Box::new(pagewise_lock { _locks: locks }))
            };
            // SAFETY: the caller passes a writable pointer.
            unsafe { lock_out.write(lock) };
        }
        Ok(finish(&r.outcome, "load"))
    })
}

/// Unlocks and unmaps what a pagewise_load locked (NULL: nothing).
///
/// # Safety
/// `lock` is NULL or a lock from pagewise_load not freed yet.
#[no_mangle]
pub unsafe extern "C" fn pagewise_lock_free(lock: *mut pagewise_lock) {
    ffi::call(
        |_| (),
        || {
            if !lock.is_null() {
                // SAFETY: made by Box::into_raw in pagewise_load, freed once.
                drop(unsafe { Box::from_raw(lock) });
            }
            Ok(())
        },
    )
}

/// Copies `sources[0..n]` to `dest` (cp -a / rsync -a style: into `dest` when it is a
/// directory, else as it), at device speed, leaving the page cache as it was.
///
/// Returns the number of files that failed (0: all copied; the first failure is in
/// pagewise_last_error()), or a negative errno when nothing could run.
///
/// # Safety
/// `sources` points to `n` NUL-terminated strings, `dest` is one; `opts` and `out` as in
/// pagewise_stat.
#[no_mangle]
pub unsafe extern "C" fn pagewise_copy(
    sources: *const *const c_char,
    n: usize,
    dest: *const c_char,
    opts: *const pagewise_copy_options,
    out: *mut pagewise_copy_report,
) -> c_int {
    call_int(|| {
        // SAFETY: as the caller promised.
        let o = unsafe { ffi::read_options(opts, "pagewise_copy_options") }?;
        // SAFETY: as the caller promised.
        unsafe { ffi::check_report(out, "pagewise_copy_report") }?;
        check_flags("pagewise_copy_options", o.flags, COPY_FLAGS)?;
        // SAFETY: as the caller promised.
        let sources = unsafe { ffi::path_array(sources, n, "sources") }?;
        // SAFETY: as the caller promised.
        let dest = unsafe { ffi::path_arg(dest, "dest") }?;
        let strategy = match o.strategy {
            PAGEWISE_COPY_AUTO => Strategy::Auto,
            PAGEWISE_COPY_DONTCACHE => Strategy::Dontcache,
            PAGEWISE_COPY_DIRECT => Strategy::Direct,
            PAGEWISE_COPY_DROP_BEHIND => Strategy::DropBehind,
            PAGEWISE_COPY_BUFFERED => Strategy::Buffered,
            s => {
                return Err(Failure::invalid(format!(
                    "pagewise_copy_options.strategy: unknown strategy {s}"
                )))
            }
        };
        let mut options = CopyOptions {
            sources,
            dest,
            strategy,
            preserve: o.flags & PAGEWISE_COPY_PRESERVE != 0,
            preallocate: o.flags & PAGEWISE_COPY_NO_PREALLOCATE == 0,
            fsync: o.flags & PAGEWISE_COPY_FSYNC != 0,
            verify: o.flags & PAGEWISE_COPY_VERIFY != 0,
            named_temp: o.flags & PAGEWISE_COPY_NAMED_TEMP != 0,
            ..CopyOptions::default()
        };
        at_most(
            "pagewise_copy_options.threads",
            o.threads.into(),
            MAX_THREADS,
        )?;
        at_most("pagewise_copy_options.depth", o.depth.into(), MAX_DEPTH)?;
        at_most("pagewise_copy_options.chunk", o.chunk, MAX_CHUNK)?;
        if o.threads > 0 {
            options.threads = o.threads as usize;
        }
        if o.depth > 0 {
            options.depth = o.depth as usize;
        }
        if o.chunk > 0 {
            options.chunk = usize::try_from(o.chunk)
                .map_err(|_| Failure::invalid("pagewise_copy_options.chunk: too large"))?;
        }
        if o.direct_min > 0 {
            options.direct_min = o.direct_min;
        }
        let observer = CallbackObserver::new(o.progress, o.user);
        let r = copy(&options, &observer).map_err(|e| Failure::verb("copy", &e))?;
        let used = |s: Strategy| r.strategies.get(&s).copied().unwrap_or(0);
        let report = pagewise_copy_report {
            size: 0,
            interrupted: r.outcome.interrupted as u32,
            files: r.files,
            dirs: r.dirs,
            symlinks: r.symlinks,
            hardlinks: r.hardlinks,
            specials: r.specials,
            bytes: r.bytes,
            data_bytes: r.data_bytes,
            direct_files: used(Strategy::Direct),
            dontcache_files: used(Strategy::Dontcache),
            drop_behind_files: used(Strategy::DropBehind),
            buffered_files: used(Strategy::Buffered),
            source_added_bytes: r.residue.source_added_bytes,
            dest_cached_bytes: r.residue.dest_cached_bytes,
            verified_files: r.verified_files,
            verify_mismatches: r.verify_mismatches,
            error_count: r.outcome.error_count,
            elapsed_s: r.outcome.elapsed_s,
            rate_bytes_per_s: r.rate_bytes_per_s,
        };
        // SAFETY: checked above.
        unsafe { ffi::write_report(out, report) };
        Ok(finish(&r.outcome, "copy"))
    })
}
