//! The lines of `sync -v`/`-i` in rsync's order ([`Order`]), for output into a pipe or a file.

use pagewise_core::copy::{Action, CopyItem, EntryKind};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where a line goes in rsync's order: deletions first (a removed tree deepest first, trees
/// in the order of the directories they were in), then the entries depth first — in each
/// directory its files by name, then each subdirectory (compared as `NAME/`) followed by what
/// it holds —, then hard links to names of this transfer, then what a --delete-after pass
/// removed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OrderKey {
    phase: u8,
    dfs: Vec<(u8, Vec<u8>)>,
    top: Vec<u8>,
    below: std::cmp::Reverse<usize>,
    sub: u8,
    seq: u64,
}

/// The depth-first key of `rel` (components below the root) naming a directory or not.
fn dfs_key(rel: &[&[u8]], is_dir: bool) -> Vec<(u8, Vec<u8>)> {
    let n = rel.len();
    rel.iter()
        .enumerate()
        .map(|(i, c)| {
            let dir = i + 1 < n || is_dir;
            let mut name = c.to_vec();
            if dir {
                name.push(b'/');
            }
            (u8::from(dir), name)
        })
        .collect()
}

/// Puts the lines of a run in rsync's order (see [`OrderKey`]).
pub struct Order {
    root: PathBuf,
    seq: u64,
    lines: Vec<(OrderKey, String)>,
    deleted: Vec<(PathBuf, bool, u8, String)>,
}

impl Order {
    /// Lines named below `root`.
    pub fn new(root: &Path) -> Order {
        Order {
            root: root.to_path_buf(),
            seq: 0,
            lines: Vec::new(),
            deleted: Vec::new(),
        }
    }

    /// Takes `line`, said of `item`; `after`: from a --delete-after pass.
    pub fn add(&mut self, item: &CopyItem, line: String, after: bool) {
        self.seq += 1;
        let rel = item.path.strip_prefix(&self.root).unwrap_or(&item.path);
        let is_dir = item.kind == Some(EntryKind::Dir);
        if item.action == Action::Deleted {
            let phase = if after { 5 } else { 0 };
            return self.deleted.push((rel.to_path_buf(), is_dir, phase, line));
        }
        let comps: Vec<&[u8]> = rel.iter().map(|c| c.as_bytes()).collect();
        let link = item.kind == Some(EntryKind::Hardlink)
            && item.action != Action::Skipped
            && item
                .target
                .as_ref()
                .is_some_and(|t| t.starts_with(&self.root));
        let key = OrderKey {
            phase: if link { 3 } else { 1 },
            dfs: dfs_key(&comps, is_dir),
            top: Vec::new(),
            below: std::cmp::Reverse(0),
            sub: u8::from(item.action == Action::BackedUp),
            seq: self.seq,
        };
        self.lines.push((key, line));
    }

    /// The lines in order.
    pub fn into_lines(mut self) -> Vec<String> {
        // A deletion below another one belongs to that one's tree.
        let removed: std::collections::HashSet<PathBuf> =
            self.deleted.iter().map(|d| d.0.clone()).collect();
        for (i, (rel, is_dir, phase, line)) in self.deleted.into_iter().enumerate() {
            let mut top = rel.clone();
            let mut below = 0;
            while let Some(up) = top.parent().filter(|u| removed.contains(*u)) {
                top = up.to_path_buf();
                below += 1;
            }
            let _ = is_dir;
            let parent: Vec<&[u8]> = top
                .parent()
                .map(|p| p.iter().map(|c| c.as_bytes()).collect())
                .unwrap_or_default();
            let key = OrderKey {
                phase,
                dfs: dfs_key(&parent, true),
                top: top
                    .file_name()
                    .map(|n| n.as_bytes().to_vec())
                    .unwrap_or_default(),
                below: std::cmp::Reverse(below),
                sub: 0,
                seq: i as u64,
            };
            self.lines.push((key, line));
        }
        self.lines.sort_by(|a, b| a.0.cmp(&b.0));
        self.lines.into_iter().map(|(_, l)| l).collect()
    }
}
