"""The processes a nemesis run breaks: etcd and the broker (started here, as a user's own
services), and DeltaNode's processes (``./spark-submit.sh standalone`` with the embedded
services off, and a second ``./spark-submit.sh datanode``), each killable, pausable and
restartable; with the run's storage root (``storage``) and the broker's relay. Runs in the
nemesis process."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from deltanode.standalone.services import EmbeddedEtcd, free_port

from .broker import RunBroker
from .storage import StorageRoot

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    """What the run's conf holds (``write_conf``)."""

    workdir: Path
    pchannels: int = 4
    session_ttl_s: int = 5
    trigger: str = "300ms"


class Node:
    """One DeltaNode process tree started by ``spark-submit.sh`` in a process group of its own."""

    def __init__(self, name: str, subcommand: str, conf: Path, log_dir: Path) -> None:
        self.name, self.subcommand, self.conf, self.log_dir = name, subcommand, conf, log_dir
        self.proc: subprocess.Popen | None = None
        self._paused: list[int] = []
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.log_dir / f"{self.name}.log", "ab")
        log.write(f"\n===== nemesis: start {self.starts} at {time.strftime('%H:%M:%S')} =====\n".encode())
        log.flush()
        self.proc = subprocess.Popen([str(ROOT / "spark-submit.sh"), self.subcommand, "--conf", str(self.conf)],
                                     cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tree(self) -> list[int]:
        """The launcher and every process under it: the spark-submit JVM, the Python driver,
        pyspark's workers (their own process groups: a signal to the launcher's group misses them).
        None once the launcher is gone (its pid may be another process's by then)."""
        if not self.alive:
            return []
        assert self.proc is not None
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    def _signal(self, sig: int, pids: list[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL of every process of the node at once, as a machine loss stops it; returns once
        none of them is left (a zombie holds no file)."""
        pids = self.tree()
        self._signal(signal.SIGKILL, pids)
        if self.proc is not None:
            self.proc.wait()
        deadline = time.monotonic() + 30
        while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._paused = []

    def pause(self) -> None:
        self._paused = self.tree()
        self._signal(signal.SIGSTOP, self._paused)

    def resume(self) -> None:
        self._signal(signal.SIGCONT, self._paused)
        self._paused = []

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    def stop(self) -> None:
        """SIGTERM to the launcher, as a service manager stops it (it asks the driver to stop
        cleanly); SIGKILL after 60 s. Not SIGINT: a nemesis started in the background of a
        non-interactive shell inherits SIGINT ignored, and so does the launcher, whose trap for it
        then never runs."""
        if not self.alive:
            return
        self.resume()
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Service:
    """etcd or the broker as this run started it (``server``: its ``start``, ``stop`` and
    ``proc``): killed, paused and restarted on the same data and port."""

    def __init__(self, name: str, server) -> None:
        self.name, self.server = name, server
        self.paused = False

    def start(self) -> None:
        self.server.start()
        self.paused = False

    @property
    def pid(self) -> int | None:
        proc = self.server.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill(self) -> None:
        proc = self.server.proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        self.paused = False

    def pause(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    @property
    def alive(self) -> bool:
        return self.pid is not None

    def stop(self) -> None:
        self.resume()
        self.server.stop()


class Cluster:
    """etcd, the broker, the storage root and the DeltaNode processes of one run."""

    def __init__(self, settings: ClusterSettings, broker: RunBroker, storage: StorageRoot) -> None:
        self.settings = settings
        work = settings.workdir
        (work / "logs").mkdir(parents=True, exist_ok=True)
        self.etcd = Service("etcd", EmbeddedEtcd(work / "etcd", free_port(), free_port()))
        self.run_broker, self.storage = broker, storage
        self.broker = Service("broker", broker)
        self.conf = work / "nemesis.conf"
        self.prefix = f"nemesis{int(time.time()) % 100000}-rootcoord-dml"
        self.nodes = [Node("standalone", "standalone", self.conf, work / "logs"),
                      Node("datanode", "datanode", self.conf, work / "logs")]

    @property
    def etcd_endpoint(self) -> str:
        return self.etcd.server.endpoint

    def write_conf(self) -> None:
        s = self.settings
        self.conf.write_text("\n".join([
            "embedded.etcd = false", "embedded.broker = false",
            f"etcd.endpoints = {self.etcd_endpoint}", "etcd.root = nemesis/meta",
            *self.run_broker.node_conf(), *self.storage.conf(),
            f"mq.pchannel.prefix = {self.prefix}", f"mq.pchannel.count = {s.pchannels}",
            f"session.ttl = {s.session_ttl_s}s",
            "datacoord.watch.timeout = 30s", f"datanode.trigger.interval = {s.trigger}",
            # The traffic's own proxy ticks every pchannel, as Milvus's rootcoord does; a second
            # ticker on another clock would break the order a tick promises.
            "standalone.timetick.interval = 0", "standalone.progress.interval = 30s",
            "log.level = INFO", "spark.master = local[2]", "spark.driver.memory = 768m",
            "spark.log.level = WARN", "spark.ui.enabled = false", "spark.sql.shuffle.partitions = 2", ""]))

    def start_services(self) -> None:
        self.storage.start()
        self.etcd.start()
        self.broker.start()
        self.write_conf()

    def start_nodes(self) -> None:
        for node in self.nodes:
            node.start()

    def heal(self) -> None:
        """Every storage fault ended, the relay restored, every paused process resumed, every dead
        one started again."""
        self.storage.heal()
        self.run_broker.restore()
        for svc in (self.etcd, self.broker):
            if svc.paused:
                svc.resume()
            if not svc.alive:
                svc.start()
        for node in self.nodes:
            if node.paused:
                node.resume()
            if not node.alive:
                node.start()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        for svc in (self.broker, self.etcd):
            svc.stop()
        self.run_broker.close()
