//! `Trace`: a recording, read from a file or returned by `record`, handed to `replay`,
//! `evict(trace=...)` and `load(trace=...)`.

use crate::convert;
use crate::errors;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::sync::Arc;

/// A pagewise trace (the library's `Trace`), immutable.
#[pyclass(module = "pagewise._pagewise", name = "Trace", frozen)]
pub struct Trace {
    pub inner: Arc<pagewise_core::trace::Trace>,
}

impl Trace {
    /// Wraps a trace.
    pub fn new(t: pagewise_core::trace::Trace) -> Trace {
        Trace { inner: Arc::new(t) }
    }
}

#[pymethods]
impl Trace {
    /// Reads and validates the trace file at `path` (bytes).
    #[staticmethod]
    fn open(py: Python<'_>, path: Vec<u8>) -> PyResult<Trace> {
        let path = convert::path(path);
        let data = py
            .detach(|| std::fs::read(&path))
            .map_err(|e| errors::io(py, &e, Some(&path), "read"))?;
        Self::parse(py, &data)
    }

    /// Parses a trace from the bytes of a trace file.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Trace> {
        Self::parse(py, data)
    }

    /// The trace file's bytes (the version-1 format `record` writes).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }

    /// The whole trace as `pagewise show --format json` prints it.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::report(py, self.inner.as_ref())
    }

    /// The files, as dicts (`path`, `path_bytes` when not UTF-8, `dev_major`, `dev_minor`,
    /// `ino`, `size`, `deleted`).
    fn files<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::report(py, &self.inner.files)
    }

    /// The page-cache additions: `(ts_ns, file, pid, index, pages)` tuples, in time order.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = self
            .inner
            .events
            .iter()
            .map(|e| {
                PyTuple::new(
                    py,
                    [
                        e.ts_ns,
                        e.file as u64,
                        e.pid as u64,
                        e.index,
                        e.pages as u64,
                    ],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// The page faults: `(ts_ns, file, pid, index)` tuples, or None when recorded without
    /// `faults`.
    fn faults<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(f) = &self.inner.faults else {
            return Ok(None);
        };
        let items = f
            .iter()
            .map(|e| PyTuple::new(py, [e.ts_ns, e.file as u64, e.pid as u64, e.index]))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Some(PyList::new(py, items)?))
    }

    /// The header: `version`, `page_size`, `lost_events`, `started_unix_ns`, `duration_ns`,
    /// `command`, and the total `bytes` recorded.
    fn header<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.inner.as_ref();
        let v = serde_json::json!({
            "version": t.version,
            "page_size": t.page_size,
            "lost_events": t.lost_events,
            "started_unix_ns": t.started_unix_ns,
            "duration_ns": t.duration_ns,
            "command": t.command,
            "bytes": t.bytes(),
        });
        convert::to_py(py, &v)
    }
}

impl Trace {
    fn parse(py: Python<'_>, data: &[u8]) -> PyResult<Trace> {
        pagewise_core::trace::Trace::from_bytes(data)
            .map(Trace::new)
            .map_err(|e| errors::trace_error(py, &e.to_string()))
    }
}
