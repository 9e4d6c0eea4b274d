#!/usr/bin/env python3
"""Load a safetensors file's tensors into numpy arrays with pagewise.read_into: O_DIRECT, many
requests in flight, nothing of the file left in the page cache.

    pip install pagewise numpy safetensors
    python examples/safetensors_load.py                  # a 48 MiB sample in a temporary dir
    python examples/safetensors_load.py /data/model.safetensors   # your file, only read
    python examples/safetensors_load.py --size-mb 256 --runs 5 --make /data/sample.safetensors

Given a PATH, it loads that file and never writes it. Without one it makes a sample
safetensors file (tensors of several dtypes and shapes, ``safetensors.numpy.save``) in a
temporary directory, removed at the end, or at ``--make PATH``, which must not exist (the file
is created with O_EXCL, never over another) and is kept. Then, with the file evicted and
checked cold (``pagewise.evict`` + ``pagewise.stat``) before each run, it times:

- ``whole``: one ``pagewise.read_into`` of the whole file into one page-aligned buffer
  (``pagewise.empty``); the header is parsed from its first bytes and every tensor is a
  numpy view of the buffer at its offset (no copy);
- ``per-tensor``: the header read first (two small reads), then one ``read_into`` per tensor
  into its own array, at the tensor's offset in the file;
- ``load_file``: ``safetensors.numpy.load_file`` (mmap through the page cache).

It checks every tensor of both pagewise loads equals ``load_file``'s (dtype, shape, bytes;
and, for a sample, what was written),
prints the median cold load times, evicts the file and checks nothing of it is cached. Exit
status 0 when all of that holds.

Why ``whole`` is the default: O_DIRECT needs the buffer address and the file offset to agree
modulo the device's alignment. Tensor offsets in a safetensors file are multiples of 8 (the
header is padded to 8 bytes), not of 4096, so a tensor read into a fresh page-aligned array
would go through bounce buffers (a copy, and a ``UserWarning``). ``per-tensor`` avoids that
by starting each tensor's array at the same offset within a page as the tensor has in the
file (an array cut from a page-aligned allocation ``offset % 4096`` bytes in), so its middle
goes straight to memory too; it still pays one call, two unaligned edges (one block each,
bounced) and a drained queue per tensor. ``whole`` is one stream of aligned 1 MiB requests
with ``depth`` in flight from the first byte to the last: the fastest, and the arrays are
views of one buffer (keep a tensor and you keep the whole buffer; copy it out to free the
rest). ``per-tensor`` suits loading a subset of the tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

import pagewise

try:
    import safetensors.numpy
except ImportError:  # pragma: no cover - said to the user
    sys.exit("this example needs the safetensors package: pip install safetensors")

# safetensors dtype names -> numpy (little-endian, as the format stores them). BF16 and the
# F8 types have no numpy dtype: a file with them is refused with their name.
DTYPES = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
}
MIB = 1 << 20
MAX_HEADER = 100 * MIB  # what the safetensors library itself accepts


# --- the file -------------------------------------------------------------------------------


def make_file(path: str, size_mb: int) -> Dict[str, np.ndarray]:
    """Writes a new safetensors file of about `size_mb` MiB at `path`: tensors of different
    dtypes and shapes (odd sizes too, so offsets are not page multiples), and
    ``__metadata__``. The file is created with O_EXCL: a path that exists (a user's model, a
    symlink) is refused with FileExistsError, never written over."""
    rng = np.random.default_rng(28)
    big = max(size_mb * MIB // 2, MIB)  # two large tensors share most of the size
    rows = big // (4 * 1024)
    tensors: Dict[str, np.ndarray] = {
        "embed.weight": rng.standard_normal((rows, 1024), dtype=np.float32),
        "layer0.attn.qkv": rng.standard_normal((big // (2 * 768), 768)).astype(np.float16),
        "layer0.attn.bias": rng.standard_normal(3 * 768).astype(np.float32),
        "positions": np.arange(4099, dtype=np.int64),
        "mask": rng.random((333, 7)) > 0.5,
        "tokens": rng.integers(0, 256, 1_000_003, dtype=np.uint8),
        "scale": np.array(0.125, dtype=np.float64),
        "ids": rng.integers(-(2**31), 2**31, (17, 19, 23), dtype=np.int32),
        "empty": np.zeros((0, 4), dtype=np.int16),
    }
    data = safetensors.numpy.save(tensors, metadata={"format": "np", "source": "pagewise example"})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with open(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # on disk, so that evict can drop it
    return tensors


def parse_header(head: bytes, file_size: int) -> Tuple[Dict[str, Any], Dict[str, str], int]:
    """The safetensors header: 8 bytes little-endian N, then N bytes of JSON mapping each
    tensor's name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative
    to the data, which starts at 8 + N), and an optional ``__metadata__`` of strings.
    Returns (tensors, metadata, data_start); checks every entry against the file's size."""
    if len(head) < 8:
        raise ValueError("not a safetensors file: shorter than 8 bytes")
    n = int.from_bytes(head[:8], "little")
    if n > MAX_HEADER or 8 + n > file_size:
        raise ValueError(f"not a safetensors file: header length {n} in a file of {file_size} bytes")
    if len(head) < 8 + n:
        raise ValueError("header not read in full")
    doc = json.loads(head[8 : 8 + n])
    metadata = doc.pop("__metadata__", None) or {}
    start = 8 + n
    for name, t in doc.items():
        if t["dtype"] not in DTYPES:
            raise ValueError(f"{name}: dtype {t['dtype']} has no numpy equivalent")
        begin, end = t["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64))
        if not 0 <= begin <= end <= file_size - start or end - begin != count * DTYPES[t["dtype"]].itemsize:
            raise ValueError(f"{name}: data_offsets {t['data_offsets']} do not fit {t['dtype']}{t['shape']}")
    return doc, metadata, start


# --- the loads ------------------------------------------------------------------------------


def load_whole(path: str, depth: int) -> Dict[str, np.ndarray]:
    """One read_into of the whole file into one page-aligned buffer; tensors are views."""
    size = os.stat(path).st_size
    buf = pagewise.empty(size)
    got = pagewise.read_into(path, buf, 0, depth=depth)
    if got != size:
        raise OSError(f"{path}: read {got} of {size} bytes (the file changed?)")
    n = int.from_bytes(buf[:8].tobytes(), "little")
    header, _, start = parse_header(buf[: 8 + min(n, size - 8)].tobytes(), size)
    return {
        name: buf[start + t["data_offsets"][0] : start + t["data_offsets"][1]].view(DTYPES[t["dtype"]]).reshape(t["shape"])
        for name, t in header.items()
    }


def read_header(path: str) -> Tuple[Dict[str, Any], Dict[str, str], int]:
    """The header, read with two small read_into calls (the length, then the JSON): O_DIRECT
    through a one-block bounce buffer, so not even the header's page stays cached."""
    size = os.stat(path).st_size
    n8 = pagewise.empty(8)
    pagewise.read_into(path, n8, 0)
    n = min(int.from_bytes(n8.tobytes(), "little"), max(size - 8, 0))
    head = pagewise.empty(8 + n)
    pagewise.read_into(path, head, 0)
    return parse_header(head.tobytes(), size)


def load_per_tensor(path: str, depth: int) -> Dict[str, np.ndarray]:
    """The header (two small reads), then one read_into per tensor into its own array, cut
    from a page-aligned allocation at the tensor's offset within a page (so that O_DIRECT
    goes straight into it)."""
    header, _, start = read_header(path)
    page = pagewise.page_size()
    out = {}
    for name, t in header.items():
        begin, end = start + t["data_offsets"][0], start + t["data_offsets"][1]
        lead = begin % page
        raw = pagewise.empty(lead + end - begin)
        body = raw[lead:]
        if end > begin:
            got = pagewise.read_into(path, body, begin, depth=depth)
            if got != end - begin:
                raise OSError(f"{path}: read {got} of {end - begin} bytes of {name}")
        out[name] = body.view(DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def load_safetensors(path: str, depth: int) -> Dict[str, np.ndarray]:
    return safetensors.numpy.load_file(path)


# --- checks and timing ----------------------------------------------------------------------


def make_cold(path: str) -> None:
    """Evicts the file and checks with the kernel (cachestat, via pagewise.stat) that none of
    it is cached."""
    pagewise.evict(path)
    left = pagewise.stat(path).cached_bytes
    if left:
        raise RuntimeError(f"{path}: {left} bytes still cached after evict")


def same(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray]) -> List[str]:
    """The names whose tensors differ (dtype, shape or bytes)."""
    bad = sorted(set(a) ^ set(b))
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            bad.append(name)
    return bad


def timed(path: str, load: Callable[[str, int], Dict[str, np.ndarray]], depth: int, runs: int) -> Tuple[float, Dict[str, np.ndarray]]:
    """The median cold load time of `runs` runs, and the last run's tensors."""
    times = []
    tensors: Dict[str, np.ndarray] = {}
    for _ in range(runs):
        tensors = {}
        make_cold(path)
        t0 = time.perf_counter()
        tensors = load(path, depth)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), tensors


def disk_dir() -> str:
    """A temporary directory on a filesystem whose pages can be dropped (not tmpfs)."""
    for base in (os.environ.get("PAGEWISE_TEST_DIR"), tempfile.gettempdir(), os.getcwd()):
        if base and _fstype(base) not in ("tmpfs", "ramfs"):
            return tempfile.mkdtemp(prefix="pagewise-safetensors-", dir=base)
    sys.exit("no disk-backed directory found (temporary dir and cwd are tmpfs): give a PATH")


def _fstype(path: str) -> str:
    best, kind = "", ""
    p = os.path.realpath(path)
    with open("/proc/self/mounts") as m:
        for line in m:
            f = line.split()
            mnt = f[1].replace("\\040", " ")
            if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, f[2]
    return kind


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="a safetensors file to load (only read, never written); default: a sample")
    ap.add_argument(
        "--make",
        metavar="PATH",
        help="make the sample at PATH, which must not exist, and keep it (default: a temporary file, removed)",
    )
    ap.add_argument("--size-mb", type=int, default=48, help="about how large a sample to make (default 48)")
    ap.add_argument("--runs", type=int, default=3, help="cold runs of each load; the median is shown (default 3)")
    ap.add_argument("--depth", type=int, default=16, help="read_into's requests in flight (default 16)")
    a = ap.parse_args()
    if a.path is not None and a.make is not None:
        ap.error("give a PATH to load or --make PATH for a sample, not both")

    tmp = None
    written = None
    try:
        if a.path is not None:
            path = a.path  # the user's file: read, evicted, never written
        else:
            if a.make is not None:
                path = a.make
            else:
                tmp = disk_dir()
                path = os.path.join(tmp, "model.safetensors")
            try:
                written = make_file(path, a.size_mb)
            except FileExistsError:
                print(f"{path}: exists; --make only makes a new file (give it as PATH to load it)", file=sys.stderr)
                return 2
        size = os.stat(path).st_size
        header, metadata, start = read_header(path)
        print(f"{path}: {size / MIB:.1f} MiB, {len(header)} tensors, data from byte {start}, metadata {metadata}")

        loads = [("whole", load_whole), ("per-tensor", load_per_tensor), ("load_file", load_safetensors)]
        results = {}
        for name, fn in loads:
            results[name] = timed(path, fn, a.depth, a.runs)
        reference = results["load_file"][1]
        failed = False
        if written is not None and same(reference, written):
            print(f"load_file differs from what was written: {same(reference, written)}")
            failed = True
        for name in ("whole", "per-tensor"):
            bad = same(results[name][1], reference)
            if bad:
                print(f"{name}: tensors differ from load_file's: {bad}")
                failed = True
        if not failed:
            print(f"all {len(reference)} tensors equal safetensors.numpy.load_file's (dtype, shape, bytes)")

        base = results["load_file"][0]
        print(f"\ncold load, median of {a.runs} (file evicted and checked cold before each run):")
        print(f"{'method':<34}{'time':>10}{'MB/s':>10}{'vs load_file':>14}")
        labels = {
            "whole": "pagewise.read_into, whole file",
            "per-tensor": "pagewise.read_into, per tensor",
            "load_file": "safetensors.numpy.load_file",
        }
        for name, _ in loads:
            t = results[name][0]
            print(f"{labels[name]:<34}{t:>9.3f}s{size / t / 1e6:>10.0f}{base / t:>13.2f}x")

        results.clear()  # the arrays (and their buffers) go before the final check
        make_cold(path)
        left = pagewise.stat(path).cached_bytes
        print(f"\nafterwards: {left} bytes of the file cached")
        return 1 if failed or left else 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
