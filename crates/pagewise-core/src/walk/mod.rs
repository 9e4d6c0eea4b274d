//! Parallel tree walk shared by every verb.
//!
//! Directories go on a shared LIFO stack (depth first keeps the stack small); each worker reads a
//! directory with getdents64, queues its subdirectories and opens its regular files relative to
//! the directory's descriptor (openat: no path resolution per file). Huge directories are split
//! into batches so both cores stay busy. Only regular files reach the visitor: FIFOs, sockets and
//! devices inside a tree are counted and never opened; symlinks are skipped unless `follow`.
//! Files with more than one link are visited once (dev, inode).

use crate::error::{ErrorLog, FileError, Op};
use crate::sys::{self, DirReader, DirentType, OpenFlags, Stat};
use crate::verb::{Observer, Tally};
use filter::{build_globs, Filter};
use queue::{Ancestors, Counters, DirJob, Job, OpenDir, Place};

mod filter;
mod queue;
mod stack;
use serde::Serialize;
pub(crate) use stack::{JobStack, Plain, Taker};
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// How to walk. Built by the CLI from its flags.
#[derive(Debug, Clone)]
pub struct WalkOptions {
    /// Follow symlinks met inside trees (roots are always followed).
    pub follow: bool,
    /// Do not cross into other filesystems below a root.
    pub one_file_system: bool,
    /// Deepest level to descend to: 0 = only the roots themselves, 1 = their direct entries.
    pub max_depth: Option<usize>,
    /// Globs a file must match (name or path relative to its root) to be visited; empty = all.
    pub include: Vec<String>,
    /// Globs that exclude files and prune directories.
    pub exclude: Vec<String>,
    /// Worker threads.
    pub threads: usize,
    /// Open files with O_NOATIME (for verbs that read data; opening alone never touches atime,
    /// and the flag costs an ownership check per open).
    pub noatime: bool,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            follow: false,
            one_file_system: false,
            max_depth: None,
            include: Vec::new(),
            exclude: Vec::new(),
            threads: default_threads(),
            noatime: false,
        }
    }
}

impl WalkOptions {
    /// Checks what a walk of `roots` needs: at least one root, at least one thread, globs
    /// that compile.
    pub fn validate(&self, roots: &[PathBuf]) -> Result<(), crate::Error> {
        if roots.is_empty() {
            return Err(crate::Error::Invalid {
                what: "roots",
                message: "no file or directory given".into(),
            });
        }
        if self.threads == 0 {
            return Err(crate::Error::Invalid {
                what: "threads",
                message: "at least one thread is needed".into(),
            });
        }
        build_globs(&self.include)?;
        build_globs(&self.exclude)?;
        Ok(())
    }
}

/// Number of CPUs the process may run on (at least 1).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// An open regular file handed to a visitor.
pub struct FileRef<'a> {
    /// Display path: the root as given, joined with the names below it.
    pub path: &'a Path,
    /// Directory the file was opened in, and its name there (None for a root named directly).
    pub dir: Option<BorrowedFd<'a>>,
    /// The file's name in `dir` (the whole path for a root).
    pub name: &'a CStr,
    /// The open file (O_RDONLY, O_NONBLOCK).
    pub fd: OwnedFd,
    /// Its fstat.
    pub stat: Stat,
    /// Index of the root argument this file was found under.
    pub root: usize,
}

impl FileRef<'_> {
    /// The open file, borrowed.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    /// See [`sys::mincore_is_truthful`].
    pub fn mincore_is_truthful(&self) -> bool {
        match self.dir {
            Some(d) => sys::mincore_is_truthful(d, self.name, &self.stat),
            None => {
                let cwd = std::fs::File::open(".");
                match cwd {
                    Ok(c) => sys::mincore_is_truthful(c.as_fd(), self.name, &self.stat),
                    Err(_) => sys::euid() == 0 || self.stat.uid == sys::euid(),
                }
            }
        }
    }
}

/// What the walk met besides the files it visited.
#[derive(Debug, Default, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WalkSummary {
    /// Regular files visited.
    pub files: u64,
    /// Directories read.
    pub dirs: u64,
    /// FIFOs, sockets and devices inside trees (never opened).
    pub special_skipped: u64,
    /// Symlinks inside trees not followed (no `--follow`).
    pub symlinks_skipped: u64,
    /// Extra names of hardlinked files already visited.
    pub hardlinks_skipped: u64,
    /// Entries that disappeared between the directory read and the open.
    pub vanished: u64,
    /// Directories on other filesystems not entered (`--one-file-system`).
    pub other_fs_skipped: u64,
    /// Excluded by globs or by a verb's filter.
    pub filtered: u64,
    /// Indexes of the roots that could not be walked at all (their error is in the log).
    #[serde(skip)]
    pub failed_roots: Vec<usize>,
}

/// Files per batch job when a directory is split.
const BATCH: usize = 256;

struct Walker<'v, S, V> {
    opts: &'v WalkOptions,
    filter: Filter,
    queue: JobStack<Job>,
    counters: Counters,
    links: Mutex<HashSet<(u64, u64)>>,
    seen_dirs: Mutex<HashSet<(u64, u64)>>,
    errors: &'v ErrorLog,
    tally: &'v Tally,
    observer: &'v dyn Observer,
    visit: &'v V,
    _s: std::marker::PhantomData<fn(&mut S)>,
}

/// Walks `roots`, calling `visit(&mut state, file)` for every regular file. Each worker thread
/// gets its own state from `init` and hands it to `finish` at the end, so verbs can batch work
/// per thread (one writeback wait for many files, one read wait for many readaheads).
/// Per-file errors go to `tally`; when `observer` asks to stop, the jobs still queued are
/// dropped (each worker finishes the directory or batch it holds) and `tally` is marked
/// interrupted.
pub fn walk<S, I, V, F>(
    roots: &[PathBuf],
    opts: &WalkOptions,
    tally: &Tally,
    observer: &dyn Observer,
    init: I,
    visit: V,
    finish: F,
) -> Result<WalkSummary, crate::Error>
where
    I: Fn() -> S + Sync,
    V: Fn(&mut S, FileRef<'_>) + Sync,
    F: Fn(S) + Sync,
{
    let w = Walker {
        opts,
        filter: Filter {
            include: build_globs(&opts.include)?,
            exclude: build_globs(&opts.exclude)?,
        },
        queue: JobStack::default(),
        counters: Counters::default(),
        links: Mutex::new(HashSet::new()),
        seen_dirs: Mutex::new(HashSet::new()),
        errors: &tally.errors,
        tally,
        observer,
        visit: &visit,
        _s: std::marker::PhantomData,
    };
    let mut first = init();
    for (i, root) in roots.iter().enumerate() {
        w.start_root(&mut first, i, root);
    }
    finish(first);
    let threads = opts.threads.max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| w.work(&init, &finish));
        }
    });
    Ok(w.counters.summary())
}

/// A verb that handles files in per-thread batches: evict waits for write-back once per
/// batch, load for the batch's readahead.
pub trait Batched: Sync {
    /// A worker thread's batch and sums.
    type Local: Default;
    /// Handles one file (or queues it in the batch).
    fn visit(&self, local: &mut Self::Local, f: FileRef<'_>);
    /// Finishes what the batch still holds.
    fn drain(&self, local: &mut Self::Local);
}

/// [`walk`] for a [`Batched`] verb: each thread's batch is drained at its end, then handed
/// to `merge`.
pub fn walk_batched<B: Batched>(
    roots: &[PathBuf],
    opts: &WalkOptions,
    tally: &Tally,
    observer: &dyn Observer,
    verb: &B,
    merge: impl Fn(B::Local) + Sync,
) -> Result<WalkSummary, crate::Error> {
    walk(
        roots,
        opts,
        tally,
        observer,
        B::Local::default,
        |local, f| verb.visit(local, f),
        |mut local| {
            verb.drain(&mut local);
            merge(local)
        },
    )
}

/// A [`Batched`] verb whose threads' batches fold into one at the end (evict, load).
pub(crate) trait Merged: Batched {
    /// Folds a finished thread's batch (drained) into `all`.
    fn merge(&self, all: &mut Self::Local, local: Self::Local);
}

/// [`walk_batched`] for a [`Merged`] verb: the walk of the verb's roots with the verb's walk
/// options, every thread's batch folded into one, returned with the walk's summary.
pub(crate) fn walk_merged<B: Merged>(
    roots: &[PathBuf],
    opts: &WalkOptions,
    tally: &Tally,
    observer: &dyn Observer,
    verb: &B,
) -> Result<(B::Local, WalkSummary), crate::Error>
where
    B::Local: Send,
{
    let all = Mutex::new(B::Local::default());
    let summary = walk_batched(roots, opts, tally, observer, verb, |local| {
        let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
        verb.merge(&mut all, local);
    })?;
    Ok((all.into_inner().unwrap_or_else(|e| e.into_inner()), summary))
}

impl<S, V> Walker<'_, S, V>
where
    V: Fn(&mut S, FileRef<'_>) + Sync,
{
    /// A worker thread: takes jobs until none is left, with its own state from `init`,
    /// handed to `finish` at the end.
    fn work(&self, init: &impl Fn() -> S, finish: &impl Fn(S)) {
        let mut state = init();
        // The job is marked done however it ends (see `Taken`): a panic in it unwinds
        // through the guard, the other workers finish the stack, and the scope hands the
        // panic to the caller.
        while let Some((job, _taken)) = self.queue.take(&mut Plain) {
            // Once a stop is asked, queued jobs are taken and dropped: the stack drains and
            // every worker ends.
            if !self.tally.stop_requested(self.observer) {
                self.run(&mut state, job);
            }
        }
        finish(state);
    }

    fn start_root(&self, state: &mut S, idx: usize, root: &Path) {
        let st = match sys::stat_path(root, true) {
            Ok(s) => s,
            Err(e) => {
                let op = if e.raw_os_error() == Some(libc::ELOOP) {
                    Op::StatSymlinkLoop
                } else {
                    Op::Stat
                };
                self.errors.push(FileError::io(root, op, &e));
                self.root_failed(idx);
                return;
            }
        };
        if st.is_dir() {
            if self.opts.max_depth == Some(0) {
                return;
            }
            self.queue.push(Job::Dir(DirJob {
                path: root.to_path_buf(),
                rel: PathBuf::new(),
                depth: 0,
                root: idx,
                root_dev: st.dev,
                ancestors: Arc::new(Vec::new()),
            }));
            return;
        }
        if !(st.is_file() || st.is_block_device()) {
            self.errors.push(FileError::other(
                root,
                Op::Open,
                format!("is a {}: it has no page cache of its own", st.kind()),
            ));
            self.root_failed(idx);
            return;
        }
        let name = match CString::new(std::os::unix::ffi::OsStrExt::as_bytes(root.as_os_str())) {
            Ok(n) => n,
            Err(_) => {
                self.errors
                    .push(FileError::other(root, Op::Open, "path contains a NUL byte"));
                return;
            }
        };
        self.open_and_visit(state, None, &name, root, idx, true);
    }

    /// A root that could not be walked at all: it has its error, and no row of zeros.
    fn root_failed(&self, idx: usize) {
        self.counters.failed_roots.lock().unwrap().push(idx);
    }

    fn run(&self, state: &mut S, job: Job) {
        match job {
            Job::Dir(job) => self.read_dir(state, job),
            Job::Files {
                dir,
                path,
                rel,
                names,
                root,
            } => {
                for name in names {
                    self.file_entry(state, &dir, &path, &rel, &name, root);
                }
            }
        }
    }

    /// Reads one directory: queues its subdirectories, visits its files (in batch jobs of
    /// [`BATCH`] when there are many, so other workers share a huge directory).
    fn read_dir(&self, state: &mut S, job: DirJob) {
        let Some((fd, ancestors)) = self.enter_dir(&job) else {
            return;
        };
        self.counters.dirs.fetch_add(1, Ordering::Relaxed);
        let dir = OpenDir {
            fd: Arc::new(fd),
            path: Arc::new(job.path),
            rel: Arc::new(job.rel),
        };
        let descend = self.opts.max_depth.is_none_or(|m| job.depth + 1 < m);
        let at = Place {
            depth: job.depth,
            root: job.root,
            root_dev: job.root_dev,
        };
        let mut files: Vec<CString> = Vec::new();
        for ent in DirReader::new(dir.fd.as_fd()) {
            let ent = match ent {
                Ok(e) => e,
                Err(e) => {
                    self.errors
                        .push(FileError::io(&dir.path, Op::Getdents64, &e));
                    break;
                }
            };
            match self.entry_kind(&dir, &ent) {
                Some(DirentType::File) => files.push(ent.name),
                Some(DirentType::Dir) => self.subdir(&dir, &ent.name, at, &ancestors, descend),
                Some(DirentType::Symlink) => {
                    self.counters.symlinks.fetch_add(1, Ordering::Relaxed);
                }
                Some(DirentType::Special | DirentType::Unknown) => {
                    self.counters.special.fetch_add(1, Ordering::Relaxed);
                }
                None => {}
            }
            if files.len() >= BATCH * 2 {
                let rest = files.split_off(BATCH);
                self.queue.push(Job::Files {
                    dir: dir.fd.clone(),
                    path: dir.path.clone(),
                    rel: dir.rel.clone(),
                    names: std::mem::replace(&mut files, rest),
                    root: at.root,
                });
            }
        }
        for name in files {
            self.file_entry(state, &dir.fd, &dir.path, &dir.rel, &name, at.root);
        }
    }

    /// Opens a directory to read: None when it vanished, failed, is on another filesystem
    /// (`one_file_system`), or was met before through a symlink (`follow`). Returns its
    /// descriptor and the ancestors its subdirectories check for loops.
    fn enter_dir(&self, job: &DirJob) -> Option<(OwnedFd, Ancestors)> {
        let flags = OpenFlags {
            directory: true,
            nofollow: job.depth > 0 && !self.opts.follow,
            noatime: true,
            write: false,
        };
        let fd = match sys::open_path(&job.path, flags) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && job.depth > 0 => {
                self.counters.vanished.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Err(e) => {
                self.errors
                    .push(FileError::io(&job.path, Op::OpenDirectory, &e));
                if job.depth == 0 {
                    self.root_failed(job.root);
                }
                return None;
            }
        };
        let st = match sys::fstat(fd.as_fd()) {
            Ok(s) => s,
            Err(e) => {
                self.errors.push(FileError::io(&job.path, Op::Fstat, &e));
                return None;
            }
        };
        if self.opts.one_file_system && st.dev != job.root_dev {
            self.counters.other_fs.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if !self.opts.follow {
            return Some((fd, job.ancestors.clone()));
        }
        let key = (st.dev, st.ino);
        if job.ancestors.contains(&key) {
            self.errors.push(FileError::other(
                &job.path,
                Op::OpenDirectory,
                "symlink loop: this directory contains itself",
            ));
            return None;
        }
        if !self.seen_dirs.lock().unwrap().insert(key) {
            // Reached again through another symlink: walked once already.
            return None;
        }
        let mut a = (*job.ancestors).clone();
        a.push(key);
        Some((fd, Arc::new(a)))
    }

    /// What a directory entry is, asking fstatat when getdents did not say (or, with
    /// `follow`, for a symlink's target). None when it vanished or fstatat failed (counted or
    /// reported here).
    fn entry_kind(&self, dir: &OpenDir, ent: &sys::Dirent) -> Option<DirentType> {
        let kind = ent.kind;
        if kind != DirentType::Unknown && !(kind == DirentType::Symlink && self.opts.follow) {
            return Some(kind);
        }
        match sys::fstatat(Some(dir.fd.as_fd()), &ent.name, self.opts.follow) {
            Ok(s) if s.is_dir() => Some(DirentType::Dir),
            Ok(s) if s.is_file() => Some(DirentType::File),
            Ok(s) if s.is_symlink() => Some(DirentType::Symlink),
            Ok(_) => Some(DirentType::Special),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // Vanished, or a dangling symlink.
                self.counters.vanished.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                let p = dir.path.join(sys::name_os(&ent.name));
                self.errors.push(FileError::io(&p, Op::Fstatat, &e));
                None
            }
        }
    }

    /// A subdirectory: excluded by a glob (counted), or queued when `descend`.
    fn subdir(&self, dir: &OpenDir, name: &CStr, at: Place, ancestors: &Ancestors, descend: bool) {
        let child_rel = dir.rel.join(sys::name_os(name));
        if self.filter.excluded(&child_rel, name) {
            self.counters.filtered.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if descend {
            self.queue.push(Job::Dir(DirJob {
                path: dir.path.join(sys::name_os(name)),
                rel: child_rel,
                depth: at.depth + 1,
                root: at.root,
                root_dev: at.root_dev,
                ancestors: ancestors.clone(),
            }));
        }
    }

    fn file_entry(
        &self,
        state: &mut S,
        dir: &OwnedFd,
        path: &Path,
        rel: &Path,
        name: &CStr,
        root: usize,
    ) {
        if self.filter.include.is_some() || self.filter.exclude.is_some() {
            let r = rel.join(sys::name_os(name));
            if self.filter.excluded(&r, name) || !self.filter.included(&r, name) {
                self.counters.filtered.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        // One path buffer per thread, reused: no allocation per file.
        thread_local! {
            static SCRATCH: std::cell::RefCell<PathBuf> = const { std::cell::RefCell::new(PathBuf::new()) };
        }
        SCRATCH.with(|cell| {
            let mut full = cell.borrow_mut();
            full.as_mut_os_string().clear();
            full.push(path);
            full.push(sys::name_os(name));
            self.open_and_visit(state, Some(dir.as_fd()), name, &full, root, false);
        });
    }

    fn open_and_visit(
        &self,
        state: &mut S,
        dir: Option<BorrowedFd<'_>>,
        name: &CStr,
        path: &Path,
        root: usize,
        explicit: bool,
    ) {
        let flags = OpenFlags {
            directory: false,
            nofollow: !explicit && !self.opts.follow,
            noatime: self.opts.noatime,
            write: false,
        };
        let fd = match sys::openat(dir, name, flags) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !explicit => {
                self.counters.vanished.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) && !explicit && !self.opts.follow => {
                // Replaced by a symlink since the directory was read.
                self.counters.symlinks.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                self.errors.push(FileError::io(path, Op::Openat, &e));
                if explicit {
                    self.root_failed(root);
                }
                return;
            }
        };
        let mut stat = match sys::fstat(fd.as_fd()) {
            Ok(s) => s,
            Err(e) => {
                self.errors.push(FileError::io(path, Op::Fstat, &e));
                return;
            }
        };
        if explicit && stat.is_block_device() {
            // stat(2) says 0 bytes for a device: its page cache spans the whole device.
            match sys::block_device_size(fd.as_fd()) {
                Ok(n) => {
                    stat.size = n;
                    stat.allocated = n;
                }
                Err(e) => {
                    self.errors
                        .push(FileError::io(path, Op::IoctlBlkgetsize64, &e));
                    self.root_failed(root);
                    return;
                }
            }
        }
        if !(stat.is_file() || explicit && stat.is_block_device()) {
            // Swapped for a FIFO or device between readdir and open: O_NONBLOCK kept us safe.
            self.counters.special.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if stat.nlink > 1 && !self.links.lock().unwrap().insert((stat.dev, stat.ino)) {
            self.counters.hardlinks.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.counters.files.fetch_add(1, Ordering::Relaxed);
        (self.visit)(
            state,
            FileRef {
                path,
                dir,
                name,
                fd,
                stat,
                root,
            },
        );
    }
}

#[cfg(test)]
mod tests;
