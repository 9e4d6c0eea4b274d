"""pagewise.safetensors against the safetensors package: every numpy dtype, single and sharded
files, per-tensor arrays and the zero-copy mode, slices, BF16 (through ml_dtypes or a clear
error), nothing left in the page cache, and a fuzzed header parser."""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import pagewise
from conftest import cached, cold
from pagewise.safetensors import HeaderError, load_file, parse_header, safe_open, stream

# Installed by the suite (tests/python.rs): a missing package fails, never skips.
import safetensors.numpy as safetensors_numpy


def tensors() -> dict:
    rng = np.random.default_rng(7)
    return {
        "embed": rng.standard_normal((513, 129)).astype(np.float32),
        "half": rng.standard_normal(4097).astype(np.float16),
        "double": rng.standard_normal((3, 5, 7)),
        "mask": rng.random((33, 3)) > 0.5,
        "i8": rng.integers(-128, 128, 1001, dtype=np.int8),
        "u8": rng.integers(0, 256, 999, dtype=np.uint8),
        "i16": rng.integers(-(2**15), 2**15, 77, dtype=np.int16),
        "u16": rng.integers(0, 2**16, 77, dtype=np.uint16),
        "i32": rng.integers(-(2**31), 2**31, (9, 9), dtype=np.int32),
        "u32": rng.integers(0, 2**32, 9, dtype=np.uint32),
        "i64": np.arange(-50, 50, dtype=np.int64),
        "u64": rng.integers(0, 2**63, 11, dtype=np.uint64),
        "scalar": np.array(0.5, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.int16),
    }


def write(path: Path, t: dict, metadata: dict | None = None) -> Path:
    path.write_bytes(safetensors_numpy.save(t, metadata=metadata))
    os.sync()
    return path


def same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("zero_copy", [False, True])
def test_every_numpy_dtype_equals_the_safetensors_package_and_nothing_stays_cached(scratch: Path, zero_copy: bool) -> None:
    p = write(scratch / "m.safetensors", tensors(), {"format": "np"})
    ref = safetensors_numpy.load_file(p)
    cold(p)
    got = load_file(p, zero_copy=zero_copy)
    same(got, ref)
    assert cached(p) == 0, "read without the page cache"
    if not zero_copy:
        # Each tensor's memory is its own: the allocation under it is the tensor and at most
        # three pages (the pages its first and last bytes share with its neighbours, and the
        # alignment slack), not the file.
        for k, v in got.items():
            root = v
            while getattr(root, "base", None) is not None:
                root = root.base
            assert root.nbytes <= v.nbytes + 3 * pagewise.page_size(), k


def test_safe_open_keys_metadata_slices(scratch: Path) -> None:
    t = tensors()
    p = write(scratch / "m.safetensors", t, {"format": "np", "who": "test"})
    with safe_open(p, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(t)
        assert f.metadata() == {"format": "np", "who": "test"}
        assert np.array_equal(f.get_tensor("embed"), t["embed"])
        s = f.get_slice("embed")
        assert s.get_shape() == [513, 129] and s.get_dtype() == "F32"
        assert np.array_equal(s[100:200], t["embed"][100:200])
        assert np.array_equal(s[5:9, 3:7], t["embed"][5:9, 3:7])
        assert np.array_equal(s[::2], t["embed"][::2])
        with pytest.raises(KeyError):
            f.get_tensor("nope")


def test_a_sharded_checkpoint_through_its_index(scratch: Path) -> None:
    t = tensors()
    names = sorted(t)
    a, b = names[: len(names) // 2], names[len(names) // 2 :]
    write(scratch / "model-00001-of-00002.safetensors", {k: t[k] for k in a})
    write(scratch / "model-00002-of-00002.safetensors", {k: t[k] for k in b})
    index = scratch / "model.safetensors.index.json"
    wm = {k: "model-00001-of-00002.safetensors" for k in a}
    wm.update({k: "model-00002-of-00002.safetensors" for k in b})
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    same(load_file(index), t)
    assert dict(stream(index)).keys() == t.keys()
    # A shard outside the index's directory is refused, not followed.
    index.write_text(json.dumps({"weight_map": {"x": "../elsewhere.safetensors"}}))
    with pytest.raises(HeaderError, match="beside the index"):
        load_file(index)


def raw_file(path: Path, header: dict, data: bytes) -> Path:
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


def test_bf16_and_f8_through_ml_dtypes_or_a_clear_error(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ml_dtypes  # installed by the suite

    vals = np.array([1.0, -2.5, 2.0**127, 0.0], dtype=np.float32)
    bf16 = (vals.view(np.uint32) >> 16).astype("<u2").tobytes()  # truncation is exact here
    small = np.array([1.0, -2.0, 0.5, 4.0], dtype=np.float32)
    e4 = small.astype(ml_dtypes.float8_e4m3fn)
    e5 = small.astype(ml_dtypes.float8_e5m2)
    header = {
        "w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]},
        "a": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [8, 12]},
        "b": {"dtype": "F8_E5M2", "shape": [4], "data_offsets": [12, 16]},
    }
    p = raw_file(scratch / "b.safetensors", header, bf16 + e4.tobytes() + e5.tobytes())
    got = load_file(p)
    assert got["w"].dtype == ml_dtypes.bfloat16 and np.array_equal(got["w"].astype(np.float32), vals)
    assert got["a"].dtype == ml_dtypes.float8_e4m3fn and np.array_equal(got["a"].astype(np.float32), small.reshape(2, 2))
    assert got["b"].dtype == ml_dtypes.float8_e5m2 and np.array_equal(got["b"].astype(np.float32), small)
    # Without ml_dtypes: a TypeError naming the dtype, never the bytes as something else.
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(TypeError, match="BF16.*ml_dtypes"):
        load_file(p)
    with safe_open(p) as f:
        with pytest.raises(TypeError, match="F8_E5M2"):
            f.get_tensor("b")


def test_stream_reads_ahead_at_most_max_in_flight_and_stops_when_left(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = {f"t{i:03d}": np.full(1000 + i, i, dtype=np.int32) for i in range(40)}
    p = write(scratch / "many.safetensors", t)
    reads = []
    real = safe_open.get_tensor

    def counting(self: safe_open, name: str, **kw: object) -> object:
        reads.append(name)
        return real(self, name, **kw)

    monkeypatch.setattr(safe_open, "get_tensor", counting)
    it = stream(p, max_in_flight=2)
    name, first = next(it)
    assert name == "t000" and np.array_equal(first, t["t000"])
    time.sleep(0.3)
    # Taken 1; waiting at most 2; one more read and blocked on the full queue.
    assert len(reads) <= 4, reads
    it.close()
    assert not [th for th in threading.enumerate() if th.name == "pagewise-stream"]
    got = dict(stream(p, max_in_flight=3))
    same(got, t)


def test_torch_is_optional_and_named_when_missing(scratch: Path) -> None:
    p = write(scratch / "m.safetensors", {"x": np.arange(3, dtype=np.int32)})
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="torch"):
            load_file(p, framework="torch")
        return
    assert load_file(p, framework="torch")["x"].tolist() == [0, 1, 2]
    # torch installed (by hand: never in CI): every dtype torch has, against safetensors.torch.
    import safetensors.torch

    g = torch.Generator().manual_seed(3)
    ref = {
        name: torch.randn(37, 5, generator=g).to(dt)
        for name, dt in {
            "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
            "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
            "u8": torch.uint8, "b": torch.bool,
            "e4m3": getattr(torch, "float8_e4m3fn", torch.float32),
            "e5m2": getattr(torch, "float8_e5m2", torch.float32),
        }.items()
    }
    t = scratch / "t.safetensors"
    safetensors.torch.save_file(ref, str(t))
    os.sync()
    want = {k: v.clone() for k, v in safetensors.torch.load_file(str(t)).items()}  # (its mapping goes)
    cold(t)
    for zero_copy in (False, True):
        got = load_file(t, framework="torch", zero_copy=zero_copy)
        assert got.keys() == want.keys()
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
            assert torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8)), k
    assert cached(t) == 0


def test_bad_headers_are_refused_by_name(scratch: Path) -> None:
    ok = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    cases = {
        "unknown dtype": {"w": {"dtype": "F31", "shape": [2], "data_offsets": [0, 8]}},
        "do not fit": {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
        "non-negative": {"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}},
        "overlap": {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}},
        "map of strings": dict(ok, __metadata__={"a": 1}),
    }
    for why, header in cases.items():
        p = raw_file(scratch / "bad.safetensors", header, bytes(8))
        with pytest.raises(HeaderError, match=why):
            load_file(p)
    with pytest.raises(HeaderError, match="does not fit a file"):
        parse_header(struct.pack("<Q", 1 << 40) + b"{}", 100)
    with pytest.raises(HeaderError, match="not JSON"):
        parse_header(struct.pack("<Q", 2) + b"\xff\xfe", 10)


def test_fuzzed_headers_raise_header_error_or_parse_within_bounds() -> None:
    rng = random.Random(43)
    base = json.dumps(
        {
            "__metadata__": {"a": "b"},
            "x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
            "y": {"dtype": "I64", "shape": [1], "data_offsets": [24, 32]},
        }
    ).encode()
    for _ in range(3000):
        h = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            op = rng.random()
            i = rng.randrange(len(h) + 1)
            if op < 0.4 and h:
                h[min(i, len(h) - 1)] = rng.randrange(256)
            elif op < 0.7:
                h.insert(i, rng.choice(b'{}[],:"0123456789-eE. \\'))
            elif h:
                del h[min(i, len(h) - 1)]
        size = 8 + len(h) + rng.choice([0, 8, 32, 40, 1 << 20])
        try:
            tensors, _, start = parse_header(struct.pack("<Q", len(h)) + bytes(h), size)
        except HeaderError:
            continue
        for t in tensors.values():
            assert 0 <= t.begin <= t.end <= size - start
