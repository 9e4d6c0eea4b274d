//! `DirectFile`: `pagewise_core::dio::DirectFile` for `pagewise.open`, whose Python class
//! (an `io.RawIOBase`) keeps the position and hands buffers over by address.
//!
//! Buffers arrive as `(address, length)`: the Python layer takes them with
//! `ctypes.c_char.from_buffer` (zero copy, any writable buffer: bytearray, memoryview, mmap,
//! numpy), which holds an export on the object — it cannot be resized or freed — until the
//! call returns. (The buffer protocol itself is in the stable ABI only from Python 3.11; the
//! wheel targets 3.9.) Read-only `bytes` come as a slice.

use crate::convert;
use crate::errors;
use pagewise_core::dio::{self, CachePolicy, OpenMode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Mutex;

/// A file opened for cache-neutral I/O; every request is positioned.
#[pyclass(module = "pagewise._pagewise", frozen)]
pub struct DirectFile {
    inner: Mutex<Option<dio::DirectFile>>,
    fd: i32,
}

/// An I/O error of a `DirectFile` as the `pagewise.Error` naming its path and call.
fn io_err(py: Python<'_>, e: std::io::Error) -> PyErr {
    match dio::failure(&e) {
        Some(f) => errors::os_error(
            py,
            dio::errno(&e),
            &errors::strerror(&f.source),
            Some(&f.path),
            Some(f.syscall),
        ),
        None => errors::io(py, &e, None, "io"),
    }
}

fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on closed file")
}

impl DirectFile {
    /// Runs `f` on the open file without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut dio::DirectFile) -> std::io::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut g = self.inner.lock().unwrap();
            match g.as_mut() {
                Some(file) => Ok(f(file)),
                None => Err(()),
            }
        })
        .map_err(|()| closed())?
        .map_err(|e| io_err(py, e))
    }

    /// Reads the file's properties under the lock (None once closed).
    fn get<T>(&self, f: impl FnOnce(&dio::DirectFile) -> T) -> PyResult<T> {
        self.inner
            .lock()
            .unwrap()
            .as_ref()
            .map(f)
            .ok_or_else(closed)
    }
}

#[pymethods]
impl DirectFile {
    /// Opens `path` (bytes) with an fopen mode (`rb`, `wb`, `ab`, `xb`, `r+b`, ...) under a
    /// cache policy (`direct`, `dontcache`, `drop-behind`).
    #[new]
    fn new(py: Python<'_>, path: Vec<u8>, mode: &str, cache: &str) -> PyResult<DirectFile> {
        let path = convert::path(path);
        let mode = OpenMode::from_fopen(mode).map_err(|e| errors::to_py(py, e))?;
        let policy: CachePolicy = cache.parse().map_err(|e| errors::to_py(py, e))?;
        let file = py
            .detach(|| dio::DirectFile::open(&path, mode, policy))
            .map_err(|e| errors::to_py(py, e))?;
        Ok(DirectFile {
            fd: file.as_fd().as_raw_fd(),
            inner: Mutex::new(Some(file)),
        })
    }

    /// Reads up to `len` bytes at `offset` into the memory at `address` (fewer only at the
    /// end of the file); returns the count.
    fn read_into(
        &self,
        py: Python<'_>,
        address: usize,
        len: usize,
        offset: u64,
    ) -> PyResult<usize> {
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: the Python layer passes the address and length of a writable buffer it
        // holds an export of (ctypes from_buffer) for the whole call; nothing else reads or
        // writes it through pagewise meanwhile.
        let buf = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) };
        self.with(py, move |f| f.read_at(buf, offset))
    }

    /// Writes the `len` bytes at `address` at `offset`; returns `len`.
    fn write_from(
        &self,
        py: Python<'_>,
        address: usize,
        len: usize,
        offset: u64,
    ) -> PyResult<usize> {
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: as in read_into; the memory is only read.
        let buf = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
        self.with(py, move |f| f.write_at(buf, offset))
    }

    /// Writes `data` (bytes) at `offset`; returns its length.
    fn write_bytes(&self, py: Python<'_>, data: &[u8], offset: u64) -> PyResult<usize> {
        self.with(py, move |f| f.write_at(data, offset))
    }

    /// The file's length, staged writes included.
    fn len(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |f| f.len())
    }

    /// Cuts or extends the file to `size` bytes.
    fn set_len(&self, py: Python<'_>, size: u64) -> PyResult<()> {
        self.with(py, move |f| f.set_len(size))
    }

    /// Writes what is staged and flushes it to stable storage (fdatasync).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |f| f.sync())
    }

    /// Writes what is staged and closes the file (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let file = self.inner.lock().unwrap().take();
        match file {
            Some(f) => py.detach(|| f.close()).map_err(|e| io_err(py, e)),
            None => Ok(()),
        }
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().unwrap().is_none()
    }

    /// The descriptor (valid until `close`).
    fn fileno(&self) -> PyResult<i32> {
        self.get(|_| self.fd)
    }

    /// The policy in force: `direct`, `dontcache` or `drop-behind`.
    #[getter]
    fn policy(&self) -> PyResult<&'static str> {
        self.get(|f| f.policy().name())
    }

    /// Why the policy asked for is not the one in force (None when it is).
    #[getter]
    fn notice(&self) -> PyResult<Option<String>> {
        self.get(|f| f.notice().map(str::to_string))
    }

    /// `(memory, offset)`: the alignment of buffer addresses, and of offsets and lengths,
    /// for zero-copy requests.
    #[getter]
    fn alignment(&self) -> PyResult<(usize, usize)> {
        self.get(|f| {
            let a = f.alignment();
            (a.memory, a.offset)
        })
    }
}
