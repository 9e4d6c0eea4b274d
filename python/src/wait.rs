//! Running a verb without holding the GIL, and with Ctrl-C honoured.
//!
//! The verb runs on a worker thread. The calling thread waits for it in short slices with the
//! GIL released; between slices it runs Python's signal handlers (`check_signals`), so a
//! Ctrl-C raises `KeyboardInterrupt` in the caller: the verb is then told to stop through its
//! observer's `cancelled()` (the same cancellation the CLI's SIGINT gives), the calling thread
//! waits for it to stop (what it finished is complete: a copy leaves no half file), and the
//! `KeyboardInterrupt` is raised. The progress callback, when given, is called from the calling
//! thread too, with the GIL: never from the verb's workers.

use pagewise_core::Progress;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long the calling thread waits between looks at signals (Ctrl-C latency, beside the
/// verb's own time to stop).
const SLICE: Duration = Duration::from_millis(20);
/// How often the progress callback is called at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// What the worker hands the verb: the cancellation flag and the progress counters an
/// observer reports to.
#[derive(Default)]
pub struct Control {
    /// Set when the caller was interrupted (or its progress callback raised).
    pub cancel: AtomicBool,
    /// Files and bytes done, as the verb reports them.
    pub progress: Progress,
}

/// Set by the worker when the verb returned.
#[derive(Default)]
struct Done {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Done {
    fn set(&self) {
        *self.done.lock().unwrap() = true;
        self.cv.notify_all();
    }
    /// Waits up to `t`; true once the worker is done.
    fn wait(&self, t: Duration) -> bool {
        let g = self.done.lock().unwrap();
        let (g, _) = self.cv.wait_timeout_while(g, t, |d| !*d).unwrap();
        *g
    }
}

/// Runs `verb` on a worker thread (it gets the [`Control`] to build its observer from) while
/// the calling thread waits without the GIL, runs signal handlers and calls `progress`.
/// A `KeyboardInterrupt` (or any exception from a signal handler or from `progress`) cancels
/// the verb and is raised once the verb has stopped.
pub fn run<T, F>(py: Python<'_>, progress: Option<&Bound<'_, PyAny>>, verb: F) -> PyResult<T>
where
    F: FnOnce(&Control) -> T + Send,
    T: Send,
{
    run_reporting(py, progress, files_and_bytes, verb)
}

/// Runs short work on the calling thread with the GIL released: no worker thread to start
/// (starting one, 30-60 µs, is more than reading a small file takes) and no look at signals
/// while it runs (a Ctrl-C is seen when it returns, in Python's next check).
pub fn run_inline<T, F>(py: Python<'_>, verb: F) -> T
where
    F: FnOnce(&Control) -> T + Send,
    T: Send,
{
    let control = Control::default();
    py.detach(|| verb(&control))
}

/// `progress(files, bytes)`: what the verbs report.
fn files_and_bytes(p: &Progress) -> (u64, u64) {
    (
        p.files.load(Ordering::Relaxed),
        p.bytes.load(Ordering::Relaxed),
    )
}

/// `progress(bytes, total_bytes)`: what the reads report.
pub fn bytes_of_total(p: &Progress) -> (u64, u64) {
    (
        p.bytes.load(Ordering::Relaxed),
        p.total_bytes.load(Ordering::Relaxed),
    )
}

/// [`run`], with the progress callback called with `args` of the counters.
pub fn run_reporting<T, F>(
    py: Python<'_>,
    progress: Option<&Bound<'_, PyAny>>,
    args: fn(&Progress) -> (u64, u64),
    verb: F,
) -> PyResult<T>
where
    F: FnOnce(&Control) -> T + Send,
    T: Send,
{
    let control = Control::default();
    let done = Done::default();
    let mut raised: Option<PyErr> = None;
    let result = std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("pagewise".into())
            .spawn_scoped(s, || {
                // Sets `done` even when the verb panics.
                struct SetOnDrop<'a>(&'a Done);
                impl Drop for SetOnDrop<'_> {
                    fn drop(&mut self) {
                        self.0.set();
                    }
                }
                let _guard = SetOnDrop(&done);
                verb(&control)
            })
            .map_err(|e| {
                PyRuntimeError::new_err(format!("pagewise: cannot start a thread: {e}"))
            })?;
        let mut last_progress = Instant::now();
        loop {
            if py.detach(|| done.wait(SLICE)) {
                break;
            }
            if raised.is_some() {
                continue;
            }
            let mut stop = py.check_signals().err();
            if stop.is_none() && last_progress.elapsed() >= PROGRESS_EVERY {
                last_progress = Instant::now();
                stop = call_progress(progress, args, &control.progress).err();
            }
            if let Some(e) = stop {
                control.cancel.store(true, Ordering::Relaxed);
                raised = Some(e);
            }
        }
        worker.join().map_err(|_| {
            PyRuntimeError::new_err("pagewise: the verb panicked (a bug: please report it)")
        })
    })?;
    if let Some(e) = raised {
        return Err(e);
    }
    call_progress(progress, args, &control.progress)?;
    Ok(result)
}

/// Calls `progress(*args(counters))`, when there is a callback.
fn call_progress(
    progress: Option<&Bound<'_, PyAny>>,
    args: fn(&Progress) -> (u64, u64),
    p: &Progress,
) -> PyResult<()> {
    if let Some(cb) = progress {
        cb.call1(args(p))?;
    }
    Ok(())
}
