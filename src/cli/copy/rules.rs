//! `copy`'s rsync filter arguments: `--exclude`, `--include`, `--exclude-from`,
//! `--include-from` and `--filter`, numbered as clap meets them so that the rules keep the
//! order they were given in across the five flags; and rsync's size arguments.

use super::CopyArgs;
use pagewise_core::copy::{self, Filters, RuleKind};
use pagewise_core::Error;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One filter argument, numbered in command-line order (clap parses values left to right),
/// so `--include`, `--exclude` and `--filter` given in any mix keep their order.
#[derive(Debug, Clone)]
pub struct Rule {
    seq: usize,
    kind: RuleKind,
    text: std::ffi::OsString,
    file: bool,
}

static RULE_SEQ: AtomicUsize = AtomicUsize::new(0);

impl Rule {
    /// The same place in the order with another text (rsync's second `-F`).
    pub fn with_text(&self, text: &str) -> Rule {
        Rule {
            text: text.into(),
            ..self.clone()
        }
    }
}

/// The value parser of the rule arguments: each value numbered as clap meets it.
#[derive(Clone)]
pub struct RuleParser {
    kind: RuleKind,
    file: bool,
}

impl clap::builder::TypedValueParser for RuleParser {
    type Value = Rule;
    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Rule, clap::Error> {
        Ok(Rule {
            seq: RULE_SEQ.fetch_add(1, Ordering::Relaxed),
            kind: self.kind,
            text: value.to_owned(),
            file: self.file,
        })
    }
}

/// The value parser of a rule argument (`--exclude`, `--include`, `--filter`).
pub fn rule(kind: RuleKind) -> RuleParser {
    RuleParser { kind, file: false }
}

/// The value parser of a rule file argument (`--exclude-from`, `--include-from`).
pub fn rule_file(kind: RuleKind) -> RuleParser {
    RuleParser { kind, file: true }
}

/// A size as rsync's --max-size/--min-size read it.
pub fn rsync_size(s: &str) -> Result<u64, String> {
    rsync_arg(s, b'b', "size")
}

/// `--bwlimit`: a fixed rate as rsync reads it, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BwLimit {
    /// Bytes per second (0: no limit).
    Fixed(u64),
    /// Follow what others reading the same devices see (AIMD on their read latency).
    Auto,
}

impl BwLimit {
    /// The library's `(bwlimit, bwlimit_auto)`.
    pub fn options(limit: Option<BwLimit>) -> (Option<u64>, bool) {
        match limit {
            Some(BwLimit::Fixed(r)) if r > 0 => (Some(r), false),
            Some(BwLimit::Auto) => (None, true),
            _ => (None, false),
        }
    }
}

/// `--bwlimit RATE|auto`.
pub fn bwlimit(s: &str) -> Result<BwLimit, String> {
    match s {
        "auto" => Ok(BwLimit::Auto),
        s => rsync_rate(s).map(BwLimit::Fixed),
    }
}

/// A rate as rsync's --bwlimit reads it (a bare number is KiB per second).
pub fn rsync_rate(s: &str) -> Result<u64, String> {
    rsync_arg(s, b'k', "bwlimit")
}

/// An rsync size argument for clap: the library's reason alone (clap names the flag).
fn rsync_arg(s: &str, unit: u8, option: &'static str) -> Result<u64, String> {
    copy::limits::parse_rsync_size(s, unit, option).map_err(|e| match e {
        Error::Invalid { message, .. } => message,
        e => e.to_string(),
    })
}

/// The filter rules of copy's command line, in the order given.
pub fn filters(a: &CopyArgs) -> Result<Filters, Error> {
    filters_of(
        [
            &a.exclude,
            &a.include,
            &a.exclude_from,
            &a.include_from,
            &a.filter,
        ],
        a.delete_excluded,
    )
}

/// The filter rules of the five rule flags, in the order given.
pub fn filters_of(lists: [&Vec<Rule>; 5], delete_excluded: bool) -> Result<Filters, Error> {
    let mut all: Vec<&Rule> = lists.into_iter().flatten().collect();
    all.sort_by_key(|r| r.seq);
    let mut f = Filters::new(delete_excluded);
    for r in all {
        if r.file {
            f.add_file(r.kind, std::path::Path::new(&r.text))?;
        } else {
            f.add(r.kind, r.text.as_bytes())?;
        }
    }
    Ok(f)
}

/// rsync's `--info=FLAGS` (comma-separated): `progress2` turns the progress line on,
/// `progress0`/`none` off; other rsync info flags are refused by name.
pub fn info_flags(s: &str) -> Result<bool, String> {
    let mut on = false;
    for f in s.split(',') {
        match f {
            "progress2" => on = true,
            "progress0" | "none" => on = false,
            other => {
                return Err(format!(
                    "rsync info flag '{other}' is not supported (progress2 is: the whole copy's progress line)"
                ))
            }
        }
    }
    Ok(on)
}
