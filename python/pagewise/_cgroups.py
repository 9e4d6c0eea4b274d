"""``pagewise cgroups``: :func:`cgroups`, the page cache per memory cgroup. (Which cgroup
the pages of given files are charged to is ``stat(by_cgroup=True)``, in ``_cache``.)"""

from __future__ import annotations

import os
from typing import Optional

from . import _pagewise
from ._common import PathArg, public
from ._reports import CgroupsReport


@public
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
