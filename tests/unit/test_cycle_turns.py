"""The pipeline loop's turns (``pipeline.turns.CycleTurns``) with the real cycle runner, sync stage
and Delta tables: a turn that read everything commits at once; one that hit a cap (a backlog
remains) leaves its sync to the next turn, which commits it while its own job runs; ``close``
commits what the last turn left, ``abandon`` drops it. Spark's executors and the broker are
fakes (a broker of TimeTicks only)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from deltanode.config.sections.pipeline import Limits, SealSettings, SyncSettings
from deltanode.mq.broker import Broker
from deltanode.pipeline import turns as turns_module
from deltanode.pipeline.cycle import CycleRunner
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.registry import VchannelRegistry
from deltanode.pipeline.turns import CycleTurns
from deltanode.state import meta
from deltanode.vchannel.flowgraph import VchannelFlowgraph

from .fakes import FakeBrokerMetadata, TicksOnlyExecutors
from .vchannels import Stages, loaded, stages


@dataclass
class Loop:
    s: Stages
    registry: VchannelRegistry
    broker: FakeBrokerMetadata
    executors: TicksOnlyExecutors
    stopping: threading.Event
    runner: CycleRunner
    turns: CycleTurns
    fg: VchannelFlowgraph
    observed: list[CycleReport]

    def turn(self) -> CycleReport:
        """One turn, as the pipeline's loop runs it (which ends the cycle after each)."""
        try:
            return self.turns.turn()
        finally:
            self.registry.end_cycle()

    def committed_offset(self) -> int | None:
        state = meta.channel_state(self.s.storage, self.fg.collection_id, self.fg.vchannel)
        return None if state is None else state.checkpoint_offset


@pytest.fixture
def loop(tmp_path):
    """One vchannel at offset 0 of pchannel ``dml_0``; ranges of 10 messages at most; every batch
    read is due for its commit (ticks only: the idle checkpoint interval is 0)."""
    s = stages(tmp_path, settings=SyncSettings(checkpoint_interval=0.0))
    s.sc.executors = executors = TicksOnlyExecutors()
    registry, stopping = VchannelRegistry(), threading.Event()
    runner = CycleRunner(sc=s.sc, storage=s.storage, broker=Broker("kafka", "127.0.0.1:1"),   # type: ignore[arg-type]
                         limits=Limits(max_messages=10, splits=1), seal=SealSettings(), registry=registry,
                         failures=s.failures, flushes=dict, stopping=stopping)
    runner.watermarks = broker = FakeBrokerMetadata(high=10)   # type: ignore[assignment]
    observed: list[CycleReport] = []
    fg = loaded(s, 1)
    registry.add(fg)
    yield Loop(s, registry, broker, executors, stopping, runner,
               CycleTurns(registry=registry, runner=runner, syncs=s.syncs, stopping=stopping,
                          on_cycle=observed.append), fg, observed)
    runner.close()


def test_a_turn_that_read_everything_commits_at_once(loop):
    report = loop.turn()
    assert (report.number, report.capped, report.commits, report.vchannels_committed) == (1, False, 1, 1)
    assert loop.committed_offset() == 10 and not loop.fg.uncommitted
    assert list(loop.turns.reports) == [report] and loop.observed == [report]
    assert report.seconds > 0 and report.sync_s > 0


def test_a_capped_turn_leaves_its_sync_to_the_next_turn_which_commits_it_while_its_job_runs(loop):
    loop.broker.high = 30
    first = loop.turn()
    assert first.capped and first.commits == 0 and loop.committed_offset() is None and loop.fg.uncommitted
    seen_by_the_job: list[int | None] = []

    def during() -> None:   # the job waits until the previous turn's batch is in Delta (or 5 s)
        deadline = time.monotonic() + 5
        while loop.committed_offset() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        seen_by_the_job.append(loop.committed_offset())

    loop.executors.during = during
    loop.broker.high = 20
    second = loop.turn()
    assert seen_by_the_job == [10]   # the first turn's batch, committed while the second's job ran
    assert not second.capped and second.commits == 2 and loop.committed_offset() == 20


def test_a_capped_turn_while_the_pipeline_stops_commits_at_once(loop):
    loop.broker.high = 30
    loop.stopping.set()
    report = loop.turn()
    assert report.capped and report.commits == 1 and loop.committed_offset() == 10


def test_close_commits_what_the_last_turn_left_and_only_that(loop):
    loop.broker.high = 30
    loop.turn()
    loop.turns.close()
    assert loop.committed_offset() == 10 and not loop.fg.uncommitted
    loop.registry.remove(loop.fg.vchannel, timeout=5)   # close ended its cycle: no wait
    loop.turns.close()   # nothing left: no cycle, no commit
    assert loop.committed_offset() == 10


def test_a_vchannel_removed_during_a_turn_is_not_committed_by_the_sync_beside_its_job(loop):
    loop.broker.high = 30
    loop.turn()   # capped: its sync is left to the next turn
    removal = threading.Thread(target=loop.registry.remove, args=(loop.fg.vchannel, 5.0))

    def planning() -> None:   # a channel watcher releases the vchannel once the turn has begun
        removal.start()
        deadline = time.monotonic() + 5
        while loop.registry.get(loop.fg.vchannel) is not None and time.monotonic() < deadline:
            time.sleep(0.01)

    loop.broker.planning = planning
    report = loop.turn()
    removal.join(5)   # the release returned once the turn ended its cycle
    assert not removal.is_alive() and loop.registry.vchannels() == []
    assert report.commits == 0 and loop.committed_offset() is None


def test_close_commits_nothing_for_a_vchannel_removed_meanwhile(loop):
    loop.broker.high = 30
    loop.turn()
    loop.registry.remove(loop.fg.vchannel, timeout=5)
    loop.turns.close()
    assert loop.committed_offset() is None


def test_an_abandoned_turn_leaves_nothing_to_commit(loop):
    loop.broker.high = 30
    loop.turn()
    loop.turns.abandon()
    loop.turns.close()
    assert loop.committed_offset() is None


def test_an_observer_that_fails_does_not_stop_the_turn(loop):
    def observer(report: CycleReport) -> None:
        raise RuntimeError("metrics are down")

    loop.turns.on_cycle = observer
    report = loop.turn()
    assert report.commits == 1 and list(loop.turns.reports) == [report]


def test_only_the_last_reports_are_kept(loop, monkeypatch):
    monkeypatch.setattr(turns_module, "CYCLES_KEPT", 2)
    turns = CycleTurns(registry=loop.registry, runner=loop.runner, syncs=loop.s.syncs, stopping=loop.stopping,
                       on_cycle=None)
    loop.turns = turns
    for high in (10, 20, 30):
        loop.broker.high = high
        loop.turn()
    assert [r.number for r in turns.reports] == [2, 3] and turns.number == 3
