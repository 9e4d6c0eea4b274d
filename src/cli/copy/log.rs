//! `copy --log-file FILE` and `sync --log-file FILE`: one line per change, as rsync's log file
//! has them — `TIME [PID] CODE PATH` with TIME in UTC (`2026-11-26T15:20:01.123Z`), CODE rsync's
//! itemize code (`>f+++++++++` a file created, `>f.st......` one updated with what differed,
//! `cd+++++++++` a directory, `cL` a symlink, `cS` a FIFO or socket, `cD` a device, `hf` a hard
//! link, `*deleting` a deletion, `*failed` a failure), PATH with bytes that are not printable
//! UTF-8 escaped as `\#ooo` (rsync's escape) and, as rsync's `%n`, a `/` after a directory's.
//! copy names the destination path, sync the path below the transfer's root (as rsync).
//! Entries left as they were are not logged. The run's command starts the log and its summary
//! ends it.
//!
//! A write that fails (a full file system, EIO) ends the log at its last whole line — the
//! part of the line written is cut off again — no more lines are tried, and the run says so
//! on stderr and exits 2: a log that is silently incomplete is worse than none.

use super::itemize::{code, escaped, Names};
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

    /// The log of `verb` at `path` (when --log-file is given), opened and started with the
    /// command's paths (escaped).
    pub fn start(
        path: Option<&Path>,
        verb: &str,
        paths: &[std::path::PathBuf],
    ) -> Result<Option<CopyLog>, CliError> {
        let Some(path) = path else { return Ok(None) };
        let log = CopyLog::open(path)?;
        let shown: Vec<String> = paths
            .iter()
            .map(|p| escaped(p.as_os_str().as_bytes(), false))
            .collect();
        log.line(&format!("pagewise {verb} {}", shown.join(" ")));
        Ok(Some(log))
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
            "--log-file {}: write failed: {e}; the log ends at its last whole line and is incomplete",
            self.shown
        ))
    }

    /// Logs one entry's outcome, if it is a change or a failure: the destination path.
    pub fn item(&self, item: &CopyItem) {
        let mut path = escaped(item.path.as_os_str().as_bytes(), false);
        if item.kind == Some(EntryKind::Dir) && !path.ends_with('/') {
            path.push('/');
        }
        self.entry(item, &path, true);
    }

    /// Logs one entry's outcome as rsync's log names it: below the transfer's root.
    pub fn item_named(&self, item: &CopyItem, names: &Names, time_kept: bool) {
        let name = names.name(&item.path, item.kind);
        self.entry(item, &format!("{name}{}", names.link(item)), time_kept);
    }

    /// `CODE NAME`, or `*failed NAME: error`; nothing for an entry left as it was.
    fn entry(&self, item: &CopyItem, name: &str, time_kept: bool) {
        if item.action == Action::Skipped {
            return;
        }
        match (&item.error, code(item, time_kept)) {
            (Some(e), _) => self.line(&format!(
                "*failed     {name}: {}",
                escaped(e.as_bytes(), false)
            )),
            (None, Some(code)) => self.line(&format!("{code} {name}")),
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_rsync() {
        assert_eq!(escaped(b"a b/c", false), "a b/c");
        assert_eq!(escaped(b"new\nline", false), "new\\#012line");
        assert_eq!(escaped(b"bad\xffname", false), "bad\\#377name");
        assert_eq!(escaped("é".as_bytes(), false), "é");
    }
}
