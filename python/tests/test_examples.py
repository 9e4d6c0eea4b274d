"""The worked examples in examples/, run as a user would run them, and checked against the
kernel afterwards (the CLI's ``stat --json``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np  # installed by the suite (tests/python.rs): missing fails, never skips
import safetensors.numpy as st

from conftest import REPO

MIB = 1 << 20


def test_safetensors_example_loads_equal_tensors_and_leaves_nothing_cached(scratch: Path, cli) -> None:
    example = REPO / "examples" / "safetensors_load.py"
    assert example.is_file(), f"{example} is missing"
    path = scratch / "model.safetensors"
    p = subprocess.run(
        [sys.executable, str(example), "--size-mb", "16", "--runs", "1", "--make", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
    )
    out = p.stdout.decode()
    assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{p.stderr.decode()}"
    assert "tensors equal safetensors.numpy.load_file's" in out, out
    for method in ("pagewise.safetensors, per tensor", "pagewise.safetensors, zero_copy", "safetensors.numpy.load_file"):
        assert method in out, out
    # The file it made and loaded (kept: --make named it) is 16 MiB or so, and the kernel
    # holds none of it afterwards.
    doc = cli("stat", path)
    assert doc["total"]["size"] > 15 * MIB and doc["total"]["files"] == 1
    assert doc["total"]["cached_bytes"] == 0, doc


def _example(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "examples" / "safetensors_load.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
    )


def test_safetensors_example_never_writes_the_file_it_is_given(scratch: Path) -> None:
    """A path given to load is only read: a user's model file keeps its bytes (and inode and
    times); ``--make`` refuses a path that exists, and makes its sample where nothing is."""
    mine = scratch / "mine.safetensors"
    st.save_file({"w": np.arange(3000, dtype=np.float32).reshape(30, 100), "b": np.ones(7, dtype=np.int64)}, str(mine))
    before, meta = mine.read_bytes(), mine.stat()
    p = _example("--runs", "1", str(mine))
    out = p.stdout.decode()
    assert mine.read_bytes() == before, "the example wrote over the file it was asked to load"
    after = mine.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (meta.st_ino, meta.st_mtime_ns, meta.st_size)
    assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{p.stderr.decode()}"
    assert "all 2 tensors equal safetensors.numpy.load_file's" in out, out
    # --make where a file is: refused, the file as it was.
    p = _example("--make", str(mine))
    assert p.returncode != 0 and "exists" in p.stderr.decode(), (p.returncode, p.stderr.decode())
    assert mine.read_bytes() == before
    # --make where nothing is: the sample made (exclusively), loaded and kept.
    made = scratch / "sample.safetensors"
    p = _example("--make", str(made), "--size-mb", "2", "--runs", "1")
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout.decode()}\n{p.stderr.decode()}"
    assert made.stat().st_size > MIB and set(st.load_file(str(made))) >= {"embed.weight", "tokens"}
