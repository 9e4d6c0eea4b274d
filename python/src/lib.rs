//! `pagewise._pagewise`: the Python binding's extension module. Thin: every function builds
//! the library's options, runs the library call (without the GIL, cancellable by Ctrl-C) and
//! returns its report as the CLI's JSON document; the `pagewise` package wraps those in typed
//! report classes.

mod bench;
mod buffer;
mod convert;
mod dropping;
mod errors;
mod file;
mod prefetch;
mod read;
mod trace;
mod trace_verbs;
mod verbs;
mod wait;

use pyo3::prelude::*;

/// The library's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// What the extension was built from: (line, version, commit, build date, target); the line is
/// the one `pagewise --version` and libpagewise's `pagewise_build_info()` print.
#[pyfunction]
fn build_info() -> (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
) {
    (
        env!("PAGEWISE_BUILD_INFO"),
        env!("CARGO_PKG_VERSION"),
        env!("PAGEWISE_COMMIT"),
        env!("PAGEWISE_BUILD_DATE"),
        env!("PAGEWISE_TARGET"),
    )
}

/// The kernel's page size, bytes.
#[pyfunction]
fn page_size() -> u64 {
    pagewise_core::sys::page_size()
}

#[pymodule]
fn _pagewise(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(page_size, m)?)?;
    m.add_function(wrap_pyfunction!(build_info, m)?)?;
    m.add_function(wrap_pyfunction!(verbs::stat, m)?)?;
    m.add_function(wrap_pyfunction!(verbs::evict, m)?)?;
    m.add_function(wrap_pyfunction!(verbs::load, m)?)?;
    m.add_function(wrap_pyfunction!(verbs::copy, m)?)?;
    m.add_function(wrap_pyfunction!(verbs::cgroups, m)?)?;
    m.add_function(wrap_pyfunction!(verbs::stat_by_cgroup, m)?)?;
    m.add_function(wrap_pyfunction!(trace_verbs::replay, m)?)?;
    m.add_function(wrap_pyfunction!(trace_verbs::evict_trace, m)?)?;
    m.add_function(wrap_pyfunction!(trace_verbs::load_trace, m)?)?;
    m.add_function(wrap_pyfunction!(trace_verbs::record, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench, m)?)?;
    m.add_function(wrap_pyfunction!(verbs::defaults, m)?)?;
    m.add_class::<verbs::Locks>()?;
    m.add_class::<trace::Trace>()?;
    m.add_class::<dropping::Dropping>()?;
    m.add_class::<buffer::AlignedAlloc>()?;
    m.add_class::<file::DirectFile>()?;
    m.add_function(wrap_pyfunction!(file::read_file_into, m)?)?;
    m.add_function(wrap_pyfunction!(file::read_file, m)?)?;
    m.add_function(wrap_pyfunction!(file::read_ranges_into, m)?)?;
    m.add_class::<prefetch::Prefetch>()?;
    Ok(())
}
