"""When a collection's vchannels are committed: small, named sync policies (pure logic, driver).

After every cycle each vchannel with uncommitted batches is a candidate. A collection is
synced, in one Delta commit for all its vchannels on this node, when one of its vchannels
is selected by a data policy:

- ``urgent``: control events (flush, drops) or a change of the replay filter's state;
- ``stale data``: rows read ``max_delay`` seconds ago or earlier (0: at the end of the cycle
  that read them, the default);
- ``full buffer``: ``max_bytes`` of binlogs waiting.

A vchannel that only read ticks (its checkpoint moved, nothing else) costs a commit too, so
``idle checkpoint`` commits such collections only once their last commit is
``checkpoint_interval`` old, and no more than the token bucket allows per second across
the node, oldest first: the number of commits an idle node makes stays bounded whatever the
number of its vchannels. (Milvus's write buffer has the same shape: ``writebuffer/sync_policy.go``.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config.sections.pipeline import SyncSettings


@dataclass(frozen=True)
class Candidate:
    vchannel: str
    collection_id: int
    urgent: bool
    data_since: float | None     # monotonic time the oldest uncommitted data was read, None if only ticks
    pending_bytes: int
    committed_at: float          # monotonic time of the vchannel's last commit


Policy = Callable[[Candidate, float], bool]


def urgent(c: Candidate, now: float) -> bool:
    return c.urgent


def stale_data(max_delay: float) -> Policy:
    return lambda c, now: c.data_since is not None and now - c.data_since >= max_delay


def full_buffer(max_bytes: int) -> Policy:
    return lambda c, now: c.pending_bytes >= max_bytes


def idle_checkpoint(interval: float) -> Policy:
    return lambda c, now: idle_due(interval, c.committed_at, now)


def idle_due(interval: float, committed_at: float, now: float) -> bool:
    return now - committed_at >= interval


class TokenBucket:
    """``rate`` tokens per second, at most ``rate`` (one second's worth) saved up."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate, self.tokens, self.at = rate, max(1.0, rate), now

    def take(self, wanted: int, now: float) -> int:
        self.tokens = min(max(1.0, self.rate), self.tokens + (now - self.at) * self.rate)
        self.at = now
        granted = min(wanted, int(self.tokens))
        self.tokens -= granted
        return granted


class SyncSelector:
    """Picks the collections to commit after a cycle."""

    def __init__(self, settings: SyncSettings, now: float) -> None:
        self.data_policies: list[Policy] = [urgent, stale_data(settings.max_delay), full_buffer(settings.max_bytes)]
        self.idle_policy = idle_checkpoint(settings.checkpoint_interval)
        self.idle_budget = TokenBucket(settings.idle_rate, now)
        self.checkpoint_interval = settings.checkpoint_interval

    def may_pick_idle(self, committed_at: float, now: float) -> bool:
        """Whether a vchannel that read only ticks since its last commit (no data, nothing
        urgent) can be picked now: only ``idle_checkpoint`` can pick it. The others need no
        candidate: at 10,000 vchannels, most of them every cycle."""
        return idle_due(self.checkpoint_interval, committed_at, now)

    def select(self, candidates: list[Candidate], now: float) -> list[int]:
        due = {c.collection_id for c in candidates if any(p(c, now) for p in self.data_policies)}
        idle: dict[int, float] = {}
        for c in candidates:
            if c.collection_id not in due and self.idle_policy(c, now):
                idle[c.collection_id] = min(c.committed_at, idle.get(c.collection_id, c.committed_at))
        oldest_first = sorted(idle, key=lambda cid: idle[cid])
        return sorted(due) + oldest_first[:self.idle_budget.take(len(oldest_first), now)]
