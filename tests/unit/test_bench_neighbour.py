"""The benchmark's neighbour (build/deltanode_bench/neighbour.py) never outlives the benchmark
that started it: a real process, killed before it could stop its spinner."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import sys
sys.path.insert(0, sys.argv[1])
from deltanode_bench.neighbour import Neighbour
n = Neighbour(0.1).start()
print(n._proc.pid, flush=True)
sys.stdin.read()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_spinner_leaves_when_its_benchmark_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(ROOT / "build")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    spinner = int(parent.stdout.readline())
    try:
        assert _alive(spinner)
        os.kill(parent.pid, signal.SIGKILL)   # no stop(): the benchmark died
        parent.wait()
        deadline = time.monotonic() + 5
        while _alive(spinner) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(spinner), "the neighbour outlived the benchmark that started it"
    finally:
        if _alive(spinner):
            os.kill(spinner, signal.SIGKILL)
