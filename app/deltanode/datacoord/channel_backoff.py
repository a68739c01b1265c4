"""The clocks of channel hand-overs (coordinator): watch timeouts, and the backoff after a failed watch.

Both live in memory only and restart with the process: a restarted coordinator gives every
pending key a full ``watch_timeout`` again, and hands out a failed channel without waiting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FAILED_NODE_COOLDOWN = 300.0   # seconds a node that failed a watch is left out of balance moves
MAX_BACKOFF = 60.0             # seconds, the longest wait before a failed channel is handed out again


@dataclass(frozen=True, kw_only=True)
class Deadline:
    """When a watch key, unchanged since ``version``, is given up on."""

    version: int
    at: float


@dataclass(frozen=True, kw_only=True)
class FailureCount:
    """Failed watches of one channel in a row; ``version`` is the key version counted last."""

    count: int
    version: int
    retry_at: float


class WatchTimers:
    """ToWatch and ToRelease keys waiting for an answer. A key's clock starts when a pass first
    sees it at its version, so the DataNode's tickles (each a new version) restart it.

    Runs on the coordinator; called by the channel-manager thread, inside a pass.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._deadlines: dict[str, Deadline] = {}
        self._needed: set[str] = set()    # keys the running pass asked about

    def begin_pass(self) -> None:
        self._needed = set()

    def expired(self, key: str, version: int, now: float) -> bool:
        """Whether ``key`` has sat at ``version`` for ``timeout``; starts the clock."""
        self._needed.add(key)
        deadline = self._deadlines.get(key)
        if deadline is None or deadline.version != version:
            self._deadlines[key] = Deadline(version=version, at=now + self.timeout)
            return False
        return now >= deadline.at

    def end_pass(self) -> None:
        """Forget the clocks of keys the pass did not ask about: they changed state or are gone."""
        self._deadlines = {k: d for k, d in self._deadlines.items() if k in self._needed}

    def next_deadline(self) -> float:
        return min((d.at for d in self._deadlines.values()), default=math.inf)


class WatchFailures:
    """Channels whose watch failed, with their backoff, and the nodes that failed one.

    Runs on the coordinator; called by the channel-manager thread, inside a pass.
    """

    def __init__(self) -> None:
        self._channels: dict[str, FailureCount] = {}
        self._nodes: dict[int, float] = {}   # node -> monotonic time of its last WatchFailure

    def record(self, *, node: int, vchannel: str, version: int, now: float) -> None:
        """A failed watch (counted once per key version): the channel is handed out again 1 s after
        its first failure in a row, doubling up to 60 s, so a channel that cannot start does not spin."""
        self._nodes[node] = now
        last = self._channels.get(vchannel)
        if last is not None and last.version == version:
            return
        count = 1 if last is None else last.count + 1
        self._channels[vchannel] = FailureCount(count=count, version=version,
                                                retry_at=now + min(MAX_BACKOFF, 2.0 ** (count - 1)))

    def forget(self, vchannel: str) -> None:
        """The channel is watched: its next failure starts a new count."""
        self._channels.pop(vchannel, None)

    def waiting(self, vchannel: str, now: float) -> bool:
        """Whether the channel is still in its backoff."""
        last = self._channels.get(vchannel)
        return last is not None and last.retry_at > now

    def cooling(self, now: float) -> frozenset[int]:
        """Nodes that failed a watch within ``FAILED_NODE_COOLDOWN``."""
        return frozenset(n for n, at in self._nodes.items() if now - at < FAILED_NODE_COOLDOWN)

    def next_retry(self, now: float) -> float:
        return min((f.retry_at for f in self._channels.values() if f.retry_at > now), default=math.inf)
