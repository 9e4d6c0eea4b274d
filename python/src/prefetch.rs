//! `pagewise.prefetch`: the files of a list read ahead of the caller, many at once and in the
//! order of their data on the disk, handed over in the caller's order; nothing left cached.
//!
//! Worker threads read files of a window of at most `ahead` files past the one the caller
//! takes next. The window is scheduled in batches: a batch's files are opened, their first
//! extent looked up (FIEMAP; a file system without it keeps the caller's order) and queued in
//! disk order; the workers take the queue from its front. Each file is read with the library's
//! `DirectFile` (O_DIRECT, else its fallbacks, which drop what they brought in) into memory of
//! its own, kept until the caller takes it: memory is bounded by the window's files.

use crate::file::PyErrLater;
use crate::{read, wait};
use pagewise_core::dio::{self, CachePolicy, OpenMode};
use pagewise_core::sys::{self, AlignedBuf};
use pagewise_core::Op;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the caller waits between looks at signals.
const SLICE: Duration = Duration::from_millis(20);
/// The most files a window holds (and worker threads).
pub const MAX_AHEAD: usize = 4096;
/// A file whose size says nothing (procfs) is read up to this much.
const UNSIZED_LIMIT: u64 = 64 << 20;

/// A file read, or why not.
type Got = Result<Vec<u8>, PyErrLater>;

#[derive(Default)]
struct State {
    /// The index the caller takes next.
    next: usize,
    /// Files `[0, scheduled)` have been queued (or read).
    scheduled: usize,
    /// Queued, not started: index and the file opened when it was scheduled.
    queue: VecDeque<(usize, Result<dio::DirectFile, pagewise_core::Error>)>,
    /// Read, not taken yet.
    done: HashMap<usize, Got>,
    /// A worker is opening the next batch.
    batching: bool,
    stop: bool,
}

struct Shared {
    paths: Vec<PathBuf>,
    policy: CachePolicy,
    ahead: usize,
    state: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next batch to open, when there is room for one: at least half a window (or what
    /// is left of the list), or anything while the queue is empty.
    fn batch(&self, st: &State) -> Option<(usize, usize)> {
        let hi = (st.next + self.ahead).min(self.paths.len());
        let room = hi.saturating_sub(st.scheduled);
        let big = room >= (self.ahead / 2).max(1) || hi == self.paths.len();
        (room > 0 && !st.batching && (big || st.queue.is_empty())).then_some((st.scheduled, hi))
    }

    fn worker(&self) {
        let mut scratch = None;
        let mut st = self.lock();
        loop {
            if st.stop {
                return;
            }
            if let Some((lo, hi)) = self.batch(&st) {
                st.scheduled = hi;
                st.batching = true;
                drop(st);
                let batch = self.open_batch(lo, hi);
                st = self.lock();
                st.queue.extend(batch);
                st.batching = false;
                self.cv.notify_all();
                continue;
            }
            if let Some((i, f)) = st.queue.pop_front() {
                drop(st);
                let got = match f {
                    Ok(f) => read_whole(f, &self.paths[i], &mut scratch),
                    Err(e) => Err(e.into()),
                };
                st = self.lock();
                st.done.insert(i, got);
                self.cv.notify_all();
                continue;
            }
            if st.scheduled == self.paths.len() && !st.batching {
                return;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Files `lo..hi` opened, in the order of their first byte on the disk.
    fn open_batch(
        &self,
        lo: usize,
        hi: usize,
    ) -> Vec<(usize, Result<dio::DirectFile, pagewise_core::Error>)> {
        let mut batch: Vec<_> = (lo..hi)
            .map(|i| {
                let f = dio::DirectFile::open(&self.paths[i], OpenMode::read(), self.policy);
                let at = f
                    .as_ref()
                    .ok()
                    .and_then(|f| sys::fiemap(f.as_fd(), 0, 1).ok())
                    .and_then(|e| e.first().map(|e| e.physical))
                    .unwrap_or(u64::MAX);
                (at, i, f)
            })
            .collect();
        batch.sort_by_key(|&(at, i, _)| (at, i));
        batch.into_iter().map(|(_, i, f)| (i, f)).collect()
    }
}

/// The whole file: read straight (O_DIRECT, one request for a small file) into the worker's
/// page-aligned `scratch` (grown as needed, never given up: allocating and zeroing memory per
/// file cost more than reading it), then copied out at its size.
fn read_whole(mut f: dio::DirectFile, path: &Path, scratch: &mut Option<AlignedBuf>) -> Got {
    let ctl = wait::Control::default();
    let size = f.len()?;
    let got = if size == 0 {
        read::read_to_end(&mut f, path, 0, UNSIZED_LIMIT, &ctl)
    } else {
        read_sized(&mut f, path, size, scratch, &ctl)
    };
    let data = got?;
    f.close()?;
    Ok(data)
}

/// A file of `size` bytes (it may have shrunk or grown since: what a read gives up to `size`).
fn read_sized(
    f: &mut dio::DirectFile,
    path: &Path,
    size: u64,
    scratch: &mut Option<AlignedBuf>,
    ctl: &wait::Control,
) -> io::Result<Vec<u8>> {
    let nomem = |e: io::Error| dio::DioError::wrap(path.to_path_buf(), Op::PosixMemalign, e);
    let enomem = || nomem(io::Error::from_raw_os_error(libc::ENOMEM));
    let mut out = Vec::new();
    if size <= read::PARALLEL_MIN as u64 {
        let data = read::read_small(f, path, size, scratch)?;
        out.try_reserve_exact(data.len()).map_err(|_| enomem())?;
        out.extend_from_slice(data);
        return Ok(out);
    }
    let len = usize::try_from(size).map_err(|_| enomem())?;
    out.try_reserve_exact(len).map_err(|_| enomem())?;
    out.resize(len, 0);
    let n = read::read_into(f, path, &mut out, 0, read::DEFAULT_DEPTH, true, ctl)?.n;
    out.truncate(n);
    Ok(out)
}

/// Files read ahead (`pagewise.prefetch`): `next()` gives the next file's bytes in the order
/// of the list.
#[pyclass(module = "pagewise._pagewise", frozen)]
pub struct Prefetch {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

#[pymethods]
impl Prefetch {
    /// Starts `depth` workers reading `paths` (bytes each), at most `ahead` files past the
    /// one taken next, with the `cache` policy.
    #[new]
    fn new(paths: Vec<Vec<u8>>, cache: &str, ahead: usize, depth: usize) -> PyResult<Prefetch> {
        if !(1..=MAX_AHEAD).contains(&ahead) {
            return Err(PyValueError::new_err(format!(
                "ahead: {ahead} is not a number of files (1 to {MAX_AHEAD})"
            )));
        }
        if !(1..=read::MAX_DEPTH).contains(&depth) {
            return Err(PyValueError::new_err(format!(
                "depth: {depth} is not a number of reads in flight (1 to {})",
                read::MAX_DEPTH
            )));
        }
        let policy: CachePolicy = cache
            .parse()
            .map_err(|e: pagewise_core::Error| PyValueError::new_err(e.to_string()))?;
        let shared = Arc::new(Shared {
            paths: paths.into_iter().map(crate::convert::path).collect(),
            policy,
            ahead,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let mut workers = Vec::new();
        for _ in 0..depth.min(ahead) {
            let s = Arc::clone(&shared);
            let started = std::thread::Builder::new()
                .name("pagewise-prefetch".into())
                .spawn(move || s.worker());
            match started {
                Ok(h) => workers.push(h),
                Err(e) if workers.is_empty() => {
                    return Err(PyValueError::new_err(format!(
                        "prefetch: cannot start a thread (pthread_create): {e}"
                    )))
                }
                Err(_) => break,
            }
        }
        Ok(Prefetch {
            shared,
            workers: Mutex::new(workers),
        })
    }

    /// The next file's bytes (None past the last); its error (`pagewise.Error`, naming the
    /// path and the call) when it could not be read. Waits without the GIL; Ctrl-C raises
    /// `KeyboardInterrupt`.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let s = &self.shared;
        let i = {
            let st = s.lock();
            if st.stop || st.next >= s.paths.len() {
                return Ok(None);
            }
            st.next
        };
        let got = loop {
            let got = py.detach(|| {
                let st = s.lock();
                let (mut st, _) = s
                    .cv
                    .wait_timeout_while(st, SLICE, |st| !st.done.contains_key(&i))
                    .unwrap_or_else(|p| p.into_inner());
                let got = st.done.remove(&i);
                if got.is_some() {
                    st.next = i + 1;
                    s.cv.notify_all();
                }
                got
            });
            if let Some(g) = got {
                break g;
            }
            if let Err(e) = py.check_signals() {
                self.stop(py);
                return Err(e);
            }
        };
        match got {
            Ok(v) => Ok(Some(PyBytes::new(py, &v))),
            Err(e) => Err(e.into_py(py)),
        }
    }

    /// Stops the workers (after the reads in flight) and frees what was read ahead.
    fn close(&self, py: Python<'_>) {
        self.stop(py);
    }
}

impl Prefetch {
    fn stop(&self, py: Python<'_>) {
        {
            let mut st = self.shared.lock();
            st.stop = true;
            st.done.clear();
            st.queue.clear();
            self.shared.cv.notify_all();
        }
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        py.detach(|| {
            for w in workers {
                let _ = w.join();
            }
        });
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.stop = true;
        self.shared.cv.notify_all();
        // The workers end after their read; they hold their own reference to what they share.
    }
}
