//! The verbs: `pagewise_stat`, `pagewise_evict`, `pagewise_load` (with `pagewise_lock`) and
//! `pagewise_copy`, one module each. Each reads its option struct into the verb's options, runs
//! the verb with the progress callback as its observer, and writes the report's totals. This
//! module holds the flag and method constants and what the verbs share: the walk options
//! (`pagewise_walk_options`, read by `walked`), the limits, and publishing the outcome
//! (`finish`). `v1` reads the option structs of the 0.1.0 header, whose walk fields were inline.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::path::PathBuf;

use pagewise_core::{ByteRange, Method, Outcome, WalkOptions};

use crate::ffi::{self, Failure, Sized32};

mod v1;

// In this order (kept apart so rustfmt does not sort them), so pagewise.h lists the structs and
// functions as it did: stat, evict, load, copy.
mod stat;
// then
mod evict;
// then
mod load;
// then
mod copy;

pub use copy::*;
pub use evict::*;
pub use load::*;
pub use stat::*;

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
/// Copy flag: keep a file stopped mid-copy as a partial temporary with a checkpoint, for a
/// later copy to resume (rsync --partial); implies PAGEWISE_COPY_NAMED_TEMP.
pub const PAGEWISE_COPY_PARTIAL: u32 = 32;

const WALK_FLAGS: u32 = PAGEWISE_FOLLOW | PAGEWISE_ONE_FILE_SYSTEM | PAGEWISE_NOATIME;
const EVICT_FLAGS: u32 =
    PAGEWISE_EVICT_NO_SYNC | PAGEWISE_EVICT_OWNED | PAGEWISE_EVICT_DRY_RUN | PAGEWISE_EVICT_WHY;
const COPY_FLAGS: u32 = PAGEWISE_COPY_PRESERVE
    | PAGEWISE_COPY_NO_PREALLOCATE
    | PAGEWISE_COPY_FSYNC
    | PAGEWISE_COPY_VERIFY
    | PAGEWISE_COPY_NAMED_TEMP
    | PAGEWISE_COPY_PARTIAL;

/// The walk options of `pagewise_stat`, `pagewise_evict` and `pagewise_load`, embedded in their
/// option structs as `walk`: which files a walk visits, how, and which part of each it takes.
/// Zero means the default for every field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pagewise_walk_options {
    /// PAGEWISE_FOLLOW | PAGEWISE_ONE_FILE_SYSTEM | PAGEWISE_NOATIME.
    pub flags: u32,
    /// Walker threads (0: the verb's default: one per CPU for stat, twice the CPUs for evict
    /// and load, at least 4 for load; at most 1024).
    pub threads: u32,
    /// Levels to descend below the roots (0: no limit).
    pub max_depth: u32,
    /// PAGEWISE_METHOD_* (0: auto).
    pub method: u32,
    /// First byte of each file (0: the start).
    pub range_start: u64,
    /// End (exclusive) of the range of each file (0: the end of each file).
    pub range_end: u64,
    /// Globs a file must match (its name or its path below its root); NULL: all files.
    pub include: *const *const c_char,
    /// Entries in `include`.
    pub include_count: usize,
    /// Globs that exclude files and prune directories.
    pub exclude: *const *const c_char,
    /// Entries in `exclude`.
    pub exclude_count: usize,
    /// Must be 0 (else -EINVAL): kept for later walk options (an embedded struct cannot grow
    /// at its end).
    pub reserved: [u64; 2],
}

/// The walk, range and method the three tree verbs read from their `walk`.
struct Walked {
    walk: WalkOptions,
    range: ByteRange,
    method: Method,
}

/// The option structs of the three tree verbs (stat, evict, load): `flags` (the verb's own)
/// and `walk`, read by [`tree_call`], and the 0.1.0 layout of the struct ([`v1`]).
trait TreeOptions: Sized32 {
    /// The struct's C name (`pagewise_stat_options`), for messages.
    const NAME: &'static str;
    /// The struct as the 0.1.0 header laid it out (walk fields inline).
    type V1: Sized32;
    /// The verb's own flags.
    fn flags(&self) -> u32;
    /// The walk options.
    fn walk(&self) -> &pagewise_walk_options;
    /// The struct from its 0.1.0 layout.
    fn from_v1(v: Self::V1) -> Self;
}

/// Implements [`TreeOptions`] for option structs with `flags` and `walk`.
macro_rules! tree_options {
    ($($t:ty: $v1:ty),*) => {$(
        impl TreeOptions for $t {
            const NAME: &'static str = stringify!($t);
            type V1 = $v1;
            fn flags(&self) -> u32 {
                self.flags
            }
            fn walk(&self) -> &pagewise_walk_options {
                &self.walk
            }
            fn from_v1(v: $v1) -> Self {
                v.into()
            }
        }
    )*};
}
tree_options!(
    pagewise_stat_options: v1::TreeOptionsV1,
    pagewise_evict_options: v1::TreeOptionsV1,
    pagewise_load_options: v1::LoadOptionsV1
);

/// What a tree verb reads from its arguments before it runs: its options (zero: the defaults),
/// the roots, and the walk part of the options over `default` (the verb's own
/// `XOptions::default().walk`, its thread policy included). The report pointer is checked;
/// `known` are the verb's own flags. A struct of the 0.1.0 layout's size is read as that
/// layout ([`v1`]): programs built against that header keep working.
///
/// # Safety
/// `paths`, `opts` and `out` are as `pagewise_stat` requires.
unsafe fn tree_call<O: TreeOptions, R: Sized32>(
    paths: *const *const c_char,
    n: usize,
    opts: *const O,
    out: *mut R,
    known: u32,
    default: WalkOptions,
) -> Result<(O, Vec<PathBuf>, Walked), Failure> {
    let theirs = (!opts.is_null()).then(|| {
        // SAFETY: as the caller promised, the struct starts with its u32 size.
        unsafe { opts.cast::<u32>().read_unaligned() }
    });
    let o = if theirs == Some(std::mem::size_of::<O::V1>() as u32) {
        // SAFETY: a struct of the 0.1.0 layout's size is that layout (no later size is).
        O::from_v1(unsafe { ffi::read_options(opts.cast::<O::V1>(), O::NAME) }?)
    } else {
        // SAFETY: as the caller promised.
        unsafe { ffi::read_options(opts, O::NAME) }?
    };
    let report_name = O::NAME.replace("_options", "_report");
    // SAFETY: as the caller promised.
    unsafe { ffi::check_report(out, &report_name) }?;
    check_flags(O::NAME, o.flags(), known)?;
    // SAFETY: as the caller promised.
    let roots = unsafe { ffi::path_array(paths, n, "paths") }?;
    // SAFETY: the option struct's arrays, as the caller promised.
    let w = unsafe { walked(&format!("{}.walk", O::NAME), o.walk(), default) }?;
    Ok((o, roots, w))
}

/// Writes the verb's report (when `out` is not NULL) and publishes its outcome; the verb's
/// `int` result.
///
/// # Safety
/// `out` was checked by [`tree_call`] (or `ffi::check_report`).
unsafe fn publish<R: Sized32>(out: *mut R, report: R, outcome: &Outcome, verb: &str) -> c_int {
    // SAFETY: as the caller promised.
    unsafe { ffi::write_report(out, report) };
    finish(outcome, verb)
}

/// # Safety
/// The glob arrays are as `ffi::string_array` requires.
unsafe fn walked(
    what: &str,
    f: &pagewise_walk_options,
    default: WalkOptions,
) -> Result<Walked, Failure> {
    check_flags(what, f.flags, WALK_FLAGS)?;
    if f.reserved != [0; 2] {
        return Err(Failure::invalid(format!(
            "{what}.reserved: must be 0 (kept for later walk options)"
        )));
    }
    let flags = f.flags;
    let mut walk = WalkOptions {
        follow: flags & PAGEWISE_FOLLOW != 0,
        one_file_system: flags & PAGEWISE_ONE_FILE_SYSTEM != 0,
        noatime: flags & PAGEWISE_NOATIME != 0,
        max_depth: (f.max_depth > 0).then_some(f.max_depth as usize),
        ..default
    };
    at_most(&format!("{what}.threads"), f.threads.into(), MAX_THREADS)?;
    if f.threads > 0 {
        walk.threads = f.threads as usize;
    }
    // SAFETY: as the caller promised.
    walk.include =
        unsafe { ffi::text_array(f.include, f.include_count, &format!("{what}.include")) }?;
    // SAFETY: as the caller promised.
    walk.exclude =
        unsafe { ffi::text_array(f.exclude, f.exclude_count, &format!("{what}.exclude")) }?;
    let method = match f.method {
        PAGEWISE_METHOD_AUTO => Method::Auto,
        PAGEWISE_METHOD_CACHESTAT => Method::Cachestat,
        PAGEWISE_METHOD_MINCORE => Method::Mincore,
        m => {
            return Err(Failure::invalid(format!(
                "{what}.method: unknown method {m}"
            )))
        }
    };
    let range = (f.range_start, f.range_end);
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

/// A `reserved` field of the option struct `what`: 0, else EINVAL. It is kept for a field a
/// later version may define; a caller's garbage there must not be taken for a meaning then.
fn check_reserved(what: &str, value: u32) -> Result<(), Failure> {
    if value != 0 {
        return Err(Failure::invalid(format!(
            "{what}.reserved: {value:#x}: must be 0 (kept for a later field)"
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
