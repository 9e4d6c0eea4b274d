"""Shared fixtures. Every test asserts on what the kernel reports: the library's stat
(cachestat, else mincore) or the CLI's ``pagewise stat --json``, never on what a call says
it did. Nothing is skipped silently: a test that cannot run here fails, or says why it skips
(and tests/python.rs, which runs this suite, fails on any skip)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

import pagewise

REPO = Path(__file__).resolve().parents[2]

# tests/python.rs runs this suite against the wheel it installed into a fresh virtualenv:
# make sure that is the package imported, not the source folder.
_prefix = os.environ.get("PAGEWISE_EXPECT_PREFIX")
if _prefix and not os.path.realpath(pagewise.__file__).startswith(os.path.realpath(_prefix)):
    raise RuntimeError(f"imported {pagewise.__file__}, expected the package installed in {_prefix}")


def _fstype(path: Path) -> str:
    """The filesystem type of the mount holding `path` (longest mount point prefix)."""
    best, kind = "", ""
    p = str(path.resolve())
    with open("/proc/self/mounts") as m:
        for line in m:
            fields = line.split()
            mnt = fields[1].replace("\\040", " ")
            if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, fields[2]
    return kind


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A fresh directory on a disk filesystem (tmpfs pages cannot be dropped): the system's
    temporary directory, or PAGEWISE_TEST_DIR, or a directory in the repository."""
    base = os.environ.get("PAGEWISE_TEST_DIR") or tempfile.gettempdir()
    if _fstype(Path(base)) in ("tmpfs", "ramfs", ""):
        base = str(REPO / "target")
        os.makedirs(base, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="pagewise-py-", dir=base))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def write_file(path: Path, size: int, sync: bool = True) -> Path:
    """`size` bytes of a repeating pattern, written back to disk (so it can be evicted)."""
    block = bytes(range(256)) * 4096  # 1 MiB
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
        if sync:
            f.flush()
            os.fsync(f.fileno())
    return path


def cold(path: Path) -> None:
    """Drops the file's pages, and checks with the kernel that none stayed."""
    pagewise.evict(path)
    assert cached(path) == 0, f"{path} stayed cached after evict"


def cached(path: Path) -> int:
    """Cached bytes of a file or tree, as the library's stat (cachestat) measures them."""
    r = pagewise.stat(path)
    assert r.error_count == 0, r.errors
    return r.cached_bytes


def cli_path() -> Optional[str]:
    """The pagewise CLI to compare with: PAGEWISE_BIN, else on PATH, else the repository's
    release build."""
    env = os.environ.get("PAGEWISE_BIN")
    if env:
        return env
    found = shutil.which("pagewise")
    if found:
        return found
    for build in ("release", "debug"):
        p = REPO / "target" / build / "pagewise"
        if p.exists():
            return str(p)
    return None


@pytest.fixture
def cli() -> Any:
    """Runs `pagewise ARGS --json` and returns the parsed document."""
    exe = cli_path()
    if exe is None:
        pytest.skip("no pagewise CLI to compare with: set PAGEWISE_BIN (tests/python.rs does)")

    def run(*args: Any, json_flag: bool = True) -> Any:
        argv: List[str] = [exe] + [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
        if json_flag:
            argv.append("--json")
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode in (0, 2), f"{argv}: exit {p.returncode}: {p.stderr.decode()}"
        return json.loads(p.stdout)

    return run


def without(doc: Any, *keys: str) -> Any:
    """The document with the given keys removed at every level (timings)."""
    if isinstance(doc, dict):
        return {k: without(v, *keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [without(v, *keys) for v in doc]
    return doc


def run_python(code: str, **kw: Any) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (this one's), returning the finished process."""
    return subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def has_cachestat() -> bool:
    """True when the kernel has cachestat(2) (6.5+); before it, dirty and writeback counts are
    unknown (None) and only residency is measured (mincore)."""
    import ctypes
    import errno

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/proc/self/exe", os.O_RDONLY)
    try:
        rng, cs = (ctypes.c_uint64 * 2)(0, 1), (ctypes.c_uint64 * 5)()
        if libc.syscall(451, fd, rng, cs, 0) == 0:
            return True
        return ctypes.get_errno() != errno.ENOSYS
    finally:
        os.close(fd)
