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
use crate::read;
use crate::wait;
use pagewise_core::dio::{self, CachePolicy, OpenMode};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::Mutex;

/// A file opened for cache-neutral I/O; every request is positioned. Requests from several
/// threads take turns (each may have many reads in flight itself).
#[pyclass(module = "pagewise._pagewise", frozen)]
pub struct DirectFile {
    inner: Mutex<Option<dio::DirectFile>>,
    fd: i32,
    path: PathBuf,
    /// Opened for writing: writes may be staged, so reads go through the library's file.
    writable: bool,
}

/// `depth` as the number of requests in flight (1 to `read::MAX_DEPTH`).
fn depth_of(depth: Option<usize>) -> PyResult<usize> {
    match depth {
        None => Ok(read::DEFAULT_DEPTH),
        Some(d) if (1..=read::MAX_DEPTH).contains(&d) => Ok(d),
        Some(d) => Err(PyValueError::new_err(format!(
            "depth: {d} is not a number of requests in flight (1 to {})",
            read::MAX_DEPTH
        ))),
    }
}

/// The caller's writable memory of `len` bytes at `address` (an empty slice when `len` is 0,
/// whatever the address).
///
/// # Safety
/// `address..address + len` must be writable memory that nothing else touches while the
/// returned slice lives.
unsafe fn caller_memory_mut<'a>(address: usize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) }
}

/// The file at `path` opened for reading with the `cache` policy (without the GIL), and its path.
fn open_for_reading(
    py: Python<'_>,
    path: Vec<u8>,
    cache: &str,
) -> PyResult<(PathBuf, dio::DirectFile)> {
    let path = convert::path(path);
    let policy: CachePolicy = cache.parse().map_err(|e| errors::to_py(py, e))?;
    let file = py
        .detach(|| dio::DirectFile::open(&path, OpenMode::read(), policy))
        .map_err(|e| errors::to_py(py, e))?;
    Ok((path, file))
}

/// A `bytes` of `len` bytes filled by `fill` (bytes read), cut to what it read: the read goes
/// into the final object (one copy more only when the file shrank meanwhile).
fn bytes_filled<'py>(
    py: Python<'py>,
    len: u64,
    fill: impl FnOnce(&mut [u8]) -> PyResult<usize>,
) -> PyResult<Bound<'py, PyBytes>> {
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= isize::MAX as usize)
        .ok_or_else(|| PyMemoryError::new_err(format!("read: {len} bytes cannot be allocated")))?;
    let mut got = 0;
    let obj = PyBytes::new_with(py, len, |b| {
        got = fill(b)?;
        Ok(())
    })?;
    if got < len {
        return Ok(PyBytes::new(py, &obj.as_bytes()[..got]));
    }
    Ok(obj)
}

/// Reads the file at `path` (bytes) into the memory at `address` (`len` bytes) from `offset`
/// with `depth` requests in flight; returns (bytes read, whether the memory was misaligned for
/// O_DIRECT, the fallback notice).
#[pyfunction]
#[pyo3(signature = (path, cache, address, len, offset, depth=None, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn read_file_into(
    py: Python<'_>,
    path: Vec<u8>,
    cache: &str,
    address: usize,
    len: usize,
    offset: u64,
    depth: Option<usize>,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<(usize, bool, Option<String>)> {
    let depth = depth_of(depth)?;
    let (path, mut file) = open_for_reading(py, path, cache)?;
    // SAFETY: the Python layer passes the address and length of a writable buffer it holds
    // an export of (ctypes from_buffer) for the whole call.
    let buf = unsafe { caller_memory_mut(address, len) };
    let f = &mut file;
    let p = &path;
    let out = run_sized(py, len, progress.as_ref(), move |c| {
        read::read_into(f, p, buf, offset, depth, true, c)
    })?
    .map_err(|e| io_err(py, e))?;
    let notice = file.notice().map(str::to_string);
    py.detach(|| file.close()).map_err(|e| io_err(py, e))?;
    Ok((out.n, out.misaligned, notice))
}

/// The bytes of the file at `path` (bytes), read into the returned object with `depth`
/// requests in flight; returns (bytes, the fallback notice).
#[pyfunction]
#[pyo3(signature = (path, cache, depth=None, progress=None))]
pub fn read_file<'py>(
    py: Python<'py>,
    path: Vec<u8>,
    cache: &str,
    depth: Option<usize>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyBytes>, Option<String>)> {
    let depth = depth_of(depth)?;
    let path = convert::path(path);
    let policy: CachePolicy = cache.parse().map_err(|e| errors::to_py(py, e))?;
    // Opened, sized and — small, nobody asking for progress — read and closed in one stretch
    // without the GIL: one request into page-aligned memory, then into the bytes object.
    let mut scratch = None;
    let small_ok = progress.is_none();
    let first = py.detach(|| -> Result<First, PyErrLater> {
        let mut file = dio::DirectFile::open(&path, OpenMode::read(), policy)?;
        let size = file.len()?;
        if size == 0 || size > read::PARALLEL_MIN as u64 || !small_ok {
            return Ok(First::Open(Box::new(file), size));
        }
        let n = read::read_small(&mut file, &path, size, &mut scratch)?.len();
        let notice = file.notice().map(str::to_string);
        file.close()?;
        Ok(First::Read(n, notice))
    });
    let (mut file, size) = match first.map_err(|e| e.into_py(py))? {
        First::Read(n, notice) => {
            let data = PyBytes::new(py, scratch.as_ref().map_or(&[][..], |b| &b[..n]));
            return Ok((data, notice));
        }
        First::Open(file, size) => (*file, size),
    };
    if size == 0 {
        // Empty, or a file whose size says nothing (procfs, sysfs): read to its end.
        let (f, p) = (&mut file, &path);
        let data = wait::run_reporting(py, progress.as_ref(), wait::bytes_of_total, move |c| {
            read::read_to_end(f, p, 0, u64::MAX, c)
        })?
        .map_err(|e| io_err(py, e))?;
        let notice = file.notice().map(str::to_string);
        py.detach(|| file.close()).map_err(|e| io_err(py, e))?;
        return Ok((PyBytes::new(py, &data), notice));
    }
    let data = bytes_filled(py, size, |b| {
        let f = &mut file;
        let p = &path;
        run_sized(py, b.len(), progress.as_ref(), move |c| {
            read::read_into(f, p, b, 0, depth, true, c)
        })?
        .map(|o| o.n)
        .map_err(|e| io_err(py, e))
    })?;
    let notice = file.notice().map(str::to_string);
    py.detach(|| file.close()).map_err(|e| io_err(py, e))?;
    Ok((data, notice))
}

/// What `read_file` did without the GIL: read a small file whole (bytes in the scratch
/// memory, the fallback notice), or opened a file to read otherwise (and its size).
enum First {
    Read(usize, Option<String>),
    Open(Box<dio::DirectFile>, u64),
}

/// An error met without the GIL, made a Python exception once it is held again.
pub enum PyErrLater {
    Open(pagewise_core::Error),
    Io(std::io::Error),
}

impl From<pagewise_core::Error> for PyErrLater {
    fn from(e: pagewise_core::Error) -> Self {
        PyErrLater::Open(e)
    }
}

impl From<std::io::Error> for PyErrLater {
    fn from(e: std::io::Error) -> Self {
        PyErrLater::Io(e)
    }
}

impl PyErrLater {
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            PyErrLater::Open(e) => errors::to_py(py, e),
            PyErrLater::Io(e) => io_err(py, e),
        }
    }
}

/// Reads ranges of the file at `path` (bytes) into memory: `ranges` is `(offset, address,
/// len)` each, the memory at `address` writable for `len` bytes and not overlapping another
/// range's; `depth` requests in flight over all of them. Returns (bytes read into each, the
/// fallback notice).
#[pyfunction]
#[pyo3(signature = (path, cache, ranges, depth=None, progress=None))]
pub fn read_ranges_into(
    py: Python<'_>,
    path: Vec<u8>,
    cache: &str,
    ranges: Vec<(u64, usize, usize)>,
    depth: Option<usize>,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<(Vec<usize>, Option<String>)> {
    let depth = depth_of(depth)?;
    // SAFETY: the Python layer holds an export of each buffer for the whole call.
    let bufs = unsafe { ranges_memory(&ranges) }?;
    let (path, mut file) = open_for_reading(py, path, cache)?;
    let total = bufs.iter().map(|b| b.1.len()).sum();
    let (f, p) = (&mut file, &path);
    let got = run_sized(py, total, progress.as_ref(), move |c| {
        read::read_ranges(f, p, bufs, depth, true, c)
    })?
    .map_err(|e| io_err(py, e))?;
    let notice = file.notice().map(str::to_string);
    py.detach(|| file.close()).map_err(|e| io_err(py, e))?;
    Ok((got, notice))
}

/// The memory of `(offset, address, len)` ranges, refused when two share memory.
///
/// # Safety
/// Each `address..address + len` must be writable memory that nothing else touches while the
/// returned slices live.
unsafe fn ranges_memory<'a>(ranges: &[(u64, usize, usize)]) -> PyResult<Vec<(u64, &'a mut [u8])>> {
    let mut spans: Vec<(usize, usize)> = ranges.iter().map(|&(_, a, l)| (a, l)).collect();
    spans.retain(|s| s.1 > 0);
    spans.sort_unstable();
    let wraps = spans.iter().any(|&(a, l)| a.checked_add(l).is_none());
    if wraps || spans.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(PyValueError::new_err(
            "read_ranges_into: two buffers share memory (each range needs memory of its own)",
        ));
    }
    // SAFETY: the caller's contract; no two slices overlap (checked above).
    Ok(ranges
        .iter()
        .map(|&(o, a, l)| (o, unsafe { caller_memory_mut(a, l) }))
        .collect())
}

/// Runs a read of `total` bytes without the GIL: on this thread when it is small (under
/// [`read::PARALLEL_MIN`], what is read serially anyway) and nobody
/// asked for progress, else on a worker with Ctrl-C and `progress` served.
fn run_sized<T, F>(
    py: Python<'_>,
    total: usize,
    progress: Option<&Bound<'_, PyAny>>,
    verb: F,
) -> PyResult<T>
where
    F: FnOnce(&wait::Control) -> T + Send,
    T: Send,
{
    if progress.is_none() && total < read::PARALLEL_MIN {
        Ok(wait::run_inline(py, verb))
    } else {
        wait::run_reporting(py, progress, wait::bytes_of_total, verb)
    }
}

/// An I/O error of a `DirectFile` as the `pagewise.Error` naming its path and call.
pub fn io_err(py: Python<'_>, e: std::io::Error) -> PyErr {
    match dio::failure(&e) {
        Some(f) => errors::os_error(
            py,
            dio::errno(&e),
            &errors::strerror(&f.source),
            Some(&f.path),
            Some(&f.op.to_string()),
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
            path,
            writable: mode.write,
        })
    }

    /// Reads up to `len` bytes at `offset` into the memory at `address` (fewer only at the
    /// end of the file), with up to `depth` requests in flight for large reads; returns (the
    /// count, whether the memory was misaligned for O_DIRECT).
    #[pyo3(signature = (address, len, offset, depth=None, progress=None))]
    fn read_into(
        &self,
        py: Python<'_>,
        address: usize,
        len: usize,
        offset: u64,
        depth: Option<usize>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<(usize, bool)> {
        let depth = depth_of(depth)?;
        if len == 0 {
            return Ok((0, false));
        }
        // SAFETY: the Python layer passes the address and length of a writable buffer it
        // holds an export of (ctypes from_buffer) for the whole call; nothing else reads or
        // writes it through pagewise meanwhile.
        let buf = unsafe { caller_memory_mut(address, len) };
        let parallel = !self.writable;
        let path = &self.path;
        let r = run_sized(py, len, progress.as_ref(), move |c| {
            // Locked without the GIL (as `with` does).
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.as_mut()
                .map(|f| read::read_into(f, path, buf, offset, depth, parallel, c))
        })?;
        let out = r.ok_or_else(closed)?.map_err(|e| io_err(py, e))?;
        Ok((out.n, out.misaligned))
    }

    /// Reads each `(offset, address, len)` range into its memory, `depth` requests in flight
    /// over all of them; returns the bytes read into each.
    #[pyo3(signature = (ranges, depth=None, progress=None))]
    fn read_ranges_into(
        &self,
        py: Python<'_>,
        ranges: Vec<(u64, usize, usize)>,
        depth: Option<usize>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Vec<usize>> {
        let depth = depth_of(depth)?;
        // SAFETY: the Python layer holds an export of each buffer for the whole call.
        let bufs = unsafe { ranges_memory(&ranges) }?;
        let (parallel, path) = (!self.writable, &self.path);
        let total = bufs.iter().map(|b| b.1.len()).sum();
        let r = run_sized(py, total, progress.as_ref(), move |c| {
            // Locked without the GIL (as `with` does).
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.as_mut()
                .map(|f| read::read_ranges(f, path, bufs, depth, parallel, c))
        })?;
        r.ok_or_else(closed)?.map_err(|e| io_err(py, e))
    }

    /// The bytes at `offset` up to the end of the file (at most `limit` of them), read into
    /// the returned object.
    #[pyo3(signature = (offset, limit=None, depth=None))]
    fn read_bytes<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        limit: Option<u64>,
        depth: Option<usize>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let depth = depth_of(depth)?;
        let size = self.with(py, |f| f.len())?;
        let limit = limit.unwrap_or(u64::MAX);
        let path = &self.path;
        if size == 0 {
            // Empty, or a file whose size says nothing (procfs, sysfs): read to its end.
            let r = wait::run_reporting(py, None, wait::bytes_of_total, move |c| {
                let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                g.as_mut()
                    .map(|f| read::read_to_end(f, path, offset, limit, c))
            })?;
            let data = r.ok_or_else(closed)?.map_err(|e| io_err(py, e))?;
            return Ok(PyBytes::new(py, &data));
        }
        let len = size.saturating_sub(offset).min(limit);
        let parallel = !self.writable;
        bytes_filled(py, len, |b| {
            let r = wait::run_reporting(py, None, wait::bytes_of_total, move |c| {
                let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                g.as_mut()
                    .map(|f| read::read_into(f, path, b, offset, depth, parallel, c))
            })?;
            Ok(r.ok_or_else(closed)?.map_err(|e| io_err(py, e))?.n)
        })
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
