"""Report classes: typed, read-only views over the document the CLI's ``--json`` prints for
the same report (``to_dict()`` returns that document). All quantities are bytes; a figure the
kernel cannot give is ``None``.

Every field of the document is reachable as an attribute of the same name (``report.walk``,
``report.total.unknown_reason``); the typed attributes below add the names a Python user
expects (``size_bytes``) and turn nested objects, paths and errors into objects."""

from __future__ import annotations

import copy
import os
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    Iterator,
    List,
    Optional,
    TypeVar,
    overload,
)

T = TypeVar("T")


def _path_bytes(raw: Dict[str, Any], key: str = "path") -> Optional[bytes]:
    """A path of the document, exactly: ``KEY_bytes`` when the name is not UTF-8, else
    ``KEY`` (None when null)."""
    b = raw.get(key + "_bytes")
    if b is not None:
        return bytes(b)
    s = raw.get(key)
    return None if s is None else os.fsencode(s)


class _Field(Generic[T]):
    """A typed, documented attribute read from the document's ``key``."""

    def __init__(self, key: str, conv: Callable[[Any], T], doc: str) -> None:
        self.key = key
        self.conv = conv
        self.__doc__ = doc

    @overload
    def __get__(self, obj: None, owner: type) -> "_Field[T]": ...

    @overload
    def __get__(self, obj: object, owner: type) -> T: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        return self.conv(obj._raw.get(self.key))


def _int(key: str, doc: str) -> _Field[int]:
    return _Field(key, lambda v: 0 if v is None else int(v), doc)


def _opt_int(key: str, doc: str) -> _Field[Optional[int]]:
    return _Field(key, lambda v: None if v is None else int(v), doc)


def _float(key: str, doc: str) -> _Field[float]:
    return _Field(key, lambda v: 0.0 if v is None else float(v), doc)


def _bool(key: str, doc: str) -> _Field[bool]:
    return _Field(key, bool, doc)


def _str(key: str, doc: str) -> _Field[Optional[str]]:
    return _Field(key, lambda v: v, doc)


def _view(cls: "type[V]", key: str, doc: str) -> "_Field[V]":
    return _Field(key, lambda v: cls(v if v is not None else {}), doc)


def _views(cls: "type[V]", key: str, doc: str) -> "_Field[List[V]]":
    return _Field(key, lambda v: [cls(x) for x in (v or [])], doc)


class View:
    """A read-only view over one object of a report's document."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Dict[str, Any]) -> None:
        self._raw = raw

    def to_dict(self) -> Dict[str, Any]:
        """The object as the CLI's ``--json`` prints it (a deep copy)."""
        return copy.deepcopy(self._raw)

    def __getattr__(self, name: str) -> Any:
        # Any key of the document not given a typed attribute above (never private names:
        # copy and pickle probe for them before `_raw` is set).
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._raw[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, View) and type(other) is type(self) and other._raw == self._raw

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = {k: v for k, v in self._raw.items() if not isinstance(v, (list, dict))}
        inner = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"{type(self).__name__}({inner})"


V = TypeVar("V", bound=View)


class PathView(View):
    """An object with a ``path``: the name as a str (``os.fsdecode``: exact, surrogate escapes
    for bytes that are not UTF-8) and as bytes."""

    __slots__ = ()

    @property
    def path_bytes(self) -> bytes:
        """The path's bytes, exactly."""
        return _path_bytes(self._raw) or b""

    @property
    def path(self) -> str:
        """The path as ``os.fsdecode`` gives it (round-trips through ``os.fsencode``)."""
        return os.fsdecode(self.path_bytes)

    def __fspath__(self) -> str:
        return self.path


class FileError(PathView):
    """One file that failed, as the CLI lists it (the run went on; ``error_count`` counts
    them all)."""

    __slots__ = ()
    op = _Field("op", str, "The system call or step that failed (``syscall`` too).")
    message = _Field("message", str, "What went wrong, in words.")
    errno = _opt_int("errno", "errno, when the kernel reported the failure.")

    @property
    def syscall(self) -> str:
        """The system call or step that failed, as strace names it."""
        return str(self._raw.get("op"))

    def exception(self) -> OSError:
        """This failure as the :class:`pagewise.Error` that would be raised for it."""
        from ._errors import error_from

        message = self.message
        # The errno is an attribute: not repeated in the text (Rust's " (os error N)").
        suffix = f" (os error {self.errno})"
        if self.errno and message.endswith(suffix):
            message = message[: -len(suffix)]
        return error_from(self.errno or 0, message, self.path_bytes, self.syscall)

    def __str__(self) -> str:
        return f"{self.path}: {self.syscall} failed: {self.message}"


class Report(View):
    """What every report carries: per-file errors, notices, time, interruption."""

    # The paths the call was given (as bytes), for ``repr``; not part of the document.
    __slots__ = ("_given",)
    _given: List[bytes]

    def _summary(self, size: int, cached: int) -> str:
        """``<pagewise.XReport path=... size=... cached=... errors=...>``."""
        given = getattr(self, "_given", None)
        if given is None:
            given = [_path_bytes(r) or b"" for r in self._raw.get("roots") or []]
        names = [os.fsdecode(p) for p in given]
        path: Any = names[0] if len(names) == 1 else names
        return (
            f"<pagewise.{type(self).__name__} path={path!r} size={size} cached={cached} "
            f"errors={self.error_count}>"
        )
    error_count = _int("error_count", "Files that failed, all of them (``errors`` keeps the first 10,000).")
    notices = _Field("notices", lambda v: list(v or []), "One-line notes: fallbacks taken, figures that cannot be known and why.")
    elapsed_s = _float("elapsed_s", "Wall time of the call, seconds.")
    interrupted = _bool("interrupted", "The call was cancelled; what it finished is complete.")

    @property
    def errors(self) -> List[FileError]:
        """Per-file failures, sorted by path."""
        return [FileError(e) for e in self._raw.get("errors") or []]

    @property
    def ok(self) -> bool:
        """True when every file succeeded and nothing stopped the call (CLI exit 0)."""
        return self.error_count == 0 and not self.interrupted


class _CachedTotalsReport(Report):
    """A report measured before and after (evict, load): ``total.cached_bytes_before`` and
    ``total.cached_bytes_after`` at the top level too, and the ``repr`` of ``total``."""

    __slots__ = ()
    total: Any

    @property
    def cached_bytes_before(self) -> int:
        """``total.cached_bytes_before``."""
        return self.total.cached_bytes_before

    def __repr__(self) -> str:
        return self._summary(self.total.bytes, self.total.cached_bytes_after)

    @property
    def cached_bytes_after(self) -> int:
        """``total.cached_bytes_after``."""
        return self.total.cached_bytes_after


class WalkSummary(View):
    """What a tree walk met besides the files it visited."""

    __slots__ = ()
    files = _int("files", "Regular files visited.")
    dirs = _int("dirs", "Directories read.")
    special_skipped = _int("special_skipped", "FIFOs, sockets and devices (never opened).")
    symlinks_skipped = _int("symlinks_skipped", "Symlinks inside trees not followed.")
    hardlinks_skipped = _int("hardlinks_skipped", "Extra names of hard-linked files already visited.")
    vanished = _int("vanished", "Entries that disappeared during the walk.")
    other_fs_skipped = _int("other_fs_skipped", "Directories on other filesystems not entered.")
    filtered = _int("filtered", "Excluded by globs or by the verb's filter.")


class Residency(View):
    """What the kernel holds of a file (or of its range), bytes."""

    __slots__ = ()
    bytes = _int("bytes", "Bytes measured: the file's size, or its part in the range.")
    cached_bytes = _opt_int("cached_bytes", "Bytes in the page cache (None: unknown).")
    dirty_bytes = _opt_int("dirty_bytes", "Dirty bytes (None: unknown, e.g. measured by mincore).")
    writeback_bytes = _opt_int("writeback_bytes", "Bytes under writeback (None: unknown).")
    evicted_bytes = _opt_int("evicted_bytes", "Bytes evicted (cachestat; None: unknown).")
    recently_evicted_bytes = _opt_int("recently_evicted_bytes", "Bytes recently evicted (None: unknown).")
    method = _Field("method", str, "How it was measured: 'cachestat', 'mincore' or 'unknown'.")
    unknown_reason = _str("unknown_reason", "Why the figures are None (only when ``method`` is 'unknown').")


class FileStat(PathView, Residency):
    """One file of :func:`pagewise.stat` (``files=True``)."""

    __slots__ = ()
    size_bytes = _int("size", "The file's size.")
    allocated_bytes = _int("allocated_bytes", "Bytes allocated on disk (sparse files have fewer).")

    @property
    def percent(self) -> Optional[float]:
        """Cached share of the measured bytes, 0-100 (None when unknown)."""
        c = self.cached_bytes
        if c is None:
            return None
        return 0.0 if self.bytes == 0 else c * 100.0 / self.bytes


class StatTotals(View):
    """Sums over many files (a root, or all of them)."""

    __slots__ = ()
    files = _int("files", "Files measured.")
    size_bytes = _int("size", "Sum of the files' sizes.")
    bytes = _int("bytes", "Bytes measured: the sizes, or the parts in the range.")
    cached_bytes = _int("cached_bytes", "Cached bytes, of the files whose residency is known.")
    dirty_bytes = _opt_int("dirty_bytes", "Dirty bytes (None when no file's method knows them).")
    writeback_bytes = _opt_int("writeback_bytes", "Bytes under writeback (None when unknown).")
    evicted_bytes = _opt_int("evicted_bytes", "Bytes evicted (None when unknown).")
    recently_evicted_bytes = _opt_int("recently_evicted_bytes", "Bytes recently evicted (None when unknown).")
    unknown_files = _int("unknown_files", "Files whose residency could not be known (left out of the figures).")
    unknown_bytes = _int("unknown_bytes", "Their bytes.")
    unknown_reason = _str("unknown_reason", "Why they are unknown.")
    detail_unknown_files = _int(
        "detail_unknown_files", "Files whose dirty, writeback and evicted figures are unknown (measured by mincore)."
    )

    @property
    def percent(self) -> Optional[float]:
        """Cached share of the bytes whose residency is known, 0-100 (None when none is)."""
        known = self.bytes - self.unknown_bytes
        if self.files > 0 and self.unknown_files == self.files:
            return None
        return 0.0 if known == 0 else self.cached_bytes * 100.0 / known


class RootTotals(PathView, StatTotals):
    """One root argument's sums."""

    __slots__ = ()


class StatReport(Report):
    """What :func:`pagewise.stat` measured. The totals are also attributes of the report
    (``report.cached_bytes`` is ``report.total.cached_bytes``); iterating gives the files
    (``files=True``)."""

    __slots__ = ()
    page_size = _int("page_size", "The kernel's page size.")
    total = _view(StatTotals, "total", "Sums over all roots.")
    roots = _views(RootTotals, "roots", "One entry per root that could be walked.")
    walk = _view(WalkSummary, "walk", "What the walk met besides the files measured.")
    files = _views(FileStat, "files", "Each file, sorted by path (``files=True``; else empty).")

    @property
    def size_bytes(self) -> int:
        """``total.size_bytes``: the files' sizes."""
        return self.total.size_bytes

    @property
    def bytes(self) -> int:
        """``total.bytes``: the bytes measured."""
        return self.total.bytes

    @property
    def cached_bytes(self) -> int:
        """``total.cached_bytes``."""
        return self.total.cached_bytes

    @property
    def dirty_bytes(self) -> Optional[int]:
        """``total.dirty_bytes``."""
        return self.total.dirty_bytes

    @property
    def writeback_bytes(self) -> Optional[int]:
        """``total.writeback_bytes``."""
        return self.total.writeback_bytes

    @property
    def evicted_bytes(self) -> Optional[int]:
        """``total.evicted_bytes``."""
        return self.total.evicted_bytes

    @property
    def percent(self) -> Optional[float]:
        """``total.percent``."""
        return self.total.percent

    def __iter__(self) -> Iterator[FileStat]:
        return iter(self.files)

    def __repr__(self) -> str:
        return self._summary(self.total.size_bytes, self.total.cached_bytes)

    def __len__(self) -> int:
        return len(self._raw.get("files") or [])


class EvictFile(PathView):
    """A file :func:`pagewise.evict` left pages of (``report.residue``)."""

    __slots__ = ()
    size_bytes = _int("size", "The file's size.")
    before = _view(Residency, "before", "What was cached before.")
    after = _view(Residency, "after", "What is cached after.")
    dropped_bytes = _opt_int("dropped_bytes", "Bytes dropped (None: unknown).")
    stayed_bytes = _opt_int("stayed_bytes", "Bytes that stayed (None: unknown).")
    reason = _str("reason", "Why they stayed: dirty, writeback, mapped, locked, in_use, partial_folio, no_backing_store, mounted.")
    pids = _Field("pids", lambda v: list(v or []), "Processes mapping it (``why=True``).")


class EvictTotals(View):
    """Sums of an eviction."""

    __slots__ = ()
    files = _int("files", "Files advised out.")
    bytes = _int("bytes", "Bytes in the requested ranges.")
    cached_bytes_before = _int("cached_bytes_before", "Cached before.")
    cached_bytes_after = _int("cached_bytes_after", "Cached after.")
    dropped_bytes = _int("dropped_bytes", "Dropped.")
    stayed_bytes = _int("stayed_bytes", "Still cached after.")
    dirty_bytes_written = _opt_int(
        "dirty_bytes_written", "Dirty bytes written back first (None: unknown without cachestat)."
    )
    files_with_residue = _int("files_with_residue", "Files with pages left.")
    not_owned_skipped = _int("not_owned_skipped", "Files left alone (``owned=True``).")
    unknown_files = _int("unknown_files", "Files whose residency could not be known.")
    unknown_bytes = _int("unknown_bytes", "Their bytes.")
    unknown_reason = _str("unknown_reason", "Why they are unknown (None: none is).")


class EvictReport(_CachedTotalsReport):
    """What :func:`pagewise.evict` did, measured before and after."""

    __slots__ = ()
    dry_run = _bool("dry_run", "Only measured; nothing was dropped.")
    page_size = _int("page_size", "The kernel's page size.")
    total = _view(EvictTotals, "total", "Sums.")
    residue = _views(EvictFile, "residue", "Files with pages left, and why.")
    walk = _view(WalkSummary, "walk", "What the walk met.")

    @property
    def dropped_bytes(self) -> int:
        """``total.dropped_bytes``."""
        return self.total.dropped_bytes

    @property
    def stayed_bytes(self) -> int:
        """``total.stayed_bytes``."""
        return self.total.stayed_bytes


class LoadTotals(View):
    """Sums of a load."""

    __slots__ = ()
    files = _int("files", "Files loaded or found fully cached.")
    bytes = _int("bytes", "Bytes in the requested ranges.")
    cached_bytes_before = _int("cached_bytes_before", "Cached before (known files).")
    cached_bytes_after = _int("cached_bytes_after", "Cached after.")
    already_cached_files = _int("already_cached_files", "Files skipped: fully cached already.")
    read_bytes = _int("read_bytes", "Bytes of the files that were read.")
    locked_bytes = _int("locked_bytes", "Bytes locked (``lock=True``).")
    locked_files = _int("locked_files", "Files locked.")
    unknown_files = _int("unknown_files", "Files whose residency before was unknown.")
    unknown_reason = _str("unknown_reason", "Why it was unknown (None: none was).")


class LoadReport(_CachedTotalsReport):
    """What :func:`pagewise.load` did."""

    __slots__ = ()
    page_size = _int("page_size", "The kernel's page size.")
    total = _view(LoadTotals, "total", "Sums.")
    rate_bytes_per_s = _float("rate_bytes_per_s", "Bytes newly brought in per second.")
    walk = _view(WalkSummary, "walk", "What the walk met.")

    @property
    def locked_bytes(self) -> int:
        """``total.locked_bytes``."""
        return self.total.locked_bytes


class CopyResidue(View):
    """What a copy left in the page cache, bytes."""

    __slots__ = ()
    source_added_bytes = _int("source_added_bytes", "Source pages cached by the copy.")
    source_precached_bytes = _int("source_precached_bytes", "Source pages cached before (left alone).")
    dest_cached_bytes = _int("dest_cached_bytes", "Destination pages still cached.")
    source_bytes = _int("source_bytes", "Data bytes of the sources.")
    dest_bytes = _int("dest_bytes", "Data bytes written.")
    source_unknown_files = _int("source_unknown_files", "Sources whose residency is unknown.")


class CopyItem(PathView):
    """One entry of a copy (``itemize_changes=True``, ``dry_run=True``): what the CLI's
    ``--json-lines`` streams and ``-i`` lists."""

    __slots__ = ()
    kind = _str("kind", "'file', 'dir', 'symlink', 'hardlink', 'special' (FIFO, socket) or 'device' (None for a failure).")
    action = _Field(
        "action",
        str,
        "'created', 'updated', 'skipped', 'deleted', 'metadata', 'failed', 'ignored' or 'backedup'.",
    )
    bytes = _int("bytes", "Logical bytes of a file created or updated (0 otherwise).")
    error = _str("error", "For 'failed': ``op failed: message``.")
    changes = _Field(
        "changes",
        lambda v: dict(v or {}),
        "What differed (rsync's itemize letters): keys 'content', 'size', 'time', 'perms', "
        "'owner', 'group', 'acl', 'xattr', present when true.",
    )

    @property
    def target_bytes(self) -> Optional[bytes]:
        """A symlink's text or a hard link's first name, exactly (None when there is none)."""
        return _path_bytes(self._raw, "target")

    @property
    def target(self) -> Optional[str]:
        """``target_bytes`` as ``os.fsdecode`` gives it."""
        b = self.target_bytes
        return None if b is None else os.fsdecode(b)

    def __repr__(self) -> str:
        return f"<pagewise.CopyItem {self.action} {self.kind or '-'} {self.path!r}>"


class CopyReport(Report):
    """What :func:`pagewise.copy` did."""

    __slots__ = ()
    files = _int("files", "Regular files copied.")
    dirs = _int("dirs", "Directories made or entered.")
    symlinks = _int("symlinks", "Symlinks copied.")
    hardlinks = _int("hardlinks", "Hard links recreated.")
    specials = _int("specials", "FIFOs, sockets and devices recreated (never opened).")
    bytes = _int("bytes", "Logical bytes of the copied files.")
    data_bytes = _int("data_bytes", "Bytes moved (holes excluded).")
    rate_bytes_per_s = _float("rate_bytes_per_s", "``data_bytes`` per second.")
    strategies = _Field("strategies", lambda v: dict(v or {}), "Files per strategy used ('direct', 'dontcache', ...).")
    residue = _view(CopyResidue, "residue", "What the copy left in the page cache.")
    verified_files = _int("verified_files", "Files re-read from disk and found equal (``verify=True``).")
    verify_mismatches = _int("verify_mismatches", "Files found different.")
    created = _int("created", "Entries that did not exist at the destination and were made (would be, with ``dry_run``).")
    updated = _int("updated", "Entries that existed and were replaced.")
    skipped = _int("skipped", "Entries that existed and were left as they were (up to date, or ``no_clobber``).")
    deleted = _int("deleted", "Entries removed because the source no longer has them (``delete=True``).")
    metadata_updated = _int(
        "metadata_updated", "Up-to-date files whose metadata only was brought over (``preserve``/``archive``)."
    )
    stale_temporaries_removed = _int("stale_temporaries_removed", "Temporaries of interrupted earlier copies removed.")
    resumed_files = _int("resumed_files", "Files continued from the partial temporary an earlier, stopped copy left.")
    resumed_bytes = _int("resumed_bytes", "Data bytes those files kept from the earlier copy (not copied again).")
    resume_compared_bytes = _int(
        "resume_compared_bytes", "Bytes read on each side to check kept data equals the source byte for byte."
    )
    dry_run = _bool("dry_run", "Nothing was changed: the counts say what the copy would do.")
    deletes_skipped = _int("deletes_skipped", "Deletions left undone by a deletion limit.")
    linked = _int("linked", "Files hard-linked from an alternate destination directory.")
    ignored = _int("ignored", "Entries left out by their kind (symlinks, devices, unsafe links).")
    total_size = _int("total_size", "Sizes of every regular file (each name) and symlink met.")
    auto_rate = _Field(
        "auto_rate",
        lambda v: None if v is None else dict(v),
        "What an adaptive bandwidth limit did (devices, baseline_ms, min_rate, max_rate, "
        "decreases); None without one.",
    )
    auto_choices = _Field(
        "auto_choices",
        lambda v: [dict(c) for c in v or []],
        "What the default strategy measured on files of 1 GiB or more, per pair of devices "
        "(source_device, dest_device, measured_bytes, rates_bytes_per_s: a dict from "
        "strategy name to bytes per second, chosen); empty when nothing was measured.",
    )
    items = _views(
        CopyItem,
        "items",
        "Every entry's outcome, sorted by path (``itemize_changes=True`` or ``dry_run=True``; else empty).",
    )

    def __repr__(self) -> str:
        verb = "would copy" if self.dry_run else "copied"
        return (
            f"<pagewise.CopyReport {verb} files={self.files} bytes={self.bytes} created={self.created} "
            f"updated={self.updated} skipped={self.skipped} deleted={self.deleted} errors={self.error_count}>"
        )


class SkippedFile(PathView):
    """A traced file that could not be reached."""

    __slots__ = ()
    reason = _Field("reason", str, "Why it was skipped.")


class ReplayReport(Report):
    """What one :func:`pagewise.replay` did."""

    __slots__ = ()
    order = _Field("order", str, "'recorded', 'file' or 'disk'.")
    direct = _bool("direct", "Read with O_DIRECT.")
    depth = _int("depth", "Requests in flight.")
    requests = _int("requests", "Requests issued.")
    bytes = _int("bytes", "Bytes read.")
    mb_per_s = _float("mb_per_s", "MB (10^6 bytes) per second of I/O.")
    files = _int("files", "Traced files read from.")
    files_missing = _int("files_missing", "Traced files skipped.")
    skipped = _views(SkippedFile, "skipped", "The first skipped files, with the reason.")


class TraceCacheReport(Report):
    """What ``evict(trace=...)`` / ``load(trace=...)`` did to the traced pages."""

    __slots__ = ()
    dry_run = _bool("dry_run", "Only measured.")
    files = _int("files", "Traced files opened.")
    files_missing = _int("files_missing", "Traced files skipped.")
    skipped = _views(SkippedFile, "skipped", "The first skipped files, with the reason.")
    ranges = _int("ranges", "Distinct traced ranges.")
    bytes = _int("bytes", "Bytes of the traced ranges.")
    cached_bytes_before = _int("cached_bytes_before", "Cached before (known files).")
    cached_bytes_after = _int("cached_bytes_after", "Cached after.")
    unknown_files = _int("unknown_files", "Files whose residency is unknown.")
    unknown_reason = _str("unknown_reason", "Why it is unknown (None: none is).")


class DroppingReport(Report):
    """What ``with pagewise.dropping():`` did to the page cache, bytes."""

    __slots__ = ()
    added_bytes = _int("added_bytes", "Brought into the cache inside the block.")
    dropped_bytes = _int("dropped_bytes", "Dropped again (measured before and after each drop).")
    left_bytes = _int("left_bytes", "Of those pages, still cached at the end.")
    left_dirty_bytes = _opt_int(
        "left_dirty_bytes", "Of ``left_bytes``, dirty or under writeback (None: unknown, without cachestat)."
    )
    left_mapped_or_busy_bytes = _opt_int(
        "left_mapped_or_busy_bytes", "Of ``left_bytes``, mapped or busy (None: unknown, without cachestat)."
    )
    kept_written_bytes = _int("kept_written_bytes", "Bytes of written files left alone (``keep_written``).")
    drops_while_running = _int("drops_while_running", "Drop-behind passes inside the block (``max_cache``).")
    files = _int("files", "Files pages were added to.")
    files_unreachable = _int("files_unreachable", "Files that could not be opened to drop their pages.")
    unreachable_bytes = _int(
        "unreachable_bytes", "Bytes added to those files: neither dropped nor measured (a promise not kept)."
    )
    unreachable_reason = _str("unreachable_reason", "Why one of those files could not be opened (None: none).")
    metadata_bytes = _int("metadata_bytes", "Bytes of file systems' own pages (block device, btrfs btree): not dropped.")
    lost_events = _int("lost_events", "Events the kernel lost (their pages may stay).")
    method = _Field("method", str, "How the pages were measured: 'cachestat' or 'mincore' (or 'unknown').")
    unknown_reason = _str(
        "unknown_reason", "Why ``left_dirty_bytes`` and ``left_mapped_or_busy_bytes`` are None (only when they are)."
    )


class RecordReport(Report):
    """What :func:`pagewise.record` gives back: the command's exit code and its trace. The
    document (``to_dict()``) leaves the trace out; ``report.trace.to_dict()`` has it."""

    __slots__ = ("trace",)
    exit_code = _int("exit_code", "The command's exit code (128 + N when killed by signal N).")
    source = _Field("source", str, "How events were collected: 'perf' or 'tracefs'.")

    def __init__(self, raw: Dict[str, Any], trace: Any) -> None:
        super().__init__(raw)
        self.trace = trace


# The cgroup reports live beside (their module imports the field helpers from here).
from ._cgroup_reports import (  # noqa: E402
    CgroupCharge,
    CgroupChargeReport,
    CgroupStat,
    CgroupsReport,
    ChargeTotals,
    FileCharge,
)
