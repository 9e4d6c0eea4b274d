"""pagewise's exceptions: ``OSError`` subclasses that carry ``errno``, ``filename`` and the
``syscall`` that failed, and also derive from the builtin subclass errno names
(``FileNotFoundError``, ``PermissionError``, ...), so both ``except pagewise.Error`` and
``except FileNotFoundError`` catch them."""

from __future__ import annotations

import builtins as _builtins
import errno as _errno
import os
import warnings as _warnings
from typing import Any, Dict, Optional, Tuple, Type, Union

__all__ = [
    "Error",
    "NotFoundError",
    "PermissionDeniedError",
    "ExistsError",
    "IsADirectoryError",
    "NotADirectoryError",
    "NoSuchProcessError",
    "TraceError",
    "error_from",
]


class Error(OSError):
    """A system call pagewise made failed.

    Attributes (besides ``OSError``'s ``errno``, ``strerror`` and ``filename``):
    ``syscall``, the call or step that failed, named as strace names it
    (``"openat"``, ``"fadvise(DONTNEED)"``, ``"perf_event_open"``).
    """

    syscall: Optional[str]

    def __init__(
        self,
        errno: int,
        strerror: str,
        filename: Union[str, bytes, None] = None,
        syscall: Optional[str] = None,
    ) -> None:
        if isinstance(filename, bytes):
            filename = os.fsdecode(filename)
        if filename is None:
            super().__init__(errno, strerror)
        else:
            super().__init__(errno, strerror, filename)
        self.syscall = syscall

    def __str__(self) -> str:
        where = f"{self.filename}: " if self.filename is not None else ""
        call = f"{self.syscall} failed: " if self.syscall else ""
        return f"{where}{call}{self.strerror}"

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (type(self), (self.errno, self.strerror, self.filename, self.syscall))


class NotFoundError(Error, FileNotFoundError):
    """ENOENT: a path does not exist."""


class PermissionDeniedError(Error, PermissionError):
    """EACCES / EPERM: not allowed (for tracing: not root, no CAP_SYS_ADMIN / CAP_PERFMON)."""


class ExistsError(Error, FileExistsError):
    """EEXIST."""


class IsADirectoryError(Error, _builtins.IsADirectoryError):  # noqa: A001
    """EISDIR (``pagewise.IsADirectoryError``: also the builtin ``IsADirectoryError``)."""


class NotADirectoryError(Error, _builtins.NotADirectoryError):  # noqa: A001
    """ENOTDIR (``pagewise.NotADirectoryError``: also the builtin ``NotADirectoryError``)."""


#: Old names (with a trailing underscore), deprecated: reached through ``__getattr__``.
_DEPRECATED = {"IsADirectoryError_": IsADirectoryError, "NotADirectoryError_": NotADirectoryError}


def deprecated(name: str) -> Any:
    """The class an old name stands for, with a ``DeprecationWarning``; AttributeError for
    other names."""
    cls = _DEPRECATED.get(name)
    if cls is None:
        raise AttributeError(f"module 'pagewise' has no attribute {name!r}")
    _warnings.warn(
        f"pagewise.{name} is deprecated: use pagewise.{cls.__name__}",
        DeprecationWarning,
        stacklevel=3,
    )
    return cls


def __getattr__(name: str) -> Any:
    return deprecated(name)


class NoSuchProcessError(Error, ProcessLookupError):
    """ESRCH."""


class TraceError(ValueError):
    """A trace file is not a valid pagewise trace (bad magic, version, truncated, corrupt)."""


_BY_ERRNO: Dict[int, Type[Error]] = {
    _errno.ENOENT: NotFoundError,
    _errno.EACCES: PermissionDeniedError,
    _errno.EPERM: PermissionDeniedError,
    _errno.EEXIST: ExistsError,
    _errno.EISDIR: IsADirectoryError,
    _errno.ENOTDIR: NotADirectoryError,
    _errno.ESRCH: NoSuchProcessError,
}


def error_from(
    errno: int,
    strerror: str,
    filename: Union[str, bytes, None] = None,
    syscall: Optional[str] = None,
) -> Error:
    """The exception for a failure: the :class:`Error` subclass errno names."""
    cls = _BY_ERRNO.get(errno, Error)
    return cls(errno, strerror, filename, syscall)
