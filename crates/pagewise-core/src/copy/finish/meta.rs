//! Metadata under `--preserve`: a file's owner, extended attributes, mode and times
//! ([`apply_meta`]), a directory's extended attributes, and the time stamps they take.

use crate::copy::commit::TEMP_MARK;
use crate::copy::resume::RESUME_MARK;
use crate::copy::state::Ctx;
use crate::error::{FileError, Op};
use crate::sys;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// With --preserve: owner (when root), xattrs, mode and times. Times go last: nothing after
/// them changes mtime.
pub(super) fn apply_meta(
    ctx: &Ctx<'_>,
    sf: &OwnedFd,
    df: &fs::File,
    st: &sys::Stat,
    temp: bool,
) -> Result<(), (Op, io::Error)> {
    let keep = ctx.opts.preserve;
    if !keep.any() {
        // Created with the right mode (see worker/open.rs).
        return Ok(());
    }
    let st = &ctx.source_meta(st);
    chown(ctx, df.as_fd(), st).map_err(|e| (Op::Fchown, e))?;
    if keep.xattrs || keep.acls {
        let list = sys::xattrs(sf.as_fd()).map_err(|e| (Op::Flistxattr, e))?;
        put_xattrs(ctx, df, &list, temp)?;
    }
    if keep.perms {
        df.set_permissions(fs::Permissions::from_mode(st.mode & 0o7777))
            .map_err(|e| (Op::Fchmod, e))?;
    }
    if keep.times {
        let times = fs::FileTimes::new()
            .set_accessed(epoch_time(st.atime))
            .set_modified(epoch_time(st.mtime));
        df.set_times(times).map_err(|e| (Op::Futimens, e))?;
    }
    Ok(())
}

/// The owner (as root) and group a copy keeps, set on `fd`. A user who is not root sets
/// the group when they belong to it (rsync -g); EPERM otherwise is left, as rsync leaves it.
pub(in crate::copy) fn chown(ctx: &Ctx<'_>, fd: BorrowedFd<'_>, st: &sys::Stat) -> io::Result<()> {
    let keep = ctx.opts.preserve;
    let uid = (keep.owner && ctx.is_root).then_some(st.uid);
    let gid = keep.group.then_some(st.gid);
    if uid.is_none() && gid.is_none() {
        return Ok(());
    }
    match sys::fchown(fd, uid, gid) {
        Err(e) if !ctx.is_root && e.raw_os_error() == Some(libc::EPERM) => Ok(()),
        r => r,
    }
}

/// With `preserve`: a directory's extended attributes (its ACLs, default ACLs included).
pub(super) fn dir_xattrs(ctx: &Ctx<'_>, src: &Path, dst: &fs::File) {
    if !(ctx.opts.preserve.xattrs || ctx.opts.preserve.acls) {
        return;
    }
    let Ok(s) = fs::File::open(src) else {
        return; // it was read a moment ago; gone now: nothing to keep
    };
    let r = sys::xattrs(s.as_fd())
        .map_err(|e| (Op::Flistxattr, e))
        .and_then(|list| put_xattrs(ctx, dst, &list, false));
    if let Err((op, e)) = r {
        ctx.fail(FileError::io(src, op, &e));
    }
}

/// Makes `dst`'s extended attributes exactly `list` (the source's): sets each, then
/// removes what `dst` has beyond them — an ACL inherited from a default ACL of the
/// destination directory, a stale attribute of the file replaced — as `rsync -AX` does.
/// `security.*` (SELinux and IMA labels the system gives) is left as the system set it.
/// A namespace the destination does not take is a notice. On a `temp`orary, pagewise's own
/// marks ([`TEMP_MARK`], [`RESUME_MARK`]) stay until its commit: a copy killed after this
/// and before the commit left a temporary no later run could tell was its own (2 of 60
/// SIGKILLed `copy -a --named-temp` runs of 4,000 small files left one; 0 of 150 since).
fn put_xattrs(
    ctx: &Ctx<'_>,
    dst: &fs::File,
    list: &[(std::ffi::CString, Vec<u8>)],
    temp: bool,
) -> Result<(), (Op, io::Error)> {
    let mark = |n: &std::ffi::CStr| temp && (n == TEMP_MARK || n == RESUME_MARK);
    let not_taken = |e: &io::Error| {
        matches!(
            e.raw_os_error(),
            Some(libc::ENOTSUP) | Some(libc::EPERM) | Some(libc::EACCES)
        )
    };
    let keep = ctx.opts.preserve;
    let filters = &ctx.opts.filters;
    use crate::copy::filter::Side::{Receiver, Sender};
    for (name, value) in list {
        if !keep.keeps_xattr(name.to_bytes()) || filters.xattr_excluded(name.to_bytes(), Sender) {
            continue;
        }
        match sys::set_xattr(dst.as_fd(), name, value) {
            Ok(()) => {}
            // Not every destination takes every namespace (e.g. security.* on tmpfs).
            Err(e) if not_taken(&e) => {
                ctx.tally
                    .notice(format!("some extended attributes could not be kept: {e}"));
            }
            Err(e) => return Err((Op::Fsetxattr, e)),
        }
    }
    let have = sys::xattrs(dst.as_fd()).map_err(|e| (Op::Flistxattr, e))?;
    for (name, _) in have {
        if name.to_bytes().starts_with(b"security.")
            || !keep.keeps_xattr(name.to_bytes())
            || filters.xattr_excluded(name.to_bytes(), Receiver)
            || mark(&name)
            || list.iter().any(|(n, _)| *n == name)
        {
            continue;
        }
        match sys::remove_xattr(dst.as_fd(), &name) {
            Ok(()) => {}
            Err(e) if not_taken(&e) || e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err((Op::Fremovexattr, e)),
        }
    }
    Ok(())
}

/// A (seconds, nanoseconds) time stamp since the epoch as a SystemTime (before it if negative).
pub(super) fn epoch_time((sec, nsec): (i64, i64)) -> SystemTime {
    let whole = std::time::Duration::from_secs(sec.unsigned_abs());
    let base = if sec >= 0 {
        UNIX_EPOCH + whole
    } else {
        UNIX_EPOCH - whole
    };
    base + std::time::Duration::from_nanos(nsec as u64)
}
