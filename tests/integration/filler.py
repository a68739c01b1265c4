"""A filesystem kept full: what the disk-full tests and the nemesis's ``fill-disk`` fault use."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path


class Filler:
    """Keeps a filesystem full: a file that takes every block there is, and every block freed
    afterwards (a failed write's partial file deleted), the way other writers on a shared disk
    do, until ``release`` deletes it. Runs in the test's (or the nemesis's) process, a thread of
    its own keeping it full."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "filler"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._stop = threading.Event()
        self._fill()
        self._thread = threading.Thread(target=self._keep_full, daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
            while True:
                try:
                    os.write(self._fd, chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break

    def _keep_full(self) -> None:
        while not self._stop.wait(0.01):
            self._fill()

    def release(self) -> None:
        """Space returns: the filler stops and is deleted."""
        self._stop.set()
        self._thread.join()
        os.close(self._fd)
        self.path.unlink()


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize
