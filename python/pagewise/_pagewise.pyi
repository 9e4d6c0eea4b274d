"""The extension module behind ``pagewise`` (private: use the ``pagewise`` package).

Each verb takes the library's options and returns its report as the document the CLI's
``--json`` prints (the package wraps it in a report class)."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, final

# What the module registers (python/src/lib.rs), in that order; mypy's stubtest (the suite's
# test_stubs.py) checks this stub against the module built.
__all__ = [
    "version",
    "page_size",
    "build_info",
    "stat",
    "evict",
    "load",
    "copy",
    "cgroups",
    "stat_by_cgroup",
    "replay",
    "evict_trace",
    "load_trace",
    "record",
    "bench",
    "defaults",
    "Locks",
    "Trace",
    "Dropping",
    "AlignedAlloc",
    "DirectFile",
    "read_file_into",
    "read_file",
    "read_ranges_into",
    "Prefetch",
]

_Progress = Optional[Callable[[int, int], Any]]
_Size = Union[int, str]

def version() -> str: ...
def build_info() -> Tuple[str, str, str, str, str]: ...
def page_size() -> int: ...
def stat(roots: Sequence[bytes], walk: Dict[str, Any], files: bool, progress: _Progress = None) -> Dict[str, Any]: ...
def evict(
    roots: Sequence[bytes],
    walk: Dict[str, Any],
    dry_run: bool,
    owned: bool,
    no_sync: bool,
    why: bool,
    progress: _Progress = None,
) -> Dict[str, Any]: ...
def load(
    roots: Sequence[bytes],
    walk: Dict[str, Any],
    lock: bool,
    batch: Optional[int],
    window: Optional[_Size],
    depth: Optional[int],
    progress: _Progress = None,
) -> Tuple[Dict[str, Any], Optional[Locks]]: ...
def copy(sources: Sequence[bytes], dest: bytes, args: Dict[str, Any], progress: _Progress = None) -> Dict[str, Any]: ...
def cgroups(root: Optional[bytes], own: bool, max_depth: Optional[int], sort: Optional[str], top: Optional[int], all_levels: bool = ...) -> Dict[str, Any]: ...
def stat_by_cgroup(
    roots: Sequence[bytes], walk: Dict[str, Any], files: bool, progress: _Progress = None
) -> Dict[str, Any]: ...
def replay(trace: Trace, args: Dict[str, Any], progress: _Progress = None) -> Union[Dict[str, Any], List[Dict[str, Any]]]: ...
def evict_trace(trace: Trace, dry_run: bool, progress: _Progress = None) -> Dict[str, Any]: ...
def load_trace(trace: Trace, depth: Optional[int], progress: _Progress = None) -> Dict[str, Any]: ...
def record(command: Sequence[bytes], faults: bool, buffer_kb: Optional[int], backend: str) -> Tuple[Dict[str, Any], Trace]: ...
def bench(commands: Sequence[Tuple[str, Sequence[bytes], Optional[Trace]]], args: Dict[str, Any], progress: _Progress = None) -> Dict[str, Any]: ...
def defaults() -> Dict[str, Dict[str, int]]: ...

@final
class Locks:
    """Pages ``load(lock=True)`` keeps locked."""

    @property
    def held(self) -> bool: ...
    def release(self) -> None: ...
    def __len__(self) -> int: ...

@final
class Trace:
    """A pagewise trace."""

    @staticmethod
    def open(path: bytes) -> Trace: ...
    @staticmethod
    def from_bytes(data: bytes) -> Trace: ...
    def to_bytes(self) -> bytes: ...
    def to_dict(self) -> Dict[str, Any]: ...
    def files(self) -> List[Dict[str, Any]]: ...
    def events(self) -> List[Tuple[int, int, int, int, int]]: ...
    def faults(self) -> Optional[List[Tuple[int, int, int, int]]]: ...
    def header(self) -> Dict[str, Any]: ...

@final
class Dropping:
    """Follows the calling thread's page-cache additions until ``finish()``."""

    def __new__(cls, max_cache: Optional[_Size], keep_written: bool, buffer_kb: Optional[int], backend: str) -> Dropping: ...
    def finish(self) -> Dict[str, Any]: ...

@final
class AlignedAlloc:
    """An aligned, zeroed allocation (``sys::AlignedBuf``)."""

    def __new__(cls, len: int, align: int) -> AlignedAlloc: ...
    @property
    def address(self) -> int: ...
    def __len__(self) -> int: ...

@final
class DirectFile:
    """A file opened for cache-neutral I/O (``dio::DirectFile``); every request positioned."""

    def __new__(cls, path: bytes, mode: str, cache: str) -> DirectFile: ...
    def read_into(
        self,
        address: int,
        len: int,
        offset: int,
        depth: Optional[int] = None,
        progress: Optional[Callable[[int, int], Any]] = None,
    ) -> Tuple[int, bool]: ...
    def read_ranges_into(
        self,
        ranges: List[Tuple[int, int, int]],
        depth: Optional[int] = None,
        progress: Optional[Callable[[int, int], Any]] = None,
    ) -> List[int]: ...
    def read_bytes(self, offset: int, limit: Optional[int] = None, depth: Optional[int] = None) -> bytes: ...
    def write_from(self, address: int, len: int, offset: int) -> int: ...
    def write_bytes(self, data: bytes, offset: int) -> int: ...
    def len(self) -> int: ...
    def set_len(self, size: int) -> None: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def fileno(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def notice(self) -> Optional[str]: ...
    @property
    def alignment(self) -> Tuple[int, int]: ...

def read_file_into(
    path: bytes,
    cache: str,
    address: int,
    len: int,
    offset: int,
    depth: Optional[int] = None,
    progress: Optional[Callable[[int, int], Any]] = None,
) -> Tuple[int, bool, Optional[str]]: ...
def read_file(
    path: bytes,
    cache: str,
    depth: Optional[int] = None,
    progress: Optional[Callable[[int, int], Any]] = None,
) -> Tuple[bytes, Optional[str]]: ...
def read_ranges_into(
    path: bytes,
    cache: str,
    ranges: List[Tuple[int, int, int]],
    depth: Optional[int] = None,
    progress: _Progress = None,
) -> Tuple[List[int], Optional[str]]: ...

@final
class Prefetch:
    """Files read ahead (``pagewise.prefetch``)."""

    def __new__(cls, paths: List[bytes], cache: str, ahead: int, depth: int) -> Prefetch: ...
    def next(self) -> Optional[bytes]: ...
    def close(self) -> None: ...
