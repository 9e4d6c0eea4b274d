"""The cgroup reports: :func:`pagewise.cgroups` (memory.stat per cgroup) and
:func:`pagewise.stat` with ``by_cgroup`` (pages per cgroup), views over the CLI's documents."""

from __future__ import annotations

from typing import Iterator

from ._reports import PathView, Report, View, WalkSummary, _Field, _int, _opt_int, _view, _views


class CgroupStat(PathView):
    """One memory cgroup of :func:`pagewise.cgroups`: its file cache from ``memory.stat``,
    descendants included, bytes. ``path`` is its directory."""

    __slots__ = ()
    cgroup = _Field("cgroup", str, "Its cgroup path ('/system.slice/x'; '/' for the hierarchy's root).")
    depth = _int("depth", "Levels below the group listed first (0 for it).")
    file_bytes = _int("file_bytes", "File-backed pages charged to it, shmem included (v2 ``file``, v1 ``cache``).")
    dirty_bytes = _int("dirty_bytes", "Dirty file pages.")
    writeback_bytes = _int("writeback_bytes", "File pages under writeback.")
    mapped_bytes = _int("mapped_bytes", "File pages mapped into processes.")
    active_bytes = _int("active_bytes", "File pages on the active LRU list.")
    inactive_bytes = _int("inactive_bytes", "File pages on the inactive LRU list (reclaimed first).")
    shmem_bytes = _int("shmem_bytes", "Of ``file_bytes``, shmem and tmpfs (cannot be dropped).")
    workingset_refaults = _opt_int(
        "workingset_refaults", "Evicted file pages read again soon after (a count; None when the kernel has none)."
    )

    def __repr__(self) -> str:
        return (
            f"<pagewise.CgroupStat {self.cgroup} file={self.file_bytes} dirty={self.dirty_bytes} "
            f"mapped={self.mapped_bytes}>"
        )


class CgroupsReport(Report):
    """What :func:`pagewise.cgroups` found: one :class:`CgroupStat` per group (iterate the
    report), parents before children unless sorted."""

    __slots__ = ()
    hierarchy = _Field("hierarchy", str, "'v1' (the memory controller) or 'v2'.")
    groups = _views(CgroupStat, "groups", "The groups, in the order asked for.")

    def __iter__(self) -> Iterator[CgroupStat]:
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self._raw.get("groups") or [])

    def __repr__(self) -> str:
        first = self.groups[0].cgroup if len(self) else None
        return f"<pagewise.CgroupsReport {self.hierarchy} root={first!r} groups={len(self)} errors={self.error_count}>"


class CgroupCharge(View):
    """Cached bytes charged to one memory cgroup (:func:`pagewise.stat` ``by_cgroup=True``)."""

    __slots__ = ()
    cgroup = _Field(
        "cgroup", str, "The cgroup path; '(inode N)' for a group removed since, '(none)' for pages of no group."
    )
    inode = _int("inode", "The memory cgroup's inode (its directory's), as /proc/kpagecgroup gives it.")
    bytes = _int("bytes", "Cached bytes charged to it.")
    files = _int("files", "Files with at least one page charged to it.")

    def __repr__(self) -> str:
        return f"<pagewise.CgroupCharge {self.cgroup} bytes={self.bytes} files={self.files}>"


class ChargeTotals(View):
    """Sums over all files of a ``stat(by_cgroup=True)``."""

    __slots__ = ()
    files = _int("files", "Files looked at.")
    size = _int("size", "Their sizes.")
    cached_bytes = _int("cached_bytes", "Cached bytes whose cgroup was found.")
    unresolved_bytes = _int("unresolved_bytes", "Cached bytes whose page frame could not be found (evicted meanwhile).")


class FileCharge(PathView):
    """One file's cached pages per cgroup (``stat(by_cgroup=True, files=True)``)."""

    __slots__ = ()
    size = _int("size", "The file's size.")
    cached_bytes = _int("cached_bytes", "Its cached bytes whose cgroup was found.")
    unresolved_bytes = _int("unresolved_bytes", "Cached bytes whose frame could not be found.")
    cgroups = _views(CgroupCharge, "cgroups", "Per cgroup, most bytes first.")


class CgroupChargeReport(Report):
    """Which memory cgroups the cached pages of files and trees are charged to
    (:func:`pagewise.stat` with ``by_cgroup=True``, ``pagewise stat --by-cgroup``)."""

    __slots__ = ()
    total = _view(ChargeTotals, "total", "Sums over all files.")
    cgroups = _views(CgroupCharge, "cgroups", "Per cgroup, most bytes first.")
    walk = _view(WalkSummary, "walk", "What the walk met besides the files looked at.")
    files = _views(FileCharge, "files", "Each file, most cached first (``files=True``; else empty).")

    @property
    def size_bytes(self) -> int:
        """``total.size``: the files' sizes."""
        return self.total.size

    @property
    def cached_bytes(self) -> int:
        """``total.cached_bytes``."""
        return self.total.cached_bytes

    def __iter__(self) -> Iterator[FileCharge]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self._raw.get("files") or [])

    def __repr__(self) -> str:
        return self._summary(self.total.size, self.total.cached_bytes)
