//! rsync's words for a copy's entries: the itemize code (`>f.st......`), names as rsync
//! prints them (relative to the transfer's root, `/` after a directory, odd bytes as
//! `\#ooo`), `-v`'s and `-i`'s lines, `--out-format`, and the `--stats` block.

use crate::cli::exit::CliError;
use pagewise_core::copy::{Action, CopyItem, CopyReport, EntryKind};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// rsync's itemize code of an entry (11 characters; `*deleting  ` for a deletion), with the
/// attribute letters from what the copy found differed; `time_kept`: -t (else a changed
/// time is `T`: set to the time of the copy). None for a failure.
pub fn code(item: &CopyItem, time_kept: bool) -> Option<String> {
    let kind = match item.kind {
        Some(EntryKind::File) | Some(EntryKind::Hardlink) => 'f',
        Some(EntryKind::Dir) => 'd',
        Some(EntryKind::Symlink) => 'L',
        Some(EntryKind::Special) => 'S',
        Some(EntryKind::Device) => 'D',
        None => return None,
    };
    let first = match (item.action, item.kind) {
        (Action::Deleted, _) => return Some("*deleting  ".into()),
        (Action::Failed | Action::Ignored | Action::BackedUp, _) => return None,
        (Action::Skipped | Action::Metadata, _) => '.',
        (_, Some(EntryKind::Hardlink)) => 'h',
        (_, Some(EntryKind::File)) => '>',
        _ => 'c',
    };
    let mut s = String::with_capacity(11);
    s.push(first);
    s.push(kind);
    if item.action == Action::Created {
        s.push_str("+++++++++");
        return Some(s);
    }
    let c = &item.changes;
    let t = if time_kept { 't' } else { 'T' };
    // Without -t an entry sent or remade gets the time it is made at: rsync shows T whatever
    // the times were (generator.c, itemize(): ITEM_TRANSFER or ITEM_LOCAL_CHANGE, not a
    // hard link matched).
    let remade = first == '>' || (first == 'c' && kind != 'd');
    let time = c.time || (!time_kept && remade);
    for (on, letter) in [
        (c.content, 'c'),
        (c.size, 's'),
        (time, t),
        (c.perms, 'p'),
        (c.owner, 'o'),
        (c.group, 'g'),
        (false, 'u'),
        (c.acl, 'a'),
        (c.xattr, 'x'),
    ] {
        s.push(if on { letter } else { '.' });
    }
    // rsync: an entry with no data sent and nothing changed shows spaces.
    if matches!(first, '.' | 'h' | 'c') && s[2..].bytes().all(|b| b == b'.') {
        s.replace_range(2.., "         ");
    }
    Some(s)
}

/// `bytes` as rsync prints a name: control characters, `\` and bytes that are not UTF-8 as
/// `\#ooo`; with `eight_bit` (-8) only control characters.
pub fn escaped(bytes: &[u8], eight_bit: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    let esc = |out: &mut String, b: u8| out.push_str(&format!("\\#{b:03o}"));
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    esc(&mut out, b);
                }
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            match eight_bit {
                true => out.push_str(&String::from_utf8_lossy(&[b])),
                false => esc(&mut out, b),
            }
        }
    }
    out
}

/// How entries are named: relative to the transfer's root (the destination directory), as
/// rsync names them.
pub struct Names {
    root: PathBuf,
    eight_bit: bool,
    /// One file copied to another name: that name, shown as the source's (as rsync's file
    /// list names it).
    renamed: Option<(PathBuf, std::ffi::OsString)>,
}

impl Names {
    /// Names below `root`; `eight_bit`: rsync -8.
    pub fn new(root: &Path, eight_bit: bool) -> Names {
        Names {
            root: root.to_path_buf(),
            eight_bit,
            renamed: None,
        }
    }

    /// One file copied to `dst`, a name of its own: shown under the source's `name`.
    pub fn renamed(self, dst: &Path, name: &std::ffi::OsStr) -> Names {
        Names {
            renamed: Some((dst.to_path_buf(), name.to_os_string())),
            ..self
        }
    }

    /// The transfer's root (the destination directory).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// rsync's `%n`: the path below the root (`.` for the root), `/` after a directory.
    pub fn name(&self, path: &Path, kind: Option<EntryKind>) -> String {
        let rel = match &self.renamed {
            Some((dst, name)) if dst == path => Path::new(name),
            _ => path.strip_prefix(&self.root).unwrap_or(path),
        };
        let mut s = match rel.as_os_str().is_empty() {
            true => ".".to_string(),
            false => escaped(rel.as_os_str().as_bytes(), self.eight_bit),
        };
        if kind == Some(EntryKind::Dir) {
            s.push('/');
        }
        s
    }

    /// rsync's `%L`: ` -> TEXT` for a symlink, ` => NAME` for a hard link to another name
    /// of this transfer; nothing else.
    pub fn link(&self, item: &CopyItem) -> String {
        match (&item.target, item.kind) {
            (Some(t), Some(EntryKind::Symlink)) => {
                format!(" -> {}", escaped(t.as_os_str().as_bytes(), self.eight_bit))
            }
            (Some(t), Some(EntryKind::Hardlink)) if t.starts_with(&self.root) => {
                format!(" => {}", self.name(t, None))
            }
            _ => String::new(),
        }
    }

    /// Whether the item is a hard link to a file of a --link-dest directory (not one of
    /// this transfer's names): rsync lists those only with -ii.
    fn linked_from_alt(&self, item: &CopyItem) -> bool {
        item.kind == Some(EntryKind::Hardlink)
            && item
                .target
                .as_ref()
                .is_some_and(|t| !t.starts_with(&self.root))
    }
}

/// The line `-v`, `-i` and `--info` print for an entry (with its newline), if any.
pub fn line(
    item: &CopyItem,
    names: &Names,
    v: &super::sync::Verbosity,
    time_kept: bool,
) -> Option<String> {
    let name = names.name(&item.path, item.kind);
    match item.action {
        Action::Failed => None,
        Action::BackedUp if !v.backup => None,
        Action::BackedUp => {
            let to = item.target.as_deref().unwrap_or(&item.path);
            let shown = match to.strip_prefix(&names.root) {
                Ok(_) => names.name(to, None),
                Err(_) => escaped(to.as_os_str().as_bytes(), names.eight_bit),
            };
            Some(format!("backed up {name} to {shown}\n"))
        }
        Action::Ignored if v.names == 0 => None,
        Action::Ignored if item.target.is_some() && !v.symsafe => None,
        Action::Ignored => Some(match &item.target {
            Some(t) => format!(
                "ignoring unsafe symlink \"{}\" -> \"{}\"\n",
                name,
                escaped(t.as_os_str().as_bytes(), false)
            ),
            None => format!("skipping non-regular file \"{name}\"\n"),
        }),
        Action::Deleted if !v.del => None,
        Action::Deleted if v.itemize => Some(format!("*deleting   {name}\n")),
        Action::Deleted => Some(format!("deleting {name}\n")),
        _ if v.names == 0 => None,
        Action::Skipped if v.names < 2 => None,
        Action::Skipped if !v.itemize => match item.kind {
            Some(EntryKind::File | EntryKind::Hardlink | EntryKind::Symlink) => {
                Some(format!("{name} is uptodate\n"))
            }
            _ => None,
        },
        _ if names.linked_from_alt(item) && v.names < 2 => None,
        // -v names a directory whose attributes change, not a file's (-vv does).
        Action::Metadata if !v.itemize && item.kind != Some(EntryKind::Dir) && v.names < 2 => None,
        _ if !v.itemize => Some(format!("{name}{}\n", names.link(item))),
        _ => {
            let code = code(item, time_kept)?;
            Some(format!("{code} {name}{}\n", names.link(item)))
        }
    }
}

/// One piece of an --out-format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `%n` name, `%i` itemize code, `%L` link, `%l` length, `%f` full path, `%b` bytes
    /// copied, `%o` operation, `%t` time, `%p` process id.
    Field(char),
}

/// Parses an --out-format (`%n %i %L %l %f %b %o %t %p %%`; a width such as `%-10n` is
/// taken and ignored); other escapes are refused by name.
pub fn parse_format(f: &str) -> Result<Vec<Piece>, CliError> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = f.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        while chars
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || *c == '-' || *c == '\'')
        {
            chars.next();
        }
        match chars.next() {
            Some('%') => text.push('%'),
            Some(k @ ('n' | 'i' | 'L' | 'l' | 'f' | 'b' | 'o' | 't' | 'p')) => {
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Field(k));
            }
            Some(k) => {
                return Err(CliError::Usage(format!(
                    "--out-format: %{k} is not supported (taken: %n %i %L %l %f %b %o %t %p %%)"
                )))
            }
            None => return Err(CliError::Usage("--out-format: a lone % at the end".into())),
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// An entry's --out-format line (changes and deletions, as rsync prints them), if any.
pub fn format_line(
    pieces: &[Piece],
    item: &CopyItem,
    names: &Names,
    time_kept: bool,
) -> Option<String> {
    if matches!(
        item.action,
        Action::Skipped | Action::Failed | Action::Ignored | Action::BackedUp
    ) {
        return None;
    }
    let mut s = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => s.push_str(t),
            Piece::Field('n') => s.push_str(&names.name(&item.path, item.kind)),
            Piece::Field('i') => s.push_str(&code(item, time_kept)?),
            Piece::Field('L') => s.push_str(&names.link(item)),
            Piece::Field('l') | Piece::Field('b') => s.push_str(&item.bytes.to_string()),
            Piece::Field('f') => s.push_str(&escaped(item.path.as_os_str().as_bytes(), false)),
            Piece::Field('o') => s.push_str(match item.action {
                Action::Deleted => "del.",
                _ => "recv",
            }),
            Piece::Field('t') => {
                let t = crate::cli::render::utc(std::time::SystemTime::now());
                s.push_str(&t.replace('T', " ").replace('-', "/"));
            }
            Piece::Field('p') => s.push_str(&std::process::id().to_string()),
            Piece::Field(_) => {}
        }
    }
    s.push('\n');
    Some(s)
}

/// Counts of entries by rsync's kinds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kinds {
    pub reg: u64,
    pub dir: u64,
    pub link: u64,
    pub dev: u64,
    pub special: u64,
}

impl Kinds {
    fn add(&mut self, kind: Option<EntryKind>) {
        match kind {
            Some(EntryKind::File | EntryKind::Hardlink) | None => self.reg += 1,
            Some(EntryKind::Dir) => self.dir += 1,
            Some(EntryKind::Symlink) => self.link += 1,
            Some(EntryKind::Device) => self.dev += 1,
            Some(EntryKind::Special) => self.special += 1,
        }
    }
    fn total(&self) -> u64 {
        self.reg + self.dir + self.link + self.dev + self.special
    }
}

/// What --stats counts, from the entries as they are reported.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub files: Kinds,
    pub created: Kinds,
    pub deleted: Kinds,
    pub transferred: u64,
    pub transferred_bytes: u64,
}

impl Stats {
    /// Counts one entry.
    pub fn add(&mut self, item: &CopyItem, _names: &Names) {
        match item.action {
            Action::Failed | Action::Ignored | Action::BackedUp => {}
            Action::Deleted => self.deleted.add(item.kind),
            a => {
                self.files.add(item.kind);
                if a == Action::Created {
                    self.created.add(item.kind);
                }
                if matches!(a, Action::Created | Action::Updated)
                    && item.kind == Some(EntryKind::File)
                {
                    self.transferred += 1;
                    self.transferred_bytes += item.bytes;
                }
            }
        }
    }
}

/// A number as rsync prints it at `human` (0 digits; 1 grouped with commas; 2 and 3 with
/// K/M/G/T/P in powers of 1000 or 1024, two decimals).
pub fn human_num(n: u64, human: u8) -> String {
    match human {
        0 => n.to_string(),
        1 => {
            let d = n.to_string();
            let mut out = String::new();
            for (i, c) in d.chars().enumerate() {
                if i > 0 && (d.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
        _ => {
            let unit = if human == 2 { 1000.0 } else { 1024.0 };
            let mut x = n as f64;
            let mut suffix = None;
            for s in ['K', 'M', 'G', 'T', 'P'] {
                if x < unit {
                    break;
                }
                x /= unit;
                suffix = Some(s);
            }
            match suffix {
                Some(s) => format!("{x:.2}{s}"),
                None => n.to_string(),
            }
        }
    }
}

/// `LABEL: N (reg: N, dir: N, ...)` as rsync's output_itemized_counts.
fn counts_line(w: &mut dyn Write, label: &str, k: &Kinds, human: u8) -> std::io::Result<()> {
    let mut parts = Vec::new();
    let total = k.total();
    for (name, n) in [
        ("reg", k.reg),
        ("dir", k.dir),
        ("link", k.link),
        ("dev", k.dev),
        ("special", k.special),
    ] {
        if n > 0 {
            parts.push(format!("{name}: {}", human_num(n, human.min(1))));
        }
    }
    match total {
        0 => writeln!(w, "{label}: 0"),
        _ => writeln!(
            w,
            "{label}: {} ({})",
            human_num(total, human.min(1)),
            parts.join(", ")
        ),
    }
}

/// rsync's closing lines: with `full` the --stats block, then `sent ... received ...` and
/// `total size is ...`. A local copy has no protocol stream: "sent" counts the data bytes
/// copied and "received" 0; "File list" times are left out (pagewise has no file list).
pub fn write_stats(
    w: &mut dyn Write,
    s: &Stats,
    r: &CopyReport,
    full: bool,
    human: u8,
    elapsed: f64,
) -> std::io::Result<()> {
    let h = |n: u64| human_num(n, human);
    let sent = r.data_bytes;
    if full {
        writeln!(w)?;
        counts_line(w, "Number of files", &s.files, human)?;
        counts_line(w, "Number of created files", &s.created, human)?;
        counts_line(w, "Number of deleted files", &s.deleted, human)?;
        writeln!(
            w,
            "Number of regular files transferred: {}",
            human_num(s.transferred, human.min(1))
        )?;
        writeln!(w, "Total file size: {} bytes", h(r.total_size))?;
        writeln!(
            w,
            "Total transferred file size: {} bytes",
            h(s.transferred_bytes)
        )?;
        writeln!(w, "Literal data: {} bytes", h(s.transferred_bytes))?;
        writeln!(w, "Matched data: 0 bytes")?;
        writeln!(w, "File list size: 0")?;
        writeln!(w, "Total bytes sent: {}", h(sent))?;
        writeln!(w, "Total bytes received: 0")?;
    }
    writeln!(w)?;
    let rate = sent as f64 / elapsed.max(0.001);
    writeln!(
        w,
        "sent {} bytes  received 0 bytes  {} bytes/sec",
        h(sent),
        match human {
            0 | 1 => {
                let whole = human_num(rate as u64, human);
                format!("{whole}.{:02}", ((rate.fract() * 100.0) as u64).min(99))
            }
            _ => human_num(rate as u64, human),
        }
    )?;
    let speedup = if sent == 0 {
        0.0
    } else {
        r.total_size as f64 / sent as f64
    };
    writeln!(
        w,
        "total size is {}  speedup is {speedup:.2}{}",
        h(r.total_size),
        if r.dry_run { " (DRY RUN)" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagewise_core::copy::Changes;

    fn item(action: Action, kind: EntryKind, changes: Changes) -> CopyItem {
        CopyItem {
            path: PathBuf::from("/d/x"),
            kind: Some(kind),
            action,
            bytes: 0,
            error: None,
            changes,
            target: None,
        }
    }

    #[test]
    fn codes_are_rsync_s() {
        let none = Changes::default();
        let c = |a, k, ch| code(&item(a, k, ch), true).unwrap();
        assert_eq!(c(Action::Created, EntryKind::File, none), ">f+++++++++");
        assert_eq!(c(Action::Created, EntryKind::Dir, none), "cd+++++++++");
        assert_eq!(c(Action::Created, EntryKind::Symlink, none), "cL+++++++++");
        assert_eq!(c(Action::Created, EntryKind::Hardlink, none), "hf+++++++++");
        assert_eq!(c(Action::Created, EntryKind::Special, none), "cS+++++++++");
        assert_eq!(c(Action::Deleted, EntryKind::File, none), "*deleting  ");
        let st = Changes {
            size: true,
            time: true,
            ..none
        };
        assert_eq!(c(Action::Updated, EntryKind::File, st), ">f.st......");
        let t = Changes { time: true, ..none };
        assert_eq!(c(Action::Metadata, EntryKind::Dir, t), ".d..t......");
        let px = Changes {
            perms: true,
            xattr: true,
            ..none
        };
        assert_eq!(c(Action::Metadata, EntryKind::File, px), ".f...p....x");
        assert_eq!(c(Action::Skipped, EntryKind::File, none), ".f         ");
        assert_eq!(
            code(&item(Action::Updated, EntryKind::File, st), false).unwrap(),
            ">f.sT......"
        );
    }

    #[test]
    fn names_and_numbers() {
        let n = Names::new(Path::new("/d"), false);
        assert_eq!(n.name(Path::new("/d"), Some(EntryKind::Dir)), "./");
        assert_eq!(
            n.name(Path::new("/d/a\nb"), Some(EntryKind::File)),
            "a\\#012b"
        );
        assert_eq!(n.name(Path::new("/d/s"), Some(EntryKind::Dir)), "s/");
        assert_eq!(human_num(1234567, 1), "1,234,567");
        assert_eq!(human_num(999, 1), "999");
        assert_eq!(human_num(1234567, 0), "1234567");
        assert_eq!(human_num(1234567, 2), "1.23M");
        assert_eq!(human_num(1 << 20, 3), "1.00M");
        assert_eq!(human_num(12, 2), "12");
    }

    #[test]
    fn out_format() {
        let p = parse_format("%i %n%L [%b]").unwrap();
        let n = Names::new(Path::new("/d"), false);
        let mut it = item(Action::Created, EntryKind::Symlink, Changes::default());
        it.target = Some(PathBuf::from("t"));
        assert_eq!(
            format_line(&p, &it, &n, true).unwrap(),
            "cL+++++++++ x -> t [0]\n"
        );
        assert!(parse_format("%M").is_err());
        assert!(parse_format("50%").is_err());
        assert_eq!(
            parse_format("100%%").unwrap(),
            vec![Piece::Text("100%".into())]
        );
    }
}
