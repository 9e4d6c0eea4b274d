//! `pagewise_load` and `pagewise_lock_free`: the option and report structs, the lock handle
//! and the entry points.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};

use pagewise_core::load::{load, LoadOptions, LockSet};

use super::{at_most, check_reserved, pagewise_walk_options, publish, tree_call, MAX_DEPTH};
use crate::ffi::{self, call_int, pagewise_progress_fn, CallbackObserver, Failure, Sized32};

/// Options of `pagewise_load`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_load_options {
    /// sizeof(pagewise_load_options).
    pub size: u32,
    /// None yet: must be 0 (the walk flags are `walk.flags`).
    pub flags: u32,
    /// Which files (walker threads 0: twice the CPUs, at least 4), how, and which part of each
    /// to load.
    pub walk: pagewise_walk_options,
    /// Called with the progress, may stop the verb (NULL: none).
    pub progress: pagewise_progress_fn,
    /// Handed to `progress`.
    pub user: *mut c_void,
    /// Files per worker whose readahead is queued before it waits (0: 256).
    pub batch_files: u64,
    /// Bytes in flight within one large file (0: 256 MiB).
    pub window: u64,
    /// Threads reading one large file (0: 16; at most 1024).
    pub depth: u32,
    /// Must be 0 (else -EINVAL): kept for a later field.
    pub reserved: u32,
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

// SAFETY: all are #[repr(C)], start with a u32 size, and hold only integers, floats, raw
// pointers and optional function pointers (some in the embedded walk struct), for which zero is
// valid.
unsafe impl Sized32 for pagewise_load_options {}
unsafe impl Sized32 for pagewise_load_report {}

/// Pages locked by `pagewise_load`; they stay resident until `pagewise_lock_free`.
pub struct pagewise_lock {
    _locks: LockSet,
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
        let (o, roots, w) =
            unsafe { tree_call(paths, n, opts, out, 0, LoadOptions::default().walk) }?;
        check_reserved("pagewise_load_options", o.reserved)?;
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
        // SAFETY: checked by tree_call.
        Ok(unsafe { publish(out, report, &r.outcome, "load") })
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
