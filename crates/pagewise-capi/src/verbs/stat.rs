//! `pagewise_stat`: its option and report structs and the entry point.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};

use pagewise_core::stat::{stat, StatOptions};

use super::{check_reserved, known, pagewise_walk_options, publish, tree_call};
use crate::ffi::{call_int, pagewise_progress_fn, CallbackObserver, Failure, Sized32};

/// Options of `pagewise_stat`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_stat_options {
    /// sizeof(pagewise_stat_options).
    pub size: u32,
    /// None yet: must be 0 (the walk flags are `walk.flags`).
    pub flags: u32,
    /// Which files, how, and which part of each.
    pub walk: pagewise_walk_options,
    /// Called with the progress, may stop the verb (NULL: none).
    pub progress: pagewise_progress_fn,
    /// Handed to `progress`.
    pub user: *mut c_void,
    /// Must be 0 (else -EINVAL): kept for a later field.
    pub reserved: u32,
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

// SAFETY: all are #[repr(C)], start with a u32 size, and hold only integers, floats, raw
// pointers and optional function pointers (some in the embedded walk struct), for which zero is
// valid.
unsafe impl Sized32 for pagewise_stat_options {}
unsafe impl Sized32 for pagewise_stat_report {}

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
        let (o, roots, w) =
            unsafe { tree_call(paths, n, opts, out, 0, StatOptions::default().walk) }?;
        check_reserved("pagewise_stat_options", o.reserved)?;
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
        // SAFETY: checked by tree_call.
        Ok(unsafe { publish(out, report, &r.outcome, "stat") })
    })
}
