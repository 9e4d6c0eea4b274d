"""What the verbs' signatures share: the types of their path, range, size and progress
arguments, and the conversions of those arguments the verb modules (``_cache``, ``_copy``,
``_trace``...) make before they call the extension."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, TypeVar, Union

_T = TypeVar("_T")


def public(obj: _T) -> _T:
    """Marks a function or class ``pagewise`` re-exports as the package's own: its
    ``__module__`` is ``"pagewise"``, as when every verb was defined in ``__init__.py``, so
    reprs, pickles and ``help()`` still say ``pagewise.X``. (Put under ``@overload`` too:
    ``typing.get_overloads`` looks its overloads up by that module.)"""
    obj.__module__ = "pagewise"  # type: ignore[attr-defined]
    return obj


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


def _raise_single(paths: Any, report: Any) -> None:
    """One explicit path given and it failed: its error is raised (the ``OSError`` subclass its
    errno names). Failures below it in a tree, or with several paths, stay in the report."""
    if not isinstance(paths, (str, bytes, os.PathLike)) or not report.error_count:
        return
    given = os.fsencode(paths)
    for e in report.errors:
        if e.path_bytes == given:
            raise e.exception()


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
