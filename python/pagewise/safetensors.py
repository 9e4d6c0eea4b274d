"""safetensors checkpoints read at device speed, leaving nothing in the page cache.

A drop-in for the ``safetensors`` package's loading side::

    from pagewise.safetensors import load_file, safe_open
    tensors = load_file("model.safetensors")                   # numpy arrays
    tensors = load_file("model.safetensors.index.json")        # a sharded checkpoint
    with safe_open("model.safetensors", framework="numpy") as f:
        for name in f.keys():
            t = f.get_tensor(name)
        part = f.get_slice("embed.weight")[100:200]

Reads go through :func:`pagewise.read_into` (O_DIRECT, many requests in flight, no page-cache
residue). By default every tensor gets its own array (freeing a tensor frees its memory): the
array starts at the same offset within a page as the tensor does in the file, so the device
writes straight into it. ``zero_copy=True`` reads the whole file into one buffer and gives
views of it instead (fastest; keeping one tensor keeps the whole buffer).

Every dtype of the format: the numpy ones natively; BF16 and the F8 types through
``ml_dtypes`` when it is installed (torch when ``framework="torch"``), else a ``TypeError``
naming the dtype — never bytes reinterpreted as something else. The header is checked against
the file before anything is read: a JSON object of at most 100 MiB (what the ``safetensors``
package accepts), each tensor's dtype known, its shape non-negative integers, its offsets
within the data and exactly its size, no two tensors overlapping.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _io, _pagewise

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: The largest header the ``safetensors`` package reads (100 MiB).
MAX_HEADER = 100 << 20

#: safetensors dtype -> (numpy dtype name or None, bytes per element, ml_dtypes name or None).
_DTYPES: Dict[str, Tuple[Optional[str], int, Optional[str]]] = {
    "BOOL": ("?", 1, None),
    "U8": ("u1", 1, None),
    "I8": ("i1", 1, None),
    "U16": ("<u2", 2, None),
    "I16": ("<i2", 2, None),
    "F16": ("<f2", 2, None),
    "U32": ("<u4", 4, None),
    "I32": ("<i4", 4, None),
    "F32": ("<f4", 4, None),
    "U64": ("<u8", 8, None),
    "I64": ("<i8", 8, None),
    "F64": ("<f8", 8, None),
    "BF16": (None, 2, "bfloat16"),
    "F8_E4M3": (None, 1, "float8_e4m3fn"),
    "F8_E5M2": (None, 1, "float8_e5m2"),
    "F8_E8M0": (None, 1, "float8_e8m0fnu"),
}


class HeaderError(ValueError):
    """The file is not a safetensors file this module can trust: the message says what in its
    header does not hold."""


def _numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a safetensors dtype; BF16/F8 through ml_dtypes, else TypeError."""
    np_name, _, ml_name = _DTYPES[name]
    if np_name is not None:
        return np.dtype(np_name)
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        raise TypeError(
            f"dtype {name} has no numpy type: install ml_dtypes (pip install ml-dtypes) or load "
            "with framework='torch'"
        ) from None
    dt = getattr(ml_dtypes, ml_name or "", None)
    if dt is None:
        raise TypeError(f"dtype {name}: this ml_dtypes has no {ml_name}; upgrade it")
    return np.dtype(dt)


class TensorInfo:
    """One tensor's entry of the header, checked: dtype, shape, byte range in the file."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name: str, dtype: str, shape: Tuple[int, ...], begin: int, end: int) -> None:
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.dtype}, {self.shape}, bytes {self.begin}-{self.end})"


def parse_header(head: bytes, file_size: int) -> Tuple[Dict[str, TensorInfo], Dict[str, str], int]:
    """The header of a safetensors file whose first bytes are ``head`` and whose size is
    ``file_size``: 8 bytes little-endian N, then N bytes of JSON. Returns (tensors by name, in
    file order; ``__metadata__``; where the data starts). Raises :class:`HeaderError` for
    anything that does not hold (see the module's doc); never anything else for any input."""
    if len(head) < 8 or file_size < 8:
        raise HeaderError("not a safetensors file: shorter than 8 bytes")
    n = int.from_bytes(head[:8], "little")
    if n > MAX_HEADER or n > file_size - 8:
        raise HeaderError(f"header length {n} does not fit a file of {file_size} bytes (at most {MAX_HEADER})")
    if len(head) < 8 + n:
        raise HeaderError(f"header cut short: {len(head) - 8} of {n} bytes")
    try:
        doc = json.loads(bytes(head[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise HeaderError(f"header is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise HeaderError("header is not a JSON object")
    data_start = 8 + n
    data_len = file_size - data_start
    metadata = doc.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise HeaderError("__metadata__ is not a map of strings")
    tensors: Dict[str, TensorInfo] = {}
    for name, t in doc.items():
        tensors[name] = _entry(name, t, data_len)
    spans = sorted((t.begin, t.end, t.name) for t in tensors.values() if t.end > t.begin)
    for (_, e1, a), (b2, _, b) in zip(spans, spans[1:]):
        if b2 < e1:
            raise HeaderError(f"tensors {a!r} and {b!r} overlap")
    ordered = dict(sorted(tensors.items(), key=lambda kv: (kv[1].begin, kv[0])))
    return ordered, dict(metadata), data_start


def _entry(name: str, t: Any, data_len: int) -> TensorInfo:
    if not isinstance(t, dict):
        raise HeaderError(f"{name!r}: not an object")
    dtype, shape, offsets = t.get("dtype"), t.get("shape"), t.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise HeaderError(f"{name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise HeaderError(f"{name!r}: shape {shape!r} is not a list of non-negative integers")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise HeaderError(f"{name!r}: data_offsets {offsets!r} is not [begin, end]")
    begin, end = offsets
    count = 1
    for d in shape:
        count *= d
    if not 0 <= begin <= end <= data_len or end - begin != count * _DTYPES[dtype][1]:
        raise HeaderError(f"{name!r}: data_offsets {offsets} do not fit {dtype}{shape} in {data_len} bytes of data")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _read_header(fh: Any) -> Tuple[Dict[str, TensorInfo], Dict[str, str], int, int]:
    """The header of the open file ``fh`` (:func:`pagewise.open`), read with two small reads
    (the length, then the JSON), and the file size."""
    size = os.fstat(fh.fileno()).st_size
    n8 = _io.empty(8)
    if size >= 8:
        fh.read_into(n8, 0)
    n = min(int.from_bytes(n8.tobytes(), "little"), max(size - 8, 0), MAX_HEADER)
    head = _io.empty(8 + n)
    if size >= 8:
        fh.read_into(head, 0)
    tensors, metadata, start = parse_header(head.tobytes(), size)
    return tensors, metadata, start, size


def _read_spans(fh: Any, spans: List[Tuple[int, int]], depth: Optional[int]) -> List[np.ndarray]:
    """Bytes ``[begin, end)`` of the open file ``fh`` (:func:`pagewise.open`) for each span,
    each in an array of its own, with one scatter read for all of them
    (:meth:`pagewise.DirectIO.read_ranges_into`): each array covers the whole pages its span
    touches (so every request is aligned and goes from the device straight into it, many in
    flight), and the array returned is the span's part of it."""
    page = _pagewise.page_size()
    ranges: List[Tuple[int, np.ndarray]] = []
    needs: List[int] = []
    out: List[np.ndarray] = []
    for begin, end in spans:
        if end <= begin:
            out.append(np.empty(0, dtype=np.uint8))
            continue
        lo = begin - begin % page
        hi = -(-end // page) * page
        raw = _io.empty(hi - lo)
        ranges.append((lo, raw))
        needs.append(end - lo)
        out.append(raw[begin - lo : end - lo])
    if ranges:
        got = fh.read_ranges_into(ranges, depth=depth)
        for (lo, _), g, need in zip(ranges, got, needs):
            if g < need:
                raise OSError(f"{fh.name!r}: read {g} of {need} bytes at {lo} (the file changed?)")
    return out


def _as(framework: str, arr: np.ndarray, dtype: str, shape: Tuple[int, ...]) -> Any:
    """The tensor as the framework's object: numpy (BF16/F8 via ml_dtypes), or torch."""
    if framework == "numpy":
        return arr.view(_numpy_dtype(dtype)).reshape(shape)
    if framework in ("torch", "pt"):
        try:
            import torch  # type: ignore[import-not-found]
        except ImportError:
            raise ImportError("framework='torch' needs torch installed (numpy needs nothing more)") from None
        tdt = {
            "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
            "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32, "F32": torch.float32,
            "I64": torch.int64, "F64": torch.float64,
            "U16": getattr(torch, "uint16", None), "U32": getattr(torch, "uint32", None),
            "U64": getattr(torch, "uint64", None),
            "F8_E4M3": getattr(torch, "float8_e4m3fn", None),
            "F8_E5M2": getattr(torch, "float8_e5m2", None),
            "F8_E8M0": getattr(torch, "float8_e8m0fnu", None),
        }.get(dtype)
        if tdt is None:
            raise TypeError(f"dtype {dtype}: this torch has no such type")
        return torch.frombuffer(memoryview(arr), dtype=tdt).reshape(shape) if arr.size else torch.empty(shape, dtype=tdt)
    raise ValueError(f"framework: {framework!r} is not 'numpy' or 'torch'")


class SafeSlice:
    """A tensor not read yet: its dtype and shape, and ``[...]`` reads what the index asks
    (the rows it covers, for an index on the first dimension; else the tensor, then sliced)."""

    def __init__(self, f: "safe_open", info: TensorInfo) -> None:
        self._f, self._info = f, info

    def get_dtype(self) -> str:
        return self._info.dtype

    def get_shape(self) -> List[int]:
        return list(self._info.shape)

    def __getitem__(self, index: Any) -> Any:
        info = self._info
        key = index if isinstance(index, tuple) else (index,)
        first = key[0] if key else slice(None)
        if info.shape and isinstance(first, slice) and first.step in (None, 1):
            rows = info.shape[0]
            lo, hi, _ = first.indices(rows)
            hi = max(hi, lo)
            row_bytes = (info.end - info.begin) // rows if rows else 0
            begin = self._f._start + info.begin + lo * row_bytes
            (arr,) = _read_spans(self._f._fh, [(begin, begin + (hi - lo) * row_bytes)], self._f._depth)
            part = _as("numpy", arr, info.dtype, (hi - lo,) + info.shape[1:])
            rest = (slice(None),) + tuple(key[1:])
            out = part[rest]
        else:
            out = self._f.get_tensor(info.name, framework="numpy")[index]
        return out if self._f._framework == "numpy" else _as(self._f._framework, np.ascontiguousarray(out).view(np.uint8), info.dtype, out.shape)


class safe_open:  # noqa: N801 - the safetensors package's name
    """A safetensors file, its header read and checked (as ``safetensors.safe_open``): tensors
    are read when asked for, each into its own array."""

    def __init__(self, filename: PathArg, framework: str = "numpy", device: str = "cpu", *, depth: Optional[int] = None) -> None:
        if device != "cpu":
            raise ValueError(f"device: {device!r}: only 'cpu' (move the tensors yourself)")
        if framework not in ("numpy", "np", "torch", "pt"):
            raise ValueError(f"framework: {framework!r} is not 'numpy' or 'torch'")
        self._path = filename
        self._framework = "numpy" if framework in ("numpy", "np") else "torch"
        self._depth = depth
        # One descriptor for the header and every tensor read (an open per tensor cost a
        # third of the time): what is read is the file whose header was checked.
        self._fh = _io.open(filename, "rb")
        try:
            self._tensors, self._metadata, self._start, self._size = _read_header(self._fh)
        except BaseException:
            self._fh.close()
            raise

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file (tensors already read stay valid)."""
        self._fh.close()

    def keys(self) -> List[str]:
        """Tensor names, in the order of their data in the file."""
        return list(self._tensors)

    def metadata(self) -> Dict[str, str]:
        """The header's ``__metadata__`` (empty when it has none)."""
        return dict(self._metadata)

    def info(self, name: str) -> TensorInfo:
        """The checked header entry of ``name``."""
        return self._tensors[name]

    def get_tensor(self, name: str, *, framework: Optional[str] = None) -> Any:
        """Tensor ``name`` in an array of its own (KeyError for a name the file has not)."""
        return self.get_tensors([name], framework=framework)[name]

    def get_tensors(self, names: List[str], *, framework: Optional[str] = None) -> Dict[str, Any]:
        """Tensors ``names``, each in an array of its own, read together: one scatter read with
        many requests in flight (as fast as reading the file whole)."""
        infos = [self._tensors[n] for n in names]
        spans = [(self._start + t.begin, self._start + t.end) for t in infos]
        arrays = _read_spans(self._fh, spans, self._depth)
        fw = framework or self._framework
        return {t.name: _as(fw, a, t.dtype, t.shape) for t, a in zip(infos, arrays)}

    def get_slice(self, name: str) -> SafeSlice:
        """Tensor ``name``, read when indexed (``f.get_slice(n)[a:b]``)."""
        return SafeSlice(self, self._tensors[name])


def _shards(path: PathArg) -> List[str]:
    """The files of a checkpoint: the shards an ``*.index.json`` names (its ``weight_map``'s
    files, beside it, each once, in order), or the file itself."""
    p = os.fsdecode(path)
    if not p.endswith(".json"):
        return [p]
    with open(p, "rb") as f:
        doc = json.loads(f.read(MAX_HEADER))
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise HeaderError(f"{p}: not a safetensors index (no weight_map of file names)")
    base = os.path.dirname(p)
    out: List[str] = []
    for v in wm.values():
        if os.path.basename(v) != v or v in ("", ".", ".."):
            raise HeaderError(f"{p}: shard {v!r} is not a file name beside the index")
        if v not in out:
            out.append(v)
    return [os.path.join(base, v) for v in out]


def load_file(filename: PathArg, framework: str = "numpy", device: str = "cpu", *, zero_copy: bool = False, depth: Optional[int] = None) -> Dict[str, Any]:
    """All tensors of a checkpoint (a ``.safetensors`` file, or the ``.index.json`` of a sharded
    one), as ``safetensors.numpy.load_file`` / ``safetensors.torch.load_file`` give them, read
    without the page cache. ``zero_copy``: one buffer per file, tensors are views of it."""
    out: Dict[str, Any] = {}
    for shard in _shards(filename):
        if zero_copy:
            out.update(_load_whole(shard, framework, depth))
            continue
        with safe_open(shard, framework, device, depth=depth) as f:
            names = f.keys()
            for name in names:
                if name in out:
                    raise HeaderError(f"{shard}: tensor {name!r} is in two shards")
            out.update(f.get_tensors(names))
    return out


def _load_whole(path: str, framework: str, depth: Optional[int]) -> Dict[str, Any]:
    size = os.stat(path).st_size
    buf = _io.empty(size)
    got = _io.read_into(path, buf, 0, depth=depth)
    if got != size:
        raise OSError(f"{path}: read {got} of {size} bytes (the file changed?)")
    n = int.from_bytes(buf[:8].tobytes(), "little") if size >= 8 else 0
    # Only the header is copied (bytes for the parser), not the first 100 MiB.
    tensors, _, start = parse_header(buf[: min(size, 8 + min(n, MAX_HEADER))].tobytes(), size)
    fw = "numpy" if framework in ("numpy", "np") else framework
    return {n: _as(fw, buf[start + t.begin : start + t.end], t.dtype, t.shape) for n, t in tensors.items()}


def stream(
    paths: Union[PathArg, List[PathArg]],
    *,
    max_in_flight: int = 4,
    framework: str = "numpy",
    depth: Optional[int] = None,
) -> Iterator[Tuple[str, Any]]:
    """(name, tensor) for every tensor of the checkpoints (files, or ``.index.json`` of sharded
    ones), in file order, each in an array of its own, read by a thread ahead of you: at most
    ``max_in_flight`` tensors wait to be taken (and one is being read), so memory is bounded by
    those and the ones you keep — load a checkpoint larger than RAM onto a device tensor by tensor::

        for name, t in stream("model.safetensors.index.json", max_in_flight=8):
            gpu[name] = torch.from_numpy(t).to("cuda")   # and t goes

    Leaving the loop early stops the reads (after the one in flight). An error reading a tensor
    is raised when its turn comes."""
    if max_in_flight < 1:
        raise ValueError("max_in_flight: at least 1")
    items = [paths] if isinstance(paths, (str, bytes, os.PathLike)) else list(paths)
    shards = [shard for p in items for shard in _shards(p)]
    ready: "queue.Queue[Tuple[int, Any]]" = queue.Queue(maxsize=max_in_flight)
    stop = threading.Event()

    def put(kind: int, item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put((kind, item), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for shard in shards:
                with safe_open(shard, framework, depth=depth) as f:
                    for name in f.keys():
                        if stop.is_set() or not put(0, (name, f.get_tensor(name))):
                            return
            put(1, None)
        except BaseException as e:  # handed to the consumer, raised there
            put(2, e)

    worker = threading.Thread(target=produce, name="pagewise-stream", daemon=True)
    worker.start()
    try:
        while True:
            kind, item = ready.get()
            if kind == 1:
                return
            if kind == 2:
                raise item
            yield item
    finally:
        stop.set()
        worker.join()
