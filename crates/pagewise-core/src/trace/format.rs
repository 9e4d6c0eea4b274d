//! The trace file: what `record` writes and `replay`, `evict --trace` and `load --trace` read.
//!
//! Version 1, all integers little-endian:
//!
//! ```text
//! magic       8 bytes  "PWTRACE\0"
//! version     u32      1
//! flags       u32      bit 0 (1): a fault section follows the events; other bits reserved (0)
//! page_size   u32
//! lost        u64      events the kernel dropped (ring buffer overrun), never hidden
//! started     u64      wall clock at start, ns since the Unix epoch
//! duration    u64      ns from start to the command's exit
//! argc        u32, then argc × (u32 length, bytes)          the recorded command
//! nfiles      u32, then nfiles × file:
//!   dev u64 (major << 32 | minor), ino u64, size u64, flags u32 (1 = path known, 2 = deleted),
//!   path: u32 length, bytes
//! nevents     u64, then nevents × event (28 bytes):
//!   ts u64 (ns since start), file u32 (index into files), pid u32, index u64 (first page),
//!   pages u32 (pages added together: 1 << folio order)
//! [only with flag 1, from `record --faults`:]
//! nfaults     u64, then nfaults × fault (24 bytes): the program's page faults on file mappings
//!   (mm_filemap_fault: the page it touched, cached or not)
//!   ts u64 (ns since start), file u32, pid u32, index u64 (page)
//! checksum    u64      xxh3-64 of every byte before it
//! ```
//!
//! Readers reject a wrong magic, an unknown version, any length that runs past the end, a file
//! index out of range, and a checksum mismatch — with an error saying which and where.

use serde::Serialize;
use std::fmt;

pub const MAGIC: &[u8; 8] = b"PWTRACE\0";
pub const VERSION: u32 = 1;
const MAX_ARGS: u32 = 65_536;
const MAX_STR: u32 = 1 << 20;
const EVENT_BYTES: u64 = 28;
const FAULT_BYTES: u64 = 24;
/// Header flag: the trace has a fault section.
pub const HAS_FAULTS: u32 = 1;

pub const FILE_PATH_KNOWN: u32 = 1;
pub const FILE_DELETED: u32 = 2;

/// A file seen in a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceFile {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub ino: u64,
    pub size: u64,
    /// Path when it could be resolved (lossy for display; the bytes are kept in `path_bytes`).
    #[serde(skip)]
    pub path: Option<String>,
    /// In JSON: `path` (null when unknown), plus `path_bytes` when the name is not UTF-8.
    #[serde(flatten, serialize_with = "crate::json::opt_path_bytes")]
    pub path_bytes: Option<Vec<u8>>,
    pub deleted: bool,
}

/// What a `<MAJOR:MINOR inode N>` name in a trace means.
pub const UNNAMED_LEGEND: &str = "<MAJOR:MINOR inode N> names a file recorded without a path: \
deleted by the time the recording ended, or on a filesystem with no mount point (pipes, \
sockets, memfd, anonymous shared memory: device 0:N). replay, evict --trace and load --trace \
skip such files and say why";

impl TraceFile {
    /// The file's name as bytes (a path for errors and JSON, lossless), or
    /// `<MAJOR:MINOR inode N>` when it was recorded without one.
    pub fn name(&self) -> std::path::PathBuf {
        use std::os::unix::ffi::OsStrExt;
        match &self.path_bytes {
            Some(p) => std::path::Path::new(std::ffi::OsStr::from_bytes(p)).to_path_buf(),
            None => format!("<{}:{} inode {}>", self.dev_major, self.dev_minor, self.ino).into(),
        }
    }

    /// [`TraceFile::name`] for text: escaped (see [`crate::names::escape`]).
    pub fn display(&self) -> String {
        use std::os::unix::ffi::OsStrExt;
        crate::names::escape(self.name().as_os_str().as_bytes())
    }
}

/// Pages the kernel added to the page cache for the recorded command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Event {
    pub ts_ns: u64,
    pub file: u32,
    pub pid: u32,
    pub index: u64,
    pub pages: u32,
}

/// A page fault of the recorded command on a file mapping (`record --faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub ts_ns: u64,
    pub file: u32,
    pub pid: u32,
    pub index: u64,
}

/// A whole recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trace {
    pub version: u32,
    pub page_size: u32,
    pub lost_events: u64,
    pub started_unix_ns: u64,
    pub duration_ns: u64,
    pub command: Vec<String>,
    pub files: Vec<TraceFile>,
    pub events: Vec<Event>,
    /// Page faults, in time order; `None` when the trace was recorded without `--faults`.
    pub faults: Option<Vec<Fault>>,
}

/// Why a trace file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceError {
    BadMagic,
    UnsupportedVersion(u32),
    /// The file ends inside the field named, at this byte offset.
    Truncated {
        field: &'static str,
        at: usize,
    },
    Corrupt(String),
    ChecksumMismatch,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::BadMagic => write!(f, "not a pagewise trace (bad magic)"),
            TraceError::UnsupportedVersion(v) => write!(
                f,
                "trace format version {v} is not supported (this pagewise reads version {VERSION})"
            ),
            TraceError::Truncated { field, at } => {
                write!(f, "truncated trace: ends inside {field} at byte {at}")
            }
            TraceError::Corrupt(s) => write!(f, "corrupt trace: {s}"),
            TraceError::ChecksumMismatch => write!(f, "corrupt trace: checksum mismatch"),
        }
    }
}

impl std::error::Error for TraceError {}

impl Trace {
    /// Serialises to the version-1 format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(
            64 + self.events.len() * EVENT_BYTES as usize + self.files.len() * 96,
        );
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        let flags = if self.faults.is_some() { HAS_FAULTS } else { 0 };
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&self.page_size.to_le_bytes());
        b.extend_from_slice(&self.lost_events.to_le_bytes());
        b.extend_from_slice(&self.started_unix_ns.to_le_bytes());
        b.extend_from_slice(&self.duration_ns.to_le_bytes());
        b.extend_from_slice(&(self.command.len() as u32).to_le_bytes());
        for a in &self.command {
            put_bytes(&mut b, a.as_bytes());
        }
        b.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for f in &self.files {
            b.extend_from_slice(&(((f.dev_major as u64) << 32) | f.dev_minor as u64).to_le_bytes());
            b.extend_from_slice(&f.ino.to_le_bytes());
            b.extend_from_slice(&f.size.to_le_bytes());
            let path = f
                .path_bytes
                .as_deref()
                .or(f.path.as_deref().map(str::as_bytes));
            let flags = if path.is_some() { FILE_PATH_KNOWN } else { 0 }
                | if f.deleted { FILE_DELETED } else { 0 };
            b.extend_from_slice(&flags.to_le_bytes());
            put_bytes(&mut b, path.unwrap_or(b""));
        }
        b.extend_from_slice(&(self.events.len() as u64).to_le_bytes());
        for e in &self.events {
            b.extend_from_slice(&e.ts_ns.to_le_bytes());
            b.extend_from_slice(&e.file.to_le_bytes());
            b.extend_from_slice(&e.pid.to_le_bytes());
            b.extend_from_slice(&e.index.to_le_bytes());
            b.extend_from_slice(&e.pages.to_le_bytes());
        }
        if let Some(faults) = &self.faults {
            b.extend_from_slice(&(faults.len() as u64).to_le_bytes());
            for f in faults {
                b.extend_from_slice(&f.ts_ns.to_le_bytes());
                b.extend_from_slice(&f.file.to_le_bytes());
                b.extend_from_slice(&f.pid.to_le_bytes());
                b.extend_from_slice(&f.index.to_le_bytes());
            }
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses a version-1 trace, validating every length, index and the checksum.
    pub fn from_bytes(data: &[u8]) -> Result<Trace, TraceError> {
        let mut r = Reader { data, pos: 0 };
        if r.take(8, "magic").map_err(|_| TraceError::BadMagic)? != MAGIC {
            return Err(TraceError::BadMagic);
        }
        let version = r.u32("version")?;
        if version != VERSION {
            return Err(TraceError::UnsupportedVersion(version));
        }
        if data.len() < 8 {
            return Err(TraceError::Truncated {
                field: "checksum",
                at: data.len(),
            });
        }
        let header_flags = r.u32("flags")?;
        let page_size = r.u32("page_size")?;
        if header_flags & !HAS_FAULTS != 0 {
            return Err(TraceError::Corrupt(format!(
                "unknown header flags {header_flags:#x}"
            )));
        }
        if !page_size.is_power_of_two() || !(512..=1 << 21).contains(&page_size) {
            return Err(TraceError::Corrupt(format!("page size {page_size}")));
        }
        let lost_events = r.u64("lost")?;
        let started_unix_ns = r.u64("started")?;
        let duration_ns = r.u64("duration")?;
        let argc = r.u32("argc")?;
        if argc > MAX_ARGS {
            return Err(TraceError::Corrupt(format!("{argc} command arguments")));
        }
        let mut command = Vec::with_capacity(argc.min(64) as usize);
        for _ in 0..argc {
            let s = r.bytes("argument")?;
            command.push(String::from_utf8_lossy(s).into_owned());
        }
        let nfiles = r.u32("nfiles")?;
        // Each file takes at least 32 bytes: bound the count by what is left.
        if nfiles as usize > r.left() / 32 {
            return Err(TraceError::Truncated {
                field: "files",
                at: r.pos,
            });
        }
        let mut files = Vec::with_capacity(nfiles as usize);
        for _ in 0..nfiles {
            let dev = r.u64("file dev")?;
            let ino = r.u64("file inode")?;
            let size = r.u64("file size")?;
            let flags = r.u32("file flags")?;
            if flags & !(FILE_PATH_KNOWN | FILE_DELETED) != 0 {
                return Err(TraceError::Corrupt(format!(
                    "unknown file flags {flags:#x}"
                )));
            }
            let p = r.bytes("file path")?;
            let known = flags & FILE_PATH_KNOWN != 0;
            if !known && !p.is_empty() {
                return Err(TraceError::Corrupt(
                    "path present on a file marked unknown".into(),
                ));
            }
            files.push(TraceFile {
                dev_major: (dev >> 32) as u32,
                dev_minor: dev as u32,
                ino,
                size,
                path: known.then(|| String::from_utf8_lossy(p).into_owned()),
                path_bytes: known.then(|| p.to_vec()),
                deleted: flags & FILE_DELETED != 0,
            });
        }
        let nevents = r.u64("nevents")?;
        let need = nevents
            .checked_mul(EVENT_BYTES)
            .and_then(|n| n.checked_add(8));
        if need.is_none_or(|n| n > r.left() as u64) {
            return Err(TraceError::Truncated {
                field: "events",
                at: r.pos,
            });
        }
        if header_flags & HAS_FAULTS == 0 && need != Some(r.left() as u64) {
            return Err(TraceError::Corrupt(format!(
                "{} bytes after the last event",
                r.left() as u64 - need.unwrap()
            )));
        }
        let mut events = Vec::with_capacity(nevents as usize);
        for _ in 0..nevents {
            let e = Event {
                ts_ns: r.u64("event time")?,
                file: r.u32("event file")?,
                pid: r.u32("event pid")?,
                index: r.u64("event index")?,
                pages: r.u32("event pages")?,
            };
            if e.file >= nfiles {
                return Err(TraceError::Corrupt(format!(
                    "event names file {} of {nfiles}",
                    e.file
                )));
            }
            if e.pages == 0 || e.index.checked_add(e.pages as u64).is_none() {
                return Err(TraceError::Corrupt(format!(
                    "event with {} pages at index {}",
                    e.pages, e.index
                )));
            }
            events.push(e);
        }
        let faults = if header_flags & HAS_FAULTS != 0 {
            let n = r.u64("nfaults")?;
            let need = n.checked_mul(FAULT_BYTES).and_then(|n| n.checked_add(8));
            if need.is_none_or(|n| n > r.left() as u64) {
                return Err(TraceError::Truncated {
                    field: "faults",
                    at: r.pos,
                });
            }
            if need != Some(r.left() as u64) {
                return Err(TraceError::Corrupt(format!(
                    "{} bytes after the last fault",
                    r.left() as u64 - need.unwrap()
                )));
            }
            let mut faults = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let f = Fault {
                    ts_ns: r.u64("fault time")?,
                    file: r.u32("fault file")?,
                    pid: r.u32("fault pid")?,
                    index: r.u64("fault index")?,
                };
                if f.file >= nfiles {
                    return Err(TraceError::Corrupt(format!(
                        "fault names file {} of {nfiles}",
                        f.file
                    )));
                }
                faults.push(f);
            }
            Some(faults)
        } else {
            None
        };
        let body = r.pos;
        let sum = r.u64("checksum")?;
        if xxhash_rust::xxh3::xxh3_64(&data[..body]) != sum {
            return Err(TraceError::ChecksumMismatch);
        }
        Ok(Trace {
            version,
            page_size,
            lost_events,
            started_unix_ns,
            duration_ns,
            command,
            files,
            events,
            faults,
        })
    }

    /// Bytes of all recorded events.
    pub fn bytes(&self) -> u64 {
        self.events
            .iter()
            .map(|e| e.pages as u64 * self.page_size as u64)
            .sum()
    }
}

fn put_bytes(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s);
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.data.len() - self.pos
    }
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], TraceError> {
        if n > self.left() {
            return Err(TraceError::Truncated {
                field,
                at: self.pos,
            });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, TraceError> {
        Ok(u32::from_le_bytes(self.take(4, field)?.try_into().unwrap()))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, TraceError> {
        Ok(u64::from_le_bytes(self.take(8, field)?.try_into().unwrap()))
    }
    fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], TraceError> {
        let n = self.u32(field)?;
        if n > MAX_STR {
            return Err(TraceError::Corrupt(format!("{field} of {n} bytes")));
        }
        self.take(n as usize, field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Trace {
        Trace {
            version: VERSION,
            page_size: 4096,
            lost_events: 3,
            started_unix_ns: 1_700_000_000_000_000_000,
            duration_ns: 123_456,
            command: vec!["python3".into(), "-c".into(), "import json".into()],
            files: vec![
                TraceFile {
                    dev_major: 254,
                    dev_minor: 0,
                    ino: 42,
                    size: 1 << 20,
                    path: Some("/usr/lib/x.so".into()),
                    path_bytes: Some(b"/usr/lib/x.so".to_vec()),
                    deleted: false,
                },
                TraceFile {
                    dev_major: 0,
                    dev_minor: 25,
                    ino: 7,
                    size: 0,
                    path: None,
                    path_bytes: None,
                    deleted: true,
                },
            ],
            events: (0..50)
                .map(|i| Event {
                    ts_ns: i * 1000,
                    file: (i % 2) as u32,
                    pid: 100,
                    index: i * 4,
                    pages: 1 << (i % 3),
                })
                .collect(),
            faults: Some(
                (0..20)
                    .map(|i| Fault {
                        ts_ns: i * 700,
                        file: (i % 2) as u32,
                        pid: 101,
                        index: i * 3,
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn round_trips() {
        let t = sample();
        let b = t.to_bytes();
        assert_eq!(Trace::from_bytes(&b).unwrap(), t);
        let mut t = sample();
        t.faults = None;
        assert_eq!(Trace::from_bytes(&t.to_bytes()).unwrap(), t);
        // A fault section without the header flag (or the flag without the section) is refused.
        let mut b = t.to_bytes();
        b[12] = 1;
        let n = b.len() - 8;
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..n]);
        b[n..].copy_from_slice(&sum.to_le_bytes());
        assert!(Trace::from_bytes(&b).is_err());
    }

    #[test]
    fn every_truncation_is_rejected() {
        let b = sample().to_bytes();
        for n in 0..b.len() {
            assert!(
                Trace::from_bytes(&b[..n]).is_err(),
                "truncated at {n} accepted"
            );
        }
    }

    #[test]
    fn bad_magic_and_version() {
        let mut b = sample().to_bytes();
        b[0] = b'X';
        assert_eq!(Trace::from_bytes(&b), Err(TraceError::BadMagic));
        let mut b = sample().to_bytes();
        b[8] = 9;
        assert_eq!(
            Trace::from_bytes(&b),
            Err(TraceError::UnsupportedVersion(9))
        );
    }

    /// A deterministic fuzzer: random byte flips, insertions and garbage must give an error (or,
    /// for flips that keep the checksum valid — practically never — a valid trace), never a panic
    /// or a huge allocation.
    #[test]
    fn fuzz_mutations_never_panic() {
        let base = sample().to_bytes();
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let mut b = base.clone();
            match rnd() % 4 {
                0 => {
                    let i = (rnd() as usize) % b.len();
                    b[i] ^= 1 << (rnd() % 8);
                }
                1 => {
                    let i = (rnd() as usize) % b.len();
                    b.insert(i, rnd() as u8);
                }
                2 => {
                    let i = (rnd() as usize) % b.len();
                    b.truncate(i);
                }
                _ => {
                    // Huge counts in the length fields.
                    let i = 8 + (rnd() as usize) % (b.len() - 12);
                    b[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                }
            }
            if let Ok(t) = Trace::from_bytes(&b) {
                assert_eq!(t.to_bytes(), b, "only a checksum-valid file parses");
            }
        }
        for len in 0..64 {
            let garbage: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            assert!(Trace::from_bytes(&garbage).is_err());
        }
    }
}
