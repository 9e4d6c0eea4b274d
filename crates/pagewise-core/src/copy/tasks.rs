//! What the planner hands on: a regular file for the workers ([`FileTask`]), a directory whose
//! mode and times are set at the end ([`DirTask`]), and what it leaves for the end of the run
//! ([`Planned`]). Plain data: this module imports nothing else of `copy`.

use crate::sys;
use std::path::PathBuf;

/// A regular file to copy.
pub(super) struct FileTask {
    pub src: PathBuf,
    pub dst: PathBuf,
    /// Size when the planner saw it.
    pub size: u64,
    /// What stood at the destination (not followed), None when nothing did: the copy then
    /// creates it rather than updating it.
    pub before: Option<sys::Stat>,
    /// What an alternate destination directory holds for a file new here (rsync's basis:
    /// the changes are reported against it).
    pub basis: Option<sys::Stat>,
    /// Copied because --copy-dest found it unchanged: reported as left, as rsync lists it.
    pub quiet: bool,
    /// `--checksum` and a destination of the same size: the worker compares content first and
    /// leaves the file when it is equal.
    pub compare: bool,
    /// A partial temporary an earlier, killed copy left for this file (its name in the
    /// destination directory): the worker checks it and resumes from its checkpoint.
    pub resume: Option<std::ffi::OsString>,
    /// Opened without following a symlink at the last component (see `Entry::nofollow`).
    pub nofollow: bool,
}

/// A directory the copy made or entered: its mode and times are set last, after its contents.
pub(super) struct DirTask {
    /// The source directory (its extended attributes are copied with `preserve`).
    pub src: PathBuf,
    pub dst: PathBuf,
    pub meta: sys::Stat,
    /// The destination directory's metadata when it existed before this run.
    pub before: Option<sys::Stat>,
    /// 0 for a source named by the caller, 1 for its subdirectories, ...
    pub depth: usize,
}

/// What the planner leaves for the end of the run.
pub(super) struct Planned {
    /// Directories, deepest first.
    pub dirs: Vec<DirTask>,
    /// Hard links to make once their first name is copied.
    pub deferred_links: Vec<DeferredLink>,
}

/// A hard link to make once its first name is copied.
pub(super) struct DeferredLink {
    /// The destination name copied first.
    pub first: PathBuf,
    /// The destination name linked to it.
    pub other: PathBuf,
    /// The source of `other` (what an existing file there is itemized against).
    pub st: crate::sys::Stat,
}
