//! The memory behind `pagewise.aligned_buffer`: a `sys::AlignedBuf`, whose address the Python
//! layer wraps in a writable buffer-protocol object that keeps this owner alive.
//!
//! (A pyo3 class cannot export the buffer protocol itself under the stable ABI before Python
//! 3.11, and the wheel targets 3.9.)

use pagewise_core::sys::{AlignedBuf, MAX_ALIGN};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use std::sync::Mutex;

/// An aligned, zeroed allocation, freed when collected.
#[pyclass(module = "pagewise._pagewise", frozen)]
pub struct AlignedAlloc {
    /// Owned here (the mutex only makes the class `Sync`; the bytes are reached through
    /// `address` by the buffer object the Python layer makes).
    _buf: Mutex<AlignedBuf>,
    address: usize,
    len: usize,
}

#[pymethods]
impl AlignedAlloc {
    /// `len` bytes (at least 1) whose start is aligned to `align` bytes (a power of two of
    /// at most 1 GiB, else ValueError); MemoryError when they cannot be had.
    #[new]
    fn new(len: usize, align: usize) -> PyResult<AlignedAlloc> {
        if !align.is_power_of_two() || align > MAX_ALIGN {
            return Err(PyValueError::new_err(format!(
                "align: {align} is not a power of two of at most {MAX_ALIGN} (1 GiB)"
            )));
        }
        let mut buf = AlignedBuf::try_alloc(len, align)
            .map_err(|e| PyMemoryError::new_err(format!("aligned_buffer: {e}")))?;
        let address = buf.as_mut_ptr() as usize;
        Ok(AlignedAlloc {
            _buf: Mutex::new(buf),
            address,
            len: len.max(1),
        })
    }
    /// Address of the first byte.
    #[getter]
    fn address(&self) -> usize {
        self.address
    }
    /// Length in bytes.
    fn __len__(&self) -> usize {
        self.len
    }
}
