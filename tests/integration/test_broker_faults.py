"""The broker failing under a running DataNode, on Apache Kafka and Apache Pulsar.

A broker of this module's own (not the session's, which other tests share; a bounded heap, its
data in the test's directory) is, under traffic,

- killed (SIGKILL) and started again on its data and ports ``DOWN`` seconds later,
- paused (SIGSTOP of its JVM) for 60 or 25 seconds (``paused_for``), then continued,
- cut off from the node for ``CUT`` seconds: the node reaches the broker through a TCP relay
  (``relay.Relay``) the test cuts and restores, the broker advertising the relay's port to the node
  (Kafka: ``ForwardedListener``; Pulsar: the ``forwarded`` listener the node names with
  ``mq.pulsar.listener.name``), while the test's producer reaches the broker directly.

One DataNode (in this process, on the session's Spark, with a coordinator and the suite's etcd)
serves two collections of two shards on the broker's two pchannels, a backlog still being read when
the fault starts. Each test checks that the node
reports the broker down (its reachability, ``/healthz``'s body, the metrics, its status document and
``admin health``) and logs the outage once, not once per cycle or vchannel; keeps its etcd session
and its pipeline and fails no vchannel; and catches up when the broker returns: every row produced
before, during (a partition only: a killed or paused broker takes nothing) and after the fault is in
Delta exactly once, counted as a multiset, and every delete is recorded once and applied.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deltanode.admin import commands
from deltanode.config import Conf
from deltanode.config.settings import Settings
from deltanode.datacoord.catalog import CollectionRecord, create_collection
from deltanode.datanode.metrics import DataNodeCollector, health, readiness
from deltanode.datanode.node import DataNode
from deltanode.datanode.status import read_statuses
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.etcd.client import EtcdClient
from deltanode.mq.broker import Broker, BrokerError, Delivered, Gap, OffsetRange, Sender
from deltanode.mq.milvus_producer import MilvusProducer, Proxy
from deltanode.standalone.kafka_server import EmbeddedKafka, ForwardedListener
from deltanode.standalone.pulsar_server import FORWARDED_LISTENER, EmbeddedApachePulsar
from deltanode.standalone.services import free_port
from deltanode.state.current_state import current_rows
from deltanode.wire.milvus_proto import common_pb2, msg_pb2
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .relay import Relay
from .support import SCHEMA, coordinator, wait_for_checkpoints, wait_until

pytestmark = pytest.mark.spark

HEAP = "256m"      # each private broker's JVM heap
DOWN = 20.0        # seconds a killed broker stays down before it is started again (its start adds 5-15 s)
CUT = 20.0         # seconds the node stays cut off from its broker
ROWS = 10          # rows per insert: one insert per shard and step of the traffic (every 0.2 s)
PARTITION = 1      # the partition every row goes to
# Seconds a broker stays paused: 60 on one broker a run, 25 on the other. Both outlast the reads'
# 20-s stall timeout and the controller's 3-s session timeout, so every effect of a pause shows
# (stalled reads given up, unanswered watermark requests, partitions given new leader epochs); the
# long one on both brokers would take the file past its CI budget. Which broker has it alternates by
# the day, so both have it every other run; DELTANODE_TEST_LONG_PAUSE=kafka|pulsar|both chooses.
LONG_PAUSE = os.environ.get("DELTANODE_TEST_LONG_PAUSE") or ("kafka" if time.gmtime().tm_yday % 2 else "pulsar")


def paused_for(kind: str) -> float:
    return 60.0 if LONG_PAUSE in (kind, "both") else 25.0


class PrivateBroker:
    """A broker started, killed, paused and cut off by this module's tests. The test's producer
    reaches it at its own port; the node there too, or through ``relay``: on Kafka, a listener of
    the broker's own that advertises the relay's port; on Pulsar, the broker's port, with an
    advertised listener at the relay's port that the node names."""

    def __init__(self, kind: str, data_dir: Path) -> None:
        self.kind, self.data_dir = kind, data_dir
        self.port, self.web_port = free_port(), free_port()
        self.forwarded: ForwardedListener | None = None
        if kind == "kafka":
            forwarded_port = free_port()
            self.relay = Relay(f"127.0.0.1:{forwarded_port}")
            self.forwarded = ForwardedListener(port=forwarded_port, advertised_port=self.relay.port)
        else:
            self.relay = Relay(f"127.0.0.1:{self.port}")
        self.server: EmbeddedKafka | EmbeddedApachePulsar | None = None

    def start(self) -> None:
        """Start the broker (again) on its data directory and ports."""
        if self.kind == "kafka":
            self.server = EmbeddedKafka(self.data_dir, self.port, heap=HEAP, forwarded=self.forwarded)
        else:
            self.server = EmbeddedApachePulsar(self.data_dir, self.port, heap=HEAP, web_port=self.web_port,
                                               forwarded_port=self.relay.port)
        self.server.start()

    @property
    def pid(self) -> int:
        assert self.server is not None and self.server.proc is not None
        return self.server.proc.pid

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        assert self.server is not None and self.server.proc is not None
        self.server.proc.wait(30)

    def stop(self) -> None:
        if self.server is not None and self.server.proc is not None and self.server.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)   # a test that failed mid-pause left it stopped: SIGTERM waits for this
            self.server.stop()

    @property
    def direct(self) -> Broker:
        """The broker as the test's producer reaches it; on Kafka, an idempotent producer's (a plain
        one sends a batch again when a paused broker answers late, and the broker keeps both)."""
        if self.kind == "kafka":   # its librdkafka lines while the broker is away are the test's, not the node's
            return Broker("kafka", f"127.0.0.1:{self.port}", client=(("enable.idempotence", "true"),
                                                                     ("log_level", "2")))
        return Broker("pulsar", f"pulsar://127.0.0.1:{self.port}")

    def node_keys(self, *, through_relay: bool) -> dict[str, str]:
        """The node's ``mq.*`` keys: the broker reached directly, or through the relay."""
        if self.kind == "kafka":
            address = self.relay.endpoint if through_relay else f"127.0.0.1:{self.port}"
            return {"mq.kafka.bootstrap.servers": address}
        if not through_relay:
            return {"mq.type": "pulsar", "mq.pulsar.service.url": f"pulsar://127.0.0.1:{self.port}"}
        return {"mq.type": "pulsar", "mq.pulsar.service.url": f"pulsar://{self.relay.endpoint}",
                "mq.pulsar.listener.name": FORWARDED_LISTENER}


@pytest.fixture(scope="module", params=["kafka", "pulsar"])
def private_broker(request, tmp_path_factory) -> Iterator[PrivateBroker]:
    broker = PrivateBroker(request.param, tmp_path_factory.mktemp(f"private-{request.param}"))
    broker.relay.start()
    broker.start()
    try:
        yield broker
    finally:
        broker.relay.cut()
        broker.stop()


class ConfirmingSender:
    """The proxy's sender, keeping what the broker failed to take: rows count as produced only once
    the broker confirmed every message of their step (``Traffic``)."""

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self.failed: list[str] = []

    def produce(self, topic: str, value: bytes, on_delivery: Delivered | None = None) -> None:
        def delivered(position: int, error: str) -> None:
            if error:
                self.failed.append(error)
        self.sender.produce(topic, value, delivered)

    def flush(self, timeout: float = 30.0) -> int:
        return self.sender.flush(timeout)

    def close(self) -> None:
        self.sender.close()


class Traffic:
    """Two collections of two shards on the broker's two pchannels, and a proxy stand-in writing to
    them on a thread: every ``step`` s a TimeTick on each pchannel and, while ``inserting``, an insert
    of ``ROWS`` rows into each shard. A step's rows count as produced (``inserted``, as (collection,
    pk) pairs) once the broker confirmed each of its messages; ``quiet`` stops the thread between
    steps, with nothing left in flight."""

    def __init__(self, client: EtcdClient, root: str, broker: Broker, prefix: str, storage: StorageLayout,
                 step: float = 0.2) -> None:
        self.storage = storage
        self.proxy = Proxy(broker)
        self.sender = ConfirmingSender(self.proxy.sender)
        self.proxy.sender = self.sender    # type: ignore[assignment] - before the producers take it
        self.records: list[CollectionRecord] = []
        self.producers: list[MilvusProducer] = []
        for i in range(2):
            schema = schema_from_json(SCHEMA, f"faults{i}")
            record = create_collection(client, root, broker, f"faults{i}", schema, 2, prefix, 2)
            self.records.append(record)
            self.producers.append(MilvusProducer(self.proxy, CollectionLayout.from_proto(schema),
                                                 record.collection_id, record.name))
        self.pchannels = sorted({p for r in self.records for p in r.pchannels})
        self.inserted: list[tuple[int, int]] = []
        self.shard: dict[tuple[int, int], int] = {}   # (collection, pk) -> the shard its insert went to
        self.deleted: list[tuple[int, int]] = []
        self.unconfirmed: list[str] = []
        self.inserting = True
        self.step = step
        self._lock = threading.Lock()      # one step at a time: the thread's, a burst, a delete
        self._running = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-faults-traffic", daemon=True)

    def start(self) -> Traffic:
        self._running.set()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.step):
            with self._lock:
                if self._running.is_set():   # looked at under the lock: ``quiet`` takes it after clearing
                    self._produce(1 if self.inserting else 0, ROWS)

    def produce(self, inserts: int, rows: int = ROWS) -> None:
        """One step: ``inserts`` inserts of ``rows`` rows into each shard, then a TimeTick on each
        pchannel, all confirmed."""
        with self._lock:
            self._produce(inserts, rows)

    def _produce(self, inserts: int, rows: int) -> None:
        made: list[tuple[int, int]] = []
        for _ in range(inserts):
            for record, producer in zip(self.records, self.producers):
                for k in range(2):
                    first = producer.insert(record.pchannels[k], record.vchannels[k], 100 + k, PARTITION, rows)
                    keys = [(record.collection_id, pk) for pk in range(first, first + rows)]
                    self.shard.update(dict.fromkeys(keys, k))
                    made += keys
        for p in self.pchannels:
            self.producers[0].tick(p)
        self._confirm(made, self.inserted)

    def delete(self, share: int) -> None:
        """Delete every ``share``-th row produced so far and not deleted yet, shard by shard."""
        with self._lock:
            gone = set(self.deleted)
            made: list[tuple[int, int]] = []
            for record, producer in zip(self.records, self.producers):
                mine = [key for key in self.inserted[::share] if key[0] == record.collection_id and key not in gone]
                for k in range(2):
                    keys = [pk for cid, pk in mine if self.shard[(cid, pk)] == k]
                    if keys:
                        producer.delete(record.pchannels[k], record.vchannels[k], PARTITION, keys)
                        made += [(record.collection_id, pk) for pk in keys]
            self._confirm(made, self.deleted)

    def _confirm(self, made: list[tuple[int, int]], into: list[tuple[int, int]]) -> None:
        """Wait until the broker took or refused every message sent (a broker started again may take a
        while to lead its partitions); ``made`` counts only when it took them all."""
        deadline = time.monotonic() + 300
        left = self.sender.flush(10)
        while left and time.monotonic() < deadline:
            left = self.sender.flush(10)
        if left or self.sender.failed:
            self.unconfirmed.append(f"{left} message(s) left, failures {self.sender.failed[:3]}")
            self.sender.failed.clear()
        else:
            into.extend(made)

    def quiet(self) -> None:
        """Stop between two steps: nothing in flight."""
        self._running.clear()
        with self._lock:
            pass

    def resume(self) -> None:
        self._running.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.proxy.close()

    def rows(self, table: str) -> collections.Counter:
        """(collection, pk) -> rows of it in each collection's ``insert_log`` (every row a file
        holds, deleted or not) or ``delta_log`` (every delete recorded)."""
        found: collections.Counter = collections.Counter()
        for record in self.records:
            uri = self.storage.insert_log(record.collection_id) if table == "insert_log" \
                else self.storage.delta_log(record.collection_id)
            rows = read_table(self.storage, uri, ["pk"], include_deleted=True)
            if rows is not None:
                found.update((record.collection_id, pk) for pk in rows.column("pk").to_pylist())
        return found

    def current(self) -> collections.Counter:
        """(collection, pk) -> rows of it in each collection's current state (deletes applied)."""
        found: collections.Counter = collections.Counter()
        for record in self.records:
            rows = current_rows(self.storage, record.collection_id, "pk")
            if rows is not None:
                found.update((record.collection_id, pk) for pk in rows.column("pk").to_pylist())
        return found


class LogLines(logging.Handler):
    """The DeltaNode log lines of a test, as (level, logger, message)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.name, record.getMessage()))

    def matching(self, text: str, level: int = logging.INFO) -> list[str]:
        return [m for lv, _, m in list(self.lines) if text in m and lv >= level]


@pytest.fixture
def log_lines() -> Iterator[LogLines]:
    handler = LogLines()
    logger = logging.getLogger("deltanode")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@dataclass
class Seen:
    """What the test saw of the node while its broker was away (polled every 0.5 s)."""

    reported_after: float | None = None          # seconds from the fault to the node reporting the broker down
    failed: set[str] = field(default_factory=set)   # vchannels seen failed
    dead: set[str] = field(default_factory=set)     # the node's pipeline or session seen gone
    health: dict = field(default_factory=dict)   # /healthz's body, once the broker was reported down
    healthy: bool | None = None
    ready: bool | None = None                    # /readyz's answer at the same time
    metrics: dict[str, float] = field(default_factory=dict)
    status: dict = field(default_factory=dict)   # the node's status document
    admin: dict = field(default_factory=dict)    # admin health's answer
    alerts: list[str] = field(default_factory=list)


def node_gauges(node: DataNode) -> dict[str, float]:
    """The node's own gauges as a scrape reads them."""
    out = {}
    for metric in DataNodeCollector(node.view()).collect():
        for sample in metric.samples:
            if not sample.labels:
                out[sample.name] = sample.value
    return out


def admin_health(conf: Conf, capsys) -> dict:
    capsys.readouterr()
    commands.health(conf, argparse.Namespace())
    return json.loads(capsys.readouterr().out)


def watch_while_away(node: DataNode, conf: Conf, capsys, fault_at: float, seconds: float, seen: Seen) -> None:
    """Poll the node for ``seconds`` after the fault started at ``fault_at`` (monotonic)."""
    first_id = node.node_id
    reported = False
    while time.monotonic() < fault_at + seconds:
        snaps = node.pipeline.snapshots() if node.pipeline else []
        seen.failed |= {s.vchannel for s in snaps if s.status == "failed"}
        if node.pipeline is None or not node.pipeline.alive:
            seen.dead.add("the pipeline loop stopped")
        if not node.registered or node.node_id != first_id:
            seen.dead.add(f"the etcd session changed ({first_id} -> {node.node_id})")
        if not reported and node.pipeline is not None and node.pipeline.broker_reachability.down_since is not None:
            reported = True
            seen.reported_after = time.monotonic() - fault_at
            seen.healthy, seen.health = health(node.view())
            seen.ready = readiness(node.view())[0]
            seen.metrics = node_gauges(node)
            seen.alerts = node.alerts()
            node.publish(node.progress())
            mine = [s for s in read_statuses(node.pipeline.storage) if s.node_id == node.node_id]
            seen.status = mine[0].__dict__ if mine else {}
            seen.admin = admin_health(conf, capsys)
        time.sleep(0.5)


def on_broker(broker: Broker, pchannels: list[str], collections_: list[int]) -> tuple[collections.Counter, ...]:
    """What the broker holds, read back from the first message of each pchannel to its last: the
    (collection, pk) of every inserted row and of every deleted key, as many times as it holds them."""
    inserted: collections.Counter = collections.Counter()
    deleted: collections.Counter = collections.Counter()
    marks = broker.watermarks()
    try:
        ranges = [OffsetRange(p, 0, marks.first(p), marks.high(p)) for p in pchannels]
    finally:
        marks.close()
    for _, chunk in broker.read_ranges([r for r in ranges if r.end > r.start]):
        assert not isinstance(chunk, BrokerError), chunk
        if isinstance(chunk, Gap):
            continue
        for _, payload, _ in chunk:
            kind = msg_pb2.TimeTickMsg.FromString(payload).base.msg_type   # field 1 of every message: its MsgBase
            if kind == common_pb2.MsgType.Insert:
                req = msg_pb2.InsertRequest.FromString(payload)
                if req.collectionID in collections_:
                    inserted.update((req.collectionID, pk) for pk in req.rowIDs)
            elif kind == common_pb2.MsgType.Delete:
                req = msg_pb2.DeleteRequest.FromString(payload)
                if req.collectionID in collections_:
                    deleted.update((req.collectionID, pk) for pk in req.primary_keys.int_id.data)
    return inserted, deleted


@pytest.mark.parametrize("fault", ["kill", "pause", "partition"])
def test_the_datanode_rides_out_its_broker_failing(private_broker, fault, spark, etcd_server, etcd_root, tmp_path,
                                                   log_lines, capsys):
    broker = private_broker
    storage = StorageLayout(str(tmp_path / "delta"))
    prefix = f"bf{time.time_ns() % 10**9}-rootcoord-dml"
    base = {"etcd.endpoints": etcd_server.endpoint, "etcd.root": etcd_root, "storage.root": storage.root,
            "mq.pchannel.prefix": prefix, "mq.pchannel.count": 2, "datanode.trigger.interval": "200ms",
            "session.ttl": "5s", "datacoord.watch.timeout": "30s",
            "datanode.batch.max.messages": 10,   # a backlog takes cycles: a read is under way at the fault
            "datanode.checkpoint.interval": "1s"}   # ticks-only vchannels commit soon: the catch-up shows at once
    direct = Conf.from_dict({**base, **broker.node_keys(through_relay=False)})
    node_conf = Conf.from_dict({**base, **broker.node_keys(through_relay=fault == "partition")})
    client = EtcdClient(etcd_server.endpoint)
    traffic = Traffic(client, etcd_root, broker.direct, prefix, storage)
    coord = coordinator(client, direct)
    node = DataNode(Settings.of(node_conf), spark.sparkContext).start()
    seen = Seen()
    away = {"kill": DOWN, "pause": paused_for(broker.kind), "partition": CUT}[fault]
    try:
        traffic.start()
        wait_until(lambda: sum(traffic.rows("insert_log").values()) >= 400, 90, "the node to commit the first rows")
        traffic.delete(7)
        traffic.produce(20, rows=100)   # a backlog the node is still reading when the broker goes away
        if fault != "partition":
            traffic.quiet()              # a killed or paused broker takes nothing: nothing in flight
        before = len(traffic.inserted)
        fault_at = time.monotonic()
        if fault == "kill":
            broker.kill()
            watch_while_away(node, node_conf, capsys, fault_at, away, seen)
            broker.start()
        elif fault == "pause":
            os.kill(broker.pid, signal.SIGSTOP)
            watch_while_away(node, node_conf, capsys, fault_at, away, seen)
            os.kill(broker.pid, signal.SIGCONT)
        else:
            broker.relay.cut()
            watch_while_away(node, node_conf, capsys, fault_at, away, seen)
            broker.relay.restore()
        back_at = time.monotonic()
        during = len(traffic.inserted) - before
        traffic.resume()
        time.sleep(2)
        traffic.delete(5)
        time.sleep(1)
        traffic.inserting = False
        try:
            for record, producer in zip(traffic.records, traffic.producers):
                wait_for_checkpoints(producer, storage, record.collection_id, record.pchannels, record.vchannels,
                                     120, f"{record.name}'s checkpoints to reach the end of its pchannels")
        except AssertionError as e:   # what the node says of itself, to tell why
            raise AssertionError(f"{e}; the node: {node.alerts()}; {node.progress()}; its last cycles "
                                 f"{list(node.pipeline.cycles)[-3:]}") from None
        caught_up = time.monotonic() - back_at
        back = wait_until(lambda: node.pipeline.broker_reachability.down_since is None, 30,
                          "the node to find its broker again")
        still_failed = {s.vchannel for s in node.pipeline.snapshots() if s.status == "failed"}
    finally:
        traffic.close()
        node.stop()
        coord.stop()
        client.close()
    inserted, deleted = collections.Counter(traffic.inserted), collections.Counter(traffic.deleted)
    held, held_deletes = on_broker(broker.direct, traffic.pchannels, [r.collection_id for r in traffic.records])
    found, recorded, current = traffic.rows("insert_log"), traffic.rows("delta_log"), traffic.current()
    standing = collections.Counter(set(inserted) - set(deleted))
    outage = log_lines.matching("broker unreachable at", logging.ERROR)
    again = log_lines.matching("broker reachable again")
    failed_lines = log_lines.matching("flowgraph failed")
    reported = "never reported down" if seen.reported_after is None else \
        f"reported down {seen.reported_after:.1f} s into the fault"
    print(f"{broker.kind} {fault} ({away:.0f} s): {sum(inserted.values())} rows produced ({during} while the broker "
          f"was away), {sum(held.values())} on the broker, {sum(found.values())} in Delta; "
          f"{sum(deleted.values())} deletes, {sum(recorded.values())} recorded; {sum(current.values())} rows "
          f"standing, {sum(standing.values())} expected; {reported}; every row committed {caught_up:.1f} s after "
          f"the broker was back; log: {len(outage)} outage and {len(again)} return line(s), {len(failed_lines)} "
          f"vchannel failure(s)")
    assert not traffic.unconfirmed, f"the test's producer could not confirm: {traffic.unconfirmed}"
    # Every row and delete the broker holds, in Delta exactly once; and the broker holds each row the
    # producer sent exactly once (else the ledger, not DeltaNode, is at fault).
    assert found == held, f"insert_log against the broker: {found - held} extra, {held - found} missing"
    assert recorded == held_deletes, f"delta_log against the broker: {recorded - held_deletes} extra, " \
                                     f"{held_deletes - recorded} missing"
    assert held == inserted and held_deletes == deleted, "the test's producer did not write each message once"
    assert current == standing, f"current state: {current - standing} extra, {standing - current} missing"
    if fault == "partition":
        assert during > 0, "no row was produced while the node was cut off"
    # The node reported the broker away while it was, in every place a user looks, and logged it once.
    assert seen.reported_after is not None and seen.reported_after < away, "the node never reported the broker down"
    assert seen.healthy is True and seen.health["broker"].startswith("unreachable for "), seen.health
    assert seen.ready is False and seen.health["outages"], seen.health   # alive, not persisting
    assert seen.metrics["deltanode_broker_reachable"] == 0, seen.metrics
    assert seen.status.get("broker_unreachable_since") is not None, seen.status
    node_entry = [d for d in seen.admin["datanodes"] if d.get("process")]
    assert seen.admin["healthy"] is False and len(node_entry) == 1, seen.admin
    assert node_entry[0]["broker_unreachable_since"].startswith("broker unreachable since"), seen.admin
    assert any(a.startswith("broker unreachable since") for a in seen.alerts), seen.alerts
    assert len(outage) == 1 and len(again) == 1, (outage, again)
    # It kept its session and its pipeline, failed no vchannel, and found the broker again.
    assert not seen.dead, seen.dead
    assert not failed_lines and not seen.failed and not still_failed, (failed_lines, seen.failed, still_failed)
    assert back
