"""Traces: :func:`record` (``pagewise record``), :func:`replay` (``pagewise replay``) and
:class:`Trace`, the recording (what ``pagewise show`` prints), with its files and events."""

from __future__ import annotations

import builtins
import os
from typing import (
    Any,
    Dict,
    List,
    Literal,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

from . import _pagewise
from ._common import PathArg, ProgressCallback, SizeArg, public
from ._reports import PathView, RecordReport, ReplayReport


@overload
@public
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
@public
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


@public
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


@public
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


@public
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


@public
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


@public
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
