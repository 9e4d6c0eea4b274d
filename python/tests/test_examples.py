"""The worked examples in examples/, run as a user would run them, and checked against the
kernel afterwards (the CLI's ``stat --json``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

MIB = 1 << 20


def test_safetensors_example_loads_equal_tensors_and_leaves_nothing_cached(scratch: Path, cli) -> None:
    pytest.importorskip("numpy", reason="the safetensors example needs numpy (pip install numpy)")
    pytest.importorskip(
        "safetensors", reason="the safetensors example needs the safetensors package (pip install safetensors)"
    )
    example = REPO / "examples" / "safetensors_load.py"
    assert example.is_file(), f"{example} is missing"
    path = scratch / "model.safetensors"
    p = subprocess.run(
        [sys.executable, str(example), "--size-mb", "16", "--runs", "1", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
    )
    out = p.stdout.decode()
    assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{p.stderr.decode()}"
    assert "tensors equal safetensors.numpy.load_file's" in out, out
    for method in ("pagewise.read_into, whole file", "pagewise.read_into, per tensor", "safetensors.numpy.load_file"):
        assert method in out, out
    # The file it made and loaded (kept: a path was given) is 16 MiB or so, and the kernel
    # holds none of it afterwards.
    doc = cli("stat", path)
    assert doc["total"]["size"] > 15 * MIB and doc["total"]["files"] == 1
    assert doc["total"]["cached_bytes"] == 0, doc
