"""`with pagewise.dropping():` — what the block brought into the page cache is dropped at its
end, as the kernel shows; what was cached before stays."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import pagewise
from conftest import cached, cold, write_file

MIB = 1 << 20


def read(path: Path) -> int:
    with open(path, "rb") as f:
        return len(f.read())


def test_pages_read_in_the_block_are_dropped_and_others_stay(scratch: Path) -> None:
    mine = write_file(scratch / "mine", 8 * MIB)
    warm = write_file(scratch / "warm", 2 * MIB)
    cold(mine)
    pagewise.load(warm)
    assert cached(warm) == 2 * MIB
    with pagewise.dropping() as d:
        assert read(mine) == 8 * MIB and read(warm) == 2 * MIB
        assert cached(mine) == 8 * MIB  # really cached while the block runs
    assert d.report is not None and d.report.ok
    assert d.report.added_bytes >= 8 * MIB and d.report.dropped_bytes >= 8 * MIB
    assert d.report.left_bytes == 0
    assert cached(mine) == 0
    assert cached(warm) == 2 * MIB  # cached before: no event, left alone


def test_threads_and_children_started_in_the_block_are_followed(scratch: Path) -> None:
    by_thread = write_file(scratch / "t", 4 * MIB)
    by_child = write_file(scratch / "c", 4 * MIB)
    cold(by_thread)
    cold(by_child)
    with pagewise.dropping() as d:
        th = threading.Thread(target=read, args=(by_thread,))
        th.start()
        th.join()
        subprocess.run(["sha256sum", str(by_child)], check=True, stdout=subprocess.PIPE)
        assert cached(by_thread) == cached(by_child) == 4 * MIB
    assert d.report is not None and d.report.files >= 2
    assert cached(by_thread) == 0 and cached(by_child) == 0


def test_written_files_are_written_back_then_dropped_unless_kept(scratch: Path) -> None:
    with pagewise.dropping() as d:
        write_file(scratch / "new", 4 * MIB, sync=False)
    assert d.report is not None and d.report.dropped_bytes >= 4 * MIB
    assert cached(scratch / "new") == 0
    assert os.path.getsize(scratch / "new") == 4 * MIB
    with pagewise.dropping(keep_written=True) as d:
        write_file(scratch / "kept", 2 * MIB, sync=False)
    assert d.report is not None and d.report.kept_written_bytes >= 2 * MIB
    assert cached(scratch / "kept") == 2 * MIB


def test_drop_behind_keeps_the_blocks_footprint_small(scratch: Path) -> None:
    f = write_file(scratch / "f", 32 * MIB)
    cold(f)
    with pagewise.dropping(max_cache="4M") as d:
        with open(f, "rb") as fh:
            while fh.read(MIB):
                pass
    assert d.report is not None and d.report.drops_while_running >= 1
    assert cached(f) == 0


def test_without_tracing_rights_it_is_a_permission_error_naming_the_capability() -> None:
    # A child that gives up root (nobody, no groups, no capabilities) after starting.
    code = (
        "import os, pagewise\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        "    with pagewise.dropping():\n"
        "        pass\n"
        "except PermissionError as e:\n"
        "    print('PermissionError', isinstance(e, pagewise.Error), e.errno, e.syscall)\n"
        "    print(e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    out = p.stdout.decode()
    assert p.returncode == 0, f"as nobody: {p.stderr.decode()}"
    assert out.startswith("PermissionError True 1 None"), out
    assert "CAP_SYS_ADMIN" in out and "dropping" in out, out
