"""When the pipeline's loop starts its next cycle (driver): a small pure policy.

An insert waits for the next cycle's plan, then for that cycle: its insert -> durable latency
is up to the wait between plans plus a cycle. The loop starts a cycle every
``datanode.trigger.interval``, and at once after a cycle that hit a cap (a backlog remains).

**The files' pace** (``datanode.trigger.files.rate``, binlog files a second). Most of a cycle's
work is per vchannel, not per row: each vchannel with rows costs a binlog file (created,
written, fsynced with its directory) and its collection a Delta commit, whether the file holds
one insert or ten. So a node with many vchannels that each get a little traffic spends its CPU
on files, and the shorter its cycles, the more files per insert: at 1,000 vchannels of one
insert a second each, cycles run back to back (~1.2 s) made a file of ~1.2 inserts and cost
twice the CPU an insert of cycles 4 s apart (docs/benchmarks.md, "The pace of cycles"). Past
the rate, the next cycle starts ``files / rate`` seconds after the last one started, up to
``datanode.trigger.max.interval``: each file then carries the rows of a longer wait. The pace
counts files, not seconds of work, so a neighbour that slows the node does not stretch it: its
cycles take longer within the same period, where a pace set by their duration would lengthen
the period with them and amplify the slowdown. A node whose vchannels carry large inserts
writes few files and keeps the interval.

**Rate 0: latency first.** A busy node runs its cycles back to back, two an interval at most:
busy once its cycles that read rows take half the interval (smoothed, so that one long cycle does
not make it busy), and until they take less than 0.3 of it. The two thresholds differ because a
busy node's cycles carry less each, so they take less: one threshold would make a node flap. An
insert then waits for the cycle under way when it lands, then for its own, for whatever CPU that
costs.
"""

from __future__ import annotations

from ..config.sections.pipeline import TriggerSettings
from .cycle_report import CycleReport

BUSY_FROM = 0.5    # share of the interval cycles reading rows take (smoothed) that makes a node busy
BUSY_UNTIL = 0.3   # the share under which it is no longer busy
SMOOTHING = 0.5    # the last cycle's weight in the smoothed duration


class Trigger:
    """Runs on the driver, in the pipeline's loop: one per loop."""

    def __init__(self, settings: TriggerSettings) -> None:
        self.interval = settings.interval
        self.files_rate = settings.files_rate
        self.max_interval = max(settings.interval, settings.max_interval)
        self.smoothed = 0.0   # seconds of the last cycles; one that read no row (or failed) counts as 0
        self.busy = False

    def next_start(self, started: float, ended: float, report: CycleReport | None) -> float:
        """The monotonic time to start the next cycle, after one that ran from ``started`` to
        ``ended`` and did what ``report`` says (None: it failed)."""
        if self.files_rate > 0:
            return self._paced(started, ended, report)
        rows = report is not None and bool(report.rows or report.deletes)
        self.smoothed = SMOOTHING * (ended - started if rows else 0.0) + (1.0 - SMOOTHING) * self.smoothed
        self.busy = self.smoothed >= self.interval * (BUSY_UNTIL if self.busy else BUSY_FROM) > 0
        if report is not None and report.capped:
            return ended
        return started + self.interval / 2 if self.busy else started + self.interval

    def period(self, files: int) -> float:
        """Seconds from a cycle's start to the next's, after a cycle that wrote ``files`` binlog files."""
        return min(self.max_interval, max(self.interval, files / self.files_rate))

    def _paced(self, started: float, ended: float, report: CycleReport | None) -> float:
        if report is not None and report.capped:
            return ended
        return started + self.period(report.files if report is not None else 0)
