"""``pagewise.open``: files read and written without going through (or leaving anything in)
the page cache, as ``io.RawIOBase`` objects; and ``pagewise.aligned_buffer``.

The library's ``DirectFile`` does the work: O_DIRECT with the alignment handled (aligned
requests go straight to the device; others through aligned bounce buffers, a read-ahead
window and a write-behind stage; partial blocks read, modified and written whole; the file's
unaligned tail written exactly), falling back to RWF_DONTCACHE, then to buffered I/O with
drop-behind, where the filesystem refuses — a fallback is reported as a ``RuntimeWarning``.
"""

from __future__ import annotations

import ctypes
import errno
import io
import operator
import os
import sys
import warnings
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _pagewise

__all__ = [
    "DirectIO",
    "open",
    "aligned_buffer",
    "Alignment",
    "read_into",
    "read_ranges_into",
    "read",
    "empty",
    "prefetch",
]

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

# The largest alignment aligned_buffer takes (1 GiB, a huge page).
_MAX_ALIGN = 1 << 30
# Positions handed to the library are u64; beyond, the library's own check (EINVAL past the
# largest file offset, naming the file and the call) is reached with the largest u64.
_U64_MAX = (1 << 64) - 1
# What a file offset (off_t) holds, as io.FileIO.seek takes it.
_OFF_MIN, _OFF_MAX = -(1 << 63), (1 << 63) - 1


class Alignment(NamedTuple):
    """What zero-copy requests must be aligned to: the buffer's address to ``memory`` bytes,
    file offsets and lengths to ``offset`` bytes (from statx(STATX_DIOALIGN) with O_DIRECT;
    unaligned requests work too, through a bounce buffer)."""

    memory: int
    offset: int


def aligned_buffer(size: int, align: int = 4096) -> memoryview:
    """A zeroed, writable buffer of ``size`` bytes whose address is aligned to ``align`` (a
    power of two; 4096 suits O_DIRECT on every common device): a ``memoryview`` (format
    ``'B'``) over memory allocated by the library, freed when the last view of it goes.
    Reading into it with :meth:`DirectIO.readinto` in multiples of the file's
    ``alignment.offset`` goes straight from the device into it (zero copy)::

        buf = pagewise.aligned_buffer(8 << 20)
        with pagewise.open("/data/big", "rb") as f:
            while n := f.readinto(buf):
                consume(buf[:n])

    ``numpy.frombuffer(buf, dtype=...)`` views it without a copy.

    :raises ValueError: a negative size, or an alignment that is not a power of two of at
        most 1 GiB.
    :raises MemoryError: a size that cannot be allocated."""
    if size < 0:
        raise ValueError("aligned_buffer: negative size")
    if align <= 0 or align & (align - 1) or align > _MAX_ALIGN:
        raise ValueError(f"aligned_buffer: align={align} is not a power of two of at most 1 GiB")
    if size > sys.maxsize:
        raise MemoryError(f"aligned_buffer: {size} bytes cannot be allocated")
    owner = _pagewise.AlignedAlloc(max(size, 1), align)
    arr = (ctypes.c_char * max(size, 1)).from_address(owner.address)
    # The ctypes array keeps the allocation alive; every view made from it keeps the array.
    arr._pagewise_owner = owner  # type: ignore[attr-defined]
    view = memoryview(arr).cast("B")
    return view if size > 0 else view[:0]


def empty(n: Union[int, Tuple[int, ...]], dtype: Any = None) -> Any:
    """An uninitialised buffer whose memory starts on a page, so direct reads into it
    (:func:`read_into`, ``f.readinto``) go from the device straight into it:

    - with numpy importable, ``numpy.empty(n, dtype)`` laid out on a page (``n`` elements of
      ``dtype``, default ``uint8``; ``n`` may be a shape tuple): numpy's memory (one page
      more than asked, freed with the last view), never written before you write it, so a
      large one costs nothing until it is filled;
    - without numpy, a writable, zeroed ``memoryview`` of ``n`` bytes (:func:`aligned_buffer`);
      a ``dtype`` is then a ``TypeError``.

    :raises ValueError: a negative size."""
    shape = (n,) if isinstance(n, int) else tuple(n)
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise ValueError(f"empty: {n!r} is not a size (a count, or a tuple of counts >= 0)")
    page = _pagewise.page_size()
    try:
        import numpy
    except ImportError:
        numpy = None  # type: ignore[assignment]
    if numpy is None:
        if dtype is not None:
            raise TypeError("empty: dtype needs numpy, which cannot be imported")
        count = 1
        for d in shape:
            count *= d
        return aligned_buffer(count, page)
    dt = numpy.dtype(numpy.uint8 if dtype is None else dtype)
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dt.itemsize
    # numpy's own uninitialised memory, one page more, cut where a page starts: nothing is
    # written before the caller (or the device) writes it. aligned_buffer zeroes its memory,
    # which cost as long as the cold read into it (75-105 ms for 49 MiB here).
    raw = numpy.empty(nbytes + page, dtype=numpy.uint8)
    skip = -raw.__array_interface__["data"][0] % page
    return raw[skip : skip + nbytes].view(dt).reshape(shape)


_warned_misaligned = False


def _warn_misaligned(stacklevel: int) -> None:
    """Says once per process that a direct read went through bounce buffers."""
    global _warned_misaligned
    if _warned_misaligned:
        return
    _warned_misaligned = True
    warnings.warn(
        "pagewise: a direct (O_DIRECT) read landed in a buffer whose address is not aligned "
        "to the file for the device, so it went through a bounce buffer (a copy, slower); "
        "allocate it with pagewise.empty() (page-aligned) for zero-copy reads "
        "(said once)",
        UserWarning,
        stacklevel=stacklevel + 1,
    )


def _check_read_args(offset: int, depth: Optional[int]) -> None:
    if offset < 0:
        raise ValueError(f"offset: {offset} is negative")
    if depth is not None and not 1 <= depth <= 256:
        raise ValueError(f"depth: {depth} is not a number of requests in flight (1 to 256)")


def read_into(
    path: PathArg,
    buffer: Any,
    offset: int = 0,
    *,
    depth: Optional[int] = None,
    cache: str = "direct",
    progress: Optional[Any] = None,
) -> int:
    """Fills ``buffer`` (any writable, contiguous buffer: numpy array, bytearray, memoryview,
    mmap, ctypes array...) with the file's bytes from ``offset``, leaving the page cache as it
    was. Large reads have ``depth`` requests of 1 MiB in flight (default 32) and run without
    the GIL.

    With ``cache="direct"`` (O_DIRECT) the bytes go from the device straight into ``buffer``
    when its address suits the device (:func:`empty` makes such buffers); an unaligned start
    or end of the range is read through a one-block bounce buffer, and a buffer whose address
    cannot be aligned to the file goes through bounce buffers (a copy; a ``UserWarning`` says
    so, once). ``cache`` is as for :func:`open`; a fallback is a ``RuntimeWarning``.

    :param progress: ``progress(bytes_done, bytes_total)``, called from this thread.
    :returns: bytes read: ``len`` of the buffer in bytes, fewer only at the end of the file.
    :raises FileNotFoundError, PermissionError, ...: (:class:`pagewise.Error`) the file cannot
        be opened or read.
    """
    _check_read_args(offset, depth)
    addr, n, keep = _writable(buffer)
    got, misaligned, notice = _pagewise.read_file_into(
        os.fsencode(path), cache, addr, n, min(offset, _U64_MAX), depth, progress
    )
    del keep
    if notice is not None:
        warnings.warn(f"pagewise.read_into: {notice}", RuntimeWarning, stacklevel=2)
    if misaligned:
        _warn_misaligned(stacklevel=2)
    return got


def read(
    path: PathArg,
    *,
    cache: str = "direct",
    depth: Optional[int] = None,
    progress: Optional[Any] = None,
) -> bytes:
    """The file's bytes, read as :func:`read_into` reads (``depth`` requests in flight,
    leaving the page cache as it was) into the ``bytes`` object returned: no second copy, so
    the memory it takes is the file's size (and a few MiB of bounce buffers)."""
    if depth is not None and not 1 <= depth <= 256:
        raise ValueError(f"depth: {depth} is not a number of requests in flight (1 to 256)")
    data, notice = _pagewise.read_file(os.fsencode(path), cache, depth, progress)
    if notice is not None:
        warnings.warn(f"pagewise.read: {notice}", RuntimeWarning, stacklevel=2)
    return data


def read_ranges_into(
    path: PathArg,
    ranges: Sequence[Tuple[int, Any]],
    *,
    depth: Optional[int] = None,
    cache: str = "direct",
    progress: Optional[Any] = None,
) -> List[int]:
    """Reads many ranges of one file, each into its own buffer (a scatter read): ``ranges``
    is ``[(offset, buffer), ...]``, ``depth`` requests in flight over all of them (default
    32), leaving the page cache as it was. Returns the bytes read into each buffer (fewer only
    at the end of the file).

    With O_DIRECT in force, ranges whose offset and length are multiples of 4096 and whose
    buffers start on a page (:func:`empty`) are cut into 1 MiB requests read in parallel
    straight into the buffers — the way to read many tensors, records or blocks of a file
    each into memory of its own at the speed of one large read::

        bufs = [pagewise.empty(n) for n in lengths]          # page-rounded lengths
        got = pagewise.read_ranges_into(path, list(zip(offsets, bufs)))

    Other ranges are read one after the other as :func:`read_into` reads them.

    :raises ValueError: two buffers share memory, a negative offset, a bad ``depth``.
    """
    _check_read_args(0, depth)
    triples, keep = _range_memory(ranges)
    got, notice = _pagewise.read_ranges_into(os.fsencode(path), cache, triples, depth, progress)
    del keep
    if notice is not None:
        warnings.warn(f"pagewise.read_ranges_into: {notice}", RuntimeWarning, stacklevel=2)
    return list(got)


def _range_memory(ranges: Sequence[Tuple[int, Any]]) -> Tuple[List[Tuple[int, int, int]], List[Any]]:
    """(offset, address, length) of each range's buffer, and what keeps them alive."""
    triples, keep = [], []
    for offset, buf in ranges:
        if offset < 0:
            raise ValueError(f"offset: {offset} is negative")
        addr, n, k = _writable(buf)
        triples.append((min(offset, _U64_MAX), addr, n))
        keep.append(k)
    return triples, keep


def prefetch(
    paths: Iterable[PathArg],
    *,
    ahead: int = 256,
    depth: int = 32,
    cache: str = "direct",
) -> Iterator[Tuple[Any, bytes]]:
    """``(path, bytes)`` for every file of ``paths``, in their order, read ahead of you: up to
    ``ahead`` files past the one you take next are read by ``depth`` threads at once, each
    batch in the order of the files' data on the disk (FIEMAP), and nothing is left in the page
    cache (O_DIRECT; where a file system refuses it, buffered reads that drop what they
    brought in) — one epoch of a data set at the device's speed, the cache left to the model::

        for path, data in pagewise.prefetch(shuffled_paths, ahead=256):
            batch.append(decode(data))

    Memory is bounded by the ``ahead`` files read and not yet taken. A file that cannot be read
    raises its :class:`pagewise.Error` when its turn comes (the ones before it are yielded
    first). Leaving the loop early stops the threads (after the reads in flight).

    :raises ValueError: ``ahead`` not 1 to 4096, ``depth`` not 1 to 256, an unknown ``cache``.
    """
    items = list(paths)
    it = _pagewise.Prefetch([os.fsencode(p) for p in items], cache, ahead, depth)
    return _prefetching(items, it)


def _prefetching(items: List[Any], it: Any) -> Iterator[Tuple[Any, bytes]]:
    try:
        for p in items:
            data = it.next()
            if data is None:
                return
            yield p, data
    finally:
        it.close()


def _writable(b: Any) -> Tuple[int, int, Any]:
    """(address, length, keep-alive) of a writable, contiguous buffer, without a copy: the
    buffer protocol, else numpy's ``__array_interface__`` (objects that only describe their
    memory that way)."""
    try:
        mv = memoryview(b)
    except TypeError:
        iface = getattr(b, "__array_interface__", None)
        if not isinstance(iface, dict):
            raise
        return _from_array_interface(b, iface)
    if mv.readonly:
        raise TypeError(f"readinto() needs a writable buffer, not {type(b).__name__}")
    if not mv.c_contiguous:
        raise BufferError("readinto() needs a contiguous buffer")
    n = mv.nbytes
    if n == 0:
        return 0, 0, None
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    holder = (ctypes.c_char * n).from_buffer(mv)
    return ctypes.addressof(holder), n, holder


def _from_array_interface(b: Any, iface: Dict[str, Any]) -> Tuple[int, int, Any]:
    """``_writable`` of an object with ``__array_interface__`` (version 3): its memory stays
    alive with the object, kept for the call."""
    data = iface.get("data")
    if not isinstance(data, tuple) or len(data) != 2 or not isinstance(data[0], int):
        raise TypeError(f"{type(b).__name__}: __array_interface__ without a data address")
    address, readonly = data
    if readonly:
        raise TypeError(f"readinto() needs a writable buffer, not a read-only {type(b).__name__}")
    itemsize = int(str(iface.get("typestr", "|u1"))[2:] or 1)
    shape = tuple(iface.get("shape", ()))
    count = 1
    for d in shape:
        count *= int(d)
    strides = iface.get("strides")
    if strides is not None:
        # C order has strides None, or the strides C order would have.
        expect, step = [], itemsize
        for d in reversed(shape):
            expect.append(step)
            step *= int(d)
        if tuple(reversed(expect)) != tuple(strides) and count > 1:
            raise BufferError("readinto() needs a contiguous buffer")
    n = count * itemsize
    return (address, n, b) if n else (0, 0, None)


class DirectIO(io.RawIOBase):
    """A file opened by :func:`pagewise.open`: unbuffered, binary, seekable; reads and writes
    leave the page cache as it was. Use it as any raw file: ``readinto``, ``read``,
    ``write``, ``seek``, ``tell``, ``truncate``, ``with``, ``io.BufferedReader(f)``,
    ``shutil.copyfileobj``.

    Writes may be staged in the library (up to 4 MiB, to make whole aligned blocks) until
    the next write elsewhere, :meth:`sync` or :meth:`close`; reads through this object see
    them. :meth:`sync` also flushes to stable storage (fdatasync)."""

    def __init__(self, path: PathArg, mode: str = "rb", cache: str = "direct") -> None:
        super().__init__()
        if not isinstance(mode, str):
            raise TypeError("mode must be a str such as 'rb' or 'wb'")
        if "b" not in mode:
            raise ValueError(
                f"mode {mode!r}: pagewise.open is binary only (text modes are refused): "
                f"use {mode.replace('t', '') + 'b'!r}"
            )
        self.name = path
        self.mode = mode
        self._f = _pagewise.DirectFile(os.fsencode(path), mode, cache)
        self._readable = "r" in mode or "+" in mode
        self._writable = any(c in mode for c in "wax+")
        self._append = "a" in mode
        self._pos = self._f.len() if self._append else 0
        self._checked = False
        self._check_notice(stacklevel=4)

    # -- what the library says -------------------------------------------------------

    def _check_notice(self, stacklevel: int = 3) -> None:
        """Warns once when the library fell back from the policy asked for (at open, or on
        the first request)."""
        notice = self._f.notice
        if notice is not None and not self._checked:
            self._checked = True
            warnings.warn(f"pagewise.open: {notice}", RuntimeWarning, stacklevel=stacklevel)

    @property
    def policy(self) -> str:
        """The cache policy in force: ``"direct"``, ``"dontcache"`` or ``"drop-behind"``."""
        return self._f.policy

    @property
    def notice(self) -> Optional[str]:
        """Why the policy asked for is not the one in force (None when it is)."""
        return self._f.notice

    @property
    def alignment(self) -> Alignment:
        """What zero-copy requests must be aligned to (see :class:`Alignment`)."""
        return Alignment(*self._f.alignment)

    # -- io.RawIOBase --------------------------------------------------------------------

    def readable(self) -> bool:
        self._check_closed()
        return self._readable

    def writable(self) -> bool:
        self._check_closed()
        return self._writable

    def seekable(self) -> bool:
        self._check_closed()
        return True

    def fileno(self) -> int:
        """The descriptor (O_DIRECT set while the policy is ``direct``)."""
        return self._f.fileno()

    def isatty(self) -> bool:
        self._check_closed()
        return False

    def readinto(self, b: Any) -> int:
        """Reads up to ``len(b)`` bytes into ``b`` (any writable contiguous buffer) at the
        position; returns the count, 0 at the end of the file."""
        self._check_closed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        got = self._read_at(b, self._pos, None, None)
        self._pos += got
        return got

    def _read_at(self, b: Any, offset: int, depth: Optional[int], progress: Optional[Any]) -> int:
        addr, n, keep = _writable(b)
        got, misaligned = self._f.read_into(addr, n, min(offset, _U64_MAX), depth, progress)
        del keep
        if not self._checked:
            self._check_notice(stacklevel=4)
        if misaligned:
            _warn_misaligned(stacklevel=3)
        return got

    def read_into(
        self,
        buffer: Any,
        offset: int = 0,
        *,
        depth: Optional[int] = None,
        progress: Optional[Any] = None,
    ) -> int:
        """Fills ``buffer`` with the file's bytes from ``offset`` as :func:`pagewise.read_into`
        does (``depth`` requests in flight); the position does not move. Returns bytes read
        (fewer only at the end of the file). Safe to call from several threads at once."""
        self._check_closed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        _check_read_args(offset, depth)
        return self._read_at(buffer, offset, depth, progress)

    def read_ranges_into(
        self,
        ranges: Sequence[Tuple[int, Any]],
        *,
        depth: Optional[int] = None,
        progress: Optional[Any] = None,
    ) -> List[int]:
        """Reads each ``(offset, buffer)`` range as :func:`pagewise.read_ranges_into` does, on
        this open file; the position does not move. Returns the bytes read into each."""
        self._check_closed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        _check_read_args(0, depth)
        triples, keep = _range_memory(ranges)
        got = self._f.read_ranges_into(triples, depth, progress)
        del keep
        if not self._checked:
            self._check_notice(stacklevel=3)
        return list(got)

    def readinto_at(self, buffer: Any, offset: int) -> int:
        """Positional ``readinto``: up to ``len(buffer)`` bytes at ``offset`` (as pread(2));
        the position does not move, and threads may share the file."""
        return self.read_into(buffer, offset)

    def pread(self, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer only at the end of the file), as
        pread(2); the position does not move."""
        self._check_closed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        if size < 0:
            raise ValueError(f"size: {size} is negative")
        _check_read_args(offset, None)
        return self._f.read_bytes(min(offset, _U64_MAX), size)

    def readall(self) -> bytes:
        """The rest of the file, read into the ``bytes`` returned (one copy: no more memory
        than the rest of the file and a few MiB), many requests in flight."""
        self._check_closed()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        data = self._f.read_bytes(min(self._pos, _U64_MAX))
        self._pos += len(data)
        if not self._checked:
            self._check_notice()
        return data

    def write(self, b: Any) -> int:
        """Writes all of ``b`` (any buffer) at the position (at the end in append mode);
        returns ``len(b)`` in bytes."""
        self._check_closed()
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        if self._append:
            self._pos = self._f.len()
        pos = min(self._pos, _U64_MAX)
        if isinstance(b, bytes):
            n = self._f.write_bytes(b, pos)
        else:
            mv = memoryview(b)
            if mv.readonly or not mv.c_contiguous:
                n = self._f.write_bytes(mv.tobytes(), pos)
            else:
                addr, size, keep = _writable(mv)
                n = self._f.write_from(addr, size, pos)
                del keep
        self._pos += n
        if not self._checked:
            self._check_notice()
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Moves the position as ``io.FileIO.seek`` does: an offset that is not an integer is
        a ``TypeError``, one a file offset (``off_t``) cannot hold an ``OverflowError``, a
        position before 0 or past the largest file offset an ``OSError`` (EINVAL)."""
        self._check_closed()
        offset, whence = operator.index(offset), operator.index(whence)
        if not _OFF_MIN <= offset <= _OFF_MAX:
            raise OverflowError(f"seek offset {offset} does not fit in a file offset (off_t)")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._f.len() + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(errno.EINVAL, "Invalid argument: negative seek position")
        if pos > _OFF_MAX:
            raise OSError(errno.EINVAL, "Invalid argument: seek position past the largest file offset")
        self._pos = pos
        return pos

    def tell(self) -> int:
        self._check_closed()
        return self._pos

    def truncate(self, size: Optional[int] = None) -> int:
        self._check_closed()
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        size = self._pos if size is None else size
        if size < 0:
            raise OSError(errno.EINVAL, f"Invalid argument: negative size {size}", self.name)
        self._f.set_len(min(size, _U64_MAX))
        return size

    def sync(self) -> None:
        """Writes what is staged and flushes the file to stable storage (fdatasync)."""
        self._check_closed()
        self._f.sync()

    def close(self) -> None:
        """Writes what is staged (dropping what the buffered policies wrote) and closes; an
        error here means data written earlier may be missing."""
        if not self.closed:
            try:
                # (No _f when the open failed.)
                f = getattr(self, "_f", None)
                if f is not None:
                    f.close()
            finally:
                super().close()

    def _check_closed(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def __repr__(self) -> str:
        f = getattr(self, "_f", None)
        state = "closed" if self.closed or f is None else f.policy
        return f"<pagewise.DirectIO name={self.name!r} mode={self.mode!r} {state}>"


def open(path: PathArg, mode: str = "rb", cache: str = "direct") -> DirectIO:  # noqa: A001
    """Opens a file for I/O that leaves the page cache as it was.

    :param mode: ``"rb"``, ``"wb"``, ``"ab"``, ``"xb"``, with ``+`` for both (``"r+b"``);
        always binary.
    :param cache: ``"direct"`` (O_DIRECT, the default), ``"dontcache"`` (RWF_DONTCACHE,
        Linux 6.14) or ``"drop-behind"`` (buffered, pages dropped behind). Where the
        filesystem refuses one (tmpfs has no O_DIRECT), the next is used and a
        ``RuntimeWarning`` says why; ``f.policy`` tells the one in force.
    :returns: a :class:`DirectIO` (an ``io.RawIOBase``): wrap it in ``io.BufferedReader``
        for small reads, or read into :func:`aligned_buffer` for zero copy.
    """
    return DirectIO(path, mode, cache)
