"""How many messages the next cycle may read, so that it ends in time (pure logic, driver).

A cycle reads each pchannel from its vchannels' positions up to the head, within the message and
byte caps, so on a node past its capacity (a neighbour took a core, a burst came) its cycles grow
with the backlog. With ``datanode.cycle.max.seconds`` set, a cycle reads only as many messages as
the recent cycles' cost per message lets it finish in ``max_seconds``, the oldest first (the plan
shares the budget between ranges), and commits them; the next cycle starts at once.

The bound is off by default: a long cycle writes one binlog file per vchannel for several of its
inserts where a short one writes one per insert, so a node past its capacity drains a backlog
faster in long cycles (docs/architecture.md has the measurement). It serves a node whose cycles
must stay short whatever the load (a memory bound on the driver's batch state, a latency
promise for the newest inserts over the oldest).

The cost per message is the job's wall clock over the messages it read, smoothed over the cycles
that read at least ``MIN_MESSAGES`` (a cycle of a few ticks says little: its fixed cost, the
Spark job's launch, dominates). It is deliberately the wall clock, not the CPU: a neighbour that
takes a core shows there first.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_MESSAGES = 100        # a cycle that read fewer says nothing of the cost per message
SMOOTHING = 0.3           # weight of the newest cycle's cost per message


@dataclass(frozen=True, kw_only=True)
class CycleCost:
    """What a finished cycle's job cost: its messages and its wall clock (s)."""

    messages: int
    job_seconds: float


class CycleBudget:
    """Runs on the driver, in the pipeline's loop: one per loop.

    ``max_seconds``: how long a cycle's job may take (0: no bound); ``floor``: the fewest messages
    a cycle may read, however slow the last ones were (each read range must make progress).
    """

    def __init__(self, *, max_seconds: float, floor: int) -> None:
        self.max_seconds = max_seconds
        self.floor = max(1, floor)
        self.seconds_per_message: float | None = None

    def observe(self, cost: CycleCost) -> None:
        if cost.messages < MIN_MESSAGES or cost.job_seconds <= 0:
            return
        latest = cost.job_seconds / cost.messages
        previous = self.seconds_per_message
        self.seconds_per_message = latest if previous is None else SMOOTHING * latest + (1 - SMOOTHING) * previous

    def messages(self) -> int | None:
        """The most messages the next cycle may read; None: no bound (none set, or nothing learnt yet)."""
        if self.max_seconds <= 0 or self.seconds_per_message is None:
            return None
        return max(self.floor, int(self.max_seconds / self.seconds_per_message))
