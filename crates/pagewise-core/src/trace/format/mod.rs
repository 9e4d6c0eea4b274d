//! The trace file: what `record` writes and `replay`, `evict --trace` and `load --trace` read.
//!
//! Version 2, all integers little-endian (version 1, still read, is the same without the file
//! handles):
//!
//! ```text
//! magic       8 bytes  "PWTRACE\0"
//! version     u32      2
//! flags       u32      bit 0 (1): a fault section follows the events; other bits reserved (0)
//! page_size   u32
//! lost        u64      events the kernel dropped (ring buffer overrun), never hidden
//! started     u64      wall clock at start, ns since the Unix epoch
//! duration    u64      ns from start to the command's exit
//! argc        u32, then argc × (u32 length, bytes)          the recorded command
//! nfiles      u32, then nfiles × file:
//!   dev u64 (major << 32 | minor), ino u64, size u64, flags u32 (1 = path known, 2 = deleted,
//!   4 = handle known), path: u32 length, bytes,
//!   [version 2:] handle: u32 length (0, or 5 to 132), bytes: the file system's handle of the
//!   file (name_to_handle_at: handle_type i32, then f_handle), which carries the generation
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
//! index out of range, and a checksum mismatch — with an error saying which and where. Every
//! field is bounded by what a recording can hold: an event's `pages` is a power of two of at
//! most [`MAX_EVENT_PAGES`], the offset of every page's last byte (`(index + pages) × page_size
//! - 1`, checked, never wrapping) and every file size at most [`MAX_FILE_BYTES`]; a file of more than
//! [`MAX_TRACE_BYTES`] is not read. What the verbs then do is bounded at use time: pages past
//! a file's current end are left out (replay, evict --trace, load --trace clip to the file's
//! size), and a replay's requests are counted before they are planned (see
//! `replay::MAX_EXTRA_REQUESTS`). Every allocation sized by the file is fallible.

mod codec;

use codec::{
    check_file_size, check_page_size, put_bytes, read_command, read_files, read_section,
    write_section, Bounds, Header, Reader, Record,
};
use serde::Serialize;
use std::fmt;

/// The first 8 bytes of every trace file.
pub const MAGIC: &[u8; 8] = b"PWTRACE\0";
/// The format version this pagewise writes (it reads this one and [`VERSION_1`]).
pub const VERSION: u32 = 2;
/// The first version: files without handles.
pub const VERSION_1: u32 = 1;
/// Bytes of a file handle at most: the handle type (4) and `MAX_HANDLE_SZ` (128).
pub const MAX_HANDLE_BYTES: u32 = 4 + 128;
const MAX_ARGS: u32 = 65_536;
const MAX_STR: u32 = 1 << 20;
/// Pages of one event at most: `record` writes 1 << folio order with the order capped at 20
/// (the kernel's own largest page-cache folio is far smaller: order 11, MAX_PAGECACHE_ORDER).
pub const MAX_EVENT_PAGES: u32 = 1 << 20;
/// The largest byte offset a file can have (Linux's MAX_LFS_FILESIZE, 2^63 - 1): no byte of a
/// traced page and no file size lies beyond it (the last page the kernel indexes, 2^63 / page
/// size - 1, ends exactly there).
pub const MAX_FILE_BYTES: u64 = i64::MAX as u64;
/// Largest trace file read, bytes (1 GiB: ~38 million events, far more than any recording of
/// a program's start; `record` of a cold 100 GiB read in 4 KiB pages would be 700 MiB).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
const EVENT_BYTES: u64 = 28;
const FAULT_BYTES: u64 = 24;
/// Header flag: the trace has a fault section.
pub const HAS_FAULTS: u32 = 1;

/// File flag: the path follows.
pub const FILE_PATH_KNOWN: u32 = 1;
/// File flag: the file was deleted by the end of the recording.
pub const FILE_DELETED: u32 = 2;
/// File flag: the file system's handle of the file follows (version 2).
pub const FILE_HANDLE_KNOWN: u32 = 4;

/// A file seen in a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceFile {
    /// Major number of the filesystem's device.
    pub dev_major: u32,
    /// Minor number of the filesystem's device.
    pub dev_minor: u32,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes at the end of the recording (0 when unknown).
    pub size: u64,
    /// Path when it could be resolved (lossy for display; the bytes are kept in `path_bytes`).
    #[serde(skip)]
    pub path: Option<String>,
    /// In JSON: `path` (null when unknown), plus `path_bytes` when the name is not UTF-8.
    #[serde(flatten, serialize_with = "crate::json::opt_path_bytes")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::OptPathKeys"))]
    pub path_bytes: Option<Vec<u8>>,
    /// Deleted by the end of the recording (its name then is the one it had).
    pub deleted: bool,
    /// The file system's handle of the file (`name_to_handle_at`: handle type, little endian,
    /// then `f_handle`), taken while the command held it: with the generation, it never names
    /// a later file that reuses the inode number. None where the file system has none, or in a
    /// version-1 trace.
    #[serde(skip)]
    pub handle: Option<Vec<u8>>,
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Event {
    /// When, ns since the recording started.
    pub ts_ns: u64,
    /// Index into [`Trace::files`].
    pub file: u32,
    /// The process (thread) that caused it.
    pub pid: u32,
    /// First page added (file offset / page size).
    pub index: u64,
    /// Pages added together (1 << folio order).
    pub pages: u32,
}

/// A page fault of the recorded command on a file mapping (`record --faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Fault {
    /// When, ns since the recording started.
    pub ts_ns: u64,
    /// Index into [`Trace::files`].
    pub file: u32,
    /// The process (thread) that faulted.
    pub pid: u32,
    /// The page it touched (file offset / page size), cached or not.
    pub index: u64,
}

/// A whole recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Trace {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// Page size of the system it was recorded on, bytes.
    pub page_size: u32,
    /// Events the kernel dropped (ring buffer overrun), never hidden.
    pub lost_events: u64,
    /// Wall clock at the start, ns since the Unix epoch.
    pub started_unix_ns: u64,
    /// ns from the start to the command's exit.
    pub duration_ns: u64,
    /// The recorded command (lossy where not UTF-8).
    pub command: Vec<String>,
    /// The files pages were added to, in order of first appearance.
    pub files: Vec<TraceFile>,
    /// Pages added to the page cache, in time order.
    pub events: Vec<Event>,
    /// Page faults, in time order; `None` when the trace was recorded without `--faults`.
    pub faults: Option<Vec<Fault>>,
}

/// An empty recording (no command, files or events; no fault section) in this format version,
/// with this system's page size: the default of the options that take a trace.
impl Default for Trace {
    fn default() -> Self {
        Trace {
            version: VERSION,
            page_size: crate::sys::page_size() as u32,
            lost_events: 0,
            started_unix_ns: 0,
            duration_ns: 0,
            command: Vec::new(),
            files: Vec::new(),
            events: Vec::new(),
            faults: None,
        }
    }
}

/// Why a trace file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceError {
    /// Not a pagewise trace.
    BadMagic,
    /// A format version this pagewise does not read.
    UnsupportedVersion(u32),
    /// The file ends inside the field named, at this byte offset.
    Truncated {
        /// The field.
        field: &'static str,
        /// Byte offset of the field.
        at: usize,
    },
    /// A value that cannot be (a count, flag, index or length), described.
    Corrupt(String),
    /// The checksum does not match the bytes.
    ChecksumMismatch,
    /// More than this pagewise reads or plans (the file, or the work it asks for), or memory
    /// for it could not be had: described.
    TooLarge(String),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::BadMagic => write!(f, "not a pagewise trace (bad magic)"),
            TraceError::UnsupportedVersion(v) => write!(
                f,
                "trace format version {v} is not supported (this pagewise reads versions {VERSION_1} and {VERSION})"
            ),
            TraceError::Truncated { field, at } => {
                write!(f, "truncated trace: ends inside {field} at byte {at}")
            }
            TraceError::Corrupt(s) => write!(f, "corrupt trace: {s}"),
            TraceError::ChecksumMismatch => write!(f, "corrupt trace: checksum mismatch"),
            TraceError::TooLarge(s) => write!(f, "trace too large: {s}"),
        }
    }
}

impl std::error::Error for TraceError {}

impl Trace {
    /// Serialises to the current format ([`VERSION`]).
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
            let handle = f
                .handle
                .as_deref()
                .filter(|h| (5..=MAX_HANDLE_BYTES as usize).contains(&h.len()));
            let flags = flags
                | if handle.is_some() {
                    FILE_HANDLE_KNOWN
                } else {
                    0
                };
            b.extend_from_slice(&flags.to_le_bytes());
            put_bytes(&mut b, path.unwrap_or(b""));
            put_bytes(&mut b, handle.unwrap_or(b""));
        }
        write_section(&mut b, &self.events);
        if let Some(faults) = &self.faults {
            write_section(&mut b, faults);
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses a trace of version 2 or 1, validating every length, index and the checksum.
    pub fn from_bytes(data: &[u8]) -> Result<Trace, TraceError> {
        let mut r = Reader { data, pos: 0 };
        let header = Header::read(&mut r)?;
        let command = read_command(&mut r)?;
        let files = read_files(&mut r, header.version)?;
        let bounds = Bounds {
            nfiles: files.len() as u32,
            page_size: header.page_size as u64,
        };
        let has_faults = header.flags & HAS_FAULTS != 0;
        let events = read_section::<Event>(&mut r, &bounds, !has_faults)?;
        let faults = if has_faults {
            Some(read_section::<Fault>(&mut r, &bounds, true)?)
        } else {
            None
        };
        let body = r.pos;
        let sum = r.u64("checksum")?;
        if xxhash_rust::xxh3::xxh3_64(&data[..body]) != sum {
            return Err(TraceError::ChecksumMismatch);
        }
        Ok(Trace {
            version: header.version,
            page_size: header.page_size,
            lost_events: header.lost_events,
            started_unix_ns: header.started_unix_ns,
            duration_ns: header.duration_ns,
            command,
            files,
            events,
            faults,
        })
    }

    /// Checks a trace built by hand as [`Trace::from_bytes`] checks one it reads: the version,
    /// the page size, and that every event and fault names a file of the trace with a valid
    /// page range. A trace that passes can be replayed, evicted and loaded without panics.
    pub fn check(&self) -> Result<(), TraceError> {
        if self.version != VERSION && self.version != VERSION_1 {
            return Err(TraceError::UnsupportedVersion(self.version));
        }
        check_page_size(self.page_size)?;
        let nfiles = u32::try_from(self.files.len())
            .map_err(|_| TraceError::TooLarge(format!("{} files", self.files.len())))?;
        let bounds = Bounds {
            nfiles,
            page_size: self.page_size as u64,
        };
        for (i, f) in self.files.iter().enumerate() {
            check_file_size(i, f.size)?;
        }
        for (i, e) in self.events.iter().enumerate() {
            e.check(i as u64, &bounds)?;
        }
        for (i, f) in self.faults.iter().flatten().enumerate() {
            f.check(i as u64, &bounds)?;
        }
        Ok(())
    }

    /// Bytes of all recorded events (saturating: a hand-built trace may claim any count).
    pub fn bytes(&self) -> u64 {
        self.events.iter().fold(0u64, |sum, e| {
            sum.saturating_add((e.pages as u64).saturating_mul(self.page_size as u64))
        })
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
