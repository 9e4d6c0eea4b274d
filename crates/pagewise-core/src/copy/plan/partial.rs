//! The planner's side of resuming inside a file (see [`crate::copy::resume`]): a stale
//! temporary that an earlier, killed copy left with a checkpoint is kept for the entry it
//! was written for — when the source still has that entry — instead of being removed; the
//! worker that copies the entry checks it and continues from it. Temporaries no entry took
//! (the file was up to date, excluded, gone) are removed when their directory is planned.

use super::super::resume::Checkpoint;
use super::Planner;
use crate::sys;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Partial temporaries kept for the entries of the directory being planned: destination
/// path -> (temporary's name, bytes its checkpoint keeps).
pub(super) type Partials = std::collections::HashMap<PathBuf, (OsString, u64)>;

impl Planner<'_> {
    /// Keeps the stale temporary `name` of the destination directory `dir` (`dst`) for its
    /// entry when it carries a checkpoint and `wanted` says the source has the entry: true
    /// when kept (of two for one entry, the one that keeps more; the other is removed).
    pub(super) fn keep_partial(
        &mut self,
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
        let loser = match self.partials.get(&key) {
            Some((_, kept)) if *kept >= c.kept => Some(name),
            _ => self
                .partials
                .insert(key, (name, c.kept))
                .map(|(other, _)| other),
        };
        if let Some(l) = loser {
            self.remove_temp(dir, &l);
        }
        true
    }

    /// Removes the kept partial temporaries of `dir` that no entry took.
    pub(super) fn drop_partials(&mut self, dir: BorrowedFd<'_>) {
        for (_, (name, _)) in std::mem::take(&mut self.partials) {
            self.remove_temp(dir, &name);
        }
    }

    /// The partial temporary kept for the destination `dst`, taken by its file task.
    pub(super) fn take_partial(&mut self, dst: &Path) -> Option<OsString> {
        self.partials.remove(dst).map(|(name, _)| name)
    }

    /// For a regular file named by the caller (`dst`, its destination): keeps the stale
    /// partial temporary beside it, if there is one, and removes stale temporaries of its
    /// name that hold no checkpoint; the directory is returned for
    /// [`Planner::drop_partials`]. The directory is read once per planner thread.
    pub(super) fn partials_beside(&mut self, dst: &Path) -> Option<std::sync::Arc<OwnedFd>> {
        if self.ctx.opts.dry_run {
            return None;
        }
        let (dir, fname) = self.ctx.dest.parent(dst).ok()?;
        let up = dst.parent().unwrap_or(Path::new("")).to_path_buf();
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
            let Some(pid) = super::dir::temp_owner(n.to_bytes()) else {
                continue;
            };
            // A stale temporary of ours without a checkpoint (killed before its first one)
            // holds nothing to resume: removed, as a tree copy removes its directories' ones.
            if self.stale_temporary(dir.as_fd(), &n, pid)
                && !self.keep_partial(
                    dir.as_fd(),
                    dst.parent().unwrap_or(Path::new("")),
                    &n,
                    |t| t == fname.as_bytes(),
                )
            {
                self.remove_temp(dir.as_fd(), sys::name_os(&n));
            }
        }
        Some(dir)
    }

    fn remove_temp(&self, dir: BorrowedFd<'_>, name: &OsStr) {
        if sys::unlink_at(dir, name, false).is_ok() {
            self.ctx.counts.stale_temps.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The entry name a temporary `.NAME.pagewise-PID-N.tmp` was written for: `NAME`.
pub(super) fn temp_target(name: &[u8]) -> Option<&[u8]> {
    super::dir::temp_owner(name)?;
    let rest = name.strip_prefix(b".")?;
    let at = rest.windows(10).rposition(|w| w == b".pagewise-")?;
    Some(&rest[..at]).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::temp_target;

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
