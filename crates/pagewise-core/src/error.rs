//! Error types. A per-file error names the path and the syscall; it is counted and the run goes
//! on. A fatal error stops the verb before it starts.

use serde::Serialize;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One failure on one file: `path: op failed: message`.
#[derive(Debug, Clone, Serialize)]
pub struct FileError {
    #[serde(flatten, serialize_with = "crate::json::path")]
    pub path: PathBuf,
    /// The syscall or step that failed (`openat`, `cachestat`, `fadvise(DONTNEED)`, ...).
    pub op: String,
    pub message: String,
    /// errno, when the failure came from the kernel.
    pub errno: Option<i32>,
}

impl FileError {
    pub fn io(path: &Path, op: &str, e: &io::Error) -> Self {
        FileError {
            path: path.to_path_buf(),
            op: op.to_string(),
            message: e.to_string(),
            errno: e.raw_os_error(),
        }
    }
    pub fn other(path: &Path, op: &str, message: impl Into<String>) -> Self {
        FileError {
            path: path.to_path_buf(),
            op: op.to_string(),
            message: message.into(),
            errno: None,
        }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} failed: {}",
            self.path.display(),
            self.op,
            self.message
        )
    }
}

/// Fatal errors: the verb could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid {what}: {message}")]
    Invalid { what: &'static str, message: String },
    #[error("{path}: {op} failed: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    /// The command to run or record could not be started (`exit_code`: 127 when it was not
    /// found, 126 when it could not be executed, as shells and env(1) say).
    #[error("{}: cannot run it: {source}", program.display())]
    Spawn { program: PathBuf, source: io::Error },
    /// A process named by PID does not exist (or is gone).
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The exit status a shell gives for this failure: 127 (command not found), 126 (found,
    /// not executable), else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Spawn { source, .. } => match source.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => 127,
                _ => 126,
            },
            _ => 1,
        }
    }
}

/// Collects per-file errors from many threads: all are counted, the first `MAX_KEPT` kept.
#[derive(Debug, Default)]
pub struct ErrorLog {
    count: AtomicU64,
    kept: Mutex<Vec<FileError>>,
}

impl ErrorLog {
    pub const MAX_KEPT: usize = 10_000;

    pub fn push(&self, e: FileError) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut k = self.kept.lock().unwrap();
        if k.len() < Self::MAX_KEPT {
            k.push(e);
        }
    }
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
    /// The kept errors, sorted by path for stable output.
    pub fn take(&self) -> Vec<FileError> {
        let mut v = std::mem::take(&mut *self.kept.lock().unwrap());
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    }
}
