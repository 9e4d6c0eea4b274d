//! rsync's filter rules for `copy`: `--exclude`, `--include`, `--exclude-from`,
//! `--include-from` and `--filter`, with rsync's semantics for the forms people use.
//!
//! A path is matched as rsync matches it: relative to the transfer root (`a/b/c`), the
//! rules in the order given, the first match deciding (`+` keeps, `-` excludes, no match
//! keeps). A pattern without a slash matches the last component; one with an inner slash the
//! last components it names; a leading `/` anchors it at the transfer root; a trailing `/`
//! matches directories only; `*` and `?` stop at `/`, `**` crosses it, `dir/***` is the
//! directory and all below it; `[...]` classes and `\` escapes as rsync's wildmatch.
//! A rule applies on the sender side (what is copied: an excluded directory is not entered)
//! and on the receiver side (what `--delete` may remove: an excluded destination file is
//! protected), unless it names its side (`hide`/`show`, `protect`/`risk`, modifiers `s`/`r`)
//! or `--delete-excluded` made plain rules sender-only.
//!
//! Supported `--filter` rules: `-`/`exclude`, `+`/`include`, `H`/`hide`, `S`/`show`,
//! `P`/`protect`, `R`/`risk`, `!`/`clear`, `.`/`merge FILE` (with `-`/`+` modifiers), and the
//! modifiers `!` (negate), `s`, `r`, `p`, `x` (the rule names extended attributes, not files:
//! see [`Filters::xattr_excluded`]). Refused with a message: `:`/`dir-merge` (per-directory
//! merge files), and the modifiers `/`, `C`, `e`, `n`, `w`.
//!
//! Everything is bounded (pattern length, rule count, wildcard runs, merge depth, rule file
//! size), so a hostile rule file gives an error, not a hang or an abort.

use crate::error::Error;
use parse::{invalid, parse_head, read_rule_file, shown, DirMerge, Head, MergeDefault};
pub use parse::{read_rules_at, MAX_RULE_FILE};
use rule::Rule;
pub use rule::{MAX_PATTERN, MAX_STAR_RUNS};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use wildmatch::{dowild, Match};

/// The most rules a copy takes (all sources together).
pub const MAX_RULES: usize = 100_000;
/// How deep merge files may include merge files.
pub const MAX_MERGE_DEPTH: usize = 8;

/// Which side a rule is checked on: the source walk (what is copied) or the destination's
/// `--delete` (what may be removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// What is copied.
    Sender,
    /// What `--delete` may remove.
    Receiver,
}

/// How an argument gives its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// `--exclude PATTERN` (a leading `+ ` or `- ` still says what it is, as in rsync).
    Exclude,
    /// `--include PATTERN`.
    Include,
    /// `--filter RULE`.
    Filter,
}

/// The rules of one copy, in order.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    rules: Vec<Rule>,
    delete_excluded: bool,
    /// The per-directory merge files (`:`/`dir-merge`), in the order of their rules.
    per_dir: Vec<PerDir>,
}

/// One per-directory merge rule: the file looked for in each directory and how it is read.
#[derive(Debug, Clone)]
struct PerDir {
    name: Vec<u8>,
    default: MergeDefault,
    how: DirMerge,
    /// The sides the merge rule gave (`s`, `r`): its files' rules hold there only.
    sender: bool,
    receiver: bool,
}

/// The rules of the per-directory merge files of one directory: for each [`PerDir`], its
/// file's rules (anchored at the directory) and whether it cleared the inherited ones (`!`).
#[derive(Debug, Default)]
pub struct DirRules(Vec<Option<(Vec<Rule>, bool)>>);

/// The per-directory merge files' rules read so far in one copy, by side and directory
/// (directories without such a file are not kept).
#[derive(Debug, Default)]
pub struct DirRulesSeen(Mutex<HashMap<DirKey, Arc<DirRules>>>);

/// A directory's side and path from the transfer root.
type DirKey = (Side, Vec<u8>);

impl DirRulesSeen {
    /// Those of `dir` (its path from the transfer root) on `side`.
    pub fn get(&self, side: Side, dir: &[u8]) -> Option<Arc<DirRules>> {
        self.0.lock().unwrap().get(&(side, dir.to_vec())).cloned()
    }

    /// Keeps those read in `dir` on `side` (nothing when it had no such file).
    pub fn put(&self, side: Side, dir: &[u8], rules: DirRules) {
        if rules.0.iter().any(Option::is_some) {
            self.0
                .lock()
                .unwrap()
                .insert((side, dir.to_vec()), Arc::new(rules));
        }
    }
}

/// rsync's `--cvs-exclude` list (rsync.1: the default CVS ignore list, then `.svn/` and kin).
const CVS_EXCLUDES: &str = "RCS SCCS CVS CVS.adm RCSLOG cvslog.* tags TAGS .make.state \
    .nse_depinfo *~ #* .#* ,* _$* *$ *.old *.bak *.BAK *.orig *.rej .del-* *.a *.olb *.o *.obj \
    *.so *.exe *.Z *.elc *.ln core .svn/ .git/ .hg/ .bzr/";

impl Filters {
    /// No rules; with `delete_excluded`, plain include/exclude rules are checked on the sender
    /// side only (so `--delete` removes excluded destination files), as rsync's
    /// `--delete-excluded`.
    pub fn new(delete_excluded: bool) -> Self {
        Filters {
            rules: Vec::new(),
            delete_excluded,
            per_dir: Vec::new(),
        }
    }

    /// rsync's `-C`: the CVS excludes, `$HOME/.cvsignore` and `$CVSIGNORE` as excludes, then
    /// each directory's `.cvsignore` (`:C`), after every rule given so far.
    pub fn add_cvs_exclude(&mut self) -> Result<(), Error> {
        self.add_filter(b"-C", 0)?;
        self.add_filter(b":C", 0)
    }

    /// The CVS excludes in place of a `-C` rule.
    fn cvs_excludes(&mut self, depth: usize) -> Result<(), Error> {
        let mut words: Vec<Vec<u8>> = CVS_EXCLUDES
            .split_ascii_whitespace()
            .map(|w| w.as_bytes().to_vec())
            .collect();
        if let Some(home) = std::env::var_os("HOME") {
            let file = Path::new(&home).join(".cvsignore");
            if file.is_file() {
                let bytes = read_rule_file(&file)?;
                words.extend(bytes.split(u8::is_ascii_whitespace).map(<[u8]>::to_vec));
            }
        }
        if let Some(env) = std::env::var_os("CVSIGNORE") {
            use std::os::unix::ffi::OsStrExt;
            let env = env.as_bytes();
            words.extend(env.split(u8::is_ascii_whitespace).map(<[u8]>::to_vec));
        }
        for w in words.iter().filter(|w| !w.is_empty()) {
            self.add_at(RuleKind::Exclude, w, depth)?;
        }
        Ok(())
    }

    /// A `:`/`dir-merge` rule: its place in the list, and the file looked for (the last
    /// component of the name given: the parent directories above the transfer are not read).
    fn add_per_dir(&mut self, head: &Head, name: &[u8]) -> Result<(), Error> {
        let name = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
        if name.is_empty() || name == b"." || name == b".." {
            return Err(invalid(format!(
                "dir-merge: no file name in {}",
                shown(name)
            )));
        }
        let (Some(default), Some(how)) = (head.merge, head.per_dir) else {
            return Ok(());
        };
        let mut place = Rule::new(name).map_err(|why| invalid(why.into()))?;
        place.dir_merge = Some(self.per_dir.len());
        self.per_dir.push(PerDir {
            name: name.to_vec(),
            default,
            how,
            sender: head.sender,
            receiver: head.receiver,
        });
        self.rules.push(place);
        Ok(())
    }

    /// Whether there are per-directory merge files to read ([`Filters::dir_rules`]).
    pub fn has_per_dir(&self) -> bool {
        !self.per_dir.is_empty()
    }

    /// The rules of the per-directory merge files of the directory `dir` (its path from the
    /// transfer root); `read(name)` gives a file's bytes in that directory, None when it has
    /// none. A file's rules are anchored at `dir`; one may not name another merge file.
    pub fn dir_rules(
        &self,
        dir: &[u8],
        mut read: impl FnMut(&[u8]) -> Result<Option<Vec<u8>>, Error>,
    ) -> Result<DirRules, Error> {
        let mut all = Vec::with_capacity(self.per_dir.len());
        for pd in &self.per_dir {
            let Some(bytes) = read(&pd.name)? else {
                all.push(None);
                continue;
            };
            let mut file = Filters::new(self.delete_excluded);
            let mut cleared = false;
            for rule in pd.lines(&bytes) {
                if rule == b"!" || rule == b"clear" {
                    (file.rules, cleared) = (Vec::new(), true);
                    continue;
                }
                file.add_line(pd.default, &rule, MAX_MERGE_DEPTH)?;
                if !file.per_dir.is_empty() {
                    return Err(invalid(format!(
                        "{}: a dir-merge rule inside a per-directory merge file",
                        shown(&pd.name)
                    )));
                }
            }
            let mut rules = Vec::with_capacity(file.rules.len());
            for mut r in file.rules {
                r.sender &= pd.sender;
                r.receiver &= pd.receiver;
                rules.push(r.rebased(dir).map_err(|why| invalid(why.into()))?);
            }
            all.push(Some((rules, cleared)));
        }
        Ok(DirRules(all))
    }

    /// No rule at all (the walk need not ask).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Adds one argument's rule.
    pub fn add(&mut self, kind: RuleKind, text: &[u8]) -> Result<(), Error> {
        self.add_at(kind, text, 0)
    }

    /// Adds the rules of a file (`--exclude-from`, `--include-from`; `-` reads standard
    /// input): one per line, blank lines and lines starting with `;` or `#` skipped, a
    /// trailing `\r` dropped.
    pub fn add_file(&mut self, kind: RuleKind, path: &Path) -> Result<(), Error> {
        let default = match kind {
            RuleKind::Exclude => MergeDefault::Exclude { prefixes: true },
            RuleKind::Include => MergeDefault::Include { prefixes: true },
            RuleKind::Filter => MergeDefault::Rules,
        };
        self.merge(path, default, 0)
    }

    fn add_at(&mut self, kind: RuleKind, text: &[u8], depth: usize) -> Result<(), Error> {
        match kind {
            RuleKind::Exclude => self.add_old(text, false),
            RuleKind::Include => self.add_old(text, true),
            RuleKind::Filter => self.add_filter(text, depth),
        }
    }

    /// An `--exclude`/`--include` pattern: `- ` and `+ ` prefixes honoured, `!` alone clears.
    fn add_old(&mut self, text: &[u8], include: bool) -> Result<(), Error> {
        if text == b"!" {
            self.rules.clear();
            return Ok(());
        }
        let (include, pattern) = match text {
            [b'-', b' ', rest @ ..] => (false, rest),
            [b'+', b' ', rest @ ..] => (true, rest),
            _ => (include, text),
        };
        self.add_plain_as(pattern, include, text)
    }

    /// A pattern taken as it is (no prefix), to exclude or include.
    fn add_plain(&mut self, pattern: &[u8], include: bool) -> Result<(), Error> {
        self.add_plain_as(pattern, include, pattern)
    }

    fn add_plain_as(&mut self, pattern: &[u8], include: bool, text: &[u8]) -> Result<(), Error> {
        self.push(&Head::plain(include), pattern, text)
    }

    /// A `--filter` rule: `RULE[MODIFIERS] PATTERN` (or `LONGNAME[,MODIFIERS] PATTERN`).
    fn add_filter(&mut self, text: &[u8], depth: usize) -> Result<(), Error> {
        let (head, pattern) = parse_head(text)?;
        if head.clear {
            if !pattern.is_empty() {
                return Err(invalid(format!(
                    "'!' rule has trailing characters: {}",
                    shown(text)
                )));
            }
            self.rules.clear();
            return Ok(());
        }
        if head.cvs && head.merge.is_none() {
            if !pattern.is_empty() {
                return Err(invalid(format!("'-C' takes no pattern: {}", shown(text))));
            }
            return self.cvs_excludes(depth);
        }
        let pattern = match pattern.is_empty() && head.cvs && head.per_dir.is_some() {
            true => b".cvsignore",
            false => pattern,
        };
        if pattern.is_empty() {
            return Err(invalid(format!(
                "unexpected end of filter rule: {}",
                shown(text)
            )));
        }
        if head.per_dir.is_some() {
            self.add_per_dir(&head, pattern)?;
        }
        if head.exclude_self {
            let name = pattern.rsplit(|&b| b == b'/').next().unwrap_or(pattern);
            self.add_plain(name, false)?;
        }
        if head.per_dir.is_some() {
            return Ok(());
        }
        if let Some(default) = head.merge {
            use std::os::unix::ffi::OsStrExt;
            let path = Path::new(std::ffi::OsStr::from_bytes(pattern));
            return self.merge(path, default, depth + 1);
        }
        self.push(&head, pattern, text)
    }

    fn push(&mut self, head: &Head, pattern: &[u8], text: &[u8]) -> Result<(), Error> {
        if pattern.is_empty() {
            return Err(invalid("an empty pattern".into()));
        }
        if self.rules.len() >= MAX_RULES {
            return Err(invalid(format!("more than {MAX_RULES} rules")));
        }
        let mut rule =
            Rule::new(pattern).map_err(|why| invalid(format!("{why}: {}", shown(text))))?;
        rule.include = head.include;
        rule.negate = head.negate;
        rule.xattr = head.xattr;
        let sided = !(head.sender && head.receiver);
        rule.sender = head.sender;
        rule.receiver = head.receiver && (sided || !self.delete_excluded);
        self.rules.push(rule);
        Ok(())
    }

    /// Reads a rule file (`--exclude-from`, `--include-from`, `merge FILE`).
    fn merge(&mut self, path: &Path, default: MergeDefault, depth: usize) -> Result<(), Error> {
        if depth > MAX_MERGE_DEPTH {
            return Err(invalid(format!(
                "{}: merge files nested more than {MAX_MERGE_DEPTH} deep",
                path.display()
            )));
        }
        let bytes = read_rule_file(path)?;
        for line in rule_lines(&bytes) {
            self.add_line(default, line, depth)?;
        }
        Ok(())
    }

    /// One line of a rule file read as `default` says.
    fn add_line(&mut self, default: MergeDefault, line: &[u8], depth: usize) -> Result<(), Error> {
        match default {
            MergeDefault::Rules => self.add_filter(line, depth),
            MergeDefault::Exclude { prefixes: true } => self.add_old(line, false),
            MergeDefault::Include { prefixes: true } => self.add_old(line, true),
            MergeDefault::Exclude { prefixes: false } => self.add_plain(line, false),
            MergeDefault::Include { prefixes: false } => self.add_plain(line, true),
        }
    }

    /// Whether `path` (relative to the transfer root, no leading `/`) is excluded on `side`:
    /// the first rule of that side that matches decides; none matching keeps it. Without
    /// per-directory merge files' rules (see [`Filters::excluded_in`]).
    pub fn excluded(&self, path: &[u8], is_dir: bool, side: Side) -> bool {
        self.excluded_in(path, is_dir, side, &|_| None)
    }

    /// [`Filters::excluded`] with the rules of the per-directory merge files: `dirs(dir)`
    /// gives those of a directory (its path from the transfer root; "" for the root) where
    /// they were read. At a dir-merge rule's place, the rules of the path's directory come
    /// first, then its parents' (unless `n`), up to a file that cleared them (`!`).
    pub fn excluded_in(
        &self,
        path: &[u8],
        is_dir: bool,
        side: Side,
        dirs: &dyn Fn(&[u8]) -> Option<Arc<DirRules>>,
    ) -> bool {
        let path = path.strip_prefix(b"/").unwrap_or(path);
        if path.is_empty() {
            return false;
        }
        let decides = |rule: &Rule| {
            let applies = match side {
                Side::Sender => rule.sender,
                Side::Receiver => rule.receiver,
            };
            (applies && !rule.xattr && rule.matches(path, is_dir)).then_some(!rule.include)
        };
        for rule in &self.rules {
            let found = match rule.dir_merge {
                None => decides(rule),
                Some(i) => self.per_dir_decides(i, path, &decides, dirs),
            };
            if let Some(excluded) = found {
                return excluded;
            }
        }
        false
    }

    /// What the rules of the `i`th per-directory merge file say of `path`, from its
    /// directory up (see [`Filters::excluded_in`]).
    fn per_dir_decides(
        &self,
        i: usize,
        path: &[u8],
        decides: &dyn Fn(&Rule) -> Option<bool>,
        dirs: &dyn Fn(&[u8]) -> Option<Arc<DirRules>>,
    ) -> Option<bool> {
        let parent = |p: &[u8]| p.iter().rposition(|&b| b == b'/').map_or(0, |at| at);
        let mut dir = &path[..parent(path)];
        let mut own = true;
        loop {
            let here = dirs(dir);
            if let Some(Some((rules, cleared))) = here.as_ref().and_then(|d| d.0.get(i)) {
                if own || !self.per_dir[i].how.no_inherit {
                    if let Some(d) = rules.iter().find_map(decides) {
                        return Some(d);
                    }
                }
                if *cleared {
                    return None;
                }
            }
            if dir.is_empty() {
                return None;
            }
            dir = &dir[..parent(dir)];
            own = false;
        }
    }

    /// Whether the extended attribute `name` is excluded on `side` by the rules with the `x`
    /// modifier (`-f '-x system.*'`): on the sender side it is not copied, on the receiver
    /// side one the destination has is not removed. The first such rule that matches
    /// decides; none matching keeps it.
    pub fn xattr_excluded(&self, name: &[u8], side: Side) -> bool {
        for rule in self.rules.iter().filter(|r| r.xattr) {
            let applies = match side {
                Side::Sender => rule.sender,
                Side::Receiver => rule.receiver,
            };
            if applies && rule.matches(name, false) {
                return !rule.include;
            }
        }
        false
    }
}

/// The rules of a rule file: its lines (a trailing `\r` dropped), less blank ones and
/// comments (`;`, `#`).
fn rule_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !(l.is_empty() || l[0] == b';' || l[0] == b'#'))
}

impl PerDir {
    /// The rules of one of its files: lines, or words (`w`; no comments then) — where a
    /// lone rule prefix (`-`, `+`, ...) takes the word after it, as rsync's.
    fn lines(&self, bytes: &[u8]) -> Vec<Vec<u8>> {
        if !self.how.words {
            return rule_lines(bytes).map(<[u8]>::to_vec).collect();
        }
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut prefix: Option<&[u8]> = None;
        for w in bytes
            .split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
        {
            match prefix.take() {
                Some(p) => out.push([p, b" ", w].concat()),
                None if matches!(self.default, MergeDefault::Rules)
                    && w.len() <= 2
                    && matches!(w[0], b'-' | b'+' | b'P' | b'R' | b'H' | b'S')
                    && w != b"!" =>
                {
                    prefix = Some(w)
                }
                None => out.push(w.to_vec()),
            }
        }
        out
    }
}

mod parse;
mod rule;
mod wildmatch;

/// Whether `text` matches the wildcard `pattern` whole (rsync's `wildmatch()`: `*` and `?`
/// do not cross `/`, `**` does, `[...]` classes, `\` escapes).
pub(crate) fn wildmatch(pattern: &[u8], text: &[u8]) -> bool {
    dowild(pattern, text) == Match::True
}

#[cfg(test)]
mod tests;
