//! rsync -S on the copy's data: whole blocks of zeros become holes in the copy (see
//! [`CopyOptions::sparse_zeros`](super::CopyOptions::sparse_zeros)).

use crate::sys;
use std::os::fd::BorrowedFd;

/// The block of holes: zeros are punched in whole blocks of this size, aligned in the file.
const ZERO_BLOCK: usize = 4096;

/// The runs of whole, aligned [`ZERO_BLOCK`]s of zeros in `data` (which starts at `off` in
/// the file), as (offset in the file, length).
fn zero_runs(data: &[u8], off: u64) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let first = (ZERO_BLOCK as u64 - off % ZERO_BLOCK as u64) % ZERO_BLOCK as u64;
    let mut at = first as usize;
    while at + ZERO_BLOCK <= data.len() {
        if data[at..at + ZERO_BLOCK].iter().all(|&b| b == 0) {
            let o = off + at as u64;
            match runs.last_mut() {
                Some(r) if r.0 + r.1 == o => r.1 += ZERO_BLOCK as u64,
                _ => runs.push((o, ZERO_BLOCK as u64)),
            }
        }
        at += ZERO_BLOCK;
    }
    runs
}

/// rsync -S: the zero blocks of a chunk just written made holes. A file system without
/// holes keeps them written (EOPNOTSUPP ignored: the data is right either way).
pub(super) fn punch(dst: BorrowedFd<'_>, data: &[u8], off: u64) {
    for (o, l) in zero_runs(data, off) {
        if sys::punch_hole(dst, o, l).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_runs_are_whole_aligned_blocks() {
        let mut d = vec![1u8; 6 * ZERO_BLOCK];
        d[ZERO_BLOCK..3 * ZERO_BLOCK].fill(0);
        d[4 * ZERO_BLOCK + 1..].fill(0);
        // Block 4 has one byte of data before its zeros: not a hole; block 5 is.
        assert_eq!(zero_runs(&d, 0), vec![(4096, 8192), (20480, 4096)]);
        // Data starting mid-block: only blocks whole in the file count.
        let z = vec![0u8; 3 * ZERO_BLOCK];
        assert_eq!(zero_runs(&z, 100), vec![(4096, 8192)]);
        assert_eq!(zero_runs(&z, 8192), vec![(8192, 12288)]);
        assert_eq!(zero_runs(&z[..100], 0), vec![]);
        assert_eq!(zero_runs(&[], 0), vec![]);
    }
}
