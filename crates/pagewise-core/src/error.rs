//! Error types. A per-file error names the path and the syscall; it is counted and the run goes
//! on. A fatal error stops the verb before it starts.
//!
//! The family, and which type is for what. Every syscall or step is named by one [`Op`]
//! (printed as strace would), every failed call on a path as `path: op failed: error`:
//!
//! - [`Error`]: fatal, the verb did not run (an option, a path before the start, the command,
//!   tracing); what every verb returns. Its [`Error::Io`] is the I/O error on a path.
//! - [`FileError`]: one file's failure (`path`, [`Op`], message, errno), counted in an
//!   [`ErrorLog`] while the run goes on.
//! - [`DioError`](crate::dio::DioError): a failed call of a
//!   [`DirectFile`](crate::dio::DirectFile) (`path`, [`Op`], the `io::Error`), carried inside
//!   the `io::Error`s its `Read`/`Write`/`Seek` methods must return; `dio::errno` and
//!   `dio::failure` get it back out. Converts into [`Error::Io`].
//! - Errors of input content, no I/O in them: [`TraceError`](crate::trace::TraceError) (a
//!   trace file's bytes; wrapped by [`Error::Trace`]),
//!   [`ParseError`](crate::residency::ParseError) (sizes and ranges as users write them),
//!   [`HeadError`](crate::exporter::http::HeadError) (an HTTP request head: the status to
//!   answer with).
//! - Domain errors of one step, whose I/O cases carry the `io::Error` with its source chain:
//!   [`SimError`](crate::assist::sim::SimError) (a trace cannot be simulated: no faults, or a
//!   [`TraceError`](crate::trace::TraceError)), [`StartError`](crate::trace::StartError) (a
//!   trace follower did not start: [`TraceUnavailable`](crate::trace::TraceUnavailable), or
//!   its reader failed).
//!
//! Each implements `std::error::Error`; `source()` gives the error underneath (the
//! `io::Error`, the [`TraceError`](crate::trace::TraceError)) where there is one.

use serde::Serialize;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The syscall or step that failed on a file. Shown and serialised as the text in each
/// variant's doc (`"fadvise(DONTNEED)"`), so messages and JSON keep the names people know from
/// strace and the man pages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// `open`
    Open,
    /// `open (directory)`
    OpenDirectory,
    /// `open(O_DIRECT)`
    OpenDirect,
    /// `openat`
    Openat,
    /// `opendir`
    Opendir,
    /// `stat`
    Stat,
    /// `stat (symlink loop)`
    StatSymlinkLoop,
    /// `fstat`
    Fstat,
    /// `fstatat`
    Fstatat,
    /// `lstat`
    Lstat,
    /// `statx(STATX_DIOALIGN)`
    StatxDioalign,
    /// `readdir`
    Readdir,
    /// `getdents64`
    Getdents64,
    /// `readlink`
    Readlink,
    /// `cachestat`
    Cachestat,
    /// `mmap+mincore`
    MmapMincore,
    /// `mmap`
    Mmap,
    /// `mlock`
    Mlock,
    /// `madvise(MADV_POPULATE_READ)`
    MadvisePopulateRead,
    /// `fadvise(DONTNEED)`
    FadviseDontneed,
    /// `fadvise(WILLNEED)`
    FadviseWillneed,
    /// `sync_file_range`
    SyncFileRange,
    /// `sync_file_range(WRITE)`
    SyncFileRangeWrite,
    /// `sync_file_range(WAIT)`
    SyncFileRangeWait,
    /// `lseek(SEEK_DATA)`
    LseekData,
    /// `ioctl(BLKGETSIZE64)`
    IoctlBlkgetsize64,
    /// `fcntl(F_SETFL)`: turning O_DIRECT off or on for a descriptor.
    FcntlSetfl,
    /// `posix_memalign`: an aligned buffer for O_DIRECT.
    PosixMemalign,
    /// `pthread_create`: a thread of a parallel read.
    PthreadCreate,
    /// `pread`
    Pread,
    /// `pread(O_DIRECT)`
    PreadDirect,
    /// `preadv2(RWF_DONTCACHE)`
    Preadv2Dontcache,
    /// `read(RWF_DONTCACHE)`
    ReadDontcache,
    /// `io_uring read`
    UringRead,
    /// `io_uring read(O_DIRECT)`
    UringReadDirect,
    /// `pwrite`
    Pwrite,
    /// `pwrite(O_DIRECT)`
    PwriteDirect,
    /// `pwritev2`
    Pwritev2,
    /// `pwritev2(RWF_DONTCACHE)`
    Pwritev2Dontcache,
    /// `copy_file_range`
    CopyFileRange,
    /// `ftruncate`
    Ftruncate,
    /// `fsync`
    Fsync,
    /// `ioprio_set`
    IoprioSet,
    /// `fdatasync`
    Fdatasync,
    /// `flock`
    Flock,
    /// `load`: a file changed while it was loaded (its size, seen again with fstat).
    Load,
    /// `mkdir`
    Mkdir,
    /// `symlink`
    Symlink,
    /// `mknod`
    Mknod,
    /// `unlink`
    Unlink,
    /// `rmdir` (of a whole tree)
    Rmdir,
    /// `link`
    Link,
    /// `linkat`
    Linkat,
    /// `rename`
    Rename,
    /// keeping a --backup (`link` or `rename` to the backup name)
    Backup,
    /// `chmod`
    Chmod,
    /// `fchmod`
    Fchmod,
    /// `fchown`
    Fchown,
    /// `futimens`
    Futimens,
    /// `flistxattr`
    Flistxattr,
    /// `fsetxattr`
    Fsetxattr,
    /// `fremovexattr`
    Fremovexattr,
    /// `copy`
    Copy,
    /// `verify (read from disk)`: reading the copy back failed
    Verify,
    /// `verify`: the copy read back differs from its source
    VerifyContent,
    /// `read`: of a kernel interface file (`memory.stat`, `/proc/kpagecgroup`)
    Read,
    /// `write`: to a kernel interface file (`memory.reclaim`, `memory.force_empty`)
    Write,
    /// `open(O_TMPFILE) in DIR`: the unnamed temporary a copy is written to.
    OpenTmpfileIn(PathBuf),
    /// `open(O_CREAT|O_EXCL) of TEMP`: the named temporary a copy is written to.
    CreateExclusive(PathBuf),
    /// `open(O_DIRECTORY) of DIR`: the destination directory a copy creates a name in,
    /// reached without following symlinks (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS).
    OpenParent(PathBuf),
}

impl Op {
    /// The fixed name of a step that carries no path (`None` for those that do).
    pub fn name(&self) -> Option<&'static str> {
        Some(match self {
            Op::Open => "open",
            Op::OpenDirectory => "open (directory)",
            Op::OpenDirect => "open(O_DIRECT)",
            Op::Openat => "openat",
            Op::Opendir => "opendir",
            Op::Stat => "stat",
            Op::StatSymlinkLoop => "stat (symlink loop)",
            Op::Fstat => "fstat",
            Op::Fstatat => "fstatat",
            Op::Lstat => "lstat",
            Op::StatxDioalign => "statx(STATX_DIOALIGN)",
            Op::Readdir => "readdir",
            Op::Getdents64 => "getdents64",
            Op::Readlink => "readlink",
            Op::Cachestat => "cachestat",
            Op::MmapMincore => "mmap+mincore",
            Op::Mmap => "mmap",
            Op::Mlock => "mlock",
            Op::MadvisePopulateRead => "madvise(MADV_POPULATE_READ)",
            Op::FadviseDontneed => "fadvise(DONTNEED)",
            Op::FadviseWillneed => "fadvise(WILLNEED)",
            Op::SyncFileRange => "sync_file_range",
            Op::SyncFileRangeWrite => "sync_file_range(WRITE)",
            Op::SyncFileRangeWait => "sync_file_range(WAIT)",
            Op::LseekData => "lseek(SEEK_DATA)",
            Op::IoctlBlkgetsize64 => "ioctl(BLKGETSIZE64)",
            Op::FcntlSetfl => "fcntl(F_SETFL)",
            Op::PosixMemalign => "posix_memalign",
            Op::PthreadCreate => "pthread_create",
            Op::Pread => "pread",
            Op::PreadDirect => "pread(O_DIRECT)",
            Op::Preadv2Dontcache => "preadv2(RWF_DONTCACHE)",
            Op::ReadDontcache => "read(RWF_DONTCACHE)",
            Op::UringRead => "io_uring read",
            Op::UringReadDirect => "io_uring read(O_DIRECT)",
            Op::Pwrite => "pwrite",
            Op::PwriteDirect => "pwrite(O_DIRECT)",
            Op::Pwritev2 => "pwritev2",
            Op::Pwritev2Dontcache => "pwritev2(RWF_DONTCACHE)",
            Op::CopyFileRange => "copy_file_range",
            Op::Ftruncate => "ftruncate",
            Op::Fsync => "fsync",
            Op::IoprioSet => "ioprio_set",
            Op::Fdatasync => "fdatasync",
            Op::Flock => "flock",
            Op::Load => "load",
            Op::Mkdir => "mkdir",
            Op::Symlink => "symlink",
            Op::Mknod => "mknod",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Link => "link",
            Op::Linkat => "linkat",
            Op::Rename => "rename",
            Op::Backup => "backup (link/rename)",
            Op::Chmod => "chmod",
            Op::Fchmod => "fchmod",
            Op::Fchown => "fchown",
            Op::Futimens => "futimens",
            Op::Flistxattr => "flistxattr",
            Op::Fsetxattr => "fsetxattr",
            Op::Fremovexattr => "fremovexattr",
            Op::Copy => "copy",
            Op::Verify => "verify (read from disk)",
            Op::VerifyContent => "verify",
            Op::Read => "read",
            Op::Write => "write",
            Op::OpenTmpfileIn(_) | Op::CreateExclusive(_) | Op::OpenParent(_) => return None,
        })
    }
}

impl Op {
    /// What a failure of this step on a destination means in plain words (`cannot create`),
    /// for the steps that write to a destination: those errors read as
    /// `cannot create 'PATH': MESSAGE (SYSCALL)`, as cp's do. None for the others.
    pub fn plain_words(&self) -> Option<&'static str> {
        Some(match self {
            Op::OpenTmpfileIn(_)
            | Op::CreateExclusive(_)
            | Op::OpenParent(_)
            | Op::Mkdir
            | Op::Symlink
            | Op::Mknod
            | Op::Link
            | Op::Linkat
            | Op::Rename => "cannot create",
            Op::Unlink | Op::Rmdir => "cannot remove",
            Op::Backup => "cannot back up",
            Op::Pwrite
            | Op::PwriteDirect
            | Op::Pwritev2
            | Op::Pwritev2Dontcache
            | Op::Ftruncate
            | Op::Fsync => "cannot write",
            Op::Chmod
            | Op::Fchmod
            | Op::Fchown
            | Op::Futimens
            | Op::Fsetxattr
            | Op::Fremovexattr => "cannot set the owner, mode, times or attributes of",
            _ => return None,
        })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::OpenTmpfileIn(dir) => write!(f, "open(O_TMPFILE) in {}", dir.display()),
            Op::CreateExclusive(tmp) => write!(f, "open(O_CREAT|O_EXCL) of {}", tmp.display()),
            Op::OpenParent(dir) => write!(f, "open(O_DIRECTORY) of {}", dir.display()),
            other => f.write_str(other.name().unwrap_or_default()),
        }
    }
}

impl Serialize for Op {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One failure on one file: `path: op failed: message`.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileError {
    #[serde(flatten, serialize_with = "crate::json::path")]
    #[cfg_attr(feature = "schema", schemars(with = "crate::json::PathKeys"))]
    /// The path as the user gave it (or as found below a root given).
    pub path: PathBuf,
    /// The syscall or step that failed (`openat`, `cachestat`, `fadvise(DONTNEED)`, ...).
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub op: Op,
    /// What went wrong, in words (the OS error's text for kernel failures).
    pub message: String,
    /// errno, when the failure came from the kernel.
    pub errno: Option<i32>,
}

impl FileError {
    /// A failure the kernel reported (`errno` kept).
    pub fn io(path: &Path, op: Op, e: &io::Error) -> Self {
        FileError {
            path: path.to_path_buf(),
            op,
            message: e.to_string(),
            errno: e.raw_os_error(),
        }
    }
    /// A failure pagewise found itself (no errno).
    pub fn other(path: &Path, op: Op, message: impl Into<String>) -> Self {
        FileError {
            path: path.to_path_buf(),
            op,
            message: message.into(),
            errno: None,
        }
    }
}

/// A leaf: the kernel's error is kept as its text and errno (a `FileError` is cloned into
/// reports and serialised), so there is no `source()`.
impl std::error::Error for FileError {}

/// What the CLI writes on stdout, under `--json`, when it stops on a usage or fatal error:
/// `{"error": {"exit_code": 1, "kind": "usage", "message": "..."}}` (the keys in that order).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FatalDocument {
    /// The error.
    pub error: FatalDetail,
}

/// The `error` of a [`FatalDocument`].
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FatalDetail {
    /// The process's exit code.
    pub exit_code: i32,
    /// A usage error (bad arguments) or a failure that stopped the verb.
    pub kind: FatalKind,
    /// What went wrong (a usage error's first line).
    pub message: String,
}

/// The kind of a [`FatalDetail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum FatalKind {
    /// The command line could not be parsed.
    Usage,
    /// The verb could not run or stopped.
    Fatal,
}

impl FileError {
    /// The message without std's ` (os error N)` suffix (errno is a field of its own).
    pub fn plain_message(&self) -> &str {
        match self.message.rfind(" (os error ") {
            Some(at) if self.message.ends_with(')') => &self.message[..at],
            _ => &self.message,
        }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        failed(f, &self.path, &self.op, &self.message)
    }
}

/// `path: op failed: what`, the one wording of a failed call on a path: of [`FileError`] and
/// [`DioError`](crate::dio::DioError) ([`Error::Io`] says the same through thiserror).
pub(crate) fn failed(
    f: &mut fmt::Formatter<'_>,
    path: &Path,
    op: &Op,
    what: &dyn fmt::Display,
) -> fmt::Result {
    write!(f, "{}: {op} failed: {what}", path.display())
}

/// Fatal errors: the verb could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option or input is not usable: `what` names it, `message` says why.
    #[error("invalid {what}: {message}")]
    Invalid {
        /// The option or input (`roots`, `threads`, `glob`, ...).
        what: &'static str,
        /// Why it cannot be used.
        message: String,
    },
    /// A syscall failed on a path before the verb could start.
    #[error("{}: {op} failed: {source}", path.display())]
    Io {
        /// The path as given.
        path: PathBuf,
        /// The syscall or step.
        op: Op,
        /// The kernel's error.
        source: io::Error,
    },
    /// The command to run or record could not be started (`exit_code`: 127 when it was not
    /// found, 126 when it could not be executed, as shells and env(1) say).
    #[error("{}: cannot run it: {source}", program.display())]
    Spawn {
        /// The program as given.
        program: PathBuf,
        /// Why it could not be started.
        source: io::Error,
    },
    /// A process named by PID does not exist (or is gone).
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    /// The page-cache tracepoints cannot be used: `reason` says what is missing (root,
    /// tracefs, perf_event_paranoid) and `needed_by` which verb needed them (none: the reason
    /// alone is the message, as `record` says it).
    #[error("{reason}{}{hint}", needed_by.map(|v| format!(". pagewise {v} needs the page-cache tracepoints (root, or CAP_SYS_ADMIN with tracefs)")).unwrap_or_default())]
    TracingUnavailable {
        /// What is missing, from the probe.
        reason: String,
        /// The verb that needed tracing (`run`, `assist`), when the message should say so.
        needed_by: Option<&'static str>,
        /// What to do instead, when there is something (leading separator included).
        hint: &'static str,
    },
    /// Tracing started but then failed (a tracefs file could not be written or read).
    #[error("tracefs: {0}")]
    Tracefs(#[source] io::Error),
    /// The tracefs instance's trace_pipe could not be opened.
    #[error("trace_pipe: open failed: {0}")]
    TracePipe(#[source] io::Error),
    /// Waiting for the command that was run or recorded failed.
    #[error("wait for the command: {0}")]
    Wait(#[source] io::Error),
    /// A trace file could not be read.
    #[error("{0}")]
    Trace(#[from] crate::trace::TraceError),
    /// `bench` could not go on: a state that would not hold, a command that failed, a read
    /// set that is empty or whose residency cannot be known.
    #[error("{0}")]
    Bench(#[from] crate::bench::options::BenchError),
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
    /// Errors kept in full; the rest are only counted.
    pub const MAX_KEPT: usize = 10_000;

    /// Records one error (from any thread).
    pub fn push(&self, e: FileError) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut k = self.kept.lock().unwrap();
        if k.len() < Self::MAX_KEPT {
            k.push(e);
        }
    }
    /// All errors recorded, kept or not.
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
