//! One parsed filter rule and rsync's way of matching it against a path.

use super::wildmatch::{dowild, match_after_any_slash, trailing_elements, Match};

/// The longest pattern accepted (bytes), as PATH_MAX.
pub const MAX_PATTERN: usize = 4096;
/// The most runs of `*` in one pattern (bounds the matcher's recursion).
pub const MAX_STAR_RUNS: usize = 64;

/// One parsed rule.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    /// The pattern without its trailing `/` (kept: a leading `/`, which anchors it).
    pub(super) pattern: Vec<u8>,
    pub(super) include: bool,
    pub(super) negate: bool,
    pub(super) dir_only: bool,
    pub(super) sender: bool,
    pub(super) receiver: bool,
    pub(super) wild: bool,
    pub(super) wild2: bool,
    pub(super) wild2_prefix: bool,
    pub(super) wild3_suffix: bool,
    pub(super) slashes: usize,
    /// The `x` modifier: the rule is about extended attribute names, not files.
    pub(super) xattr: bool,
    /// A per-directory merge rule's place in the list: the index of its
    /// [`DirMerge`](super::Filters) (its own pattern is not matched).
    pub(super) dir_merge: Option<usize>,
}

impl Rule {
    /// A rule from its pattern text (as rsync's add_rule: a trailing `/` means directories
    /// only; the flags say which wildcards it holds).
    pub(super) fn new(pattern: &[u8]) -> Result<Rule, &'static str> {
        if pattern.len() > MAX_PATTERN {
            return Err("pattern longer than 4096 bytes");
        }
        let mut p = pattern.to_vec();
        let mut dir_only = false;
        if p.len() > 1 && p.last() == Some(&b'/') {
            p.pop();
            dir_only = true;
        }
        let stars = p
            .split(|&b| b != b'*')
            .filter(|run| !run.is_empty())
            .count();
        if stars > MAX_STAR_RUNS {
            return Err("pattern has more than 64 runs of '*'");
        }
        let wild = p.iter().any(|b| matches!(b, b'*' | b'[' | b'?'));
        let wild2 = wild && p.windows(2).any(|w| w == b"**");
        Ok(Rule {
            wild2_prefix: wild2 && p.starts_with(b"**"),
            wild3_suffix: wild2 && p.ends_with(b"***"),
            slashes: p.iter().filter(|&&b| b == b'/').count(),
            pattern: p,
            include: false,
            negate: false,
            dir_only,
            sender: true,
            receiver: true,
            wild,
            wild2,
            xattr: false,
            dir_merge: None,
        })
    }

    /// This rule read from the per-directory merge file of `dir` (its path from the transfer
    /// root): an anchored pattern (`/x`) is anchored at that directory (`/dir/x`), as rsync's.
    pub(super) fn rebased(self, dir: &[u8]) -> Result<Rule, &'static str> {
        if dir.is_empty() || !self.pattern.starts_with(b"/") {
            return Ok(self);
        }
        let mut p = [b"/", dir, &self.pattern[..]].concat();
        if self.dir_only {
            p.push(b'/');
        }
        Ok(Rule {
            include: self.include,
            negate: self.negate,
            sender: self.sender,
            receiver: self.receiver,
            xattr: self.xattr,
            ..Rule::new(&p)?
        })
    }

    /// rsync's rule_matches: whether the rule matches `path` (negation applied).
    pub(super) fn matches(&self, path: &[u8], is_dir: bool) -> bool {
        self.hit(path, is_dir) != self.negate
    }

    fn hit(&self, path: &[u8], is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        let name = if self.slashes == 0 && !self.wild2 {
            path.rsplit(|&b| b == b'/').next().unwrap_or(path)
        } else {
            path
        };
        let (anchored, pattern) = match self.pattern.strip_prefix(b"/") {
            Some(p) => (true, p),
            None => (false, &self.pattern[..]),
        };
        if !self.wild {
            return if anchored {
                name == pattern
            } else {
                name.ends_with(pattern)
                    && (name.len() == pattern.len() || name[name.len() - pattern.len() - 1] == b'/')
            };
        }
        let mut text = Vec::with_capacity(name.len() + 2);
        if self.wild2_prefix {
            text.push(b'/');
        }
        text.extend_from_slice(name);
        if is_dir && self.wild3_suffix {
            text.push(b'/');
        }
        if !anchored && self.slashes > 0 && !self.wild2 {
            match trailing_elements(&text, self.slashes + 1) {
                Some(t) => dowild(pattern, t) == Match::True,
                None => false,
            }
        } else if !anchored && !self.wild2_prefix && self.wild2 {
            match_after_any_slash(pattern, &text)
        } else {
            dowild(pattern, &text) == Match::True
        }
    }
}
