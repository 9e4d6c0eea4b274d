//! The shared state of one copy, small and in one place: [`Ctx`] (options, observer, tally,
//! entry counts, the destination's anchors, the bandwidth limit) with the per-entry reports
//! every part makes ([`Ctx::done`], [`Ctx::skipped`], [`Ctx::fail`]), and the descriptor
//! budget the batches are sized by ([`FdBudget`]).

use super::dest::Dest;
use super::limits::Bandwidth;
use super::options::{CopyOptions, RESIDUE_RECHECK, SETTLE_BATCH, SETTLE_FILES, SMALL_BATCH};
use super::report::{Action, Changes, CopyItem, EntryKind};
use crate::error::FileError;
use crate::sys;
use crate::verb::{FileResult, Observer, Tally};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries counted by the planner threads and the workers.
#[derive(Default)]
pub(super) struct Counts {
    pub symlinks: AtomicU64,
    pub specials: AtomicU64,
    pub created: AtomicU64,
    pub updated: AtomicU64,
    pub skipped: AtomicU64,
    pub stale_temps: AtomicU64,
    /// Bytes of kept data compared with the source (per side) before resuming.
    pub resume_compared: AtomicU64,
    /// Files whose content was left and whose metadata was brought over.
    pub metadata: AtomicU64,
    pub deleted: AtomicU64,
    /// Deletions left undone by --max-delete.
    pub deletes_skipped: AtomicU64,
    /// Files hard-linked from a --link-dest directory.
    pub linked: AtomicU64,
    /// Entries left out by kind (no -l, no -D, unsafe symlinks).
    pub ignored: AtomicU64,
    /// Sizes of the regular files and symlinks met (rsync's "total size").
    pub listed_bytes: AtomicU64,
    /// A dry run's files and bytes that a copy would write (the workers count a real run's).
    pub dry_files: AtomicU64,
    pub dry_bytes: AtomicU64,
}

/// What the workers, the planner and the end of the run share: the options and the observer,
/// the figures and the tally, and what is fixed for the run. What changes as the copy goes
/// (fallbacks, write-back batches, the no-space retry) is owned by the module that changes it.
pub(super) struct Ctx<'a> {
    pub counts: Counts,
    pub opts: &'a CopyOptions,
    pub observer: &'a dyn Observer,
    /// Errors, notices, the clock and a stop once asked for.
    pub tally: Tally,
    pub is_root: bool,
    /// Destination names, resolved without following symlinks.
    pub dest: Dest,
    /// `--bwlimit`: every chunk and small-file batch waits for its turn.
    pub bandwidth: Option<Bandwidth>,
    /// Open files each holder may keep.
    pub fds: FdBudget,
    /// --usermap and --groupmap, with what each source id became.
    ids: super::idmap::IdMaps,
    /// The per-directory merge files' rules read so far.
    dir_rules: super::filter::DirRulesSeen,
    /// Each alternate destination directory (--link-dest, --compare-dest, --copy-dest),
    /// opened once (see [`Ctx::alt_root`]).
    alt_roots: Vec<Option<std::os::fd::OwnedFd>>,
}

/// Opens an alternate destination directory: an absolute path of plain names (as the CLI
/// gives it, walked and symlink-free) without following any symlink, else as written.
fn open_alt_root(path: &Path) -> Option<std::os::fd::OwnedFd> {
    let plain = path.is_absolute()
        && path
            .components()
            .skip(1)
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    let dir = sys::OpenFlags {
        directory: true,
        ..Default::default()
    };
    match plain {
        true => {
            let root = sys::openat(None, c"/", dir).ok()?;
            sys::open_dir_beneath(root.as_fd(), path.strip_prefix("/").ok()?).ok()
        }
        false => sys::open_path(path, dir).ok(),
    }
}

impl<'a> Ctx<'a> {
    pub fn new(opts: &'a CopyOptions, observer: &'a dyn Observer, dest: Dest) -> Self {
        Ctx {
            counts: Counts::default(),
            opts,
            observer,
            tally: Tally::new(),
            is_root: opts.super_user.unwrap_or(sys::euid() == 0),
            dest,
            bandwidth: match opts.bwlimit_auto {
                true => Some(Bandwidth::new(u64::MAX)),
                false => opts.bwlimit.map(Bandwidth::new),
            },
            fds: FdBudget::new(sys::fd_budget(), opts.threads),
            ids: super::idmap::IdMaps::new(&opts.usermap, &opts.groupmap, opts.numeric_ids),
            dir_rules: Default::default(),
            alt_roots: opts
                .alt_dests
                .iter()
                .map(|a| open_alt_root(&opts.alt_path(a, &opts.dest)?))
                .collect(),
        }
    }

    /// The `i`th alternate destination directory, held open for the run: what is found in
    /// it is reached from this descriptor, so a name on its path turned into a symlink
    /// meanwhile (rsync 3.5's copy-dest read-leak race) changes nothing. None when it could
    /// not be opened (then it holds nothing).
    pub fn alt_root(&self, i: usize) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.alt_roots.get(i)?.as_ref().map(AsFd::as_fd)
    }

    /// Whether the filter rules exclude `path` (from the transfer root) on `side`, the
    /// per-directory merge files read so far included.
    pub fn excluded(&self, path: &[u8], is_dir: bool, side: super::filter::Side) -> bool {
        let f = &self.opts.filters;
        match (f.is_empty(), f.has_per_dir()) {
            (true, _) => false,
            (false, false) => f.excluded(path, is_dir, side),
            _ => f.excluded_in(path, is_dir, side, &|dir| self.dir_rules.get(side, dir)),
        }
    }

    /// Reads the per-directory merge files of the directory `fd` (`at`; `rel` from the
    /// transfer root) for `side`, before its entries are filtered. A file is opened without
    /// following a symlink and must be a regular file; one that cannot be read fails the
    /// directory's copy (its path and call named), as a bad rule file fails rsync's.
    pub fn read_dir_rules(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        at: &Path,
        rel: &[u8],
        side: super::filter::Side,
    ) {
        if !self.opts.filters.has_per_dir() {
            return;
        }
        let read = |name: &[u8]| super::filter::read_rules_at(fd, at, name);
        match self.opts.filters.dir_rules(rel, read) {
            Ok(rules) => self.dir_rules.put(side, rel, rules),
            Err(e) => self.fail(FileError::other(at, crate::error::Op::Read, e.to_string())),
        }
    }

    /// Waits for `bytes` under the bandwidth limit; false when the copy stops meanwhile.
    pub fn pace(&self, bytes: u64) -> bool {
        match &self.bandwidth {
            Some(b) => b.take(bytes, || self.stopped()),
            None => true,
        }
    }

    /// Whether to stop (the observer asked, now or before).
    pub fn stopped(&self) -> bool {
        self.tally.stop_requested(self.observer)
    }

    /// One entry's outcome to the observer, when per-entry results were asked for.
    pub fn item(&self, path: &Path, kind: EntryKind, action: Action, bytes: u64) {
        self.item_with(path, kind, action, bytes, Changes::default(), None);
    }

    /// [`Ctx::item`] with what differed and a link's target.
    pub fn item_with(
        &self,
        path: &Path,
        kind: EntryKind,
        action: Action,
        bytes: u64,
        changes: Changes,
        target: Option<&Path>,
    ) {
        if self.opts.items {
            self.observer.file(FileResult::Copy(CopyItem {
                path: path.to_path_buf(),
                kind: Some(kind),
                action,
                bytes,
                error: None,
                changes,
                target: target.map(Path::to_path_buf),
            }));
        }
    }

    /// An entry made (`existed`: replacing what was there), counted and reported.
    pub fn done(&self, path: &Path, kind: EntryKind, existed: bool, bytes: u64) {
        self.done_with(path, kind, existed, bytes, Changes::default(), None);
    }

    /// [`Ctx::done`] with what differed from what it replaced and a link's target.
    pub fn done_with(
        &self,
        path: &Path,
        kind: EntryKind,
        existed: bool,
        bytes: u64,
        changes: Changes,
        target: Option<&Path>,
    ) {
        let (count, action) = if existed {
            (&self.counts.updated, Action::Updated)
        } else {
            (&self.counts.created, Action::Created)
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.item_with(path, kind, action, bytes, changes, target);
    }

    /// The source's metadata as the copy gives it on: rsync's --chmod, --chown, --usermap and
    /// --groupmap applied.
    pub fn source_meta(&self, st: &sys::Stat) -> sys::Stat {
        let mut s = *st;
        if !self.opts.chmod.is_empty() && !s.is_symlink() {
            s.mode = super::modes::apply_chmod(&self.opts.chmod, s.mode, s.is_dir());
        }
        if let Some(u) = self.opts.chown.0 {
            s.uid = u;
        }
        if let Some(g) = self.opts.chown.1 {
            s.gid = g;
        }
        s.uid = self.ids.uid(s.uid);
        s.gid = self.ids.gid(s.gid);
        s
    }

    /// What differs between a source (as given on) and its destination, among what is kept.
    pub fn changes(&self, src: &sys::Stat, dst: &sys::Stat) -> Changes {
        let keep = self.opts.preserve;
        let same = |a, b| self.opts.same_mtime(a, b);
        let src = &self.source_meta(src);
        let mut c = Changes::of(src, dst, keep, keep.owner && self.is_root, same);
        // -E without -p: a file's executability is the source's.
        c.perms |= !keep.perms
            && src.is_file()
            && dst.is_file()
            && self.opts.mode_over(dst.mode, src.mode) != dst.mode & 0o7777;
        c
    }

    /// [`Ctx::changes`] of a directory: its time counts only when directories' times are
    /// kept (-t without -O).
    pub fn dir_changes(&self, src: &sys::Stat, dst: &sys::Stat) -> Changes {
        let mut c = self.changes(src, dst);
        c.time &= self.opts.preserve.times && !self.opts.omit_dir_times;
        c
    }

    /// With --remove-source-files: removes the source file (not directory) `src` once its
    /// copy is complete or up to date, when it is still the file `st` describes (same
    /// device, inode, size and time: rsync refuses a file that changed too).
    pub fn remove_source(&self, src: &Path, st: &sys::Stat) {
        if !self.opts.remove_source_files || self.opts.dry_run || st.is_dir() {
            return;
        }
        let Some(name) = src.file_name() else { return };
        let parent = match src.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let flags = sys::OpenFlags {
            directory: true,
            ..Default::default()
        };
        let r = sys::open_path(parent, flags).and_then(|dir| {
            let c = std::ffi::CString::new(name.as_encoded_bytes())?;
            let now = sys::fstatat(Some(dir.as_fd()), &c, false)?;
            if (now.dev, now.ino, now.size, now.mtime) != (st.dev, st.ino, st.size, st.mtime) {
                return Err(std::io::Error::other(
                    "it changed since it was copied: not removed",
                ));
            }
            sys::unlink_at(dir.as_fd(), name, false)
        });
        if let Err(e) = r {
            self.tally
                .error(FileError::io(src, crate::error::Op::Unlink, &e));
        }
    }

    /// An entry the options leave out by its kind, counted and reported (`target`: an unsafe
    /// symlink's text).
    pub fn ignored(&self, path: &Path, kind: EntryKind, target: Option<&Path>) {
        self.counts.ignored.fetch_add(1, Ordering::Relaxed);
        self.item_with(path, kind, Action::Ignored, 0, Changes::default(), target);
    }

    /// An entry left as it was, counted and reported.
    pub fn skipped(&self, path: &Path, kind: EntryKind) {
        self.counts.skipped.fetch_add(1, Ordering::Relaxed);
        self.item(path, kind, Action::Skipped, 0);
    }

    /// A per-file failure: counted in the outcome and reported as a `failed` entry.
    pub fn fail(&self, e: FileError) {
        if self.opts.items {
            self.observer.file(FileResult::Copy(CopyItem {
                path: e.path.clone(),
                kind: None,
                action: Action::Failed,
                bytes: 0,
                error: Some(format!("{} failed: {}", e.op, e.message)),
                changes: Changes::default(),
                target: None,
            }));
        }
        self.tally.error(e);
    }

    /// Reports `e` for the file at hand and gives it up.
    pub fn fail_none<T>(&self, e: FileError) -> Option<T> {
        self.fail(e);
        None
    }
}

/// How many files each holder of open descriptors may keep, from the run's descriptor
/// budget ([`sys::fd_budget`]) less four per worker (its io_uring, the directories it
/// works in): half for the workers' small-file batches (source and destination) and settle
/// lists, an eighth for the shared batched write-back (up to three batches open: see
/// `BatchSettle::add` in finish/settle.rs) and another for the files kept for the residue's second measure;
/// the rest is slack for the planners' directories. With the usual
/// limits these are the constants; under a limit of 1024 and 16 workers they shrink instead
/// of failing with EMFILE.
#[derive(Clone, Copy, Debug)]
pub(super) struct FdBudget {
    /// Workers: the copy's threads, fewer when the budget cannot keep each a few files.
    pub workers: usize,
    pub small_batch: usize,
    pub settle: usize,
    pub shared_settle: usize,
    pub recheck: usize,
}

impl FdBudget {
    pub fn new(budget: usize, workers: usize) -> FdBudget {
        let workers = workers.min(budget / 16).max(1);
        let usable = budget.saturating_sub(4 * workers).max(16);
        let per_worker = usable / 2 / workers;
        FdBudget {
            workers,
            small_batch: (per_worker / 4).clamp(1, SMALL_BATCH),
            settle: (per_worker / 4).clamp(1, SETTLE_BATCH),
            shared_settle: (usable / 24).clamp(1, SETTLE_FILES),
            recheck: (usable / 8).min(RESIDUE_RECHECK),
        }
    }

    /// Descriptors held at most by all of them.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.workers * (4 + 2 * self.small_batch + self.settle)
            + 3 * self.shared_settle
            + self.recheck
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_fits_the_limit_and_keeps_the_constants_when_there_is_room() {
        for (limit, workers) in [(128, 16), (1024, 16), (1024, 1), (4096, 64), (256, 2)] {
            let b = FdBudget::new(limit - 64, workers);
            assert!(b.held() <= limit - 64, "{limit} {workers}: {b:?}");
        }
        let roomy = FdBudget::new(1 << 20, 16);
        assert_eq!(roomy.workers, 16);
        assert_eq!(roomy.small_batch, SMALL_BATCH);
        assert_eq!(roomy.settle, SETTLE_BATCH);
        assert_eq!(roomy.shared_settle, SETTLE_FILES);
        assert_eq!(roomy.recheck, RESIDUE_RECHECK);
    }
}
