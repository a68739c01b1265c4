"""Host-local handoff of message payloads from a flowgraph's source to its sink.

The source and the sink of one flowgraph partition are one Spark task (nothing is shuffled
between them), so they run on the same host, in two Python workers with the JVM in between.
Passing a multi-MB Arrow payload through the JVM costs two socket copies and JVM heap for
every message, and it was the bottleneck of a busy channel (both Python workers waited on
the JVM). With a handoff directory the source writes each large payload to a file there
(tmpfs by default: one memcpy) and sends only the path; the sink memory-maps the file and
unlinks it.

Nothing is lost if a file goes missing: the broker stays the source of truth, the sink fails
the task with an error naming the file, and Spark retries the task, which reads its offset
range again. Files left by failed or killed tasks are removed by later tasks on the host
once they are ``STALE_AFTER_S`` old.
"""

from __future__ import annotations

import logging
import os
import time
import uuid

import pyarrow as pa

log = logging.getLogger(__name__)

# Payloads smaller than this travel inline: a file costs more than the copy it saves.
MIN_HANDOFF_BYTES = 64 << 10
# A file lives from the source reading its message to the sink writing it, within one task.
STALE_AFTER_S = 600.0
# Payloads go inline rather than leave less than this share of the filesystem free: tmpfs is
# shared memory that other programs on the host use too (Docker's /dev/shm is 64 MB).
KEEP_FREE = 0.10
SUFFIX = ".arrow"
_warned: set[str] = set()  # one warning per directory per worker process, not one per task


def _warn_once(directory: str, what: str, error: OSError) -> None:
    if directory not in _warned:
        _warned.add(directory)
        log.warning("payload handoff directory %s %s (%s); payloads go through the JVM", directory, what, error)


class HandoffGone(RuntimeError):
    """A handoff file the sink needs is missing; retrying the task reads the range again."""


class Handoff:
    """The source side: ``put`` a payload, get the path the sink will ``take`` (or None: send it inline)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.written: list[str] = []

    @classmethod
    def open(cls, directory: str | None) -> Handoff | None:
        """The handoff of one source task, or None when ``directory`` is unset or unusable here."""
        if not directory:
            return None
        try:
            os.makedirs(directory, exist_ok=True)
            sweep(directory)
        except OSError as e:
            _warn_once(directory, "is unusable", e)
            return None
        return cls(directory)

    def put(self, payload: pa.Buffer) -> str | None:
        if self.directory is None or payload.size < MIN_HANDOFF_BYTES or not self._room_for(payload.size):
            return None
        path = os.path.join(self.directory, uuid.uuid4().hex + SUFFIX)
        try:
            with open(path, "wb") as f:
                f.write(payload)
        except OSError as e:  # full tmpfs, removed directory: inline for the rest of the task
            _warn_once(self.directory, "refused a payload", e)
            _unlink(path)
            self.directory = None
            return None
        self.written.append(path)
        return path

    def _room_for(self, size: int) -> bool:
        try:
            fs = os.statvfs(self.directory)
        except OSError:
            return False
        return (fs.f_bavail * fs.f_frsize - size) >= KEEP_FREE * fs.f_blocks * fs.f_frsize

    def discard(self) -> None:
        """Remove this task's files the sink has not taken (the task is failing)."""
        for path in self.written:
            _unlink(path)
        self.written.clear()


def take(path: str) -> pa.Buffer:
    """The sink side: the payload at ``path``, memory-mapped; the file is unlinked at once
    (the mapping stays valid until the buffer is freed)."""
    try:
        buf = pa.memory_map(path).read_buffer()
    except FileNotFoundError:
        raise HandoffGone(f"payload handoff file {path} is gone (swept as stale, or the host's tmpfs was "
                          f"cleared); the task fails and Spark retries it from the broker") from None
    _unlink(path)
    return buf


def sweep(directory: str, older_than_s: float = STALE_AFTER_S) -> int:
    """Remove handoff files older than ``older_than_s``; returns how many."""
    cutoff, removed = time.time() - older_than_s, 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.endswith(SUFFIX):
                continue
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:
                pass  # taken or swept meanwhile
    return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
