//! Ordering and cutting the `cgroups` list (`--sort`, `--top`), one place for the CLI and
//! Python. cgroup figures are hierarchical (a group's include its descendants'), so a ranking
//! by a figure over every level would always put `/` and its first child on top: by default a
//! ranking keeps the leaves only — groups with no child listed — whose figures do not contain
//! one another's, so the top N are N different consumers. `all_levels` ranks every group.

use super::CgroupStat;
use std::collections::HashMap;
use std::path::Path;

/// What the groups are ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Tree order: parents before their children.
    Tree,
    /// File cache, most first.
    File,
    /// Dirty file cache.
    Dirty,
    /// Mapped file cache.
    Mapped,
    /// Active file cache.
    Active,
    /// Inactive file cache.
    Inactive,
    /// Workingset refaults.
    Refaults,
}

impl SortKey {
    /// Every key with its name (`tree`, `file`, ...).
    pub const ALL: [(&'static str, SortKey); 7] = [
        ("tree", SortKey::Tree),
        ("file", SortKey::File),
        ("dirty", SortKey::Dirty),
        ("mapped", SortKey::Mapped),
        ("active", SortKey::Active),
        ("inactive", SortKey::Inactive),
        ("refaults", SortKey::Refaults),
    ];

    /// The key named `name`.
    pub fn named(name: &str) -> Option<SortKey> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    fn value(self, g: &CgroupStat) -> u64 {
        let c = &g.cache;
        match self {
            SortKey::Tree => 0,
            SortKey::File => c.file_bytes,
            SortKey::Dirty => c.dirty_bytes,
            SortKey::Mapped => c.mapped_bytes,
            SortKey::Active => c.active_bytes,
            SortKey::Inactive => c.inactive_bytes,
            SortKey::Refaults => c.workingset_refaults.unwrap_or(0),
        }
    }
}

/// Orders `groups` by `key` (None: tree order, or `file` when `top` is given) and cuts them to
/// `top`. A ranking by a figure keeps the leaves only, unless `all_levels`. Returns the key used.
pub fn rank(
    groups: &mut Vec<CgroupStat>,
    key: Option<SortKey>,
    top: Option<usize>,
    all_levels: bool,
) -> SortKey {
    let key = key.unwrap_or(match top {
        Some(_) => SortKey::File,
        None => SortKey::Tree,
    });
    if key != SortKey::Tree {
        if !all_levels {
            let sums = children_file_bytes(groups);
            let mut leaf = sums.iter().map(Option::is_none);
            groups.retain(|_| leaf.next().unwrap_or(true));
        }
        // Stable: ties keep tree order.
        groups.sort_by_key(|g| std::cmp::Reverse(key.value(g)));
    }
    if let Some(n) = top {
        groups.truncate(n);
    }
    key
}

/// Per group of a listing (parents before children, as [`super::cgroups`] lists them): the
/// file cache of its listed children together, None when it has no child listed (a leaf of
/// the listing). What the ranking's leaves and the exporter's self figures are made of.
pub fn children_file_bytes(groups: &[CgroupStat]) -> Vec<Option<u64>> {
    let index: HashMap<&Path, usize> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.path.as_path(), i))
        .collect();
    let mut sums = vec![None; groups.len()];
    for g in groups {
        let parent = g.path.parent().and_then(|p| index.get(p));
        if let Some(&i) = parent.filter(|&&i| groups[i].depth + 1 == g.depth) {
            let s: &mut Option<u64> = &mut sums[i];
            *s = Some(s.unwrap_or(0).saturating_add(g.cache.file_bytes));
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::FileCache;

    fn g(name: &str, depth: usize, file: u64) -> CgroupStat {
        CgroupStat {
            path: format!("/sys/fs/cgroup/memory{name}")
                .trim_end_matches('/')
                .into(),
            cgroup: name.into(),
            depth,
            cache: FileCache {
                file_bytes: file,
                ..FileCache::default()
            },
        }
    }

    #[test]
    fn top_ranks_leaves_not_their_parents() {
        let tree = vec![
            g("/", 0, 100),
            g("/a", 1, 70),
            g("/a/x", 2, 40),
            g("/a/y", 2, 30),
            g("/b", 1, 30),
        ];
        let mut v = tree.clone();
        assert_eq!(rank(&mut v, None, Some(2), false), SortKey::File);
        let names: Vec<&str> = v.iter().map(|g| g.cgroup.as_str()).collect();
        assert_eq!(names, ["/a/x", "/a/y"]);
        let mut v = tree.clone();
        rank(&mut v, None, Some(2), true);
        let names: Vec<&str> = v.iter().map(|g| g.cgroup.as_str()).collect();
        assert_eq!(names, ["/", "/a"]);
        let mut v = tree.clone();
        assert_eq!(rank(&mut v, None, None, false), SortKey::Tree);
        assert_eq!(v.len(), 5);
        // A root alone (nothing below listed) is its own leaf.
        let mut v = vec![g("/a", 0, 5)];
        rank(&mut v, Some(SortKey::File), None, false);
        assert_eq!(v.len(), 1);
        assert_eq!(
            children_file_bytes(&tree),
            [Some(100), Some(70), None, None, None]
        );
        assert_eq!(SortKey::named("dirty"), Some(SortKey::Dirty));
        assert_eq!(SortKey::named("size"), None);
    }
}
