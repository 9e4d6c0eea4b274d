//! How paths are written in JSON: losslessly, whatever bytes a name holds.
//!
//! The rule (docs/json.md): every path is a `path` string. When the name is valid UTF-8 that
//! string is the name exactly. When it is not, `path` is the name with each invalid byte
//! replaced by U+FFFD (for display), and `path_bytes` follows: the name's bytes as an array of
//! numbers 0-255, which is the name exactly. A reader that needs the real name takes
//! `path_bytes` when present, else `path`.

use serde::ser::{SerializeMap, Serializer};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Writes `path` (and `path_bytes` when the name is not UTF-8) into the enclosing object; use
/// with `#[serde(flatten, serialize_with = "crate::json::path")]`.
pub fn path<P: AsRef<Path>, S: Serializer>(p: &P, s: S) -> Result<S::Ok, S::Error> {
    named("path", p.as_ref(), s)
}

/// [`path`] for an optional path: `"path": null` when there is none.
pub fn opt_path<P: AsRef<Path>, S: Serializer>(p: &Option<P>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => named("path", p.as_ref(), s),
        None => {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry("path", &None::<&str>)?;
            m.end()
        }
    }
}

/// [`opt_path`] for a name kept as raw bytes.
pub fn opt_path_bytes<S: Serializer>(p: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    let p = p
        .as_deref()
        .map(|b| Path::new(std::ffi::OsStr::from_bytes(b)));
    opt_path(&p, s)
}

/// A process's command kept as raw bytes, as [`opt_path_bytes`] writes a path: `comm` (null
/// when there is none), and `comm_bytes` when it is not UTF-8.
pub fn opt_comm<S: Serializer>(c: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => named("comm", Path::new(std::ffi::OsStr::from_bytes(c)), s),
        None => {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry("comm", &None::<&str>)?;
            m.end()
        }
    }
}

/// A link's target (a symlink's text, a hard link's first name): `target` and `target_bytes`
/// as [`named`] writes them, nothing when there is none; use with `flatten`.
pub fn opt_target<P: AsRef<Path>, S: Serializer>(p: &Option<P>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => named("target", p.as_ref(), s),
        None => s.serialize_map(Some(0))?.end(),
    }
}

/// The keys [`opt_target`] writes, for the schema.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
pub struct OptTargetKeys {
    /// A symlink's text or a hard link's first name (invalid bytes as U+FFFD).
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Its bytes, when it is not UTF-8.
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub target_bytes: Option<Vec<u8>>,
}

/// Writes `KEY` (and `KEY_bytes` when the name is not UTF-8) as map entries.
pub fn named<S: Serializer>(key: &str, p: &Path, s: S) -> Result<S::Ok, S::Error> {
    let raw = p.as_os_str().as_bytes();
    match std::str::from_utf8(raw) {
        Ok(text) => {
            let mut m = s.serialize_map(Some(1))?;
            m.serialize_entry(key, text)?;
            m.end()
        }
        Err(_) => {
            let mut m = s.serialize_map(Some(2))?;
            m.serialize_entry(key, &String::from_utf8_lossy(raw))?;
            m.serialize_entry(&format!("{key}_bytes"), raw)?;
            m.end()
        }
    }
}

/// The keys [`path`] writes, for the schema (`schema` feature): `path`, and `path_bytes` when
/// the name is not UTF-8.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
pub struct PathKeys {
    /// The name (invalid bytes as U+FFFD).
    pub path: String,
    /// The name's bytes, when it is not UTF-8.
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
}

/// The keys [`opt_path`] and [`opt_path_bytes`] write: `path` (null when there is none) and
/// `path_bytes`.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
pub struct OptPathKeys {
    /// The name (invalid bytes as U+FFFD); null when there is none.
    pub path: Option<String>,
    /// The name's bytes, when it is not UTF-8.
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
}

/// The keys [`opt_comm`] writes: `comm` (null when there is none) and `comm_bytes`.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
pub struct OptCommKeys {
    /// The name (invalid bytes as U+FFFD); null when there is none.
    pub comm: Option<String>,
    /// The name's bytes, when it is not UTF-8.
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub comm_bytes: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;

    #[derive(Serialize)]
    struct Row {
        #[serde(flatten, serialize_with = "super::path")]
        path: PathBuf,
        size: u64,
    }

    #[test]
    fn utf8_names_are_plain_strings() {
        let r = Row {
            path: PathBuf::from("a\nb é"),
            size: 1,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"path":"a\nb é","size":1}"#
        );
    }

    #[test]
    fn other_names_keep_their_bytes() {
        let r = Row {
            path: PathBuf::from(OsStr::from_bytes(b"x\xffy")),
            size: 2,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"path":"x�y","path_bytes":[120,255,121],"size":2}"#
        );
    }
}
