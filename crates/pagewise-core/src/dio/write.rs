//! The write path: the write-behind stage ([`Stage`]), [`DirectFile::write_at`], and settling
//! the stage into the file (whole blocks straight, a partial last block completed or written
//! through the cache at the file's end).

use std::io;

use super::align::{align_down, align_up, MAX_OFFSET};
use super::{CachePolicy, DirectFile, CHUNK};
use crate::error::Op;
use crate::sys::{self, AlignedBuf};

/// The write-behind stage: file bytes `[off, off+len)` in `buf`, written by the caller (and,
/// with O_DIRECT, the head of the first block as read from the file), not yet in the file.
#[derive(Default)]
pub(super) struct Stage {
    pub(super) buf: Option<AlignedBuf>,
    pub(super) off: u64,
    pub(super) len: usize,
    pub(super) active: bool,
}

impl Stage {
    pub(super) fn end(&self) -> u64 {
        self.off + self.len as u64
    }
}

impl DirectFile {
    /// Writes all of `buf` at `off` (at the end of the file in append mode), returning
    /// `buf.len()`. The bytes may be staged until the next non-contiguous request, `sync` or
    /// `close` (see the module doc).
    pub fn write_at(&mut self, buf: &[u8], off: u64) -> io::Result<usize> {
        if !self.mode.write {
            return Err(self
                .io
                .fail(Op::Pwrite, io::Error::from_raw_os_error(libc::EBADF)));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let off = if self.mode.append { self.len()? } else { off };
        self.check_span(Op::Pwrite, off, buf.len())?;
        // Written in whole blocks (O_DIRECT) or pages (write-back), which must end by the
        // largest offset too: past it no filesystem stores a byte (EFBIG, as the kernel says).
        let block = self.io.align.offset.max(sys::page_size() as usize);
        if align_up(off + buf.len() as u64, block) > MAX_OFFSET {
            let e = io::Error::from_raw_os_error(libc::EFBIG);
            return Err(self.io.fail(Op::Pwrite, e));
        }
        self.window.invalidate_overlap(off, buf.len() as u64);
        if self.stage.active && off != self.stage.end() {
            self.settle()?;
        }
        // A write that starts past the end of the file leaves a gap. It goes to the file
        // before this call returns, as pwrite(2) would: the file's size is then its end and
        // the gap reads as zeros, to this file and to anyone else (staged, the gap would be
        // past the end until the next request elsewhere).
        let size = if self.stage.active { 0 } else { self.len()? };
        let past_end = !self.stage.active && off > size;
        // Going past a partial last page, the kernel zeroes the rest of that page through the
        // cache (buffered writes): a page this file then drops again, unless it was cached.
        let page = sys::page_size();
        let end_page = (past_end && !size.is_multiple_of(page))
            .then(|| align_down(size, page as usize))
            .filter(|&lo| !self.io.cached(lo, page));
        let mut done = 0;
        while done < buf.len() {
            let pos = off + done as u64;
            let rest = &buf[done..];
            let straight = self.straight_len(pos, rest.as_ptr(), rest.len());
            if let Some(len) = straight {
                if self.stage.active && self.stage.len > 0 {
                    // Contiguous with the stage: with O_DIRECT its end is aligned (else no
                    // straight write), so it is written whole.
                    self.settle()?;
                }
                self.stage.active = false;
                self.io.write_full(&rest[..len], pos)?;
                done += len;
                continue;
            }
            if !self.stage.active {
                self.start_stage(pos)?;
            }
            let s = &mut self.stage;
            let n = rest.len().min(CHUNK - s.len);
            s.buf.as_mut().expect("allocated")[s.len..s.len + n].copy_from_slice(&rest[..n]);
            s.len += n;
            done += n;
            if s.len == CHUNK {
                let b = s.buf.take().expect("allocated");
                let r = self.io.write_full(&b, self.stage.off);
                self.stage.buf = Some(b);
                if let Err(e) = r {
                    self.stage.active = false;
                    return Err(e);
                }
                self.stage.off += CHUNK as u64;
                self.stage.len = 0;
            }
        }
        if past_end {
            self.settle()?;
        }
        if let Some(lo) = end_page {
            self.io.write_back_and_drop(lo, page)?;
        }
        Ok(buf.len())
    }

    /// Checks that a request of `len` bytes at `off` ends by the largest offset the kernel
    /// takes (`EINVAL` otherwise, as the kernel's own check says), before any of it is
    /// staged or read ahead.
    pub(super) fn check_span(&self, op: Op, off: u64, len: usize) -> io::Result<()> {
        match off.checked_add(len as u64) {
            Some(end) if end <= MAX_OFFSET => Ok(()),
            _ => Err(self.io.fail(
                op,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "offset {off} + length {len} is past the largest file offset \
                         ({MAX_OFFSET})"
                    ),
                ),
            )),
        }
    }

    /// Starts the stage at `pos`; with O_DIRECT at the block holding it, whose head is read
    /// from the file (zeros past its end).
    fn start_stage(&mut self, pos: u64) -> io::Result<()> {
        if self.stage.buf.is_none() {
            self.stage.buf = Some(self.io.bounce_buffer(CHUNK)?);
        }
        let s = &mut self.stage;
        let buf = s.buf.as_mut().expect("allocated above");
        let a = self.io.align.offset;
        if self.io.policy == CachePolicy::Direct && !pos.is_multiple_of(a as u64) {
            let start = align_down(pos, a);
            let head = (pos - start) as usize;
            let got = self.io.read_full(&mut buf[..a], start)?;
            buf[got.min(head)..head].fill(0);
            s.off = start;
            s.len = head;
        } else {
            s.off = pos;
            s.len = 0;
        }
        s.active = true;
        Ok(())
    }

    /// Writes the stage to the file. With O_DIRECT: the whole blocks straight; a partial last
    /// block inside the file read, completed and written whole; one at the file's end written
    /// with its exact bytes and dropped from the cache.
    pub(super) fn settle(&mut self) -> io::Result<()> {
        if !self.stage.active {
            return Ok(());
        }
        self.stage.active = false;
        // A read-ahead may have read the staged range's old bytes.
        let (off, len) = (self.stage.off, self.stage.len as u64);
        self.window.invalidate_overlap(off, len);
        let Some(mut b) = self.stage.buf.take() else {
            return Ok(());
        };
        let r = self.settle_from(&mut b);
        self.stage.buf = Some(b);
        r
    }

    fn settle_from(&mut self, b: &mut AlignedBuf) -> io::Result<()> {
        let (off, len) = (self.stage.off, self.stage.len);
        if len == 0 {
            return Ok(());
        }
        if self.io.policy != CachePolicy::Direct {
            return self.io.write_full(&b[..len], off);
        }
        let a = self.io.align.offset;
        let full = len / a * a;
        if full > 0 {
            self.io.write_full(&b[..full], off)?;
        }
        let rem = len - full;
        if rem == 0 {
            return Ok(());
        }
        let tail = off + full as u64;
        if self.io.policy != CachePolicy::Direct {
            // O_DIRECT was refused on the first request above.
            return self.io.write_full(&b[full..len], tail);
        }
        // The stage is inactive by now: this is the size on disk (a block device's too).
        let size = self.len()?;
        if size >= tail + a as u64 {
            // Inside the file: read the block, lay the new bytes over it, write it whole.
            let new = b[full..len].to_vec();
            let got = self.io.read_full(&mut b[full..full + a], tail)?;
            b[full..full + rem].copy_from_slice(&new);
            if got == a {
                return self.io.write_full(&b[full..full + a], tail);
            }
        }
        self.io.write_tail_buffered(&b[full..full + rem], tail)
    }
}
