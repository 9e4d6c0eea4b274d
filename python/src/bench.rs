//! `bench`: the library's options from the Python arguments, the call on a worker thread (as
//! [`crate::verbs`]); no logic of its own. Like `record`, it keeps Python's signal handlers
//! around the call (learning a read set records the command, which installs pagewise's) and
//! raises `KeyboardInterrupt` when SIGINT or SIGTERM came meanwhile.

use crate::convert::{self, report};
use crate::errors;
use crate::trace::Trace;
use crate::verbs::run_watched;
use pagewise_core::bench::{self as core_bench, BenchCommand, BenchOptions, State};
use pagewise_core::{sys, Observer};
use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use std::sync::atomic::Ordering;

/// `bench`'s options beside the commands, named like the CLI's flags (None: the library's
/// default).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct BenchArgs {
    states: Vec<String>,
    runs: Option<usize>,
    warmup: usize,
    min_time: f64,
    keep: Vec<Vec<u8>>,
    prepare: Option<String>,
    conclude: Option<String>,
    recordings: Option<u32>,
    seed: u64,
    ignore_failure: bool,
    show_output: bool,
}

/// A state by its CLI name.
fn state(name: &str) -> PyResult<State> {
    [State::Hot, State::Cold, State::Preloaded, State::ColdAll]
        .into_iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "states: {name:?} is not one of 'hot', 'cold', 'preloaded', 'cold-all'"
            ))
        })
}

/// The caller's observer, also cancelled by pagewise's own SIGINT/SIGTERM flag (installed
/// while a recording runs, and for the runs).
struct OrSignal<'a>(&'a dyn Observer);

impl Observer for OrSignal<'_> {
    fn progress(&self, files: u64, bytes: u64) {
        self.0.progress(files, bytes);
    }
    fn planned(&self, files: u64, bytes: u64) {
        self.0.planned(files, bytes);
    }
    fn cancelled(&self) -> bool {
        self.0.cancelled() || sys::interrupt_flag().load(Ordering::SeqCst)
    }
}

/// One command: its name, its arguments (bytes) and its read set when given.
type Command<'py> = (String, Vec<Vec<u8>>, Option<PyRef<'py, Trace>>);

/// `bench(commands, args, progress)`: the report as the CLI's `--json` prints it.
#[pyfunction]
#[pyo3(signature = (commands, args, progress=None))]
pub fn bench<'py>(
    py: Python<'py>,
    commands: Vec<Command<'py>>,
    args: BenchArgs,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = BenchOptions {
        commands: commands
            .into_iter()
            .map(|(name, argv, trace)| BenchCommand {
                name,
                argv: argv
                    .into_iter()
                    .map(|a| convert::path(a).into_os_string())
                    .collect(),
                trace: trace.map(|t| t.inner.as_ref().clone()),
            })
            .collect(),
        states: args
            .states
            .iter()
            .map(|s| state(s))
            .collect::<PyResult<_>>()?,
        runs: args.runs.unwrap_or(core_bench::DEFAULT_RUNS),
        warmup: args.warmup,
        min_time_s: args.min_time,
        keep: convert::paths(args.keep),
        prepare: args.prepare,
        conclude: args.conclude,
        recordings: args.recordings.unwrap_or(core_bench::DEFAULT_RECORDINGS),
        seed: args.seed,
        ignore_failure: args.ignore_failure,
        show_output: args.show_output,
    };
    opts.validate().map_err(|e| errors::to_py(py, e))?;
    let saved = sys::SignalActions::save(&sys::FORWARDED_SIGNALS);
    sys::interrupt_flag().store(false, Ordering::SeqCst);
    let r = run_watched(py, progress.as_ref(), |o| {
        core_bench::bench(&opts, &OrSignal(o))
    });
    saved.restore();
    let r = r?;
    if sys::interrupt_flag().swap(false, Ordering::SeqCst) {
        return Err(PyKeyboardInterrupt::new_err(()));
    }
    report(py, &r)
}
