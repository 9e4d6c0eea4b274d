"""The machinery of ``pagewise run`` on this process: :class:`dropping`."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Optional, Type

from . import _pagewise
from ._common import SizeArg, public
from ._reports import DroppingReport


@public
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
