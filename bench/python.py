"""The measurements of bench/python (run it through that script, which builds and installs
the wheel): the Python package against the CLI and the usual Python ways, same run, medians.

1. load of a tree: pagewise.load() in this process vs `pagewise load` (a process per run).
2. reading a cold file: pagewise.open(cache="direct").readinto(aligned_buffer) vs fio
   (O_DIRECT, psync, the same block size) vs a hand-written os.O_DIRECT + mmap-buffer loop.
3. copying a file: pagewise.open objects (readinto + write) vs shutil.copyfile: time, and
   what each leaves in the page cache (cached and dirty bytes of source and destination).
4. issue 28: pagewise.read_into(file, pagewise.empty(size)), at the default depth and at
   depth=32, vs fio (O_DIRECT, 1 MiB, iodepth 32, io_uring where fio has it, else libaio) vs
   numpy.fromfile; the file's bytes cached after read_into (pagewise.stat and the CLI's
   `stat --json`); the peak RSS (VmHWM) of a fresh process doing only
   `arr = pagewise.empty(size); pagewise.read_into(file, arr)`, and of one doing only
   `pagewise.read(file)`, against the file's size + 64 MiB.
5. examples/safetensors_load.py (imported): its whole-file and per-tensor read_into loads vs
   safetensors.numpy.load_file, cold; the tensors checked equal to load_file's.

Every run starts cold: the data is evicted with pagewise (never drop_caches) and the kernel's
stat must show 0 cached bytes before the clock starts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import mmap
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pagewise

MIB = 1 << 20


def cached(path: str) -> int:
    return pagewise.stat(path).cached_bytes


def make_cold(*paths: str) -> None:
    for p in paths:
        if not os.path.exists(p):
            continue
        pagewise.evict(p)
        c = cached(p)
        if c:
            sys.exit(f"bench/python: {p}: {c} bytes still cached after evict")


def gen_tree(tree: str, nfiles: int) -> None:
    """nfiles files of 4-16 KiB in 1000 directories (bench/cache-verbs' layout)."""
    if os.path.exists(tree + ".done"):
        return
    print(f"generating {nfiles} files in {tree}", file=sys.stderr)
    shutil.rmtree(tree, ignore_errors=True)
    rng = random.Random(42)
    buf = os.urandom(64 << 20)
    ndirs = 1000 if nfiles >= 1000 else max(1, nfiles // 10)
    per = -(-nfiles // ndirs)
    n = 0
    for d in range(ndirs):
        dpath = os.path.join(tree, "d%04d" % d)
        os.makedirs(dpath, exist_ok=True)
        for f in range(per):
            if n == nfiles:
                break
            size = rng.randint(4096, 16384)
            off = rng.randrange(0, len(buf) - size)
            with open(os.path.join(dpath, "f%05d" % f), "wb") as fh:
                fh.write(buf[off : off + size])
            n += 1
    os.sync()
    open(tree + ".done", "w").close()


def gen_file(path: str, size: int) -> None:
    if os.path.exists(path + ".done"):
        return
    print(f"writing {path} ({size >> 20} MiB)", file=sys.stderr)
    block = os.urandom(64 * MIB)
    with open(path + ".tmp", "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)
    open(path + ".done", "w").close()


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def runs(n: int, prepare: Callable[[], None], fn: Callable[[], Any]) -> List[float]:
    """One untimed warm-up, then n timed runs, each after `prepare`."""
    prepare()
    fn()
    out = []
    for _ in range(n):
        prepare()
        out.append(timed(fn))
    return out


def read_pagewise(path: str, bs: int) -> int:
    buf = pagewise.aligned_buffer(bs)
    total = 0
    with pagewise.open(path, "rb", cache="direct") as f:
        assert f.policy == "direct", f.notice
        while n := f.readinto(buf):
            total += n
    return total


def read_handwritten(path: str, bs: int) -> int:
    buf = mmap.mmap(-1, bs)  # page-aligned
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    total = 0
    try:
        while n := os.preadv(fd, [buf], total):
            total += n
    finally:
        os.close(fd)
        buf.close()
    return total


def read_fio(fio: str, path: str, bs: int, size: int) -> float:
    """fio's own bandwidth figure, bytes/s."""
    out = subprocess.run(
        [fio, "--name=read", f"--filename={path}", "--rw=read", f"--bs={bs}", "--direct=1",
         "--ioengine=psync", "--iodepth=1", f"--size={size}", "--output-format=json"],
        check=True, stdout=subprocess.PIPE,
    ).stdout
    job = json.loads(out)["jobs"][0]["read"]
    return float(job["bw_bytes"])


def fio_engine(fio: str) -> str:
    """io_uring when this fio has it (``fio --enghelp`` lists the engines), else libaio."""
    out = subprocess.run([fio, "--enghelp"], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    return "io_uring" if "io_uring" in out.split() else "libaio"


def read_fio_qd(fio: str, engine: str, path: str, size: int, extra: Tuple[str, ...] = ()) -> float:
    """fio's bandwidth (bytes/s), O_DIRECT 1 MiB requests, 32 in flight."""
    out = subprocess.run(
        [fio, "--name=read", f"--filename={path}", "--rw=read", "--bs=1M", "--direct=1",
         f"--ioengine={engine}", "--iodepth=32", f"--size={size}", "--output-format=json",
         *extra],
        check=True, stdout=subprocess.PIPE,
    ).stdout
    job = json.loads(out)["jobs"][0]
    if job.get("error"):
        raise RuntimeError(f"fio {engine}: error {job['error']}")
    if job["read"]["io_bytes"] != size:
        raise RuntimeError(f"fio {engine}: read {job['read']['io_bytes']} of {size} bytes")
    return float(job["read"]["bw_bytes"])


def read_into_fresh(path: str, size: int, depth: Optional[int]) -> int:
    """What a loader does: a new page-aligned array, filled by one read_into."""
    arr = pagewise.empty(size)
    return pagewise.read_into(path, arr, depth=depth)


def fromfile(path: str, size: int) -> int:
    import numpy

    n = numpy.fromfile(path, dtype=numpy.uint8).size
    if n != size:
        raise RuntimeError(f"numpy.fromfile {path}: {n} of {size} bytes")
    return n


# A fresh interpreter that does only the read, and prints its peak RSS (VmHWM) before and
# after (before: the interpreter with pagewise and numpy imported).
RSS_CHILD = """
import json, sys
import numpy, pagewise
def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")
path, size, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
base = hwm()
if what == "read_into":
    arr = pagewise.empty(size)
    n = pagewise.read_into(path, arr)
else:
    data = pagewise.read(path)
    n = len(data)
if n != size:
    sys.exit(f"{what} {path}: {n} of {size} bytes")
print(json.dumps({"base": base, "peak": hwm()}))
"""


def peak_rss(path: str, size: int, what: str) -> Dict[str, int]:
    make_cold(path)
    out = subprocess.run([sys.executable, "-c", RSS_CHILD, path, str(size), what],
                         check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)


def cli_cached(pw: str, path: str) -> int:
    out = subprocess.run([pw, "stat", "--json", path], check=True, stdout=subprocess.PIPE).stdout
    return int(json.loads(out)["total"]["cached_bytes"])


def load_example() -> Any:
    """examples/safetensors_load.py as a module (it exits when safetensors is missing)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                        "safetensors_load.py")
    spec = importlib.util.spec_from_file_location("safetensors_load", path)
    assert spec and spec.loader, path
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def copy_pagewise(src: str, dst: str, bs: int) -> None:
    buf = pagewise.aligned_buffer(bs)
    with pagewise.open(src, "rb") as s, pagewise.open(dst, "wb") as d:
        while n := s.readinto(buf):
            d.write(buf[:n])


def residue(*paths: str) -> Dict[str, Any]:
    out = {}
    for p in paths:
        r = pagewise.stat(p)
        out[os.path.basename(p)] = {"cached": r.cached_bytes, "dirty": r.dirty_bytes or 0}
    return out


def mbs(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6 if seconds else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--size-mb", type=int, default=4096)
    ap.add_argument("--bs-mb", type=int, default=8)
    ap.add_argument("--st-mb", type=int, default=1024, help="size of the safetensors file")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pw", required=True, help="the pagewise CLI")
    ap.add_argument("--fio", default=shutil.which("fio"))
    ap.add_argument("--json", required=True)
    a = ap.parse_args()

    size, bs = a.size_mb * MIB, a.bs_mb * MIB
    tree = os.path.join(a.dir, f"tree-{a.files}")
    big = os.path.join(a.dir, f"py-big-{a.size_mb}m.bin")
    dst = os.path.join(a.dir, "py-copy.bin")
    gen_tree(tree, a.files)
    gen_file(big, size)
    res: Dict[str, Any] = {"files": a.files, "size": size, "bs": bs, "runs": a.runs}

    print("load of the tree", file=sys.stderr)
    py = runs(a.runs, lambda: make_cold(tree), lambda: pagewise.load(tree))
    cli = runs(a.runs, lambda: make_cold(tree),
               lambda: subprocess.run([a.pw, "load", tree], check=True, stdout=subprocess.PIPE))
    res["load"] = {"python_s": py, "cli_s": cli}

    print("cold read of the file, O_DIRECT", file=sys.stderr)
    got: List[int] = []
    pw = runs(a.runs, lambda: make_cold(big), lambda: got.append(read_pagewise(big, bs)))
    assert set(got) == {size}, got
    hand = runs(a.runs, lambda: make_cold(big), lambda: read_handwritten(big, bs))
    fio_bw: Optional[List[float]] = None
    if a.fio:
        fio_bw = []
        for _ in range(a.runs):
            make_cold(big)
            fio_bw.append(read_fio(a.fio, big, bs, size))
    res["read"] = {"pagewise_s": pw, "handwritten_s": hand, "fio_bytes_per_s": fio_bw,
                   "cached_after": cached(big)}

    print("copy of the file", file=sys.stderr)

    def fresh() -> None:
        if os.path.exists(dst):
            os.unlink(dst)
        make_cold(big)

    pw_copy = runs(a.runs, fresh, lambda: copy_pagewise(big, dst, bs))
    pw_res = residue(big, dst)
    assert os.path.getsize(dst) == size
    sh_copy = runs(a.runs, fresh, lambda: shutil.copyfile(big, dst))
    sh_res = residue(big, dst)
    os.unlink(dst)
    make_cold(big)
    res["copy"] = {"pagewise_s": pw_copy, "pagewise_residue": pw_res,
                   "shutil_s": sh_copy, "shutil_residue": sh_res}

    print("read_into of the file into pagewise.empty, cold", file=sys.stderr)
    got = []
    ri = {}
    ri_cached = {}
    for label, depth in (("default", None), ("32", 32)):
        ri[label] = runs(a.runs, lambda: make_cold(big),
                         lambda: got.append(read_into_fresh(big, size, depth)))
        ri_cached[label] = cached(big)  # after the last run, before anything evicts it
    assert set(got) == {size}, got
    cli_after = cli_cached(a.pw, big)
    # The same read into an array whose pages are already mapped: read_into without the
    # page faults of a fresh array (what separates it from fio, which reuses its buffers).
    warm = pagewise.empty(size)
    warm.fill(0)
    ri["reused"] = runs(a.runs, lambda: make_cold(big),
                        lambda: pagewise.read_into(big, warm))
    del warm
    ff = runs(a.runs, lambda: make_cold(big), lambda: fromfile(big, size))
    engine = None
    fio_qd: Optional[List[float]] = None
    fio_fixed: Optional[List[float]] = None  # io_uring with registered buffers and file
    if a.fio:
        engine = fio_engine(a.fio)
        fio_qd = []
        for _ in range(a.runs):
            make_cold(big)
            fio_qd.append(read_fio_qd(a.fio, engine, big, size))
        if engine == "io_uring":
            fio_fixed = []
            try:
                for _ in range(a.runs):
                    make_cold(big)
                    fio_fixed.append(read_fio_qd(a.fio, engine, big, size,
                                                 ("--fixedbufs", "--registerfiles")))
            except (subprocess.CalledProcessError, RuntimeError) as e:
                # registered buffers count against RLIMIT_MEMLOCK on kernels before 5.12
                print(f"fio --fixedbufs failed ({e}): that row is left out", file=sys.stderr)
                fio_fixed = None
    rss = {what: [peak_rss(big, size, what) for _ in range(a.runs)]
           for what in ("read_into", "read")}
    make_cold(big)
    res["read_into"] = {"default_depth_s": ri["default"], "depth32_s": ri["32"],
                        "reused_array_s": ri["reused"], "cached_after": ri_cached,
                        "cli_cached_after": cli_after, "numpy_fromfile_s": ff,
                        "fio_engine": engine, "fio_qd32_bytes_per_s": fio_qd,
                        "fio_qd32_fixedbufs_bytes_per_s": fio_fixed,
                        "peak_rss": rss, "rss_bound": size + 64 * MIB}
    md = statistics.median
    fio_mbs = md(fio_qd) / 1e6 if fio_qd else None
    res["read_into"]["summary"] = {
        "mb_per_s": {k: mbs(size, md(v)) for k, v in ri.items()},
        "numpy_fromfile_mb_per_s": mbs(size, md(ff)),
        "fio_mb_per_s": fio_mbs,
        "fio_fixedbufs_mb_per_s": md(fio_fixed) / 1e6 if fio_fixed else None,
        "percent_of_fio": {k: 100 * mbs(size, md(v)) / fio_mbs for k, v in ri.items()}
        if fio_mbs else None,
        "x_numpy_fromfile": {k: md(ff) / md(v) for k, v in ri.items()},
        "peak_rss_max": {k: max(x["peak"] for x in v) for k, v in rss.items()},
    }

    print(f"safetensors example, {a.st_mb} MiB, cold", file=sys.stderr)
    ex = load_example()
    st = os.path.join(a.dir, f"py-model-{a.st_mb}m.safetensors")
    if not os.path.exists(st + ".done"):
        print(f"writing {st}", file=sys.stderr)
        if os.path.lexists(st):
            os.unlink(st)  # this script's own file, half written: make_file makes a new one only
        ex.make_file(st, a.st_mb)
        open(st + ".done", "w").close()
    st_size = os.path.getsize(st)
    last: Dict[str, Any] = {}

    def st_load(name: str, fn: Callable[[str, int], Any]) -> Callable[[], None]:
        def go() -> None:
            last.pop(name, None)  # the previous run's arrays go before this run
            last[name] = fn(st, 16)  # 16: the example's --depth default
        return go

    st_t = {}
    for name, fn in (("whole", ex.load_whole), ("per_tensor", ex.load_per_tensor),
                     ("load_file", ex.load_safetensors)):
        st_t[name] = runs(a.runs, lambda: make_cold(st), st_load(name, fn))
    st_cached = cached(st)  # after load_file: mmap through the page cache
    st_diff = {name: ex.same(last[name], last["load_file"]) for name in ("whole", "per_tensor")}
    ntensors = len(last["load_file"])
    last.clear()
    make_cold(st)
    res["safetensors"] = {"size": st_size, "tensors": ntensors, "whole_s": st_t["whole"],
                          "per_tensor_s": st_t["per_tensor"], "load_file_s": st_t["load_file"],
                          "differ_from_load_file": st_diff, "load_file_cached_after": st_cached,
                          "x_load_file": {k: md(st_t["load_file"]) / md(st_t[k])
                                          for k in ("whole", "per_tensor")}}
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)

    med = statistics.median
    lp, lc = med(py), med(cli)
    rp, rh = med(pw), med(hand)
    print(f"| what | pagewise (Python) | peer | ratio |")
    print(f"|---|---|---|---|")
    print(f"| load of {a.files:,} files, cold | {lp:.3f} s | CLI `pagewise load`: {lc:.3f} s | "
          f"{100 * lc / lp:.0f}% of the CLI's speed |")
    if fio_bw:
        fb = med(fio_bw) / 1e6
        print(f"| read {size >> 20} MiB cold, O_DIRECT, {bs >> 20} MiB requests | "
              f"{mbs(size, rp):.0f} MB/s | fio psync: {fb:.0f} MB/s | {100 * mbs(size, rp) / fb:.0f}% of fio |")
    print(f"| same read | {mbs(size, rp):.0f} MB/s | os.O_DIRECT + mmap buffer: {mbs(size, rh):.0f} MB/s | "
          f"{100 * rh / rp:.0f}% (hand-written time / pagewise time) |")
    cp, cs = med(pw_copy), med(sh_copy)

    def res_txt(r: Dict[str, Any]) -> str:
        s, d = r[os.path.basename(big)], r[os.path.basename(dst)]
        return (f"source {s['cached'] >> 20} MiB cached; destination {d['cached'] >> 20} MiB "
                f"cached, {d['dirty'] >> 20} MiB dirty")

    print(f"| copy {size >> 20} MiB | {cp:.2f} s; {res_txt(pw_res)} | shutil.copyfile: {cs:.2f} s; "
          f"{res_txt(sh_res)} | {100 * cs / cp:.0f}% (shutil time / pagewise time) |")

    bound = size + 64 * MIB
    rd, r32, rr = (mbs(size, med(ri[k])) for k in ("default", "32", "reused"))
    rf = mbs(size, med(ff))
    fq = med(fio_qd) / 1e6 if fio_qd else 0.0
    what = f"read_into {size >> 20} MiB cold into pagewise.empty"
    for label, v in ((f"{what}, default depth (16)", rd), (f"{what}, depth=32", r32),
                     ("read_into, same, into an array already faulted in (reused)", rr)):
        if fio_qd:
            print(f"| {label} | {v:.0f} MB/s | fio O_DIRECT 1 MiB QD32 {engine}: {fq:.0f} MB/s | "
                  f"{100 * v / fq:.0f}% of fio (wants >= 95%) |")
        else:
            print(f"| {label} | {v:.0f} MB/s | fio not installed | - |")
    if fio_fixed:
        ff_mbs = med(fio_fixed) / 1e6
        print(f"| {what}, default depth | {rd:.0f} MB/s | fio as above + --fixedbufs "
              f"--registerfiles: {ff_mbs:.0f} MB/s | {100 * rd / ff_mbs:.0f}% of fio |")
    print(f"| {what}, default depth | {rd:.0f} MB/s | numpy.fromfile cold: {rf:.0f} MB/s | "
          f"{rd / rf:.2f}x numpy.fromfile (wants >= 1.5x) |")
    print(f"| bytes of the file cached after read_into | default depth: {ri_cached['default']:,}; "
          f"depth=32: {ri_cached['32']:,} | CLI `stat --json`: {cli_after:,} | wants 0 |")

    def rss_txt(r: List[Dict[str, int]]) -> str:
        p = max(x["peak"] for x in r)
        b = max(x["base"] for x in r)
        return f"{p / MIB:.0f} MiB (interpreter + numpy before the read: {b / MIB:.0f} MiB)"

    def rss_ok(r: List[Dict[str, int]]) -> str:
        p = max(x["peak"] for x in r)
        return (f"within the bound ({(bound - p) / MIB:.0f} MiB to spare)" if p <= bound
                else f"OVER the bound by {(p - bound) / MIB:.0f} MiB")

    for label, key in (("`arr = pagewise.empty(n); pagewise.read_into(f, arr)`", "read_into"),
                       ("`data = pagewise.read(f)`", "read")):
        print(f"| peak RSS (VmHWM), fresh process doing only {label} | {rss_txt(rss[key])} | "
              f"bound: file size + 64 MiB = {bound / MIB:.0f} MiB | {rss_ok(rss[key])} |")
    sl = med(st_t["load_file"])
    for name, label in (("whole", "whole file, one read_into"), ("per_tensor", "one read_into per tensor")):
        t = med(st_t[name])
        eq = ("tensors equal load_file's" if not st_diff[name]
              else f"TENSORS DIFFER: {', '.join(st_diff[name])}")
        print(f"| safetensors {st_size / MIB:.0f} MiB ({ntensors} tensors), cold load, example's "
              f"{label} | {t:.3f} s ({mbs(st_size, t):.0f} MB/s) | safetensors.numpy.load_file: "
              f"{sl:.3f} s ({mbs(st_size, sl):.0f} MB/s) | {sl / t:.2f}x load_file's speed; {eq} |")
    print(f"\nmedians of {a.runs} runs each, cold cache before every run (pagewise evict, checked).")
    print(f"Peak RSS: the largest of {a.runs} fresh processes. After load_file, "
          f"{st_cached >> 20} MiB of the safetensors file was cached.")
    if not fio_bw:
        print("fio not installed (bench/setup installs it): the fio rows are missing.")


if __name__ == "__main__":
    main()
