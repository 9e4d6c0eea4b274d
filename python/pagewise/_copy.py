"""``pagewise copy``: :func:`copy`."""

from __future__ import annotations

import os
from typing import Optional, Sequence

from . import _pagewise
from ._common import PathArg, Paths, ProgressCallback, SizeArg, _paths, public
from ._reports import CopyReport


@public
def copy(
    sources: Paths,
    dest: PathArg,
    *,
    cache: str = "auto",
    preserve: bool = False,
    archive: bool = False,
    no_target_directory: bool = False,
    update: bool = False,
    no_clobber: bool = False,
    checksum: bool = False,
    dry_run: bool = False,
    delete: bool = False,
    dereference: bool = False,
    dereference_command_line: bool = False,
    no_dereference: bool = False,
    itemize_changes: bool = False,
    no_preallocate: bool = False,
    named_temp: bool = False,
    partial: bool = False,
    fsync: bool = False,
    verify: bool = False,
    threads: Optional[int] = None,
    depth: Optional[int] = None,
    chunk: Optional[SizeArg] = None,
    filters: Sequence[str] = (),
    exclude: Sequence[str] = (),
    delete_excluded: bool = False,
    one_file_system: bool = False,
    max_size: Optional[SizeArg] = None,
    min_size: Optional[SizeArg] = None,
    bwlimit: Optional[SizeArg] = None,
    ionice: Optional[str] = None,
    progress: Optional[ProgressCallback] = None,
) -> CopyReport:
    """Copy files and trees at device speed, leaving the page cache as it was
    (``pagewise copy``; cp's rules: into ``dest`` when it is a directory).

    :param cache: ``"auto"``, ``"dontcache"``, ``"direct"``, ``"drop-behind"`` or
        ``"buffered"`` (``--cache``).
    :param preserve: keep mode, owner (as root), times, xattrs and ACLs (``--preserve``).
    :param archive: as ``cp -a`` (``--archive``): ``preserve``; trees are always copied
        recursively, special files recreated and symlinks copied as symlinks unless
        ``dereference`` says otherwise.
    :param no_target_directory: ``dest`` is the copy itself, never a directory to copy into
        (``-T``): running the same call again lands in the same place.
    :param update: copy only what is missing or differs by size or modification time, never
        over a destination file newer than its source (``-u``, cp -u), a symlink whose text
        differs; finishes an interrupted copy.
    :param no_clobber: never replace an existing destination entry (``--no-clobber``; not
        with ``update`` or ``checksum``).
    :param checksum: copy a file only when its content differs: files of the same size are
        compared byte for byte, read without caching them (``-c``, rsync -c); ``update``'s
        rule for the rest.
    :param dry_run: change nothing; the report says what would be created, updated and
        deleted, and lists every entry in ``report.items`` (``-n``).
    :param delete: remove from destination directories what their source directories no
        longer have (``--delete``).
    :param dereference: follow every symlink in the sources, inside trees too (``-L``).
    :param dereference_command_line: follow symlinks named as sources only (``-H``).
    :param no_dereference: copy symlinks as symlinks (``-P``, the default).
    :param itemize_changes: list every entry's outcome in ``report.items`` (``-i``;
        ``--json-lines`` streams the same entries).
    :param no_preallocate: do not fallocate destinations (``--no-preallocate``).
    :param named_temp: write under hidden temporary names, not O_TMPFILE (``--named-temp``).
    :param partial: keep a file stopped mid-copy as a partial temporary with a checkpoint, resumed by the
        next copy (``--partial``); implies ``named_temp``.
    :param fsync: fsync each file before it is linked into place (``--fsync``).
    :param verify: re-read every copy from disk and compare checksums (``--verify``).
    :param threads: files copied in parallel (``--threads``; None: the library's default,
        ``DEFAULTS["copy"]["threads"]``).
    :param depth: I/Os in flight within one large file (``--depth``; None:
        ``DEFAULTS["copy"]["depth"]``).
    :param chunk: bytes per I/O, a multiple of 4 KiB (``--chunk``; None:
        ``DEFAULTS["copy"]["chunk"]``).
    :param filters: rsync filter rules in order (``-f``: ``"- *.tmp"``, ``"+ keep/"``,
        ``"- *"``; the first match decides, an excluded directory is not entered).
    :param exclude: patterns to leave out, after ``filters`` (``--exclude``, rsync's rules).
    :param delete_excluded: with ``delete``, also remove excluded destination entries
        (``--delete-excluded``; implies ``delete``).
    :param one_file_system: do not cross file systems: a mount point is copied empty (``-x``).
    :param max_size: leave out regular files larger than this (``--max-size``).
    :param min_size: leave out regular files smaller than this (``--min-size``).
    :param bwlimit: move at most this many bytes per second (``"50M"``; ``--bwlimit``).
    :param ionice: the copy's I/O priority, ``"idle"`` or ``"best-effort[:0-7]"``
        (``--ionice``).

    Files are written under a temporary and linked into place only when complete: an
    interrupted copy (Ctrl-C) leaves no half file. Options that contradict each other
    (``update`` or ``checksum`` with ``no_clobber``; more than one of the dereference
    options) raise ``ValueError`` before anything is touched.
    """
    args = {
        "cache": cache,
        "preserve": preserve,
        "archive": archive,
        "no_target_directory": no_target_directory,
        "update": update,
        "no_clobber": no_clobber,
        "checksum": checksum,
        "dry_run": dry_run,
        "delete": delete,
        "dereference": dereference,
        "dereference_command_line": dereference_command_line,
        "no_dereference": no_dereference,
        "itemize_changes": itemize_changes,
        "no_preallocate": no_preallocate,
        "named_temp": named_temp,
        "partial": partial,
        "fsync": fsync,
        "verify": verify,
        "threads": threads,
        "depth": depth,
        "chunk": chunk,
        "filters": [os.fsencode(r) for r in filters],
        "exclude": [os.fsencode(p) for p in exclude],
        "delete_excluded": delete_excluded,
        "one_file_system": one_file_system,
        "max_size": max_size,
        "min_size": min_size,
        "bwlimit": bwlimit,
        "ionice": ionice,
    }
    return CopyReport(_pagewise.copy(_paths(sources), os.fsencode(dest), args, progress))
