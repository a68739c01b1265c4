"""Whether the broker answered a DataNode's pipeline lately, and since when it has not.

A broker that does not answer (down, starting again, paused, cut off: ``BrokerUnreachable``) fails
no vchannel: each waits where it stands and reads on once the broker answers (``pipeline.cycle``).
So an outage is a state to report, not an error of each vchannel at each cycle: its start and its
end are logged once each, and the state goes into the progress reports, the node's status
document, ``/healthz`` and the metrics. It ends once the broker has answered for ``SETTLED_AFTER``
seconds: a broker coming back may answer some requests and not others for a few seconds (Apache
Kafka continued after a pause may answer a cycle, then refuse the next one's stale leader epochs),
which is the same outage, not a new one.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)
SETTLED_AFTER = 5.0   # seconds of answers, without an unanswered request, that end an outage


class BrokerReachability:
    """Runs on the driver and is thread-safe: the pipeline's loop reports (``failed``, ``answered``, as
    often as it learns), the progress reports, status document and metrics read."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._lock = threading.Lock()
        self._down_since: float | None = None   # wall clock of the first unanswered request of the outage
        self._answering_since: float | None = None   # monotonic: answered since, in the outage
        self._error = ""

    def failed(self, error: str) -> None:
        """A request of the pipeline went unanswered (``error``: why)."""
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.time()
            self._answering_since = None
            self._error = error
        if first:
            log.error("broker unreachable at %s (%s); the DataNode's vchannels wait where they stand, none fails, "
                      "and read on when it answers", self.address, error)

    def answered(self) -> None:
        """The broker answered every request of a cycle: the outage ends once it has for ``SETTLED_AFTER``."""
        with self._lock:
            if self._down_since is None:
                return
            now = time.monotonic()
            if self._answering_since is None:
                self._answering_since = now
            if now - self._answering_since < SETTLED_AFTER:
                return
            since, self._down_since, self._answering_since = self._down_since, None, None
        log.warning("broker reachable again at %s after %.1f s", self.address, time.time() - since)

    @property
    def down_since(self) -> float | None:
        """Wall-clock time of the first unanswered request of the current outage; None while it answers."""
        with self._lock:
            return self._down_since

    @property
    def error(self) -> str:
        """The last unanswered request's error in the current outage ("" while the broker answers)."""
        with self._lock:
            return self._error if self._down_since is not None else ""

    def describe(self) -> str | None:
        """``broker unreachable since HH:MM:SS (N s): error``, or None while it answers."""
        with self._lock:
            since, error = self._down_since, self._error
        return None if since is None else describe_broker_outage(since, error)


def describe_broker_outage(since: float, error: str, now: float | None = None) -> str:
    """``broker unreachable since HH:MM:SS (N s): error`` for an outage that started at ``since`` (wall clock)."""
    now = time.time() if now is None else now
    return f"broker unreachable since {time.strftime('%H:%M:%S', time.localtime(since))} ({now - since:.0f} s): {error}"
