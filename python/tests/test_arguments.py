"""Arguments no call can honour: sizes that cannot be allocated, alignments that are not
powers of two or are absurd, offsets past what the kernel takes, depths and thread counts of
zero or of billions. Each is a Python exception naming the argument; none may abort the
interpreter (each probe runs in a fresh one, so an abort fails the test instead of the run).
And writes past the end of a file: the gap reads as zeros and the size is right at once."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import textwrap
import warnings
from pathlib import Path
from typing import Iterator

import pytest

import pagewise
from conftest import _fstype, run_python, write_file

HUGE_SIZES = [2**62, 2**63 - 1, 2**63, 2**64, 2**64 + 5, 2**100]
BAD_ALIGNS = [0, 3, 3000, -4096, 2**31, 2**40, 2**63, 2**64, 2**70]


def probe(code: str) -> str:
    """Runs `code` in a fresh interpreter with pagewise imported; returns what it printed.
    A crash (abort, segfault, panic) fails with its signal and stderr."""
    p = run_python("import pagewise\n" + textwrap.dedent(code), timeout=60)
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 0, f"the interpreter died ({p.returncode}):\n{out}\n{err}"
    assert out.rstrip().endswith("alive"), f"{out}\n{err}"
    return out


def test_aligned_buffer_of_impossible_sizes_raises_memory_error() -> None:
    out = probe(
        f"""
        for size in {HUGE_SIZES!r}:
            try:
                pagewise.aligned_buffer(size)
                print(size, "allocated")
            except MemoryError as e:
                print(size, "MemoryError", e)
        b = pagewise.aligned_buffer(4096)
        b[0] = 1
        print("alive")
        """
    )
    for size in HUGE_SIZES:
        assert f"{size} MemoryError" in out, out
    with pytest.raises(ValueError):
        pagewise.aligned_buffer(-1)


def test_aligned_buffer_of_impossible_alignments_raises_value_error() -> None:
    out = probe(
        f"""
        for align in {BAD_ALIGNS!r}:
            try:
                pagewise.aligned_buffer(10, align=align)
                print(align, "allocated")
            except ValueError as e:
                print(align, "ValueError", e)
        # The largest alignment taken: 1 GiB.
        b = pagewise.aligned_buffer(10, align=1 << 30)
        import ctypes
        assert ctypes.addressof(ctypes.c_char.from_buffer(b)) % (1 << 30) == 0
        print("alive")
        """
    )
    for align in BAD_ALIGNS:
        assert f"{align} ValueError" in out, out
    assert "align" in out


@pytest.fixture(params=["disk", "tmpfs"])
def where(request: pytest.FixtureRequest, scratch: Path) -> Iterator[Path]:
    """A directory on the disk filesystem of `scratch` (ext4 here), or on a tmpfs mounted for
    the test in it (unmounted also when the test fails)."""
    if request.param == "disk":
        assert _fstype(scratch) not in ("tmpfs", "ramfs"), _fstype(scratch)
        yield scratch
        return
    mnt = scratch / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "pagewise-py-test", str(mnt)], check=True)
    try:
        assert _fstype(mnt) == "tmpfs"
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("cache", ["direct", "dontcache", "drop-behind"])
@pytest.mark.parametrize(
    "before,at,data",
    [
        (0, 10_000, b"tail"),
        (100, 200, b"12345"),
        (5000, (3 << 20) + 17, bytes(range(256)) * 300),
        (777, 1 << 20, b"x" * (1 << 20)),
    ],
)
@pytest.mark.parametrize("first", ["read", "size"])
def test_a_write_past_the_end_leaves_zeros_and_the_size(
    where: Path, cache: str, before: int, at: int, data: bytes, first: str
) -> None:
    f = where / "f"
    head = os.urandom(before)
    f.write_bytes(head)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # tmpfs: the fallbacks are tested elsewhere
        d = pagewise.open(f, "r+b", cache=cache)
    with d:
        d.seek(at)
        assert d.write(data) == len(data)
        end = at + len(data)
        if first == "size":
            assert os.fstat(d.fileno()).st_size == end  # at once, as after os.pwrite
            assert os.stat(f).st_size == end
        d.seek(0)
        gap = d.read(at)
        assert len(gap) == at, f"read {len(gap)} of the {at} bytes before the write"
        assert gap[:before] == head and gap[before:] == bytes(at - before)
        assert d.read() == data
        assert os.fstat(d.fileno()).st_size == end
        d.seek(before)
        assert d.readinto(bytearray(10)) == min(10, end - before)
    assert os.stat(f).st_size == end
    assert f.read_bytes() == head + bytes(at - before) + data


def test_offsets_past_the_largest_file_offset_are_einval(scratch: Path) -> None:
    f = write_file(scratch / "f", 10)
    for cache in ("direct", "dontcache", "drop-behind"):
        with pagewise.open(f, "r+b", cache=cache) as d:
            for pos in (2**63 - 10, 2**63 - 1):
                d.seek(pos)
                with pytest.raises(OSError) as ei:
                    d.read(10)
                assert ei.value.errno == errno.EINVAL, (cache, pos, ei.value)
                assert ei.value.filename == str(f), ei.value
                d.seek(pos)
                with pytest.raises(OSError) as ei:
                    d.write(b"x" * 10)
                assert ei.value.errno == errno.EINVAL, (cache, pos, ei.value)
            for pos in (2**63, 2**64 - 1, 2**64, 2**80):
                # As io.FileIO.seek: no file offset (off_t) holds it.
                with pytest.raises(OverflowError):
                    d.seek(pos)
            for size in (-1, 2**63, 2**64):
                with pytest.raises(OSError) as ei:
                    d.truncate(size)
                assert ei.value.errno == errno.EINVAL, (cache, size, ei.value)
            with pytest.raises(OSError):
                d.seek(-1)
            # Kernels before 6.14 refuse RWF_DONTCACHE: the handle falls back to drop-behind
            # and its notice (a RuntimeWarning too) says so.
            refused = cache == "dontcache" and "RWF_DONTCACHE" in (d.notice or "")
            assert d.policy == ("drop-behind" if refused else cache), d.notice
            d.seek(0)
            assert d.read() == f.read_bytes()[:10]
            assert d.read(0) == b"" and d.write(b"") == 0


def test_verbs_refuse_zero_and_absurd_counts_and_sizes(scratch: Path) -> None:
    src = write_file(scratch / "src", 1 << 20)
    dst = scratch / "dst"
    out = probe(
        f"""
        import pagewise
        src, dst = {str(src)!r}, {str(dst)!r}
        calls = {{
            "load depth=0": lambda: pagewise.load(src, depth=0),
            "load depth=2**40": lambda: pagewise.load(src, depth=2**40),
            "load depth=2**64": lambda: pagewise.load(src, depth=2**64),
            "load depth=-1": lambda: pagewise.load(src, depth=-1),
            "load batch=0": lambda: pagewise.load(src, batch=0),
            "load batch=2**64": lambda: pagewise.load(src, batch=2**64),
            "load window=2**70": lambda: pagewise.load(src, window=2**70),
            "stat threads=0": lambda: pagewise.stat(src, threads=0),
            "stat threads=2**40": lambda: pagewise.stat(src, threads=2**40),
            "stat threads=-1": lambda: pagewise.stat(src, threads=-1),
            "stat max_depth=-1": lambda: pagewise.stat(src, max_depth=-1),
            "evict threads=2**40": lambda: pagewise.evict(src, threads=2**40),
            "copy chunk=2**40": lambda: pagewise.copy(src, dst, chunk=2**40),
            "copy chunk=2**62": lambda: pagewise.copy(src, dst, chunk=2**62),
            "copy chunk=0": lambda: pagewise.copy(src, dst, chunk=0),
            "copy chunk=-4096": lambda: pagewise.copy(src, dst, chunk=-4096),
            "copy threads=0": lambda: pagewise.copy(src, dst, threads=0),
            "copy threads=2**40": lambda: pagewise.copy(src, dst, threads=2**40),
            "copy depth=0": lambda: pagewise.copy(src, dst, depth=0),
            "copy depth=2**40": lambda: pagewise.copy(src, dst, depth=2**40),
        }}
        for name, call in calls.items():
            try:
                call()
                print(name, "ran")
            except (ValueError, OverflowError, MemoryError) as e:
                print(name, "refused", type(e).__name__, e)
        print("alive")
        """
    )
    for line in out.splitlines()[:-1]:
        assert " refused " in line, out
