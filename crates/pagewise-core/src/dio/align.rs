//! Alignment: what zero-copy requests must be aligned to ([`Alignment`]), the largest file
//! offset, and rounding of offsets to blocks and pages.

use crate::sys;

/// What a request must be aligned to for zero-copy I/O: the buffer's address to `memory`, the
/// file offset and the length to `offset`. With O_DIRECT, from statx(STATX_DIOALIGN), else
/// the device's logical block size, else 4096; with the buffered policies the page size
/// (nothing is required then; page-aligned buffers merely copy fastest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alignment {
    /// Alignment of the buffer's address in bytes (a power of two).
    pub memory: usize,
    /// Alignment of file offsets and lengths in bytes (a power of two).
    pub offset: usize,
}

/// The largest file offset the kernel takes (`loff_t`): requests must end by it.
pub(super) const MAX_OFFSET: u64 = i64::MAX as u64;

pub(super) fn align_down(x: u64, a: usize) -> u64 {
    x / a as u64 * a as u64
}

pub(super) fn align_up(x: u64, a: usize) -> u64 {
    x.div_ceil(a as u64) * a as u64
}

/// `[off, off+len)` widened to whole pages.
pub(super) fn page_cover(off: u64, len: u64) -> (u64, u64) {
    let p = sys::page_size() as usize;
    (align_down(off, p), align_up(off + len, p))
}
