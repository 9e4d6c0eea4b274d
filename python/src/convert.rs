//! Values across the boundary: reports to Python (through the same `serde_json::Value` the
//! CLI's `--json` prints, so `to_dict()` is that document), and Python arguments to the
//! library's option types.

use pagewise_core::residency::parse_size;
use pagewise_core::{ByteRange, Method, WalkOptions};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use serde::Serialize;
use serde_json::Value;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// A report as the CLI's `--json` writes it: `serde_json::to_value`.
pub fn to_value<T: Serialize>(report: &T) -> PyResult<Value> {
    serde_json::to_value(report)
        .map_err(|e| PyValueError::new_err(format!("pagewise: report not serialisable: {e}")))
}

/// A JSON value as Python objects: dict, list, int, float, str, bool, None.
pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let items = a
                .iter()
                .map(|x| to_py(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}

/// The most threads a verb takes (walkers, copy workers): far above any machine's useful
/// parallelism, far below what would exhaust the process's threads (each is spawned).
pub const MAX_THREADS: usize = 1024;
/// The most requests in flight within one file (`depth` of load, copy, replay, load_trace;
/// a thread or a buffer each).
pub const MAX_DEPTH: usize = 1024;
/// The largest request size (copy's `chunk`, replay's `max_request`): 1 GiB, each request in
/// flight holding a buffer of this size.
pub const MAX_REQUEST: u64 = 1 << 30;

/// `value` when it is at most `max`, else ValueError naming the argument.
pub fn at_most<T: PartialOrd + std::fmt::Display>(name: &str, value: T, max: T) -> PyResult<T> {
    if value > max {
        return Err(PyValueError::new_err(format!(
            "{name}: {value} is more than the most allowed ({max})"
        )));
    }
    Ok(value)
}

/// A report straight to a Python dict.
pub fn report<'py, T: Serialize>(py: Python<'py>, r: &T) -> PyResult<Bound<'py, PyAny>> {
    to_py(py, &to_value(r)?)
}

/// Paths as the Python layer passes them: `bytes` (`os.fsencode` of str, bytes or PathLike),
/// so every name arrives exactly, whatever its bytes.
pub fn paths(list: Vec<Vec<u8>>) -> Vec<PathBuf> {
    list.into_iter().map(path).collect()
}

/// One path from its bytes.
pub fn path(b: Vec<u8>) -> PathBuf {
    PathBuf::from(OsString::from_vec(b))
}

/// `range`: None (whole files), `"START-END"` as `--range` takes it (K/M/G/T suffixes,
/// either end left out), or a `(start, end)` tuple of byte offsets (`end` None: to the end).
pub fn range(r: Option<&Bound<'_, PyAny>>) -> PyResult<ByteRange> {
    let Some(r) = r else {
        return Ok(ByteRange::default());
    };
    if r.is_none() {
        return Ok(ByteRange::default());
    }
    if let Ok(s) = r.extract::<String>() {
        return ByteRange::parse(&s).map_err(|e| PyValueError::new_err(format!("range: {e}")));
    }
    if let Ok(t) = r.cast::<PyTuple>() {
        let (start, end): (u64, Option<u64>) = t.extract()?;
        if end.is_some_and(|e| e <= start) {
            return Err(PyValueError::new_err(format!(
                "range: end {} is not after start {start}",
                end.unwrap_or(0)
            )));
        }
        return Ok(ByteRange { start, end });
    }
    Err(PyTypeError::new_err(
        "range: expected a string like '0-64M' or a (start, end) tuple",
    ))
}

/// A size: an int of bytes, or a string as the CLI takes it (`4M`, `1G`, `64K`).
pub fn size(what: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(n) = v.extract::<u64>() {
        return Ok(n);
    }
    if v.is_instance_of::<pyo3::types::PyInt>() {
        return Err(PyValueError::new_err(format!(
            "{what}: {v} is not a number of bytes (0 to 2**64-1)"
        )));
    }
    if let Ok(s) = v.extract::<String>() {
        return parse_size(&s).map_err(|e| PyValueError::new_err(format!("{what}: {e}")));
    }
    Err(PyTypeError::new_err(format!(
        "{what}: expected a number of bytes or a size such as '4M'"
    )))
}

/// `method`: "auto", "cachestat" or "mincore" (`--method`).
pub fn method(m: &str) -> PyResult<Method> {
    match m {
        "auto" => Ok(Method::Auto),
        "cachestat" => Ok(Method::Cachestat),
        "mincore" => Ok(Method::Mincore),
        _ => Err(PyValueError::new_err(format!(
            "method: {m:?} is not one of 'auto', 'cachestat', 'mincore'"
        ))),
    }
}

/// `backend`: "auto", "perf" or "tracefs" (`--backend`).
pub fn backend(b: &str) -> PyResult<pagewise_core::trace::Backend> {
    use pagewise_core::trace::Backend;
    match b {
        "auto" => Ok(Backend::Auto),
        "perf" => Ok(Backend::Perf),
        "tracefs" => Ok(Backend::Tracefs),
        _ => Err(PyValueError::new_err(format!(
            "backend: {b:?} is not one of 'auto', 'perf', 'tracefs'"
        ))),
    }
}

/// The walk and measuring options every cache verb takes, named like the CLI's flags (the
/// Python layer passes them all, as a dict).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct WalkArgs<'py> {
    include: Vec<String>,
    exclude: Vec<String>,
    follow: bool,
    one_file_system: bool,
    max_depth: Option<usize>,
    threads: Option<usize>,
    pub(crate) range: Bound<'py, PyAny>,
    method: String,
}

impl WalkArgs<'_> {
    /// The walk options; `default_threads` (the verb's policy, e.g. `evict::default_threads`)
    /// when `threads` is None.
    pub fn walk(&self, default_threads: usize) -> PyResult<WalkOptions> {
        if let Some(t) = self.threads {
            at_most("threads", t, MAX_THREADS)?;
        }
        Ok(WalkOptions {
            follow: self.follow,
            one_file_system: self.one_file_system,
            max_depth: self.max_depth,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            threads: self.threads.unwrap_or(default_threads),
            noatime: false,
        })
    }

    /// The byte range of each file (`range`).
    pub fn range(&self) -> PyResult<ByteRange> {
        range(Some(&self.range))
    }

    /// How residency is measured (`method`).
    pub fn method(&self) -> PyResult<Method> {
        method(&self.method)
    }
}
