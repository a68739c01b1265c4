"""When a delete becomes visible to a Delta reader: DuckDB polled until a batch's keys are gone.

``VisibilityTracker`` is the bookkeeping (pure): the batches sent and not yet seen deleted, the
keys to ask for, and each batch's latency once a poll that asked for all its keys found none of
them. A poll answers only for the batches pending when its query started: a batch added during
the query was not asked about, so its absence from the answer means nothing.

``Poller`` asks DuckDB's Delta extension (``delta_scan``, a fresh snapshot per query) for the
pending keys every ``interval`` seconds in a thread, on one DuckDB thread: the reader is an
observer on the DataNode's two cores, kept to one. A batch is visible at the end of the first
query that found none of its keys (the snapshot is taken somewhere in the query, so this may
be late by up to one query, whose durations are kept).
"""

from __future__ import annotations

import importlib.metadata
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb


@dataclass
class PendingBatch:
    keys: frozenset[int]
    t_sent: float


class VisibilityTracker:
    """Batches of deleted keys, from their produce() call until a poll no longer finds any of them.
    Thread-safe: the producer adds, the poller asks and observes."""

    def __init__(self) -> None:
        self._pending: dict[int, PendingBatch] = {}
        self.latencies: dict[int, float] = {}      # batch id -> seconds from produce() to visible
        self._lock = threading.Lock()

    def add(self, batch_id: int, keys: Iterable[int], t_sent: float) -> None:
        with self._lock:
            if batch_id in self._pending or batch_id in self.latencies:
                raise ValueError(f"batch {batch_id} added twice")
            self._pending[batch_id] = PendingBatch(frozenset(keys), t_sent)

    def query(self) -> tuple[list[int], list[int]]:
        """The pending batches and the keys to ask for (sorted)."""
        with self._lock:
            ids = list(self._pending)
            keys = sorted(set().union(*(self._pending[i].keys for i in ids))) if ids else []
            return ids, keys

    def observe(self, asked: Iterable[int], found: set[int], t: float) -> list[int]:
        """A poll that asked for the batches ``asked`` found ``found`` at ``t``: the batches it
        shows deleted (none of their keys found), now resolved."""
        with self._lock:
            done = [i for i in asked if i in self._pending and not self._pending[i].keys & found]
            for i in done:
                self.latencies[i] = t - self._pending.pop(i).t_sent
            return done

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)


def duckdb_connection(threads: int = 1) -> duckdb.DuckDBPyConnection:
    """A connection with the Delta extension loaded from the ``duckdb-ext-delta`` wheel (no
    download), as ``tests/delta_readers.py`` loads it."""
    ext = importlib.metadata.distribution("duckdb-ext-delta").locate_file(
        f"duckdb_ext/extensions/v{duckdb.__version__}/linux_amd64/delta.duckdb_extension")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true", "threads": str(threads)})
    con.execute(f"LOAD '{ext}'")
    return con


def present_keys(con: duckdb.DuckDBPyConnection, uri: str, pk: str, keys: list[int]) -> set[int]:
    """The ``keys`` a ``delta_scan`` of the table returns now."""
    if not keys:
        return set()
    rows = con.execute(f'SELECT "{pk}" FROM delta_scan(\'{uri}\') WHERE "{pk}" IN ({",".join(map(str, keys))})')
    return {r[0] for r in rows.fetchall()}


class Poller:
    """Polls ``uri`` for the tracker's pending keys every ``interval`` seconds, in a thread."""

    def __init__(self, uri: str, pk: str, tracker: VisibilityTracker, interval: float = 0.1) -> None:
        self.uri, self.pk, self.tracker, self.interval = uri, pk, tracker, interval
        self.durations: list[float] = []      # of each query
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="duckdb-poller", daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the DuckDB poller failed: {self.error}") from self.error

    def _run(self) -> None:
        try:
            with duckdb_connection() as con:
                while not self._stop.is_set():
                    started = time.monotonic()
                    asked, keys = self.tracker.query()
                    if keys:
                        found = present_keys(con, self.uri, self.pk, keys)
                        self.durations.append(time.monotonic() - started)
                        self.tracker.observe(asked, found, time.time())
                    self._stop.wait(max(0.0, started + self.interval - time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - raised again by stop()
            self.error = e
