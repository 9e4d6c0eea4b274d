//! The read path: the read-ahead window ([`Window`]), requests that go straight to the file,
//! and [`DirectFile::read_at`].

use std::io;

use crate::error::Op;
use crate::sys::AlignedBuf;

use super::align::{align_down, align_up, MAX_OFFSET};
use super::{CachePolicy, DirectFile, CHUNK, READAHEAD_MIN, STRAIGHT_MIN};

/// The read-ahead window: file bytes `[off, off+len)` in `buf`, as read from the file.
#[derive(Default)]
pub(super) struct Window {
    pub(super) buf: Option<AlignedBuf>,
    pub(super) off: u64,
    pub(super) len: usize,
    /// Where a sequential read continues, and how much the next read-ahead reads.
    pub(super) next: u64,
    pub(super) ahead: usize,
}

impl Window {
    pub(super) fn contains(&self, pos: u64) -> bool {
        pos >= self.off && pos < self.off + self.len as u64
    }
    pub(super) fn invalidate_overlap(&mut self, off: u64, len: u64) {
        if self.len > 0 && off < self.off + self.len as u64 && off + len > self.off {
            self.len = 0;
        }
    }
}

impl DirectFile {
    /// Reads up to `buf.len()` bytes at `off`: fewer only at the end of the file (0 there).
    pub fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if !self.mode.read {
            return Err(self
                .io
                .fail(Op::Pread, io::Error::from_raw_os_error(libc::EBADF)));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        self.check_span(Op::Pread, off, buf.len())?;
        let end = off + buf.len() as u64;
        if self.stage.active && off < self.stage.end() && end > self.stage.off {
            self.settle()?;
        }
        let mut done = 0;
        while done < buf.len() {
            let pos = off + done as u64;
            if self.window.contains(pos) {
                let w = &self.window;
                let at = (pos - w.off) as usize;
                let n = (w.len - at).min(buf.len() - done);
                buf[done..done + n].copy_from_slice(&w.buf.as_ref().expect("filled")[at..at + n]);
                done += n;
                self.window.next = pos + n as u64;
                continue;
            }
            let rest = &mut buf[done..];
            if let Some(len) = self.straight_len(pos, rest.as_ptr(), rest.len()) {
                let n = self.io.read_full(&mut rest[..len], pos)?;
                done += n;
                self.window.next = pos + n as u64;
                if n < len {
                    break;
                }
                continue;
            }
            if !self.fill(pos, rest.len())? {
                break;
            }
        }
        Ok(done)
    }

    /// The length of a request at `pos` from `ptr` (of `len` bytes) that can go straight to
    /// the file, if it can.
    pub(super) fn straight_len(&self, pos: u64, ptr: *const u8, len: usize) -> Option<usize> {
        let a = self.io.align;
        if self.io.policy == CachePolicy::Direct {
            let aligned =
                pos.is_multiple_of(a.offset as u64) && (ptr as usize).is_multiple_of(a.memory);
            (aligned && len >= a.offset).then(|| len / a.offset * a.offset)
        } else {
            (len >= STRAIGHT_MIN).then_some(len)
        }
    }

    /// Fills the window from the block holding `pos`, for a read of `want` bytes: only the
    /// blocks it needs after a seek, a doubling read-ahead while reads are sequential. False
    /// at the end of the file.
    fn fill(&mut self, pos: u64, want: usize) -> io::Result<bool> {
        let a = self.io.align.offset;
        let start = align_down(pos, a);
        let cover = (align_up(pos + want as u64, a) - start) as usize;
        let w = &mut self.window;
        let len = if pos == w.next {
            let len = cover.max(w.ahead);
            w.ahead = (w.ahead * 2).min(CHUNK);
            len
        } else {
            w.ahead = READAHEAD_MIN;
            cover
        };
        // Not past the largest offset (the kernel refuses a request that ends beyond it; no
        // file has bytes there): a read in the last block before it is the end of the file.
        let len = (align_up(len as u64, a) as usize)
            .min(CHUNK)
            .min(align_down(MAX_OFFSET - start, a) as usize);
        // The window grows with what is asked of it, up to CHUNK: a small file's read zeroes
        // (and faults in) 128 KiB, not 4 MiB (that cost more than reading the file).
        if w.buf.as_ref().is_none_or(|b| b.len() < len) {
            w.buf = None;
            w.buf = Some(self.io.bounce_buffer(len.next_power_of_two().min(CHUNK))?);
        }
        let w = &mut self.window;
        let buf = w.buf.as_mut().expect("allocated above");
        w.len = 0;
        let got = self.io.read_full(&mut buf[..len], start)?;
        let w = &mut self.window;
        w.off = start;
        w.len = got;
        Ok(w.contains(pos))
    }
}
