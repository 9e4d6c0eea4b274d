//! `pagewise_copy`: its option and report structs and the entry point.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};

use pagewise_core::copy::{copy, CopyOptions, Preserve, Strategy};

use super::{
    at_most, check_flags, check_reserved, finish, COPY_FLAGS, MAX_CHUNK, MAX_DEPTH, MAX_THREADS,
};
use super::{
    PAGEWISE_COPY_AUTO, PAGEWISE_COPY_BUFFERED, PAGEWISE_COPY_DIRECT, PAGEWISE_COPY_DONTCACHE,
    PAGEWISE_COPY_DROP_BEHIND, PAGEWISE_COPY_FSYNC, PAGEWISE_COPY_NAMED_TEMP,
    PAGEWISE_COPY_NO_PREALLOCATE, PAGEWISE_COPY_PARTIAL, PAGEWISE_COPY_PRESERVE,
    PAGEWISE_COPY_VERIFY,
};
use crate::ffi::{self, call_int, pagewise_progress_fn, CallbackObserver, Failure, Sized32};

/// Options of `pagewise_copy`. Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_copy_options {
    /// sizeof(pagewise_copy_options).
    pub size: u32,
    /// PAGEWISE_COPY_PRESERVE | _NO_PREALLOCATE | _FSYNC | _VERIFY | _NAMED_TEMP | _PARTIAL.
    pub flags: u32,
    /// PAGEWISE_COPY_AUTO (0), _DONTCACHE, _DIRECT, _DROP_BEHIND, _BUFFERED.
    pub strategy: u32,
    /// Files copied in parallel (0: 16; at most 1024).
    pub threads: u32,
    /// I/Os in flight within one large file (0: 8; at most 1024).
    pub depth: u32,
    /// Must be 0 (else -EINVAL): kept for a later field.
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
unsafe impl Sized32 for pagewise_copy_options {}
unsafe impl Sized32 for pagewise_copy_report {}

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
        check_reserved("pagewise_copy_options", o.reserved)?;
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
            preserve: match o.flags & PAGEWISE_COPY_PRESERVE != 0 {
                true => Preserve::ALL,
                false => Preserve::NONE,
            },
            preallocate: o.flags & PAGEWISE_COPY_NO_PREALLOCATE == 0,
            fsync: o.flags & PAGEWISE_COPY_FSYNC != 0,
            verify: o.flags & PAGEWISE_COPY_VERIFY != 0,
            named_temp: o.flags & PAGEWISE_COPY_NAMED_TEMP != 0,
            partial: o.flags & PAGEWISE_COPY_PARTIAL != 0,
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
