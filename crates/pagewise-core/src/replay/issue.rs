//! Issuing a replay's requests: a pool of threads with `pread`, or one io_uring.

use super::Request;
use crate::error::{FileError, Op};
use crate::sys::{self, AlignedBuf};
use crate::trace::{OpenFiles, Trace, TracedFd};
use crate::verb::{Observer, Tally};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The requests of one replay and what they are issued against.
pub(super) struct Issue<'a> {
    pub reqs: &'a [Request],
    pub files: &'a OpenFiles,
    pub trace: &'a Trace,
    /// Read through the O_DIRECT descriptors.
    pub direct: bool,
    /// Requests in flight.
    pub depth: usize,
    /// Bytes of the longest request (the buffers' size).
    pub max: usize,
    pub tally: &'a Tally,
    pub observer: &'a dyn Observer,
}

impl Issue<'_> {
    /// Issues every request, through io_uring when `uring` (falling back to threads when the
    /// ring cannot be set up); returns (bytes read, seconds of I/O), or an error when the
    /// buffers cannot be had.
    pub fn run(&self, uring: bool) -> Result<(u64, f64), crate::Error> {
        if uring {
            if let Some(done) = self.uring() {
                return Ok(done);
            }
        }
        self.threads()
    }

    /// The descriptor to read `file` through: kept, or opened again (a file not kept gets
    /// the replay's advice: no readahead around the recorded pages).
    fn fd(&self, file: u32) -> Option<TracedFd<'_>> {
        let fd = self.files.get(file, self.direct)?;
        if !self.direct && fd.is_fresh() {
            let _ = sys::fadvise(fd.as_fd(), 0, 0, sys::Advice::Random);
        }
        Some(fd)
    }

    fn failed(&self, r: &Request, op: Op, e: &std::io::Error) {
        let path = self.trace.files[r.file as usize].name();
        self.tally.error(FileError::io(&path, op, e));
    }

    /// `depth` threads in flight; the observer is asked between requests whether to stop.
    /// Threads and their buffers are made and touched before the clock starts, so the time is
    /// the I/O's (on a VM, the first DMA into a fresh buffer page costs a hypervisor fault).
    fn threads(&self) -> Result<(u64, f64), crate::Error> {
        let next = AtomicU64::new(0);
        let bytes = AtomicU64::new(0);
        let depth = self.depth.clamp(1, self.reqs.len().max(1));
        let barrier = std::sync::Barrier::new(depth + 1);
        let mut bufs: Vec<AlignedBuf> = Vec::new();
        let no_memory = || crate::Error::Invalid {
            what: "depth",
            message: format!("no memory for {depth} buffers of {} bytes", self.max),
        };
        bufs.try_reserve(depth).map_err(|_| no_memory())?;
        for _ in 0..depth {
            let mut b = AlignedBuf::try_new(self.max, 4096).ok_or_else(no_memory)?;
            b.fill(1);
            bufs.push(b);
        }
        let mut start = Instant::now();
        std::thread::scope(|s| {
            for mut buf in bufs.drain(..) {
                let (next, bytes, barrier) = (&next, &bytes, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    // The file of the last request, kept for the next if it is the same.
                    let mut cur: Option<(u32, Option<TracedFd>)> = None;
                    while let Some(r) = self.next(next) {
                        if cur.as_ref().is_none_or(|c| c.0 != r.file) {
                            drop(cur.take()); // closed before the next is opened
                            cur = Some((r.file, self.fd(r.file)));
                        }
                        let fd = cur.as_ref().and_then(|c| c.1.as_ref());
                        bytes.fetch_add(self.read(r, fd, &mut buf), Ordering::Relaxed);
                    }
                });
            }
            barrier.wait();
            start = Instant::now();
        });
        Ok((bytes.into_inner(), start.elapsed().as_secs_f64()))
    }

    /// The next request to issue, None when all are or the observer said stop.
    fn next(&self, next: &AtomicU64) -> Option<&Request> {
        if self.tally.stop_requested(self.observer) {
            return None;
        }
        self.reqs.get(next.fetch_add(1, Ordering::Relaxed) as usize)
    }

    /// Reads one request into `buf` through `fd`: the bytes read (0 for a file not open, or
    /// an error).
    fn read(&self, r: &Request, fd: Option<&TracedFd>, buf: &mut AlignedBuf) -> u64 {
        let Some(fd) = fd else { return 0 };
        let n = (r.len as usize).min(buf.len());
        match sys::pread(fd.as_fd(), &mut buf[..n], r.off) {
            Ok(got) => {
                self.observer.progress(0, got as u64);
                got as u64
            }
            Err(e) => {
                let op = if self.direct {
                    Op::PreadDirect
                } else {
                    Op::Pread
                };
                self.failed(r, op, &e);
                0
            }
        }
    }

    /// One io_uring: batches of submissions instead of a thread per request. None when the
    /// ring cannot be set up (e.g. io_uring disabled).
    fn uring(&self) -> Option<(u64, f64)> {
        use std::os::fd::AsRawFd;
        let rr: Vec<(&Request, sys::ReadReq)> = self
            .reqs
            .iter()
            .filter_map(|r| {
                // Every file is kept open here (see replay_with): the descriptor outlives
                // this borrow.
                let fd = self.fd(r.file)?.as_fd().as_raw_fd();
                let len = r.len.min(self.max as u64) as u32;
                let req = sys::ReadReq {
                    fd,
                    off: r.off,
                    len,
                };
                Some((r, req))
            })
            .collect();
        let list: Vec<sys::ReadReq> = rr.iter().map(|x| x.1).collect();
        let mut start = Instant::now();
        let results =
            sys::uring_read_all(&list, self.depth, self.max, || start = Instant::now()).ok()?;
        let elapsed = start.elapsed().as_secs_f64();
        let mut bytes = 0;
        for ((r, _), res) in rr.iter().zip(results) {
            match res {
                Ok(n) => bytes += n as u64,
                Err(e) => {
                    let op = if self.direct {
                        Op::UringReadDirect
                    } else {
                        Op::UringRead
                    };
                    self.failed(r, op, &e);
                }
            }
        }
        self.observer.progress(0, bytes);
        Some((bytes, elapsed))
    }
}
