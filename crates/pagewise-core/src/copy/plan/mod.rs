//! The planner: cp's rules over the sources. It refuses sources that must not be copied (the
//! same file, a directory into itself, a FIFO or device), walks the rest, creates directories
//! and symlinks itself, and feeds regular files to the workers through a bounded channel,
//! interleaved across directories and in batches of small neighbours.
//!
//! Directories are planned in parallel: each is one job on a shared LIFO stack (depth first
//! keeps it small), taken by one of a few planner threads, which read it with getdents64 and
//! stat its entries relative to its descriptor (fstatat: no path resolution per entry). A
//! destination directory that existed is read once too, and only names it holds are stat'ed:
//! an up-to-date 100k-file tree is checked with one fstatat per entry and side.

use super::commit::{TEMP_MARK, TEMP_MARK_VALUE};
use super::worker::{SMALL_BATCH_BYTES, SMALL_FILE};
use super::{Action, Ctx, Dereference, EntryKind, Existing};
use crate::error::{FileError, Op};
use crate::sys;
use crossbeam_channel::Sender;
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

/// A regular file to copy.
pub(super) struct FileTask {
    pub src: PathBuf,
    pub dst: PathBuf,
    /// Size when the planner saw it.
    pub size: u64,
    /// The destination existed: the copy updates it rather than creating it.
    pub existed: bool,
    /// `--checksum` and a destination of the same size: the worker compares content first and
    /// leaves the file when it is equal.
    pub compare: bool,
}

/// A directory the copy made or entered: its mode and times are set last, after its contents.
pub(super) struct DirTask {
    /// The source directory (its extended attributes are copied with `preserve`).
    pub src: PathBuf,
    pub dst: PathBuf,
    pub meta: sys::Stat,
    /// 0 for a source named by the caller, 1 for its subdirectories, ...
    pub depth: usize,
}

/// What the planner leaves for the end of the run.
pub(super) struct Planned {
    /// Directories, deepest first.
    pub dirs: Vec<DirTask>,
    /// Hard links to make once their first name is copied: `(first name, other name)`.
    pub deferred_links: Vec<(PathBuf, PathBuf)>,
}

/// Plans every target `(source, destination)`: the top level on this thread, directories on
/// planner threads; files are sent to the workers through `tx` (dropping the last sender ends
/// the workers' loops). Returns when everything is planned.
pub(super) fn plan(
    ctx: &Ctx<'_>,
    targets: &[(PathBuf, PathBuf)],
    tx: Sender<Vec<FileTask>>,
) -> Planned {
    let shared = Shared::default();
    let mut top = Planner::new(ctx, &shared, tx.clone());
    let follow_roots = ctx.opts.dereference != Dereference::Never;
    for (src, dst) in targets {
        match sys::stat_path(src, follow_roots) {
            Ok(st) => match refuse_source(src, dst, &st) {
                Some(why) => ctx.fail(FileError::other(src, Op::Copy, why)),
                None => {
                    // The destination as named (a symlink is replaced, not followed), except
                    // a directory to enter, which may be reached through one.
                    let dst_st = sys::stat_path(dst, false).ok().map(|d| {
                        if d.is_symlink() && st.is_dir() {
                            sys::stat_path(dst, true).unwrap_or(d)
                        } else {
                            d
                        }
                    });
                    let root = Entry {
                        src: src.clone(),
                        dst: dst.clone(),
                        st,
                        dst_st,
                        depth: 0,
                    };
                    if let Some(job) = top.entry(root, None) {
                        shared.push(vec![job]);
                    }
                }
            },
            Err(e) => {
                let op = if follow_roots { Op::Stat } else { Op::Lstat };
                ctx.fail(FileError::io(src, op, &e))
            }
        }
    }
    top.flush();
    let threads = planner_threads(ctx.opts.threads);
    let mut parts = vec![top.into_parts()];
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (shared, tx) = (&shared, tx.clone());
                s.spawn(move || {
                    let mut p = Planner::new(ctx, shared, tx);
                    p.run_jobs();
                    p.into_parts()
                })
            })
            .collect();
        drop(tx);
        for h in handles {
            // A planner that panicked: its part of the plan is missing, so the copy must not
            // go on as if the plan were whole.
            match h.join() {
                Ok(part) => parts.push(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    let mut out = Planned {
        dirs: Vec::new(),
        deferred_links: Vec::new(),
    };
    for (dirs, links) in parts {
        out.dirs.extend(dirs);
        out.deferred_links.extend(links);
    }
    // Deepest first: a directory's times are set after everything inside it.
    out.dirs.sort_by_key(|d| std::cmp::Reverse(d.depth));
    out
}

/// Planner threads: directories are planned in parallel up to the cores (2 here: an
/// up-to-date 100k-file tree checked in about half the time of one thread), never more than
/// the copy's own threads.
fn planner_threads(copy_threads: usize) -> usize {
    crate::walk::default_threads()
        .clamp(1, 4)
        .min(copy_threads.max(1))
}

/// One source entry to plan, with what its destination is now.
struct Entry {
    src: PathBuf,
    dst: PathBuf,
    st: sys::Stat,
    /// The destination's metadata (not followed), None when it does not exist.
    dst_st: Option<sys::Stat>,
    /// 0 for a source named by the caller, 1 for its entries, ...
    depth: usize,
}

/// A directory waiting to be planned.
struct DirJob {
    entry: Entry,
    /// The source directories above it, for `-L`'s loop check.
    up: Option<Arc<Chain>>,
}

/// A source directory and those above it (`(device, inode)`), innermost first.
struct Chain {
    id: (u64, u64),
    up: Option<Arc<Chain>>,
}

impl Chain {
    fn contains(chain: &Option<Arc<Chain>>, id: (u64, u64)) -> bool {
        let mut at = chain.as_deref();
        while let Some(c) = at {
            if c.id == id {
                return true;
            }
            at = c.up.as_deref();
        }
        false
    }
}

/// What the planner threads share.
#[derive(Default)]
struct Shared {
    /// Directories to plan, and how many are being planned now.
    jobs: Mutex<(Vec<DirJob>, usize)>,
    more: Condvar,
    /// First destination name of each multiply-linked source file, by (device, inode), and
    /// that name's (device, inode) when it was left as it was (then a second name already
    /// linked to it is up to date too).
    #[allow(clippy::type_complexity)]
    links: Mutex<HashMap<(u64, u64), (PathBuf, Option<(u64, u64)>)>>,
    /// (device, inode) of every destination directory made or entered.
    dest_dirs: Mutex<HashSet<(u64, u64)>>,
}

impl Shared {
    /// Queues directories; the last of `jobs` is planned first.
    fn push(&self, jobs: Vec<DirJob>) {
        if jobs.is_empty() {
            return;
        }
        self.jobs.lock().unwrap().0.extend(jobs);
        self.more.notify_all();
    }

    /// Marks one job done (taken with [`Shared::take`]).
    fn done(&self) {
        // Called while unwinding too (see `JobDone`): a poisoned lock must not panic again.
        let mut j = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        j.1 -= 1;
        if j.1 == 0 && j.0.is_empty() {
            self.more.notify_all();
        }
    }
}

/// Marks a taken job done when dropped: at its end, or when planning it panicked.
struct JobDone<'a>(&'a Shared);

impl Drop for JobDone<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// One planner thread's state while it walks.
struct Planner<'a> {
    ctx: &'a Ctx<'a>,
    shared: &'a Shared,
    tx: Sender<Vec<FileTask>>,
    /// Files waiting to be sent, grouped by destination directory (see [`Planner::flush`]).
    pending: Vec<Vec<FileTask>>,
    pending_files: usize,
    dirs: Vec<DirTask>,
    deferred_links: Vec<(PathBuf, PathBuf)>,
}

/// Levels below a directory that `--delete` removes (deeper trees fail with a message).
const MAX_REMOVE_DEPTH: usize = 4096;

/// Directories (and files) the planner gathers before handing files out interleaved.
const INTERLEAVE_DIRS: usize = 32;
const INTERLEAVE_FILES: usize = 8192;

impl<'a> Planner<'a> {
    fn new(ctx: &'a Ctx<'a>, shared: &'a Shared, tx: Sender<Vec<FileTask>>) -> Self {
        Planner {
            ctx,
            shared,
            tx,
            pending: Vec::new(),
            pending_files: 0,
            dirs: Vec::new(),
            deferred_links: Vec::new(),
        }
    }

    /// What this thread leaves for the end of the run.
    #[allow(clippy::type_complexity)]
    fn into_parts(mut self) -> (Vec<DirTask>, Vec<(PathBuf, PathBuf)>) {
        self.flush();
        (self.dirs, self.deferred_links)
    }

    /// Plans directories from the shared stack until none is left and none is being planned
    /// (another thread's directory may still add some), or the copy is stopped.
    fn run_jobs(&mut self) {
        loop {
            let job = {
                let mut j = self.shared.jobs.lock().unwrap();
                loop {
                    if self.ctx.stopped() {
                        self.shared.more.notify_all();
                        return;
                    }
                    if let Some(job) = j.0.pop() {
                        j.1 += 1;
                        break job;
                    }
                    if j.1 == 0 {
                        return;
                    }
                    if self.pending_files > 0 {
                        // Nothing to plan for now: the workers get what is gathered first.
                        drop(j);
                        self.flush();
                        j = self.shared.jobs.lock().unwrap();
                        continue;
                    }
                    j = self.shared.more.wait(j).unwrap();
                }
            };
            // Done however the job ends: a panic in it unwinds through the guard, the other
            // planners finish, and `plan` hands the panic on (they waited forever before).
            let _done = JobDone(self.shared);
            self.dir(job);
        }
    }

    /// Sends the gathered files round-robin across their directories: workers then create and
    /// rename in different directories at once instead of queueing on one directory's lock
    /// (measured: 16 workers renaming into one directory spent most of their time spinning
    /// on its i_rwsem).
    fn flush(&mut self) {
        let mut groups: Vec<std::iter::Peekable<std::vec::IntoIter<FileTask>>> =
            std::mem::take(&mut self.pending)
                .into_iter()
                .map(|g| g.into_iter().peekable())
                .collect();
        while !groups.is_empty() {
            groups.retain_mut(|g| {
                let Some(first) = g.next() else {
                    return false;
                };
                let _ = self.tx.send(unit_from(first, g, self.ctx.fds.small_batch));
                true
            });
        }
        self.pending_files = 0;
    }

    /// Plans one source entry; a directory comes back as a job to queue.
    fn entry(&mut self, e: Entry, up: Option<Arc<Chain>>) -> Option<DirJob> {
        if self.ctx.stopped() {
            return None;
        }
        if e.st.is_dir() {
            return Some(DirJob { entry: e, up });
        }
        if e.st.is_symlink() {
            self.symlink(&e)
        } else if e.st.is_file() {
            self.file(e)
        } else {
            self.special(&e)
        }
        None
    }

    /// Recreates a FIFO, socket or device node (never opened: it could block or be a
    /// device), under a temporary name renamed over `dst`, as `cp -a` and `rsync --specials
    /// --devices` do. With `preserve`: owner (root), mode and times.
    fn special(&mut self, e: &Entry) {
        let Some(kind) = sys::NodeKind::of_mode(e.st.mode) else {
            return self.ctx.fail(FileError::other(
                &e.src,
                Op::Copy,
                "unknown file type: not copied",
            ));
        };
        if self.keep_existing(e, |d| {
            sys::NodeKind::of_mode(d.mode) == Some(kind) && d.rdev == e.st.rdev
        }) {
            return;
        }
        let (mode, rdev) = (e.st.mode & 0o777, e.st.rdev);
        self.place(e, EntryKind::Special, Op::Mknod, |dir, tmp| {
            sys::mknod_at(dir, tmp, kind, mode, rdev)
        });
    }

    /// Makes a symlink or special file under a temporary name with `make`, gives it its
    /// metadata and renames it over the destination (nothing in a dry run); counts it.
    fn place(
        &mut self,
        e: &Entry,
        kind: EntryKind,
        op: Op,
        make: impl FnOnce(BorrowedFd<'_>, &OsStr) -> io::Result<()>,
    ) {
        if !self.ctx.opts.dry_run {
            let (dir, name) = match self.ctx.dest.parent(&e.dst) {
                Ok(p) => p,
                Err(err) => {
                    let up = e.dst.parent().unwrap_or(Path::new(".")).to_path_buf();
                    return self
                        .ctx
                        .fail(FileError::io(&e.dst, Op::OpenParent(up), &err));
                }
            };
            let tmp = self.ctx.temp_name(&e.dst);
            let r = make(dir.as_fd(), &tmp)
                .and_then(|_| self.node_meta(dir.as_fd(), &tmp, &e.st))
                .and_then(|_| sys::rename_at(dir.as_fd(), &tmp, name));
            if let Err(err) = r {
                let _ = sys::unlink_at(dir.as_fd(), &tmp, false);
                return self.ctx.fail(FileError::io(&e.dst, op, &err));
            }
        }
        let count = match kind {
            EntryKind::Symlink => &self.ctx.counts.symlinks,
            _ => &self.ctx.counts.specials,
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.ctx.done(&e.dst, kind, e.dst_st.is_some(), 0);
    }

    /// A destination directory that existed before this run (`names`: what it holds): the
    /// hidden temporaries that copies killed before they could clean up (SIGKILL, power cut)
    /// left in it are removed — only those whose process is gone, so a copy running now into
    /// the same directory keeps its own —, and with `--delete` what the source directory
    /// (`keep`) no longer has, as rsync --delete does.
    fn tidy_existing(
        &mut self,
        dir: BorrowedFd<'_>,
        dst: &Path,
        names: &[CString],
        keep: &HashSet<&CStr>,
    ) {
        let dry = self.ctx.opts.dry_run;
        for name in names {
            let path = dst.join(sys::name_os(name));
            if let Some(pid) = temp_owner(name.to_bytes()) {
                if self.stale_temporary(dir, name, pid)
                    && (dry || sys::unlink_at(dir, sys::name_os(name), false).is_ok())
                {
                    self.ctx.counts.stale_temps.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            if !self.ctx.opts.delete || keep.contains(name.as_c_str()) {
                continue;
            }
            let is_dir = sys::fstatat(Some(dir), name, false).is_ok_and(|m| m.is_dir());
            let (r, op) = match (dry, is_dir) {
                (true, _) => (Ok(()), Op::Unlink),
                (false, true) => (
                    sys::remove_tree_at(dir, sys::name_os(name), MAX_REMOVE_DEPTH),
                    Op::Rmdir,
                ),
                (false, false) => (sys::unlink_at(dir, sys::name_os(name), false), Op::Unlink),
            };
            match r {
                Ok(()) => {
                    self.ctx.counts.deleted.fetch_add(1, Ordering::Relaxed);
                    let kind = if is_dir {
                        EntryKind::Dir
                    } else {
                        EntryKind::File
                    };
                    self.ctx.item(&path, kind, Action::Deleted, 0);
                }
                Err(err) => self.ctx.fail(FileError::io(&path, op, &err)),
            }
        }
    }

    /// Whether `name` in `dir` is a temporary a pagewise copy made and left behind: a regular
    /// file with one name, carrying the mark copies put on their temporaries
    /// ([`TEMP_MARK`]), whose process (`pid`, from its name) is gone. A file that merely has
    /// such a name is the user's and stays.
    fn stale_temporary(&self, dir: BorrowedFd<'_>, name: &CStr, pid: u32) -> bool {
        let is_plain =
            sys::fstatat(Some(dir), name, false).is_ok_and(|m| m.is_file() && m.nlink == 1);
        let gone = || sys::kill(pid, 0).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH));
        let marked = || {
            sys::open_read_at(dir, sys::name_os(name))
                .and_then(|fd| sys::get_small_xattr(fd.as_fd(), TEMP_MARK))
                .is_ok_and(|v| v.as_deref() == Some(TEMP_MARK_VALUE))
        };
        is_plain && gone() && marked()
    }

    /// True (and counted as skipped) when the destination exists and `existing` says to leave
    /// it: always with [`Existing::Keep`], when `same` holds of its metadata with
    /// [`Existing::QuickCheck`] and [`Existing::Checksum`].
    fn keep_existing(&mut self, e: &Entry, same: impl FnOnce(&sys::Stat) -> bool) -> bool {
        let keep = self.keeps(e, same);
        if keep {
            self.ctx.skipped(&e.dst, EntryKind::of(&e.st));
        }
        keep
    }

    /// Whether `existing` leaves `e`'s destination as it is: never with
    /// [`Existing::Replace`], whenever it exists with [`Existing::Keep`], when `same` holds of
    /// its metadata with [`Existing::QuickCheck`] and [`Existing::Checksum`].
    fn keeps(&self, e: &Entry, same: impl FnOnce(&sys::Stat) -> bool) -> bool {
        match self.ctx.opts.existing {
            Existing::Replace => false,
            Existing::Keep => e.dst_st.is_some(),
            Existing::QuickCheck | Existing::Checksum => e.dst_st.as_ref().is_some_and(same),
        }
    }

    /// With `preserve`: a special file's or symlink's owner (when root), mode (not for
    /// symlinks, which have none of their own) and times, all without following or opening it.
    fn node_meta(&self, dir: BorrowedFd<'_>, name: &OsStr, st: &sys::Stat) -> io::Result<()> {
        if !self.ctx.opts.preserve {
            return Ok(());
        }
        if self.ctx.is_root {
            sys::chown_at(dir, name, st.uid, st.gid)?;
        }
        if !st.is_symlink() {
            sys::chmod_at(dir, name, st.mode & 0o7777)?;
        }
        sys::set_times_at(dir, name, st.atime, st.mtime)
    }

    /// Plans a directory: makes its destination (private until its mode is set at the end),
    /// reads both sides once, tidies the destination, then plans the entries sorted by name;
    /// subdirectories are queued for any planner thread.
    fn dir(&mut self, job: DirJob) {
        let DirJob { entry: e, up } = job;
        let follow = self.ctx.opts.dereference == Dereference::Always;
        let nofollow =
            !(follow || (e.depth == 0 && self.ctx.opts.dereference != Dereference::Never));
        let dir_flags = sys::OpenFlags {
            directory: true,
            nofollow,
            ..Default::default()
        };
        let src_fd = match sys::open_path(&e.src, dir_flags) {
            Ok(fd) => fd,
            Err(err) => return self.ctx.fail(FileError::io(&e.src, Op::Opendir, &err)),
        };
        // The directory opened, which is the one planned unless it was replaced meanwhile.
        let st = sys::fstat(src_fd.as_fd()).unwrap_or(e.st);
        if self
            .shared
            .dest_dirs
            .lock()
            .unwrap()
            .contains(&(st.dev, st.ino))
        {
            // A directory this copy made, met again as a source (a bind mount of the
            // destination inside the source): copying it would never end.
            return self.ctx.fail(FileError::other(
                &e.src,
                Op::Copy,
                "cannot copy a directory into itself (it is a destination of this copy)",
            ));
        }
        if Chain::contains(&up, (st.dev, st.ino)) {
            return self.ctx.fail(FileError::other(
                &e.src,
                Op::Copy,
                "symlink loop: this directory contains itself (-L)",
            ));
        }
        let Some((dst_fd, existed)) = self.make_dir(&e) else {
            return;
        };
        if let Some(fd) = &dst_fd {
            if let Ok(d) = sys::fstat(fd.as_fd()) {
                self.shared.dest_dirs.lock().unwrap().insert((d.dev, d.ino));
            }
        }
        let mut names: Vec<CString> = Vec::new();
        for ent in sys::DirReader::new(src_fd.as_fd()) {
            match ent {
                Ok(d) => names.push(d.name),
                Err(err) => self.ctx.fail(FileError::io(&e.src, Op::Readdir, &err)),
            }
        }
        names.sort();
        let mut there: HashSet<CString> = HashSet::new();
        if let (Some(fd), true) = (&dst_fd, existed) {
            let mut dst_names: Vec<CString> = sys::DirReader::new(fd.as_fd())
                .filter_map(Result::ok)
                .map(|d| d.name)
                .collect();
            dst_names.sort();
            let keep: HashSet<&CStr> = names.iter().map(|n| n.as_c_str()).collect();
            self.tidy_existing(fd.as_fd(), &e.dst, &dst_names, &keep);
            there = dst_names.into_iter().collect();
        }
        let up = Some(Arc::new(Chain {
            id: (st.dev, st.ino),
            up,
        }));
        let mut subdirs = Vec::new();
        for n in names {
            let src = e.src.join(sys::name_os(&n));
            let st = match sys::fstatat(Some(src_fd.as_fd()), &n, follow) {
                Ok(s) => s,
                Err(err) if err.kind() == io::ErrorKind::NotFound && !follow => continue,
                Err(err) => {
                    let op = if follow { Op::Stat } else { Op::Lstat };
                    self.ctx.fail(FileError::io(&src, op, &err));
                    continue;
                }
            };
            // Inside the destination nothing is followed: a symlink where the source has a
            // directory is refused as cp refuses it, never entered (it could lead anywhere).
            let dst_st = match &dst_fd {
                Some(fd) if there.contains(&n) => sys::fstatat(Some(fd.as_fd()), &n, false).ok(),
                _ => None,
            };
            let child = Entry {
                dst: e.dst.join(sys::name_os(&n)),
                src,
                st,
                dst_st,
                depth: e.depth + 1,
            };
            subdirs.extend(self.entry(child, up.clone()));
        }
        subdirs.reverse();
        self.shared.push(subdirs);
        if self.pending.len() >= INTERLEAVE_DIRS || self.pending_files >= INTERLEAVE_FILES {
            self.flush();
        }
        self.dirs.push(DirTask {
            src: e.src,
            dst: e.dst,
            meta: st,
            depth: e.depth,
        });
    }

    /// Makes (or enters) the destination directory: its descriptor (None in a dry run where
    /// it does not exist yet) and whether it existed. None: failed (reported).
    fn make_dir(&mut self, e: &Entry) -> Option<(Option<OwnedFd>, bool)> {
        let dest = &self.ctx.dest;
        let existed = e.dst_st.as_ref().is_some_and(|d| d.is_dir());
        if e.dst_st.is_some() && !existed {
            // A file or symlink where the directory goes: cp refuses to replace a
            // non-directory by a directory, and so does this copy (nothing is removed, and
            // a symlink is never entered: it could lead out of the destination).
            let err = io::Error::other(format!(
                "cannot overwrite non-directory with directory (it is a {})",
                e.dst_st.as_ref().map_or("file", |d| d.kind())
            ));
            self.ctx.fail(FileError::io(&e.dst, Op::Mkdir, &err));
            return None;
        }
        if self.ctx.opts.dry_run {
            if !existed {
                self.ctx.done(&e.dst, EntryKind::Dir, false, 0);
            }
            return Some((existed.then(|| dest.dir(&e.dst).ok()).flatten(), existed));
        }
        if !existed {
            let made = dest
                .parent(&e.dst)
                .and_then(|(dir, name)| sys::mkdir_at(dir.as_fd(), name, 0o700));
            match made {
                Ok(()) => self.ctx.done(&e.dst, EntryKind::Dir, false, 0),
                // Made meanwhile by another copy: entered below if it is a directory.
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => {
                    self.ctx.fail(FileError::io(&e.dst, Op::Mkdir, &err));
                    return None;
                }
            }
        }
        match dest.dir(&e.dst) {
            Ok(fd) => Some((Some(fd), existed)),
            Err(err) => {
                self.ctx
                    .fail(FileError::io(&e.dst, Op::OpenDirectory, &err));
                None
            }
        }
    }

    /// Copies a symlink as its text, under a temporary name renamed over `dst`.
    fn symlink(&mut self, e: &Entry) {
        let target = match fs::read_link(&e.src) {
            Ok(t) => t,
            Err(err) => return self.ctx.fail(FileError::io(&e.src, Op::Readlink, &err)),
        };
        let dest = &self.ctx.dest;
        let same_text = |d: &sys::Stat| {
            d.is_symlink()
                && dest
                    .parent(&e.dst)
                    .and_then(|(dir, name)| sys::read_link_at(dir.as_fd(), name))
                    .is_ok_and(|t| t == target)
        };
        if self.keep_existing(e, same_text) {
            return;
        }
        self.place(e, EntryKind::Symlink, Op::Symlink, |dir, tmp| {
            sys::symlink_at(&target, dir, tmp)
        });
    }

    /// Queues a regular file for the workers (or, for a second name of a file already
    /// queued, a hard link to make at the end).
    fn file(&mut self, e: Entry) {
        let size = e.st.size;
        // --checksum never leaves a file on its metadata alone: same-size files are compared.
        let quick = self.ctx.opts.existing != Existing::Checksum;
        let same = |d: &sys::Stat| quick && d.is_file() && d.size == size && d.mtime == e.st.mtime;
        let keep = self.keeps(&e, same);
        if e.st.nlink > 1 {
            let key = (e.st.dev, e.st.ino);
            let mut links = self.shared.links.lock().unwrap();
            if let Some((first, kept)) = links.get(&key) {
                let (first, kept) = (first.clone(), *kept);
                drop(links);
                // Already this file's second name when its first name was left as it was.
                let linked = |d: &sys::Stat| kept == Some((d.dev, d.ino));
                let keep_second = self.keeps(&e, linked);
                if keep_second {
                    return self.ctx.skipped(&e.dst, EntryKind::Hardlink);
                }
                if self.ctx.opts.dry_run {
                    self.ctx
                        .done(&e.dst, EntryKind::Hardlink, e.dst_st.is_some(), 0);
                } else {
                    self.deferred_links.push((first, e.dst));
                }
                return;
            }
            let kept = keep
                .then(|| e.dst_st.as_ref().map(|d| (d.dev, d.ino)))
                .flatten();
            links.insert(key, (e.dst.clone(), kept));
        }
        if keep {
            // Metadata is compared in full (both files opened, xattrs and ACLs read) only
            // when the stats say it may differ: mode, owner or mtime differ, or the source's
            // metadata changed (ctime) after the destination was last written. Opening every
            // up-to-date file made a no-op `-au` of 100k files 1.5x rsync's time.
            let may_differ = e.dst_st.as_ref().is_none_or(|d| {
                d.mode & 0o7777 != e.st.mode & 0o7777
                    || (self.ctx.is_root && (d.uid, d.gid) != (e.st.uid, e.st.gid))
                    || d.mtime != e.st.mtime
                    || e.st.ctime > d.ctime
            });
            if !may_differ {
                return self.ctx.skipped(&e.dst, EntryKind::File);
            }
            return self.ctx.keep_file(&e.src, &e.dst, EntryKind::File);
        }
        let compare = self.ctx.opts.existing == Existing::Checksum
            && e.dst_st
                .as_ref()
                .is_some_and(|d| d.is_file() && d.size == size);
        let task = FileTask {
            src: e.src,
            dst: e.dst,
            size,
            existed: e.dst_st.is_some(),
            compare,
        };
        if self.ctx.opts.dry_run {
            // What a run would do, content compared here when --checksum asks.
            if compare && self.ctx.same_content(&task) {
                return self.ctx.keep_file(&task.src, &task.dst, EntryKind::File);
            }
            let c = &self.ctx.counts;
            c.dry_files.fetch_add(1, Ordering::Relaxed);
            c.dry_bytes.fetch_add(task.size, Ordering::Relaxed);
            return self
                .ctx
                .done(&task.dst, EntryKind::File, task.existed, task.size);
        }
        self.ctx.observer.planned(1, size);
        match self.pending.last_mut() {
            Some(g)
                if g.last()
                    .is_some_and(|t| t.dst.parent() == task.dst.parent()) =>
            {
                g.push(task)
            }
            _ => self.pending.push(vec![task]),
        }
        self.pending_files += 1;
    }
}

/// One unit of work for a worker, starting with `first`: small files go in batches of
/// neighbours from one directory (likely neighbours on disk too: their reads merge), others
/// one by one.
fn unit_from(
    first: FileTask,
    rest: &mut std::iter::Peekable<std::vec::IntoIter<FileTask>>,
    max_files: usize,
) -> Vec<FileTask> {
    let mut unit = vec![first];
    if unit[0].size <= SMALL_FILE {
        let mut bytes = unit[0].size;
        while unit.len() < max_files && bytes < SMALL_BATCH_BYTES {
            match rest.next_if(|t| t.size <= SMALL_FILE) {
                Some(t) => {
                    bytes += t.size;
                    unit.push(t);
                }
                None => break,
            }
        }
    }
    unit
}

/// Where each source goes, with cp's rules: into `dest` when it is a directory, else as
/// `dest` (then there must be one source).
pub fn plan_targets(
    sources: &[PathBuf],
    dest: &Path,
    no_target_directory: bool,
) -> Result<Vec<(PathBuf, PathBuf)>, crate::Error> {
    let invalid = |what, message| crate::Error::Invalid { what, message };
    if no_target_directory && sources.len() > 1 {
        return Err(invalid(
            "destination",
            format!(
                "{}: -T/--no-target-directory takes one source",
                dest.display()
            ),
        ));
    }
    let dest_is_dir = !no_target_directory && dest.is_dir();
    if sources.len() > 1 && !dest_is_dir {
        return Err(invalid(
            "destination",
            format!(
                "{}: not a directory (copying several sources needs one)",
                dest.display()
            ),
        ));
    }
    let mut out = Vec::new();
    for s in sources {
        // `SRC/.` names the directory's contents, as for cp: they go into DST itself.
        let t = if dest_is_dir && !is_dot(s) {
            let name = s
                .file_name()
                .ok_or_else(|| invalid("source", format!("{}: has no file name", s.display())))?;
            dest.join(name)
        } else {
            dest.to_path_buf()
        };
        out.push((s.clone(), t));
    }
    Ok(out)
}

/// The warning for a likely mistake of a re-run without `-T`: the source directory `src`
/// goes into `dest` as `dst` (= `dest/NAME`), which does not exist, while `dest` already holds
/// the source's entries (the first 64 of them by name, all of them) — the earlier run
/// copied the contents into `dest` itself (with -T or `NAME/.`), and this one nests a second
/// copy inside it.
pub(super) fn nesting_notice(src: &Path, dst: &Path, dest: &Path) -> Option<String> {
    if dst == dest || fs::symlink_metadata(dst).is_ok() || !fs::metadata(src).ok()?.is_dir() {
        return None;
    }
    let mut names: Vec<_> = fs::read_dir(src)
        .ok()?
        .take(4096)
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names.sort();
    names.truncate(64);
    let held = !names.is_empty()
        && names
            .iter()
            .all(|n| fs::symlink_metadata(dest.join(n)).is_ok());
    held.then(|| {
        format!(
            "{} did not exist and {} already holds what {} holds: copying into {} (to update the earlier copy, add -T or copy {}/.)",
            dst.display(),
            dest.display(),
            src.display(),
            dst.display(),
            src.display()
        )
    })
}

/// The PID in a temporary's name `.NAME.pagewise-PID-N.tmp`, None for any other name.
fn temp_owner(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(b".")?.strip_suffix(b".tmp")?;
    let at = rest.windows(10).rposition(|w| w == b".pagewise-")?;
    let tail = std::str::from_utf8(&rest[at + 10..]).ok()?;
    let (pid, seq) = tail.split_once('-')?;
    seq.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// True for a path whose last component is `.` as written (`src/.`, `.`).
fn is_dot(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b == b"." || b.ends_with(b"/.")
}

/// `(device, inode)` of what a metadata describes.
fn id(m: &fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// Why a top-level source must not be copied to `dst`, if it must not: copying it would
/// destroy the data it is to copy, or never end.
///
/// - The same file: `dst` (as named, or the file it links to) is the source itself, or the
///   file a symlink source points to — replacing `data` by the link `lnk -> data` would leave
///   `data -> data` and the content gone (cp: "are the same file").
/// - A directory into itself: any existing ancestor of `dst` (or `dst`) is the source
///   directory, compared by device and inode, so a bind mount or a symlink of the source
///   directory is caught as well as a path below it.
/// - A FIFO, socket or device named as a source: there is nothing to copy from it.
fn refuse_source(src: &Path, dst: &Path, m: &sys::Stat) -> Option<String> {
    if !(m.is_dir() || m.is_file() || m.is_symlink()) {
        return Some(format!(
            "is a {}: only regular files, directories and symlinks are copied",
            m.kind()
        ));
    }
    if m.is_dir() {
        return into_itself(dst, m)
            .then(|| format!("cannot copy a directory into itself ({})", dst.display()));
    }
    same_file(src, dst, m)
        .then(|| format!("{} and {} are the same file", src.display(), dst.display()))
}

/// Whether `dst` or one of its existing ancestors is the directory `m` describes: the deepest
/// existing ancestor of `dst`, then each of its parents by ".." (a bind mount keeps the device
/// and inode, a path does not).
fn into_itself(dst: &Path, m: &sys::Stat) -> bool {
    let me = (m.dev, m.ino);
    let mut p = dst.to_path_buf();
    for _ in 0..4096 {
        if let Ok(dm) = fs::metadata(&p) {
            if id(&dm) == me {
                return true;
            }
            if dm.is_dir() && fs::metadata(p.join("..")).is_ok_and(|u| id(&u) == id(&dm)) {
                return false; // the root directory
            }
            p.push("..");
        } else {
            match p.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => p = parent.to_path_buf(),
                _ => p = PathBuf::from("."),
            }
        }
    }
    false
}

/// Whether copying the file or symlink `src` (metadata `m`) to `dst` would replace the data
/// it is to copy.
fn same_file(src: &Path, dst: &Path, m: &sys::Stat) -> bool {
    let me = (m.dev, m.ino);
    let followed = fs::metadata(src).ok();
    // A symlink is copied as its text, which then resolves from dst's directory: what the
    // copy will point to, were it in place (`dd/l -> data` copied to `data` names `data`).
    let copied_target = m
        .is_symlink()
        .then(|| fs::read_link(src).ok())
        .flatten()
        .map(|t| match dst.parent() {
            Some(d) if t.is_relative() && !d.as_os_str().is_empty() => d.join(t),
            _ => t,
        })
        .and_then(|t| fs::metadata(t).ok());
    let same = |d: &fs::Metadata| {
        id(d) == me
            || followed.as_ref().is_some_and(|f| id(f) == id(d))
            || copied_target.as_ref().is_some_and(|f| id(f) == id(d))
    };
    let dst_named = fs::symlink_metadata(dst).ok();
    let dst_followed = fs::metadata(dst).ok();
    // dst as named: neither the source nor what a symlink source points to. dst followed:
    // not the source itself (two symlinks to one file may replace each other).
    dst_named.as_ref().is_some_and(same) || dst_followed.as_ref().is_some_and(|d| id(d) == me)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_are_recognised_by_name_only() {
        assert_eq!(temp_owner(b".data.db.pagewise-4242-7.tmp"), Some(4242));
        assert_eq!(temp_owner(b".a.pagewise-b.pagewise-17-0.tmp"), Some(17));
        assert_eq!(temp_owner(b"data.pagewise-17-0.tmp"), None);
        assert_eq!(temp_owner(b".data.pagewise-17.tmp"), None);
        assert_eq!(temp_owner(b".data.pagewise-x-1.tmp"), None);
        assert!(is_dot(Path::new("src/.")) && is_dot(Path::new(".")));
        assert!(!is_dot(Path::new("src/.x")) && !is_dot(Path::new("src")));
    }
}
