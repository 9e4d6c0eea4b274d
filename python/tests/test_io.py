"""pagewise.open: io.RawIOBase files over the library's DirectFile, and aligned_buffer.
Checked against the kernel: after reading or writing through them, the file is not cached."""

from __future__ import annotations

import ctypes
import io
import os
import shutil
import subprocess
import time
import warnings
from pathlib import Path
from typing import Iterator, Tuple

import pytest

import pagewise
from conftest import cached, cold, write_file

MIB = 1 << 20


def pattern(size: int) -> bytes:
    return bytes((i * 7 + i // 4096) & 0xFF for i in range(size))


def test_reading_direct_leaves_nothing_cached(scratch: Path) -> None:
    data = os.urandom(5 * MIB + 123)  # an unaligned tail
    f = scratch / "f"
    f.write_bytes(data)
    cold(f)
    with pagewise.open(f) as d:
        assert isinstance(d, io.RawIOBase) and d.policy == "direct" and d.notice is None
        assert d.readable() and not d.writable() and d.seekable()
        assert d.read() == data
        assert cached(f) == 0
        # Any writable buffer: bytearray, memoryview slice, ctypes array.
        d.seek(4097)
        ba = bytearray(10_000)
        assert d.readinto(ba) == 10_000 and bytes(ba) == data[4097:14097]
        mv = memoryview(bytearray(64))[8:40]
        d.seek(-20, io.SEEK_END)
        assert d.readinto(mv) == 20 and mv[:20].tobytes() == data[-20:]
        assert d.readinto(mv) == 0 and d.tell() == len(data)
        c = (ctypes.c_char * 100)()
        d.seek(0)
        assert d.readinto(c) == 100 and c.raw == data[:100]
    assert cached(f) == 0
    with pytest.raises(ValueError):
        d.read(1)


def test_aligned_buffer_is_zero_copy_and_aligned(scratch: Path) -> None:
    data = os.urandom(16 * MIB)
    f = scratch / "f"
    f.write_bytes(data)
    cold(f)
    buf = pagewise.aligned_buffer(4 * MIB)
    assert isinstance(buf, memoryview) and not buf.readonly and len(buf) == 4 * MIB
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert address % 4096 == 0
    got = bytearray()
    with pagewise.open(f, "rb") as d:
        assert address % d.alignment.memory == 0
        while n := d.readinto(buf):
            got += buf[:n]
    assert got == data and cached(f) == 0
    view = buf[10:20]
    del buf
    view[0] = 7  # views keep the memory alive
    assert view[0] == 7
    with pytest.raises(ValueError):
        pagewise.aligned_buffer(10, align=3000)


def test_numpy_buffers_when_numpy_is_installed(scratch: Path) -> None:
    import numpy as np  # installed by the suite: missing fails, never skips
    data = os.urandom(MIB)
    (scratch / "f").write_bytes(data)
    a = np.frombuffer(pagewise.aligned_buffer(MIB), dtype=np.uint32)
    with pagewise.open(scratch / "f") as d:
        assert d.readinto(a) == MIB
    assert a.tobytes() == data


def test_writing_direct_leaves_nothing_cached_and_the_bytes_right(scratch: Path) -> None:
    f = scratch / "w"
    data = pattern(3 * MIB + 1000)
    with pagewise.open(f, "wb") as d:
        assert d.writable() and not d.readable()
        assert d.write(data[:1000]) == 1000  # unaligned pieces, bytes
        assert d.write(bytearray(data[1000 : 2 * MIB])) == 2 * MIB - 1000
        assert d.write(memoryview(data)[2 * MIB :]) == MIB + 1000
    assert cached(f) == 0
    assert os.path.getsize(f) == len(data)
    assert f.read_bytes() == data
    cold(f)
    # r+b: overwrite inside the file (read-modify-write of partial blocks), then extend.
    with pagewise.open(f, "r+b") as d:
        d.seek(777)
        d.write(b"X" * 5000)
        d.seek(0, io.SEEK_END)
        d.write(b"tail")
        d.seek(770)
        assert d.read(20) == data[770:777] + b"X" * 13  # sees its staged write
    expect = data[:777] + b"X" * 5000 + data[5777:] + b"tail"
    assert cached(f) == 0
    assert f.read_bytes() == expect
    # a: appends; truncate.
    with pagewise.open(f, "ab") as d:
        d.write(b"!")
        assert d.tell() == len(expect) + 1
        d.truncate(100)
    assert os.path.getsize(f) == 100
    cold(f)
    with pytest.raises(FileExistsError):
        pagewise.open(f, "xb")


def test_buffered_reader_and_copyfileobj(scratch: Path) -> None:
    data = os.urandom(9 * MIB + 5)
    src = scratch / "src"
    src.write_bytes(data)
    cold(src)
    with io.BufferedReader(pagewise.open(src), buffer_size=MIB) as r:
        r.seek(12345)
        assert r.read(10) == data[12345:12355]
        assert r.readline() == data[12355:].split(b"\n")[0] + (b"\n" if b"\n" in data[12355:] else b"")
    with pagewise.open(src) as s, pagewise.open(scratch / "dst", "wb") as t:
        shutil.copyfileobj(s, t, 4 * MIB)
    assert cached(src) == 0 and cached(scratch / "dst") == 0
    assert (scratch / "dst").read_bytes() == data


@pytest.mark.parametrize("cache", ["dontcache", "drop-behind"])
def test_the_buffered_policies_drop_what_they_brought_in(scratch: Path, cache: str) -> None:
    data = os.urandom(6 * MIB + 3)
    f = scratch / "f"
    f.write_bytes(data)
    cold(f)
    with pagewise.open(f, "rb", cache=cache) as d:
        got = d.read()
    assert got == data and cached(f) == 0
    with pagewise.open(scratch / "g", "wb", cache=cache) as d:
        d.write(data)
    assert cached(scratch / "g") == 0 and (scratch / "g").read_bytes() == data


def test_a_refused_policy_falls_back_with_a_runtime_warning(scratch: Path) -> None:
    mnt = scratch / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], check=True)
    try:
        # "O_DIRECT refused" (6.6+, tmpfs takes O_DIRECT from then), "open(O_DIRECT) refused"
        # before.
        with pytest.warns(RuntimeWarning, match=r"O_DIRECT\)? refused") as w:
            with pagewise.open(mnt / "x", "wb") as d:
                d.write(b"hello")
        assert w[0].filename == __file__  # points at the caller
        assert d.closed
        assert (mnt / "x").read_bytes() == b"hello"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(RuntimeWarning):
                pagewise.open(mnt / "x")
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_open_errors_name_the_path_and_the_call(scratch: Path) -> None:
    with pytest.raises(FileNotFoundError) as ei:
        pagewise.open(scratch / "missing")
    assert ei.value.filename == str(scratch / "missing") and ei.value.syscall == "open(O_DIRECT)"
    with pytest.raises(IsADirectoryError):
        pagewise.open(scratch)
    with pytest.raises(ValueError, match="mode"):
        pagewise.open(scratch / "f", "rt")
    with pytest.raises(ValueError, match="cache"):
        pagewise.open(scratch / "f", "wb", cache="maybe")
    write_file(scratch / "ro", 4096)
    with pagewise.open(scratch / "ro") as d:
        with pytest.raises(io.UnsupportedOperation):
            d.write(b"x")
        with pytest.raises(TypeError):
            d.readinto(b"immutable")


def _proc_files_with_content() -> Iterator[Tuple[str, bytes]]:
    """procfs files, which say they are 0 bytes long, with what the kernel reads of them:
    stable small ones, and a process's environment of 200 KiB (several reads' worth)."""
    for p in ("/proc/version", "/proc/filesystems", "/proc/self/cmdline"):
        yield p, Path(p).read_bytes()
    env = {"PAGEWISE_BIG_A": "a" * 100_000, "PAGEWISE_BIG_B": "b" * 100_000}
    child = subprocess.Popen(["sleep", "30"], env=env)
    try:
        p = f"/proc/{child.pid}/environ"
        # Until exec has laid out the new environment, environ reads empty — also after comm
        # became "sleep" (the old test's sign: exec sets comm first; an emulated 5.10 guest
        # read b"" there).
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/comm").read_bytes() != b"sleep\n" or not Path(p).read_bytes():
            assert time.monotonic() < deadline, "sleep did not start"
            time.sleep(0.01)
        want = Path(p).read_bytes()
        assert len(want) > 200_000 and os.stat(p).st_size == 0
        yield p, want
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("cache", ["direct", "dontcache", "drop-behind"])
def test_files_that_say_they_are_empty_are_read_to_their_end(cache: str) -> None:
    for p, want in _proc_files_with_content():
        assert os.stat(p).st_size == 0, p
        with warnings.catch_warnings():
            # O_DIRECT is refused by procfs: the read falls back, and says so.
            warnings.simplefilter("ignore", RuntimeWarning)
            assert pagewise.read(p, cache=cache) == want, p
            with pagewise.open(p, cache=cache) as d:
                assert d.read() == want, p
                d.seek(0)
                assert d.readall() == want, p
                d.seek(5)
                assert d.read(7) == want[5:12], p
                assert d.read() == want[12:], p
                assert d.pread(3, 2) == want[2:5], p
                assert d.read() == b"", p
    # What the status file says of this process, read through pagewise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        status = pagewise.read("/proc/self/status")
        with pagewise.open("/proc/cpuinfo") as d:
            cpuinfo = d.read()
    assert f"\nPid:\t{os.getpid()}\n".encode() in status, status
    assert cpuinfo.startswith(b"processor") and b"\n\n" in cpuinfo, cpuinfo


def test_seek_refuses_what_io_refuses(scratch: Path) -> None:
    """Offsets that are not integers are a TypeError, offsets off_t cannot hold an
    OverflowError, as io.FileIO.seek raises them; the position does not move."""
    f = write_file(scratch / "f", 4096)
    cases = [(1.5,), ("1",), (None,), (2**63,), (2**64,), (-(2**63) - 1,), (0, 1.5)]
    with pagewise.open(f) as d, io.FileIO(f) as ref:
        d.seek(10)
        for args in cases:
            with pytest.raises(Exception) as want:
                ref.seek(*args)
            with pytest.raises(want.type):
                d.seek(*args)
            assert d.tell() == 10, args
        assert want.type is TypeError
        assert d.seek(True) == 1 and d.seek(2**63 - 1) == 2**63 - 1
        with pytest.raises(OSError):
            d.seek(1, io.SEEK_CUR)  # past the largest offset, as lseek(2) says
        assert d.tell() == 2**63 - 1
