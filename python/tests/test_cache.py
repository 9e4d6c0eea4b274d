"""stat, evict, load and copy, checked against the kernel (cachestat through the library's
stat) and against the CLI's --json documents."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import pagewise
from conftest import cached, cold, has_cachestat, without, write_file

MIB = 1 << 20


def test_stat_reports_bytes_the_kernel_holds(scratch: Path) -> None:
    f = write_file(scratch / "f", 8 * MIB)
    cold(f)
    r = pagewise.stat(f)
    assert (r.size_bytes, r.cached_bytes, r.total.files) == (8 * MIB, 0, 1)
    # Read the first 2 MiB: exactly those are cached now (cachestat's word).
    with open(f, "rb") as fh:
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        fh.read(2 * MIB)
    r = pagewise.stat(f, range="0-2M")
    assert r.bytes == 2 * MIB and r.cached_bytes == 2 * MIB
    if has_cachestat():
        assert r.dirty_bytes == 0 and r.writeback_bytes == 0
        assert isinstance(r.evicted_bytes, int)
    else:  # mincore sees residency only: the rest is unknown, never 0
        assert r.dirty_bytes is None and r.writeback_bytes is None and r.evicted_bytes is None


def test_stat_files_lists_each_file_with_exact_paths(scratch: Path) -> None:
    odd = os.fsencode(scratch) + b"/caf\xe9"  # not UTF-8
    write_file(Path(os.fsdecode(odd)), 4096)
    write_file(scratch / "b", 3 * 4096)
    r = pagewise.stat(scratch, files=True)
    assert [f.path_bytes for f in r] == sorted([odd, os.fsencode(scratch / "b")])
    paths = {f.path_bytes: f for f in r.files}
    assert os.fsencode(paths[odd].path) == odd  # str form round-trips through fsencode
    assert paths[odd].to_dict()["path_bytes"] == list(odd)
    assert paths[os.fsencode(scratch / "b")].size_bytes == 3 * 4096
    assert len(r) == 2 and r.total.files == 2 and r.roots[0].path == str(scratch)


def test_to_dict_is_the_cli_json(scratch: Path, cli) -> None:
    write_file(scratch / "a", 3 * MIB)
    write_file(scratch / "b", 5000)
    (scratch / "d").mkdir()
    write_file(scratch / "d" / "c", 70000)
    missing = scratch / "missing"
    # stat: per-file list (-l) and a failing root, as the CLI prints them.
    py = pagewise.stat([scratch, missing], files=True).to_dict()
    sh = cli("stat", "-l", scratch, missing)
    assert without(py, "elapsed_s") == without(sh, "elapsed_s")
    assert py["error_count"] == 1 and py["errors"][0]["errno"] == errno.ENOENT
    # evict --dry-run changes nothing: both see the same cache.
    py = pagewise.evict(scratch, dry_run=True, range="4K-").to_dict()
    sh = cli("evict", "--dry-run", "--range", "4K-", scratch)
    assert without(py, "elapsed_s") == without(sh, "elapsed_s")
    # load of what is cached already reads nothing: the same document.
    pagewise.load(scratch)
    py = pagewise.load(scratch).to_dict()
    sh = cli("load", scratch)
    assert without(py, "elapsed_s", "rate_bytes_per_s") == without(sh, "elapsed_s", "rate_bytes_per_s")


def test_evict_drops_and_says_what_stayed(scratch: Path) -> None:
    f = write_file(scratch / "f", 4 * MIB, sync=False)  # dirty: written back first
    assert cached(f) == 4 * MIB
    r = pagewise.evict(f)
    assert r.error_count == 0 and r.dropped_bytes == 4 * MIB and r.stayed_bytes == 0
    assert r.total.dirty_bytes_written == (4 * MIB if has_cachestat() else None)
    assert cached(f) == 0
    assert pagewise.evict(f, dry_run=True).cached_bytes_before == 0


def test_load_brings_files_in(scratch: Path) -> None:
    for i in range(20):
        write_file(scratch / f"f{i}", 100_000)
    cold(scratch)
    r = pagewise.load(scratch, exclude=["f1*"])
    assert r.total.files == 9  # f1, f10..f19 excluded
    assert r.total.read_bytes == 9 * 100_000
    assert cached(scratch / "f2") == 100_000 and cached(scratch / "f15") == 0


def test_load_lock_keeps_pages_resident_until_closed(scratch: Path) -> None:
    f = write_file(scratch / "f", 4 * MIB)
    cold(f)
    with pagewise.load(f, lock=True) as held:
        assert held.locked and held.locked_bytes == 4 * MIB
        # mlocked pages survive DONTNEED: the kernel still holds all of them.
        stayed = pagewise.evict(f, why=True)
        assert stayed.stayed_bytes == 4 * MIB and stayed.residue[0].reason == "locked"
        assert os.getpid() in stayed.residue[0].pids
        assert cached(f) == 4 * MIB
    assert not held.locked
    assert pagewise.evict(f).dropped_bytes == 4 * MIB
    assert cached(f) == 0
    held.close()  # idempotent


def test_per_file_errors_are_in_the_report(scratch: Path) -> None:
    write_file(scratch / "ok", 4096)
    r = pagewise.evict([scratch / "ok", scratch / "nope"])
    assert r.error_count == 1 and not r.ok
    e = r.errors[0]
    assert (e.path, e.errno, e.syscall) == (str(scratch / "nope"), errno.ENOENT, "stat")
    exc = e.exception()
    assert isinstance(exc, FileNotFoundError) and isinstance(exc, pagewise.Error)
    assert exc.filename == str(scratch / "nope") and exc.syscall == "stat"


def test_fatal_errors_are_oserrors_with_errno_filename_syscall(scratch: Path) -> None:
    with pytest.raises(FileNotFoundError) as ei:
        pagewise.Trace.open(scratch / "no.trace")
    e = ei.value
    assert isinstance(e, pagewise.Error) and isinstance(e, OSError)
    assert (e.errno, e.filename, e.syscall) == (errno.ENOENT, str(scratch / "no.trace"), "read")
    with pytest.raises(ValueError, match="roots"):
        pagewise.stat([])
    with pytest.raises(ValueError, match="glob"):
        pagewise.stat(scratch, include=["a[b"])
    with pytest.raises(ValueError, match="method"):
        pagewise.stat(scratch, method="guess")
    with pytest.raises(ValueError, match="range"):
        pagewise.stat(scratch, range="9-3")
    (scratch / "t").write_bytes(b"not a trace")
    with pytest.raises(pagewise.TraceError, match="bad magic"):
        pagewise.Trace.open(scratch / "t")


def test_copy_leaves_the_cache_as_it_was(scratch: Path) -> None:
    src = scratch / "src"
    src.mkdir()
    write_file(src / "big", 16 * MIB)
    write_file(src / "small", 10_000)
    cold(src)
    r = pagewise.copy(src, scratch / "dst", verify=True)
    assert r.ok and r.files == 2 and r.data_bytes == 16 * MIB + 10_000 and r.verified_files == 2
    assert sum(r.strategies.values()) == 2
    assert (scratch / "dst" / "big").read_bytes() == (src / "big").read_bytes()
    cold(src)
    cold(scratch / "dst")
    # What the copy reported as residue is what the kernel shows: nothing.
    r = pagewise.copy(src / "big", scratch / "big2", cache="direct")
    assert r.strategies == {"direct": 1}
    assert cached(src / "big") == r.residue.source_added_bytes == 0
    assert cached(scratch / "big2") == r.residue.dest_cached_bytes == 0


def test_progress_is_called_from_the_caller_and_can_cancel(scratch: Path) -> None:
    import threading

    for i in range(50):
        write_file(scratch / f"f{i}", 8192)
    seen = []
    me = threading.get_ident()
    r = pagewise.stat(scratch, progress=lambda files, nbytes: seen.append((files, nbytes, threading.get_ident())))
    assert seen and seen[-1][:2] == (50, 50 * 8192) and {t for _, _, t in seen} == {me}
    assert r.total.files == 50

    class Stop(Exception):
        pass

    def stop(files: int, nbytes: int) -> None:
        raise Stop

    with pytest.raises(Stop):
        pagewise.load(scratch, progress=stop)
