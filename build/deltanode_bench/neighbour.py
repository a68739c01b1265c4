"""A neighbour on the node: a process that takes a chosen share of a core (``--burn 0.6``).

A DataNode shares its machine with other processes (a producer, an agent, a second service), and
a node sized to use every core it sees falls behind as soon as one of them wakes. The neighbour
spins for ``share`` of every 20 ms and sleeps the rest, so it takes that share of one core
whatever the load beside it (the scheduler gives a spinning process its slice), and reports the
CPU it really took, read from ``/proc``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

PERIOD_S = 0.02

# The spinner leaves when the benchmark that started it is gone (a benchmark killed before its
# ``stop``): an orphan would go on taking its share of a core from every run after it. The
# benchmark passes its own pid: one killed before the spinner starts is gone already.
_SPIN = """
import os, sys, time
share, period, parent = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
busy = share * period
while os.getppid() == parent:
    start = time.perf_counter()
    while time.perf_counter() - start < busy:
        pass
    rest = period - (time.perf_counter() - start)
    if rest > 0:
        time.sleep(rest)
"""


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Neighbour:
    """Runs in the benchmark's process: ``start`` spawns the spinning process, ``stop`` ends it and
    gives the cores it took in between."""

    def __init__(self, share: float) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"--burn takes a share of one core in (0, 1], not {share}")
        self.share = share
        self._proc: subprocess.Popen | None = None
        self._started = 0.0
        self._cpu0 = 0.0
        self.cores = 0.0

    def start(self) -> Neighbour:
        self._proc = subprocess.Popen([sys.executable, "-c", _SPIN, str(self.share), str(PERIOD_S), str(os.getpid())])
        self._started, self._cpu0 = time.monotonic(), 0.0
        return self

    def stop(self) -> float:
        """The cores the neighbour took since ``start`` (0 when it never ran)."""
        if self._proc is None:
            return 0.0
        try:
            cpu = _cpu_seconds(self._proc.pid)
        except OSError:
            cpu = 0.0
        self._proc.kill()
        self._proc.wait()
        self._proc = None
        self.cores = (cpu - self._cpu0) / max(1e-9, time.monotonic() - self._started)
        return self.cores
