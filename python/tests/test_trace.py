"""record, Trace, replay and the trace-driven evict / load, checked against the kernel and
the CLI (`pagewise show --format json`, `pagewise replay --json`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import pagewise
from conftest import cached, cold, without, write_file

MIB = 1 << 20


def test_record_replay_evict_load_by_trace(scratch: Path, cli) -> None:
    f = write_file(scratch / "f", 4 * MIB)
    cold(f)
    rep = pagewise.record(["sha256sum", str(f)])
    assert rep.exit_code == 0 and rep.source in ("perf", "tracefs") and rep.ok
    t = rep.trace
    mine = [x for x in t.files if x.path == str(f)]  # (and the program's own files, if cold)
    assert len(mine) == 1 and mine[0].size_bytes == 4 * MIB and not mine[0].deleted
    assert t.bytes >= 4 * MIB and t.command == ["sha256sum", str(f)]
    assert sum(e.pages for e in t.pages) * t.page_size == t.bytes
    assert "trace" not in rep.to_dict()

    path = scratch / "cmp.trace"
    t.save(path)
    t2 = pagewise.Trace.open(path)
    assert t2.to_bytes() == t.to_bytes()
    assert t2.to_dict() == cli("show", "--format", "json", path, json_flag=False)

    # What the recording read, the kernel now holds: drop it by the trace, then replay it.
    e = pagewise.evict(trace=t2)
    assert e.cached_bytes_before >= 4 * MIB and e.cached_bytes_after == 0
    assert cached(f) == 0
    r = pagewise.replay(t2, order="file")
    assert r.bytes >= 4 * MIB and r.order == "file" and r.files + r.files_missing == len(t.files)
    assert cached(f) == 4 * MIB
    sh = cli("replay", "--order", "file", path)
    assert without(r.to_dict(), "elapsed_s", "mb_per_s") == without(sh[0], "elapsed_s", "mb_per_s")

    cold(f)
    ld = pagewise.load(trace=path)
    assert ld.cached_bytes_after >= 4 * MIB and cached(f) == 4 * MIB

    orders = pagewise.replay(t2, compare=True, runs=1)
    assert [o.order for o in orders] == ["recorded", "file", "disk"]


def test_record_exit_code_and_missing_command(scratch: Path) -> None:
    assert pagewise.record(["sh", "-c", "exit 3"]).exit_code == 3
    with pytest.raises(FileNotFoundError) as ei:
        pagewise.record([str(scratch / "no-such-program")])
    assert ei.value.syscall == "execve" and ei.value.filename == str(scratch / "no-such-program")
    with pytest.raises(TypeError):
        pagewise.record("cat file")  # type: ignore[arg-type]
