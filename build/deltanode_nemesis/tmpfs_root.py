"""``--storage tmpfs``: the storage root on a tmpfs of a fixed size mounted for the run, and its
fault ``fill-disk``: a file takes every free block for the hold (and every block freed meanwhile,
``tests/integration/filler.py``), deleted at the heal. The nodes must stop committing, lose
nothing and resume by themselves. Runs in the nemesis process."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

from tests.integration.filler import Filler, free_bytes

from .kinds import FaultKind, StorageMode
from .storage import StorageRoot

MB = 1 << 20


class TmpfsRoot(StorageRoot):
    """A tmpfs of ``size_mb`` at the work directory's ``delta``. Runs in the nemesis process."""

    mode = StorageMode.TMPFS

    def __init__(self, workdir: Path, size_mb: int) -> None:
        super().__init__(workdir)
        self.size_mb = size_mb
        self.filler: Filler | None = None
        self.fills: list[int] = []      # bytes each fill took
        self.full: int = 0              # fills that left no free block
        self.peak_used = 0              # bytes of tables at the fullest, seen at each fill and at the end

    def start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.path)], check=True,
                       capture_output=True, text=True)

    def _used(self) -> int:
        stats = os.statvfs(self.path)
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize

    def apply(self, kind: FaultKind, rng: random.Random, nodes: list) -> str:
        if kind != FaultKind.FILL_DISK:
            return super().apply(kind, rng, nodes)
        if self.filler is not None:
            return "fill-disk: already full"
        self.peak_used = max(self.peak_used, self._used())
        free = free_bytes(self.path)
        self.filler = Filler(self.path)
        self.fills.append(free)
        left = free_bytes(self.path)
        self.full += left == 0
        return f"{free / MB:.0f} MB taken, {left} bytes left"

    def heal(self) -> None:
        if self.filler is not None:
            self.filler.release()
            self.filler = None

    def injected(self) -> int:
        return self.full

    def summary(self) -> str:
        self.peak_used = max(self.peak_used, self._used())
        taken = f", {min(self.fills) / MB:.0f} to {max(self.fills) / MB:.0f} MB taken" if self.fills else ""
        return (f"fill-disk: {len(self.fills)} fill(s), {self.full} left no free block{taken}; the tables took "
                f"at most {self.peak_used / MB:.0f} MB of the {self.size_mb} MB tmpfs")

    def stop(self, keep: bool) -> None:
        self.heal()
        if keep:
            shutil.copytree(self.path, self.workdir / "delta-kept", symlinks=True)
        if subprocess.run(["umount", str(self.path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], check=True)   # a process still holds a file there
