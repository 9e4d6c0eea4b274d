"""pagewise.bench: the same experiment as ``pagewise bench`` — each state checked against the
kernel before its run, the report as the CLI's ``--json`` prints it, the cache left as it
was."""

from __future__ import annotations

from pathlib import Path

import pytest

import pagewise
from conftest import cached, cold, write_file

MIB = 1 << 20


def test_bench_learns_the_set_checks_each_state_and_puts_the_cache_back(scratch: Path, cli) -> None:
    f = write_file(scratch / "f", 8 * MIB)
    cold(f)
    r = pagewise.bench(["cksum", str(f)], states=["hot", "cold", "preloaded"], runs=3)
    assert isinstance(r, pagewise.BenchReport) and r.ok and r.states == ["hot", "cold", "preloaded"]
    (c,) = r.commands
    assert c.name == f"cksum {f}" and c.set.bytes >= 8 * MIB and c.set.learning.recordings >= 2
    for run in c.state("hot").runs:
        assert run.cached_bytes_before == run.set_bytes and run.preload_s is None
    for run in c.state("cold").runs:
        assert run.cached_bytes_before == 0
    pre = c.state("preloaded")
    assert all(x.preload_s is not None and x.preload_s > 0 for x in pre.runs)
    assert pre.preload.runs == 3 and pre.with_preload.mean_s > pre.stats.mean_s
    assert {d.state for d in c.differences} == {"cold", "preloaded"}
    assert c.state("hot").stats.runs == 3 and c.state("hot").stats.ci95_s is not None
    with pytest.raises(KeyError):
        c.state("cold-all")
    # Cold before, cold after: the bench's reads are dropped again.
    assert cached(f) == 0 and c.restored.failed == 0
    assert r.to_dict()["commands"][0]["set"] == c.set.to_dict()


def test_a_given_trace_is_not_recorded_and_shell_strings_run_with_sh(scratch: Path) -> None:
    f = write_file(scratch / "f", 4 * MIB)
    cold(f)
    t = pagewise.record(["cat", str(f)]).trace
    r = pagewise.bench(f"cat {f} | cksum", trace=t, states=["cold"], runs=2, keep=[scratch / "nothing"])
    (c,) = r.commands
    assert c.set.learning.recordings == 0 and c.name == f"cat {f} | cksum"
    assert [x.cached_bytes_before for x in c.state("cold").runs] == [0, 0]


def test_bad_arguments_are_refused_before_anything_runs(scratch: Path) -> None:
    with pytest.raises(ValueError, match="states"):
        pagewise.bench("true", states=["warm"])
    with pytest.raises(ValueError, match="one per command"):
        pagewise.bench("true", "false", trace=[scratch / "a", scratch / "b", scratch / "c"])
    with pytest.raises(ValueError, match="runs"):
        pagewise.bench("true", runs=0)
    with pytest.raises(RuntimeError, match="exited 1 during its recording"):
        pagewise.bench(["false"], runs=1)
