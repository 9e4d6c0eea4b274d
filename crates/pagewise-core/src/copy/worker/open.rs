//! Opening a file's pair: the source opened (O_NOATIME where allowed) and checked to be a
//! regular file still, its data extents found, and the file its data goes to — an earlier
//! run's partial temporary taken up (see the `resume` module), else a new temporary (see
//! `commit`) — preallocated where that pays.

use super::super::choices::InPlace;
use super::super::commit::{Temp, Temps};
use super::super::dest::ParentCache;
use super::super::resume::take_partial;
use super::super::state::Ctx;
use super::super::tasks::FileTask;
use crate::dio::uncached::same_prefix;
use crate::error::{FileError, Op};
use crate::sys;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Data extents of a file, `(offset, length)`.
pub(in crate::copy) type Extents = Vec<(u64, u64)>;

/// A source opened and checked, and the file its data goes to.
pub(in crate::copy) struct Open {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub sf: OwnedFd,
    pub st: sys::Stat,
    pub sparse: bool,
    /// On procfs, sysfs and the like: the size in stat is not the content (see
    /// [`sys::is_pseudo_fs`]); read to the end instead.
    pub pseudo: bool,
    /// Data extents of the source, `(offset, length)`.
    pub extents: Vec<(u64, u64)>,
    /// Source pages cached before the copy (None if unknown).
    pub src_cached: Option<u64>,
    pub df: fs::File,
    pub temp: Temp,
    /// The destination's directory, reached without following symlinks.
    pub dir: std::sync::Arc<OwnedFd>,
    /// What stood at the destination before (the copy updates it), None when nothing did.
    pub before: Option<sys::Stat>,
    /// An alternate destination's counterpart of a file new here (see [`FileTask::basis`]).
    pub basis: Option<sys::Stat>,
    /// See [`FileTask::quiet`].
    pub quiet: bool,
    /// The source is opened without following a symlink (see `FileTask::nofollow`).
    pub nofollow: bool,
    /// Bytes from offset 0 an earlier, killed copy left in the temporary, checked against the
    /// source (see [`resume`](super::super::resume)): the copy continues from there.
    pub kept: u64,
}

/// Opens the source, checks it, and creates the file its data goes to.
pub(super) fn open_pair(
    ctx: &Ctx<'_>,
    temps: &Temps,
    parents: &mut ParentCache,
    task: FileTask,
) -> Option<Open> {
    if ctx.stopped() {
        return None;
    }
    let FileTask {
        src,
        dst,
        before,
        basis,
        quiet,
        resume,
        nofollow,
        ..
    } = task;
    let (sf, st, extents, pseudo) = open_source(ctx, &src, nofollow)?;
    let sparse = !pseudo && st.allocated < st.size;
    let src_cached = crate::residency::cached_pages(sf.as_fd(), 0, 0);
    // Without --preserve the copy gets the source's permission bits less the umask, which
    // open(O_CREAT) applies itself: no fchmod afterwards. With --preserve the mode is set
    // after the owner (chown clears set-id bits), so the file starts private.
    // Without -p an existing file keeps its own permission bits, as rsync's do; --chmod
    // applies to new files.
    let create_mode = match (ctx.opts.preserve.perms, before) {
        (true, _) => 0o600,
        (false, Some(b)) if b.is_file() => ctx.opts.mode_over(b.mode, st.mode),
        (false, _) => ctx.source_meta(&st).mode & 0o777,
    };
    let dir = match parents.parent(&ctx.dest, &dst) {
        Ok((dir, _)) => dir,
        Err(e) => {
            let parent = dst.parent().unwrap_or(Path::new(".")).to_path_buf();
            return ctx.fail_none(FileError::io(&dst, Op::OpenParent(parent), &e));
        }
    };
    // The earlier run's partial is where temporaries go (beside, or --partial-dir's).
    let partial = resume.filter(|_| !pseudo).and_then(|name| {
        let tdir = temps.temp_dir(&dir, false).ok().flatten()?;
        let taken = take_partial(ctx, tdir.as_fd(), &name, &sf, &st)?;
        Some((taken, name, tdir))
    });
    let in_place = match (ctx.opts.inplace, before) {
        (InPlace::No, _) | (_, None) => None,
        // Written over, it would change the backup too (a second name of the same file).
        _ if ctx.opts.backup.is_some() => None,
        (how, Some(b)) if b.is_file() => open_in_place(ctx, &dir, &dst, &sf, &st, &b, how),
        _ => None,
    };
    let (df, temp, kept) = match in_place {
        Some((fd, kept)) => (fd, Temp::InPlace, kept),
        None => match partial {
            Some(((fd, kept), name, tdir)) => {
                let mode = temps.mode_at_commit(ctx, create_mode);
                (fd, Temp::adopt(tdir, name, mode), kept)
            }
            None => match temps.create_temp(ctx, &dir, &dst, create_mode) {
                Ok((fd, temp)) => (fd, temp, 0),
                Err(e) => {
                    ctx.fail(e);
                    return None;
                }
            },
        },
    };
    if ctx.opts.preallocate && !sparse && st.size > ctx.opts.chunk as u64 {
        preallocate(ctx, &df, &dst, st.size)?;
    }
    Some(Open {
        src,
        dst,
        sf,
        st,
        sparse,
        pseudo,
        extents,
        src_cached,
        df: df.into(),
        temp,
        dir,
        before,
        basis,
        quiet,
        nofollow,
        kept,
    })
}

/// Opens `src` (O_NOATIME where allowed), checks it is still a regular file, and finds its
/// data extents (one for a file without holes; none for a file of a pseudo filesystem,
/// flagged by the last field). None: skipped (vanished) or failed (reported).
fn open_source(
    ctx: &Ctx<'_>,
    src: &Path,
    nofollow: bool,
) -> Option<(OwnedFd, sys::Stat, Extents, bool)> {
    let flags = sys::OpenFlags {
        noatime: true,
        nofollow,
        ..Default::default()
    };
    let sf = match sys::open_path(src, flags) {
        Ok(f) => f,
        Err(e) if nofollow && e.raw_os_error() == Some(libc::ELOOP) => {
            let why = "is a symlink now, not the file listed: not followed";
            return ctx.fail_none(FileError::other(src, Op::Open, why));
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            ctx.tally
                .notice("some source files vanished during the copy and were skipped");
            return None;
        }
        Err(e) => return ctx.fail_none(FileError::io(src, Op::Open, &e)),
    };
    let st = match sys::fstat(sf.as_fd()) {
        Ok(s) => s,
        Err(e) => return ctx.fail_none(FileError::io(src, Op::Fstat, &e)),
    };
    if !st.is_file() {
        let why = format!("is a {} now, not a regular file", st.kind());
        return ctx.fail_none(FileError::other(src, Op::Open, why));
    }
    let size = st.size;
    let pseudo = sys::is_pseudo_fs(sf.as_fd());
    let extents = if pseudo {
        Vec::new()
    } else if st.allocated < size {
        match sys::data_extents(sf.as_fd(), 0, size) {
            Ok(e) => e,
            Err(e) => return ctx.fail_none(FileError::io(src, Op::LseekData, &e)),
        }
    } else if size > 0 {
        vec![(0, size)]
    } else {
        Vec::new()
    };
    Some((sf, st, extents, pseudo))
}

/// Preallocates `size` bytes of the destination. Only files written in several chunks (in
/// parallel, out of order) gain from it; a file written by one write is allocated in one
/// piece by delayed allocation anyway, and fallocate's unwritten extents cost a conversion
/// at I/O end (measured: 8% of a 10k small-file copy). None: failed (reported).
fn preallocate(ctx: &Ctx<'_>, df: &OwnedFd, dst: &Path, size: u64) -> Option<()> {
    if let Err(e) = sys::fallocate(df.as_fd(), 0, size) {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            // Several files preallocated at once may not fit together where they fit
            // one after the other (cp copies them one by one): give back what was
            // allocated and write without; a write that really does not fit fails.
            if let Err(e) = df.try_clone().and_then(|d| fs::File::from(d).set_len(0)) {
                return ctx.fail_none(FileError::io(dst, Op::Ftruncate, &e));
            }
        }
        // EOPNOTSUPP and friends: write without preallocation.
    }
    Some(())
}

/// rsync's --inplace, --append and --append-verify: the existing destination `b` (of `dst`
/// in `dir`) opened to write, never through a symlink, and the bytes at its start that stay
/// (`kept`: with --append, its length; with --append-verify only when that data is the
/// source's). None: written through a
/// temporary after all (it could not be opened: reported as a notice).
fn open_in_place(
    ctx: &Ctx<'_>,
    dir: &std::sync::Arc<OwnedFd>,
    dst: &Path,
    sf: &OwnedFd,
    st: &sys::Stat,
    b: &sys::Stat,
    how: InPlace,
) -> Option<(OwnedFd, u64)> {
    let name = dst.file_name()?;
    let fd = match sys::open_existing_write_at(dir.as_fd(), name) {
        Ok(fd) => fd,
        Err(e) => {
            ctx.tally.notice(format!(
                "{}: could not be written in place ({e}): written through a temporary",
                dst.display()
            ));
            return None;
        }
    };
    // Exactly what is there: the data after it is appended (an unaligned start moves to a
    // strategy that takes it, when O_DIRECT refuses).
    let kept = match how {
        InPlace::Append | InPlace::AppendVerify => b.size.min(st.size),
        _ => 0,
    };
    let kept = match how {
        InPlace::AppendVerify if kept > 0 => {
            let same = ctx
                .dest
                .open_read(dst)
                .ok()
                .and_then(|d| Some(same_prefix(sf.try_clone().ok()?, d, kept, ctx.opts.chunk)))
                .unwrap_or(false);
            if same {
                kept
            } else {
                0
            }
        }
        _ => kept,
    };
    Some((fd, kept))
}
