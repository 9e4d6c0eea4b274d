#!/usr/bin/env python3
"""Load a safetensors file's tensors into numpy arrays with pagewise.safetensors: O_DIRECT,
many requests in flight, nothing of the file left in the page cache.

    pip install pagewise numpy safetensors
    python examples/safetensors_load.py                  # a 48 MiB sample in a temporary dir
    python examples/safetensors_load.py /data/model.safetensors   # your file, only read
    python examples/safetensors_load.py --size-mb 256 --runs 5 --make /data/sample.safetensors

Given a PATH, it loads that file and never writes it. Without one it makes a sample
safetensors file (tensors of several dtypes and shapes, ``safetensors.numpy.save``) in a
temporary directory, removed at the end, or at ``--make PATH``, which must not exist (the file
is created with O_EXCL, never over another) and is kept. Then, with the file evicted and
checked cold (``pagewise.evict`` + ``pagewise.stat``) before each run, it times:

- ``per-tensor``: ``pagewise.safetensors.load_file(path)``, every tensor in an array of its
  own (freeing one frees its memory), all read with one scatter read;
- ``zero-copy``: ``load_file(path, zero_copy=True)``, the file read whole into one buffer and
  every tensor a view of it;
- ``load_file``: ``safetensors.numpy.load_file`` (mmap through the page cache).

It checks every tensor of both pagewise loads equals ``load_file``'s (dtype, shape, bytes;
and, for a sample, what was written), prints the median cold load times, evicts the file and
checks nothing of it is cached. Exit status 0 when all of that holds.

Switching a program from safetensors is the import line::

    from safetensors.numpy import load_file        # before
    from pagewise.safetensors import load_file     # after: same call, same dict of arrays
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

import pagewise
import pagewise.safetensors as pw_safetensors

try:
    import safetensors.numpy
except ImportError:  # pragma: no cover - said to the user
    sys.exit("this example needs the safetensors package: pip install safetensors")

MIB = 1 << 20


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


def load_per_tensor(path: str, depth: int) -> Dict[str, np.ndarray]:
    """Every tensor in an array of its own, read with one scatter read."""
    return pw_safetensors.load_file(path, depth=depth)


def load_zero_copy(path: str, depth: int) -> Dict[str, np.ndarray]:
    """The file read whole into one buffer; tensors are views of it."""
    return pw_safetensors.load_file(path, zero_copy=True, depth=depth)


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
    ap.add_argument("--depth", type=int, default=32, help="requests in flight (default 32)")
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
        with pw_safetensors.safe_open(path) as f:
            print(f"{path}: {size / MIB:.1f} MiB, {len(f.keys())} tensors, metadata {f.metadata()}")

        loads = [("per-tensor", load_per_tensor), ("zero-copy", load_zero_copy), ("load_file", load_safetensors)]
        results = {}
        for name, fn in loads:
            results[name] = timed(path, fn, a.depth, a.runs)
        reference = results["load_file"][1]
        failed = False
        if written is not None and same(reference, written):
            print(f"load_file differs from what was written: {same(reference, written)}")
            failed = True
        for name in ("per-tensor", "zero-copy"):
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
            "per-tensor": "pagewise.safetensors, per tensor",
            "zero-copy": "pagewise.safetensors, zero_copy",
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
