"""When the pipeline's loop starts its next cycle (driver): a small pure policy.

An insert waits for the next cycle's plan, then for that cycle: its insert -> durable latency
is up to the wait between plans plus a cycle. The loop starts a cycle every
``datanode.trigger.interval``, and at once after a cycle that hit a cap (a backlog remains).

A busy node runs its cycles back to back, two an interval at most: busy once its cycles that
read rows take half the interval (smoothed, so that one long cycle does not make it busy), and
until they take less than 0.3 of it. The two thresholds differ because a busy node's cycles
carry less each, so they take less: one threshold would make a node flap. An insert on a busy
node waits for the cycle under way when it lands, then for its own, not for the rest of an
interval: a lower insert -> durable latency for a little more CPU. A lighter node's cycles are
short and keep the interval: run twice as often, its latency would halve for about twice the
CPU, the trade ``datanode.trigger.interval`` offers. An idle node keeps it too (the scale
benchmark, ``deltanode_bench.scale``, measures these; docs/benchmarks.md).
"""

from __future__ import annotations

from .cycle_report import CycleReport

BUSY_FROM = 0.5    # share of the interval cycles reading rows take (smoothed) that makes a node busy
BUSY_UNTIL = 0.3   # the share under which it is no longer busy
SMOOTHING = 0.5    # the last cycle's weight in the smoothed duration


class Trigger:
    """Runs on the driver, in the pipeline's loop: one per loop."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.smoothed = 0.0   # seconds of the last cycles; one that read no row (or failed) counts as 0
        self.busy = False

    def next_start(self, started: float, ended: float, report: CycleReport | None) -> float:
        """The monotonic time to start the next cycle, after one that ran from ``started`` to
        ``ended`` and did what ``report`` says (None: it failed)."""
        rows = report is not None and bool(report.rows or report.deletes)
        self.smoothed = SMOOTHING * (ended - started if rows else 0.0) + (1.0 - SMOOTHING) * self.smoothed
        self.busy = self.smoothed >= self.interval * (BUSY_UNTIL if self.busy else BUSY_FROM) > 0
        if report is not None and report.capped:
            return ended
        return started + self.interval / 2 if self.busy else started + self.interval
