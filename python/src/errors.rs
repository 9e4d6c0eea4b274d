//! The library's fatal errors as Python exceptions: `OSError` subclasses carrying `errno`,
//! `filename` and the `syscall`, built by `pagewise._errors.error_from` so that errno picks
//! the builtin subclass (`FileNotFoundError`, `PermissionError`, ...); invalid options are
//! `ValueError`, unreadable traces `pagewise.TraceError`.

use pagewise_core::Error;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `pagewise._errors.error_from(errno, strerror, filename, syscall)`: the exception object.
pub fn os_error(
    py: Python<'_>,
    errno: Option<i32>,
    message: &str,
    path: Option<&Path>,
    syscall: Option<&str>,
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let m = py.import("pagewise._errors")?;
        let filename = path.map(|p| PyBytes::new(py, p.as_os_str().as_bytes()));
        let e = m
            .getattr("error_from")?
            .call1((errno.unwrap_or(0), message, filename, syscall))?;
        Ok(PyErr::from_value(e))
    })();
    made.unwrap_or_else(|e| e)
}

/// An `io::Error` on a path as the OSError subclass its errno names.
pub fn io(py: Python<'_>, e: &std::io::Error, path: Option<&Path>, syscall: &str) -> PyErr {
    os_error(py, e.raw_os_error(), &strerror(e), path, Some(syscall))
}

/// The OS's text without Rust's " (os error N)" suffix (errno is its own attribute).
pub fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// A fatal error of a verb as a Python exception.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    match &e {
        Error::Invalid { .. } => PyValueError::new_err(e.to_string()),
        Error::Io { path, op, source } => io(py, source, Some(path), &op.to_string()),
        Error::Spawn { program, source } => io(py, source, Some(program), "execve"),
        Error::NoSuchProcess(_) => {
            os_error(py, Some(libc::ESRCH), &e.to_string(), None, Some("kill"))
        }
        Error::TracingUnavailable { .. } => {
            // Without the rights (not root) this is a permission problem, whatever the probe
            // met first; as root the kernel lacks the feature.
            let errno = if pagewise_core::sys::euid() != 0 {
                libc::EPERM
            } else {
                libc::EOPNOTSUPP
            };
            // No one system call: the probe tried perf events and tracefs, and the message
            // says what each refused.
            os_error(py, Some(errno), &e.to_string(), None, None)
        }
        Error::Tracefs(source) => io(py, source, None, "tracefs"),
        Error::TracePipe(source) => io(py, source, None, "trace_pipe"),
        Error::Wait(source) => io(py, source, None, "waitpid"),
        Error::Trace(_) => trace_error(py, &e.to_string()),
        // A state that would not hold, a command that failed, a set that is empty or whose
        // residency cannot be known: the experiment could not be run as asked.
        Error::Bench(_) => PyRuntimeError::new_err(e.to_string()),
    }
}

/// `pagewise.TraceError(message)` (a `ValueError`).
pub fn trace_error(py: Python<'_>, message: &str) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("pagewise._errors")?.getattr("TraceError")?;
        Ok(PyErr::from_value(cls.call1((message,))?))
    })();
    made.unwrap_or_else(|e| e)
}
