//! What to open and how: the cache policy ([`CachePolicy`], with the order of its fallbacks)
//! and the open(2) flags ([`OpenMode`], also from an fopen(3) mode string).

use std::fmt;

use crate::error::Error;

/// How a [`DirectFile`] keeps out of the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum CachePolicy {
    /// O_DIRECT: no page cache at all (the default).
    #[default]
    Direct,
    /// Buffered I/O with `RWF_DONTCACHE` (Linux 6.14): pages dropped once used.
    #[serde(rename = "dontcache")]
    DontCache,
    /// Buffered I/O; pages dropped behind with fadvise(DONTNEED) after writeback.
    DropBehind,
}

impl CachePolicy {
    /// The policy's name: `direct`, `dontcache`, `drop-behind` (as `copy --cache` spells them).
    pub fn name(self) -> &'static str {
        match self {
            CachePolicy::Direct => "direct",
            CachePolicy::DontCache => "dontcache",
            CachePolicy::DropBehind => "drop-behind",
        }
    }
    /// The policy to try when this one is refused.
    pub(super) fn next(self) -> Option<CachePolicy> {
        match self {
            CachePolicy::Direct => Some(CachePolicy::DontCache),
            CachePolicy::DontCache => Some(CachePolicy::DropBehind),
            CachePolicy::DropBehind => None,
        }
    }
}

impl fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CachePolicy {
    type Err = Error;
    /// Parses a [`name`](CachePolicy::name) (also `drop_behind`, `dropbehind`, `dont-cache`).
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "direct" => CachePolicy::Direct,
            "dontcache" | "dont-cache" | "dont_cache" => CachePolicy::DontCache,
            "drop-behind" | "drop_behind" | "dropbehind" => CachePolicy::DropBehind,
            _ => {
                return Err(Error::Invalid {
                    what: "cache policy",
                    message: format!("{s:?}: expected direct, dontcache or drop-behind"),
                })
            }
        })
    }
}

/// How to open a [`DirectFile`]: access and creation, as open(2) flags. Default: read-only,
/// the file must exist; new files get mode 0o666 before the umask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenMode {
    /// Reads allowed.
    pub read: bool,
    /// Writes allowed.
    pub write: bool,
    /// Create the file if it does not exist (`O_CREAT`; needs `write`).
    pub create: bool,
    /// Cut the file to length 0 (`O_TRUNC`; needs `write`).
    pub truncate: bool,
    /// Every write goes to the end of the file, whatever offset it names (needs `write`).
    pub append: bool,
    /// With `create`: fail with EEXIST if the file exists (`O_EXCL`).
    pub exclusive: bool,
    /// Permission bits of a created file, before the umask (default 0o666).
    pub permissions: u32,
}

impl Default for OpenMode {
    fn default() -> Self {
        OpenMode::read()
    }
}

impl OpenMode {
    /// Read an existing file (`"r"`).
    pub fn read() -> Self {
        OpenMode {
            read: true,
            write: false,
            create: false,
            truncate: false,
            append: false,
            exclusive: false,
            permissions: 0o666,
        }
    }
    /// Write a file, created or cut to length 0 (`"w"`).
    pub fn write() -> Self {
        OpenMode {
            read: false,
            write: true,
            create: true,
            truncate: true,
            ..OpenMode::read()
        }
    }
    /// The mode of an fopen(3) / Python `open()` mode string: `r`, `w`, `a`, `x`, each with an
    /// optional `+` (read and write) and `b` (ignored: always binary). `t` and anything else
    /// is refused.
    pub fn from_fopen(mode: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Invalid {
            what: "mode",
            message: format!("{mode:?}: {why}"),
        };
        let mut base = None;
        let mut plus = false;
        for c in mode.chars() {
            match c {
                'r' | 'w' | 'a' | 'x' if base.is_none() => base = Some(c),
                'r' | 'w' | 'a' | 'x' => return Err(bad("more than one of r, w, a, x")),
                '+' if !plus => plus = true,
                'b' => {}
                't' => return Err(bad("text mode is not supported (binary only)")),
                _ => return Err(bad("expected r, w, a or x, then optional + and b")),
            }
        }
        let none = OpenMode {
            read: false,
            ..OpenMode::read()
        };
        let m = match base.ok_or_else(|| bad("expected r, w, a or x"))? {
            'r' => OpenMode::read(),
            'w' => OpenMode::write(),
            'a' => OpenMode {
                write: true,
                create: true,
                append: true,
                ..none
            },
            _ => OpenMode {
                write: true,
                create: true,
                exclusive: true,
                ..none
            },
        };
        Ok(OpenMode {
            read: m.read || plus,
            write: m.write || plus,
            ..m
        })
    }

    /// Checks that the flags make sense together.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |message: &str| {
            Err(Error::Invalid {
                what: "mode",
                message: message.into(),
            })
        };
        if !self.read && !self.write {
            return bad("neither read nor write");
        }
        if !self.write && (self.create || self.truncate || self.append) {
            return bad("create, truncate and append need write");
        }
        if self.exclusive && !self.create {
            return bad("exclusive needs create");
        }
        if self.permissions & !0o7777 != 0 {
            return bad("permissions beyond 0o7777");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICIES: [CachePolicy; 3] = [
        CachePolicy::Direct,
        CachePolicy::DontCache,
        CachePolicy::DropBehind,
    ];

    #[test]
    fn policies_and_modes_parse() {
        for p in POLICIES {
            assert_eq!(p.name().parse::<CachePolicy>().unwrap(), p);
            assert_eq!(p.to_string(), p.name());
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::json!(p.name())
            );
        }
        assert!("cached".parse::<CachePolicy>().is_err());
        let m = |s| OpenMode::from_fopen(s).unwrap();
        assert_eq!(m("rb"), OpenMode::read());
        assert_eq!(m("w"), OpenMode::write());
        assert!(m("r+").read && m("r+").write && !m("r+").create);
        assert!(m("ab").append && m("ab").create && !m("ab").read && !m("ab").truncate);
        assert!(m("xb").exclusive && m("x+").read);
        for bad in ["", "rw", "rt", "q", "r++"] {
            assert!(OpenMode::from_fopen(bad).is_err(), "{bad}");
        }
        let none = OpenMode {
            read: false,
            ..OpenMode::read()
        };
        assert!(none.validate().is_err());
        let trunc_ro = OpenMode {
            truncate: true,
            ..OpenMode::read()
        };
        assert!(trunc_ro.validate().is_err());
    }
}
