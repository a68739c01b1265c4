"""A broker that answers some questions and not others: one Pulsar topic that times out, a Pulsar
namespace the broker does not have, Kafka partitions answered under stale leader epochs or without
a leader, a range whose reads deliver nothing while the broker answers its watermarks, a topic id
asked for a pchannel the broker does not answer for, and the pipeline's look at the broker while a
job runs. The broker's clients are faked where the other unit tests fake them (their methods, or
the function that makes them); what is tested is the logic above them."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace

import pulsar
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from deltanode.config.sections.pipeline import Limits, SealSettings
from deltanode.delta.layout import StorageLayout
from deltanode.failure.classify import Failure
from deltanode.failure.kinds import FailureKind
from deltanode.mq import kafka
from deltanode.mq import pulsar as pulsar_mq
from deltanode.mq.broker import Broker, BrokerError, BrokerUnreachable
from deltanode.mq.pulsar_probe import Handshake
from deltanode.pipeline import cycle, read_stalls
from deltanode.pipeline.cycle import CycleRunner
from deltanode.pipeline.cycle_apply import Launched
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.plan import Plan
from deltanode.pipeline.registry import VchannelRegistry
from deltanode.pipeline.vchannel_stops import VchannelStops
from deltanode.records import Portion, ReadRange, ReadStats, TaskOutput, TaskSpec
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import FlowgraphStatus, VchannelFlowgraph
from deltanode.vchannel.start_state import TopicRecreated
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import schema_from_json

from .fakes import FakeBrokerMetadata
from .vchannels import flowgraph, loaded, read_rows, stages

PARTITIONS = 50
SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}
STALLED = pchannel_name("dml", 1)


class _Admin:
    """An admin client whose ListOffsets answer is the error ``code`` for the topics in ``failing``
    (every topic when None), offset 5 for the others."""

    made = 0
    failing: set[str] | None = None

    def __init__(self, code: int) -> None:
        type(self).made += 1
        self.code = code

    def poll(self, timeout: float) -> int:
        return 0

    def list_offsets(self, request: dict, request_timeout: float) -> dict:
        out = {}
        for tp in request:
            future: Future = Future()
            if self.failing is None or tp.topic in self.failing:
                future.set_exception(KafkaException(KafkaError(self.code)))
            else:
                future.set_result(SimpleNamespace(offset=5))
            out[tp] = future
        return out


class _Consumer:
    """The planner's consumer: ``topics`` in its metadata answers, which it counts."""

    def __init__(self, topics: set[str]) -> None:
        self.topics, self.listed = topics, 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> SimpleNamespace:
        self.listed += 1
        return SimpleNamespace(topics={t: SimpleNamespace(error=None) for t in self.topics})

    def poll(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        pass


def _kafka_marks(monkeypatch, code: int, topics: set[str] = frozenset()) -> tuple[kafka.Watermarks, _Consumer]:
    consumer = _Consumer(set(topics))
    _Admin.made, _Admin.failing = 0, None
    monkeypatch.setattr(kafka, "new_client", lambda kind, *args: _Admin(code) if kind is AdminClient else consumer)
    return kafka.Watermarks("kafka-1:9092"), consumer


def test_kafka_partitions_answered_under_stale_leader_epochs_make_one_new_admin_client_per_question(monkeypatch):
    marks, _ = _kafka_marks(monkeypatch, KafkaError.FENCED_LEADER_EPOCH)
    keys = [(f"dml_{i}", 0) for i in range(PARTITIONS)]
    found = marks.highs(keys)
    assert all(isinstance(found[key], BrokerUnreachable) for key in keys)
    assert _Admin.made == 1 and marks._admin is None   # made again once, at the next question
    marks.highs(keys)
    assert _Admin.made == 2


def test_kafka_partitions_without_a_leader_are_looked_up_in_one_metadata_request(monkeypatch):
    marks, consumer = _kafka_marks(monkeypatch, KafkaError._NOENT, topics={f"dml_{i}" for i in range(1, PARTITIONS)})
    keys = [(f"dml_{i}", 0) for i in range(PARTITIONS)]
    found = marks.highs(keys)
    assert consumer.listed == 1 and _Admin.made == 1
    assert type(found[("dml_0", 0)]) is BrokerError and "dml_0" in str(found[("dml_0", 0)])   # not on the broker
    assert all(isinstance(found[key], BrokerUnreachable) for key in keys[1:])   # a leader not elected yet


@pytest.fixture
def pulsar_marks(monkeypatch):
    """The driver's Pulsar watermarks: ``marks.errors`` maps a topic to the client's error for it
    (the others are at 7), ``marks.connects`` says whether the broker accepts a CONNECT sent by
    hand, ``marks.asked`` the topics asked in order; the clock is ``marks.clock[0]``."""
    marks = pulsar_mq.Watermarks("pulsar://127.0.0.1:1")
    marks.errors, marks.connects, marks.asked, marks.clock = {}, True, [], [1000.0]   # type: ignore[attr-defined]

    def high(topic: str) -> int:
        marks.asked.append(topic)   # type: ignore[attr-defined]
        if topic in marks.errors:   # type: ignore[attr-defined]
            raise marks.errors[topic]   # type: ignore[attr-defined]
        return 7
    monkeypatch.setattr(marks, "_high", high)
    monkeypatch.setattr(marks, "_handshake", lambda fresh=False: Handshake(connected=marks.connects))  # type: ignore[attr-defined]
    monkeypatch.setattr(pulsar_mq.time, "monotonic", lambda: marks.clock[0])   # type: ignore[attr-defined]
    marks._disconnected_at = marks.clock[0]   # type: ignore[attr-defined]
    yield marks
    marks.close()


def test_a_pulsar_topic_that_times_out_while_the_broker_answers_does_not_stop_the_topics_after_it(pulsar_marks):
    keys = [(t, 0) for t in ("a", "b", "c", "d")]
    pulsar_marks.errors["b"] = pulsar.Timeout()
    found = pulsar_marks.highs(keys)
    assert pulsar_marks.asked == ["a", "b", "c", "d"]
    assert {k: v for k, v in found.items() if k != ("b", 0)} == {("a", 0): 7, ("c", 0): 7, ("d", 0): 7}
    assert isinstance(found[("b", 0)], BrokerUnreachable) and "this topic alone" in str(found[("b", 0)])
    pulsar_marks.connects, pulsar_marks.asked = False, []   # the broker away: a timeout stops the rest
    found = pulsar_marks.highs(keys)
    assert pulsar_marks.asked == ["a", "b"]
    assert all(isinstance(found[(t, 0)], BrokerUnreachable) for t in "bcd")
    pulsar_marks.connects, pulsar_marks.asked = True, []   # b's consumer has no connection yet: nor would the rest
    pulsar_marks.errors["b"] = pulsar.NotConnected()
    found = pulsar_marks.highs(keys)
    assert pulsar_marks.asked == ["a", "b"]
    assert all(isinstance(found[(t, 0)], BrokerUnreachable) for t in "bcd")


def test_a_pulsar_lookup_failed_long_after_any_connection_error_is_the_brokers_answer(pulsar_marks):
    keys = [("dml_0", 0), ("dml_1", 0)]
    pulsar_marks.errors["dml_0"] = pulsar.BrokerMetadataError()
    assert isinstance(pulsar_marks.highs(keys)[("dml_0", 0)], BrokerUnreachable)   # the client just made
    pulsar_marks.clock[0] += pulsar_mq.LOADING_GRACE + 1
    for error in (pulsar.BrokerMetadataError(), pulsar.LookupError()):
        pulsar_marks.errors["dml_0"] = error
        found = pulsar_marks.highs(keys)[("dml_0", 0)]
        assert type(found) is BrokerError and "does public/default exist?" in str(found), found
    pulsar_marks.errors["dml_1"] = pulsar.ConnectError()   # the broker away, then starting again
    pulsar_marks.connects = False
    pulsar_marks.highs(keys)
    del pulsar_marks.errors["dml_1"]
    pulsar_marks.connects = True
    pulsar_marks.clock[0] += pulsar_mq.LOADING_GRACE / 2
    assert isinstance(pulsar_marks.highs(keys)[("dml_0", 0)], BrokerUnreachable)
    pulsar_marks.clock[0] += pulsar_mq.LOADING_GRACE
    assert type(pulsar_marks.highs(keys)[("dml_0", 0)]) is BrokerError


def commit(s, *fgs) -> None:
    s.syncs.sync({fg.vchannel: fg for fg in fgs}, time.monotonic(), CycleReport(0))
    assert not any(fg.uncommitted for fg in fgs)


def test_the_watermarks_say_since_when_the_broker_answers_for_each_pchannel(monkeypatch):
    marks, _ = _kafka_marks(monkeypatch, KafkaError._TRANSPORT)
    _Admin.failing = {"dml_1"}
    keys = [("dml_0", 0), ("dml_1", 0)]
    marks.highs(keys)
    assert marks.answered_since("dml_0") == 0.0 and marks.answered_since("dml_1") is None
    _Admin.failing = set()
    before = time.monotonic()
    marks.highs(keys)
    assert marks.answered_since("dml_0") == 0.0 and marks.answered_since("dml_1") >= before


def test_a_topic_created_again_while_its_pchannel_went_unanswered_is_refused_at_the_next_load(tmp_path):
    s = stages(tmp_path)
    broker = FakeBrokerMetadata(topic_ids={"dml_0": "T0", "dml_1": "T1"})
    s.loader.watermarks = broker   # type: ignore[assignment]
    fg = loaded(s, 1)
    read_rows(fg, s.storage, [1])
    commit(s, fg)                                 # under T0, its id cached
    broker.answered["dml_0"] = None               # its watermark unanswered: a load skips the check ...
    broker.topic_ids["dml_0"] = "T9"              # ... and the topic is deleted and created again meanwhile
    assert loaded(s, 2).working.topic_id == ""
    assert loaded(s, 3, 1).working.topic_id == "T1"   # a pchannel answered for is checked, outage or not
    assert broker.asked == ["dml_0", "dml_1"]
    broker.answered["dml_0"] = time.monotonic()   # answered again (the node's outage may still be settling)
    with pytest.raises(TopicRecreated, match="deleted and created again"):
        s.loader.load(flowgraph(1))
    assert broker.asked == ["dml_0", "dml_1", "dml_0"]


class _Highs:
    """The broker's watermarks: every partition at ``high``, but ``STALLED``'s unanswered while ``away``,
    or when asked for alone while ``away_alone`` (after a job, not at a cycle's start); each
    question takes ``slow`` seconds (Pulsar's client waits out its operation timeout)."""

    def __init__(self) -> None:
        self.away = self.away_alone = False
        self.slow, self.asked, self.high = 0.0, 0, 6

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        self.asked += 1
        time.sleep(self.slow)
        away = self.away or (self.away_alone and len(keys) == 1)
        return {key: BrokerUnreachable(f"{key[0]}: no answer within 10 s") if away and key[0] == STALLED
                else self.high for key in keys}


class _Runner(CycleRunner):
    """The cycle runner with its Spark job replaced: every range is read to its end with a tick at
    its last offset, but ``STALLED``'s while ``stalling``: nothing delivered from its third offset on
    (its first vchannel saw a message of its own before, so its portion carries the error too)."""

    stalling = True
    stalled = 0   # cycles that read STALLED and got nothing

    def _run_tasks(self, specs: list[TaskSpec]) -> tuple[list[TaskOutput], list]:
        outputs = []
        pieces = [p for spec in specs for p in spec.pieces]
        self.stalled += self.stalling and any(p.pchannel == STALLED for p in pieces)
        for piece in pieces:
            if piece.pchannel != STALLED or not self.stalling:
                outputs.append(TaskOutput((), (ReadStats(piece.pchannel, piece.first, piece.end,
                                                         messages=piece.end - piece.first, tick=50,
                                                         tick_offset=piece.end - 1),)))
                continue
            error = Failure(kind=FailureKind.BROKER_UNREACHABLE, message=(
                f"no data from {STALLED}[0] at offset {piece.first + 2} for 20 s (range ends at {piece.end})"))
            routed = piece.members[0]
            outputs.append(TaskOutput((Portion(routed, piece.first, piece.end, error=error),),
                                      (ReadStats(STALLED, piece.first, piece.end, error=error,
                                                 routed=frozenset({routed})),)))
        return outputs, []


def _runner(tmp_path) -> tuple[_Runner, VchannelRegistry, _Highs]:
    """Two collections of two shards on pchannels dml_0 and dml_1, every vchannel at offset 1."""
    registry = VchannelRegistry()
    for c in range(2):
        for k in range(2):
            info = VchannelInfo(collectionID=100 + c, channelName=vchannel_name(pchannel_name("dml", k), 100 + c, k))
            info.seek_position.msgID = CODECS["kafka"].to_msg_id(1)
            fg = VchannelFlowgraph(info, schema_from_json(SCHEMA, f"c{c}"), node_id=1)
            fg.load(None, Watermarks(), time.monotonic())
            registry.add(fg)
    storage = StorageLayout(str(tmp_path))
    runner = _Runner(sc=None, storage=storage, broker=Broker("kafka", "127.0.0.1:1"),  # type: ignore[arg-type]
                     limits=Limits(), seal=SealSettings(), registry=registry,
                     failures=VchannelStops(storage=storage, fence=None, load=lambda fg: None,
                                            forget_topic=lambda pchannel: None),
                     flushes=dict, stopping=threading.Event())
    highs = _Highs()
    runner.watermarks = highs   # type: ignore[assignment]
    return runner, registry, highs


def _cycle(runner: _Runner, registry: VchannelRegistry, number: int) -> CycleReport:
    members = registry.begin_cycle()
    report = CycleReport(number)
    try:
        runner.finish(runner.start(members, report, time.monotonic()), members, report)
    finally:
        registry.end_cycle()
    return report


def test_a_range_left_unserved_while_the_broker_answers_its_watermark_fails_its_vchannels_after_a_few_cycles(
        tmp_path):
    runner, registry, _ = _runner(tmp_path)
    stalled = sorted(v for v, fg in registry.members().items() if fg.pchannel == STALLED)
    try:
        for number in range(1, read_stalls.STALLS_TO_FAIL):
            assert not _cycle(runner, registry, number).failed   # waits, as for a broker away
        assert runner.reachability.down_since is not None
        report = _cycle(runner, registry, read_stalls.STALLS_TO_FAIL)
    finally:
        runner.close()
    assert sorted(report.failed) == stalled
    for v in stalled:
        fg = registry.members()[v]
        assert fg.status == FlowgraphStatus.FAILED and fg.last_failure.kind is FailureKind.BROKER
        assert f"{STALLED}[0]: the broker answers its watermark (6)" in fg.last_failure.message
        assert re.search(rf"from offset \d+\): no data from {STALLED}\[0\] at offset \d+ for 20 s",
                         fg.last_failure.message), fg.last_failure.message
    assert all(fg.status == FlowgraphStatus.RUNNING for v, fg in registry.members().items() if v not in stalled)


def test_a_range_left_unserved_is_waited_for_while_the_broker_does_not_answer_or_serves_it_in_between(tmp_path):
    runner, registry, highs = _runner(tmp_path)
    try:
        number = 0
        for stalling in ([True] * (read_stalls.STALLS_TO_FAIL - 1) + [False]) * 2:
            number += 1
            highs.high += 5   # more messages each cycle
            runner.stalling = stalling
            assert not _cycle(runner, registry, number).failed
        runner.stalling, highs.away_alone = True, True   # answered at each cycle's start, not after its job
        for _ in range(2 * read_stalls.STALLS_TO_FAIL):
            number += 1
            highs.high += 5
            assert not _cycle(runner, registry, number).failed
    finally:
        runner.close()
    assert runner.stalled == 2 * (read_stalls.STALLS_TO_FAIL - 1) + 2 * read_stalls.STALLS_TO_FAIL
    assert all(fg.status == FlowgraphStatus.RUNNING for fg in registry.members().values())


def test_a_look_at_the_broker_during_a_job_waits_at_most_its_timeout_and_not_past_the_job(tmp_path, monkeypatch):
    monkeypatch.setattr(cycle, "PROBE_AFTER", 0.05)
    monkeypatch.setattr(cycle, "PROBE_TIMEOUT", 0.2)
    runner, _, highs = _runner(tmp_path)
    highs.slow = 3.0   # the client waits its own timeout, far past the probe's
    plan = Plan((ReadRange(STALLED, 0, 1, 6, ("v",)),), {}, False)
    try:
        job: Future = Future()
        threading.Timer(0.6, lambda: job.set_result(([], []))).start()
        started = time.monotonic()
        assert runner._wait(Launched(plan=plan, job=job)) == ([], [])
        assert time.monotonic() - started < 1.2
        assert highs.asked == 1   # one question at a time
        assert "no answer within 0 s to the watermark request of " in runner.reachability.error
    finally:
        runner.close()
