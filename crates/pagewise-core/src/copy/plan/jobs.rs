//! The units of planning and what the planner threads share: one source [`Entry`], a
//! directory waiting to be planned ([`DirJob`]) with the chain of source directories above it
//! (`-L`'s loop check), and [`Shared`]: the [`JobStack`] of those jobs, the hard links seen,
//! the destination directories made.

use crate::sys;
use crate::walk::JobStack;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// One source entry to plan, with what its destination is now.
pub(super) struct Entry {
    pub(super) src: PathBuf,
    pub(super) dst: PathBuf,
    pub(super) st: sys::Stat,
    /// The destination's metadata (not followed), None when it does not exist.
    pub(super) dst_st: Option<sys::Stat>,
    /// 0 for a source named by the caller, 1 for its entries, ...
    pub(super) depth: usize,
    /// The name rsync's filter rules see: the path below the transfer root (empty for the
    /// root itself, and when there are no rules).
    pub(super) rel: Vec<u8>,
    /// The device of the source named by the caller (`-x` stays on it).
    pub(super) fs: u64,
    /// A directory's entries are copied (false: a mount point under `-x`, copied empty).
    pub(super) contents: bool,
    /// Reached through a symlink that was followed (--copy-unsafe-links): opened following it.
    pub(super) followed: bool,
    /// Other source directories merged into this one's destination, after it (rsync's
    /// `SRC1/ SRC2/ DEST/`): their entries are planned with this one's, the first source
    /// that has a name giving it, so neither side's `--delete` removes the other's.
    pub(super) also: Vec<PathBuf>,
}

impl Entry {
    /// Whether the source is opened without following a symlink at its last component:
    /// unless symlinks are followed (`-L`; `-H` for a source named by the caller) or this
    /// entry was reached through one. A name listed as a file or directory that turns into a
    /// symlink before it is opened (someone who can write the source tree swapping it) is
    /// then refused, not followed elsewhere.
    pub(super) fn nofollow(&self, dereference: crate::copy::options::Dereference) -> bool {
        use crate::copy::options::Dereference::{Always, Never};
        !(dereference == Always || self.followed || (self.depth == 0 && dereference != Never))
    }
}

/// A directory waiting to be planned.
pub(super) struct DirJob {
    pub(super) entry: Entry,
    /// The source directories above it, for `-L`'s loop check.
    pub(super) up: Option<Arc<Chain>>,
}

/// A source directory and those above it (`(device, inode)`), innermost first.
pub(super) struct Chain {
    pub(super) id: (u64, u64),
    pub(super) up: Option<Arc<Chain>>,
}

impl Chain {
    pub(super) fn contains(chain: &Option<Arc<Chain>>, id: (u64, u64)) -> bool {
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
pub(super) struct Shared {
    /// Directories to plan (the last pushed is planned first).
    pub(super) jobs: JobStack<DirJob>,
    /// First destination name of each multiply-linked source file, by (device, inode), and
    /// that name's (device, inode) when it was left as it was (then a second name already
    /// linked to it is up to date too).
    #[allow(clippy::type_complexity)]
    pub(super) links: Mutex<HashMap<(u64, u64), (PathBuf, Option<(u64, u64)>)>>,
    /// (device, inode) of every destination directory made or entered.
    pub(super) dest_dirs: Mutex<HashSet<(u64, u64)>>,
    /// For each destination directory above the destination of a source named by the
    /// caller (rsync layouts), the names in it that lead there: `--delete` keeps them
    /// (`-R a/b c/./a/b/f`). Built once, looked up per directory.
    pub(super) ways_to_roots: HashMap<PathBuf, HashSet<std::ffi::OsString>>,
}
