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

use crate::error::{Error, Op};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use wildmatch::{dowild, match_after_any_slash, trailing_elements, Match};

/// The longest pattern accepted (bytes), as PATH_MAX.
pub const MAX_PATTERN: usize = 4096;
/// The most rules a copy takes (all sources together).
pub const MAX_RULES: usize = 100_000;
/// The most runs of `*` in one pattern (bounds the matcher's recursion).
pub const MAX_STAR_RUNS: usize = 64;
/// How deep merge files may include merge files.
pub const MAX_MERGE_DEPTH: usize = 8;
/// The largest rule file read (bytes).
pub const MAX_RULE_FILE: u64 = 16 << 20;

/// Which side a rule is checked on: the source walk (what is copied) or the destination's
/// `--delete` (what may be removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// One parsed rule.
#[derive(Debug, Clone)]
struct Rule {
    /// The pattern without its trailing `/` (kept: a leading `/`, which anchors it).
    pattern: Vec<u8>,
    include: bool,
    negate: bool,
    dir_only: bool,
    sender: bool,
    receiver: bool,
    wild: bool,
    wild2: bool,
    wild2_prefix: bool,
    wild3_suffix: bool,
    slashes: usize,
    /// The `x` modifier: the rule is about extended attribute names, not files.
    xattr: bool,
}

/// The rules of one copy, in order.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    rules: Vec<Rule>,
    delete_excluded: bool,
}

/// What a rule's first word says (before its pattern).
struct Head {
    include: bool,
    sender: bool,
    receiver: bool,
    negate: bool,
    merge: Option<MergeDefault>,
    clear: bool,
    xattr: bool,
}

/// What the lines of a rule file are: filter rules (`merge FILE`), or patterns to exclude or
/// include — with rsync's old `- `/`+ `/`!` prefixes honoured (`--exclude-from`,
/// `--include-from`) or not (`merge,- FILE`, `merge,+ FILE`: every line is a pattern).
#[derive(Clone, Copy)]
enum MergeDefault {
    Rules,
    Exclude { prefixes: bool },
    Include { prefixes: bool },
}

fn invalid(message: String) -> Error {
    Error::Invalid {
        what: "filter",
        message,
    }
}

fn shown(rule: &[u8]) -> String {
    String::from_utf8_lossy(rule).escape_debug().to_string()
}

impl Filters {
    /// No rules; with `delete_excluded`, plain include/exclude rules are checked on the sender
    /// side only (so `--delete` removes excluded destination files), as rsync's
    /// `--delete-excluded`.
    pub fn new(delete_excluded: bool) -> Self {
        Filters {
            rules: Vec::new(),
            delete_excluded,
        }
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
        let head = Head {
            include,
            sender: true,
            receiver: true,
            negate: false,
            merge: None,
            clear: false,
            xattr: false,
        };
        self.push(&head, pattern, text)
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
        if pattern.is_empty() {
            return Err(invalid(format!(
                "unexpected end of filter rule: {}",
                shown(text)
            )));
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
        for line in bytes.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line[0] == b';' || line[0] == b'#' {
                continue;
            }
            match default {
                MergeDefault::Rules => self.add_filter(line, depth)?,
                MergeDefault::Exclude { prefixes: true } => self.add_old(line, false)?,
                MergeDefault::Include { prefixes: true } => self.add_old(line, true)?,
                MergeDefault::Exclude { prefixes: false } => self.add_plain(line, false)?,
                MergeDefault::Include { prefixes: false } => self.add_plain(line, true)?,
            }
        }
        Ok(())
    }

    /// Whether `path` (relative to the transfer root, no leading `/`) is excluded on `side`:
    /// the first rule of that side that matches decides; none matching keeps it.
    pub fn excluded(&self, path: &[u8], is_dir: bool, side: Side) -> bool {
        let path = path.strip_prefix(b"/").unwrap_or(path);
        if path.is_empty() {
            return false;
        }
        for rule in &self.rules {
            let applies = match side {
                Side::Sender => rule.sender,
                Side::Receiver => rule.receiver,
            };
            if applies && !rule.xattr && rule.matches(path, is_dir) {
                return !rule.include;
            }
        }
        false
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

/// Reads a whole rule file, bounded; `-` is standard input.
fn read_rule_file(path: &Path) -> Result<Vec<u8>, Error> {
    let io_err = |op: Op, source: io::Error| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    };
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        io::stdin()
            .lock()
            .take(MAX_RULE_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(Op::Read, e))?;
    } else {
        // O_NONBLOCK: a FIFO named by mistake must not hang the copy before it starts.
        use std::os::unix::fs::OpenOptionsExt;
        let f = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io_err(Op::Open, e))?;
        let meta = f.metadata().map_err(|e| io_err(Op::Fstat, e))?;
        if !meta.is_file() {
            return Err(invalid(format!("{}: not a regular file", path.display())));
        }
        f.take(MAX_RULE_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(Op::Read, e))?;
    }
    if bytes.len() as u64 > MAX_RULE_FILE {
        return Err(invalid(format!(
            "{}: larger than {MAX_RULE_FILE} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Splits a `--filter` rule into what its first word says and its pattern.
fn parse_head(text: &[u8]) -> Result<(Head, &[u8]), Error> {
    const NAMES: [(&[u8], u8); 10] = [
        (b"clear", b'!'),
        (b"dir-merge", b':'),
        (b"exclude", b'-'),
        (b"hide", b'H'),
        (b"include", b'+'),
        (b"merge", b'.'),
        (b"protect", b'P'),
        (b"risk", b'R'),
        (b"show", b'S'),
        (b"", 0),
    ];
    let Some(&first) = text.first() else {
        return Err(invalid("an empty filter rule".into()));
    };
    // A long name ends at `,`, ` ` or `_` (rsync's rule_strcmp); a short one is one char,
    // optionally followed by `,`.
    let long = NAMES.iter().find_map(|&(name, ch)| {
        if name.is_empty() || !text.starts_with(name) {
            return None;
        }
        match text.get(name.len()) {
            None | Some(b'_') => Some((ch, name.len() - 1)),
            Some(c) if c.is_ascii_whitespace() => Some((ch, name.len() - 1)),
            Some(b',') => Some((ch, name.len())),
            _ => None,
        }
    });
    let (ch, mut i) = long.unwrap_or((first, usize::from(text.get(1) == Some(&b','))));
    let mut head = Head {
        include: false,
        sender: true,
        receiver: true,
        negate: false,
        merge: None,
        clear: false,
        xattr: false,
    };
    let mut sided = false;
    match ch {
        b'-' => {}
        b'+' => head.include = true,
        b'H' | b'S' => {
            head.include = ch == b'S';
            head.receiver = false;
            sided = true;
        }
        b'P' | b'R' => {
            head.include = ch == b'R';
            head.sender = false;
            sided = true;
        }
        b'!' => head.clear = true,
        b'.' => head.merge = Some(MergeDefault::Rules),
        b':' => {
            return Err(invalid(format!(
                "per-directory merge files (dir-merge, ':') are not supported: {}",
                shown(text)
            )))
        }
        _ => return Err(invalid(format!("unknown filter rule: {}", shown(text)))),
    }
    // Modifiers up to the separating ` ` or `_` (none after `!`).
    if !head.clear {
        i = modifiers(text, i, &mut head, sided)?;
    }
    let rest = text.get(i + 1..).unwrap_or_default();
    Ok((head, rest))
}

/// The modifiers of a `--filter` rule after its name (which ends at `text[i]`), applied to
/// `head`: the index of the separator (or the end).
fn modifiers(text: &[u8], mut i: usize, head: &mut Head, mut sided: bool) -> Result<usize, Error> {
    loop {
        i += 1;
        let Some(&m) = text.get(i) else { break };
        if m == b' ' || m == b'_' {
            break;
        }
        let bad = || {
            invalid(format!(
                "invalid modifier '{}' at position {i} in filter rule: {}",
                m as char,
                shown(text)
            ))
        };
        match m {
            b'!' if head.merge.is_none() => head.negate = true,
            b'-' if matches!(head.merge, Some(MergeDefault::Rules)) => {
                head.merge = Some(MergeDefault::Exclude { prefixes: false })
            }
            b'+' if matches!(head.merge, Some(MergeDefault::Rules)) => {
                head.merge = Some(MergeDefault::Include { prefixes: false })
            }
            b's' if !sided => {
                head.receiver = false;
                sided = true
            }
            b'r' if !sided => {
                head.sender = false;
                sided = true
            }
            b'p' => {}
            b'x' if head.merge.is_none() => head.xattr = true,
            b'/' | b'C' | b'e' | b'n' | b'w' => {
                return Err(invalid(format!(
                    "the filter modifier '{}' is not supported: {}",
                    m as char,
                    shown(text)
                )))
            }
            _ => return Err(bad()),
        }
    }
    Ok(i)
}

impl Rule {
    /// A rule from its pattern text (as rsync's add_rule: a trailing `/` means directories
    /// only; the flags say which wildcards it holds).
    fn new(pattern: &[u8]) -> Result<Rule, &'static str> {
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
        })
    }

    /// rsync's rule_matches: whether the rule matches `path` (negation applied).
    fn matches(&self, path: &[u8], is_dir: bool) -> bool {
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

mod wildmatch;

/// Whether `text` matches the wildcard `pattern` whole (rsync's `wildmatch()`: `*` and `?`
/// do not cross `/`, `**` does, `[...]` classes, `\` escapes).
pub(crate) fn wildmatch(pattern: &[u8], text: &[u8]) -> bool {
    dowild(pattern, text) == Match::True
}

#[cfg(test)]
mod tests;
