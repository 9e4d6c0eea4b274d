"""copy's options that the CLI has (update, delete, checksum, dry_run, archive, no_clobber,
no_target_directory, dereference, itemize_changes): each checked against the destination's
real bytes and metadata (os.lstat, the files' contents), and the report's counts against
what ``pagewise copy --json`` reports for the same copy of an identical tree."""

from __future__ import annotations

import json
import os
import stat as st
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import pagewise
from conftest import cli_path, write_file

MIB = 1 << 20
T0 = 1_600_000_000 * 10**9  # a fixed modification time (ns) for files that must look alike

# The counts of a copy report, compared with the CLI's (timings and residue aside).
COUNTS = (
    "files",
    "dirs",
    "symlinks",
    "hardlinks",
    "specials",
    "created",
    "updated",
    "skipped",
    "deleted",
    "metadata_updated",
    "stale_temporaries_removed",
    "resumed_files",
    "resumed_bytes",
    "resume_compared_bytes",
    "bytes",
    "data_bytes",
    "strategies",
    "verified_files",
    "verify_mismatches",
    "dry_run",
    "error_count",
)


def make_case(base: Path) -> Tuple[Path, Path]:
    """A source tree and an older copy of it at the destination:

    - ``same``: identical at the destination (size, mtime, content);
    - ``changed``: the destination's is older and shorter;
    - ``sneaky``: same size and mtime at the destination, other content (only a content
      comparison sees the difference);
    - ``sub/new`` and ``link`` (a symlink to ``same``): missing at the destination;
    - ``extra`` and ``olddir/x``: only at the destination.
    """
    src, dst = base / "src", base / "dst"
    src.mkdir()
    write_file(src / "same", 3 * MIB)
    write_file(src / "changed", 2 * MIB + 100)
    (src / "sneaky").write_bytes(b"A" * 5000)
    (src / "sub").mkdir()
    write_file(src / "sub" / "new", 70000)
    os.symlink("same", src / "link")
    dst.mkdir()
    write_file(dst / "same", 3 * MIB)
    (dst / "changed").write_bytes(b"old" * 1000)
    (dst / "sneaky").write_bytes(b"B" * 5000)
    (dst / "extra").write_bytes(b"only here")
    (dst / "olddir").mkdir()
    (dst / "olddir" / "x").write_bytes(b"x")
    for p in ("same", "sneaky", "changed", "sub/new"):
        os.utime(src / p, ns=(T0, T0))
    for p in ("same", "sneaky"):
        os.utime(dst / p, ns=(T0, T0))
    os.utime(dst / "changed", ns=(T0 - 10**12, T0 - 10**12))
    return src, dst


def snapshot(root: Path) -> Dict[str, Any]:
    """Everything about a tree the kernel can tell: per entry its lstat (inode, mode, size,
    mtime) and its bytes (files) or target (symlinks)."""
    out: Dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            s = os.lstat(p)
            body: Any = None
            if st.S_ISREG(s.st_mode):
                with open(p, "rb") as f:
                    body = f.read()
            elif st.S_ISLNK(s.st_mode):
                body = os.readlink(p)
            out[os.path.relpath(p, root)] = (s.st_ino, s.st_mode, s.st_size, s.st_mtime_ns, body)
    return out


def shape(root: Path) -> Dict[str, Any]:
    """What two copies made at different times share: per entry its type and permissions,
    and for files the bytes, for symlinks the target."""
    return {k: (v[1], None if st.S_ISDIR(v[1]) else v[4]) for k, v in snapshot(root).items()}


def counts(doc: Dict[str, Any]) -> Dict[str, Any]:
    return {k: doc[k] for k in COUNTS}


def cli_copy(*args: Any) -> Dict[str, Any]:
    """The document of `pagewise copy ARGS --json`."""
    exe = cli_path()
    if exe is None:
        pytest.skip("no pagewise CLI to compare with: set PAGEWISE_BIN (tests/python.rs does)")
    argv = [exe, "copy", "--json"] + [os.fsdecode(a) if isinstance(a, os.PathLike) else str(a) for a in args]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode in (0, 2), f"{argv}: exit {p.returncode}: {p.stderr.decode()}"
    return json.loads(p.stdout)


def cli_entries(*args: Any) -> List[Dict[str, Any]]:
    """The entries of `pagewise copy ARGS --json-lines`."""
    exe = cli_path()
    if exe is None:
        pytest.skip("no pagewise CLI to compare with: set PAGEWISE_BIN (tests/python.rs does)")
    argv = [exe, "copy", "--json-lines"] + [os.fsdecode(a) if isinstance(a, os.PathLike) else str(a) for a in args]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode in (0, 2), f"{argv}: exit {p.returncode}: {p.stderr.decode()}"
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    return [e for e in lines if e["type"] == "entry"]


def same_as_cli(scratch: Path, py_kw: Dict[str, Any], flags: List[str]) -> Tuple[pagewise.CopyReport, Path, Path]:
    """Runs the same copy of two identical cases, one through Python and one through the CLI,
    checks the counts agree and the two destinations end up alike, and returns Python's report
    and its (src, dst)."""
    (scratch / "py").mkdir()
    (scratch / "sh").mkdir()
    src, dst = make_case(scratch / "py")
    src2, dst2 = make_case(scratch / "sh")
    r = pagewise.copy(src, dst, **py_kw)
    doc = cli_copy(*flags, src2, dst2)
    assert counts(r.to_dict()) == counts(doc), (py_kw, flags)
    assert shape(dst) == shape(dst2)
    return r, src, dst


def test_update_copies_what_differs_by_size_and_time(scratch: Path) -> None:
    r, src, dst = same_as_cli(scratch, dict(update=True, no_target_directory=True), ["-u", "-T"])
    assert r.ok
    assert (dst / "changed").read_bytes() == (src / "changed").read_bytes()
    assert (dst / "sub" / "new").read_bytes() == (src / "sub" / "new").read_bytes()
    assert os.readlink(dst / "link") == "same"
    # Quick check: same size and mtime is left alone, even with other content.
    assert (dst / "sneaky").read_bytes() == b"B" * 5000
    # Nothing deleted without delete=True.
    assert (dst / "extra").read_bytes() == b"only here" and (dst / "olddir" / "x").exists()
    assert r.updated == 1 and r.created >= 3 and r.deleted == 0
    assert r.skipped >= 2  # same, sneaky


def test_update_leaves_up_to_date_files_untouched(scratch: Path) -> None:
    src, dst = make_case(scratch)
    ino = {p: os.lstat(dst / p).st_ino for p in ("same", "sneaky", "changed")}
    r = pagewise.copy(src, dst, update=True, no_target_directory=True)
    assert r.ok
    assert os.lstat(dst / "same").st_ino == ino["same"]  # not rewritten
    assert os.lstat(dst / "sneaky").st_ino == ino["sneaky"]
    assert os.lstat(dst / "changed").st_ino != ino["changed"]  # replaced by a new file


def test_checksum_compares_content(scratch: Path) -> None:
    r, src, dst = same_as_cli(scratch, dict(checksum=True, no_target_directory=True), ["-c", "-T"])
    assert r.ok
    assert (dst / "sneaky").read_bytes() == b"A" * 5000  # same size and time, other bytes: copied
    assert (dst / "changed").read_bytes() == (src / "changed").read_bytes()
    assert r.updated == 2
    # Identical content is left as it was (same inode).
    (scratch / "again").mkdir()
    src2, dst2 = make_case(scratch / "again")
    ino = os.lstat(dst2 / "same").st_ino
    pagewise.copy(src2, dst2, checksum=True, no_target_directory=True)
    assert os.lstat(dst2 / "same").st_ino == ino


def test_delete_removes_what_the_source_no_longer_has(scratch: Path) -> None:
    r, src, dst = same_as_cli(scratch, dict(update=True, delete=True, no_target_directory=True), ["-u", "--delete", "-T"])
    assert r.ok
    assert not os.path.lexists(dst / "extra") and not os.path.lexists(dst / "olddir")
    assert sorted(os.listdir(dst)) == sorted(os.listdir(src))
    assert r.deleted >= 2


def test_dry_run_writes_nothing_and_predicts_the_copy(scratch: Path) -> None:
    r, src, dst = same_as_cli(
        scratch,
        dict(update=True, delete=True, dry_run=True, no_target_directory=True),
        ["-u", "--delete", "-n", "-T"],
    )
    assert r.ok and r.dry_run
    # Nothing changed: a fresh identical case has the same entries, modes and bytes, and the
    # files whose times the case sets have them still.
    (scratch / "ref").mkdir()
    _, ref = make_case(scratch / "ref")
    assert shape(dst) == shape(ref)
    assert [os.lstat(dst / p).st_mtime_ns for p in ("same", "sneaky", "changed")] == [T0, T0, T0 - 10**12]
    before = snapshot(dst)
    r2 = pagewise.copy(src, dst, update=True, delete=True, dry_run=True, no_target_directory=True)
    assert snapshot(dst) == before  # inodes, modes, sizes, mtimes, bytes: all as they were
    assert (r2.created, r2.updated, r2.deleted) == (r.created, r.updated, r.deleted)
    assert r.created > 0 and r.updated > 0 and r.deleted > 0
    # The dry run's entries are what the real copy then does.
    predicted = sorted((i.path, i.action) for i in r2.items if i.action != "skipped")
    real = pagewise.copy(src, dst, update=True, delete=True, no_target_directory=True, itemize_changes=True)
    assert (real.created, real.updated, real.deleted) == (r.created, r.updated, r.deleted)
    assert sorted((i.path, i.action) for i in real.items if i.action != "skipped") == predicted
    assert snapshot(dst) != before


def test_dry_run_into_a_missing_destination_creates_nothing(scratch: Path) -> None:
    src, _ = make_case(scratch)
    r = pagewise.copy(src, scratch / "new", dry_run=True)
    assert r.ok and r.dry_run and r.created > 0
    assert not os.path.lexists(scratch / "new")


def test_archive_keeps_mode_times_symlinks_and_specials(scratch: Path) -> None:
    src = scratch / "src"
    src.mkdir()
    write_file(src / "f", 2 * MIB)
    os.chmod(src / "f", 0o640)
    os.utime(src / "f", ns=(T0, T0 + 123))
    os.symlink("f", src / "link")
    os.symlink("/nonexistent/target", src / "dangling")
    os.mkfifo(src / "fifo")
    r = pagewise.copy(src, scratch / "a", archive=True)
    assert r.ok, r.errors
    a = scratch / "a"
    s, d = os.lstat(src / "f"), os.lstat(a / "f")
    assert st.S_IMODE(d.st_mode) == 0o640 and d.st_mtime_ns == s.st_mtime_ns
    assert (a / "f").read_bytes() == (src / "f").read_bytes()
    assert st.S_ISLNK(os.lstat(a / "link").st_mode) and os.readlink(a / "link") == "f"
    assert os.readlink(a / "dangling") == "/nonexistent/target"
    assert st.S_ISFIFO(os.lstat(a / "fifo").st_mode)
    assert (r.files, r.symlinks, r.specials) == (1, 2, 1)
    # The CLI's -a copies the same and counts the same.
    doc = cli_copy("-a", src, scratch / "b")
    assert counts(r.to_dict()) == counts(doc)
    b = scratch / "b"
    assert st.S_IMODE(os.lstat(b / "f").st_mode) == 0o640 and os.lstat(b / "f").st_mtime_ns == s.st_mtime_ns
    # Without archive the time is not kept (the copy is new).
    r = pagewise.copy(src / "f", scratch / "plain")
    assert os.lstat(scratch / "plain").st_mtime_ns != s.st_mtime_ns


def test_no_clobber_keeps_existing_files(scratch: Path) -> None:
    r, src, dst = same_as_cli(scratch, dict(no_clobber=True, no_target_directory=True), ["--no-clobber", "-T"])
    assert r.ok
    assert (dst / "changed").read_bytes() == b"old" * 1000
    assert (dst / "sneaky").read_bytes() == b"B" * 5000
    assert (dst / "sub" / "new").read_bytes() == (src / "sub" / "new").read_bytes()
    assert r.updated == 0


def test_no_target_directory_copies_as_dest(scratch: Path) -> None:
    src, dst = make_case(scratch)
    pagewise.copy(src, dst)  # cp's rule: into dst, as dst/src
    assert (dst / "src" / "same").exists()
    r = pagewise.copy(src, dst, no_target_directory=True)  # dst is the copy itself
    assert r.ok and (dst / "sneaky").read_bytes() == b"A" * 5000
    assert not (dst / "src" / "src").exists()


def test_dereference_follows_symlinks(scratch: Path) -> None:
    src, _ = make_case(scratch)
    os.symlink(src, scratch / "srclink")
    r = pagewise.copy(src, scratch / "l", dereference=True)
    assert r.ok and st.S_ISREG(os.lstat(scratch / "l" / "link").st_mode)
    assert (scratch / "l" / "link").read_bytes() == (src / "same").read_bytes()
    # -H: the symlink named as the source is followed, those inside are not.
    r = pagewise.copy(scratch / "srclink", scratch / "h", dereference_command_line=True)
    assert r.ok and st.S_ISDIR(os.lstat(scratch / "h").st_mode)
    assert st.S_ISLNK(os.lstat(scratch / "h" / "link").st_mode)
    # The default (-P): the source symlink itself is copied.
    r = pagewise.copy(scratch / "srclink", scratch / "p", no_dereference=True)
    assert r.ok and os.readlink(scratch / "p") == str(src)
    doc = cli_copy("-L", src, scratch / "l2")
    assert counts(pagewise.copy(src, scratch / "l3", dereference=True).to_dict()) == counts(doc)


def test_itemize_changes_lists_the_entries_the_cli_streams(scratch: Path) -> None:
    (scratch / "py").mkdir()
    (scratch / "sh").mkdir()
    src, dst = make_case(scratch / "py")
    src2, dst2 = make_case(scratch / "sh")
    r = pagewise.copy(src, dst, update=True, delete=True, no_target_directory=True, itemize_changes=True)
    entries = cli_entries("-u", "--delete", "-T", src2, dst2)
    mine = sorted((os.path.relpath(i.path, dst), i.kind, i.action, i.bytes) for i in r.items)
    theirs = sorted((os.path.relpath(e["path"], dst2), e["kind"], e["action"], e["bytes"]) for e in entries)
    assert mine == theirs
    assert ("changed", "file", "updated", 2 * MIB + 100) in mine
    assert ("extra", "file", "deleted", 0) in mine
    assert r.to_dict()["items"][0].keys() >= {"path", "kind", "action", "bytes"}
    # Without it, no items are kept.
    assert pagewise.copy(src, dst, update=True, no_target_directory=True).items == []


def test_conflicting_options_are_refused(scratch: Path) -> None:
    src, dst = make_case(scratch)
    before = snapshot(dst)
    with pytest.raises(ValueError, match="no_clobber"):
        pagewise.copy(src, dst, update=True, no_clobber=True)
    with pytest.raises(ValueError, match="no_clobber"):
        pagewise.copy(src, dst, checksum=True, no_clobber=True)
    with pytest.raises(ValueError, match="dereference"):
        pagewise.copy(src, dst, dereference=True, no_dereference=True)
    with pytest.raises(ValueError, match="dereference"):
        pagewise.copy(src, dst, dereference=True, dereference_command_line=True)
    assert snapshot(dst) == before


def _listing(root: Path) -> List[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_filters_match_the_cli(scratch: Path) -> None:
    """filters/exclude/max_size leave the same tree as the CLI's --filter/--exclude/--max-size."""
    src = scratch / "src"
    for name, size in [("a.log", 10), ("keep.log", 20), ("big.bin", 3 * MIB), ("d/x.c", 5),
                       ("d/cache/y", 6), ("d/z.log", 7)]:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        write_file(src / name, size)
    py_dst, cli_dst = scratch / "py", scratch / "cli"
    pagewise.copy(src, py_dst, archive=True, no_target_directory=True,
                  filters=["+ keep.log", "- *.log"], exclude=["cache/"], max_size="1M")
    exe = cli_path()
    if exe is None:
        pytest.skip("no pagewise CLI to compare with: set PAGEWISE_BIN (tests/python.rs does)")
    subprocess.run([exe, "copy", "-a", "-T", "-q", "--filter", "+ keep.log",
                    "--filter", "- *.log", "--exclude", "cache/", "--max-size", "1M",
                    str(src), str(cli_dst)], check=True)
    assert _listing(py_dst) == _listing(cli_dst)
    assert _listing(py_dst) == ["d", "d/x.c", "keep.log"]
    with pytest.raises(ValueError, match="unknown filter rule"):
        pagewise.copy(src, scratch / "bad", filters=["x y"])
    with pytest.raises(ValueError, match="ionice"):
        pagewise.copy(src, scratch / "bad", ionice="realtime")


def test_bwlimit_paces_the_copy(scratch: Path) -> None:
    """bwlimit holds the rate: 24 MiB at 16 MiB/s in 4 MiB chunks, each waiting for its turn,
    starts its last chunk at (24 - 4) / 16 = 1.25 s (an unlimited copy takes ~0.05 s), with
    ionice="idle" accepted."""
    import time
    src = scratch / "f"
    write_file(src, 24 * MIB)
    t = time.monotonic()
    pagewise.copy(src, scratch / "g", bwlimit="16M", ionice="idle")
    took = time.monotonic() - t
    assert 1.2 <= took <= 2.5, took
    assert (scratch / "g").read_bytes() == src.read_bytes()


def _checkpointed(d: Path, name: str) -> int:
    """The bytes the checkpoint of a partial temporary of `name` in `d` keeps (its
    user.pagewise.resume xattr: ``pagewise-resume 1 DEV INO SIZE MTIME NSEC KEPT``); 0 without."""
    kept = 0
    for t in d.glob(f".{name}.pagewise-*.tmp"):
        try:
            kept = max(kept, int(os.getxattr(t, "user.pagewise.resume").split()[-1]))
        except (OSError, ValueError, IndexError):
            pass
    return kept


def test_partial_copy_is_resumed(scratch: Path) -> None:
    """partial=True: a copy killed (SIGKILL) mid-file leaves its checkpointed temporary, and the
    next copy continues from it (resumed_bytes) with the right bytes."""
    import signal
    import sys
    import time
    src = scratch / "big"
    write_file(src, 64 * MIB)
    dst = scratch / "out"
    code = f"import pagewise; pagewise.copy({str(src)!r}, {str(dst)!r}, partial=True, bwlimit='16M')"
    p = subprocess.Popen([sys.executable, "-c", code])
    # Killed once the temporary holds a checkpoint (every 16 MiB): a fixed 2.5 s was too short
    # in an emulated guest (Python's start alone took longer; nothing was kept to resume).
    deadline = time.monotonic() + 60
    while _checkpointed(scratch, "out") < 16 * MIB:
        assert p.poll() is None and time.monotonic() < deadline, "no checkpoint while it ran"
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not dst.exists()
    r = pagewise.copy(src, dst)
    assert r.resumed_files == 1, r
    assert r.resumed_bytes >= 16 * MIB, r.resumed_bytes
    assert dst.read_bytes() == src.read_bytes()
