"""The report classes and the JSON schema (docs/schema/pagewise.schema.json, generated from
the library's report types) name the same fields: each typed attribute reads a key its
document has, and each key of the document has a typed attribute (of the same name, or the
one listed in ``ALIASES``). A field renamed or added in the library fails here until the
Python layer follows."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any, Dict, List, Set, Tuple

import pytest

import pagewise
from pagewise import _reports
from pagewise._reports import PathView, Report, View

from conftest import REPO, cli_path

SCHEMA = json.loads((REPO / "docs/schema/pagewise.schema.json").read_text())

#: Each report class and where its document is in the schema: a definition, then the keys
#: of the object inside it (``("copy", "residue")``: the copy report's ``residue``).
CLASSES: List[Tuple[type, Tuple[str, ...]]] = [
    (pagewise.FileError, ("error",)),
    (pagewise.WalkSummary, ("walk",)),
    (pagewise.Residency, ("residency",)),
    (pagewise.FileStat, ("stat_file",)),
    (pagewise.StatTotals, ("totals",)),
    (pagewise.RootTotals, ("root_totals",)),
    (pagewise.StatReport, ("stat",)),
    (pagewise.EvictFile, ("evict_file",)),
    (pagewise.EvictTotals, ("evict_totals",)),
    (pagewise.EvictReport, ("evict",)),
    (pagewise.LoadTotals, ("load_totals",)),
    (pagewise.LoadReport, ("load",)),
    (pagewise.CopyResidue, ("copy", "residue")),
    (pagewise.CopyItem, ("copy_line_entry",)),
    (pagewise.CopyReport, ("copy",)),
    (pagewise.SkippedFile, ("skipped_file",)),
    (pagewise.ReplayReport, ("replay_report",)),
    (pagewise.TraceCacheReport, ("trace_cache",)),
    (pagewise.DroppingReport, ("dropping",)),
    (pagewise.RecordReport, ("record",)),
    (pagewise.TraceFile, ("trace_file",)),
    (pagewise.CgroupStat, ("cgroup",)),
    (pagewise.CgroupsReport, ("cgroups",)),
    (pagewise.CgroupCharge, ("charge",)),
    (pagewise.ChargeTotals, ("charge_totals",)),
    (pagewise.FileCharge, ("charge_file",)),
    (pagewise.CgroupChargeReport, ("stat_by_cgroup",)),
    (pagewise.BenchReport, ("bench",)),
    (pagewise.BenchCommand, ("bench_command",)),
    (pagewise.BenchSet, ("bench_set",)),
    (pagewise.BenchLearning, ("bench_learning",)),
    (pagewise.BenchState, ("bench_state",)),
    (pagewise.BenchStats, ("bench_stats",)),
    (pagewise.BenchRun, ("bench_run",)),
    (pagewise.BenchDifference, ("bench_difference",)),
    (pagewise.BenchRestored, ("bench_restored",)),
]

#: Keys of a document read by an attribute of another name: key -> attribute.
ALIASES: Dict[str, Dict[str, str]] = {
    "FileStat": {"size": "size_bytes", "map": "percent"},
    "StatTotals": {"size": "size_bytes"},
    "RootTotals": {"size": "size_bytes"},
    "EvictFile": {"size": "size_bytes"},
    "TraceFile": {"dev_major": "dev", "dev_minor": "dev", "size": "size_bytes"},
}

#: Keys that are not in the document a line or a report class stands for: a ``--json-lines``
#: line's own, and what the Python call adds itself.
NOT_FIELDS: Dict[str, Set[str]] = {
    "CopyItem": {"type", "time"},  # the line's, not the entry's
    "CopyReport": {"items"},  # itemize_changes / dry_run: the entries, as a list
}


def _document(where: Tuple[str, ...]) -> Dict[str, Any]:
    d = SCHEMA["$defs"][where[0]]
    for key in where[1:]:
        d = d["properties"][key]
    assert d.get("type") == "object" and "properties" in d, where
    return d


def _field_keys(cls: type) -> Set[str]:
    """The document keys the class's typed attributes read (``_Field`` descriptors)."""
    keys = set()
    for klass in cls.__mro__:
        for value in vars(klass).values():
            if isinstance(value, _reports._Field):
                keys.add(value.key)
    return keys


@pytest.mark.parametrize("cls,where", CLASSES, ids=[c.__name__ for c, _ in CLASSES])
def test_report_class_and_schema_name_the_same_fields(cls: type, where: Tuple[str, ...]) -> None:
    doc = _document(where)
    skip = NOT_FIELDS.get(cls.__name__, set())
    keys = set(doc["properties"]) - skip
    aliases = ALIASES.get(cls.__name__, {})
    # Every typed attribute reads a key of the document.
    stale = _field_keys(cls) - keys - skip
    assert not stale, f"{cls.__name__} reads keys {where} has not: {sorted(stale)}"
    # Every key of the document has a typed attribute.
    untyped = sorted(k for k in keys if not hasattr(cls, aliases.get(k, k)))
    assert not untyped, f"{cls.__name__}: keys of {where} without a typed attribute: {untyped}"
    for key, attr in aliases.items():
        assert key in keys, f"{cls.__name__}: alias of {key}, which {where} has not"


def test_every_report_class_is_checked() -> None:
    checked = {c for c, _ in CLASSES}
    views = {
        getattr(pagewise, n)
        for n in dir(pagewise)
        if isinstance(getattr(pagewise, n), type)
        and issubclass(getattr(pagewise, n), View)
        and getattr(pagewise, n) not in (View, PathView, Report)
    }
    assert views - checked == set(), sorted(c.__name__ for c in views - checked)


def _help_defaults(verb: str) -> Dict[str, int]:
    """``--flag`` -> its ``[default: N]`` in ``pagewise VERB --help`` (sizes in bytes)."""
    exe = cli_path()
    if exe is None:
        pytest.fail("no pagewise CLI to compare with: set PAGEWISE_BIN (tests/python.rs does)")
    text = subprocess.run([exe, verb, "--help"], stdout=subprocess.PIPE, check=True).stdout.decode()
    # One entry per option: its line ("  -j, --threads <N>  ...") and the lines that go on.
    entries: List[str] = []
    for line in text.splitlines():
        if re.match(r"\s+(-\w, )?--[a-z-]+", line):
            entries.append(line)
        elif entries:
            entries[-1] += " " + line
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    found = {}
    for entry in entries:
        m = re.search(r"--([a-z-]+) <[A-Z]+>.*\[default:\s+(\d+)([KMG]?)\]", re.sub(r"\s+", " ", entry))
        if m:
            found[m.group(1)] = int(m.group(2)) * units[m.group(3)]
    return found


def test_defaults_are_the_clis() -> None:
    # pagewise.DEFAULTS comes from the library's constants (the Python signatures say None
    # and repeat none of them); the CLI's help shows the same constants.
    d = pagewise.DEFAULTS
    load, copy = _help_defaults("load"), _help_defaults("copy")
    assert d["load"]["batch"] == load["batch"]
    assert d["load"]["window"] == load["window"]
    assert d["load"]["depth"] == load["depth"]
    assert d["copy"]["threads"] == copy["threads"]
    assert d["copy"]["depth"] == copy["depth"]
    assert d["copy"]["chunk"] == copy["chunk"]
    bench = _help_defaults("bench")
    assert d["bench"]["runs"] == bench["runs"]
    assert d["bench"]["recordings"] == bench["recordings"]
    assert set(d) == {"load", "copy", "replay", "record", "bench"}
    assert all(isinstance(v, int) and v >= 0 for t in d.values() for v in t.values())
