//! The option structs of stat, evict and load as the 0.1.0 header laid them out, with the walk
//! fields inline in each; later headers embed one `pagewise_walk_options` instead. The soname
//! did not change, so a program built against 0.1.0 still passes these: `tree_call` recognises
//! them by their size (every later layout is larger) and reads them through `From`. Not `pub`:
//! cbindgen leaves them out of pagewise.h.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};

use super::{
    pagewise_evict_options, pagewise_load_options, pagewise_stat_options, pagewise_walk_options,
    WALK_FLAGS,
};
use crate::ffi::{pagewise_progress_fn, Sized32};

/// `pagewise_stat_options` and `pagewise_evict_options` of 0.1.0 (the same fields; 88 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct TreeOptionsV1 {
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
    progress: pagewise_progress_fn,
    user: *mut c_void,
}

/// `pagewise_load_options` of 0.1.0 (104 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct LoadOptionsV1 {
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
    progress: pagewise_progress_fn,
    user: *mut c_void,
    batch_files: u64,
    window: u64,
}

// SAFETY: #[repr(C)], a u32 size first, and only integers, raw pointers and optional function
// pointers, for which zero is valid.
unsafe impl Sized32 for TreeOptionsV1 {}
unsafe impl Sized32 for LoadOptionsV1 {}

/// The walk fields of a 0.1.0 struct. Its one `flags` held the walk flags and the verb's: the
/// walk's go to `walk.flags`, the rest stay the verb's (checked there).
macro_rules! walk_of {
    ($v:expr) => {
        pagewise_walk_options {
            flags: $v.flags & WALK_FLAGS,
            threads: $v.threads,
            max_depth: $v.max_depth,
            method: $v.method,
            range_start: $v.range_start,
            range_end: $v.range_end,
            include: $v.include,
            include_count: $v.include_count,
            exclude: $v.exclude,
            exclude_count: $v.exclude_count,
            reserved: [0; 2],
        }
    };
}

impl From<TreeOptionsV1> for pagewise_stat_options {
    fn from(v: TreeOptionsV1) -> Self {
        pagewise_stat_options {
            size: std::mem::size_of::<Self>() as u32,
            flags: v.flags & !WALK_FLAGS,
            walk: walk_of!(v),
            progress: v.progress,
            user: v.user,
            reserved: v.reserved,
        }
    }
}

impl From<TreeOptionsV1> for pagewise_evict_options {
    fn from(v: TreeOptionsV1) -> Self {
        pagewise_evict_options {
            size: std::mem::size_of::<Self>() as u32,
            flags: v.flags & !WALK_FLAGS,
            walk: walk_of!(v),
            progress: v.progress,
            user: v.user,
            reserved: v.reserved,
        }
    }
}

impl From<LoadOptionsV1> for pagewise_load_options {
    fn from(v: LoadOptionsV1) -> Self {
        pagewise_load_options {
            size: std::mem::size_of::<Self>() as u32,
            flags: v.flags & !WALK_FLAGS,
            walk: walk_of!(v),
            progress: v.progress,
            user: v.user,
            batch_files: v.batch_files,
            window: v.window,
            depth: v.depth,
            reserved: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every later layout is larger than 0.1.0's, so a size says which layout it is.
    #[test]
    fn sizes_tell_the_layouts_apart() {
        use std::mem::size_of;
        assert_eq!(size_of::<TreeOptionsV1>(), 88);
        assert_eq!(size_of::<LoadOptionsV1>(), 104);
        assert!(size_of::<pagewise_stat_options>() > 88);
        assert!(size_of::<pagewise_evict_options>() > 88);
        assert!(size_of::<pagewise_load_options>() > 104);
    }
}
