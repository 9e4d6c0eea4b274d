//! The trace verbs (`replay`, `evict_trace`, `load_trace`, `record`): as [`crate::verbs`],
//! each builds the library's options from the Python arguments and runs the call on a worker
//! thread; no logic of their own.

use crate::convert::{self, report};
use crate::errors;
use crate::trace::Trace;
use crate::verbs::run_watched;
use crate::wait;
use pagewise_core::evict::TraceEvictOptions;
use pagewise_core::load::{self as core_load, TraceLoadOptions};
use pagewise_core::replay::{CompareOptions, Order, ReplayOptions};
use pagewise_core::trace::{FollowOptions, RecordOptions};
use pagewise_core::{sys, Observer};
use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::atomic::Ordering;

/// `replay`'s options beside the trace, named like the CLI's flags.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct ReplayArgs<'py> {
    order: String,
    direct: bool,
    merge_gap: Option<Bound<'py, PyAny>>,
    depth: Option<usize>,
    max_request: Option<Bound<'py, PyAny>>,
    compare: bool,
    runs: Option<usize>,
}

/// `replay(trace, args, progress)`: one report, or with `compare` a list (one per order).
#[pyfunction]
#[pyo3(signature = (trace, args, progress=None))]
pub fn replay<'py>(
    py: Python<'py>,
    trace: &Trace,
    args: ReplayArgs<'py>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let orders = [Order::Recorded, Order::File, Order::Disk];
    let order = orders
        .into_iter()
        .find(|o| o.name() == args.order)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "order: {:?} is not one of 'recorded', 'file', 'disk'",
                args.order
            ))
        })?;
    // None: the library's defaults.
    let defaults = ReplayOptions::default();
    let merge_gap = match &args.merge_gap {
        Some(g) => convert::size("merge_gap", g)?,
        None => defaults.merge_gap,
    };
    let max_request = match &args.max_request {
        Some(m) => convert::size("max_request", m)?,
        None => defaults.max_request,
    };
    let max_request = convert::at_most("max_request", max_request, convert::MAX_REQUEST)?;
    if let Some(d) = args.depth {
        convert::at_most("depth", d, convert::MAX_DEPTH)?;
    }
    let trace = trace.inner.as_ref().clone();
    if args.compare {
        let opts = CompareOptions {
            trace,
            direct: args.direct,
            merge_gap,
            max_request,
            runs: args.runs.unwrap_or(CompareOptions::default().runs),
        };
        let r = run_watched(py, progress.as_ref(), |o| {
            pagewise_core::replay::compare(&opts, o)
        })?;
        return report(py, &r);
    }
    let opts = ReplayOptions {
        trace,
        order,
        direct: args.direct,
        merge_gap,
        depth: args.depth,
        max_request,
    };
    let r = run_watched(py, progress.as_ref(), |o| {
        pagewise_core::replay::replay(&opts, o)
    })?;
    report(py, &r)
}

/// `evict_trace(trace, dry_run, progress)`: `evict --trace`.
#[pyfunction]
#[pyo3(signature = (trace, dry_run, progress=None))]
pub fn evict_trace<'py>(
    py: Python<'py>,
    trace: &Trace,
    dry_run: bool,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = TraceEvictOptions {
        trace: trace.inner.as_ref().clone(),
        dry_run,
    };
    let r = run_watched(py, progress.as_ref(), |o| {
        pagewise_core::evict::evict_trace(&opts, o)
    })?;
    report(py, &r)
}

/// `load_trace(trace, depth, progress)`: `load --trace` (`depth` None: the library's default).
#[pyfunction]
#[pyo3(signature = (trace, depth, progress=None))]
pub fn load_trace<'py>(
    py: Python<'py>,
    trace: &Trace,
    depth: Option<usize>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let depth = depth.unwrap_or(core_load::DEFAULT_TRACE_DEPTH);
    let opts = TraceLoadOptions {
        trace: trace.inner.as_ref().clone(),
        depth: convert::at_most("depth", depth, convert::MAX_DEPTH)?,
    };
    let r = run_watched(py, progress.as_ref(), |o| {
        pagewise_core::load::load_trace(&opts, o)
    })?;
    report(py, &r)
}

/// `record(command, faults, buffer_kb, backend)`: `(report without its trace, Trace)`
/// (`buffer_kb` None: the library's default).
///
/// `record` makes this process survive SIGINT, SIGTERM, SIGHUP and SIGQUIT while the command
/// runs, forwarding those sent to it alone to the command (the terminal's reach the command
/// anyway), as the CLI does. Python's own handlers are put back when the command has ended;
/// if one of those signals came meanwhile, `KeyboardInterrupt` is raised then.
#[pyfunction]
#[pyo3(signature = (command, faults, buffer_kb, backend))]
pub fn record<'py>(
    py: Python<'py>,
    command: Vec<Vec<u8>>,
    faults: bool,
    buffer_kb: Option<u64>,
    backend: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    let opts = RecordOptions {
        command: command
            .into_iter()
            .map(|a| convert::path(a).into_os_string())
            .collect(),
        faults,
        follow: FollowOptions {
            buffer_kb: buffer_kb.unwrap_or(pagewise_core::trace::DEFAULT_BUFFER_KB),
            backend: convert::backend(backend)?,
            ..FollowOptions::default()
        },
        quiet: false,
    };
    opts.validate().map_err(|e| errors::to_py(py, e))?;
    let saved = sys::SignalActions::save(&sys::FORWARDED_SIGNALS);
    sys::interrupt_flag().store(false, Ordering::SeqCst);
    let r = wait::run(py, None, |_| {
        pagewise_core::trace::record(&opts, &SignalFlag)
    });
    saved.restore();
    let r = r?.map_err(|e| errors::to_py(py, e))?;
    if sys::interrupt_flag().swap(false, Ordering::SeqCst) {
        return Err(PyKeyboardInterrupt::new_err(()));
    }
    let mut v = convert::to_value(&r)?;
    if let Some(m) = v.as_object_mut() {
        m.remove("trace");
    }
    let trace = Trace::new(r.trace);
    PyTuple::new(
        py,
        [convert::to_py(py, &v)?, trace.into_pyobject(py)?.into_any()],
    )
}

/// `record`'s observer: cancelled once one of the signals it survives was received (the
/// report's `interrupted`), as the CLI's.
struct SignalFlag;

impl Observer for SignalFlag {
    fn cancelled(&self) -> bool {
        sys::interrupt_flag().load(Ordering::SeqCst)
    }
}
