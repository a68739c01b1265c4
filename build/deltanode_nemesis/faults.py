"""The nemesis's schedule: every few seconds, one fault or two at once, drawn from a seeded
random generator, held for a drawn time, then healed. The same seed and the same fault kinds
give the same schedule (what the processes do meanwhile is up to the machine). Runs in the
nemesis process."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from .cluster import Cluster
from .kinds import HOLDS, STORAGE_FAULTS, FaultKind

TWO_AT_ONCE = 0.3


@dataclass(frozen=True, kw_only=True)
class Fault:
    kind: FaultKind
    at: float        # seconds since the schedule started
    hold: float


class Nemesis:
    """Draws and applies faults to ``cluster`` until ``seconds`` have passed; ``done`` lists them."""

    def __init__(self, cluster: Cluster, kinds: list[FaultKind], seed: int) -> None:
        self.cluster, self.kinds = cluster, kinds
        self.rng = random.Random(seed)
        self.done: list[Fault] = []

    def run(self, seconds: float, log) -> None:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            time.sleep(self.rng.uniform(2, 6))
            count = 2 if len(self.kinds) > 1 and self.rng.random() < TWO_AT_ONCE else 1
            kinds = self.rng.sample(self.kinds, count)
            hold = max(self.rng.uniform(*HOLDS[k]) for k in kinds)
            faults = [Fault(kind=k, at=round(time.monotonic() - start, 1), hold=round(hold, 1)) for k in kinds]
            for f in faults:
                detail = self._apply(f.kind)
                log(f"t={f.at:6.1f}s {f.kind} for {f.hold:.1f}s" + (f": {detail}" if detail else ""))
            time.sleep(hold)
            self.cluster.heal()
            self.done += faults

    def _apply(self, kind: FaultKind) -> str:
        """Inject ``kind``; what a storage fault did (else "")."""
        c = self.cluster
        if kind in STORAGE_FAULTS:
            return c.storage.apply(kind, self.rng, c.nodes)
        standalone, datanode = c.nodes
        {FaultKind.KILL_STANDALONE: standalone.kill, FaultKind.KILL_DATANODE: datanode.kill,
         FaultKind.PAUSE_STANDALONE: standalone.pause, FaultKind.PAUSE_DATANODE: datanode.pause,
         FaultKind.KILL_BROKER: c.broker.kill, FaultKind.PAUSE_BROKER: c.broker.pause,
         FaultKind.PARTITION_BROKER: c.run_broker.cut,
         FaultKind.KILL_ETCD: c.etcd.kill, FaultKind.PAUSE_ETCD: c.etcd.pause}[kind]()
        return ""
