//! Reading back from disk without the cache (an [`UncachedReader`]): `--verify`'s digests of
//! the copied files, and the comparisons of an existing destination with its source (content
//! with `--checksum`, metadata under `preserve`) that decide whether it is left as it is.

use crate::chunks::pieces;
use crate::copy::engine::ChunkHashes;
use crate::copy::plan::FileTask;
use crate::copy::worker::Digest;
use crate::copy::{Ctx, EntryKind};
use crate::dio::uncached::UncachedReader;
use crate::error::{FileError, Op};
use crate::sys;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;

impl Ctx<'_> {
    /// Re-reads every copied file from disk and compares it with its source's digest:
    /// `(verified, mismatches)`; mismatches and read failures are reported. A file that
    /// differs is removed from its final name (when the name still holds the file this run
    /// wrote): a wrong copy never stands where the right one was expected.
    pub(in crate::copy) fn verify(&self, digests: &[Digest]) -> (u64, u64) {
        let (mut verified, mut mismatches) = (0, 0);
        for (dst, extents, want, id) in digests {
            let got = self.dest.open_read(dst).and_then(|fd| {
                let st = sys::fstat(fd.as_fd())?;
                if (st.dev, st.ino) != *id {
                    return Err(io::Error::other(
                        "the name no longer holds the file this copy wrote (replaced meanwhile)",
                    ));
                }
                digest_from_disk(fd, extents, self.opts.chunk)
            });
            match got {
                Ok(got) if got == *want => verified += 1,
                Ok(_) => {
                    mismatches += 1;
                    let why = match self.remove_written(dst, *id) {
                        Ok(()) => "content differs from the source: removed from its final name",
                        Err(_) => "content differs from the source (and it could not be removed)",
                    };
                    self.fail(FileError::other(dst, Op::VerifyContent, why));
                }
                Err(e) => self.fail(FileError::io(dst, Op::Verify, &e)),
            }
        }
        (verified, mismatches)
    }

    /// Removes `dst` when it is still the file `id` (device, inode) this run wrote.
    fn remove_written(&self, dst: &Path, id: (u64, u64)) -> io::Result<()> {
        let (dir, name) = self.dest.parent(dst)?;
        let c = std::ffi::CString::new(name.as_encoded_bytes())?;
        let st = sys::fstatat(Some(dir.as_fd()), &c, false)?;
        if (st.dev, st.ino) != id {
            return Err(io::Error::other("replaced meanwhile"));
        }
        sys::unlink_at(dir.as_fd(), name, false)
    }
}

/// Reads a whole file from disk, not from the cache, returning the chunk digest used by copy.
fn digest_from_disk(fd: OwnedFd, extents: &[(u64, u64)], chunk: usize) -> io::Result<u64> {
    Ok(hashes_from_disk(fd, extents, chunk)?.digest())
}

/// The chunk hashes of `extents` of a file, read from disk, not from the cache (`--verify`'s
/// re-read, and the kept prefix of a resumed copy's source).
pub(in crate::copy) fn hashes_from_disk(
    fd: OwnedFd,
    extents: &[(u64, u64)],
    chunk: usize,
) -> io::Result<ChunkHashes> {
    let hashes = ChunkHashes::default();
    let mut r = UncachedReader::open(fd, chunk)?;
    for (off, len) in pieces(extents, chunk as u64) {
        let data = r.read(off, len)?;
        if data.is_empty() {
            break;
        }
        hashes.add(off, data);
    }
    Ok(hashes)
}

/// Whether two files hold the same bytes (--checksum): both read from disk side by side in
/// chunks, leaving the cache as it was; the first difference stops the compare. Sizes are
/// compared first.
fn same_bytes(a: OwnedFd, b: OwnedFd, chunk: usize) -> io::Result<bool> {
    let size = sys::fstat(a.as_fd())?.size;
    let other = sys::fstat(b.as_fd())?;
    if !other.is_file() || other.size != size {
        return Ok(false);
    }
    let (mut ra, mut rb) = (
        UncachedReader::open(a, chunk)?,
        UncachedReader::open(b, chunk)?,
    );
    let mut off = 0;
    while off < size {
        let len = (size - off).min(chunk as u64);
        let x = ra.read(off, len)?;
        if x.is_empty() || x != rb.read(off, len)? {
            return Ok(false);
        }
        off += x.len() as u64;
    }
    Ok(true)
}

/// Extended attributes as compared for metadata-only changes: sorted, `security.*` left out
/// (the system sets those, see [`Ctx::put_xattrs`]).
fn comparable_xattrs(fd: BorrowedFd<'_>) -> io::Result<Vec<(std::ffi::CString, Vec<u8>)>> {
    let mut list = sys::xattrs(fd)?;
    list.retain(|(n, _)| !n.to_bytes().starts_with(b"security."));
    list.sort();
    Ok(list)
}

impl Ctx<'_> {
    /// A destination file left for its content (quick check or checksum) under `preserve`:
    /// when its mode, owner (as root), modification time, extended attributes or ACLs differ
    /// from the source's, they are brought over (nothing in a dry run), as rsync -a does for
    /// a file it itemizes `.f...p.....`. True when something differed. The destination is
    /// opened without following a symlink.
    pub(in crate::copy) fn refresh_meta(&self, src: &Path, dst: &Path) -> Result<bool, FileError> {
        let flags = sys::OpenFlags {
            noatime: true,
            nofollow: true,
            ..Default::default()
        };
        let sf = sys::open_path(src, flags).map_err(|e| FileError::io(src, Op::Open, &e))?;
        let st = sys::fstat(sf.as_fd()).map_err(|e| FileError::io(src, Op::Fstat, &e))?;
        let df = self
            .dest
            .open_read(dst)
            .map_err(|e| FileError::io(dst, Op::Open, &e))?;
        let dt = sys::fstat(df.as_fd()).map_err(|e| FileError::io(dst, Op::Fstat, &e))?;
        let owner_differs = self.is_root && (st.uid, st.gid) != (dt.uid, dt.gid);
        let differs = owner_differs
            || st.mode & 0o7777 != dt.mode & 0o7777
            || st.mtime != dt.mtime
            || comparable_xattrs(sf.as_fd()).ok() != comparable_xattrs(df.as_fd()).ok();
        if differs && !self.opts.dry_run {
            self.apply_meta(&sf, &fs::File::from(df), &st)
                .map_err(|(op, e)| FileError::io(dst, op, &e))?;
        }
        Ok(differs)
    }

    /// An existing destination file whose content is left: its metadata refreshed under
    /// `preserve` (counted and itemized as `metadata`), else counted as skipped.
    pub(in crate::copy) fn keep_file(&self, src: &Path, dst: &Path, kind: EntryKind) {
        if !self.opts.preserve {
            return self.skipped(dst, kind);
        }
        match self.refresh_meta(src, dst) {
            Ok(true) => {
                self.counts.metadata.fetch_add(1, Ordering::Relaxed);
                self.item(dst, kind, crate::copy::Action::Metadata, 0);
            }
            Ok(false) => self.skipped(dst, kind),
            Err(e) => self.fail(e),
        }
    }

    /// --checksum: whether `t`'s destination has its source's content (read without caching
    /// either). A read failure counts as different: the copy then runs and reports it.
    pub(in crate::copy) fn same_content(&self, t: &FileTask) -> bool {
        let flags = sys::OpenFlags {
            noatime: true,
            ..Default::default()
        };
        let src = sys::open_path(&t.src, flags);
        let dst = self.dest.open_read(&t.dst);
        match (src, dst) {
            (Ok(a), Ok(b)) => same_bytes(a, b, self.opts.chunk).unwrap_or(false),
            _ => false,
        }
    }

    /// A worker's check of a `compare` task: true when the destination has the same content,
    /// then left (counted as skipped) with, under `preserve`, its metadata brought up to date
    /// as rsync does for a file whose content matches.
    pub(in crate::copy) fn unchanged(&self, t: &FileTask) -> bool {
        if self.stopped() || !self.same_content(t) {
            return false;
        }
        self.keep_file(&t.src, &t.dst, EntryKind::File);
        true
    }
}
