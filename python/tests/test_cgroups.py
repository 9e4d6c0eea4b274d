"""pagewise.cgroups() and pagewise.stat(by_cgroup=True) against the kernel (the group's
memory.stat, cachestat of the files) and against the CLI's ``cgroups --json`` and
``stat --by-cgroup --json`` on the same state.

Safety: groups are made only beneath this process's own memory cgroup and removed at the end
of each test; only processes the test starts are moved into them."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional, Tuple

import pytest

import pagewise
from conftest import cached, cold, without, write_file

MIB = 1 << 20
_N = itertools.count()


def own_memory_cgroup() -> Tuple[Optional[Path], str]:
    """This process's memory cgroup directory (v1's memory controller, else v2), found from
    /proc/self/cgroup and /proc/self/mountinfo; or None and why not."""
    v1 = v2 = None
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, rel = line.rstrip("\n").split(":", 2)
            if "memory" in ctrls.split(","):
                v1 = rel
            elif ctrls == "":
                v2 = rel
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for rel, want in ((v1, "cgroup"), (v2, "cgroup2")):
        if rel is None:
            continue
        for m in mounts:
            tail = m[m.index("-") + 1 :]
            fstype, opts = tail[0], tail[2].split(",")
            if fstype != want or (want == "cgroup" and "memory" not in opts):
                continue
            root, point = m[3], m[4]
            if rel == root or rel.startswith(root.rstrip("/") + "/") or root == "/":
                d = Path(point) / os.path.relpath(rel, root)
                if d.is_dir() and (d / "memory.stat").exists():
                    return d, ""
    return None, "no memory cgroup of this process is mounted (neither v1 memory nor v2 with memory)"


def stat_lag() -> int:
    """How far memory.stat may lag the charges: MEMCG_CHARGE_BATCH pages per CPU (64; 32 before
    6.1). Before Linux 5.13 (rstat) a CPU's batch reaches memory.stat only once it is full, with
    no flush ever (5.10 showed 8 MiB read in a group as 2046 pages, for good); since 6.8 the
    kernel's periodic flush catches up within 2 s."""
    return 64 * os.sysconf("SC_PAGE_SIZE") * (os.cpu_count() or 1)


def memory_stat_file_bytes(d: Path) -> int:
    """The kernel's figure: file cache charged to the group (v2 ``file``, v1 ``total_cache``)."""
    key = "file" if (d / "cgroup.controllers").exists() else "total_cache"
    for line in (d / "memory.stat").read_text().splitlines():
        k, v = line.split()
        if k == key:
            return int(v)
    raise AssertionError(f"{d}/memory.stat has no {key}")


@pytest.fixture
def child_cgroup() -> Iterator[Path]:
    """A memory cgroup made beneath our own, removed afterwards."""
    own, why = own_memory_cgroup()
    if own is None:
        pytest.skip(why)
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    d = own / f"pagewise-pytest-{os.getpid()}-{next(_N)}"
    try:
        os.mkdir(d)
    except OSError as e:
        pytest.skip(f"cannot make a cgroup beneath our own ({own}): {e}")
    if not (d / "memory.stat").exists():
        os.rmdir(d)
        pytest.skip(f"the memory controller is not delegated to {own} (no memory.stat in a child)")
    try:
        yield d
    finally:
        os.rmdir(d)  # its processes have exited; charged pages move to the parent


def read_in(group: Path, file: Path) -> None:
    """Reads `file` from a shell moved into `group` first: the pages are charged to it."""
    subprocess.run(
        ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec cksum "$2"', "sh", str(group), str(file)],
        stdout=subprocess.PIPE,
        check=True,
    )


def test_cgroups_reports_memory_stat_as_the_cli(scratch: Path, child_cgroup: Path, cli) -> None:
    f = write_file(scratch / "f", 8 * MIB)
    cold(f)
    read_in(child_cgroup, f)
    assert cached(f) == 8 * MIB
    r = pagewise.cgroups(child_cgroup)
    assert isinstance(r, pagewise.CgroupsReport) and r.ok
    assert r.hierarchy in ("v1", "v2") and len(r.groups) == 1
    g = r.groups[0]
    assert isinstance(g, pagewise.CgroupStat)
    assert g.depth == 0 and g.path == str(child_cgroup) and g.cgroup.endswith("/" + child_cgroup.name)
    assert g.file_bytes == memory_stat_file_bytes(child_cgroup)
    assert 8 * MIB - stat_lag() <= g.file_bytes <= 8 * MIB + stat_lag()
    assert without(r.to_dict(), "elapsed_s") == without(cli("cgroups", child_cgroup), "elapsed_s")
    # From our own group one level down: the child is listed, named as the CLI names it.
    # (Only our groups are compared: other processes sharing our group may make theirs.)
    mine = pagewise.cgroups(self=True, max_depth=1)
    theirs = cli("cgroups", "--self", "-d", "1")
    ours = lambda gs: [(c, d) for c, d in gs if d == 0 or c == g.cgroup]  # noqa: E731
    assert ours([(x.cgroup, x.depth) for x in mine.groups]) == ours([(x["cgroup"], x["depth"]) for x in theirs["groups"]])
    assert mine.groups[0].depth == 0 and mine.groups[0].path == str(child_cgroup.parent)
    child = [x for x in mine.groups if x.cgroup == g.cgroup]
    assert len(child) == 1 and child[0].depth == 1 and child[0].file_bytes >= 8 * MIB - stat_lag()
    # sort / top: as the CLI orders and cuts them (the child's figures are stable: no process).
    top = pagewise.cgroups(child_cgroup, top=1)
    assert [x.cgroup for x in top.groups] == [g.cgroup]
    by_file = pagewise.cgroups(self=True, max_depth=1, sort="file")
    files = [x.file_bytes for x in by_file.groups]
    assert files == sorted(files, reverse=True)
    theirs = cli("cgroups", "--self", "-d", "1", "--top", "1")
    assert [x.cgroup for x in pagewise.cgroups(self=True, max_depth=1, top=1).groups] == [
        x["cgroup"] for x in theirs["groups"]
    ]
    assert repr(g).startswith("<pagewise.CgroupStat ")
    with pytest.raises(ValueError, match="sort"):
        pagewise.cgroups(child_cgroup, sort="size")
    with pytest.raises(ValueError, match="self"):
        pagewise.cgroups(child_cgroup, self=True)


def test_cgroups_of_a_missing_group_raises(scratch: Path) -> None:
    own, why = own_memory_cgroup()
    if own is None:
        pytest.skip(why)
    with pytest.raises(FileNotFoundError):
        pagewise.cgroups(own / "no-such-group-here")


def test_stat_by_cgroup_names_who_pays_for_the_pages(scratch: Path, child_cgroup: Path, cli) -> None:
    if os.geteuid() != 0:
        pytest.skip("stat --by-cgroup needs root (/proc/kpagecgroup)")
    a = write_file(scratch / "a", 8 * MIB)
    b = write_file(scratch / "b", 2 * MIB)
    cold(a)
    cold(b)
    read_in(child_cgroup, a)
    with open(b, "rb") as fh:  # read here: charged to our own group
        fh.read()
    assert cached(a) == 8 * MIB and cached(b) == 2 * MIB
    r = pagewise.stat(a, by_cgroup=True)
    assert isinstance(r, pagewise.CgroupChargeReport) and r.ok
    assert r.total.files == 1 and r.total.size == 8 * MIB
    assert r.total.cached_bytes + r.total.unresolved_bytes == cached(a)
    assert len(r.cgroups) == 1
    c = r.cgroups[0]
    assert c.cgroup.endswith("/" + child_cgroup.name) and c.bytes == 8 * MIB and c.files == 1
    assert c.inode == os.stat(child_cgroup).st_ino
    assert without(r.to_dict(), "elapsed_s") == without(cli("stat", "--by-cgroup", a), "elapsed_s")
    # A tree, per file (-l): each file's pages and their groups, as the CLI lists them.
    r = pagewise.stat(scratch, by_cgroup=True, files=True)
    doc = cli("stat", "--by-cgroup", "-l", scratch)
    assert without(r.to_dict(), "elapsed_s") == without(doc, "elapsed_s")
    assert [f.path for f in r.files] == [str(a), str(b)]  # most cached first
    fa, fb = r.files
    assert isinstance(fa, pagewise.FileCharge) and fa.size == 8 * MIB
    assert [(x.cgroup, x.bytes) for x in fa.cgroups] == [(c.cgroup, 8 * MIB)]
    assert sum(x.bytes for x in fb.cgroups) == 2 * MIB and fb.cgroups[0].cgroup != c.cgroup
    assert {x.cgroup for x in r.cgroups} == {c.cgroup, fb.cgroups[0].cgroup}
    assert list(r) == r.files and len(r) == 2


def test_stat_by_cgroup_single_missing_path_raises(scratch: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("stat --by-cgroup needs root (/proc/kpagecgroup)")
    with pytest.raises(FileNotFoundError):
        pagewise.stat(scratch / "missing", by_cgroup=True)
    with pytest.raises(ValueError, match="range"):
        pagewise.stat(scratch, by_cgroup=True, range="0-4K")


def test_stat_by_cgroup_without_root_is_a_permission_error(scratch: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to start a child that gives root up")
    f = write_file(scratch / "f", 4096)
    os.chmod(scratch, 0o755)
    code = (
        "import os, sys, pagewise\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        "    pagewise.stat(sys.argv[1], by_cgroup=True)\n"
        "except PermissionError as e:\n"
        "    print('PermissionError', isinstance(e, pagewise.Error), e.errno, e.filename, e.syscall)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/"
    )
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().startswith("PermissionError True 1 /proc/kpagecgroup open"), p.stdout.decode()
