"""The shared pipeline reading Apache Pulsar: exactly once, across ledgers whose ranges are shared
among tasks, and across a restart."""

from __future__ import annotations

import collections
import threading
import urllib.request

import pytest

from deltanode.config.sections.pipeline import Limits, PipelineSettings, TriggerSettings
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.pipeline.pipeline import Pipeline
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.names import vchannel_name
from deltanode.wire.positions import pulsar_ledger_entry_at
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .support import SCHEMA, wait_until

pytestmark = pytest.mark.spark
CID = 448700000000000001
PCHANNEL = "pipeline-rootcoord-dml_0"   # no other test writes to it on the session's broker
BAD = b"\x0a\x03not a milvus message"


@pytest.mark.parametrize("mq", ["pulsar"], indirect=True)
def test_two_shards_on_a_pulsar_pchannel_commit_every_row_once_across_ledgers_and_a_restart(spark, mq, pulsar_server,
                                                                                            tmp_path):
    storage = StorageLayout(str(tmp_path / "delta"))
    schema = schema_from_json(SCHEMA, "plite")
    proxy = Proxy(mq)
    producer = MilvusProducer(proxy, CollectionLayout.from_proto(schema), CID, "plite")
    vchannels = [vchannel_name(PCHANNEL, CID, k) for k in range(2)]
    stop_ticks = threading.Event()
    ticker(producer, [PCHANNEL], stop_ticks)
    produced: list[int] = []

    def produce(n: int) -> None:
        for i in range(n):
            first = producer.insert(PCHANNEL, vchannels[i % 2], 80 + i % 2, 1, 20)
            produced.extend(range(first, first + 20))
        producer.flush_producer()

    def pks() -> list[int]:
        table = read_table(storage, storage.insert_log(CID), ["pk"], include_deleted=True)
        return table.column("pk").to_pylist() if table else []

    def run_until_all_committed() -> None:
        pipe = Pipeline(spark.sparkContext, storage, mq,
                        PipelineSettings(limits=Limits(max_messages=40), trigger=TriggerSettings(interval=0.2))).start()
        try:
            for v in vchannels:
                pipe.add(VchannelInfo(collectionID=CID, channelName=v), schema)
            wait_until(lambda: len(pks()) >= len(produced), 90, "every row to be committed from Pulsar")
        finally:
            pipe.stop()

    def new_ledger() -> None:
        """Unload the topic: the broker closes its ledger and writes the next messages to a new one."""
        url = f"{pulsar_server.web_url}/admin/v2/persistent/public/default/{PCHANNEL}/unload"
        urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=30).close()

    try:
        produce(30)
        new_ledger()
        produce(30)
        producer.send_raw(PCHANNEL, BAD)   # quarantined, never a crash
        # Acknowledged before the unload: a send whose ack the unload cuts off is sent again, and
        # the topic holds it twice (docs/pulsar.md: deduplication is off by default).
        producer.flush_producer()
        new_ledger()
        # Ranges of 40 positions, each cut in two for the cycle's two tasks: pieces start inside
        # ledgers and past their last entries.
        run_until_all_committed()
        produce(30)                      # while no pipeline runs; the next one resumes from Delta
        run_until_all_committed()
    finally:
        stop_ticks.set()
        proxy.close()
    got = pks()
    dupes = [pk for pk, n in collections.Counter(got).items() if n > 1]
    table = read_table(storage, storage.quarantine(), ["vchannel", "offset", "msg_type", "reason", "payload"])
    quarantined = table.to_pylist() if table else []
    at = sorted({pulsar_ledger_entry_at(q["offset"]) for q in quarantined})
    print(f"{mq.kind} pipeline: produced {len(produced)} rows, {len(got)} in Delta, {len(dupes)} duplicated; "
          f"quarantined at (ledger, entry) {at}; ledgers {ledgers(pulsar_server.service_url)}")
    assert not dupes and sorted(got) == sorted(produced)
    assert len(ledgers(pulsar_server.service_url)) >= 3
    # The bad message is recorded at its position, never lost: once by each shard, each reading it.
    assert len(at) == 1 and all(q["payload"] == BAD for q in quarantined), quarantined
    offset = quarantined[0]["offset"]
    assert collections.Counter((q["vchannel"], q["offset"]) for q in quarantined) == collections.Counter(
        {(v, offset): 1 for v in vchannels}), quarantined


def ledgers(service_url: str) -> list[int]:
    """The ledgers holding the pchannel's messages, read from the earliest."""
    import pulsar
    client = pulsar.Client(service_url)
    try:
        reader = client.create_reader(f"persistent://public/default/{PCHANNEL}", pulsar.MessageId.earliest,
                                      receiver_queue_size=1000)
        seen: set[int] = set()
        while reader.has_message_available():
            seen.add(reader.read_next(5000).message_id().ledger_id())
        return sorted(seen)
    finally:
        client.close()
