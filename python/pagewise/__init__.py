"""pagewise: exact control of the Linux page cache, from Python.

The verbs of the ``pagewise`` command, with keyword options named like its flags::

    import pagewise

    r = pagewise.stat("/data/model.bin")
    print(r.cached_bytes, "of", r.size_bytes, "cached")
    pagewise.evict("/data/dataset")                  # drop it (dirty pages written first)
    with pagewise.load("/data/model.bin", lock=True) as held:
        ...                                          # pages locked until the block ends
    with pagewise.dropping():                        # what this block reads is dropped after
        train_one_epoch()
    with pagewise.open("/data/big", "rb", cache="direct") as f:
        f.readinto(pagewise.aligned_buffer(1 << 20))  # O_DIRECT, alignment handled
    arr = pagewise.empty(n)                          # page-aligned numpy array
    pagewise.read_into("/data/model.bin", arr)       # O_DIRECT, many reads in flight

Every call returns a report whose attributes are bytes; ``report.to_dict()`` is the document
``pagewise VERB --json`` prints. Long calls release the GIL; Ctrl-C raises
``KeyboardInterrupt`` promptly (the call is cancelled as the CLI's SIGINT cancels it; what it
finished is complete). Failures that stop a call raise :class:`pagewise.Error` (an
``OSError`` with ``errno``, ``filename`` and ``syscall``, also a ``FileNotFoundError``,
``PermissionError``... as errno says); failures on single files are counted in the report
(``report.errors``, ``report.error_count``) while the call goes on, as on the CLI.
"""

from __future__ import annotations

import builtins
import os
from types import TracebackType
from typing import (
    Any,
    Literal,
    NamedTuple,
    overload,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from . import _pagewise
from ._io import Alignment, DirectIO, aligned_buffer, empty, open, read, read_into
from ._errors import (
    Error,
    ExistsError,
    IsADirectoryError,
    NoSuchProcessError,
    NotADirectoryError,
    NotFoundError,
    PermissionDeniedError,
    TraceError,
)
from ._reports import (
    PathView,
    CgroupCharge,
    CgroupChargeReport,
    CgroupStat,
    CgroupsReport,
    ChargeTotals,
    CopyItem,
    CopyReport,
    CopyResidue,
    DroppingReport,
    EvictFile,
    EvictReport,
    EvictTotals,
    FileCharge,
    FileError,
    FileStat,
    LoadReport,
    LoadTotals,
    RecordReport,
    ReplayReport,
    Report,
    Residency,
    RootTotals,
    SkippedFile,
    StatReport,
    StatTotals,
    TraceCacheReport,
    WalkSummary,
)

__version__: str = _pagewise.version()

#: The library's defaults of the options left as None, by function and option name
#: (``DEFAULTS["load"]["window"]``: bytes): read from the library itself, never repeated here.
DEFAULTS: Dict[str, Dict[str, int]] = _pagewise.defaults()

# `open`, `IsADirectoryError` and `NotADirectoryError` are left out: `from pagewise import *`
# must not shadow the builtins of those names (they are `pagewise.open`, ...).
__all__ = [
    "read_into",
    "read",
    "empty",
    "aligned_buffer",
    "DirectIO",
    "Alignment",
    "stat",
    "evict",
    "load",
    "copy",
    "cgroups",
    "replay",
    "record",
    "dropping",
    "Trace",
    "TraceFile",
    "TraceEvent",
    "LoadHandle",
    "page_size",
    "build_info",
    "DEFAULTS",
    "BuildInfo",
    "Error",
    "NotFoundError",
    "PermissionDeniedError",
    "ExistsError",
    "NoSuchProcessError",
    "TraceError",
    "Report",
    "StatReport",
    "StatTotals",
    "RootTotals",
    "FileStat",
    "Residency",
    "EvictReport",
    "EvictTotals",
    "EvictFile",
    "LoadReport",
    "LoadTotals",
    "CopyReport",
    "CopyResidue",
    "CopyItem",
    "CgroupsReport",
    "CgroupStat",
    "CgroupChargeReport",
    "CgroupCharge",
    "ChargeTotals",
    "FileCharge",
    "ReplayReport",
    "TraceCacheReport",
    "RecordReport",
    "DroppingReport",
    "SkippedFile",
    "FileError",
    "WalkSummary",
]

#: Public names that are not in ``__all__`` (they would shadow builtins on a star import), and
#: the type aliases of the signatures.
_PUBLIC_EXTRA = [
    "open",
    "IsADirectoryError",
    "NotADirectoryError",
    "PathArg",
    "Paths",
    "RangeArg",
    "SizeArg",
    "ProgressCallback",
]


def __dir__() -> List[str]:
    # What the package offers: not the names its annotations import (typing's, os...).
    dunders = [n for n in globals() if n.startswith("__") and n.endswith("__")]
    return sorted(set(__all__) | set(_PUBLIC_EXTRA) | set(dunders) - {"annotations"})


def __getattr__(name: str) -> Any:
    # The old exception names (IsADirectoryError_, NotADirectoryError_), with a warning.
    from ._errors import deprecated

    return deprecated(name)


def _raise_single(paths: Any, report: Any) -> None:
    """One explicit path given and it failed: its error is raised (the ``OSError`` subclass its
    errno names). Failures below it in a tree, or with several paths, stay in the report."""
    if not isinstance(paths, (str, bytes, os.PathLike)) or not report.error_count:
        return
    given = os.fsencode(paths)
    for e in report.errors:
        if e.path_bytes == given:
            raise e.exception()


#: A path as the ``os`` module takes one.
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
#: One path, or several.
Paths = Union[PathArg, Iterable[PathArg]]
#: A byte range: ``"START-END"`` as ``--range`` takes it (``"0-64M"``, ``"1G-"``, ``"-4K"``),
#: or ``(start, end)`` in bytes (``end`` None: to the end of each file).
RangeArg = Union[str, Tuple[int, Optional[int]], None]
#: A size: bytes, or a string with a K/M/G/T suffix (``"4M"``).
SizeArg = Union[int, str]
#: ``progress(files_done, bytes_done)``, called from the calling thread about every 0.1 s and
#: once at the end; an exception it raises cancels the call and is raised.
ProgressCallback = Callable[[int, int], Any]


class BuildInfo(NamedTuple):
    """What the extension was built from (:func:`build_info`)."""

    line: str
    """``"VERSION (commit HEX12, built YYYY-MM-DD, TARGET)"``: what ``pagewise --version``
    prints after ``pagewise``, and libpagewise's ``pagewise_build_info()``."""
    version: str
    commit: str
    """12 hex digits, or ``"unknown"`` when built outside a git checkout (e.g. from an sdist)."""
    date: str
    """UTC build date, ``YYYY-MM-DD`` (``SOURCE_DATE_EPOCH`` when the build set it)."""
    target: str


def build_info() -> BuildInfo:
    """The version, commit, build date and target of this extension, e.g.
    ``build_info().commit == "0123456789ab"``; the CLI and the C library built from the same
    source say the same."""
    return BuildInfo(*_pagewise.build_info())


def page_size() -> int:
    """The kernel's page size, bytes."""
    return _pagewise.page_size()


def _paths(paths: Paths) -> List[bytes]:
    """One path or many, as bytes (``os.fsencode``): exact whatever the name's bytes."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [os.fsencode(paths)]
    out = [os.fsencode(p) for p in paths]
    return out


def _walk(
    range: RangeArg,
    include: Iterable[str],
    exclude: Iterable[str],
    follow: bool,
    one_file_system: bool,
    max_depth: Optional[int],
    threads: Optional[int],
    method: str,
) -> Dict[str, Any]:
    for name, value in (("max_depth", max_depth), ("threads", threads)):
        # (Checked here: inside the options dict the extension could only say TypeError.)
        if isinstance(value, int) and not 0 <= value < 1 << 64:
            raise ValueError(f"{name}: {value} is not a count (0 to 2**64-1)")
    return {
        "range": range,
        "include": [include] if isinstance(include, str) else list(include),
        "exclude": [exclude] if isinstance(exclude, str) else list(exclude),
        "follow": follow,
        "one_file_system": one_file_system,
        "max_depth": max_depth,
        "threads": threads,
        "method": method,
    }


@overload
def stat(
    paths: Paths,
    *,
    files: bool = ...,
    range: RangeArg = ...,
    include: Iterable[str] = ...,
    exclude: Iterable[str] = ...,
    follow: bool = ...,
    one_file_system: bool = ...,
    max_depth: Optional[int] = ...,
    threads: Optional[int] = ...,
    method: str = ...,
    progress: Optional[ProgressCallback] = ...,
    by_cgroup: Literal[False] = ...,
) -> StatReport: ...


@overload
def stat(
    paths: Paths,
    *,
    files: bool = ...,
    range: RangeArg = ...,
    include: Iterable[str] = ...,
    exclude: Iterable[str] = ...,
    follow: bool = ...,
    one_file_system: bool = ...,
    max_depth: Optional[int] = ...,
    threads: Optional[int] = ...,
    method: str = ...,
    progress: Optional[ProgressCallback] = ...,
    by_cgroup: Literal[True],
) -> CgroupChargeReport: ...


def stat(
    paths: Paths,
    *,
    files: bool = False,
    range: RangeArg = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    follow: bool = False,
    one_file_system: bool = False,
    max_depth: Optional[int] = None,
    threads: Optional[int] = None,
    method: str = "auto",
    progress: Optional[ProgressCallback] = None,
    by_cgroup: bool = False,
) -> Union[StatReport, CgroupChargeReport]:
    """How much of files and trees is in the page cache (``pagewise stat``).

    :param paths: files and directories (directories recurse).
    :param files: also list every file (``-l``): ``report.files``, sorted by path (with
        ``by_cgroup``, most cached first).
    :param range: only this byte range of every file (``--range``; not with ``by_cgroup``).
    :param include: only files matching these globs (``--include``).
    :param exclude: skip files and directories matching these globs (``--exclude``).
    :param follow: follow symlinks inside trees (``--follow``; roots are always followed).
    :param one_file_system: stay on each root's filesystem (``--one-file-system``).
    :param max_depth: descend at most this many levels (``--max-depth``).
    :param threads: worker threads (``--threads``; default: the CPUs).
    :param method: ``"auto"``, ``"cachestat"`` or ``"mincore"`` (``--method``).
    :param progress: ``progress(files, bytes)``, called from this thread.
    :param by_cgroup: which memory cgroup the cached pages are charged to (``--by-cgroup``:
        the pages' frames through /proc/self/pagemap, then /proc/kpagecgroup; root only, else
        ``PermissionError``): returns a :class:`CgroupChargeReport`.
    :returns: totals (``cached_bytes``, ``dirty_bytes``...), per root, per file; with
        ``by_cgroup``, bytes per cgroup (``report.cgroups``), per file and cgroup.
    """
    walk = _walk(range, include, exclude, follow, one_file_system, max_depth, threads, method)
    report: Union[StatReport, CgroupChargeReport]
    if by_cgroup:
        if method != "auto":
            raise ValueError("method cannot be combined with by_cgroup (pages are found through their frames)")
        report = CgroupChargeReport(_pagewise.stat_by_cgroup(_paths(paths), walk, files, progress))
    else:
        report = StatReport(_pagewise.stat(_paths(paths), walk, files, progress))
    report._given = _paths(paths)
    _raise_single(paths, report)
    return report


@overload
def evict(
    paths: Paths,
    *,
    dry_run: bool = ...,
    owned: bool = ...,
    no_sync: bool = ...,
    why: bool = ...,
    range: RangeArg = ...,
    include: Iterable[str] = ...,
    exclude: Iterable[str] = ...,
    follow: bool = ...,
    one_file_system: bool = ...,
    max_depth: Optional[int] = ...,
    threads: Optional[int] = ...,
    method: str = ...,
    progress: Optional[ProgressCallback] = ...,
) -> EvictReport: ...


@overload
def evict(
    paths: None = ...,
    *,
    trace: Union["Trace", PathArg],
    dry_run: bool = ...,
    progress: Optional[ProgressCallback] = ...,
) -> TraceCacheReport: ...


def evict(
    paths: Optional[Paths] = None,
    *,
    trace: Union["Trace", PathArg, None] = None,
    dry_run: bool = False,
    owned: bool = False,
    no_sync: bool = False,
    why: bool = False,
    range: RangeArg = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    follow: bool = False,
    one_file_system: bool = False,
    max_depth: Optional[int] = None,
    threads: Optional[int] = None,
    method: str = "auto",
    progress: Optional[ProgressCallback] = None,
) -> Union[EvictReport, TraceCacheReport]:
    """Drop files and trees from the page cache, dirty pages written back first
    (``pagewise evict``); the report says what stayed and why.

    :param dry_run: measure what would be dropped, change nothing (``--dry-run``).
    :param owned: only files owned by you (``--owned``).
    :param no_sync: do not write dirty pages back first; they stay cached (``--no-sync``).
    :param why: name the processes whose mappings keep pages in (``--why``).
    :param trace: instead of paths, exactly the pages a :class:`Trace` (or trace file)
        recorded (``--trace``): returns a :class:`TraceCacheReport`.
    :returns: :class:`EvictReport` (or :class:`TraceCacheReport` with ``trace``).

    The walk options are :func:`stat`'s.
    """
    if trace is not None:
        if paths is not None:
            raise ValueError("evict: give paths or trace, not both")
        return TraceCacheReport(_pagewise.evict_trace(_trace(trace)._t, dry_run, progress))
    if paths is None:
        raise ValueError("evict: no paths given")
    walk = _walk(range, include, exclude, follow, one_file_system, max_depth, threads, method)
    report = EvictReport(
        _pagewise.evict(_paths(paths), walk, dry_run, owned, no_sync, why, progress)
    )
    report._given = _paths(paths)
    _raise_single(paths, report)
    return report


class LoadHandle:
    """What ``load(..., lock=True)`` returns: the report, and the loaded pages locked in
    memory (mmap + mlock) until :meth:`close` or the end of a ``with`` block."""

    def __init__(self, report: LoadReport, locks: Any) -> None:
        self.report = report
        self._locks = locks

    @property
    def locked(self) -> bool:
        """True until :meth:`close`."""
        return bool(self._locks.held)

    @property
    def locked_bytes(self) -> int:
        """Bytes locked."""
        return self.report.locked_bytes

    def close(self) -> None:
        """Unlocks the pages (they stay cached, but may be reclaimed again)."""
        self._locks.release()

    def __enter__(self) -> "LoadHandle":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # The report's attributes, on the handle too (not private ones: `report` may not be
        # set yet, as while copy or pickle build the object).
        if name.startswith("_") or name == "report":
            raise AttributeError(name)
        return getattr(self.report, name)

    def __repr__(self) -> str:
        state = "locked" if self.locked else "released"
        return f"<pagewise.LoadHandle {state}: {self.locked_bytes} bytes in {self.report.total.locked_files} files>"


@overload
def load(
    paths: Paths,
    *,
    lock: Literal[False] = ...,
    batch: Optional[int] = ...,
    window: Optional[SizeArg] = ...,
    depth: Optional[int] = ...,
    range: RangeArg = ...,
    include: Iterable[str] = ...,
    exclude: Iterable[str] = ...,
    follow: bool = ...,
    one_file_system: bool = ...,
    max_depth: Optional[int] = ...,
    threads: Optional[int] = ...,
    method: str = ...,
    progress: Optional[ProgressCallback] = ...,
) -> LoadReport: ...


@overload
def load(
    paths: Paths,
    *,
    lock: Literal[True],
    batch: Optional[int] = ...,
    window: Optional[SizeArg] = ...,
    depth: Optional[int] = ...,
    range: RangeArg = ...,
    include: Iterable[str] = ...,
    exclude: Iterable[str] = ...,
    follow: bool = ...,
    one_file_system: bool = ...,
    max_depth: Optional[int] = ...,
    threads: Optional[int] = ...,
    method: str = ...,
    progress: Optional[ProgressCallback] = ...,
) -> LoadHandle: ...


@overload
def load(
    paths: None = ...,
    *,
    trace: Union["Trace", PathArg],
    depth: Optional[int] = ...,
    progress: Optional[ProgressCallback] = ...,
) -> TraceCacheReport: ...


def load(
    paths: Optional[Paths] = None,
    *,
    trace: Union["Trace", PathArg, None] = None,
    lock: bool = False,
    batch: Optional[int] = None,
    window: Optional[SizeArg] = None,
    depth: Optional[int] = None,
    range: RangeArg = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    follow: bool = False,
    one_file_system: bool = False,
    max_depth: Optional[int] = None,
    threads: Optional[int] = None,
    method: str = "auto",
    progress: Optional[ProgressCallback] = None,
) -> Union[LoadReport, "LoadHandle", TraceCacheReport]:
    """Bring files and trees into the page cache with deep parallel I/O (``pagewise load``).

    :param lock: keep the loaded pages locked in memory (``--lock``): returns a
        :class:`LoadHandle` that holds them until ``close()`` / the end of its ``with`` block.
    :param batch: files each worker queues readahead for before waiting (``--batch``; None:
        the library's default, ``DEFAULTS["load"]["batch"]``).
    :param window: bytes in flight within one large file (``--window``; None:
        ``DEFAULTS["load"]["window"]``).
    :param depth: threads reading one large file (``--depth``; None:
        ``DEFAULTS["load"]["depth"]``), or with ``trace`` reads in flight (None:
        ``DEFAULTS["load"]["trace_depth"]``).
    :param trace: instead of paths, exactly the pages a :class:`Trace` (or trace file)
        recorded, in on-disk order (``--trace``): returns a :class:`TraceCacheReport`.
    :returns: :class:`LoadReport`, :class:`LoadHandle` with ``lock``, or
        :class:`TraceCacheReport` with ``trace``.

    The walk options are :func:`stat`'s.
    """
    if trace is not None:
        if paths is not None or lock:
            raise ValueError("load: trace cannot be combined with paths or lock")
        return TraceCacheReport(
            _pagewise.load_trace(_trace(trace)._t, depth, progress)
        )
    if paths is None:
        raise ValueError("load: no paths given")
    walk = _walk(range, include, exclude, follow, one_file_system, max_depth, threads, method)
    raw, locks = _pagewise.load(
        _paths(paths), walk, lock, batch, window, depth, progress
    )
    report = LoadReport(raw)
    report._given = _paths(paths)
    try:
        _raise_single(paths, report)
    except OSError:
        if locks is not None:
            locks.release()
        raise
    if lock:
        return LoadHandle(report, locks)
    return report


def copy(
    sources: Paths,
    dest: PathArg,
    *,
    cache: str = "auto",
    preserve: bool = False,
    archive: bool = False,
    no_target_directory: bool = False,
    update: bool = False,
    no_clobber: bool = False,
    checksum: bool = False,
    dry_run: bool = False,
    delete: bool = False,
    dereference: bool = False,
    dereference_command_line: bool = False,
    no_dereference: bool = False,
    itemize_changes: bool = False,
    no_preallocate: bool = False,
    named_temp: bool = False,
    partial: bool = False,
    fsync: bool = False,
    verify: bool = False,
    threads: Optional[int] = None,
    depth: Optional[int] = None,
    chunk: Optional[SizeArg] = None,
    filters: Sequence[str] = (),
    exclude: Sequence[str] = (),
    delete_excluded: bool = False,
    one_file_system: bool = False,
    max_size: Optional[SizeArg] = None,
    min_size: Optional[SizeArg] = None,
    bwlimit: Optional[SizeArg] = None,
    ionice: Optional[str] = None,
    progress: Optional[ProgressCallback] = None,
) -> CopyReport:
    """Copy files and trees at device speed, leaving the page cache as it was
    (``pagewise copy``; cp's rules: into ``dest`` when it is a directory).

    :param cache: ``"auto"``, ``"dontcache"``, ``"direct"``, ``"drop-behind"`` or
        ``"buffered"`` (``--cache``).
    :param preserve: keep mode, owner (as root), times, xattrs and ACLs (``--preserve``).
    :param archive: as ``cp -a`` (``--archive``): ``preserve``; trees are always copied
        recursively, special files recreated and symlinks copied as symlinks unless
        ``dereference`` says otherwise.
    :param no_target_directory: ``dest`` is the copy itself, never a directory to copy into
        (``-T``): running the same call again lands in the same place.
    :param update: copy only what is missing or differs by size or modification time, a
        symlink whose text differs (``-u``, rsync's quick check); finishes an interrupted copy.
    :param no_clobber: never replace an existing destination entry (``--no-clobber``; not
        with ``update`` or ``checksum``).
    :param checksum: copy a file only when its content differs: files of the same size are
        compared byte for byte, read without caching them (``-c``, rsync -c); ``update``'s
        rule for the rest.
    :param dry_run: change nothing; the report says what would be created, updated and
        deleted, and lists every entry in ``report.items`` (``-n``).
    :param delete: remove from destination directories what their source directories no
        longer have (``--delete``).
    :param dereference: follow every symlink in the sources, inside trees too (``-L``).
    :param dereference_command_line: follow symlinks named as sources only (``-H``).
    :param no_dereference: copy symlinks as symlinks (``-P``, the default).
    :param itemize_changes: list every entry's outcome in ``report.items`` (``-i``;
        ``--json-lines`` streams the same entries).
    :param no_preallocate: do not fallocate destinations (``--no-preallocate``).
    :param named_temp: write under hidden temporary names, not O_TMPFILE (``--named-temp``).
    :param partial: keep a file stopped mid-copy as a partial temporary with a checkpoint, resumed by the
        next copy (``--partial``); implies ``named_temp``.
    :param fsync: fsync each file before it is linked into place (``--fsync``).
    :param verify: re-read every copy from disk and compare checksums (``--verify``).
    :param threads: files copied in parallel (``--threads``; None: the library's default,
        ``DEFAULTS["copy"]["threads"]``).
    :param depth: I/Os in flight within one large file (``--depth``; None:
        ``DEFAULTS["copy"]["depth"]``).
    :param chunk: bytes per I/O, a multiple of 4 KiB (``--chunk``; None:
        ``DEFAULTS["copy"]["chunk"]``).
    :param filters: rsync filter rules in order (``-f``: ``"- *.tmp"``, ``"+ keep/"``,
        ``"- *"``; the first match decides, an excluded directory is not entered).
    :param exclude: patterns to leave out, after ``filters`` (``--exclude``, rsync's rules).
    :param delete_excluded: with ``delete``, also remove excluded destination entries
        (``--delete-excluded``; implies ``delete``).
    :param one_file_system: do not cross file systems: a mount point is copied empty (``-x``).
    :param max_size: leave out regular files larger than this (``--max-size``).
    :param min_size: leave out regular files smaller than this (``--min-size``).
    :param bwlimit: move at most this many bytes per second (``"50M"``; ``--bwlimit``).
    :param ionice: the copy's I/O priority, ``"idle"`` or ``"best-effort[:0-7]"``
        (``--ionice``).

    Files are written under a temporary and linked into place only when complete: an
    interrupted copy (Ctrl-C) leaves no half file. Options that contradict each other
    (``update`` or ``checksum`` with ``no_clobber``; more than one of the dereference
    options) raise ``ValueError`` before anything is touched.
    """
    args = {
        "cache": cache,
        "preserve": preserve,
        "archive": archive,
        "no_target_directory": no_target_directory,
        "update": update,
        "no_clobber": no_clobber,
        "checksum": checksum,
        "dry_run": dry_run,
        "delete": delete,
        "dereference": dereference,
        "dereference_command_line": dereference_command_line,
        "no_dereference": no_dereference,
        "itemize_changes": itemize_changes,
        "no_preallocate": no_preallocate,
        "named_temp": named_temp,
        "partial": partial,
        "fsync": fsync,
        "verify": verify,
        "threads": threads,
        "depth": depth,
        "chunk": chunk,
        "filters": [os.fsencode(r) for r in filters],
        "exclude": [os.fsencode(p) for p in exclude],
        "delete_excluded": delete_excluded,
        "one_file_system": one_file_system,
        "max_size": max_size,
        "min_size": min_size,
        "bwlimit": bwlimit,
        "ionice": ionice,
    }
    return CopyReport(_pagewise.copy(_paths(sources), os.fsencode(dest), args, progress))


def cgroups(
    path: Optional[PathArg] = None,
    *,
    self: bool = False,
    max_depth: Optional[int] = None,
    sort: Optional[str] = None,
    top: Optional[int] = None,
    all_levels: bool = False,
) -> CgroupsReport:
    """Per-cgroup page cache, from each memory cgroup's ``memory.stat`` (``pagewise cgroups``):
    file, dirty, writeback, mapped, active and inactive bytes and refaults, descendants
    included (cgroup v2, or v1's memory controller).

    :param path: a cgroup directory (``/sys/fs/cgroup/x``) or a cgroup path (``/x``); default:
        the root of the memory hierarchy.
    :param self: start at this process's own memory cgroup (``--self``; not with ``path``).
    :param max_depth: levels below the first group to list (``-d``; 0: that group alone).
    :param sort: ``"tree"`` (parents before children; the default), or most first by
        ``"file"`` (the default with ``top``), ``"dirty"``, ``"mapped"``, ``"active"``,
        ``"inactive"``, ``"refaults"`` (``--sort``).
    :param top: only the first ``top`` groups in that order (``--top``).
    :param all_levels: a ranking (``sort`` by a figure, or ``top``) lists leaf groups only (no
        child listed), whose figures do not contain one another's; ``True`` ranks every group
        (``--all-levels``).
    :returns: :class:`CgroupsReport`; iterate it for :class:`CgroupStat`.

    A missing group raises ``FileNotFoundError``; a group whose ``memory.stat`` cannot be
    read is a counted error in the report.
    """
    if isinstance(max_depth, int) and max_depth < 0:
        raise ValueError(f"max_depth: {max_depth} is not a count")
    if isinstance(top, int) and top < 0:
        raise ValueError(f"top: {top} is not a count")
    root = None if path is None else os.fsencode(path)
    report = CgroupsReport(_pagewise.cgroups(root, self, max_depth, sort, top, all_levels))
    return report


@overload
def replay(
    trace: Union["Trace", PathArg],
    *,
    order: str = ...,
    direct: bool = ...,
    merge_gap: Optional[SizeArg] = ...,
    depth: Optional[int] = ...,
    max_request: Optional[SizeArg] = ...,
    compare: Literal[False] = ...,
    runs: Optional[int] = ...,
    progress: Optional[ProgressCallback] = ...,
) -> ReplayReport: ...


@overload
def replay(
    trace: Union["Trace", PathArg],
    *,
    order: str = ...,
    direct: bool = ...,
    merge_gap: Optional[SizeArg] = ...,
    depth: Optional[int] = ...,
    max_request: Optional[SizeArg] = ...,
    compare: Literal[True],
    runs: Optional[int] = ...,
    progress: Optional[ProgressCallback] = ...,
) -> List[ReplayReport]: ...


def replay(
    trace: Union["Trace", PathArg],
    *,
    order: str = "disk",
    direct: bool = False,
    merge_gap: Optional[SizeArg] = None,
    depth: Optional[int] = None,
    max_request: Optional[SizeArg] = None,
    compare: bool = False,
    runs: Optional[int] = None,
    progress: Optional[ProgressCallback] = None,
) -> Union[ReplayReport, List[ReplayReport]]:
    """Re-issue a recorded read set and time it (``pagewise replay``).

    :param trace: a :class:`Trace` or the path of a trace file.
    :param order: ``"recorded"``, ``"file"`` or ``"disk"`` (``--order``).
    :param direct: read with O_DIRECT: exactly the recorded pages, no cache (``--direct``).
    :param merge_gap: merge ranges at most this far apart (``--merge-gap``; None:
        ``DEFAULTS["replay"]["merge_gap"]``).
    :param depth: requests in flight (``--depth``; None: the order's default, fewer for
        ``recorded`` and ``file`` than for ``disk``).
    :param max_request: longest single request (``--max-request``; None:
        ``DEFAULTS["replay"]["max_request"]``).
    :param compare: every order on a cold cache, ``runs`` times each (``--compare``):
        returns a list of :class:`ReplayReport`, the median run of each order.
    :param runs: runs per order with ``compare`` (``--runs``; None:
        ``DEFAULTS["replay"]["runs"]``).
    """
    args = {
        "order": order,
        "direct": direct,
        "merge_gap": merge_gap,
        "depth": depth,
        "max_request": max_request,
        "compare": compare,
        "runs": runs,
    }
    raw: Any = _pagewise.replay(_trace(trace)._t, args, progress)
    if compare:
        return [ReplayReport(r) for r in raw]
    return ReplayReport(raw)


def record(
    command: Sequence[PathArg],
    *,
    faults: bool = False,
    buffer_kb: Optional[int] = None,
    backend: str = "auto",
) -> RecordReport:
    """Run a command and record the pages it brings into the page cache (``pagewise
    record``): ``report.trace`` is the :class:`Trace` (``report.trace.save(path)`` writes the
    file ``replay``, ``evict --trace`` and ``load --trace`` read).

    :param command: the program and its arguments (looked up in ``PATH``).
    :param faults: also record its page faults on file mappings (``--faults``).
    :param buffer_kb: ring buffer per CPU, KiB (``--buffer-kb``; None:
        ``DEFAULTS["record"]["buffer_kb"]``).
    :param backend: ``"auto"``, ``"perf"`` or ``"tracefs"`` (``--backend``).

    Needs the page-cache tracepoints (root, or CAP_SYS_ADMIN / CAP_PERFMON):
    :class:`PermissionDeniedError` otherwise. While the command runs, SIGINT, SIGTERM, SIGHUP
    and SIGQUIT sent to this process are forwarded to it (the terminal's Ctrl-C reaches it
    anyway); once it has ended, Python's handlers are back and ``KeyboardInterrupt`` is
    raised if such a signal came.
    """
    if isinstance(command, (str, bytes)):
        raise TypeError("record: command must be a list of arguments, e.g. ['cat', 'file']")
    raw, t = _pagewise.record([os.fsencode(a) for a in command], faults, buffer_kb, backend)
    return RecordReport(raw, Trace._wrap(t))


class TraceFile(PathView):
    """A file of a trace."""

    __slots__ = ()

    @property
    def dev(self) -> Tuple[int, int]:
        """(major, minor) of the filesystem's device."""
        return (int(self._raw["dev_major"]), int(self._raw["dev_minor"]))

    @property
    def ino(self) -> int:
        """Inode number."""
        return int(self._raw["ino"])

    @property
    def size_bytes(self) -> int:
        """Size at the end of the recording (0 when unknown)."""
        return int(self._raw["size"])

    @property
    def deleted(self) -> bool:
        """Deleted by the end of the recording."""
        return bool(self._raw["deleted"])

    @property
    def path_known(self) -> bool:
        """False when the file was recorded without a path."""
        return self._raw.get("path") is not None


class TraceEvent(NamedTuple):
    """Pages added to the page cache (one event of the trace)."""

    ts_ns: int
    """ns since the recording started."""
    file: int
    """Index into :attr:`Trace.files`."""
    pid: int
    """The thread that caused it."""
    page: int
    """First page added: the file offset / page size (``index`` in the trace's JSON)."""
    pages: int
    """Pages added together."""


class Trace:
    """A recording of the pages a command brought into the page cache (what ``pagewise
    record`` writes; :func:`record` returns one). Pass it to :func:`replay`,
    ``evict(trace=...)`` or ``load(trace=...)``."""

    __slots__ = ("_t", "_files")
    _t: _pagewise.Trace
    _files: Optional[List[TraceFile]]

    def __init__(self) -> None:
        raise TypeError("use pagewise.Trace.open(path) or Trace.from_bytes(data)")

    @classmethod
    def _wrap(cls, t: _pagewise.Trace) -> "Trace":
        self = object.__new__(cls)
        self._t = t
        self._files = None
        return self

    @classmethod
    def open(cls, path: PathArg) -> "Trace":
        """Reads and validates a trace file (:class:`TraceError` when it is not one)."""
        return cls._wrap(_pagewise.Trace.open(os.fsencode(path)))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Trace":
        """Parses the bytes of a trace file."""
        return cls._wrap(_pagewise.Trace.from_bytes(bytes(data)))

    def to_bytes(self) -> bytes:
        """The trace file's bytes."""
        return self._t.to_bytes()

    def save(self, path: PathArg) -> None:
        """Writes the trace file (what ``pagewise replay`` and ``--trace`` read)."""
        with builtins.open(os.fsencode(path), "wb") as f:
            f.write(self.to_bytes())

    def to_dict(self) -> Dict[str, Any]:
        """The trace as ``pagewise show --format json`` prints it."""
        return self._t.to_dict()

    @property
    def files(self) -> List[TraceFile]:
        """The files, in order of first appearance (events index into it)."""
        if self._files is None:
            self._files = [TraceFile(f) for f in self._t.files()]
        return list(self._files)

    @property
    def pages(self) -> List[TraceEvent]:
        """The page-cache additions, in time order."""
        return [TraceEvent(*e) for e in self._t.events()]

    events = pages

    @property
    def faults(self) -> Optional[List[Tuple[int, int, int, int]]]:
        """Page faults ``(ts_ns, file, pid, index)`` (``record(faults=True)``), else None."""
        return self._t.faults()

    def _header(self) -> Dict[str, Any]:
        return self._t.header()

    @property
    def bytes(self) -> int:
        """Bytes of all recorded additions."""
        return int(self._header()["bytes"])

    @property
    def page_size(self) -> int:
        """Page size of the system it was recorded on."""
        return int(self._header()["page_size"])

    @property
    def command(self) -> List[str]:
        """The recorded command."""
        return list(self._header()["command"])

    @property
    def lost_events(self) -> int:
        """Events the kernel lost while recording (their pages are missing)."""
        return int(self._header()["lost_events"])

    @property
    def duration_ns(self) -> int:
        """From the start to the command's exit, ns."""
        return int(self._header()["duration_ns"])

    @property
    def started_unix_ns(self) -> int:
        """Wall clock at the start, ns since the epoch."""
        return int(self._header()["started_unix_ns"])

    def __repr__(self) -> str:
        h = self._header()
        return f"<pagewise.Trace {h['command']!r}: {len(self._t.events())} events, {h['bytes']} bytes>"


def _trace(t: Union[Trace, PathArg]) -> Trace:
    return t if isinstance(t, Trace) else Trace.open(t)


class dropping:
    """``with pagewise.dropping():`` — the pages this thread, and the threads and processes
    it starts inside the block, bring into the page cache are dropped again at its end (the
    machinery of ``pagewise run``, on this process). Pages that were cached before are left
    alone. The report is ``d.report`` after the block (``with pagewise.dropping() as d:``).

    :param max_cache: also drop whenever more than this many bytes of them are cached
        (drop-behind; default None: only at the end).
    :param keep_written: leave the pages of files written inside the block alone.
    :param buffer_kb: ring buffer per CPU, KiB (None: ``DEFAULTS["record"]["buffer_kb"]``).
    :param backend: ``"auto"``, ``"perf"`` or ``"tracefs"``.

    Threads that were already running when the block started are not followed. Needs the
    page-cache tracepoints (root, or CAP_SYS_ADMIN / CAP_PERFMON): entering the block raises
    :class:`PermissionDeniedError` (a ``PermissionError``) otherwise.
    """

    def __init__(
        self,
        *,
        max_cache: Optional[SizeArg] = None,
        keep_written: bool = False,
        buffer_kb: Optional[int] = None,
        backend: str = "auto",
    ) -> None:
        self._args = (max_cache, keep_written, buffer_kb, backend)
        self._d: Any = None
        self.report: Optional[DroppingReport] = None

    def __enter__(self) -> "dropping":
        if self._d is not None:
            raise RuntimeError("pagewise.dropping is not reentrant")
        self.report = None
        self._d = _pagewise.Dropping(*self._args)
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        d, self._d = self._d, None
        self.report = DroppingReport(d.finish())
