"""The run's storage root: what every mode has (a ``storage.root`` and its conf lines, a layout the
checks read it through, a storage fault applied and healed, a one-line account of what the faults
did), the local directory that has no fault of its own, and the choice of a mode. Runs in the
nemesis process."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from deltanode.delta.layout import StorageLayout

from .kinds import FaultKind, StorageMode


class StorageRoot:
    """A directory of the work directory (``--storage local``): no storage fault. The other modes
    derive from it. Runs in the nemesis process."""

    mode = StorageMode.LOCAL

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.path = workdir / "delta"

    @property
    def root(self) -> str:
        """``storage.root`` of the nodes' conf."""
        return str(self.path)

    def start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def conf(self) -> list[str]:
        return [f"storage.root = {self.root}"]

    def layout(self) -> StorageLayout:
        """The root as the checks read it."""
        return StorageLayout(self.root)

    def apply(self, kind: FaultKind, rng: random.Random, nodes: list) -> str:
        """Inject ``kind`` (a storage fault of this mode), drawing its details from ``rng``;
        ``nodes``: the DeltaNode processes (a power cut stops them). What was done, for the log."""
        raise ValueError(f"{kind} needs another --storage than {self.mode}")

    def heal(self) -> None:
        """End every storage fault under way."""

    def injected(self) -> int:
        """How many storage faults took effect (a fill that left no free block, a cut, a broken
        request)."""
        return 0

    def summary(self) -> str:
        return "no storage fault"

    def prepare_duckdb(self, con) -> None:
        """Let DuckDB's connection ``con`` read the root (a local directory needs nothing)."""

    def stop(self, keep: bool) -> None:
        """Release the root once no process uses it; ``keep``: leave its tables readable in the
        work directory."""


def tmpfs_mountable(probe: Path) -> str | None:
    """None when a tmpfs can be mounted here (tried at ``probe``, then unmounted), else why not."""
    probe.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        return done.stderr.strip() or f"mount exited {done.returncode}"
    subprocess.run(["umount", str(probe)], check=True)
    probe.rmdir()
    return None


def make_root(mode: StorageMode, workdir: Path, *, disk_mb: int) -> StorageRoot:
    if mode == StorageMode.TMPFS:
        from .tmpfs_root import TmpfsRoot
        return TmpfsRoot(workdir, disk_mb)
    if mode == StorageMode.POWERCUT:
        from .powercut_root import PowerCutRoot
        return PowerCutRoot(workdir)
    if mode == StorageMode.S3:
        from .s3_root import S3Root
        return S3Root(workdir)
    return StorageRoot(workdir)
