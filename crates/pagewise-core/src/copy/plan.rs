//! The planner: cp's rules over the sources. It refuses sources that must not be copied (the
//! same file, a directory into itself, a FIFO or device), walks the rest, creates directories
//! and symlinks itself, and feeds regular files to the workers through a bounded channel,
//! interleaved across directories and in batches of small neighbours.

use super::worker::{SMALL_BATCH, SMALL_BATCH_BYTES, SMALL_FILE};
use super::{Ctx, Dereference, Existing};
use crate::error::{FileError, Op};
use crate::sys;
use crossbeam_channel::Sender;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A regular file to copy.
pub(super) struct FileTask {
    pub src: PathBuf,
    pub dst: PathBuf,
    /// Size when the planner saw it.
    pub size: u64,
}

/// A directory the copy made or entered: its mode and times are set last, after its contents.
pub(super) struct DirTask {
    /// The source directory (its extended attributes are copied with `preserve`).
    pub src: PathBuf,
    pub dst: PathBuf,
    pub meta: fs::Metadata,
}

/// What the planner leaves for the end of the run.
pub(super) struct Planned {
    /// Directories, deepest first (children are pushed before their parents).
    pub dirs: Vec<DirTask>,
    /// Hard links to make once their first name is copied: `(first name, other name)`.
    pub deferred_links: Vec<(PathBuf, PathBuf)>,
    pub symlinks: u64,
    /// FIFOs, sockets and devices recreated.
    pub special: u64,
    /// Entries left as they were (see [`Existing`]).
    pub skipped: u64,
    /// Temporaries of earlier runs removed.
    pub stale_temps: u64,
    /// Entries of the destination the source no longer has, removed (`delete`).
    pub deleted: u64,
    /// The top-level destinations of the sources that were not refused.
    pub copied_to: Vec<PathBuf>,
}

/// Plans every target `(source, destination)` on this thread, sending files to the workers
/// through `tx`; returns when all are sent (dropping `tx` ends the workers' loops).
pub(super) fn plan(
    ctx: &Ctx<'_>,
    targets: &[(PathBuf, PathBuf)],
    tx: Sender<Vec<FileTask>>,
) -> Planned {
    let mut planner = Planner {
        ctx,
        tx,
        pending: Vec::new(),
        pending_files: 0,
        links: HashMap::new(),
        dest_dirs: HashSet::new(),
        src_dirs: Vec::new(),
        out: Planned {
            dirs: Vec::new(),
            deferred_links: Vec::new(),
            symlinks: 0,
            special: 0,
            skipped: 0,
            stale_temps: 0,
            deleted: 0,
            copied_to: Vec::new(),
        },
    };
    let follow_roots = ctx.opts.dereference != Dereference::Never;
    for (src, dst) in targets {
        let meta = if follow_roots {
            fs::metadata(src)
        } else {
            fs::symlink_metadata(src)
        };
        match meta {
            Ok(m) => match refuse_source(src, dst, &m) {
                Some(why) => ctx.tally.error(FileError::other(src, Op::Copy, why)),
                None => {
                    planner.out.copied_to.push(dst.clone());
                    planner.entry(src, dst, m)
                }
            },
            Err(e) => ctx.tally.error(FileError::io(src, Op::Lstat, &e)),
        }
    }
    planner.flush();
    planner.out
}

/// The planner's state while it walks.
struct Planner<'a> {
    ctx: &'a Ctx<'a>,
    tx: Sender<Vec<FileTask>>,
    /// Files waiting to be sent, grouped by destination directory (see [`Planner::flush`]).
    pending: Vec<Vec<FileTask>>,
    pending_files: usize,
    /// First destination name of each multiply-linked source file, by (device, inode).
    links: HashMap<(u64, u64), PathBuf>,
    /// (device, inode) of every destination directory made or entered.
    dest_dirs: HashSet<(u64, u64)>,
    /// (device, inode) of the source directories being walked, outermost first: with
    /// `Dereference::Always` a symlink back up one of them is a loop.
    src_dirs: Vec<(u64, u64)>,
    out: Planned,
}

/// Directories (and files) the planner gathers before handing files out interleaved.
const INTERLEAVE_DIRS: usize = 32;
const INTERLEAVE_FILES: usize = 8192;

impl Planner<'_> {
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
                let _ = self.tx.send(unit_from(first, g));
                true
            });
        }
        self.pending_files = 0;
    }

    /// Plans one source entry (recursively for a directory).
    fn entry(&mut self, src: &Path, dst: &Path, meta: fs::Metadata) {
        if self.ctx.stopped() {
            return;
        }
        let ft = meta.file_type();
        if ft.is_dir() {
            self.dir(src, dst, meta)
        } else if ft.is_symlink() {
            self.symlink(src, dst, &meta)
        } else if ft.is_file() {
            self.file(src, dst, &meta)
        } else {
            self.special(src, dst, &meta)
        }
    }

    /// Recreates a FIFO, socket or device node (never opened: it could block or be a
    /// device), under a temporary name renamed over `dst`, as `cp -a` and `rsync --specials
    /// --devices` do. With `preserve`: owner (root), mode and times.
    fn special(&mut self, src: &Path, dst: &Path, meta: &fs::Metadata) {
        let Some(kind) = sys::NodeKind::of_mode(meta.mode()) else {
            return self.ctx.tally.error(FileError::other(
                src,
                Op::Copy,
                "unknown file type: not copied",
            ));
        };
        if self.keep_existing(dst, |d| {
            sys::NodeKind::of_mode(d.mode()) == Some(kind) && d.rdev() == meta.rdev()
        }) {
            return;
        }
        let tmp = self.ctx.temp_name(dst);
        let r = sys::mknod(&tmp, kind, meta.mode() & 0o777, meta.rdev())
            .and_then(|_| self.node_meta(&tmp, meta))
            .and_then(|_| fs::rename(&tmp, dst));
        if let Err(e) = r {
            let _ = fs::remove_file(&tmp);
            return self.ctx.tally.error(FileError::io(dst, Op::Mknod, &e));
        }
        self.out.special += 1;
    }

    /// A destination directory that existed before this run, read once: the hidden
    /// temporaries that copies killed before they could clean up (SIGKILL, power cut) left in
    /// it are removed — only those whose process is gone, so a copy running now into the same
    /// directory keeps its own —, and with `--delete` what the source directory (its `names`)
    /// no longer has, as rsync --delete does.
    fn tidy_existing(&mut self, dst: &Path, names: &[std::ffi::OsString]) {
        let keep: HashSet<&std::ffi::OsStr> = names.iter().map(|n| n.as_os_str()).collect();
        let Ok(rd) = fs::read_dir(dst) else {
            return;
        };
        for ent in rd.flatten() {
            let name = ent.file_name();
            if let Some(pid) = temp_owner(name.as_bytes()) {
                let gone = sys::kill(pid, 0).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH));
                if gone && fs::remove_file(ent.path()).is_ok() {
                    self.out.stale_temps += 1;
                }
                continue;
            }
            if !self.ctx.opts.delete || keep.contains(name.as_os_str()) {
                continue;
            }
            let path = ent.path();
            let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
            let (r, op) = if is_dir {
                (fs::remove_dir_all(&path), Op::Rmdir)
            } else {
                (fs::remove_file(&path), Op::Unlink)
            };
            match r {
                Ok(()) => self.out.deleted += 1,
                Err(e) => self.ctx.tally.error(FileError::io(&path, op, &e)),
            }
        }
    }

    /// True (and counted as skipped) when `dst` exists and `existing` says to leave it: always
    /// with [`Existing::Keep`], when `same` holds of its metadata with
    /// [`Existing::QuickCheck`].
    fn keep_existing(&mut self, dst: &Path, same: impl FnOnce(&fs::Metadata) -> bool) -> bool {
        let keep = match self.ctx.opts.existing {
            Existing::Replace => false,
            Existing::Keep => fs::symlink_metadata(dst).is_ok(),
            Existing::QuickCheck => fs::symlink_metadata(dst).is_ok_and(|d| same(&d)),
        };
        self.out.skipped += keep as u64;
        keep
    }

    /// With `preserve`: a special file's or symlink's owner (when root), mode (not for
    /// symlinks, which have none of their own) and times, all without following or opening it.
    fn node_meta(&self, path: &Path, meta: &fs::Metadata) -> io::Result<()> {
        if !self.ctx.opts.preserve {
            return Ok(());
        }
        if self.ctx.is_root {
            std::os::unix::fs::lchown(path, Some(meta.uid()), Some(meta.gid()))?;
        }
        if !meta.file_type().is_symlink() {
            fs::set_permissions(path, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
        sys::set_times_nofollow(
            path,
            (meta.atime(), meta.atime_nsec()),
            (meta.mtime(), meta.mtime_nsec()),
        )
    }

    /// Makes the destination directory (private until its mode is set at the end) and plans
    /// the entries, sorted by name.
    fn dir(&mut self, src: &Path, dst: &Path, meta: fs::Metadata) {
        if self.dest_dirs.contains(&id(&meta)) {
            // A directory this copy made, met again as a source (a bind mount of the
            // destination inside the source): copying it would never end.
            return self.ctx.tally.error(FileError::other(
                src,
                Op::Copy,
                "cannot copy a directory into itself (it is a destination of this copy)",
            ));
        }
        let mut existed = false;
        match fs::create_dir(dst) {
            Ok(()) => {
                let _ = fs::set_permissions(dst, fs::Permissions::from_mode(0o700));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dst.is_dir() => existed = true,
            Err(e) => return self.ctx.tally.error(FileError::io(dst, Op::Mkdir, &e)),
        }
        if let Ok(dm) = fs::metadata(dst) {
            self.dest_dirs.insert(id(&dm));
        }
        let rd = match fs::read_dir(src) {
            Ok(r) => r,
            Err(e) => return self.ctx.tally.error(FileError::io(src, Op::Opendir, &e)),
        };
        if self.src_dirs.contains(&id(&meta)) {
            return self.ctx.tally.error(FileError::other(
                src,
                Op::Copy,
                "symlink loop: this directory contains itself (-L)",
            ));
        }
        let mut names: Vec<_> = Vec::new();
        for ent in rd {
            match ent {
                Ok(e) => names.push(e.file_name()),
                Err(e) => self.ctx.tally.error(FileError::io(src, Op::Readdir, &e)),
            }
        }
        names.sort();
        if existed {
            self.tidy_existing(dst, &names);
        }
        self.src_dirs.push(id(&meta));
        let follow = self.ctx.opts.dereference == Dereference::Always;
        for n in names {
            let s = src.join(&n);
            let m = if follow {
                fs::metadata(&s)
            } else {
                fs::symlink_metadata(&s)
            };
            match m {
                Ok(m) => self.entry(&s, &dst.join(&n), m),
                Err(e) if e.kind() == io::ErrorKind::NotFound && !follow => {}
                Err(e) => {
                    let op = if follow { Op::Stat } else { Op::Lstat };
                    self.ctx.tally.error(FileError::io(&s, op, &e))
                }
            }
        }
        self.src_dirs.pop();
        self.out.dirs.push(DirTask {
            src: src.to_path_buf(),
            dst: dst.to_path_buf(),
            meta,
        });
    }

    /// Copies a symlink as its text, under a temporary name renamed over `dst`.
    fn symlink(&mut self, src: &Path, dst: &Path, meta: &fs::Metadata) {
        let target = match fs::read_link(src) {
            Ok(t) => t,
            Err(e) => return self.ctx.tally.error(FileError::io(src, Op::Readlink, &e)),
        };
        if self.keep_existing(dst, |d| {
            d.file_type().is_symlink() && fs::read_link(dst).is_ok_and(|t| t == target)
        }) {
            return;
        }
        let tmp = self.ctx.temp_name(dst);
        let r = std::os::unix::fs::symlink(&target, &tmp)
            .and_then(|_| self.node_meta(&tmp, meta))
            .and_then(|_| fs::rename(&tmp, dst));
        if let Err(e) = r {
            let _ = fs::remove_file(&tmp);
            return self.ctx.tally.error(FileError::io(dst, Op::Symlink, &e));
        }
        self.out.symlinks += 1;
    }

    /// Queues a regular file for the workers (or, for a second name of a file already
    /// queued, a hard link to make at the end).
    fn file(&mut self, src: &Path, dst: &Path, meta: &fs::Metadata) {
        if meta.nlink() > 1 {
            let key = id(meta);
            if let Some(first) = self.links.get(&key) {
                self.out
                    .deferred_links
                    .push((first.clone(), dst.to_path_buf()));
                return;
            }
            self.links.insert(key, dst.to_path_buf());
        }
        if self.keep_existing(dst, |d| {
            d.file_type().is_file() && d.len() == meta.len() && same_mtime(d, meta)
        }) {
            return;
        }
        self.ctx.observer.planned(1, meta.len());
        let task = FileTask {
            src: src.to_path_buf(),
            dst: dst.to_path_buf(),
            size: meta.len(),
        };
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
        if self.pending.len() >= INTERLEAVE_DIRS || self.pending_files >= INTERLEAVE_FILES {
            self.flush();
        }
    }
}

/// One unit of work for a worker, starting with `first`: small files go in batches of
/// neighbours from one directory (likely neighbours on disk too: their reads merge), others
/// one by one.
fn unit_from(
    first: FileTask,
    rest: &mut std::iter::Peekable<std::vec::IntoIter<FileTask>>,
) -> Vec<FileTask> {
    let mut unit = vec![first];
    if unit[0].size <= SMALL_FILE {
        let mut bytes = unit[0].size;
        while unit.len() < SMALL_BATCH && bytes < SMALL_BATCH_BYTES {
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

/// Same modification time, to the nanosecond.
fn same_mtime(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    (a.mtime(), a.mtime_nsec()) == (b.mtime(), b.mtime_nsec())
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
fn refuse_source(src: &Path, dst: &Path, m: &fs::Metadata) -> Option<String> {
    let ft = m.file_type();
    if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
        return Some(format!(
            "is a {}: only regular files, directories and symlinks are copied",
            sys::Stat::kind_of(m.mode())
        ));
    }
    if ft.is_dir() {
        return into_itself(dst, m)
            .then(|| format!("cannot copy a directory into itself ({})", dst.display()));
    }
    same_file(src, dst, m)
        .then(|| format!("{} and {} are the same file", src.display(), dst.display()))
}

/// Whether `dst` or one of its existing ancestors is the directory `m` describes: the deepest
/// existing ancestor of `dst`, then each of its parents by ".." (a bind mount keeps the device
/// and inode, a path does not).
fn into_itself(dst: &Path, m: &fs::Metadata) -> bool {
    let me = id(m);
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
fn same_file(src: &Path, dst: &Path, m: &fs::Metadata) -> bool {
    let followed = fs::metadata(src).ok();
    // A symlink is copied as its text, which then resolves from dst's directory: what the
    // copy will point to, were it in place (`dd/l -> data` copied to `data` names `data`).
    let copied_target = m
        .file_type()
        .is_symlink()
        .then(|| fs::read_link(src).ok())
        .flatten()
        .map(|t| match dst.parent() {
            Some(d) if t.is_relative() && !d.as_os_str().is_empty() => d.join(t),
            _ => t,
        })
        .and_then(|t| fs::metadata(t).ok());
    let same = |d: &fs::Metadata| {
        id(d) == id(m)
            || followed.as_ref().is_some_and(|f| id(f) == id(d))
            || copied_target.as_ref().is_some_and(|f| id(f) == id(d))
    };
    let dst_named = fs::symlink_metadata(dst).ok();
    let dst_followed = fs::metadata(dst).ok();
    // dst as named: neither the source nor what a symlink source points to. dst followed:
    // not the source itself (two symlinks to one file may replace each other).
    dst_named.as_ref().is_some_and(same) || dst_followed.as_ref().is_some_and(|d| id(d) == id(m))
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
