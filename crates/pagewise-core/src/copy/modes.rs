//! rsync's `--chmod` rules: parsed ([`parse_chmod`]) and applied to a source's mode
//! ([`apply_chmod`]) before it is copied. Plain data: imports nothing else of `copy`.
//!
//! The syntax is chmod(1)'s symbolic and octal modes, comma-separated, each clause optionally
//! prefixed with `D` (directories only) or `F` (files only, everything but directories):
//! `Dg+s,ug+w,Fo-w,+X`, `D755,F644`. `X` adds execute where the entry is a directory or
//! already has an execute bit, as chmod's.

use crate::error::Error;

/// Which entries a clause applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChmodOn {
    /// No prefix: every entry.
    All,
    /// `D`: directories.
    Dirs,
    /// `F`: everything but directories.
    Files,
}

/// One clause of a `--chmod` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChmodRule {
    /// Which entries it applies to.
    pub on: ChmodOn,
    /// What it does.
    pub change: Change,
}

/// What a clause does to the mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An octal mode: the low 12 bits become this.
    Set(u32),
    /// Symbolic: `who` (a mask of the bits it may touch; 0 means all, less the umask as
    /// chmod(1) would — rsync takes all), the operator, and the permission letters.
    Symbolic {
        /// The bits `u`, `g`, `o` may touch (0: all).
        who: u32,
        /// `+`, `-` or `=`.
        op: u8,
        /// The letters `rwxXst`.
        perms: Vec<u8>,
    },
}

const USER: u32 = 0o4700;
const GROUP: u32 = 0o2070;
const OTHER: u32 = 0o1007;

/// Parses a `--chmod` value (clauses separated by commas); the error names the clause.
pub fn parse_chmod(s: &str) -> Result<Vec<ChmodRule>, Error> {
    let bad = |c: &str, why: &str| Error::Invalid {
        what: "chmod",
        message: format!("'{c}': {why} (rsync's --chmod: [D|F][ugoa][+-=][rwxXst] or octal)"),
    };
    let mut rules = Vec::new();
    for clause in s.split(',') {
        let (on, rest) = match clause.as_bytes().first() {
            Some(b'D') => (ChmodOn::Dirs, &clause[1..]),
            Some(b'F') => (ChmodOn::Files, &clause[1..]),
            _ => (ChmodOn::All, clause),
        };
        if rest.is_empty() {
            return Err(bad(clause, "empty"));
        }
        if rest.bytes().all(|b| b.is_ascii_digit()) {
            let m = u32::from_str_radix(rest, 8).map_err(|_| bad(clause, "not an octal mode"))?;
            if m > 0o7777 {
                return Err(bad(clause, "above 7777"));
            }
            rules.push(ChmodRule {
                on,
                change: Change::Set(m),
            });
            continue;
        }
        let b = rest.as_bytes();
        let mut i = 0;
        let mut who = 0;
        while i < b.len() && b"ugoa".contains(&b[i]) {
            who |= match b[i] {
                b'u' => USER,
                b'g' => GROUP,
                b'o' => OTHER,
                _ => USER | GROUP | OTHER,
            };
            i += 1;
        }
        // Several operations may follow one `who`: `u+r-w`.
        if i >= b.len() {
            return Err(bad(clause, "no operator"));
        }
        while i < b.len() {
            let op = b[i];
            if !b"+-=".contains(&op) {
                return Err(bad(clause, "expected +, - or ="));
            }
            i += 1;
            let start = i;
            while i < b.len() && b"rwxXst".contains(&b[i]) {
                i += 1;
            }
            rules.push(ChmodRule {
                on,
                change: Change::Symbolic {
                    who,
                    op,
                    perms: b[start..i].to_vec(),
                },
            });
        }
    }
    Ok(rules)
}

/// The mode `mode` (of a directory when `is_dir`) after `rules`; file type bits kept.
pub fn apply_chmod(rules: &[ChmodRule], mode: u32, is_dir: bool) -> u32 {
    let mut m = mode;
    for r in rules {
        let applies = match r.on {
            ChmodOn::All => true,
            ChmodOn::Dirs => is_dir,
            ChmodOn::Files => !is_dir,
        };
        if !applies {
            continue;
        }
        match &r.change {
            Change::Set(bits) => m = (m & !0o7777) | bits,
            Change::Symbolic { who, op, perms } => {
                let who = if *who == 0 {
                    USER | GROUP | OTHER
                } else {
                    *who
                };
                let mut bits = 0;
                for p in perms {
                    bits |= match p {
                        b'r' => 0o444,
                        b'w' => 0o222,
                        b'x' => 0o111,
                        b'X' if is_dir || m & 0o111 != 0 => 0o111,
                        b'X' => 0,
                        b's' => 0o6000,
                        _ => 0o1000, // t
                    };
                }
                let bits = bits & who;
                m = match op {
                    b'+' => m | bits,
                    b'-' => m & !bits,
                    _ => (m & !(who & 0o7777)) | bits,
                };
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(s: &str, mode: u32, dir: bool) -> u32 {
        apply_chmod(&parse_chmod(s).unwrap(), mode, dir)
    }

    #[test]
    fn rsync_examples() {
        // rsync(1): --chmod=Dg+s,ug+w,Fo-w,+X
        let r = "Dg+s,ug+w,Fo-w,+X";
        assert_eq!(run(r, 0o40755, true), 0o42775);
        assert_eq!(run(r, 0o100644, false), 0o100664);
        assert_eq!(run(r, 0o100744, false), 0o100775);
        assert_eq!(run("D755,F644", 0o40700, true), 0o40755);
        assert_eq!(run("D755,F644", 0o100600, false), 0o100644);
        assert_eq!(run("u=rw,go=", 0o100777, false), 0o100600);
        assert_eq!(run("a-x", 0o100755, false), 0o100644);
        assert_eq!(run("ug-s,a+rX", 0o106700, false), 0o100755);
        assert_eq!(run("u+r-w", 0o100200, false), 0o100400);
    }

    #[test]
    fn bad_clauses_are_named() {
        for s in ["", "D", "u", "q+r", "8", "17777", "u+r,,g+w", "u*x"] {
            let e = parse_chmod(s).unwrap_err().to_string();
            assert!(e.contains("--chmod"), "{s}: {e}");
        }
    }

    proptest! {
        // The parser never panics, and what it takes changes only the permission bits.
        #[test]
        fn any_input_is_parsed_or_refused(s in ".{0,40}", mode in 0u32..0o200000, dir: bool) {
            if let Ok(rules) = parse_chmod(&s) {
                let m = apply_chmod(&rules, mode, dir);
                prop_assert_eq!(m & !0o7777, mode & !0o7777);
            }
        }
        #[test]
        fn symbolic_inputs(s in "[DF]?[ugoa]{0,3}[-+=][rwxXst]{0,4}(,[DF]?[ugoa]{0,2}[-+=][rwxXst]{0,3}){0,3}") {
            prop_assert!(parse_chmod(&s).is_ok());
        }
    }
}
