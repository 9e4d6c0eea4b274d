"""Ctrl-C and the GIL: a long call releases the GIL, and SIGINT raises KeyboardInterrupt in
the caller within a second, the verb cancelled as the CLI's SIGINT cancels it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pagewise
from conftest import cold, write_file

MIB = 1 << 20

# 4 KiB O_DIRECT reads and writes, one at a time (~16 MB/s here): a copy that takes seconds.
SLOW_COPY = "cache='direct', threads=1, depth=1, chunk=4096"


def start(code: str) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.strip() == "started", line + p.stderr.read()  # type: ignore[union-attr]
    return p


def wait_for_child(pid: int, comm: bytes, seconds: float = 10.0) -> bool:
    """Whether process `pid` has a child named `comm` within `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for c in children:
                try:
                    if Path(f"/proc/{c}/comm").read_bytes().strip() == comm:
                        return True
                except OSError:
                    pass
        time.sleep(0.02)
    return False


def slow_copy_source(scratch: Path, seconds: float) -> Path:
    """A file the slow copy takes about `seconds` over (measured here, at most 1 GiB)."""
    probe = write_file(scratch / "probe", 8 * MIB)
    cold(probe)
    t = time.monotonic()
    pagewise.copy(probe, scratch / "probe.copy", cache="direct", threads=1, depth=1, chunk=4096)
    rate = 8 * MIB / max(time.monotonic() - t, 1e-3)
    os.unlink(probe)
    os.unlink(scratch / "probe.copy")
    size = min(int(rate * seconds) // MIB + 1, 1024) * MIB
    src = write_file(scratch / "src", size)
    cold(src)
    return src


def test_sigint_cancels_a_copy_within_a_second_and_leaves_no_half_file(scratch: Path) -> None:
    src = slow_copy_source(scratch, 4.0)
    dst = scratch / "dst"
    # The signal goes once the copy has reported progress (not after a fixed delay: under
    # load the copy's rate here differs from the probe's, and a copy that ended before the
    # signal proved nothing).
    p = start(
        "import pagewise, time\n"
        "print('started', flush=True)\n"
        "def progress(files, done):\n"
        "    if done and not progress.said:\n"
        "        progress.said = True\n"
        "        print('copying', flush=True)\n"
        "progress.said = False\n"
        "try:\n"
        f"    pagewise.copy({str(src)!r}, {str(dst)!r}, {SLOW_COPY}, progress=progress)\n"
        "    print('finished')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', time.monotonic())\n"
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "copying"
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    word, *when = out.split()
    assert word == "interrupted", out + err
    assert float(when[0]) - sent < 1.0, f"KeyboardInterrupt {float(when[0]) - sent:.2f} s after SIGINT"
    assert not dst.exists() and os.listdir(scratch) == ["src"]


def test_sigint_during_record_reaches_the_command_then_raises(scratch: Path) -> None:
    p = start(
        "import pagewise, signal, time\n"
        "print('started', flush=True)\n"
        "try:\n"
        "    pagewise.record(['sleep', '30'])\n"
        "    print('finished', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    print('python handler back', flush=True)\n"
    )
    # The signal goes once record has started the command (it forwards from then on), not
    # after a fixed delay that load can outlast.
    assert wait_for_child(p.pid, b"sleep"), "record did not start the command within 10 s"
    time.sleep(0.2)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)  # to python alone: forwarded to sleep
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "interrupted"
    assert time.monotonic() - t0 < 2.0
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    assert out.strip() == "python handler back", out + err


def test_long_calls_release_the_gil(scratch: Path) -> None:
    src = slow_copy_source(scratch, 1.0)

    def spin(seconds: float) -> int:
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            n += 1
        return n

    alone = spin(0.3)
    copier = threading.Thread(
        target=lambda: pagewise.copy(src, scratch / "dst", cache="direct", threads=1, depth=1, chunk=4096)
    )
    copier.start()
    time.sleep(0.05)
    beside = spin(0.3)
    assert copier.is_alive(), "the copy ended too soon to tell"
    copier.join()
    assert beside > alone * 0.3, (alone, beside)
