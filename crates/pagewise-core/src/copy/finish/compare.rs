//! Reading back from disk without the cache (an [`UncachedReader`]): `--verify`'s digests of
//! the copied files, and the comparisons of an existing destination with its source (content
//! with `--checksum`, metadata under `preserve`) that decide whether it is left as it is.

use super::meta::apply_meta;
use crate::copy::engine::hashes_from_disk;
use crate::copy::report::{Action, Changes, EntryKind};
use crate::copy::state::Ctx;
use crate::copy::tasks::FileTask;
use crate::copy::worker::Extents;
use crate::dio::uncached::UncachedReader;
use crate::error::{FileError, Op};
use crate::sys;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// A copied file's destination, data extents, the checksum of the source data and the
/// (device, inode) of the file written (what `--verify` must find under the name).
pub(in crate::copy) type Digest = (PathBuf, Extents, u64, (u64, u64));

/// Re-reads every copied file from disk and compares it with its source's digest:
/// `(verified, mismatches)`; mismatches and read failures are reported. A file that
/// differs is removed from its final name (when the name still holds the file this run
/// wrote): a wrong copy never stands where the right one was expected.
pub(in crate::copy) fn verify(ctx: &Ctx<'_>, digests: &[Digest]) -> (u64, u64) {
    let (mut verified, mut mismatches) = (0, 0);
    for (dst, extents, want, id) in digests {
        let got = ctx.dest.open_read(dst).and_then(|fd| {
            let st = sys::fstat(fd.as_fd())?;
            if (st.dev, st.ino) != *id {
                return Err(io::Error::other(
                    "the name no longer holds the file this copy wrote (replaced meanwhile)",
                ));
            }
            digest_from_disk(fd, extents, ctx.opts.chunk)
        });
        match got {
            Ok(got) if got == *want => verified += 1,
            Ok(_) => {
                mismatches += 1;
                let why = match remove_written(ctx, dst, *id) {
                    Ok(()) => "content differs from the source: removed from its final name",
                    Err(_) => "content differs from the source (and it could not be removed)",
                };
                ctx.fail(FileError::other(dst, Op::VerifyContent, why));
            }
            Err(e) => ctx.fail(FileError::io(dst, Op::Verify, &e)),
        }
    }
    (verified, mismatches)
}

/// Removes `dst` when it is still the file `id` (device, inode) this run wrote.
fn remove_written(ctx: &Ctx<'_>, dst: &Path, id: (u64, u64)) -> io::Result<()> {
    let (dir, name) = ctx.dest.parent(dst)?;
    let c = std::ffi::CString::new(name.as_encoded_bytes())?;
    let st = sys::fstatat(Some(dir.as_fd()), &c, false)?;
    if (st.dev, st.ino) != id {
        return Err(io::Error::other("replaced meanwhile"));
    }
    sys::unlink_at(dir.as_fd(), name, false)
}

/// Reads a whole file from disk, not from the cache, returning the chunk digest used by copy.
fn digest_from_disk(fd: OwnedFd, extents: &[(u64, u64)], chunk: usize) -> io::Result<u64> {
    Ok(hashes_from_disk(fd, extents, chunk)?.digest())
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
/// (the system sets those, see `put_xattrs` in meta.rs).
fn comparable_xattrs(
    fd: BorrowedFd<'_>,
    acls: bool,
) -> io::Result<Vec<(std::ffi::CString, Vec<u8>)>> {
    let mut list = sys::xattrs(fd)?;
    list.retain(|(n, _)| {
        let n = n.to_bytes();
        !n.starts_with(b"security.") && n.starts_with(b"system.posix_acl_") == acls
    });
    list.sort();
    Ok(list)
}

/// With -X or -A, whether the extended attributes and the ACLs of the file `dst` still
/// holds (before the copy replaces it) differ from the source's (`sf`): `(xattr, acl)`.
pub(in crate::copy) fn xattr_changes(ctx: &Ctx<'_>, sf: &OwnedFd, dst: &Path) -> (bool, bool) {
    let keep = ctx.opts.preserve;
    if !(keep.xattrs || keep.acls) {
        return (false, false);
    }
    let Ok(df) = ctx.dest.open_read(dst) else {
        return (false, false);
    };
    let list = |fd: BorrowedFd<'_>, acls| comparable_xattrs(fd, acls).ok();
    (
        keep.xattrs && list(sf.as_fd(), false) != list(df.as_fd(), false),
        keep.acls && list(sf.as_fd(), true) != list(df.as_fd(), true),
    )
}

/// A destination file left for its content (quick check or checksum) under `preserve`:
/// when its mode, owner (as root), modification time, extended attributes or ACLs differ
/// from the source's, they are brought over (nothing in a dry run), as rsync -a does for
/// a file it itemizes `.f...p.....`. True when something differed. The destination is
/// opened without following a symlink.
fn refresh_meta(ctx: &Ctx<'_>, src: &Path, dst: &Path) -> Result<Changes, FileError> {
    let flags = sys::OpenFlags {
        noatime: true,
        nofollow: true,
        ..Default::default()
    };
    let sf = sys::open_path(src, flags).map_err(|e| FileError::io(src, Op::Open, &e))?;
    let st = sys::fstat(sf.as_fd()).map_err(|e| FileError::io(src, Op::Fstat, &e))?;
    let df = ctx
        .dest
        .open_read(dst)
        .map_err(|e| FileError::io(dst, Op::Open, &e))?;
    let dt = sys::fstat(df.as_fd()).map_err(|e| FileError::io(dst, Op::Fstat, &e))?;
    let keep = ctx.opts.preserve;
    let mut changes = ctx.changes(&st, &dt);
    changes.size = false;
    changes.time &= keep.times;
    let list = |fd: BorrowedFd<'_>, acls| comparable_xattrs(fd, acls).ok();
    changes.xattr = keep.xattrs && list(sf.as_fd(), false) != list(df.as_fd(), false);
    changes.acl = keep.acls && list(sf.as_fd(), true) != list(df.as_fd(), true);
    // -E without -p: the executability follows the source's.
    let mode = (!keep.perms && st.is_file()).then(|| ctx.opts.mode_over(dt.mode, st.mode));
    let mode = mode.filter(|m| *m != dt.mode & 0o7777);
    changes.perms |= mode.is_some();
    if !changes.is_empty() && !ctx.opts.dry_run {
        let df = fs::File::from(df);
        apply_meta(ctx, &sf, &df, &st, false).map_err(|(op, e)| FileError::io(dst, op, &e))?;
        if let Some(m) = mode {
            use std::os::unix::fs::PermissionsExt;
            df.set_permissions(fs::Permissions::from_mode(m))
                .map_err(|e| FileError::io(dst, Op::Fchmod, &e))?;
        }
    }
    Ok(changes)
}

/// An existing destination file whose content is left: its metadata refreshed under
/// `preserve` (counted and itemized as `metadata`), else counted as skipped.
pub(in crate::copy) fn keep_file(ctx: &Ctx<'_>, src: &Path, dst: &Path, kind: EntryKind) {
    if !ctx.opts.preserve.any() && !ctx.opts.executability {
        return ctx.skipped(dst, kind);
    }
    match refresh_meta(ctx, src, dst) {
        Ok(c) if !c.is_empty() => {
            ctx.counts.metadata.fetch_add(1, Ordering::Relaxed);
            ctx.item_with(dst, kind, Action::Metadata, 0, c, None);
        }
        Ok(_) => ctx.skipped(dst, kind),
        Err(e) => ctx.fail(e),
    }
}

/// --checksum: whether `t`'s destination has its source's content (read without caching
/// either). A read failure counts as different: the copy then runs and reports it.
pub(in crate::copy) fn same_content(ctx: &Ctx<'_>, t: &FileTask) -> bool {
    let flags = sys::OpenFlags {
        noatime: true,
        ..Default::default()
    };
    let src = sys::open_path(&t.src, flags);
    let dst = ctx.dest.open_read(&t.dst);
    match (src, dst) {
        (Ok(a), Ok(b)) => same_bytes(a, b, ctx.opts.chunk).unwrap_or(false),
        _ => false,
    }
}

/// A worker's check of a `compare` task: true when the destination has the same content,
/// then left (counted as skipped) with, under `preserve`, its metadata brought up to date
/// as rsync does for a file whose content matches.
pub(in crate::copy) fn unchanged(ctx: &Ctx<'_>, t: &FileTask) -> bool {
    if ctx.stopped() || !same_content(ctx, t) {
        return false;
    }
    keep_file(ctx, &t.src, &t.dst, EntryKind::File);
    true
}
