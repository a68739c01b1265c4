"""A broker that does not answer fails no vchannel: they wait where they stand, the outage is told
once, and what the node shows of it (its status document, /healthz, the metrics) says so. The
clients' errors are sorted into "did not answer" and the rest."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

import pulsar
from confluent_kafka import KafkaError, KafkaException

from deltanode import outages
from deltanode.config.sections.pipeline import Limits, SealSettings
from deltanode.datanode.metrics import DataNodeCollector, NodeView, health, readiness
from deltanode.datanode.status import NodeStatus
from deltanode.delta.layout import StorageLayout
from deltanode.failure.classify import Failure
from deltanode.failure.kinds import FailureKind
from deltanode.mq import kafka, pulsar_client
from deltanode.mq import pulsar as pulsar_mq
from deltanode.mq import reachability as reachability_module
from deltanode.mq.broker import Broker, BrokerError, BrokerUnreachable, OffsetRange
from deltanode.mq.reachability import BrokerReachability
from deltanode.pipeline import cycle
from deltanode.pipeline.cycle import CycleRunner
from deltanode.pipeline.cycle_apply import Launched
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.plan import Plan
from deltanode.pipeline.registry import VchannelRegistry
from deltanode.pipeline.vchannel_stops import VchannelStops
from deltanode.records import ReadRange, ReadStats, TaskOutput, TaskSpec
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import FlowgraphStatus, VchannelFlowgraph
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import schema_from_json

SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}
AWAY = pchannel_name("dml", 1)


class _Highs:
    """The broker's answers: ``AWAY`` unanswered while ``down``, every other pchannel at 6."""

    def __init__(self) -> None:
        self.down = True

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        return {key: BrokerUnreachable(f"{key[0]}: no answer within 10 s") if self.down and key[0] == AWAY else 6
                for key in keys}


class _Runner(CycleRunner):
    """The cycle runner with its Spark job replaced by ``outputs``, the tasks it was given kept."""

    outputs: list[TaskOutput] = []

    def _run_tasks(self, specs: list[TaskSpec]) -> tuple[list[TaskOutput], list]:
        self.specs = specs
        return self.outputs, []


def _runner(tmp_path) -> tuple[_Runner, VchannelRegistry, _Highs]:
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


def _cycle(runner: _Runner, registry: VchannelRegistry, number: int) -> tuple[Launched, CycleReport]:
    members = registry.begin_cycle()
    report = CycleReport(number)
    try:
        launched = runner.start(members, report, time.monotonic())
        runner.finish(launched, members, report)
    finally:
        registry.end_cycle()
    return launched, report


def test_an_unanswered_pchannel_fails_none_of_its_vchannels_and_the_outage_is_logged_once(tmp_path, caplog,
                                                                                          monkeypatch):
    caplog.set_level(logging.INFO, logger="deltanode")
    monkeypatch.setattr(reachability_module, "SETTLED_AFTER", 0.0)   # the first answer ends it
    runner, registry, highs = _runner(tmp_path)
    try:
        away = sorted(v for v, fg in registry.members().items() if fg.pchannel == AWAY)
        for number in (1, 2, 3):
            launched, report = _cycle(runner, registry, number)
            assert not report.failed
            assert {r.pchannel for r in launched.plan.ranges} == {pchannel_name("dml", 0)}   # AWAY is not read
        assert all(registry.members()[v].status == FlowgraphStatus.RUNNING and registry.members()[v].next_offset == 1
                   for v in away)
        assert runner.reachability.down_since is not None and "no answer" in runner.reachability.error
        highs.down = False
        launched, report = _cycle(runner, registry, 4)
        assert {r.pchannel for r in launched.plan.ranges} == {pchannel_name("dml", 0), AWAY}
        assert runner.reachability.down_since is None
    finally:
        runner.close()
    told = [(r.levelname, r.getMessage()) for r in caplog.records if "reachab" in r.getMessage()]
    assert [level for level, _ in told] == ["ERROR", "WARNING"], told
    assert told[0][1].startswith("broker unreachable at 127.0.0.1:1") and "reachable again" in told[1][1]


def test_a_range_the_broker_did_not_serve_leaves_its_vchannels_where_they_stand(tmp_path):
    runner, registry, highs = _runner(tmp_path)
    highs.down = False
    error = Failure(kind=FailureKind.BROKER_UNREACHABLE, message="no data from dml_1[0] at offset 1 for 20 s")
    runner.outputs = [TaskOutput((), (ReadStats(AWAY, 1, 6, error=error),
                                      ReadStats(pchannel_name("dml", 0), 1, 6, messages=5, tick=50, tick_offset=5)))]
    try:
        _, report = _cycle(runner, registry, 1)
    finally:
        runner.close()
    members = registry.members()
    assert not report.failed and all(fg.status == FlowgraphStatus.RUNNING for fg in members.values())
    assert {v: fg.next_offset for v, fg in members.items()} == {v: 1 if fg.pchannel == AWAY else 6
                                                                 for v, fg in members.items()}
    assert runner.reachability.error == error.message


def test_a_long_job_has_the_broker_asked_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr(cycle, "PROBE_AFTER", 0.05)
    runner, _, _ = _runner(tmp_path)
    job: Future = Future()
    threading.Timer(0.5, lambda: job.set_result(([], []))).start()
    plan = Plan((ReadRange(AWAY, 0, 1, 6, ("v",)),), {}, False)
    try:
        assert runner._wait(Launched(plan=plan, job=job)) == ([], [])
    finally:
        runner.close()
    assert runner.reachability.down_since is not None   # told before the job's reads would have


def test_the_outage_is_told_once_and_its_end_once_even_when_the_broker_comes_back_unevenly(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="deltanode")
    clock = [100.0]
    monkeypatch.setattr(outages.time, "monotonic", lambda: clock[0])
    reachability = BrokerReachability("kafka-1:9092")
    for _ in range(5):
        reachability.failed("no answer within 10 s")
    assert reachability.describe().startswith("broker unreachable since ")
    reachability.answered()                      # back, for a cycle ...
    clock[0] += 1
    reachability.failed("FENCED_LEADER_EPOCH")   # ... and not for the next: the same outage
    for _ in range(2):
        clock[0] += reachability_module.SETTLED_AFTER / 2
        reachability.answered()
    assert reachability.down_since is not None   # answering for half of SETTLED_AFTER so far
    clock[0] += reachability_module.SETTLED_AFTER / 2
    reachability.answered()
    assert reachability.down_since is None and reachability.describe() is None and reachability.error == ""
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]


def test_a_node_whose_broker_is_away_does_not_persist_but_stays_live(tmp_path):
    status = NodeStatus("host-1", 7, 1000.0, 10.0, 2, 2, broker_unreachable_since=990.0, broker_error="no answer")
    assert not status.persisting(now=1001.0)
    since = time.time() - 30
    view = NodeView(node_id=lambda: 7, snapshots=list, high_watermark=lambda p: None, pipeline_alive=lambda: True,
                    etcd_down_since=lambda: None, etcd_error=str, sessions_lost=lambda: 0,
                    broker_down_since=lambda: since, broker_error=lambda: "no answer within 10 s")
    ok, body = health(view)
    assert ok and body["broker"].startswith("unreachable for 30 s: no answer")   # a restart would not help
    ready, body = readiness(view)
    assert not ready and body["outages"] == [f"broker {body['broker']}"]
    gauges = {s.name: s.value for m in DataNodeCollector(view).collect() for s in m.samples if not s.labels}
    assert gauges["deltanode_broker_reachable"] == 0 and gauges["deltanode_broker_unreachable_seconds"] >= 30


def test_kafka_errors_of_a_broker_that_did_not_answer_are_told_apart_from_the_others(monkeypatch):
    marks = kafka.Watermarks("127.0.0.1:1")
    try:
        monkeypatch.setattr(marks, "_missing", lambda topics: topics & {"gone"})

        def failed(e: Exception, topic: str = "dml_0") -> BrokerError:
            return marks._errors(marks._admin_client(), {(topic, 0): e}, 10.0)[(topic, 0)]

        def error(code: int, topic: str = "dml_0") -> BrokerError:
            return failed(KafkaException(KafkaError(code)), topic)

        for code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT,
                     KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH):
            assert isinstance(error(code), BrokerUnreachable), code
        assert isinstance(failed(TimeoutError()), BrokerUnreachable)
        assert isinstance(error(KafkaError._NOENT), BrokerUnreachable)           # a leader not elected yet
        for found in (error(KafkaError._NOENT, "gone"), error(KafkaError.UNKNOWN_TOPIC_OR_PART),
                      error(KafkaError.OFFSET_OUT_OF_RANGE)):
            assert type(found) is BrokerError, found
        error(KafkaError.FENCED_LEADER_EPOCH)
        assert marks._admin is None   # made again: it does not learn the new leader epoch by itself
    finally:
        marks.close()


def test_a_kafka_admin_client_without_an_answer_for_long_is_made_again(monkeypatch):
    marks = kafka.Watermarks("127.0.0.1:1")
    clock = [100.0]
    monkeypatch.setattr(kafka.time, "monotonic", lambda: clock[0])
    try:
        marks._answered_at = clock[0]
        admin = marks._admin_client()
        clock[0] += kafka.RENEW_AFTER / 2
        assert isinstance(marks._unanswered("no answer"), BrokerUnreachable) and marks._admin is admin
        clock[0] += kafka.RENEW_AFTER
        marks._unanswered("no answer")
        assert marks._admin is None and marks._answered_at == clock[0]   # the next question makes a new one
    finally:
        marks.close()


def test_pulsar_errors_of_a_broker_that_did_not_answer_are_told_apart_from_the_others():
    for e in (pulsar.Timeout(), pulsar.ConnectError(), pulsar.NotConnected(), pulsar.ServiceUnitNotReady(),
              pulsar.BrokerMetadataError()):
        assert isinstance(pulsar_client.unanswered("reading", e), BrokerUnreachable), e
    for e in (pulsar.TopicNotFound(), pulsar.InvalidTopicName(), pulsar.AuthorizationError()):
        assert type(pulsar_client.unanswered("reading", e)) is BrokerError, e


def test_pulsar_watermarks_stop_asking_once_the_broker_does_not_answer(monkeypatch):
    marks = pulsar_mq.Watermarks("pulsar://127.0.0.1:1")
    try:
        monkeypatch.setattr(marks, "_probe", lambda: None)
        asked = []

        def high(topic: str) -> int:
            asked.append(topic)
            if topic == "b":
                raise pulsar.ConnectError()
            return 7
        monkeypatch.setattr(marks, "_high", high)
        found = marks.highs([("a", 0), ("b", 0), ("c", 0), ("d", 0)])
    finally:
        marks.close()
    assert asked == ["a", "b"] and found[("a", 0)] == 7
    assert all(isinstance(found[(t, 0)], BrokerUnreachable) for t in "bcd")


def test_a_pulsar_topic_that_had_messages_keeps_its_high_watermark_through_a_moment_without(monkeypatch):
    marks = pulsar_mq.Watermarks("pulsar://127.0.0.1:1")
    clock = [100.0]
    monkeypatch.setattr(pulsar_mq.time, "monotonic", lambda: clock[0])
    try:
        assert marks._no_message("new") == 0          # no message yet
        marks._seen["t"] = 42
        assert marks._no_message("t") == 42           # a broker continued after a pause, for a moment
        clock[0] += pulsar_mq.EMPTY_GRACE + 1
        assert marks._no_message("t") == 0            # still none: taken as it is
    finally:
        marks.close()


def test_a_kafka_range_that_delivers_nothing_is_unanswered():
    from deltanode.mq.kafka_read import _Round

    class _Consumer:
        def pause(self, partitions) -> None:
            pass
    ranges = [(0, OffsetRange("dml_0", 0, 5, 9))]
    failed = list(_Round(_Consumer(), ranges).fail_stalled(20.0))   # type: ignore[arg-type]
    assert len(failed) == 1 and isinstance(failed[0][1], BrokerUnreachable)
