"""bench/ml's measurements (run by bench/ml, which makes the virtualenv and the device).

Every measurement is a fresh process (its peak RSS is its own), started right after the data
it reads was evicted and checked cold with the kernel (pagewise.stat: cachestat); rounds are
alternated (the order reversed each round); medians reported, with the ratio against the
reference row of each table. Bytes left in the page cache are measured after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

import pagewise

MIB = 1 << 20

# --- the children: each loads once, timed, and prints {"s": seconds, "rss": peak bytes} --------

CHILD = r"""
import json, sys, time
def hwm():
    # VmHWM: this process's own peak (ru_maxrss would carry the parent's over the fork).
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
what, path = sys.argv[1], sys.argv[2]
{setup}
base = hwm()
t = time.perf_counter()
n = run(path)
s = time.perf_counter() - t
print(json.dumps({{"s": s, "rss": hwm(), "base": base, "n": n}}))
"""

# what -> (imports and a run(path) returning a count of tensors or files)
LOADERS: Dict[str, str] = {
    "safetensors": """
import safetensors.numpy
def run(path):
    return len(safetensors.numpy.load_file(path))
""",
    "safetensors-sharded": """
import json, os, safetensors.numpy
def run(index):
    d = {}
    base = os.path.dirname(index)
    for shard in dict.fromkeys(json.load(open(index))["weight_map"].values()):
        d.update(safetensors.numpy.load_file(os.path.join(base, shard)))
    return len(d)
""",
    "fromfile": """
import json, numpy as np
def run(path):
    buf = np.fromfile(path, dtype=np.uint8)
    n = int.from_bytes(buf[:8].tobytes(), "little")
    head = json.loads(buf[8:8 + n].tobytes())
    head.pop("__metadata__", None)
    dt = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {k: buf[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]].view(dt[v["dtype"]]).reshape(v["shape"])
           for k, v in head.items()}
    return len(out)
""",
    "pagewise": """
from pagewise.safetensors import load_file
def run(path):
    return len(load_file(path))
""",
    "pagewise-zero-copy": """
from pagewise.safetensors import load_file
def run(path):
    return len(load_file(path, zero_copy=True))
""",
    "pagewise-torch": """
import torch  # imported before the clock starts, as the peers import it
from pagewise.safetensors import load_file
def run(path):
    return len(load_file(path, framework="torch"))
""",
    "pagewise-stream": """
from pagewise.safetensors import stream
def run(path):
    n = 0
    for _name, t in stream(path, max_in_flight=4):
        n += 1   # each tensor dropped once used (a device copy in real use)
    return n
""",
    "safetensors-safe_open": """
import json, os
from safetensors import safe_open
def run(index):
    n = 0
    base = os.path.dirname(index)
    for shard in dict.fromkeys(json.load(open(index))["weight_map"].values()):
        with safe_open(os.path.join(base, shard), framework="numpy") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                n += 1
    return n
""",
    "runai": """
from runai_model_streamer import SafetensorsStreamer
def run(path):
    d = {}
    with SafetensorsStreamer() as s:
        s.stream_file(path)
        for name, t in s.get_tensors():
            d[name] = t
    return len(d)
""",
    "fastsafetensors": """
from fastsafetensors import fastsafe_open
def run(path):
    d = {}
    with fastsafe_open(filenames=[path], nogds=True, device="cpu") as f:
        for k in f.keys():
            d[k] = f.get_tensor(k)
    return len(d)
""",
    # The data-set epoch: extra["list"] is a file of paths, in the order to read them.
    "ds-plain": """
def run(lst):
    n = 0
    for p in open(lst).read().split("\\n"):
        with open(p, "rb") as f:
            n += len(f.read())
    return n
""",
    "ds-pool8": """
from concurrent.futures import ThreadPoolExecutor
def one(p):
    with open(p, "rb") as f:
        return len(f.read())
def run(lst):
    with ThreadPoolExecutor(8) as ex:
        return sum(ex.map(one, open(lst).read().split("\\n")))
""",
    "ds-pagewise.read": """
import pagewise
def run(lst):
    return sum(len(pagewise.read(p)) for p in open(lst).read().split("\\n"))
""",
    "ds-prefetch": """
import pagewise
def run(lst):
    return sum(len(d) for _, d in pagewise.prefetch(open(lst).read().split("\\n")))
""",
}

#: Loaders that need packages a user installs by hand (torch from PyPI is a 5 GB CUDA build).
NEEDS = {"runai": "runai_model_streamer", "fastsafetensors": "fastsafetensors", "pagewise-torch": "torch"}


def available(what: str) -> bool:
    mod = NEEDS.get(what)
    if mod is None:
        return True
    r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True)
    return r.returncode == 0


def cached(path: str) -> int:
    return pagewise.stat(path).cached_bytes


def make_cold(path: str) -> None:
    pagewise.evict(path)
    c = cached(path)
    if c:
        sys.exit(f"bench/ml: {path}: {c} bytes still cached after evict")


def child(what: str, path: str, cold_path: str) -> Dict[str, Any]:
    make_cold(cold_path)
    code = CHILD.format(setup=LOADERS[what])
    r = subprocess.run([sys.executable, "-c", code, what, path], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench/ml: {what} {path} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["cached"] = cached(cold_path)
    return out


def measure(names: List[str], path: str, cold_path: str, rounds: int) -> Dict[str, List[Dict[str, Any]]]:
    res: Dict[str, List[Dict[str, Any]]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names if r % 2 == 0 else names[::-1]:
            res[n].append(child(n, path, cold_path))
            print(f"  {n:24s} {res[n][-1]['s']:.3f} s", file=sys.stderr)
    return res


def table(title: str, res: Dict[str, List[Dict[str, Any]]], ref: str, size: int) -> str:
    base = statistics.median(x["s"] for x in res[ref])
    lines = [
        f"### {title}",
        "",
        f"| loader | cold, median | speed vs {ref} | peak RSS | of it, the load's (peak - after imports) | the load's over the data | left in page cache |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, runs in res.items():
        m = statistics.median(x["s"] for x in runs)
        rss = max(x["rss"] for x in runs)
        own = max(x["rss"] - x["base"] for x in runs)
        left = max(x["cached"] for x in runs)
        lines.append(
            f"| {n} | {m:.3f} s | {base / m:.2f}x | {rss / MIB:.0f} MiB | {own / MIB:.0f} MiB "
            f"| {(own - size) / MIB:+.0f} MiB | {left / MIB:.0f} MiB |"
        )
    return "\n".join(lines) + "\n"


# --- the data ------------------------------------------------------------------------------

def gen_checkpoint(d: str, mb: int, shards: int) -> Dict[str, str]:
    """A checkpoint of ~mb MiB (F32 matrices of 1-32 MiB, F16 ones, I64 and small biases, like
    a transformer's), as one file and as `shards` shards with an index; made once."""
    single = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "sharded", "model.safetensors.index.json")
    if os.path.exists(index):
        return {"single": single, "index": index}
    import safetensors.numpy

    os.makedirs(os.path.dirname(index), exist_ok=True)
    rng = np.random.default_rng(11)
    tensors: Dict[str, np.ndarray] = {}
    total, i = 0, 0
    while total < mb * MIB:
        rows = int(rng.integers(256, 4096))
        dt = np.float32 if i % 3 else np.float16
        t = rng.standard_normal((rows, 2048), dtype=np.float32).astype(dt)
        tensors[f"layers.{i}.weight"] = t
        tensors[f"layers.{i}.bias"] = rng.standard_normal(2048, dtype=np.float32)
        total += t.nbytes + 8192
        i += 1
    tensors["position_ids"] = np.arange(4096, dtype=np.int64)
    print(f"generating a {total / MIB:.0f} MiB checkpoint of {len(tensors)} tensors in {d}", file=sys.stderr)
    with open(single, "wb") as f:
        f.write(safetensors.numpy.save(tensors, metadata={"format": "np"}))
    names = list(tensors)
    wm = {}
    for s in range(shards):
        part = names[s::shards]
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        with open(os.path.join(d, "sharded", fn), "wb") as f:
            f.write(safetensors.numpy.save({k: tensors[k] for k in part}))
        wm.update({k: fn for k in part})
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f)
    os.sync()
    return {"single": single, "index": index}


def gen_dataset(d: str, nfiles: int) -> str:
    """nfiles files of 4-64 KiB (odd sizes) in 100 directories, and a shuffled list of them."""
    root = os.path.join(d, "dataset")
    lst = os.path.join(d, "dataset.list")
    if os.path.exists(lst):
        return lst
    print(f"generating {nfiles} files in {root}", file=sys.stderr)
    rnd = random.Random(7)
    paths = []
    for i in range(nfiles):
        sub = os.path.join(root, f"{i % 100:02d}")
        os.makedirs(sub, exist_ok=True)
        p = os.path.join(sub, f"s{i:06d}.bin")
        with open(p, "wb") as f:
            f.write(rnd.randbytes(rnd.randint(4, 64) * 1024 - rnd.randint(0, 1000)))
        paths.append(p)
    rnd.shuffle(paths)
    with open(lst, "w") as f:
        f.write("\n".join(paths))
    os.sync()
    return lst


def check_equal(single: str, index: str) -> str:
    """Every tensor of pagewise's loads equal to the safetensors package's, one at a time."""
    from safetensors import safe_open as ref_open

    from pagewise.safetensors import stream

    n = 0
    with ref_open(single, framework="numpy") as ref:
        for name, t in stream(single):
            assert np.array_equal(t, ref.get_tensor(name)), name
            n += 1
        for name, t in stream(index):
            assert np.array_equal(t, ref.get_tensor(name)), name
    return f"{n} tensors equal to safetensors' (single file and shards)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--st-mb", type=int, default=1536)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", required=True)
    ap.add_argument("--only", default="single,sharded,stream,dataset", help="tables to measure, comma-separated")
    a = ap.parse_args()
    only = set(a.only.split(","))
    ck = gen_checkpoint(a.dir, a.st_mb, a.shards)
    lst = gen_dataset(a.dir, a.files)
    size = os.stat(ck["single"]).st_size
    print(check_equal(ck["single"], ck["index"]) + "\n")
    missing = [n for n in NEEDS if not available(n)]
    if missing:
        print(f"Not installed here, so not measured: {', '.join(missing)} (bench/ml's header says how to add them).\n")
    out: Dict[str, Any] = {}

    single = ["safetensors", "fromfile", "pagewise", "pagewise-zero-copy", "pagewise-torch", "runai", "fastsafetensors"]
    single = [n for n in single if n not in missing]
    if "single" in only:
        res = measure(single, ck["single"], ck["single"], a.runs)
        print(table(f"One {size / MIB:.0f} MiB file into memory (numpy; torch where named)", res, "safetensors", size))
        out["single"] = res
    if "sharded" in only:
        sharded = measure(["safetensors-sharded", "pagewise"], ck["index"], os.path.dirname(ck["index"]), a.runs)
        print(table(f"The same tensors in {a.shards} shards, through the index", sharded, "safetensors-sharded", size))
        out["sharded"] = sharded
    if "stream" in only:
        streamed = measure(["safetensors-safe_open", "pagewise-stream"], ck["index"], os.path.dirname(ck["index"]), a.runs)
        print(table("Tensor by tensor, each dropped once used (memory bounded)", streamed, "safetensors-safe_open", size))
        out["stream"] = streamed
    if "dataset" in only:
        ds_root = os.path.join(a.dir, "dataset")
        ds_bytes = sum(e.stat().st_size for d in os.scandir(ds_root) for e in os.scandir(d.path))
        ds = measure(["ds-plain", "ds-pool8", "ds-pagewise.read", "ds-prefetch"], lst, ds_root, a.runs)
        title = f"A data-set epoch: {a.files} files of 4-64 KiB ({ds_bytes / MIB:.0f} MiB), shuffled"
        print(table(title, ds, "ds-pool8", 0))
        out["dataset"] = ds
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
