"""An outage of a service outside the process (etcd, the broker), as a state to report.

A DataNode does not fail on such an outage: it waits, or goes on without the service, and resumes
by itself when it answers again. So the outage is told once, at its start (ERROR) and at its end
(WARNING), not once per request or vchannel; its start and last error go into the progress
reports, the node's status document, ``/healthz``'s body and the metrics. Every user of the
service in the process reports here, from any thread, as often as it learns.
"""

from __future__ import annotations

import logging
import threading
import time


class Outage:
    """Whether ``service`` at ``address`` answered lately, and since when it has not. Runs on the
    driver; thread-safe.

    ``consequence``: what the node does meanwhile, said in the line that starts the outage.
    ``settle_after``: seconds of answers, without an unanswered request, that end an outage (0:
    the first answer): a service coming back may answer some requests and not others for a few
    seconds, which is the same outage, not a new one.
    """

    def __init__(self, service: str, address: str, *, consequence: str, log: logging.Logger,
                 settle_after: float = 0.0) -> None:
        self.service, self.address = service, address
        self._consequence, self._log, self._settle_after = consequence, log, settle_after
        self._lock = threading.Lock()
        self._down_since: float | None = None        # wall clock of the first unanswered request of the outage
        self._answering_since: float | None = None   # monotonic: answered since, in the outage
        self._error = ""

    def failed(self, error: str) -> None:
        """A request went unanswered (``error``: why)."""
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.time()
            self._answering_since = None
            self._error = error
        if first:
            self._log.error("%s unreachable at %s (%s); %s", self.service, self.address, error, self._consequence)

    def answered(self) -> None:
        """The service answered: the outage ends once it has for ``settle_after`` seconds."""
        with self._lock:
            if self._down_since is None:
                return
            now = time.monotonic()
            if self._answering_since is None:
                self._answering_since = now
            if now - self._answering_since < self._settle_after:
                return
            since, self._down_since, self._answering_since = self._down_since, None, None
        self._log.warning("%s reachable again at %s after %.1f s", self.service, self.address, time.time() - since)

    @property
    def down_since(self) -> float | None:
        """Wall-clock time of the first unanswered request of the current outage; None while it answers."""
        with self._lock:
            return self._down_since

    @property
    def error(self) -> str:
        """The last unanswered request's error in the current outage ("" while the service answers)."""
        with self._lock:
            return self._error if self._down_since is not None else ""

    def describe(self) -> str | None:
        """``{service} unreachable since HH:MM:SS (N s): error``, or None while it answers."""
        with self._lock:
            since, error = self._down_since, self._error
        return None if since is None else describe(self.service, since, error)


def describe(service: str, since: float, error: str, now: float | None = None) -> str:
    """``{service} unreachable since HH:MM:SS (N s): error`` for an outage that started at ``since``
    (wall clock)."""
    now = time.time() if now is None else now
    started = time.strftime("%H:%M:%S", time.localtime(since))
    return f"{service} unreachable since {started} ({now - since:.0f} s): {error}"
