"""``--storage powercut``: the storage root on the tests' FUSE filesystem that keeps every write
not fsynced apart (``tests/integration/powercut_fs.py``), and its fault ``power-cut``: the machine
loses power. Every DeltaNode process tree (both nodes) is SIGKILLed, then the filesystem is cut:
whatever was not fsynced is lost but what the kernel happened to write back (each changed
directory's names and each changed file's data kept at fractions drawn from the seed, as the
power-cut test does), and it is mounted again; the nodes start again at the heal. etcd and the
broker keep running: they stand for services on other machines. Runs in the nemesis process."""

from __future__ import annotations

import random
from pathlib import Path

from tests.integration.powercut_fs import PowerCutMount

from .kinds import FaultKind, StorageMode
from .storage import StorageRoot


class PowerCutRoot(StorageRoot):
    """The power-cut filesystem at the work directory's ``delta``, over ``powercut-disk`` (which
    holds the tables once the run ends). Runs in the nemesis process; the filesystem in a child."""

    mode = StorageMode.POWERCUT

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.mount = PowerCutMount(workdir / "powercut-disk", self.path, workdir / "logs" / "powercut_fs.log")
        self.cuts: list[dict] = []

    def start(self) -> None:
        self.mount.start()

    def apply(self, kind: FaultKind, rng: random.Random, nodes: list) -> str:
        if kind != FaultKind.POWER_CUT:
            return super().apply(kind, rng, nodes)
        for node in nodes:
            node.kill()   # waits until no process of the node is left: the filesystem can be unmounted
        names, data, seed = round(rng.random(), 2), round(rng.random(), 2), rng.randrange(1 << 30)
        report = self.mount.cut(names=names, data=data, seed=seed)
        self.mount.start()
        self.cuts.append(report)
        return (f"names written back {names}, data {data}: {report['names_dropped']} names dropped, "
                f"{report['names_restored']} restored, {report['files_reverted']} files reverted")

    def injected(self) -> int:
        return len(self.cuts)

    def summary(self) -> str:
        total = {k: sum(c[k] for c in self.cuts) for k in ("names_dropped", "names_restored", "files_reverted")}
        return (f"power-cut: {len(self.cuts)} cut(s), {total['names_dropped']} unsynced names dropped, "
                f"{total['names_restored']} restored, {total['files_reverted']} files reverted to their last fsync")

    def stop(self, keep: bool) -> None:
        """A clean unmount: everything written stays in ``powercut-disk``."""
        self.mount.stop()
