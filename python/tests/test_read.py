"""Reads for ML and data loaders (issue 28): ``pagewise.read_into``, ``pagewise.read``,
``pagewise.empty``, positional reads on ``pagewise.open`` handles, and the Pythonic edges.
Checked against the kernel: the file's bytes, and what cachestat says is cached afterwards."""

from __future__ import annotations

import ctypes
import errno
import os
import textwrap
import threading
import warnings
from pathlib import Path

import numpy
import pytest

import pagewise
from conftest import cached, cold, run_python

MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


def pattern(size: int) -> bytes:
    """Bytes that differ at every page and every offset within it (a misplaced block shows)."""
    block = numpy.arange(size, dtype=numpy.uint64)
    return ((block * 7 + block // 4096) & 0xFF).astype(numpy.uint8).tobytes()


def address(buf: object) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))  # type: ignore[arg-type]


@pytest.fixture
def data_file(scratch: Path) -> tuple:
    data = pattern(24 * MIB + 1234)  # an unaligned tail
    f = scratch / "f"
    f.write_bytes(data)
    cold(f)
    return f, data


# -- 1. read_into -----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::UserWarning")  # numpy.empty is not page-aligned
def test_read_into_numpy_leaves_nothing_cached(data_file: tuple) -> None:
    f, data = data_file
    arr = numpy.empty(len(data), dtype=numpy.uint8)
    n = pagewise.read_into(f, arr)
    assert n == len(data)
    assert arr.tobytes() == data
    # O_DIRECT: the file was evicted and nothing of it is cached after the read.
    assert cached(f) == 0


def test_read_into_any_buffer_unaligned_offset_and_length(data_file: tuple) -> None:
    f, data = data_file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # misaligned buffers warn (checked below)
        ba = bytearray(3 * MIB + 5)
        assert pagewise.read_into(f, ba, 4097) == len(ba)
        assert bytes(ba) == data[4097 : 4097 + len(ba)]
        mv = memoryview(bytearray(5 * MIB))[8 : 8 + 4 * MIB + 3]
        assert pagewise.read_into(f, mv, offset=12345) == len(mv)
        assert mv.tobytes() == data[12345 : 12345 + len(mv)]
        floats = numpy.zeros(1000, dtype=numpy.float32)
        assert pagewise.read_into(f, floats, 100) == 4000
        assert floats.tobytes() == data[100:4100]
        two_d = numpy.zeros((64, 4096), dtype=numpy.uint8)
        assert pagewise.read_into(f, two_d, 3 * PAGE) == two_d.nbytes
        assert two_d.tobytes() == data[3 * PAGE : 3 * PAGE + two_d.nbytes]
    assert cached(f) == 0


class OnlyArrayInterface:
    """Memory described only by ``__array_interface__`` (as some tensor libraries do)."""

    def __init__(self, arr: numpy.ndarray) -> None:
        self.arr = arr
        self.__array_interface__ = arr.__array_interface__


def test_read_into_array_interface_objects(data_file: tuple) -> None:
    f, data = data_file
    arr = pagewise.empty(1000, dtype=numpy.float64)
    obj = OnlyArrayInterface(arr)
    with pytest.raises(TypeError):
        memoryview(obj)  # type: ignore[arg-type]
    assert pagewise.read_into(f, obj, 4096) == 8000
    assert arr.tobytes() == data[4096:12096]
    ro = numpy.zeros(10, dtype=numpy.uint8)
    ro.flags.writeable = False
    with pytest.raises(TypeError):
        pagewise.read_into(f, OnlyArrayInterface(ro))
    with pytest.raises(BufferError):
        pagewise.read_into(f, OnlyArrayInterface(numpy.zeros((8, 8))[:, ::2]))
    assert cached(f) == 0


def test_read_into_is_short_at_the_end_of_the_file(data_file: tuple) -> None:
    f, data = data_file
    buf = pagewise.empty(2 * MIB)
    buf[:] = 0xAB  # empty() is uninitialised: a known pattern, to see nothing more was written
    assert pagewise.read_into(f, buf, len(data) - 1000) == 1000
    assert buf[:1000].tobytes() == data[-1000:]
    assert numpy.all(buf[1000:] == 0xAB)
    assert pagewise.read_into(f, buf, len(data)) == 0
    assert pagewise.read_into(f, buf, len(data) + 10 * MIB) == 0
    assert cached(f) == 0


def test_read_into_refuses_what_it_cannot_fill(data_file: tuple) -> None:
    f, _ = data_file
    with pytest.raises(TypeError):
        pagewise.read_into(f, b"read-only bytes")
    with pytest.raises((BufferError, ValueError)):
        pagewise.read_into(f, numpy.zeros((64, 64), dtype=numpy.uint8)[:, ::2])
    with pytest.raises(ValueError):
        pagewise.read_into(f, bytearray(10), -1)
    with pytest.raises(ValueError):
        pagewise.read_into(f, bytearray(10), depth=0)
    with pytest.raises(FileNotFoundError) as e:
        pagewise.read_into(f.parent / "missing", bytearray(10))
    assert e.value.filename == str(f.parent / "missing")


def test_read_into_depth_progress_and_dontcache(data_file: tuple) -> None:
    f, data = data_file
    seen = []
    buf = pagewise.empty(len(data))
    n = pagewise.read_into(f, buf, depth=1, progress=lambda done, total: seen.append((done, total)))
    assert n == len(data) and buf.tobytes() == data
    assert seen and seen[-1] == (len(data), len(data))
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))
    buf[:] = 0
    n = pagewise.read_into(f, buf, depth=64, cache="drop-behind")
    assert n == len(data) and buf.tobytes() == data
    assert cached(f) == 0


def test_read_into_progress_exception_propagates(data_file: tuple) -> None:
    f, _ = data_file

    def stop(done: int, total: int) -> None:
        raise ZeroDivisionError(f"stop at {done} of {total}")

    with pytest.raises(ZeroDivisionError):
        pagewise.read_into(f, pagewise.empty(8 * MIB), progress=stop)
    with pagewise.open(f) as d:
        with pytest.raises(ZeroDivisionError):
            d.read_into(pagewise.empty(8 * MIB), progress=stop)
        assert d.pread(3, 0) == pattern(3)  # the handle still works
    assert cached(f) == 0


def test_handle_read_into_and_readinto_at_do_not_move_the_position(data_file: tuple) -> None:
    f, data = data_file
    with pagewise.open(f) as d:
        d.seek(77)
        buf = pagewise.empty(5 * MIB)
        assert d.read_into(buf, 4096 * 3) == len(buf)
        assert buf.tobytes() == data[4096 * 3 : 4096 * 3 + len(buf)]
        small = bytearray(999)
        assert d.readinto_at(small, 5) == 999 and bytes(small) == data[5:1004]
        assert d.pread(10, 100) == data[100:110]
        assert d.readinto_at(small, len(data) - 10) == 10
        assert d.tell() == 77
    assert cached(f) == 0
    with pytest.raises(ValueError):
        d.readinto_at(small, 0)


def test_threads_share_one_handle(data_file: tuple) -> None:
    f, data = data_file
    parts = 8
    size = len(data) // parts
    out = [numpy.zeros(size, dtype=numpy.uint8) for _ in range(parts)]
    failures = []
    with pagewise.open(f) as d:

        def work(i: int) -> None:
            try:
                for _ in range(3):
                    assert d.readinto_at(out[i], i * size) == size
            except BaseException as e:  # noqa: BLE001 - reported below
                failures.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(parts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures
    for i in range(parts):
        assert out[i].tobytes() == data[i * size : (i + 1) * size], f"part {i}"
    assert cached(f) == 0


# -- 2. read ----------------------------------------------------------------------------------


def test_read_returns_the_bytes_and_caches_nothing(data_file: tuple) -> None:
    f, data = data_file
    got = pagewise.read(f)
    assert type(got) is bytes and got == data
    assert cached(f) == 0
    with pagewise.open(f) as d:
        d.seek(1000)
        assert d.read() == data[1000:]
    assert cached(f) == 0


@pytest.mark.parametrize("how", ["read", "readall"])
def test_read_peak_rss_is_at_most_one_copy(scratch: Path, how: str) -> None:
    # Peak RSS <= file size + 64 MiB (the interpreter's ~10 MiB included): one copy at most.
    size = 256 * MIB
    f = scratch / "big"
    with open(f, "wb") as out:
        chunk = pattern(MIB)
        for _ in range(size // MIB):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    cold(f)
    call = "pagewise.read(p)" if how == "read" else "pagewise.open(p).read()"
    code = textwrap.dedent(
        f"""
        import hashlib, sys
        import pagewise
        p = sys.argv[-1]
        data = {call}
        assert len(data) == {size}, len(data)
        # This process's peak (VmHWM: its own memory since exec; ru_maxrss would carry the
        # parent's peak over the fork).
        hwm = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
        print(hashlib.sha256(data).hexdigest(), hwm)
        """
    )
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code, str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr.decode()
    digest, maxrss_kib = p.stdout.decode().split()
    import hashlib

    h = hashlib.sha256()
    chunk = pattern(MIB)
    for _ in range(size // MIB):
        h.update(chunk)
    assert digest == h.hexdigest()
    assert int(maxrss_kib) * 1024 <= size + 64 * MIB, f"peak RSS {int(maxrss_kib) >> 10} MiB"
    assert cached(f) == 0


# -- 3. empty, and the warning on misaligned buffers -----------------------------------------


def test_empty_is_page_aligned_numpy() -> None:
    a = pagewise.empty(3 * MIB + 7)
    assert isinstance(a, numpy.ndarray) and a.dtype == numpy.uint8 and a.shape == (3 * MIB + 7,)
    assert a.ctypes.data % PAGE == 0 and a.flags.writeable and a.flags.c_contiguous
    b = pagewise.empty(1000, dtype=numpy.float32)
    assert b.dtype == numpy.float32 and b.shape == (1000,) and b.ctypes.data % PAGE == 0
    c = pagewise.empty((3, 5), dtype="int64")
    assert c.shape == (3, 5) and c.ctypes.data % PAGE == 0
    assert pagewise.empty(0).shape == (0,)
    with pytest.raises(ValueError):
        pagewise.empty(-1)


def test_empty_does_not_touch_its_memory() -> None:
    # numpy.empty's promise: the pages are the kernel's to fault in when first written (by
    # the device, for a direct read), not written once more by the allocator beforehand. A
    # 49 MiB pagewise.empty that zeroed its memory cost 75-105 ms here, as long as the cold
    # read into it. The kernel's word: the process's resident set (VmRSS).
    code = textwrap.dedent(
        """
        import pagewise

        def rss():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024

        pagewise.empty(1)  # numpy imported, the code paths run once
        before = rss()
        a = pagewise.empty(128 << 20)
        untouched = rss() - before
        a[:] = 1
        print(untouched, rss() - before)
        """
    )
    p = run_python(code)
    assert p.returncode == 0, p.stderr.decode()
    untouched, filled = map(int, p.stdout.split())
    assert filled >= 120 * MIB, (untouched, filled)  # the pages exist once written
    assert untouched < 8 * MIB, (untouched, filled)  # and not before


def test_empty_without_numpy_is_an_aligned_memoryview() -> None:
    code = textwrap.dedent(
        """
        import sys, ctypes
        sys.modules["numpy"] = None  # numpy is not importable
        import pagewise
        m = pagewise.empty(10000)
        assert isinstance(m, memoryview) and len(m) == 10000 and not m.readonly
        assert ctypes.addressof(ctypes.c_char.from_buffer(m)) % pagewise.page_size() == 0
        try:
            pagewise.empty(10, dtype="float32")
        except TypeError:
            print("ok")
        """
    )
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.decode().strip() == "ok", p.stderr.decode()


def test_misaligned_direct_read_warns_once(data_file: tuple) -> None:
    f, data = data_file
    code = textwrap.dedent(
        """
        import sys, warnings
        import pagewise
        p = sys.argv[-1]
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as w:
            # Aligned in the middle (only the unaligned head is bounced): no warning.
            a = pagewise.empty(4 << 20)
            pagewise.read_into(p, a[4096 - 100:], 100)
            # A buffer whose middle cannot be aligned to the file: warned, once.
            b = bytearray(4 << 20)
            pagewise.read_into(p, memoryview(b)[1:], 0)
            pagewise.read_into(p, memoryview(b)[3:], 0)
            with pagewise.open(p) as f:
                f.readinto_at(memoryview(b)[5:], 0)
        user = [x for x in w if issubclass(x.category, UserWarning)]
        print(len(user))
        print(user[0].message if user else "")
        """
    )
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code, str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr.decode()
    count, message = p.stdout.decode().splitlines()
    assert count == "1", p.stdout.decode()
    assert "align" in message and "pagewise.empty" in message
    assert cached(f) == 0


# -- 4. Pythonic edges ------------------------------------------------------------------------


def test_single_explicit_path_failures_raise(scratch: Path) -> None:
    missing = scratch / "missing"
    for verb in (pagewise.load, pagewise.stat, pagewise.evict):
        with pytest.raises(FileNotFoundError) as e:
            verb(missing)
        assert e.value.errno == errno.ENOENT and e.value.filename == str(missing)
        assert isinstance(e.value, pagewise.Error)
    (scratch / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        pagewise.load(scratch / "file" / "below")
    # Several paths, or a tree: the report collects the failures and the call goes on.
    r = pagewise.load([missing, scratch / "file"])
    assert r.error_count == 1 and r.errors[0].errno == errno.ENOENT and not r.ok


def test_tree_walks_keep_collecting_per_file_errors(scratch: Path) -> None:
    tree = scratch / "tree"
    tree.mkdir()
    (tree / "ok").write_bytes(b"y" * 10000)
    locked = tree / "locked"
    locked.write_bytes(b"z" * 10000)
    os.chmod(locked, 0)
    os.chmod(tree, 0o755)
    os.chmod(scratch, 0o755)
    # Imported as root (the interpreter may live where nobody cannot read), then nobody.
    code = textwrap.dedent(
        """
        import os, sys, pagewise
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        r = pagewise.load(sys.argv[-1])
        print(r.error_count, r.errors[0].errno if r.errors else 0)
        try:
            pagewise.load(sys.argv[-1] + "/locked")
        except PermissionError as e:
            print("PermissionError", e.filename == sys.argv[-1] + "/locked")
        """
    )
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("needs root to run as nobody (a file nobody can read)")
    p = subprocess.run(
        [sys.executable, "-c", code, str(tree)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.returncode == 0, p.stderr.decode()
    lines = p.stdout.decode().splitlines()
    assert lines[0] == f"1 {errno.EACCES}", lines
    assert lines[1] == "PermissionError True", lines


def test_open_is_not_exported_and_text_modes_are_refused(scratch: Path) -> None:
    assert "open" not in pagewise.__all__
    ns: dict = {}
    exec("from pagewise import *", ns)
    assert "open" not in ns
    assert callable(pagewise.open)
    f = scratch / "f"
    f.write_bytes(b"abc")
    for mode in ("r", "w", "rt", "r+", "a", "x"):
        with pytest.raises(ValueError, match="binary"):
            pagewise.open(f, mode)
    assert f.read_bytes() == b"abc"  # "w" did not truncate it
    with pagewise.open(f, "rb") as d:
        assert d.read() == b"abc"


def test_report_repr_shows_path_size_and_cached(scratch: Path) -> None:
    f = scratch / "f"
    f.write_bytes(b"q" * 50000)
    cold(f)
    for report in (pagewise.stat(f), pagewise.load(f), pagewise.evict(f)):
        text = repr(report)
        assert str(f) in text, text
        assert "size=50000" in text, text
        assert "cached=" in text, text
        assert "elapsed" not in text, text
    assert "cached=0" in repr(pagewise.stat(f))


def test_exception_names_are_plain_with_deprecated_aliases() -> None:
    assert issubclass(pagewise.IsADirectoryError, IsADirectoryError)
    assert issubclass(pagewise.NotADirectoryError, NotADirectoryError)
    assert issubclass(pagewise.IsADirectoryError, pagewise.Error)
    assert not [n for n in pagewise.__all__ if n.endswith("_")]
    with pytest.warns(DeprecationWarning):
        assert pagewise.IsADirectoryError_ is pagewise.IsADirectoryError
    with pytest.warns(DeprecationWarning):
        assert pagewise.NotADirectoryError_ is pagewise.NotADirectoryError
    e = pagewise._errors.error_from(errno.EISDIR, "Is a directory", "/x", "open")
    assert type(e) is pagewise.IsADirectoryError


def test_dir_is_clean() -> None:
    names = set(dir(pagewise))
    for leaked in ("Any", "Dict", "List", "Optional", "Tuple", "Type", "Union", "Callable",
                   "Iterable", "Sequence", "Literal", "NamedTuple", "overload", "os",
                   "builtins", "TracebackType", "annotations"):
        assert leaked not in names, leaked
    public = {n for n in names if not n.startswith("_")}
    assert set(pagewise.__all__) <= public
    import types

    assert not [n for n in public if isinstance(getattr(pagewise, n), types.ModuleType)]
    assert {"read_into", "read", "empty"} <= set(pagewise.__all__)
