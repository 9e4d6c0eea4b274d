//! io_uring (<https://man7.org/linux/man-pages/man7/io_uring.7.html>, Linux 5.1;
//! `IORING_OP_READ` 5.6), through the `io-uring` crate (rustix's io_uring module has only the
//! raw system calls): many reads in flight from one thread, submitted in batches.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::AlignedBuf;

/// One read for [`uring_read_all`]: descriptor, offset, length.
#[derive(Debug, Clone, Copy)]
pub struct ReadReq {
    /// The descriptor to read (open for the whole call).
    pub fd: RawFd,
    /// Byte offset in the file.
    pub off: u64,
    /// Bytes to read (at most the call's `max_len`).
    pub len: u32,
}

/// `int io_uring_setup(u32 entries, struct io_uring_params *p)` and `int io_uring_enter(...)`
/// with `IORING_OP_READ` entries —
/// <https://man7.org/linux/man-pages/man2/io_uring_setup.2.html>,
/// <https://man7.org/linux/man-pages/man2/io_uring_enter.2.html>, through the `io-uring` crate.
///
/// Reads every request with up to `depth` in flight through one io_uring: submissions go to the kernel in
/// batches — one system call and one device notification for many reads, where a thread per
/// read pays both per request. Buffers (`depth` of `max_len` bytes, 4 KiB aligned, so O_DIRECT
/// descriptors work) are allocated and touched before `ready` is called; the clock should start
/// there. Returns per-request results (bytes read or the error), in request order.
pub fn uring_read_all(
    reqs: &[ReadReq],
    depth: usize,
    max_len: usize,
    ready: impl FnOnce(),
) -> io::Result<Vec<io::Result<usize>>> {
    use io_uring::{opcode, types, IoUring};
    let depth = depth.clamp(1, 4096);
    let mut ring = IoUring::new(depth.next_power_of_two() as u32)?;
    let mut bufs: Vec<AlignedBuf> = (0..depth)
        .map(|_| {
            let mut b = AlignedBuf::new(max_len.max(4096), 4096);
            b.fill(1);
            b
        })
        .collect();
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut slot_of: Vec<usize> = vec![0; depth];
    let mut results: Vec<io::Result<usize>> = Vec::with_capacity(reqs.len());
    results.resize_with(reqs.len(), || Ok(0));
    let mut next = 0usize;
    let mut in_flight = 0usize;
    ready();
    while next < reqs.len() || in_flight > 0 {
        {
            let mut sq = ring.submission();
            while next < reqs.len() {
                let Some(slot) = free.pop() else { break };
                let r = reqs[next];
                let len = (r.len as usize).min(bufs[slot].len());
                let entry = opcode::Read::new(types::Fd(r.fd), bufs[slot].as_mut_ptr(), len as u32)
                    .offset(r.off)
                    .build()
                    .user_data(((next as u64) << 16) | slot as u64);
                // SAFETY: the buffer stays alive and unused by anyone else until this entry's
                // completion is reaped below (the slot is only returned to `free` then).
                if unsafe { sq.push(&entry) }.is_err() {
                    free.push(slot);
                    break;
                }
                slot_of[slot] = next;
                next += 1;
                in_flight += 1;
            }
        }
        ring.submit_and_wait(1)?;
        for cqe in ring.completion() {
            let slot = (cqe.user_data() & 0xffff) as usize;
            let idx = (cqe.user_data() >> 16) as usize;
            debug_assert_eq!(slot_of[slot], idx);
            results[idx] = read_result(&cqe);
            free.push(slot);
            in_flight -= 1;
        }
    }
    Ok(results)
}

/// An io_uring kept by one thread for batches of reads into the caller's buffers:
/// io_uring_setup(2) once, then one io_uring_enter(2) per batch
/// (<https://man7.org/linux/man-pages/man7/io_uring.7.html>).
pub struct ReadRing {
    ring: io_uring::IoUring,
}

impl ReadRing {
    /// A ring with room for `entries` reads per batch (rounded up to a power of two):
    /// io_uring_setup(2). Fails where io_uring is missing or disabled (see `probe_io_uring`).
    pub fn new(entries: u32) -> io::Result<ReadRing> {
        Ok(ReadRing {
            ring: io_uring::IoUring::new(entries.next_power_of_two())?,
        })
    }

    /// Issues one read per request — descriptor, offset, buffer — all in one submission, and
    /// waits for all of them. Buffered reads of uncached data start their disk I/O during the
    /// submission, under one block plug: one device notification for the batch, and adjacent
    /// requests merged. `rw_flags` are preadv2 flags (e.g. [`RWF_DONTCACHE`](super::RWF_DONTCACHE)). Results (bytes
    /// read, possibly short, or the error) are in request order. Batches larger than the
    /// ring are split.
    pub fn read_batch(
        &mut self,
        reqs: &mut [(BorrowedFd<'_>, u64, &mut [u8])],
        rw_flags: i32,
    ) -> io::Result<Vec<io::Result<usize>>> {
        use io_uring::{opcode, types};
        let mut results: Vec<io::Result<usize>> = Vec::with_capacity(reqs.len());
        let cap = self.ring.params().sq_entries() as usize;
        for (base, part) in reqs.chunks_mut(cap).enumerate().map(|(i, p)| (i * cap, p)) {
            results.resize_with(base + part.len(), || Ok(0));
            {
                let mut sq = self.ring.submission();
                for (i, (fd, off, buf)) in part.iter_mut().enumerate() {
                    let len = buf.len().min(u32::MAX as usize) as u32;
                    let e = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf.as_mut_ptr(), len)
                        .offset(*off)
                        .rw_flags(rw_flags)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: each buffer is borrowed mutably for this whole call and every
                    // submitted entry is reaped below (`reap`) before it returns; the ring has room
                    // for `cap` entries and is empty here.
                    unsafe { sq.push(&e) }.expect("ring has room for the part");
                }
            }
            self.reap(part.len(), &mut results[base..])?;
        }
        Ok(results)
    }

    /// Submits what is queued and waits for the `left` reads in flight, each one's result
    /// stored at its `user_data` index in `results`. A failed wait with reads still in flight
    /// aborts the process: they would write into buffers the caller is about to free.
    fn reap(&mut self, mut left: usize, results: &mut [io::Result<usize>]) -> io::Result<()> {
        while left > 0 {
            match self.ring.submit_and_wait(left) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // Reads in flight would write into buffers the caller is about to
                    // free: then nothing safe is left to do but stop.
                    if left > self.ring.submission().len() {
                        eprintln!("pagewise: io_uring wait failed with reads in flight: {e}");
                        std::process::abort();
                    }
                    return Err(e);
                }
            }
            for cqe in self.ring.completion() {
                results[cqe.user_data() as usize] = read_result(&cqe);
                left -= 1;
            }
        }
        Ok(())
    }
}

/// A completed read's result: the bytes read, or the error.
fn read_result(cqe: &io_uring::cqueue::Entry) -> io::Result<usize> {
    if cqe.result() < 0 {
        Err(io::Error::from_raw_os_error(-cqe.result()))
    } else {
        Ok(cqe.result() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::require;
    use super::*;
    use std::os::fd::AsFd;

    /// A temporary file of `len` bytes repeating every 251, and those bytes; None where
    /// io_uring is disabled (said through `require`).
    fn pattern_file(len: u32) -> Option<(std::fs::File, Vec<u8>)> {
        if !super::super::probe_io_uring() {
            require(
                false,
                "io_uring (disabled on this kernel: sysctl or seccomp)",
            );
            return None;
        }
        let f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        super::super::pwritev2(f.as_fd(), &data, 0, 0).unwrap();
        Some((f, data))
    }

    #[test]
    fn a_batch_larger_than_the_ring_is_split_and_errors_stay_per_read() {
        let Some((f, data)) = pattern_file(8192) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let d = std::fs::File::open(dir.path()).unwrap();
        let mut ring = ReadRing::new(2).unwrap();
        let mut bufs = vec![[0u8; 100]; 5];
        let mut batch: Vec<(BorrowedFd<'_>, u64, &mut [u8])> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| {
                let fd = if i == 3 { d.as_fd() } else { f.as_fd() };
                (fd, i as u64 * 1000, &mut b[..])
            })
            .collect();
        let got = ring.read_batch(&mut batch, 0).unwrap();
        drop(batch);
        assert_eq!(got.len(), 5);
        for (i, r) in got.into_iter().enumerate() {
            if i == 3 {
                assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EISDIR));
            } else {
                assert_eq!(r.unwrap(), 100, "read {i}");
                let at = i * 1000;
                assert_eq!(bufs[i][..], data[at..at + 100], "read {i}");
            }
        }
    }

    #[test]
    fn ring_reads_come_back_in_request_order() {
        // This machine (and CI's) has io_uring: the test runs; elsewhere it says why not.
        let Some((f, data)) = pattern_file(20_000) else {
            return;
        };

        let reqs: Vec<ReadReq> = [(0u64, 100u32), (8192, 4096), (19_990, 4096)]
            .iter()
            .map(|&(off, len)| ReadReq {
                fd: f.as_raw_fd(),
                off,
                len,
            })
            .collect();
        let got = uring_read_all(&reqs, 2, 4096, || {}).unwrap();
        let got: Vec<usize> = got.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(got, vec![100, 4096, 10]);

        let mut ring = ReadRing::new(2).unwrap();
        let (mut a, mut b, mut c) = ([0u8; 10], [0u8; 10], [0u8; 10]);
        let mut batch = [
            (f.as_fd(), 0, &mut a[..]),
            (f.as_fd(), 251, &mut b[..]),
            (f.as_fd(), 19_995, &mut c[..]),
        ];
        let got = ring.read_batch(&mut batch, 0).unwrap();
        let got: Vec<usize> = got.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(got, vec![10, 10, 5]);
        assert_eq!(a, data[..10]);
        assert_eq!(b, data[..10], "the pattern repeats every 251 bytes");
        assert_eq!(c[..5], data[19_995..]);
    }
}
