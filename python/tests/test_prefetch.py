"""pagewise.prefetch, pagewise.read_ranges_into and small reads: the bytes are the file's, in
the caller's order, errors come at their file's turn, leaving early stops the threads, and
the kernel reports nothing left in the page cache."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import pagewise
from conftest import cached, cold


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def data_set(root: Path, n: int = 300) -> dict:
    """Files of 0 bytes to 3 MiB (one over the 2 MiB parallel threshold), odd sizes."""
    rng = random.Random(5)
    out = {}
    for i in range(n):
        size = rng.choice([0, 1, 4095, 4096, 4097, rng.randint(1, 70_000)])
        if i == 7:
            size = 3 * 1024 * 1024 + 17
        p = root / f"d{i % 7}" / f"f{i:04d}"
        p.parent.mkdir(exist_ok=True)
        data = rng.randbytes(size)
        p.write_bytes(data)
        out[p] = data
    os.sync()
    return out


def test_prefetch_gives_every_file_in_the_callers_order_and_leaves_nothing_cached(scratch: Path) -> None:
    files = data_set(scratch)
    order = list(files)
    random.Random(1).shuffle(order)
    cold(scratch)
    before = threads()
    got = list(pagewise.prefetch(order, ahead=32, depth=8))
    assert [p for p, _ in got] == order
    for p, data in got:
        assert data == files[p], p
    assert cached(scratch) == 0, "an epoch through prefetch leaves nothing cached"
    assert threads() <= before, "the workers ended with the iteration"


def test_prefetch_raises_a_missing_files_error_at_its_turn(scratch: Path) -> None:
    files = data_set(scratch, 20)
    order = list(files)
    order.insert(5, scratch / "missing")
    it = pagewise.prefetch(order, ahead=4, depth=2)
    for i in range(5):
        p, data = next(it)
        assert p == order[i] and data == files[p]
    with pytest.raises(FileNotFoundError) as e:
        next(it)
    assert e.value.filename and "missing" in os.fsdecode(e.value.filename)


def test_leaving_a_prefetch_early_stops_its_threads(scratch: Path) -> None:
    files = data_set(scratch, 200)
    before = threads()
    it = pagewise.prefetch(list(files), ahead=64, depth=16)
    next(it)
    assert threads() > before
    it.close()
    assert threads() <= before


def test_prefetch_refuses_bad_arguments(scratch: Path) -> None:
    with pytest.raises(ValueError, match="ahead"):
        list(pagewise.prefetch([scratch], ahead=0))
    with pytest.raises(ValueError, match="depth"):
        list(pagewise.prefetch([scratch], depth=0))
    with pytest.raises(ValueError):
        list(pagewise.prefetch([scratch], cache="sometimes"))
    # A directory is an error at its turn, naming it.
    with pytest.raises(IsADirectoryError):
        list(pagewise.prefetch([scratch]))


def test_prefetch_on_tmpfs_falls_back_and_gives_the_bytes() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.fail("/dev/shm is missing: the tmpfs case cannot be tested here")
    p = shm / f"pagewise-prefetch-{os.getpid()}"
    p.write_bytes(b"x" * 10_000)
    try:
        assert [d for _, d in pagewise.prefetch([p, p])] == [b"x" * 10_000] * 2
    finally:
        p.unlink()


def test_read_ranges_into_reads_each_range_into_its_own_buffer(scratch: Path) -> None:
    rng = random.Random(3)
    data = rng.randbytes(9 * 1024 * 1024 + 123)
    p = scratch / "f"
    p.write_bytes(data)
    os.sync()
    page = pagewise.page_size()
    spans = [
        (0, 4 * 1024 * 1024),  # aligned, parallel
        (4 * 1024 * 1024, 8192),
        (8 * 1024 * 1024, 2 * 1024 * 1024),  # reaches past the end
        (123, 4000),  # unaligned: through read_into
        (len(data) - 5, 100),
        (len(data) + page, page),  # past the end: 0
        (page, 0),
    ]
    for aligned in (True, False):
        cold(p)
        bufs = [pagewise.empty(n) if aligned else bytearray(n) for _, n in spans]
        got = pagewise.read_ranges_into(p, [(o, b) for (o, _), b in zip(spans, bufs)], depth=8)
        for (o, n), b, g in zip(spans, bufs, got):
            want = data[o : o + n]
            assert g == len(want), (o, n)
            assert bytes(memoryview(b)[:g]) == want, (o, n)
        assert cached(p) == 0
    with pagewise.open(p) as f:
        a, b = pagewise.empty(page), pagewise.empty(page)
        assert f.read_ranges_into([(0, a), (page, b)]) == [page, page]
        assert bytes(b) == data[page : 2 * page]
        with pytest.raises(ValueError, match="share memory"):
            f.read_ranges_into([(0, a), (page, a[1:])])
    with pytest.raises(ValueError, match="negative"):
        pagewise.read_ranges_into(p, [(-1, bytearray(1))])


def test_small_reads_leave_nothing_cached(scratch: Path) -> None:
    files = data_set(scratch, 50)
    cold(scratch)
    for p, data in files.items():
        assert pagewise.read(p) == data
        buf = pagewise.empty(len(data))
        assert pagewise.read_into(p, buf) == len(data) and bytes(buf) == data
    assert cached(scratch) == 0
