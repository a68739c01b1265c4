"""``admin flush`` with traffic flowing: Milvus's Flush (DataCoord seals, FlushChannels at a flush ts)."""

from __future__ import annotations

import argparse
import collections
import json
import threading
import time

import pytest

from deltanode.admin import commands
from deltanode.config.settings import Settings
from deltanode.datanode.node import DataNode
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.etcd import flush_request
from deltanode.etcd.client import EtcdClient
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.wire.milvus_proto import msg_pb2

from .support import TwoShards, coordinator, wait_until

pytestmark = pytest.mark.spark
OLD, NEW = (900, 901), (910, 911)    # each shard's segment before and after the flush


def test_admin_flush_seals_every_segment_at_the_flush_ts_while_traffic_flows(spark, conf, capsys):
    root, storage = conf.get("etcd.root"), StorageLayout(conf.get("storage.root"))
    client = EtcdClient(conf.get("etcd.endpoints"))
    coord = coordinator(client, conf)
    node = DataNode(Settings.of(conf), spark.sparkContext).start()
    stop, quiet = threading.Event(), threading.Event()
    coll = TwoShards(client, conf, "flushed", stop)
    record = coll.record
    segments = list(OLD)          # what the proxy stand-in writes to; switched once DataCoord sealed
    produced: dict[int, int] = {}     # pk -> segment

    def traffic() -> None:
        while not quiet.is_set():
            for k in range(2):
                segment = segments[k]     # read once: the main thread switches segments meanwhile
                first = coll.producer.insert(record.pchannels[k], record.vchannels[k], segment, 1, 20)
                produced.update((pk, segment) for pk in range(first, first + 20))
            time.sleep(0.05)

    producer = threading.Thread(target=traffic, daemon=True)
    result: dict = {}
    try:
        producer.start()
        wait_until(lambda: len(coll.rows()) >= 400, 90, "the DataNode to commit some rows")
        flusher = threading.Thread(target=lambda: result.update(rc=commands.flush(
            conf, argparse.Namespace(collection=record.name, timeout=60.0))), daemon=True)
        flusher.start()
        wait_until(lambda: client.get(flush_request.flush_key(root, record.collection_id)) is not None, 10,
                   "admin flush to write its request")
        segments[:] = NEW         # as Milvus's proxies get new segments once DataCoord sealed the old
        flusher.join(90)
        time.sleep(1)             # traffic goes on into the new segments
        quiet.set()
        producer.join(10)
        for k in range(2):
            coll.producer.tick(record.pchannels[k])
        coll.producer.flush_producer()
        wait_until(lambda: len(coll.rows()) + len(quarantined(storage, record.collection_id)) >= len(produced), 90,
                   "every row to be committed or quarantined")
    finally:
        quiet.set()
        stop.set()
        node.stop()
        coord.stop()
        client.close()
        coll.proxy.close()
    assert result.get("rc") == 0, capsys.readouterr().err[-2000:]
    report = json.loads(capsys.readouterr().out)
    flush_ts = report["flush_ts"]
    rows = read_table(storage, storage.insert_log(record.collection_id), ["pk", "_segment_id", "_ts"],
                      include_deleted=True).to_pylist()
    by_segment = collections.Counter(r["_segment_id"] for r in rows)
    states = {seg.segment_id: seg for v in record.vchannels
              for seg in meta.channel_state(storage, record.collection_id, v).segments.values()}
    # Every segment written before the flush is Flushed, sealed at the flush ts or just after it
    # (the vchannel had read past it), with its exact row count, and no row after that ts.
    assert sorted(s["segment_id"] for s in report["segments"]) == sorted(OLD)
    for seg_id in OLD:
        seg = states[seg_id]
        assert seg.state == SegmentState.FLUSHED and seg.seal_reason == "flush" and seg.sealed_ts >= flush_ts
        assert seg.num_rows == by_segment[seg_id] > 0
        late = [r for r in rows if r["_segment_id"] == seg_id and r["_ts"] > seg.sealed_ts]
        assert not late, f"segment {seg_id}: {len(late)} rows after its seal ts {seg.sealed_ts}"
    for seg_id in NEW:
        assert states[seg_id].state == SegmentState.GROWING and states[seg_id].num_rows == by_segment[seg_id] > 0
    # Nothing lost: rows the proxy stand-in sent to a sealed segment after its seal ts (it switched
    # segments after admin flush wrote its request) are in quarantine with the reason.
    late = quarantined(storage, record.collection_id)
    pks = [r["pk"] for r in rows]
    assert len(pks) == len(set(pks)), "rows committed twice"
    assert sorted(pks + [pk for pk, _ in late]) == sorted(produced)
    odd = [(pk, produced[pk], reason) for pk, reason in late if "sealed" not in reason or produced[pk] not in OLD]
    assert not odd, f"quarantined rows that were not late for a sealed segment: {odd[:5]}"
    print(f"flush at ts {flush_ts}: segments {sorted(OLD)} Flushed with {[by_segment[s] for s in OLD]} rows, "
          f"{len(late)} later rows to them quarantined; {len(rows)} rows in Delta")


def quarantined(storage: StorageLayout, collection_id: int) -> list[tuple[int, str]]:
    """(pk, reason) of every row of the quarantined InsertRequests."""
    table = read_table(storage, storage.quarantine(), ["payload", "reason"])
    if table is None:
        return []
    out = []
    for payload, reason in zip(*(table.column(c).to_pylist() for c in ("payload", "reason"))):
        msg = msg_pb2.InsertRequest.FromString(payload)
        if msg.collectionID == collection_id:
            out += [(pk, reason) for pk in msg.rowIDs]
    return out
