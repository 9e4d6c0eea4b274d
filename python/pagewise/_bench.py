"""``pagewise bench``: :func:`bench`, a command timed hot, selectively cold and preloaded, and
its report classes (views over the document ``pagewise bench --json`` prints)."""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Union

from . import _pagewise
from ._common import PathArg, ProgressCallback, public
from ._reports import Report, View, _bool, _Field, _float, _int, _str, _view, _views
from ._trace import Trace, _trace


def _opt_float(key: str, doc: str) -> "_Field[Optional[float]]":
    return _Field(key, lambda v: None if v is None else float(v), doc)


@public
class BenchStats(View):
    """The statistics of one state's runs, seconds."""

    __slots__ = ()
    runs = _int("runs", "Runs counted.")
    mean_s = _float("mean_s", "Mean.")
    ci95_s = _opt_float("ci95_s", "Half the width of the mean's 95% confidence interval (None with one run).")
    median_s = _float("median_s", "Median.")
    stddev_s = _opt_float("stddev_s", "Sample standard deviation (None with one run).")
    min_s = _float("min_s", "Fastest run.")
    max_s = _float("max_s", "Slowest run.")
    outliers = _int("outliers", "Runs whose modified Z-score is above 3.5 (counted all the same).")


@public
class BenchRun(View):
    """One counted run."""

    __slots__ = ()
    round = _int("round", "Its round, from 1.")
    time_s = _float("time_s", "Wall time from the start of the program to its exit, seconds.")
    preload_s = _opt_float("preload_s", "The preload before it (``preloaded``), seconds; None otherwise.")
    cached_bytes_before = _int("cached_bytes_before", "Bytes of the read set cached right before the run (the kernel's figure).")
    set_bytes = _int("set_bytes", "Bytes of the read set then.")
    exit_code = _int("exit_code", "Its exit code (128 + signal).")
    setups = _int("setups", "Set-ups the state took (1 when it held at once).")
    outlier = _bool("outlier", "Its modified Z-score is above 3.5.")


@public
class BenchState(View):
    """One state of a command: its runs and their statistics."""

    __slots__ = ()
    state = _str("state", "``hot``, ``cold``, ``preloaded`` or ``cold-all``.")
    stats = _view(BenchStats, "stats", "The runs' times.")
    preload = _view(BenchStats, "preload", "The preloads' times (``preloaded``).")
    with_preload = _view(BenchStats, "with_preload", "Preload plus run (``preloaded``).")
    repeated_setups = _int("repeated_setups", "Set-ups repeated because the kernel did not show the state.")
    runs = _views(BenchRun, "runs", "Every counted run, in the order run.")


@public
class BenchLearning(View):
    """How a read set was had."""

    __slots__ = ()
    recordings = _int("recordings", "Recordings made (0: given as a trace).")
    stable = _bool("stable", "The last recording found at most 1% new pages.")
    files_seen = _int("files_seen", "Files the first recording saw the command open.")


@public
class BenchSet(View):
    """A command's read set."""

    __slots__ = ()
    files = _int("files", "Files of the set opened.")
    files_missing = _int("files_missing", "Files gone or unreachable since it was recorded.")
    bytes = _int("bytes", "Bytes of the set (what ``cold`` evicts and ``hot`` loads).")
    kept_out_bytes = _int("kept_out_bytes", "Bytes left out by ``keep``.")
    mapped_out_files = _int("mapped_out_files", "Files other processes map, left out (cached in every state).")
    mapped_out_bytes = _int("mapped_out_bytes", "Bytes of those files' pages in the set.")
    mapped_out_example = _str("mapped_out_example", "The first of them (None: none).")
    mapped_out_example_processes = _Field(
        "mapped_out_example_processes", lambda v: None if v is None else int(v), "How many processes map it (None: none)."
    )
    learning = _view(BenchLearning, "learning", "How the set was had.")


@public
class BenchDifference(View):
    """A state's mean less another's, with Welch's interval."""

    __slots__ = ()
    state = _str("state", "The state.")
    minus = _str("minus", "Less this one (``hot``).")
    mean_s = _float("mean_s", "The difference of the means, seconds.")
    ci95_s = _opt_float("ci95_s", "Half the width of its 95% interval (None with too few runs).")
    ratio = _float("ratio", "The state's mean over the other's.")


@public
class BenchRestored(View):
    """The files the bench touched, put back as they were."""

    __slots__ = ()
    files = _int("files", "Files put back.")
    cached_bytes_before = _int("cached_bytes_before", "Their cached bytes before the bench.")
    cached_bytes_after = _int("cached_bytes_after", "Their cached bytes after it.")
    failed = _int("failed", "Files that could not be put back.")


@public
class BenchCommand(View):
    """One command's results."""

    __slots__ = ()
    name = _str("name", "The command as given.")
    set = _view(BenchSet, "set", "Its read set.")
    states = _views(BenchState, "states", "Its states, in the order asked.")
    differences = _views(BenchDifference, "differences", "Each other state's mean less ``hot``'s.")
    restored = _view(BenchRestored, "restored", "The cache put back.")

    def state(self, name: str) -> BenchState:
        """The state called ``name``."""
        for s in self.states:
            if s.state == name:
                return s
        raise KeyError(name)


@public
class BenchReport(Report):
    """What :func:`bench` measured."""

    __slots__ = ()
    commands = _views(BenchCommand, "commands", "Per command: its read set, its states, the differences.")
    states = _Field("states", lambda v: list(v or []), "The states, in the order asked.")
    runs = _int("runs", "Runs counted per command and state asked for.")
    warmup = _int("warmup", "Warm-up rounds run and not counted.")
    seed = _int("seed", "Seed of the order of the runs.")
    spawn_overhead_s = _float("spawn_overhead_s", "What starting and reaping a program costs here, seconds.")
    setup_s_per_run = _float("setup_s_per_run", "Seconds spent around each run setting up and checking its state.")

    def __repr__(self) -> str:
        names = [c.name for c in self.commands]
        return f"<pagewise.BenchReport commands={names!r} runs={self.runs}>"


@public
def bench(
    command: Union[str, Sequence[PathArg]],
    *more: Union[str, Sequence[PathArg]],
    states: Sequence[str] = ("hot", "cold", "preloaded"),
    runs: Optional[int] = None,
    warmup: int = 0,
    min_time: float = 0.0,
    trace: Union[None, Trace, PathArg, Sequence[Union[Trace, PathArg]]] = None,
    keep: Sequence[PathArg] = (),
    prepare: Optional[str] = None,
    conclude: Optional[str] = None,
    recordings: Optional[int] = None,
    seed: int = 0,
    ignore_failure: bool = False,
    show_output: bool = False,
    progress: Optional[ProgressCallback] = None,
) -> BenchReport:
    """Time commands hot, selectively cold and preloaded (``pagewise bench``).

    :param command: a shell string (run with ``sh -c``) or a list of arguments; ``more``
        commands after it, the same way.
    :param states: of ``"hot"``, ``"cold"``, ``"preloaded"``, ``"cold-all"`` (``--states``).
    :param runs: runs counted per command and state (``--runs``; None: ``DEFAULTS["bench"]["runs"]``).
    :param warmup: rounds run first and not counted (``--warmup``).
    :param min_time: more rounds until each command and state ran this long, seconds.
    :param trace: each command's read set, recorded earlier (a :class:`Trace` or a path, one per
        command); None: learnt by recording (root).
    :param keep: paths left out of the read sets (``--keep``).
    :param prepare: a shell command before each run (``--prepare``).
    :param conclude: a shell command after each run (``--conclude``).
    :param recordings: recordings at most to learn a set (None: ``DEFAULTS["bench"]["recordings"]``).
    :param seed: seed of the order of the runs (``--seed``).
    :param ignore_failure: a command exiting non-zero is not an error (``-i``).
    :param show_output: the commands' output is shown, not thrown away.

    Each state is checked against the kernel (cachestat) right before its run; the cache is left
    as it was. Raises ``RuntimeError`` when a state cannot be set up or a command fails, and
    ``KeyboardInterrupt`` after Ctrl-C (the cache put back first).
    """
    cmds = [command, *more]
    given: Sequence[Union[None, Trace, PathArg]]
    if trace is None:
        given = [None] * len(cmds)
    elif isinstance(trace, (Trace, str, bytes, os.PathLike)):
        given = [trace]
    else:
        given = list(trace)
    if len(given) != len(cmds):
        raise ValueError(f"trace: {len(given)} for {len(cmds)} commands: one per command, in their order")
    traces: List[Optional[Trace]] = [None if t is None else _trace(t) for t in given]
    listed = []
    for c, t in zip(cmds, traces):
        if isinstance(c, str):
            name, argv = c, [b"sh", b"-c", os.fsencode(c)]
        else:
            argv = [os.fsencode(a) for a in c]
            name = " ".join(os.fsdecode(a) for a in argv)
        listed.append((name, argv, None if t is None else t._t))
    args = {
        "states": list(states),
        "runs": runs,
        "warmup": warmup,
        "min_time": min_time,
        "keep": [os.fsencode(k) for k in keep],
        "prepare": prepare,
        "conclude": conclude,
        "recordings": recordings,
        "seed": seed,
        "ignore_failure": ignore_failure,
        "show_output": show_output,
    }
    return BenchReport(_pagewise.bench(listed, args, progress))
