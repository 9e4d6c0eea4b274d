//! `pagewise_evict`: its option and report structs and the entry point.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};

use pagewise_core::evict::{evict, EvictOptions};

use super::{check_reserved, known, pagewise_walk_options, publish, tree_call, EVICT_FLAGS};
use super::{
    PAGEWISE_EVICT_DRY_RUN, PAGEWISE_EVICT_NO_SYNC, PAGEWISE_EVICT_OWNED, PAGEWISE_EVICT_WHY,
};
use crate::ffi::{call_int, pagewise_progress_fn, CallbackObserver, Failure, Sized32};

/// Options of `pagewise_evict`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_evict_options {
    /// sizeof(pagewise_evict_options).
    pub size: u32,
    /// PAGEWISE_EVICT_NO_SYNC | _OWNED | _DRY_RUN | _WHY (the walk flags are `walk.flags`).
    pub flags: u32,
    /// Which files (walker threads 0: twice the CPUs), how, and which part of each to drop.
    pub walk: pagewise_walk_options,
    /// Called with the progress, may stop the verb (NULL: none).
    pub progress: pagewise_progress_fn,
    /// Handed to `progress`.
    pub user: *mut c_void,
    /// Must be 0 (else -EINVAL): kept for a later field.
    pub reserved: u32,
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

// SAFETY: all are #[repr(C)], start with a u32 size, and hold only integers, floats, raw
// pointers and optional function pointers (some in the embedded walk struct), for which zero is
// valid.
unsafe impl Sized32 for pagewise_evict_options {}
unsafe impl Sized32 for pagewise_evict_report {}

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
        let (o, roots, w) = unsafe {
            tree_call(
                paths,
                n,
                opts,
                out,
                EVICT_FLAGS,
                EvictOptions::default().walk,
            )
        }?;
        check_reserved("pagewise_evict_options", o.reserved)?;
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
        // SAFETY: checked by tree_call.
        Ok(unsafe { publish(out, report, &r.outcome, "evict") })
    })
}
