"""Log format and levels of a DeltaNode process (``log.level``), and the thread that writes its lines.

A thread that logs only formats its record and queues it; one writer thread writes what has
queued in one go. A stream handler would hold its lock across the write and take the GIL back
after it, so the threads that log a lot at once (the pipeline, the channel watchers and the
etcd loop, a line per vchannel assigned, loaded and watched) would queue on that lock and
slow the watching of many vchannels down (docs/platform.md).
"""

from __future__ import annotations

import atexit
import logging
import queue
import sys
import threading
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
BATCH = 1_000   # records written at most per write


class _QueueHandler(logging.Handler):
    """Formats a record in the logging thread (its message and traceback are that moment's) and queues the line."""

    def __init__(self, lines: queue.SimpleQueue[str | threading.Event | None]) -> None:
        super().__init__()
        self._lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.put(self.format(record))
        except Exception:  # noqa: BLE001 - as logging.Handler does: never raise into the caller
            self.handleError(record)

    def handle(self, record: logging.LogRecord) -> bool:
        # No handler lock: the queue is thread-safe, and taking the lock is what this avoids.
        rv = self.filter(record)
        if rv:
            self.emit(record)
        return bool(rv)


class _Writer:
    """The thread that writes queued lines to ``stream``, as many as have queued per write."""

    def __init__(self, stream: TextIO) -> None:
        self.lines: queue.SimpleQueue[str | threading.Event | None] = queue.SimpleQueue()
        self._stream = stream
        threading.Thread(target=self._run, name="log-writer", daemon=True).start()

    def _run(self) -> None:
        while True:
            batch = [self.lines.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(self.lines.get_nowait())
                except queue.Empty:
                    break
            text = "".join(f"{line}\n" for line in batch if isinstance(line, str))
            if text:
                try:
                    self._stream.write(text)
                    self._stream.flush()
                except (OSError, ValueError):   # the stream is gone (a closed pipe): nothing to tell it
                    pass
            for line in batch:
                if isinstance(line, threading.Event):
                    line.set()
            if None in batch:
                return

    def flush(self, timeout: float) -> None:
        """Return once every line queued before this call is written (or after ``timeout`` s)."""
        written = threading.Event()
        self.lines.put(written)
        written.wait(timeout)

    def close(self) -> None:
        """End the thread once what has queued is written (a handler still holding ``lines`` then writes nothing)."""
        self.lines.put(None)


_writer: _Writer | None = None


def setup_logging(level: str = "INFO") -> None:
    """Log to stderr with timestamps at ``level`` (log.level), through the writer thread."""
    global _writer
    if _writer is not None:
        _writer.close()
    _writer = _Writer(sys.stderr)
    handler = _QueueHandler(_writer.lines)
    handler.setFormatter(logging.Formatter(FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler], force=True)
    for noisy in ("py4j", "py4j.clientserver", "kafka", "grpc", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.root.level))


def flush_logs(timeout: float = 5.0) -> None:
    """Write every line logged so far: before ``os._exit`` or a crash point, and at exit."""
    if _writer is not None:
        _writer.flush(timeout)


atexit.register(flush_logs)
