"""The measurements of bench/python (run it through that script, which builds and installs
the wheel): the Python package against the CLI and the usual Python ways, same run, medians.

1. load of a tree: pagewise.load() in this process vs `pagewise load` (a process per run).
2. reading a cold file: pagewise.open(cache="direct").readinto(aligned_buffer) vs fio
   (O_DIRECT, psync, the same block size) vs a hand-written os.O_DIRECT + mmap-buffer loop.
3. copying a file: pagewise.open objects (readinto + write) vs shutil.copyfile: time, and
   what each leaves in the page cache (cached and dirty bytes of source and destination).

Every run starts cold: the data is evicted with pagewise (never drop_caches) and the kernel's
stat must show 0 cached bytes before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

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
    print(f"\nmedians of {a.runs} runs each, cold cache before every run (pagewise evict, checked).")
    if not fio_bw:
        print("fio not installed (bench/setup installs it): the fio row is missing.")


if __name__ == "__main__":
    main()
