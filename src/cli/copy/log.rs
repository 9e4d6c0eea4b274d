//! `copy --log-file FILE`: one line per change, as rsync's log file has them —
//! `TIME [PID] CODE PATH` with TIME in UTC (`2026-11-26T15:20:01.123Z`), CODE rsync's itemize
//! code (`>f+++++++++` a file created, `cd+++++++++` a directory, `cL` a symlink, `cS` a FIFO or
//! socket, `cD` a device, `hf` a hard link, `*deleting` a deletion, `*failed` a failure), PATH
//! the destination with bytes that are not printable UTF-8 escaped as `\#ooo` (rsync's escape)
//! and, as rsync's `%n`, a `/` after a directory's (`*deleting   old/` a directory removed). An update's
//! attribute letters are `?`: pagewise does not record which attributes differed. Entries left
//! as they were are not logged. The run's command starts the log and its summary ends it.
//!
//! A write that fails (a full file system, EIO) ends the log at its last whole line — the
//! part of the line written is cut off again — no more lines are tried, and the run says so
//! on stderr and exits 2: a log that is silently incomplete is worse than none.

use crate::cli::exit::CliError;
use crate::cli::render::utc;
use pagewise_core::copy::{Action, CopyItem, EntryKind};
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

/// An open log file (appended to; lines are written whole, from any thread).
pub struct CopyLog {
    out: Mutex<Out>,
    pid: u32,
    /// The path as given, for the message of a failed write.
    shown: String,
}

/// The file, and the first write error (after which nothing more is written).
struct Out {
    file: File,
    failed: Option<std::io::Error>,
}

impl CopyLog {
    /// Opens (or creates, mode 0644) `path` for appending. A FIFO or device is refused
    /// rather than blocked on or written to.
    pub fn open(path: &Path) -> Result<CopyLog, CliError> {
        let fail = |what: &str, e: std::io::Error| {
            CliError::Usage(format!("--log-file {}: {what} failed: {e}", path.display()))
        };
        let f = File::options()
            .append(true)
            .create(true)
            .mode(0o644)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| fail("open", e))?;
        let m = f.metadata().map_err(|e| fail("fstat", e))?;
        if !m.is_file() {
            return Err(CliError::Usage(format!(
                "--log-file {}: not a regular file",
                path.display()
            )));
        }
        // A second name of someone else's file (a hard link planted where the log goes) is
        // not written through.
        if m.nlink() > 1 && m.uid() != pagewise_core::sys::euid() {
            return Err(CliError::Usage(format!(
                "--log-file {}: a file with {} links owned by uid {}: not appended to",
                path.display(),
                m.nlink(),
                m.uid()
            )));
        }
        Ok(CopyLog {
            out: Mutex::new(Out {
                file: f,
                failed: None,
            }),
            pid: std::process::id(),
            shown: path.display().to_string(),
        })
    }

    /// Writes `text` as one line (`TIME [PID] text`), whole or not at all: a write that fails
    /// midway is cut back to the line's start (when nobody else appended meanwhile), and
    /// ends the log (see [`CopyLog::failure`]).
    pub fn line(&self, text: &str) {
        let line = format!("{} [{}] {text}\n", utc(SystemTime::now()), self.pid);
        let Ok(mut out) = self.out.lock() else { return };
        if out.failed.is_some() {
            return;
        }
        let before = out.file.metadata().map(|m| m.len());
        if let Err(e) = out.file.write_all(line.as_bytes()) {
            if let (Ok(b), Ok(now)) = (before, out.file.metadata().map(|m| m.len())) {
                if now > b && now < b + line.len() as u64 {
                    let _ = out.file.set_len(b);
                }
            }
            out.failed = Some(e);
        }
    }

    /// The message for a log that could not be written to the end, if it could not.
    pub fn failure(&self) -> Option<String> {
        let out = self.out.lock().ok()?;
        let e = out.failed.as_ref()?;
        Some(format!(
            "pagewise copy: --log-file {}: write failed: {e}; the log ends at its last whole line and is incomplete",
            self.shown
        ))
    }

    /// Logs one entry's outcome, if it is a change or a failure.
    pub fn item(&self, item: &CopyItem) {
        let Some(code) = itemize(item) else { return };
        let mut path = escaped(item.path.as_os_str().as_bytes());
        if item.kind == Some(EntryKind::Dir) && !path.ends_with('/') {
            path.push('/');
        }
        match &item.error {
            Some(e) => self.line(&format!("{code} {path}: {}", escaped(e.as_bytes()))),
            None => self.line(&format!("{code} {path}")),
        }
    }
}

/// rsync's itemize code of an entry's outcome; None for an entry left as it was.
pub fn itemize(item: &CopyItem) -> Option<String> {
    let kind = match item.kind {
        Some(EntryKind::File) => ">f",
        Some(EntryKind::Dir) => "cd",
        Some(EntryKind::Symlink) => "cL",
        Some(EntryKind::Special) => "cS",
        Some(EntryKind::Device) => "cD",
        Some(EntryKind::Hardlink) => "hf",
        None => "  ",
    };
    Some(match item.action {
        Action::Created => format!("{kind}+++++++++"),
        Action::Updated => format!("{kind}?????????"),
        Action::Metadata => format!("{}?????????", kind.replace('>', ".")),
        Action::Deleted => "*deleting  ".into(),
        Action::Failed => "*failed    ".into(),
        Action::Skipped => return None,
    })
}

/// `bytes` as text, with what is not printable UTF-8 (and `\`) as rsync's `\#ooo`.
pub fn escaped(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\#{b:03o}"));
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\#{b:03o}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_rsync() {
        assert_eq!(escaped(b"a b/c"), "a b/c");
        assert_eq!(escaped(b"new\nline"), "new\\#012line");
        assert_eq!(escaped(b"bad\xffname"), "bad\\#377name");
        assert_eq!(escaped("é".as_bytes()), "é");
    }
}
