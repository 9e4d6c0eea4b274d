//! Reading filter rules: what a rule's first word and modifiers say, and rule files.

use crate::error::{Error, Op};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The largest rule file read (bytes).
pub const MAX_RULE_FILE: u64 = 16 << 20;

/// What a rule's first word says (before its pattern).
pub(super) struct Head {
    pub(super) include: bool,
    pub(super) sender: bool,
    pub(super) receiver: bool,
    pub(super) negate: bool,
    pub(super) merge: Option<MergeDefault>,
    pub(super) clear: bool,
    pub(super) xattr: bool,
    /// `:`/`dir-merge`: the file is read in every directory (see [`DirMerge`]).
    pub(super) per_dir: Option<DirMerge>,
    /// `-C`: rsync's CVS excludes go here (the rule has no pattern).
    pub(super) cvs: bool,
    /// `e`: the merge file's own name is excluded.
    pub(super) exclude_self: bool,
}

impl Head {
    /// A plain rule's head: an exclude (or include), both sides.
    pub(super) fn plain(include: bool) -> Head {
        Head {
            include,
            sender: true,
            receiver: true,
            negate: false,
            merge: None,
            clear: false,
            xattr: false,
            per_dir: None,
            cvs: false,
            exclude_self: false,
        }
    }
}

/// How a per-directory merge file (`:`/`dir-merge`) is read.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DirMerge {
    /// `n`: its rules hold in its own directory only, not below.
    pub(super) no_inherit: bool,
    /// `w` (and `C`): words split on whitespace, no comments.
    pub(super) words: bool,
}

/// What the lines of a rule file are: filter rules (`merge FILE`), or patterns to exclude or
/// include — with rsync's old `- `/`+ `/`!` prefixes honoured (`--exclude-from`,
/// `--include-from`) or not (`merge,- FILE`, `merge,+ FILE`: every line is a pattern).
#[derive(Debug, Clone, Copy)]
pub(super) enum MergeDefault {
    Rules,
    Exclude { prefixes: bool },
    Include { prefixes: bool },
}

pub(super) fn invalid(message: String) -> Error {
    Error::Invalid {
        what: "filter",
        message,
    }
}

pub(super) fn shown(rule: &[u8]) -> String {
    String::from_utf8_lossy(rule).escape_debug().to_string()
}

/// The per-directory merge file `name` of the directory `dir` (whose path is `at`): its
/// bytes, None when there is none. Opened without following a symlink (a planted link to
/// another file is refused, not read) and without blocking on a FIFO; it must be a regular
/// file of at most [`MAX_RULE_FILE`] bytes.
pub fn read_rules_at(
    dir: std::os::fd::BorrowedFd<'_>,
    at: &Path,
    name: &[u8],
) -> Result<Option<Vec<u8>>, Error> {
    use std::os::unix::ffi::OsStrExt;
    let path = at.join(std::ffi::OsStr::from_bytes(name));
    let c = std::ffi::CString::new(name).map_err(|_| invalid(format!("{}: NUL", shown(name))))?;
    let flags = crate::sys::OpenFlags {
        nofollow: true,
        ..Default::default()
    };
    let fd = match crate::sys::openat(Some(dir), &c, flags) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(io_error(&path, Op::Open, e)),
    };
    regular_file_bytes(File::from(fd), &path).map(Some)
}

/// The bytes of the rule file `f` (at `path`): a regular file of at most [`MAX_RULE_FILE`]
/// bytes.
fn regular_file_bytes(f: File, path: &Path) -> Result<Vec<u8>, Error> {
    let meta = f.metadata().map_err(|e| io_error(path, Op::Fstat, e))?;
    if !meta.is_file() {
        return Err(invalid(format!("{}: not a regular file", path.display())));
    }
    bounded(f, path)
}

/// All of `r`, refused past [`MAX_RULE_FILE`] bytes (`path` names it in the errors).
fn bounded(r: impl Read, path: &Path) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    r.take(MAX_RULE_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, Op::Read, e))?;
    if bytes.len() as u64 > MAX_RULE_FILE {
        return Err(invalid(format!(
            "{}: larger than {MAX_RULE_FILE} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

fn io_error(path: &Path, op: Op, source: io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Reads a whole rule file, bounded; `-` is standard input.
pub(super) fn read_rule_file(path: &Path) -> Result<Vec<u8>, Error> {
    if path.as_os_str() == "-" {
        return bounded(io::stdin().lock(), path);
    }
    // O_NONBLOCK: a FIFO named by mistake must not hang the copy before it starts.
    use std::os::unix::fs::OpenOptionsExt;
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io_error(path, Op::Open, e))?;
    regular_file_bytes(f, path)
}

/// Splits a `--filter` rule into what its first word says and its pattern.
pub(super) fn parse_head(text: &[u8]) -> Result<(Head, &[u8]), Error> {
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
    let mut head = Head::plain(false);
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
            head.merge = Some(MergeDefault::Rules);
            head.per_dir = Some(DirMerge::default());
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
            b'e' if head.merge.is_some() => head.exclude_self = true,
            b'n' | b'w' if head.per_dir.is_some() => {
                let d = head.per_dir.as_mut().expect("checked");
                d.no_inherit |= m == b'n';
                d.words |= m == b'w';
            }
            // A CVS-style merge file: excludes, split on words, not inherited ('!' still
            // clears), .cvsignore when no name is given.
            b'C' if head.merge.is_some() => {
                head.merge = Some(MergeDefault::Exclude { prefixes: true });
                head.cvs = true;
                if let Some(d) = head.per_dir.as_mut() {
                    (d.no_inherit, d.words) = (true, true);
                }
            }
            b'C' if !head.include && head.merge.is_none() && !head.negate => head.cvs = true,
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
