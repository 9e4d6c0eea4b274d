"""The cache verbs: :func:`stat`, :func:`evict` and :func:`load` (``pagewise stat``,
``evict``, ``load``), their ``trace=`` forms, and :class:`LoadHandle`, the pages ``load``
locks."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Iterable, Literal, Optional, Type, Union, overload

from . import _pagewise
from ._common import (
    PathArg,
    Paths,
    ProgressCallback,
    RangeArg,
    SizeArg,
    _paths,
    _raise_single,
    _walk,
    public,
)
from ._reports import (
    CgroupChargeReport,
    EvictReport,
    LoadReport,
    StatReport,
    TraceCacheReport,
)
from ._trace import Trace, _trace


@overload
@public
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
@public
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


@public
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
@public
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
@public
def evict(
    paths: None = ...,
    *,
    trace: Union["Trace", PathArg],
    dry_run: bool = ...,
    progress: Optional[ProgressCallback] = ...,
) -> TraceCacheReport: ...


@public
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


@public
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
@public
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
@public
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
@public
def load(
    paths: None = ...,
    *,
    trace: Union["Trace", PathArg],
    depth: Optional[int] = ...,
    progress: Optional[ProgressCallback] = ...,
) -> TraceCacheReport: ...


@public
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
