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
import os
import sys
import warnings
from typing import Any, NamedTuple, Optional, Tuple, Union

from . import _pagewise

__all__ = ["DirectIO", "open", "aligned_buffer", "Alignment"]

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

# The largest alignment aligned_buffer takes (1 GiB, a huge page).
_MAX_ALIGN = 1 << 30
# Positions handed to the library are u64; beyond, the library's own check (EINVAL past the
# largest file offset, naming the file and the call) is reached with the largest u64.
_U64_MAX = (1 << 64) - 1


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


def _writable(b: Any) -> Tuple[int, int, Any]:
    """(address, length, keep-alive) of a writable, contiguous buffer, without a copy."""
    mv = memoryview(b)
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
        addr, n, keep = _writable(b)
        got = self._f.read_into(addr, n, min(self._pos, _U64_MAX))
        del keep
        self._pos += got
        if not self._checked:
            self._check_notice()
        return got

    def readall(self) -> bytes:
        """The rest of the file, read in one request."""
        self._check_closed()
        size = self._f.len()
        out = bytearray(max(size - self._pos, 0))
        got = self.readinto(out) if out else 0
        del out[got:]
        return bytes(out)

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
        self._check_closed()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._f.len() + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, "Invalid argument: negative seek position")
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
