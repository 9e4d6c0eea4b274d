"""The extension's stub (pagewise/_pagewise.pyi) matches the module built: mypy's stubtest
compares every function's and class's signature in the stub with the compiled module's
(pyo3's text signatures), so the types the package is checked against cannot drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def test_stub_matches_the_extension(tmp_path: Path) -> None:
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed (tests/python.rs installs it into the suite's virtualenv)")
    # From an empty directory (its cache goes there): the installed package is checked.
    p = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "pagewise._pagewise"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert p.returncode == 0, p.stdout.decode()
