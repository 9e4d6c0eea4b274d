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
//!
//! Here: the plan's parts and the planner threads, and the hand-out of files to the workers;
//! the job stack in `jobs`, the walk of one directory in `dir`, the decision for each entry
//! in `entries`, the top-level targets and cp's refusals in `targets`.

mod dir;
mod entries;
mod jobs;
mod partial;
mod targets;

pub(super) use targets::nesting_notice;
pub use targets::plan_targets;

use super::worker::{SMALL_BATCH_BYTES, SMALL_FILE};
use super::{Ctx, Dereference, Side};
use crate::error::{FileError, Op};
use crate::sys;
use crossbeam_channel::Sender;
use jobs::{Chain, DirJob, Shared};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use targets::refuse_source;

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
    /// A partial temporary an earlier, killed copy left for this file (its name in the
    /// destination directory): the worker checks it and resumes from its checkpoint.
    pub resume: Option<std::ffi::OsString>,
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
    for (src, dst) in targets {
        if let Some(job) = top.root(src, dst) {
            shared.jobs.push_all(vec![job]);
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
    /// The name rsync's filter rules see: the path below the transfer root (empty for the
    /// root itself, and when there are no rules).
    rel: Vec<u8>,
    /// The device of the source named by the caller (`-x` stays on it).
    fs: u64,
    /// A directory's entries are copied (false: a mount point under `-x`, copied empty).
    contents: bool,
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
    /// Partial temporaries kept for the entries of the directory being planned.
    partials: partial::Partials,
    /// Temporary names in the destination directories of files named by the caller.
    root_temps: std::collections::HashMap<PathBuf, Vec<std::ffi::CString>>,
}

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
            partials: Default::default(),
            root_temps: Default::default(),
        }
    }

    /// What this thread leaves for the end of the run.
    #[allow(clippy::type_complexity)]
    fn into_parts(mut self) -> (Vec<DirTask>, Vec<(PathBuf, PathBuf)>) {
        self.flush();
        (self.dirs, self.deferred_links)
    }

    /// Plans a source named by the caller, `src` to `dst`, unless it must not be copied
    /// (reported); a directory comes back as a job to queue.
    fn root(&mut self, src: &std::path::Path, dst: &std::path::Path) -> Option<DirJob> {
        let follow_roots = self.ctx.opts.dereference != Dereference::Never;
        let st = match sys::stat_path(src, follow_roots) {
            Ok(st) => st,
            Err(e) => {
                let op = if follow_roots { Op::Stat } else { Op::Lstat };
                self.ctx.fail(FileError::io(src, op, &e));
                return None;
            }
        };
        if let Some(why) = refuse_source(src, dst, &st) {
            self.ctx.fail(FileError::other(src, Op::Copy, why));
            return None;
        }
        // The destination as named (a symlink is replaced, not followed), except a directory
        // to enter, which may be reached through one.
        let dst_st = sys::stat_path(dst, false).ok().map(|d| {
            if d.is_symlink() && st.is_dir() {
                sys::stat_path(dst, true).unwrap_or(d)
            } else {
                d
            }
        });
        // rsync's name for the root: none when its contents go to the destination itself
        // (`-T`, `SRC/.`), else its own name, which the rules see.
        let opts = self.ctx.opts;
        let rel = match src.file_name() {
            Some(name) if !(opts.filters.is_empty() || st.is_dir() && dst == opts.dest) => {
                name.as_bytes().to_vec()
            }
            _ => Vec::new(),
        };
        if !rel.is_empty() && opts.filters.excluded(&rel, st.is_dir(), Side::Sender) {
            return None;
        }
        let root = Entry {
            src: src.to_path_buf(),
            dst: dst.to_path_buf(),
            fs: st.dev,
            st,
            dst_st,
            depth: 0,
            rel,
            contents: true,
        };
        let partial_dir = match root.st.is_file() {
            true => self.partials_beside(&root.dst),
            false => None,
        };
        let job = self.entry(root, None);
        if let Some(dir) = partial_dir {
            self.drop_partials(std::os::fd::AsFd::as_fd(&*dir));
        }
        job
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
