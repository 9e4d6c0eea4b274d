//! rsync's `--usermap` and `--groupmap`: the owner or group a copy gets, from rules
//! `FROM:TO,...` checked in order against each source id. FROM is a name (the source's user
//! or group name, compared whole), a wildcard pattern of names (`*`, `?`, `[...]`), an id or
//! an id range `LOW-HIGH`; TO is a name or id on this machine. An id no rule takes keeps its
//! value (a local copy: the same database on both sides). With `--numeric-ids` names are not
//! looked up, so only id rules and `*` match, as rsync sends no names then.

use super::filter::wildmatch;
use crate::error::Error;
use crate::sys;
use std::collections::HashMap;
use std::sync::Mutex;

/// The most rules one map takes (a bound for a hostile argument).
pub const MAX_ID_RULES: usize = 10_000;

/// Which source ids a rule takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdFrom {
    /// Ids from the first to the second, inclusive.
    Range(u32, u32),
    /// The id whose name is this.
    Name(String),
    /// Ids whose name matches this wildcard pattern (`*` takes every id, named or not).
    Pattern(String),
}

/// One `FROM:TO` of a map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdRule {
    /// Which source ids.
    pub from: IdFrom,
    /// The id they get.
    pub to: u32,
}

fn invalid(message: String) -> Error {
    Error::Invalid {
        what: "idmap",
        message,
    }
}

/// Parses a `--usermap` (`groups` false) or `--groupmap` value, with rsync's messages for
/// what it refuses; TO names are looked up in this machine's databases.
pub fn parse_map(spec: &str, groups: bool) -> Result<Vec<IdRule>, Error> {
    let opt = if groups { "groupmap" } else { "usermap" };
    let mut rules = Vec::new();
    for part in spec.split(',') {
        if rules.len() == MAX_ID_RULES {
            return Err(invalid(format!("--{opt}: more than {MAX_ID_RULES} rules")));
        }
        let Some((from, to)) = part.split_once(':') else {
            return Err(invalid(format!("No colon found in --{opt}: {part}")));
        };
        if to.is_empty() {
            return Err(invalid(format!(
                "No name found after colon --{opt}: {part}"
            )));
        }
        let from = if from.starts_with(|c: char| c.is_ascii_digit()) {
            let bad = || invalid(format!("Invalid number in --{opt}: {from}"));
            let (lo, hi) = from.split_once('-').unwrap_or((from, from));
            let id = |s: &str| s.parse::<u32>().map_err(|_| bad());
            IdFrom::Range(id(lo)?, id(hi)?)
        } else if from.contains(['*', '[', '?']) {
            IdFrom::Pattern(from.to_string())
        } else {
            IdFrom::Name(from.to_string())
        };
        let id = match to.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) if groups => sys::group_id(to),
            Err(_) => sys::user_id(to),
        };
        let to = id.ok_or_else(|| invalid(format!("Unknown --{opt} name on receiver: {to}")))?;
        rules.push(IdRule { from, to });
    }
    Ok(rules)
}

/// The maps of one copy, with what each source id became (ids are few; names are looked up
/// once each).
#[derive(Debug, Default)]
pub(super) struct IdMaps {
    users: Vec<IdRule>,
    groups: Vec<IdRule>,
    numeric: bool,
    seen: Mutex<HashMap<(bool, u32), u32>>,
}

impl IdMaps {
    pub(super) fn new(users: &[IdRule], groups: &[IdRule], numeric: bool) -> IdMaps {
        IdMaps {
            users: users.to_vec(),
            groups: groups.to_vec(),
            numeric,
            seen: Mutex::default(),
        }
    }

    /// The uid a source's `uid` becomes.
    pub(super) fn uid(&self, uid: u32) -> u32 {
        self.map(false, uid)
    }

    /// The gid a source's `gid` becomes.
    pub(super) fn gid(&self, gid: u32) -> u32 {
        self.map(true, gid)
    }

    fn map(&self, group: bool, id: u32) -> u32 {
        let rules = if group { &self.groups } else { &self.users };
        if rules.is_empty() {
            return id;
        }
        if let Some(&to) = self.seen.lock().unwrap().get(&(group, id)) {
            return to;
        }
        let name = match (self.numeric, group) {
            (true, _) => None,
            (false, true) => sys::group_name(id),
            (false, false) => sys::user_name(id),
        };
        let to = first_match(rules, id, name.as_deref().unwrap_or_default()).unwrap_or(id);
        self.seen.lock().unwrap().insert((group, id), to);
        to
    }
}

/// The TO of the first rule taking `id` named `name` (empty: no name).
fn first_match(rules: &[IdRule], id: u32, name: &[u8]) -> Option<u32> {
    rules
        .iter()
        .find(|r| match &r.from {
            IdFrom::Range(lo, hi) => (*lo..=*hi).contains(&id),
            IdFrom::Name(n) => n.as_bytes() == name,
            IdFrom::Pattern(p) => wildmatch(p.as_bytes(), name),
        })
        .map(|r| r.to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rsync_forms_and_refuses_with_its_messages() {
        let r = parse_map("0-99:1000,5:0,root:7,us*r:root,*:65534", false).unwrap();
        assert_eq!(
            r.iter().map(|r| r.to).collect::<Vec<_>>(),
            [1000, 0, 7, 0, 65534]
        );
        assert_eq!(r[0].from, IdFrom::Range(0, 99));
        assert_eq!(r[1].from, IdFrom::Range(5, 5));
        assert_eq!(r[2].from, IdFrom::Name("root".into()));
        assert_eq!(r[3].from, IdFrom::Pattern("us*r".into()));
        let msg = |s, g| match parse_map(s, g) {
            Err(Error::Invalid { message, .. }) => message,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(msg("a", false), "No colon found in --usermap: a");
        assert_eq!(msg("a:", true), "No name found after colon --groupmap: a:");
        assert_eq!(msg("1-2-3:0", false), "Invalid number in --usermap: 1-2-3");
        assert_eq!(msg("1x:0", false), "Invalid number in --usermap: 1x");
        assert_eq!(
            msg("*:no-such-user-here", false),
            "Unknown --usermap name on receiver: no-such-user-here"
        );
        let many = vec!["1:1"; MAX_ID_RULES + 1].join(",");
        assert!(parse_map(&many, false).is_err());
    }

    #[test]
    fn the_first_rule_taking_an_id_decides() {
        let r = parse_map("10-20:1,bob:2,b?b:3,*:4", false).unwrap();
        assert_eq!(first_match(&r, 15, b"x"), Some(1));
        assert_eq!(first_match(&r, 30, b"bob"), Some(2));
        assert_eq!(first_match(&r, 30, b"bab"), Some(3));
        assert_eq!(first_match(&r, 30, b""), Some(4));
        let only_names = parse_map("bob:2", false).unwrap();
        assert_eq!(first_match(&only_names, 30, b""), None);
        // Through the maps: root's name is looked up; with --numeric-ids it is not.
        let m = IdMaps::new(&parse_map("root:5", false).unwrap(), &[], false);
        assert_eq!((m.uid(0), m.uid(0), m.gid(0)), (5, 5, 0));
        let n = IdMaps::new(&parse_map("root:5", false).unwrap(), &[], true);
        assert_eq!(n.uid(0), 0);
    }
}
