"""The pipeline loop's turns (driver): a cycle, and the sync of what it read.

A turn plans a cycle and starts its Spark job (``cycle.CycleRunner``), commits the batches the
previous turn left (``sync_manager``) while that job runs, then applies the job's output. When
the cycle read a backlog (a range hit its cap: the next turn starts at once) the turn leaves its
own sync to the next turn, beside the next job, so that a backlog's commits overlap the
executors' reads and writes instead of following them; otherwise it commits at once. The
batches a sync commits are always those applied before it: the order of reads and commits per
vchannel does not change.

A cycle that only took longer than the trigger interval commits at once too: left to the next
turn, its commits would wait for the next plan, then share the driver's cores with the next
job, which delays them more than overlapping saves (the scale benchmark, ``deltanode_bench.scale``,
measures this; docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from ..failure.crash_points import crash_point
from ..vchannel.flowgraph import VchannelFlowgraph
from .cycle import CycleRunner, log_cycle
from .cycle_report import CycleReport
from .registry import VchannelRegistry
from .sync_manager import SyncManager

log = logging.getLogger(__name__)
CYCLES_KEPT = 100

CycleObserver = Callable[[CycleReport], None]


class CycleTurns:
    """Runs on the driver, in the pipeline's loop thread."""

    def __init__(self, *, registry: VchannelRegistry, runner: CycleRunner, syncs: SyncManager,
                 stopping: threading.Event, on_cycle: CycleObserver | None) -> None:
        self.registry, self.runner, self.syncs = registry, runner, syncs
        self.stopping, self.on_cycle = stopping, on_cycle
        self.reports: deque[CycleReport] = deque(maxlen=CYCLES_KEPT)
        self.number = 0
        self._sync_due = False   # the last turn left its sync to run beside the next one's job

    def turn(self) -> CycleReport:
        """One cycle and a sync; what it did (``capped``: a backlog remains, the next turn starts at once)."""
        self.number += 1
        report = CycleReport(self.number, started=time.time())
        now = time.monotonic()
        members = self.registry.begin_cycle()
        launched = self.runner.start(members, report, now)
        if self._sync_due:
            self._sync(members, report)
        plan = self.runner.finish(launched, members, report)
        report.capped = plan.capped
        self._sync_due = plan.capped and not self.stopping.is_set()
        if not self._sync_due:
            self._sync(members, report)
        report.seconds = time.monotonic() - now
        self.reports.append(report)
        log_cycle(report)
        if self.on_cycle is not None:
            try:
                self.on_cycle(report)
            except Exception:  # an observer (metrics) never stops persistence
                log.exception("cycle %d: its observer failed", report.number)
        return report

    def abandon(self) -> None:
        """The turn failed and every vchannel restarts from Delta: nothing is left to commit."""
        self._sync_due = False

    def close(self) -> None:
        """The loop stopped: commit what the last turn left."""
        if not self._sync_due:
            return
        self._sync_due = False
        try:
            self._sync(self.registry.begin_cycle(), CycleReport(self.number, started=time.time()))
        finally:
            self.registry.end_cycle()

    def _sync(self, members: dict[str, VchannelFlowgraph], report: CycleReport) -> None:
        started = time.monotonic()
        self.syncs.sync(self.registry.still_members(members), started, report)
        report.sync_s += time.monotonic() - started
        crash_point("after_commit")
