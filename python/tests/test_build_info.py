"""The extension says what it was built from, and says the same as the CLI built from the
same commit (`pagewise --version`) and as git."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import pagewise
from conftest import cli_path

REPO = Path(__file__).resolve().parents[2]


def test_build_info_names_the_commit_date_and_target() -> None:
    info = pagewise.build_info()
    assert info.version == pagewise.__version__
    assert re.fullmatch(r"[0-9a-f]{12}|unknown", info.commit), info
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", info.date), info
    assert "linux" in info.target, info
    assert info.line == f"{info.version} (commit {info.commit}, built {info.date}, {info.target})"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode == 0:
        assert info.commit == head.stdout.strip()[:12], (info, head.stdout)


def test_the_cli_of_the_same_build_says_the_same() -> None:
    exe = cli_path()
    if exe is None:
        pytest.skip("no pagewise CLI to compare with: set PAGEWISE_BIN (tests/python.rs does)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    info = pagewise.build_info()
    # The date is the day each build script ran; the rest must agree exactly.
    strip = lambda s: re.sub(r"built \d{4}-\d{2}-\d{2}", "built DATE", s)  # noqa: E731
    assert strip(out) == strip("pagewise " + info.line), (out, info)
