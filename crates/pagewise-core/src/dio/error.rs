//! The errors of a [`DirectFile`](super::DirectFile): each names the path and the call
//! ([`DioError`], the call an [`Op`]); [`errno`] and [`failure`] get them back out of an
//! `io::Error`.

use crate::error::{Error, Op};
use std::fmt;
use std::io;
use std::path::PathBuf;

/// A failed call on a [`DirectFile`]: `path: op failed: error`, as [`Error::Io`] says it
/// (into which it converts). The `io::Error`s of `DirectFile` carry one inside
/// (`io::Error::get_ref`); [`errno`] finds its errno.
#[derive(Debug)]
pub struct DioError {
    /// The path the file was opened with.
    pub path: PathBuf,
    /// The call that failed, as strace names it (`pread(O_DIRECT)`, `sync_file_range`, ...).
    pub op: Op,
    /// The kernel's error.
    pub source: io::Error,
}

impl DioError {
    /// The `io::Error` a `DirectFile` returns for a failure of `op` on `path`, carrying the
    /// [`DioError`] (its kind kept).
    pub fn wrap(path: PathBuf, op: Op, source: io::Error) -> io::Error {
        io::Error::new(source.kind(), DioError { path, op, source })
    }
}

impl From<DioError> for Error {
    fn from(e: DioError) -> Error {
        Error::Io {
            path: e.path,
            op: e.op,
            source: e.source,
        }
    }
}

impl fmt::Display for DioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::error::failed(f, &self.path, &self.op, &self.source)
    }
}

impl std::error::Error for DioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The errno of an error from a [`DirectFile`] (or any OS error).
pub fn errno(e: &io::Error) -> Option<i32> {
    let kind = |e: &io::Error| match e.kind() {
        io::ErrorKind::InvalidInput => Some(libc::EINVAL),
        io::ErrorKind::OutOfMemory => Some(libc::ENOMEM),
        _ => None,
    };
    e.raw_os_error()
        .or_else(|| failure(e)?.source.raw_os_error())
        .or_else(|| kind(failure(e).map_or(e, |f| &f.source)))
}

/// The [`DioError`] inside an error from a [`DirectFile`], naming the path and the call.
pub fn failure(e: &io::Error) -> Option<&DioError> {
    e.get_ref()?.downcast_ref::<DioError>()
}
