//! Resuming inside a file: a copy written under a named temporary (`--partial`,
//! `--named-temp`, or a filesystem without O_TMPFILE) records how much of it is on disk — a
//! [`Checkpoint`] in an extended attribute of the temporary, written after an `fdatasync`
//! every [`CHECKPOINT_EVERY`] bytes of contiguous data — so a copy killed at 90% of a 1 GiB
//! file (SIGKILL, a power cut) keeps that prefix. The next run that copies the file finds the
//! temporary (the planner keeps a stale marked temporary that carries a checkpoint instead of
//! removing it), checks it and continues from the checkpoint. What is checked, in order:
//!
//! - the temporary is provably this user's and nobody else's ([`foreign`]): a regular file
//!   with one link, owned by the effective user, writable by nobody else (temporaries are
//!   made 0600 and get their mode at the commit), open by no other process (a write lease is
//!   granted). A file that is not ours is left where it is — never taken, never removed; one
//!   of ours that fails the rest is removed. Only the owner (or root) can have written the
//!   checkpoint's attribute of such a file, so it cannot be forged by someone else;
//! - the source must be the one the checkpoint was written for: same device, inode, size and
//!   modification time (a source that changed starts over);
//! - the kept prefix must equal the source **byte for byte** ([`prefix_equal`]): every byte
//!   below the checkpoint that is data on either side is read from disk on both sides (not
//!   from the cache, leaving the cache as it was) and compared, as rsync's `--append-verify`
//!   does. That is the guarantee's cost: a resume of `kept` bytes reads `kept` bytes of each
//!   file again and writes only the rest;
//! - before the commit the temporary is no longer than the source (nothing appended to it
//!   while the rest was written): see `Finish::make_final` (finish/mod.rs).
//!
//! The checkpoint is text (`pagewise-resume 1 DEV INO SIZE MTIME_S MTIME_NS KEPT`), parsed
//! with bounds; anything else is no checkpoint and the temporary is removed as before.

use super::state::Ctx;
use crate::chunks::pieces;
use crate::dio::uncached::UncachedReader;
use crate::sys;
use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The extended attribute holding a temporary's [`Checkpoint`].
pub(super) const RESUME_MARK: &CStr = c"user.pagewise.resume";
/// Contiguous bytes between two checkpoints (each costs an fdatasync of the temporary).
pub(super) const CHECKPOINT_EVERY: u64 = 16 << 20;

/// How far a temporary's data is on disk, and for which source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Checkpoint {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    /// Bytes from offset 0 that are written and synced.
    pub kept: u64,
}

impl Checkpoint {
    /// The checkpoint of `kept` bytes of a copy of the source `st`.
    pub fn of(st: &sys::Stat, kept: u64) -> Checkpoint {
        Checkpoint {
            dev: st.dev,
            ino: st.ino,
            size: st.size,
            mtime: st.mtime,
            kept,
        }
    }

    /// Whether it was written for the source `st` as it is now.
    pub fn matches(&self, st: &sys::Stat) -> bool {
        (self.dev, self.ino, self.size, self.mtime) == (st.dev, st.ino, st.size, st.mtime)
    }

    /// Its text.
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "pagewise-resume 1 {} {} {} {} {} {}",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.kept
        )
        .into_bytes()
    }

    /// Parses its text: None for anything else (at most 256 bytes come in).
    pub fn parse(b: &[u8]) -> Option<Checkpoint> {
        let text = std::str::from_utf8(b).ok()?;
        let mut f = text.split(' ');
        if f.next()? != "pagewise-resume" || f.next()? != "1" {
            return None;
        }
        let mut num = || f.next().and_then(|s| s.parse::<u64>().ok());
        let (dev, ino, size) = (num()?, num()?, num()?);
        let secs = i64::try_from(num()?).ok()?;
        let nsecs = num().filter(|n| *n < 1_000_000_000)?;
        let kept = num().filter(|k| *k <= size)?;
        if f.next().is_some() {
            return None;
        }
        Some(Checkpoint {
            dev,
            ino,
            size,
            mtime: (secs, nsecs as i64),
            kept,
        })
    }

    /// The checkpoint a temporary carries (None: none, or not one of ours).
    pub fn read(fd: BorrowedFd<'_>) -> Option<Checkpoint> {
        sys::get_small_xattr(fd, RESUME_MARK)
            .ok()
            .flatten()
            .and_then(|v| Checkpoint::parse(&v))
    }
}

/// The extents of a file from `from` on (`from` is a piece boundary: see [`Checkpointer`]).
pub(super) fn clip(extents: &[(u64, u64)], from: u64) -> Vec<(u64, u64)> {
    extents
        .iter()
        .filter(|(off, len)| off + len > from)
        .map(|&(off, len)| match off < from {
            true => (from, off + len - from),
            false => (off, len),
        })
        .collect()
}

/// The extents of a file below `end` (the kept prefix).
pub(super) fn below(extents: &[(u64, u64)], end: u64) -> Vec<(u64, u64)> {
    extents
        .iter()
        .filter(|(off, _)| *off < end)
        .map(|&(off, len)| (off, len.min(end - off)))
        .collect()
}

/// Data bytes of `extents` below `end`.
pub(super) fn data_below(extents: &[(u64, u64)], end: u64) -> u64 {
    below(extents, end).iter().map(|e| e.1).sum()
}

/// Follows the pieces a copy finishes (in any order, several in flight) and writes a
/// [`Checkpoint`] each time the contiguous prefix grew by [`CHECKPOINT_EVERY`]: fdatasync of
/// the temporary first, then the attribute, so a checkpoint never claims data the disk does
/// not hold.
pub(super) struct Checkpointer<'a> {
    dst: BorrowedFd<'a>,
    source: sys::Stat,
    /// Piece starts of the part being copied, in order, and the end of the last.
    starts: Vec<u64>,
    end: u64,
    state: Mutex<State>,
    /// A checkpoint failed (no user xattrs, fdatasync error): no more are tried.
    off: AtomicBool,
}

#[derive(Default)]
struct State {
    done: Vec<bool>,
    /// Pieces before this one are all done.
    next: usize,
    /// The last checkpoint written.
    saved: u64,
    /// A thread is writing a checkpoint.
    saving: bool,
}

impl<'a> Checkpointer<'a> {
    /// For a copy of `source` into `dst` of `extents` (the part still to copy) in pieces of
    /// `chunk`, whose data below `kept` is already on disk.
    pub fn new(
        dst: BorrowedFd<'a>,
        source: &sys::Stat,
        extents: &[(u64, u64)],
        chunk: usize,
        kept: u64,
    ) -> Self {
        let p = pieces(extents, chunk as u64);
        let starts: Vec<u64> = p.iter().map(|x| x.0).collect();
        Checkpointer {
            dst,
            source: *source,
            end: source.size,
            state: Mutex::new(State {
                done: vec![false; starts.len()],
                saved: kept,
                ..State::default()
            }),
            starts,
            off: AtomicBool::new(false),
        }
    }

    /// The piece at `off` is written.
    pub fn finished(&self, off: u64) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        let Ok(i) = self.starts.binary_search(&off) else {
            return;
        };
        let frontier = {
            let mut s = self.state.lock().unwrap();
            s.done[i] = true;
            while s.next < s.done.len() && s.done[s.next] {
                s.next += 1;
            }
            let frontier = self.starts.get(s.next).copied().unwrap_or(self.end);
            if s.saving || frontier < s.saved + CHECKPOINT_EVERY || frontier >= self.end {
                return;
            }
            s.saving = true;
            frontier
        };
        // Outside the lock: the other threads go on finishing pieces meanwhile.
        let ok = self.save(frontier).is_ok();
        let mut s = self.state.lock().unwrap();
        s.saving = false;
        if ok {
            s.saved = frontier;
        } else {
            self.off.store(true, Ordering::Relaxed);
        }
    }

    /// The frontier as far as it is known now (for a stop: everything finished so far).
    pub fn save_now(&self) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        let frontier = {
            let s = self.state.lock().unwrap();
            self.starts.get(s.next).copied().unwrap_or(self.end)
        };
        let _ = self.save(frontier);
    }

    /// The last checkpoint written (the kept prefix when none was).
    pub fn saved(&self) -> u64 {
        self.state.lock().unwrap().saved
    }

    fn save(&self, frontier: u64) -> io::Result<()> {
        sys::fdatasync(self.dst)?;
        let c = Checkpoint::of(&self.source, frontier);
        sys::set_xattr(self.dst, RESUME_MARK, &c.encode())?;
        self.state.lock().unwrap().saved = frontier;
        Ok(())
    }
}

/// Bytes compared per read of [`prefix_equal`]. (Four threads each with a pair of readers
/// were measured too: 1.92–2.11 s against 2.21–2.23 s for 1.9 GiB on this machine's disk,
/// whose O_DIRECT reads run at 1 GB/s with 1, 4 or 8 streams alike — not worth the threads.)
const COMPARE_BYTES: usize = 8 << 20;

/// Sorted, merged union of two extent lists.
fn union(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
    for (off, len) in all {
        match out.last_mut() {
            Some(last) if off <= last.0 + last.1 => last.1 = last.1.max(off + len - last.0),
            _ => out.push((off, len)),
        }
    }
    out
}

/// The data extents of `fd` below `end` (the whole range where SEEK_DATA is not supported).
fn data_upto(fd: BorrowedFd<'_>, end: u64) -> io::Result<Vec<(u64, u64)>> {
    match sys::data_extents(fd, 0, end) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
            ) =>
        {
            Ok(vec![(0, end)])
        }
        r => r,
    }
}

/// Whether the first `kept` bytes of `tmp` equal the source's, byte for byte: every range
/// that is data in either file is read from disk (not from the cache) on both sides and
/// compared; holes on both sides are equal (zeros) without reading. Returns also the bytes
/// read per side.
pub(super) fn prefix_equal(src: &OwnedFd, tmp: &OwnedFd, kept: u64) -> io::Result<(bool, u64)> {
    let ranges = union(
        &data_upto(src.as_fd(), kept)?,
        &data_upto(tmp.as_fd(), kept)?,
    );
    let mut a = UncachedReader::open(src.try_clone()?, COMPARE_BYTES)?;
    let mut b = UncachedReader::open(tmp.try_clone()?, COMPARE_BYTES)?;
    let mut x = Vec::with_capacity(COMPARE_BYTES);
    let mut read = 0;
    for (off, len) in pieces(&ranges, COMPARE_BYTES as u64) {
        x.clear();
        x.extend_from_slice(a.read(off, len)?);
        let y = b.read(off, len)?;
        read += len;
        if x.len() as u64 != len || y != x.as_slice() {
            return Ok((false, read));
        }
    }
    Ok((true, read))
}

/// Why the temporary open as `fd` is not provably this user's alone, or None when it is: a
/// regular file with one link, owned by the effective user, that nobody else may write
/// (group and others have no write bit) and that no other process holds open (a write lease
/// is granted; where leases are not available the other checks stand alone). `Err`: the file
/// is someone else's (not to be removed either); `Ok(Some)`: ours, but not to be trusted.
pub(super) fn foreign(fd: BorrowedFd<'_>) -> Result<Option<String>, String> {
    let st = sys::fstat(fd).map_err(|e| format!("fstat: {e}"))?;
    if !st.is_file() {
        return Err(format!("it is a {}", st.kind()));
    }
    if st.uid != sys::euid() {
        return Err(format!("it is owned by uid {}", st.uid));
    }
    if st.nlink != 1 {
        return Ok(Some(format!("it has {} links", st.nlink)));
    }
    if st.mode & 0o022 != 0 {
        return Ok(Some(format!(
            "others may write it (mode {:04o})",
            st.mode & 0o7777
        )));
    }
    if let Ok(false) = sys::no_other_opener(fd) {
        return Ok(Some("another process has it open".into()));
    }
    Ok(None)
}

/// Takes up the temporary `name` (in `dir`) an earlier run left for the source `sf`/`st`:
/// its descriptor and the bytes kept, or None when it is not provably ours alone (left
/// where it is when it is someone else's; see [`foreign`]), its checkpoint is not for
/// this source, or its kept prefix differs from the source (removed, with a notice).
pub(super) fn take_partial(
    ctx: &Ctx<'_>,
    dir: BorrowedFd<'_>,
    name: &OsStr,
    sf: &OwnedFd,
    st: &sys::Stat,
) -> Option<(OwnedFd, u64)> {
    let shown = || crate::names::escape(name.as_encoded_bytes());
    let fd = sys::open_rw_at(dir, name).ok()?;
    let why = match foreign(fd.as_fd()) {
        Err(whose) => {
            ctx.tally.notice(format!(
                "a file named like a partial copy of ours was left alone and not resumed: {} ({whose})",
                shown()
            ));
            return None;
        }
        Ok(why) => why,
    };
    let kept = Checkpoint::read(fd.as_fd())
        .filter(|c| why.is_none() && c.matches(st))
        .map(|c| c.kept)
        .filter(|k| *k > 0);
    let equal = kept.filter(|&k| {
        let r = prefix_equal(sf, &fd, k);
        if let Ok((_, n)) = r {
            ctx.counts.resume_compared.fetch_add(n, Ordering::Relaxed);
        }
        r.is_ok_and(|(same, _)| same)
    });
    match equal {
        Some(k) => Some((fd, k)),
        None => {
            let _ = sys::unlink_at(dir, name, false);
            ctx.counts.stale_temps.fetch_add(1, Ordering::Relaxed);
            if let Some(why) = why {
                ctx.tally.notice(format!(
                    "a partial copy was discarded, not resumed: {} ({why})",
                    shown()
                ));
            } else if kept.is_some() {
                ctx.tally.notice(
                    "a partial copy whose kept data did not match its source was discarded",
                );
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trip_and_junk() {
        let c = Checkpoint {
            dev: 2049,
            ino: 77,
            size: 1 << 30,
            mtime: (1_700_000_000, 123),
            kept: 900 << 20,
        };
        assert_eq!(Checkpoint::parse(&c.encode()), Some(c));
        for bad in [
            &b""[..],
            b"pagewise-resume 2 1 2 3 4 5 6",
            b"pagewise-resume 1 1 2 3 4 5",
            b"pagewise-resume 1 1 2 3 4 5 6 7",
            b"pagewise-resume 1 1 2 3 4 1000000000 1",
            b"pagewise-resume 1 1 2 10 4 5 11",
            b"pagewise-resume 1 -1 2 3 4 5 1",
            b"\xff\xfe",
        ] {
            assert_eq!(Checkpoint::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn clipping_and_samples() {
        let e = [(0, 100), (200, 100), (400, 50)];
        assert_eq!(clip(&e, 0), e.to_vec());
        assert_eq!(clip(&e, 250), vec![(250, 50), (400, 50)]);
        assert_eq!(clip(&e, 300), vec![(400, 50)]);
        assert_eq!(clip(&e, 450), vec![]);
        assert_eq!(data_below(&e, 250), 150);
        assert_eq!(data_below(&e, 1000), 250);
        assert_eq!(below(&e, 250), vec![(0, 100), (200, 50)]);
        assert_eq!(
            union(&e, &[(50, 100), (500, 10)]),
            vec![(0, 150), (200, 100), (400, 50), (500, 10)]
        );
        assert_eq!(union(&[(0, 10)], &[(10, 5)]), vec![(0, 15)]);
    }

    #[test]
    fn fuzz_checkpoint_text() {
        use proptest::prelude::*;
        let text = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..256),
            "pagewise-resume 1( -?[0-9]{1,21}){0,8}".prop_map(String::into_bytes),
        ];
        crate::fuzzing::fuzz("resume checkpoint", 2048, text, |b| {
            if let Some(c) = Checkpoint::parse(&b) {
                assert!(c.kept <= c.size);
                assert_eq!(Checkpoint::parse(&c.encode()), Some(c));
            }
        });
    }
}
