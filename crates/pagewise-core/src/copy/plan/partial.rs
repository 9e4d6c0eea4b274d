//! Stale temporaries in the destination, and the planner's side of resuming inside a file
//! (see [`crate::copy::resume`]): a temporary is recognised by its name ([`temp_owner`]) and
//! found stale when its process is gone and it carries the mark copies put on theirs
//! ([`stale_temporary`]). One that an earlier, killed copy left with a checkpoint is kept for
//! the entry it was written for — when the source still has that entry — instead of being
//! removed; the worker that copies the entry checks it and continues from it. Temporaries no
//! entry took (the file was up to date, excluded, gone) are removed when their directory is
//! planned. [`Partials`] owns what is kept meanwhile.

use crate::copy::commit::{Temps, TEMP_MARK, TEMP_MARK_VALUE};
use crate::copy::resume::Checkpoint;
use crate::copy::state::Ctx;
use crate::sys;
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The partial temporaries one planner thread keeps for entries of the directory it plans.
#[derive(Default)]
pub(super) struct Partials {
    /// Destination path -> (temporary's name, bytes its checkpoint keeps).
    kept: HashMap<PathBuf, (OsString, u64)>,
    /// Temporary names in the destination directories of files named by the caller.
    root_temps: HashMap<PathBuf, Vec<CString>>,
}

impl Partials {
    /// Keeps the stale temporary `name` of the destination directory `dir` (`dst`) for its
    /// entry when it carries a checkpoint and `wanted` says the source has the entry: true
    /// when kept (of two for one entry, the one that keeps more; the other is removed).
    pub(super) fn keep(
        &mut self,
        ctx: &Ctx<'_>,
        dir: BorrowedFd<'_>,
        dst: &Path,
        name: &CStr,
        wanted: impl Fn(&[u8]) -> bool,
    ) -> bool {
        let Some(target) = temp_target(name.to_bytes()).filter(|t| wanted(t)) else {
            return false;
        };
        let name = sys::name_os(name).to_os_string();
        let Some(c) = sys::open_read_at(dir, &name)
            .ok()
            .and_then(|fd| Checkpoint::read(fd.as_fd()))
        else {
            return false;
        };
        let key = dst.join(OsStr::from_bytes(target));
        let loser = match self.kept.get(&key) {
            Some((_, kept)) if *kept >= c.kept => Some(name),
            _ => self
                .kept
                .insert(key, (name, c.kept))
                .map(|(other, _)| other),
        };
        if let Some(l) = loser {
            remove_temp(ctx, dir, &l);
        }
        true
    }

    /// Removes the kept partial temporaries of `dir` that no entry took.
    pub(super) fn drop_all(&mut self, ctx: &Ctx<'_>, dir: BorrowedFd<'_>) {
        for (_, (name, _)) in std::mem::take(&mut self.kept) {
            remove_temp(ctx, dir, &name);
        }
    }

    /// The partial temporary kept for the destination `dst`, taken by its file task.
    pub(super) fn take(&mut self, dst: &Path) -> Option<OsString> {
        self.kept.remove(dst).map(|(name, _)| name)
    }

    /// For a regular file named by the caller (`dst`, its destination): keeps the stale
    /// partial temporary beside it, if there is one, and removes stale temporaries of its
    /// name that hold no checkpoint; the directory is returned for [`Partials::drop_all`].
    /// The directory is read once per planner thread.
    pub(super) fn beside(
        &mut self,
        ctx: &Ctx<'_>,
        temps: &Temps,
        dst: &Path,
    ) -> Option<Arc<OwnedFd>> {
        if ctx.opts.dry_run {
            return None;
        }
        let (dir, fname) = ctx.dest.parent(dst).ok()?;
        // Where the temporaries are: beside, or in --partial-dir's subdirectory.
        let dir = temps.temp_dir(&dir, false).ok()??;
        let mut up = dst.parent().unwrap_or(Path::new("")).to_path_buf();
        if let Some(sub) = ctx.opts.temp_place.sub() {
            up.push(sub);
        }
        let temps = self.root_temps.entry(up).or_insert_with(|| {
            sys::DirReader::new(dir.as_fd())
                .filter_map(Result::ok)
                .map(|d| d.name)
                .filter(|n| temp_target(n.to_bytes()).is_some())
                .collect::<Vec<CString>>()
        });
        let mine: Vec<CString> = temps
            .iter()
            .filter(|n| temp_target(n.to_bytes()) == Some(fname.as_bytes()))
            .cloned()
            .collect();
        for n in mine {
            let Some(pid) = temp_owner(n.to_bytes()) else {
                continue;
            };
            // A stale temporary of ours without a checkpoint (killed before its first one)
            // holds nothing to resume: removed, as a tree copy removes its directories' ones.
            if stale_temporary(ctx, dir.as_fd(), &n, pid)
                && !self.keep(
                    ctx,
                    dir.as_fd(),
                    dst.parent().unwrap_or(Path::new("")),
                    &n,
                    |t| t == fname.as_bytes(),
                )
            {
                remove_temp(ctx, dir.as_fd(), sys::name_os(&n));
            }
        }
        Some(dir)
    }
}

/// Removes the temporary `name` of `dir`, counted as a stale temporary removed.
fn remove_temp(ctx: &Ctx<'_>, dir: BorrowedFd<'_>, name: &OsStr) {
    if sys::unlink_at(dir, name, false).is_ok() {
        ctx.counts.stale_temps.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether `name` in `dir` is a temporary a pagewise copy of this user made and left
/// behind: a regular file with one name, owned by the effective user, carrying the mark
/// copies put on their temporaries ([`TEMP_MARK`]), whose process (`pid`, from its name)
/// is gone. A file that merely has such a name — or that someone else made, mark and all
/// (a planted file in a directory others can write) — is not ours and stays.
pub(super) fn stale_temporary(ctx: &Ctx<'_>, dir: BorrowedFd<'_>, name: &CStr, pid: u32) -> bool {
    let st = sys::fstatat(Some(dir), name, false);
    if st.as_ref().is_ok_and(|m| m.uid != sys::euid()) {
        ctx.tally.notice(
            "files named like pagewise temporaries but not this user's were left alone \
             (neither resumed nor removed)",
        );
    }
    let is_plain = st.is_ok_and(|m| m.is_file() && m.nlink == 1 && m.uid == sys::euid());
    let gone = || sys::kill(pid, 0).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH));
    let marked = || {
        sys::open_read_at(dir, sys::name_os(name))
            .and_then(|fd| sys::get_small_xattr(fd.as_fd(), TEMP_MARK))
            .is_ok_and(|v| v.as_deref() == Some(TEMP_MARK_VALUE))
    };
    is_plain && gone() && marked()
}

/// The PID in a temporary's name `.NAME.pagewise-PID-N.tmp`, None for any other name.
pub(super) fn temp_owner(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(b".")?.strip_suffix(b".tmp")?;
    let at = rest.windows(10).rposition(|w| w == b".pagewise-")?;
    let tail = std::str::from_utf8(&rest[at + 10..]).ok()?;
    let (pid, seq) = tail.split_once('-')?;
    seq.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// The entry name a temporary `.NAME.pagewise-PID-N.tmp` was written for: `NAME`.
pub(super) fn temp_target(name: &[u8]) -> Option<&[u8]> {
    temp_owner(name)?;
    let rest = name.strip_prefix(b".")?;
    let at = rest.windows(10).rposition(|w| w == b".pagewise-")?;
    Some(&rest[..at]).filter(|t| !t.is_empty())
}

/// --partial-dir's subdirectory of the destination directory `dir` (`dst`): the stale
/// temporaries of ours in it are kept for their entries (the names in `keep`) when they
/// carry a checkpoint (see [`Partials::keep`]), or removed. A file there under the name of an
/// entry the source has is rsync's partial (or delayed) file of it: rsync takes it and
/// removes it; it is removed here when only this user can have written it (see
/// [`only_mine`]). Anything else stays.
pub(super) fn tidy_sub(
    ctx: &Ctx<'_>,
    temps: &Temps,
    partials: &mut Partials,
    dir: &Arc<OwnedFd>,
    dst: &Path,
    keep: &HashSet<&CStr>,
) {
    let Ok(Some(sub)) = temps.temp_dir(dir, false) else {
        return;
    };
    let names: Vec<CString> = sys::DirReader::new(sub.as_fd())
        .filter_map(Result::ok)
        .map(|d| d.name)
        .collect();
    let dry = ctx.opts.dry_run;
    let sub_mine = sys::fstat(sub.as_fd()).is_ok_and(|s| only_mine(&s));
    for name in names {
        let Some(pid) = temp_owner(name.to_bytes()) else {
            let theirs = sys::fstatat(Some(sub.as_fd()), &name, false);
            let rsyncs = theirs.is_ok_and(|s| s.is_file() && s.nlink == 1 && only_mine(&s));
            if !dry && sub_mine && keep.contains(name.as_c_str()) && rsyncs {
                let _ = sys::unlink_at(sub.as_fd(), sys::name_os(&name), false);
            }
            continue;
        };
        if stale_temporary(ctx, sub.as_fd(), &name, pid)
            && (dry || !partials.keep(ctx, sub.as_fd(), dst, &name, |t| wanted(keep, t)))
            && (dry || sys::unlink_at(sub.as_fd(), sys::name_os(&name), false).is_ok())
        {
            ctx.counts.stale_temps.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Owned by this user and writable by nobody else: only this user (or root) can have
/// written it.
fn only_mine(st: &sys::Stat) -> bool {
    st.uid == sys::euid() && st.mode & 0o022 == 0
}

/// Whether the source directory has the entry `name` (of a temporary's target).
pub(super) fn wanted(keep: &HashSet<&CStr>, name: &[u8]) -> bool {
    CString::new(name).is_ok_and(|c| keep.contains(c.as_c_str()))
}

#[cfg(test)]
mod tests {
    use super::{temp_owner, temp_target};

    #[test]
    fn temporaries_are_recognised_by_name_only() {
        assert_eq!(temp_owner(b".data.db.pagewise-4242-7.tmp"), Some(4242));
        assert_eq!(temp_owner(b".a.pagewise-b.pagewise-17-0.tmp"), Some(17));
        assert_eq!(temp_owner(b"data.pagewise-17-0.tmp"), None);
        assert_eq!(temp_owner(b".data.pagewise-17.tmp"), None);
        assert_eq!(temp_owner(b".data.pagewise-x-1.tmp"), None);
    }

    #[test]
    fn targets_of_temporary_names() {
        assert_eq!(
            temp_target(b".data.db.pagewise-4242-7.tmp"),
            Some(&b"data.db"[..])
        );
        assert_eq!(
            temp_target(b".a.pagewise-b.pagewise-17-0.tmp"),
            Some(&b"a.pagewise-b"[..])
        );
        assert_eq!(temp_target(b"..pagewise-1-2.tmp"), None);
        assert_eq!(temp_target(b"data.pagewise-17-0.tmp"), None);
    }
}
