//! `Dropping`: `run::Dropping` for `with pagewise.dropping():`.

use crate::convert;
use crate::errors;
use pagewise_core::run::{self, DroppingOptions};
use pagewise_core::trace::FollowOptions;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::Mutex;

/// Follows the calling thread's page-cache additions from its creation until `finish()`.
#[pyclass(module = "pagewise._pagewise", frozen)]
pub struct Dropping {
    inner: Mutex<Option<run::Dropping>>,
}

#[pymethods]
impl Dropping {
    /// Starts following the calling thread (and the threads and processes it starts from now
    /// on). `max_cache`: bytes outstanding before a drop-behind pass (None: only at the end).
    #[new]
    #[pyo3(signature = (max_cache, keep_written, buffer_kb, backend))]
    fn new(
        py: Python<'_>,
        max_cache: Option<Bound<'_, PyAny>>,
        keep_written: bool,
        buffer_kb: Option<u64>,
        backend: &str,
    ) -> PyResult<Dropping> {
        let opts = DroppingOptions {
            max_cache: match &max_cache {
                Some(m) if !m.is_none() => Some(convert::size("max_cache", m)?),
                _ => None,
            },
            keep_written,
            follow: FollowOptions {
                buffer_kb: buffer_kb.unwrap_or(pagewise_core::trace::DEFAULT_BUFFER_KB),
                backend: convert::backend(backend)?,
                ..FollowOptions::default()
            },
            ..DroppingOptions::default()
        };
        // On this thread: it is the one followed.
        let d = py
            .detach(|| run::Dropping::start(&opts))
            .map_err(|e| errors::to_py(py, e))?;
        Ok(Dropping {
            inner: Mutex::new(Some(d)),
        })
    }

    /// Stops following and drops what was brought in; returns the report (a dict, as
    /// `serde_json::to_value` of the library's `DroppingReport`).
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = self
            .inner
            .lock()
            .unwrap()
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("pagewise.dropping: already finished"))?;
        let r = py.detach(|| d.finish(&()));
        convert::report(py, &r)
    }
}
