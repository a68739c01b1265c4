"""Helpers shared by the integration tests (collections on the test broker, waiting)."""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deltanode.config import Conf
from deltanode.config.settings import Settings
from deltanode.datacoord.catalog import create_collection
from deltanode.datacoord.catalog_of_conf import open_catalog
from deltanode.datacoord.coordinator import DataCoord
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table, read_table
from deltanode.etcd.client import EtcdClient
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.state import meta
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import CollectionLayout, schema_from_json

# Run a test on both brokers DeltaNode reads: Apache Kafka and Apache Pulsar.
ALL_BROKERS = pytest.mark.parametrize("mq", ["kafka", "pulsar"], indirect=True)

SCHEMA = {"fields": [
    {"name": "pk", "data_type": "Int64", "is_primary_key": True},
    {"name": "vec", "data_type": "FloatVector", "dim": 8},
    {"name": "title", "data_type": "VarChar", "max_length": 64},
]}


@dataclass
class Collection:
    """A collection with its pchannel topic(s) on the test broker and a producer for it."""

    collection_id: int
    name: str
    pchannels: list[str]
    vchannels: list[str]
    producer: MilvusProducer
    storage: StorageLayout
    schema_doc: dict = field(default_factory=lambda: SCHEMA)

    def committed_offset(self, vchannel: str) -> int:
        table = open_table(self.storage.insert_log(self.collection_id))
        return (table.transaction_version(vchannel) or 0) if table else 0

    def insert_rows(self) -> list[dict]:
        table = read_table(self.storage, self.storage.insert_log(self.collection_id), include_deleted=True)
        return table.to_pylist() if table else []

    def state(self, vchannel: str):
        return meta.channel_state(self.storage, self.collection_id, vchannel)

    @property
    def schema(self):
        return schema_from_json(self.schema_doc, self.name)

    def watch(self, pipeline, *vchannels: str, seek_offset: int | None = None) -> None:
        """Add ``vchannels`` (default: all) to ``pipeline``, from Delta's state or ``seek_offset``."""
        for v in vchannels or self.vchannels:
            info = VchannelInfo(collectionID=self.collection_id, channelName=v)
            if seek_offset is not None:
                info.seek_position.msgID = CODECS[self.producer.broker.kind].to_msg_id(seek_offset)
            pipeline.add(info, self.schema)


def broker_conf(broker: Broker) -> str:
    """The ``mq.*`` lines of a conf file for ``broker``."""
    if broker.kind == "pulsar":
        return f"mq.type = pulsar\nmq.pulsar.service.url = {broker.address}"
    return f"mq.kafka.bootstrap.servers = {broker.address}"


def high_watermark(broker: Broker, topic: str) -> int:
    """The position after ``topic``'s last message."""
    wm = broker.watermarks()
    try:
        return wm.high(topic)
    finally:
        wm.close()


def settled_watermark(coll: Collection, pchannel: str) -> int:
    """The pchannel's high watermark once everything produced so far has landed, a TimeTick last."""
    coll.producer.tick(pchannel)
    coll.producer.flush_producer()
    return high_watermark(coll.producer.broker, pchannel)


def wait_for_checkpoints(producer: MilvusProducer, storage: StorageLayout, collection_id: int,
                         pchannels: list[str], vchannels: list[str], timeout: float, what: str) -> None:
    """Tick every pchannel, then wait until each vchannel's checkpoint (its insert_log ``txn``)
    reaches the end of its pchannel: everything produced before is committed."""
    targets = {}
    for p in pchannels:
        producer.tick(p)
        producer.flush_producer()
        targets[p] = high_watermark(producer.broker, p)

    def reached() -> bool:
        table = open_table(storage.insert_log(collection_id))
        return table is not None and all((table.transaction_version(v) or 0) >= targets[p]
                                         for v, p in zip(vchannels, pchannels))
    wait_until(reached, timeout, what)


def close_kept_clients() -> int:
    """Close the broker clients this process keeps between reads (``read_ranges``' idle Kafka
    consumers, the Pulsar client of each service URL); how many. The product keeps them for the
    next read of a Spark worker; a test that read in its own process closes them at its end, so that
    none is left reconnecting to a broker a later fixture stops. Only modules already imported are
    looked at: a test that never read loads no client library here."""
    reads = (sys.modules.get(f"deltanode.mq.{name}") for name in ("kafka_read", "pulsar_read"))
    return sum(module.close_idle() for module in reads if module is not None)


def duplicated(keys: list) -> list:
    """The keys that occur more than once."""
    return [k for k, n in collections.Counter(keys).items() if n > 1]


def wait_until(predicate, timeout: float = 30.0, what: str = "condition", interval: float = 0.1):
    """Poll ``predicate`` until it returns something true (returned), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class CatalogTraffic:
    """A two-shard collection registered through the catalog (as ``admin create-collection`` does),
    its pchannels ticking every 200 ms, and inserts of 100 rows on both shards: the traffic of the
    tests that run DataNode processes (``spark-submit.sh datanode``) and count rows in Delta."""

    def __init__(self, etcd_endpoint: str, etcd_root: str, mq: Broker, name: str, prefix: str,
                 storage: StorageLayout) -> None:
        schema = schema_from_json(SCHEMA, name)
        with EtcdClient(etcd_endpoint) as client:
            self.record = create_collection(client, etcd_root, mq, name, schema, 2, prefix, 2)
        self.etcd_endpoint, self.etcd_root, self.mq, self.prefix = etcd_endpoint, etcd_root, mq, prefix
        self.storage = storage
        self.proxy = Proxy(mq)
        self.producer = MilvusProducer(self.proxy, CollectionLayout.from_proto(schema), self.record.collection_id, name)
        self.produced: list[tuple[float, int]] = []   # (time produced, pk) of every row
        self._ticks = threading.Event()
        ticker(self.producer, self.record.pchannels, self._ticks)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write_conf(self, path: Path, extra: str) -> Path:
        """The conf of the DataNode and datacoord processes serving this collection; ``extra``: more
        lines (``spark.master`` among them)."""
        path.write_text(f"""
etcd.endpoints = {self.etcd_endpoint}
etcd.root = {self.etcd_root}
{broker_conf(self.mq)}
mq.pchannel.prefix = {self.prefix}
mq.pchannel.count = 2
storage.root = {self.storage.root}
datanode.trigger.interval = 300ms
spark.ui.enabled = false
spark.log.level = ERROR
{extra}
""")
        return path

    @property
    def pks(self) -> list[int]:
        return [pk for _, pk in self.produced]

    def burst(self, pairs: int) -> None:
        """``pairs`` inserts on each shard."""
        record = self.record
        for _ in range(pairs):
            for k in range(2):
                first = self.producer.insert(record.pchannels[k], record.vchannels[k], 70 + k, 1, 100)
                now = time.time()
                self.produced.extend((now, pk) for pk in range(first, first + 100))
        self.producer.flush_producer()

    def run(self, interval: float = 0.5) -> None:
        """A burst of one pair every ``interval`` s on a thread, until ``stop``."""
        def loop() -> None:
            while not self._stop.wait(interval):
                self.burst(1)
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def rows(self) -> list[int]:
        """The primary keys in the collection's insert_log."""
        table = read_table(self.storage, self.storage.insert_log(self.record.collection_id), ["pk"],
                           include_deleted=True)
        return table.column("pk").to_pylist() if table else []

    def wait_committed(self, timeout: float, what: str) -> None:
        wait_for_checkpoints(self.producer, self.storage, self.record.collection_id, self.record.pchannels,
                             self.record.vchannels, timeout, what)

    def close(self) -> None:
        self.stop()
        self._ticks.set()
        self.proxy.close()


def data_files_added(table_root: str) -> int:
    """How many files a local table's commits added as new data (``dataChange``), compactions aside."""
    log_dir = os.path.join(table_root, "_delta_log")
    added = 0
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json")):
        with open(os.path.join(log_dir, name)) as f:
            added += sum(1 for line in f if '"add"' in line and json.loads(line).get("add", {}).get("dataChange"))
    return added


def coordinator(client: EtcdClient, conf: Conf, balance: bool = True) -> DataCoord:
    """A started DataCoord for ``conf``'s etcd root, storage and broker, quick to react."""
    return DataCoord(client, conf.get("etcd.root"), StorageLayout(conf.get("storage.root")),
                     CODECS[conf.get("mq.type")], open_catalog(Settings.of(conf), client),
                     watch_timeout=30, refresh_interval=0.5, balance=balance).start()


class TwoShards:
    """A collection of two shards in the catalog, a proxy stand-in ticking and inserting into it,
    and its rows in Delta as (collection, pk) pairs."""

    def __init__(self, client: EtcdClient, conf: Conf, name: str, stop: threading.Event) -> None:
        broker = Broker.of(Settings.of(conf).broker)
        schema = schema_from_json(SCHEMA, name)
        self.storage = StorageLayout(conf.get("storage.root"))
        self.record = create_collection(client, conf.get("etcd.root"), broker, name, schema, 2,
                                        conf.get("mq.pchannel.prefix"), conf.get("mq.pchannel.count"))
        self.proxy = Proxy(broker)
        self.producer = MilvusProducer(self.proxy, CollectionLayout.from_proto(schema), self.record.collection_id, name)
        ticker(self.producer, self.record.pchannels, stop)
        self.produced: list[tuple[int, int]] = []

    def produce(self, n: int) -> None:
        r = self.record
        for i in range(n):
            k = i % 2
            first = self.producer.insert(r.pchannels[k], r.vchannels[k], 900 + k, 1, 50)
            self.produced.extend((r.collection_id, pk) for pk in range(first, first + 50))
        self.producer.flush_producer()

    def rows(self) -> list[tuple[int, int]]:
        table = read_table(self.storage, self.storage.insert_log(self.record.collection_id), ["pk"],
                           include_deleted=True)
        return [(self.record.collection_id, pk) for pk in table.column("pk").to_pylist()] \
            if table else []


def fresh_root(name: str) -> str:
    """A storage root of its own in the S3 fixture's bucket (``s3``)."""
    return f"s3://deltanode/{name}-{time.time_ns() % 10**9}"
