"""RSS and CPU of a DataNode process tree, sampled from /proc.

The tree of a local DataNode: the driver's Python process (the root), the JVM it starts
(``java``), and the Python processes the JVM starts (pyspark's worker daemon and its forked
workers). Each sample records the RSS of the driver, of the JVM, the sum and the largest of
the Python workers, and the CPU time (user + system) of every process seen so far, so that a
time window gives peak memory and average busy cores. Processes whose name starts with one of
``exclude_comms`` (a standalone run's embedded etcd and broker) are left out of the tree, with
their subtrees; their CPU is sampled as "services".

The whole machine's busy CPU (``/proc/stat``) and the embedded broker's are sampled too:
on one machine the broker serving the DataNode's fetches shares its cores, so the tree's
figure alone does not say whether a core sat idle.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    t: float
    driver: int          # bytes
    jvm: int
    workers: int         # sum over Python worker processes
    worker_max: int
    n_workers: int
    cpu: float           # seconds of CPU used by the whole tree since sampling began
    cpu_driver: float
    cpu_jvm: float
    cpu_workers: float
    cpu_broker: float = 0.0
    cpu_machine: float = 0.0   # busy CPU seconds of all cores (since boot)
    cpu_services: float = 0.0  # the excluded processes


@dataclass
class WindowStats:
    seconds: float
    driver_peak: int
    jvm_peak: int
    workers_peak: int
    worker_max_peak: int
    workers_max_count: int
    cores: float          # average busy cores of the tree
    cores_driver: float
    cores_jvm: float
    cores_workers: float
    cores_broker: float = 0.0
    cores_machine: float = 0.0   # all processes, all cores
    cores_services: float = 0.0
    total_rss_peak: int = 0      # the tree's RSS summed in one sample, at its peak

    @property
    def total_peak(self) -> int:
        """Driver + JVM + Python workers, each at its own peak."""
        return self.driver_peak + self.jvm_peak + self.workers_peak


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(comm, ppid, cpu seconds) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    lp, rp = data.index("("), data.rindex(")")
    comm = data[lp + 1:rp]
    rest = data[rp + 2:].split()
    return comm, int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK


def _machine_busy() -> float:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: everything but idle and iowait)."""
    with open("/proc/stat", "rb") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _runs_main(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"app/main.py" in f.read()
    except OSError:
        return False


# The main classes of the embedded services that run in a JVM: a "java" process like Spark's own.
SERVICE_MAINS = (b"kafka.Kafka", b"DeltaNodePulsarStandalone")


def _runs_service(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return any(main in argv for main in SERVICE_MAINS)


def classify(root: int, procs: dict[int, tuple[str, int]], exclude_comms: tuple[str, ...] = (),
             is_driver=_runs_main, is_service=_runs_service) -> dict[int, str]:
    """Map each descendant of ``root`` (and root) to "driver", "jvm", "worker" or "excluded".

    ``procs`` maps pid -> (comm, ppid). Anything under the JVM is a worker, except the Python
    driver that spark-submit starts under it (``app/main.py``: ``is_driver``); other
    descendants of the root that are not Java are counted as workers too; a process whose
    name starts with one of ``exclude_comms``, a Java process running an embedded service
    (``is_service``: the embedded Apache Kafka), and their subtrees, are "excluded".
    """
    children: dict[int, list[int]] = {}
    for pid, (_, ppid) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out = {root: "driver"}
    jvms: set[int] = set()
    stack = [(c, False, False) for c in children.get(root, [])]
    while stack:
        pid, under_jvm, excluded = stack.pop()
        comm = procs[pid][0]
        excluded = excluded or comm.startswith(exclude_comms) or (comm == "java" and is_service(pid))
        kind = ("excluded" if excluded else "jvm" if comm == "java" and not under_jvm
                else "driver" if procs[pid][1] in jvms and is_driver(pid) else "worker")
        if kind == "jvm":
            jvms.add(pid)
        out[pid] = kind
        stack.extend((c, under_jvm or kind == "jvm", excluded) for c in children.get(pid, []))
    return out


def window(samples: list[Sample], t0: float, t1: float) -> WindowStats | None:
    """Peaks and busy cores over the samples taken in ``[t0, t1]``."""
    inside = [s for s in samples if t0 <= s.t <= t1]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    span = b.t - a.t

    def cores(x: float, y: float) -> float:
        return (y - x) / span if span > 0 else 0.0

    return WindowStats(
        seconds=span,
        driver_peak=max(s.driver for s in inside), jvm_peak=max(s.jvm for s in inside),
        workers_peak=max(s.workers for s in inside), worker_max_peak=max(s.worker_max for s in inside),
        workers_max_count=max(s.n_workers for s in inside),
        cores=cores(a.cpu, b.cpu), cores_driver=cores(a.cpu_driver, b.cpu_driver),
        cores_jvm=cores(a.cpu_jvm, b.cpu_jvm), cores_workers=cores(a.cpu_workers, b.cpu_workers),
        cores_broker=cores(a.cpu_broker, b.cpu_broker), cores_machine=cores(a.cpu_machine, b.cpu_machine),
        cores_services=cores(a.cpu_services, b.cpu_services),
        total_rss_peak=max(s.driver + s.jvm + s.workers for s in inside),
    )


class TreeSampler:
    """Samples the tree under ``root`` (and the ``broker_pid`` process and the machine's CPU) every
    ``interval`` seconds in a thread."""

    def __init__(self, root: int, interval: float = 0.2, broker_pid: int | None = None,
                 exclude_comms: tuple[str, ...] = ()) -> None:
        self.root, self.interval, self.broker_pid = root, interval, broker_pid
        self.exclude_comms = exclude_comms
        self._broker_cpu = 0.0
        self.samples: list[Sample] = []
        self._cpu: dict[int, tuple[str, float]] = {}   # pid -> (kind, last cpu seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> TreeSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self) -> None:
        stats: dict[int, tuple[str, int, float]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = _stat(int(name))
                if st is not None:
                    stats[int(name)] = st
        if self.root not in stats:
            return
        kinds = classify(self.root, {pid: (c, pp) for pid, (c, pp, _) in stats.items()}, self.exclude_comms)
        rss = {"driver": 0, "jvm": 0, "worker": 0, "excluded": 0}
        worker_max = n_workers = 0
        for pid, kind in kinds.items():
            r = _rss(pid) if kind != "excluded" else 0
            rss[kind] += r
            if kind == "worker":
                worker_max, n_workers = max(worker_max, r), n_workers + 1
            prev = self._cpu.get(pid)
            self._cpu[pid] = (kind, max(stats[pid][2], prev[1] if prev else 0.0))
        cpu = {"driver": 0.0, "jvm": 0.0, "worker": 0.0, "excluded": 0.0}
        for kind, secs in self._cpu.values():
            cpu[kind] += secs
        if self.broker_pid in stats:
            self._broker_cpu = stats[self.broker_pid][2]
        if self.broker_pid is not None and self.broker_pid not in kinds:
            cpu["excluded"] += self._broker_cpu   # a broker started beside the tree is a service too
        self.samples.append(Sample(time.time(), rss["driver"], rss["jvm"], rss["worker"], worker_max, n_workers,
                                   cpu["driver"] + cpu["jvm"] + cpu["worker"], cpu["driver"], cpu["jvm"],
                                   cpu["worker"], self._broker_cpu, _machine_busy(), cpu["excluded"]))
