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

# (Optional: typing.get_type_hints resolves the annotations of Trace, whose __module__ is this
# package (_common.public), among these globals.)
from typing import Any, Dict, List, NamedTuple, Optional

from . import _pagewise
from ._io import (
    Alignment,
    DirectIO,
    aligned_buffer,
    empty,
    open,
    prefetch,
    read,
    read_into,
    read_ranges_into,
)
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
from ._bench import (
    BenchCommand,
    BenchDifference,
    BenchLearning,
    BenchReport,
    BenchRestored,
    BenchRun,
    BenchSet,
    BenchState,
    BenchStats,
    bench,
)
from ._cache import LoadHandle, evict, load, stat
from ._cgroups import cgroups
from ._common import PathArg, Paths, ProgressCallback, RangeArg, SizeArg
from ._copy import copy
from ._run import dropping
from ._trace import Trace, TraceEvent, TraceFile, record, replay

__version__: str = _pagewise.version()

#: The library's defaults of the options left as None, by function and option name
#: (``DEFAULTS["load"]["window"]``: bytes): read from the library itself, never repeated here.
DEFAULTS: Dict[str, Dict[str, int]] = _pagewise.defaults()

# `open`, `IsADirectoryError` and `NotADirectoryError` are left out: `from pagewise import *`
# must not shadow the builtins of those names (they are `pagewise.open`, ...).
__all__ = [
    "read_into",
    "read_ranges_into",
    "read",
    "prefetch",
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
    "bench",
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
    "BenchReport",
    "BenchCommand",
    "BenchSet",
    "BenchLearning",
    "BenchState",
    "BenchStats",
    "BenchRun",
    "BenchDifference",
    "BenchRestored",
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
