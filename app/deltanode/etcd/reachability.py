"""Whether etcd answered a node lately, and since when it has not.

A DataNode keeps persisting while etcd is unreachable (its commits are compare-and-swaps on
each vchannel's Delta ``txn``, which needs no etcd), so an outage is a state to report, not
an error to stop on. Every etcd user of the node (the lease keep-alive, the fence) reports
here; the transitions are logged once each and the state goes into the progress reports.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)


class Reachability:
    """Thread-safe; ``failed``/``answered`` may be called from any thread, as often as they happen."""

    def __init__(self, endpoints: str) -> None:
        self.endpoints = endpoints
        self._lock = threading.Lock()
        self._down_since: float | None = None   # wall clock of the first failure of the outage
        self._error = ""

    def failed(self, error: str) -> None:
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.time()
            self._error = error
        if first:
            log.error("etcd unreachable at %s (%s); the DataNode keeps committing the channels it owns, "
                      "on Delta's txn check alone", self.endpoints, error)

    def answered(self) -> None:
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            log.warning("etcd reachable again at %s after %.1f s", self.endpoints, time.time() - since)

    @property
    def down_since(self) -> float | None:
        """Wall-clock time of the first failure of the current outage; None while etcd answers."""
        with self._lock:
            return self._down_since

    @property
    def error(self) -> str:
        """The last failure of the current outage ("" while etcd answers)."""
        with self._lock:
            return self._error if self._down_since is not None else ""

    def describe(self) -> str | None:
        """``etcd unreachable since HH:MM:SS (N s): error``, or None while etcd answers."""
        with self._lock:
            since, error = self._down_since, self._error
        return None if since is None else describe_outage(since, error)


def describe_outage(since: float, error: str, now: float | None = None) -> str:
    """``etcd unreachable since HH:MM:SS (N s): error`` for an outage that started at ``since`` (wall clock)."""
    now = time.time() if now is None else now
    return f"etcd unreachable since {time.strftime('%H:%M:%S', time.localtime(since))} ({now - since:.0f} s): {error}"
