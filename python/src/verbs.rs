//! The verbs: each builds the library's options from the Python arguments, runs the library
//! call on a worker thread ([`wait::run`]) and returns its report as the CLI's `--json`
//! document (a dict the Python layer wraps in a report class). No logic of their own.

use crate::convert::{self, report, WalkArgs};
use crate::errors;
use crate::wait::{self, Control};
use pagewise_core::cgroup::CgroupsOptions;
use pagewise_core::copy::limits::parse_io_priority;
use pagewise_core::copy::{
    CopyItem, CopyOptions, Dereference, Existing, Filters, RuleKind, Strategy,
};
use pagewise_core::evict::EvictOptions;
use pagewise_core::load::{self as core_load, LoadOptions, LockSet};
use pagewise_core::replay::{CompareOptions, ReplayOptions};
use pagewise_core::stat::{ChargeOptions, FileCharge, FileStat, StatOptions};
use pagewise_core::{FileResult, Observer, Watch};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::Mutex;

/// An observer reporting progress to the [`Control`] and stopping when it is cancelled.
pub(crate) fn watch(c: &Control) -> Watch<'_> {
    Watch {
        progress: Some(&c.progress),
        on_file: None,
        cancel: Some(&c.cancel),
    }
}

/// Runs the library call `verb` on a worker thread ([`wait::run`]) with the [`watch`]
/// observer of its [`Control`]; its error becomes the Python exception ([`errors::to_py`]).
pub(crate) fn run_watched<'py, T: Send>(
    py: Python<'py>,
    progress: Option<&Bound<'py, PyAny>>,
    verb: impl FnOnce(&dyn Observer) -> Result<T, pagewise_core::Error> + Send,
) -> PyResult<T> {
    wait::run(py, progress, |c| verb(&watch(c)))?.map_err(|e| errors::to_py(py, e))
}

/// `stat(roots, walk, files, progress)`: the report; with `files`, each file's line in a
/// `files` list sorted by path, as `pagewise stat --json -l` adds it.
#[pyfunction]
#[pyo3(signature = (roots, walk, files, progress=None))]
pub fn stat<'py>(
    py: Python<'py>,
    roots: Vec<Vec<u8>>,
    walk: WalkArgs<'py>,
    files: bool,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = StatOptions {
        roots: convert::paths(roots),
        walk: walk.walk(pagewise_core::walk::default_threads())?,
        range: walk.range()?,
        method: walk.method()?,
        map_cells: 0,
        files,
    };
    let keep: Mutex<Vec<FileStat>> = Mutex::default();
    let r = wait::run(py, progress.as_ref(), |c| {
        let observer = Watch {
            progress: Some(&c.progress),
            on_file: Some(|r: FileResult| {
                if let FileResult::Stat(f) = r {
                    keep.lock().unwrap().push(f);
                }
            }),
            cancel: Some(&c.cancel),
        };
        pagewise_core::stat::stat(&opts, &observer)
    })?
    .map_err(|e| errors::to_py(py, e))?;
    let mut v = convert::to_value(&r)?;
    if files {
        let mut list = keep.into_inner().unwrap();
        list.sort_by(|a, b| a.path.cmp(&b.path));
        v["files"] = convert::to_value(&list)?;
    }
    convert::to_py(py, &v)
}

/// `evict(roots, walk, dry_run, owned, no_sync, why, progress)`.
#[pyfunction]
#[pyo3(signature = (roots, walk, dry_run, owned, no_sync, why, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn evict<'py>(
    py: Python<'py>,
    roots: Vec<Vec<u8>>,
    walk: WalkArgs<'py>,
    dry_run: bool,
    owned: bool,
    no_sync: bool,
    why: bool,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = EvictOptions {
        roots: convert::paths(roots),
        walk: walk.walk(pagewise_core::evict::default_threads())?,
        range: walk.range()?,
        method: walk.method()?,
        sync: !no_sync,
        owned,
        dry_run,
        why,
        files: false,
    };
    let r = run_watched(py, progress.as_ref(), |o| {
        pagewise_core::evict::evict(&opts, o)
    })?;
    report(py, &r)
}

/// The pages `load(lock=True)` keeps locked: released by [`Locks::release`] or when the
/// object is collected.
#[pyclass(module = "pagewise._pagewise", frozen)]
pub struct Locks {
    set: Mutex<Option<LockSet>>,
}

#[pymethods]
impl Locks {
    /// Unlocks and unmaps the pages (idempotent).
    fn release(&self, py: Python<'_>) {
        let set = self.set.lock().unwrap().take();
        // munmap of many mappings can take a while: without the GIL.
        py.detach(move || drop(set));
    }
    /// True while the pages are held.
    #[getter]
    fn held(&self) -> bool {
        self.set.lock().unwrap().is_some()
    }
    /// Locked mappings held (one per file or range).
    fn __len__(&self) -> usize {
        self.set.lock().unwrap().as_ref().map_or(0, LockSet::len)
    }
}

/// `load(roots, walk, lock, batch, window, depth, progress)`: `(report, locks)`, `locks`
/// None without `lock`. `batch`, `window`, `depth`: None for the library's defaults.
#[pyfunction]
#[pyo3(signature = (roots, walk, lock, batch, window, depth, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn load<'py>(
    py: Python<'py>,
    roots: Vec<Vec<u8>>,
    walk: WalkArgs<'py>,
    lock: bool,
    batch: Option<usize>,
    window: Option<Bound<'py, PyAny>>,
    depth: Option<usize>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let window = match window {
        Some(w) => convert::size("window", &w)?,
        None => core_load::DEFAULT_WINDOW,
    };
    let depth = depth.unwrap_or(core_load::DEFAULT_DEPTH);
    let opts = LoadOptions {
        roots: convert::paths(roots),
        walk: walk.walk(pagewise_core::load::default_threads())?,
        range: walk.range()?,
        method: walk.method()?,
        lock,
        batch_files: batch.unwrap_or(core_load::DEFAULT_BATCH_FILES),
        window,
        depth: convert::at_most("depth", depth, convert::MAX_DEPTH)?,
    };
    let mut r = run_watched(py, progress.as_ref(), |o| {
        pagewise_core::load::load(&opts, o)
    })?;
    let locks = std::mem::take(&mut r.locks);
    let dict = report(py, &r)?;
    let held = if lock {
        Some(Locks {
            set: Mutex::new(Some(locks)),
        })
    } else {
        None
    };
    PyTuple::new(py, [dict, held.into_pyobject(py)?.into_any()])
}

/// `copy`'s options beside sources and destination, named like the CLI's flags.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct CopyArgs<'py> {
    cache: String,
    preserve: bool,
    archive: bool,
    no_target_directory: bool,
    update: bool,
    no_clobber: bool,
    checksum: bool,
    dry_run: bool,
    delete: bool,
    dereference: bool,
    dereference_command_line: bool,
    no_dereference: bool,
    itemize_changes: bool,
    no_preallocate: bool,
    named_temp: bool,
    partial: bool,
    fsync: bool,
    verify: bool,
    threads: Option<usize>,
    depth: Option<usize>,
    chunk: Option<Bound<'py, PyAny>>,
    filters: Vec<Vec<u8>>,
    exclude: Vec<Vec<u8>>,
    delete_excluded: bool,
    one_file_system: bool,
    max_size: Option<Bound<'py, PyAny>>,
    min_size: Option<Bound<'py, PyAny>>,
    bwlimit: Option<Bound<'py, PyAny>>,
    ionice: Option<String>,
}

impl CopyArgs<'_> {
    /// rsync's rules: `filters` (rsync --filter rules) in order, then `exclude` patterns.
    fn filters(&self) -> PyResult<Filters> {
        let mut f = Filters::new(self.delete_excluded);
        for r in &self.filters {
            f.add(RuleKind::Filter, r).map_err(value_error)?;
        }
        for p in &self.exclude {
            f.add(RuleKind::Exclude, p).map_err(value_error)?;
        }
        Ok(f)
    }

    /// An optional size argument (`max_size`, `bwlimit`): a number of bytes or "50M".
    fn size(what: &str, v: &Option<Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
        v.as_ref().map(|v| convert::size(what, v)).transpose()
    }
    /// What to do with existing destinations: the library's rule (`-c` over `-u` over
    /// `--no-clobber`, which goes with neither).
    fn existing(&self) -> PyResult<Existing> {
        Existing::checked_flags(self.checksum, self.update, self.no_clobber).map_err(value_error)
    }

    /// Which symlinks are followed: at most one of `dereference` (-L),
    /// `dereference_command_line` (-H) and `no_dereference` (-P, the default).
    fn dereference(&self) -> PyResult<Dereference> {
        Dereference::checked_flags(
            self.dereference,
            self.dereference_command_line,
            self.no_dereference,
        )
        .map_err(value_error)
    }
}

/// A refused option as ValueError, its message alone (the option's names are in it).
fn value_error(e: pagewise_core::Error) -> PyErr {
    match e {
        pagewise_core::Error::Invalid { message, .. } => PyValueError::new_err(message),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// `copy(sources, dest, args, progress)`: the report; with `itemize_changes` or `dry_run`,
/// every entry's outcome in an `items` list sorted by path (what `--json-lines` streams).
#[pyfunction]
#[pyo3(signature = (sources, dest, args, progress=None))]
pub fn copy<'py>(
    py: Python<'py>,
    sources: Vec<Vec<u8>>,
    dest: Vec<u8>,
    args: CopyArgs<'py>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let strategies = [
        Strategy::Auto,
        Strategy::Dontcache,
        Strategy::Direct,
        Strategy::DropBehind,
        Strategy::Buffered,
    ];
    let strategy = strategies
        .into_iter()
        .find(|s| s.name() == args.cache)
        .ok_or_else(|| {
            let names: Vec<_> = strategies.iter().map(|s| s.name()).collect();
            PyValueError::new_err(format!(
                "cache: {:?} is not one of {}",
                args.cache,
                names.join(", ")
            ))
        })?;
    // None: the library's defaults.
    let defaults = CopyOptions::default();
    let chunk = match &args.chunk {
        Some(c) => convert::size("chunk", c)?,
        None => defaults.chunk as u64,
    };
    let threads = args.threads.unwrap_or(defaults.threads);
    let depth = args.depth.unwrap_or(defaults.depth);
    let items = args.itemize_changes || args.dry_run;
    let opts = CopyOptions {
        sources: convert::paths(sources),
        dest: convert::path(dest),
        strategy,
        // -a is -p here as on the CLI: trees are always recursive, special files always
        // recreated, and symlinks not followed unless asked.
        preserve: match args.preserve || args.archive {
            true => pagewise_core::copy::Preserve::ALL,
            false => pagewise_core::copy::Preserve::NONE,
        },
        dereference: args.dereference()?,
        no_target_directory: args.no_target_directory,
        existing: args.existing()?,
        skip_newer: args.update,
        dry_run: args.dry_run,
        items,
        preallocate: !args.no_preallocate,
        fsync: args.fsync,
        verify: args.verify,
        threads: convert::at_most("threads", threads, convert::MAX_THREADS)?,
        depth: convert::at_most("depth", depth, convert::MAX_DEPTH)?,
        chunk: convert::at_most("chunk", chunk, convert::MAX_REQUEST)? as usize,
        named_temp: args.named_temp,
        partial: args.partial,
        filters: args.filters()?,
        one_file_system: args.one_file_system,
        max_size: CopyArgs::size("max_size", &args.max_size)?,
        min_size: CopyArgs::size("min_size", &args.min_size)?,
        bwlimit: CopyArgs::size("bwlimit", &args.bwlimit)?.filter(|&r| r > 0),
        io_priority: args
            .ionice
            .as_deref()
            .map(parse_io_priority)
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("ionice: {e}")))?,
        delete: args.delete || args.delete_excluded,
        ..CopyOptions::default()
    };
    let keep: Mutex<Vec<CopyItem>> = Mutex::default();
    let r = wait::run(py, progress.as_ref(), |c| {
        let observer = Watch {
            progress: Some(&c.progress),
            on_file: Some(|r: FileResult| {
                if let FileResult::Copy(item) = r {
                    keep.lock().unwrap_or_else(|p| p.into_inner()).push(item);
                }
            }),
            cancel: Some(&c.cancel),
        };
        pagewise_core::copy::copy(&opts, &observer)
    })?
    .map_err(|e| errors::to_py(py, e))?;
    let mut v = convert::to_value(&r)?;
    if items {
        let mut list = keep.into_inner().unwrap_or_else(|p| p.into_inner());
        list.sort_by(|a, b| a.path.cmp(&b.path));
        v["items"] = convert::to_value(&list)?;
    }
    convert::to_py(py, &v)
}

/// The orders `cgroups(sort=...)` takes, as the CLI's `--sort`: tree order (parents before
/// children), else most first by that figure.
/// `cgroups(root, own, max_depth, sort, top, all_levels)`: the report, its groups ordered by
/// `sort` (tree order by default, `file` with `top`; a ranking keeps leaf groups unless
/// `all_levels`) and cut to `top`, as `pagewise cgroups` does (`cgroup::rank`).
#[pyfunction]
#[pyo3(signature = (root, own, max_depth, sort, top, all_levels=false))]
pub fn cgroups<'py>(
    py: Python<'py>,
    root: Option<Vec<u8>>,
    own: bool,
    max_depth: Option<usize>,
    sort: Option<String>,
    top: Option<usize>,
    all_levels: bool,
) -> PyResult<Bound<'py, PyAny>> {
    use pagewise_core::cgroup::SortKey;
    let key = match sort.as_deref().map(|n| (n, SortKey::named(n))) {
        None => None,
        Some((_, Some(k))) => Some(k),
        Some((name, None)) => {
            let names: Vec<&str> = SortKey::ALL.iter().map(|(n, _)| *n).collect();
            return Err(PyValueError::new_err(format!(
                "sort: {name:?} is not one of {}",
                names.join(", ")
            )));
        }
    };
    if own && root.is_some() {
        return Err(PyValueError::new_err(
            "cgroups: a path and self=True cannot be combined",
        ));
    }
    let mut r = run_watched(py, None, |o| {
        let root = if own {
            Some(pagewise_core::cgroup::own_memory_cgroup()?)
        } else {
            root.map(convert::path)
        };
        let opts = CgroupsOptions { root, max_depth };
        pagewise_core::cgroup::cgroups(&opts, o)
    })?;
    pagewise_core::cgroup::rank(&mut r.groups, key, top, all_levels);
    report(py, &r)
}

/// `stat_by_cgroup(roots, walk, files, progress)`: which memory cgroup the cached pages are
/// charged to (`pagewise stat --by-cgroup`); with `files`, each file's line in a `files`
/// list, most cached first, as `--json -l` adds it.
#[pyfunction]
#[pyo3(signature = (roots, walk, files, progress=None))]
pub fn stat_by_cgroup<'py>(
    py: Python<'py>,
    roots: Vec<Vec<u8>>,
    walk: WalkArgs<'py>,
    files: bool,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    // The CLI refuses --range with --by-cgroup (pages are charged whole files at a time).
    if !walk.range.is_none() {
        return Err(PyValueError::new_err(
            "range cannot be combined with by_cgroup (which cgroup pays is known per page of the whole file)",
        ));
    }
    let opts = ChargeOptions {
        roots: convert::paths(roots),
        walk: walk.walk(pagewise_core::walk::default_threads())?,
        files,
    };
    let keep: Mutex<Vec<FileCharge>> = Mutex::default();
    let r = wait::run(py, progress.as_ref(), |c| {
        let observer = Watch {
            progress: Some(&c.progress),
            on_file: Some(|r: FileResult| {
                if let FileResult::Charge(f) = r {
                    keep.lock().unwrap_or_else(|p| p.into_inner()).push(f);
                }
            }),
            cancel: Some(&c.cancel),
        };
        pagewise_core::stat::charged(&opts, &observer)
    })?
    .map_err(|e| match e {
        // Not root: a permission problem (PermissionError), naming the file that needs it.
        pagewise_core::Error::Invalid {
            what: "by-cgroup",
            message,
        } => errors::os_error(
            py,
            Some(libc::EPERM),
            &message,
            Some(std::path::Path::new("/proc/kpagecgroup")),
            Some("open"),
        ),
        e => errors::to_py(py, e),
    })?;
    let mut v = convert::to_value(&r)?;
    if files {
        let mut list = keep.into_inner().unwrap_or_else(|p| p.into_inner());
        list.sort_by(|x, y| {
            y.cached_bytes
                .cmp(&x.cached_bytes)
                .then_with(|| x.path.cmp(&y.path))
        });
        v["files"] = convert::to_value(&list)?;
    }
    convert::to_py(py, &v)
}

/// `defaults()`: the library's defaults of the options the Python functions leave as None,
/// by function and option name (the package shows them as `pagewise.DEFAULTS`).
#[pyfunction]
pub fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let copy = CopyOptions::default();
    let replay = ReplayOptions::default();
    let v = serde_json::json!({
        "load": {
            "batch": core_load::DEFAULT_BATCH_FILES,
            "window": core_load::DEFAULT_WINDOW,
            "depth": core_load::DEFAULT_DEPTH,
            "trace_depth": core_load::DEFAULT_TRACE_DEPTH,
        },
        "copy": { "threads": copy.threads, "depth": copy.depth, "chunk": copy.chunk },
        "replay": {
            "merge_gap": replay.merge_gap,
            "max_request": replay.max_request,
            "runs": CompareOptions::default().runs,
        },
        "record": { "buffer_kb": pagewise_core::trace::DEFAULT_BUFFER_KB },
        "bench": {
            "runs": pagewise_core::bench::DEFAULT_RUNS,
            "recordings": pagewise_core::bench::DEFAULT_RECORDINGS,
        },
    });
    convert::to_py(py, &v)
}
