"""An idle Milvus 2.6 pchannel holds nothing up, on Apache Kafka and Apache Pulsar.

A 2.6 streaming node writes a persisted TimeTick after the messages it appended and none while a
pchannel is idle (docs/milvus-facts.md §13, §14): its vchannels' time stands still until the next
burst. Written by Milvus's own Go code (pkg/v2 v2.6.6 through tests/milvus_wal), each burst closed
by a TimeTick: collection A has a shard on each of two pchannels, collection B one shard on the busy
pchannel that gets no message of its own after its CreateCollection. The first pchannel goes idle
(no message, no TimeTick) for longer than the readers' stall timeout and many idle checkpoint
intervals while the second takes inserts, deletes and a ManualFlush; the pipeline is restarted in
the middle of it; then the idle pchannel gets messages again. What must hold meanwhile: the busy
vchannels' checkpoints move (the silent sibling's too), the flush completes, no vchannel fails,
stalls or lags for idleness (the node's health, readiness, progress and lag figures), ``admin
verify`` finds the idle vchannel caught up, a restart starts the idle vchannel at its pchannel's
head; and at the end every row of every vchannel is in Delta exactly once (multisets of (pk, ts)),
the idle one's among them.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from typing import Any

import pytest
from google.protobuf import json_format

from deltanode.admin.verify import behind
from deltanode.config.sections.pipeline import PipelineSettings, SyncSettings, TriggerSettings
from deltanode.datacoord.catalog import CollectionRecord, encode_schema
from deltanode.datanode.channel_handler import FlowgraphManager
from deltanode.datanode.metrics import DataNodeCollector, NodeView, health, readiness
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.mq import kafka_read
from deltanode.mq.pulsar_positions import position as pulsar_position
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.pipeline import Pipeline
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.vchannel.flowgraph import FlowgraphStatus
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import now_ts
from deltanode.wire.schema import schema_from_json

from .milvus26_wal import append_step, open_step, tso
from .support import ALL_BROKERS, high_watermark, wait_until
from .test_milvus26_stream import Writer

pytestmark = pytest.mark.spark
SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                     {"name": "vec", "data_type": "FloatVector", "dim": 2}]}
CHECKPOINT_INTERVAL = 1.0                     # the idle checkpoint interval, shortened
IDLE_S = kafka_read.STALL_TIMEOUT + 4.0       # longer than a read may go unserved (Pulsar's is the same)
LAG_ALLOWED_S = 5.0                           # a checkpoint this far behind the clock is not "lagging"
_ids = itertools.count(int(time.time()) % 100000 * 100 + 71)


class Node:
    """One 2.6 streaming node's appends, and what each must put in Delta (from the script alone)."""

    def __init__(self, writer: Writer, kind: str, address: str, pchannels: list[str]) -> None:
        self.write, self.kind, self.p = writer, kind, pchannels
        self.inserts: dict[int, Counter] = {}    # collection -> (pk, ts) of every row inserted
        self.deletes: dict[int, Counter] = {}
        self.rows_of: Counter = Counter()        # vchannel -> rows inserted
        self._tt = 0
        for p in pchannels:
            writer(open_step(kind, address, p, term=1))

    def tt(self) -> int:
        """The next time tick: the wall clock's TSO, always increasing (one allocator)."""
        self._tt = max(self._tt + 1, tso(int(time.time() * 1000)))
        return self._tt

    def append(self, i: int, vchannel: str | None, msg_type: str, header: dict, body: Any = None,
               broadcast: list[str] | None = None, tt: int | None = None) -> int:
        """Append to pchannel ``i``; the message's position as DeltaNode numbers it."""
        out = self.write(append_step(
            self.p[i], msg_type, tt or self.tt(), vchannel=vchannel, header=header,
            body=json_format.MessageToDict(body) if body is not None else {}, last_confirmed="self",
            broadcast=(broadcast, 7) if broadcast else None))
        offset = out["offset"]
        return offset if self.kind == "kafka" else pulsar_position(*map(int, offset.split(":")))

    def create_collection(self, cid: int, shards: list[tuple[int, str]]) -> None:
        """A broadcast CreateCollection: one copy per vchannel ((pchannel index, vchannel) each)."""
        schema = schema_from_json(SCHEMA, f"coll{cid}")
        self.inserts[cid], self.deletes[cid] = Counter(), Counter()
        vchannels = [v for _, v in shards]
        for i, v in shards:
            body = msg_pb2.CreateCollectionRequest(
                base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection), collectionName=f"coll{cid}",
                collectionID=cid, partitionIDs=[cid + 1], partitionNames=["_default"], virtualChannelNames=vchannels,
                physicalChannelNames=[self.p[j] for j, _ in shards], schema=schema.SerializeToString())
            self.append(i, v, "CreateCollection", {"collection_id": str(cid), "partition_ids": [str(cid + 1)],
                                                   "db_id": "1"}, body, broadcast=vchannels)

    def create_segment(self, i: int, vchannel: str, cid: int, segment: int) -> None:
        self.append(i, vchannel, "CreateSegment", {"collection_id": str(cid), "partition_id": str(cid + 1),
                                                   "segment_id": str(segment), "storage_version": "2", "level": "L1"})

    def insert(self, i: int, vchannel: str, cid: int, pks: list[int], segment: int) -> int:
        """An insert as a 2.6 proxy sends it (no timestamps, no segment in the body); ``_h`` places it."""
        body = msg_pb2.InsertRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=vchannel,
            collection_name=f"coll{cid}", collectionID=cid, partitionID=cid + 1, rowIDs=pks, num_rows=len(pks),
            version=msg_pb2.InsertDataVersion.ColumnBased, fields_data=[
                schema_pb2.FieldData(type=schema_pb2.DataType.Int64, field_name="pk", field_id=100,
                                     scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=pks))),
                schema_pb2.FieldData(type=schema_pb2.DataType.FloatVector, field_name="vec", field_id=101,
                                     vectors=schema_pb2.VectorField(dim=2, float_vector=schema_pb2.FloatArray(
                                         data=[float(x) for pk in pks for x in (pk, -pk)])))])
        header = {"collection_id": str(cid), "partitions": [
            {"partition_id": str(cid + 1), "rows": str(len(pks)), "binary_size": "0",
             "segment_assignment": {"segment_id": str(segment)}}]}
        at = self.append(i, vchannel, "Insert", header, body)
        self.inserts[cid].update((pk, self._tt) for pk in pks)
        self.rows_of[vchannel] += len(pks)
        return at

    def delete(self, i: int, vchannel: str, cid: int, pks: list[int]) -> None:
        body = msg_pb2.DeleteRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Delete), shardName=vchannel,
            collection_name=f"coll{cid}", collectionID=cid, partitionID=cid + 1, num_rows=len(pks),
            primary_keys=schema_pb2.IDs(int_id=schema_pb2.LongArray(data=pks)), timestamps=[1] * len(pks))
        self.append(i, vchannel, "Delete", {"collection_id": str(cid), "rows": str(len(pks))}, body)
        self.deletes[cid].update((pk, self._tt) for pk in pks)

    def manual_flush(self, i: int, vchannel: str, cid: int, segments: list[int]) -> None:
        flush_ts = self.tt()   # the message's own time tick, as the streaming node sets it
        self.append(i, vchannel, "ManualFlush", {"collection_id": str(cid), "flush_ts": str(flush_ts),
                                                 "segment_ids": [str(s) for s in segments]}, tt=flush_ts)

    def tick(self, i: int) -> None:
        """The persisted TimeTick a 2.6 node writes once what it appended is acknowledged."""
        tt = self.tt()
        self.append(i, None, "TimeTick", {}, msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(
            msg_type=common_pb2.MsgType.TimeTick, timestamp=tt)), tt=tt)


def node_view(pipe: Pipeline) -> NodeView:
    """The pipeline as a DataNode's /healthz, /readyz and /metrics see it (``DataNode.view``)."""
    return NodeView(node_id=lambda: 1, snapshots=pipe.snapshots, high_watermark=pipe.high_watermark,
                    pipeline_alive=lambda: pipe.alive, etcd_down_since=lambda: None, etcd_error=lambda: "",
                    sessions_lost=lambda: 0, storage_full=lambda: pipe.storage_full,
                    broker_down_since=lambda: pipe.broker_reachability.down_since,
                    broker_error=lambda: pipe.broker_reachability.error,
                    store_down_since=lambda: pipe.store_reachability.down_since,
                    store_error=lambda: pipe.store_reachability.error)


def lag_seconds(view: NodeView) -> dict[str, float]:
    """``deltanode_vchannel_checkpoint_lag_seconds`` of each vchannel, as a scrape reads it."""
    family = next(m for m in DataNodeCollector(view).collect() if m.name == "deltanode_vchannel_checkpoint_lag_seconds")
    return {s.labels["vchannel"]: s.value for s in family.samples}


@ALL_BROKERS
def test_an_idle_milvus26_pchannel_holds_up_no_checkpoint_flush_or_vchannel(spark, mq, tmp_path):
    cid_a, cid_b = next(_ids), next(_ids)
    storage = StorageLayout(str(tmp_path / "delta"))
    schemas = {cid: schema_from_json(SCHEMA, f"coll{cid}") for cid in (cid_a, cid_b)}
    p = [pchannel_name(f"m26i{cid_a}-rootcoord-dml", i) for i in range(2)]
    a0, a1, b = vchannel_name(p[0], cid_a, 0), vchannel_name(p[1], cid_a, 1), vchannel_name(p[1], cid_b, 0)
    owner = {a0: cid_a, a1: cid_a, b: cid_b}
    pchannel_of = {a0: 0, a1: 1, b: 1}
    s0, s1, s1b, s0b = (cid_a + 100 + k for k in range(4))
    cycles: list[CycleReport] = []
    writer = Writer()
    started = time.monotonic()

    def state(v: str):
        return meta.channel_state(storage, owner[v], v)

    def head(i: int) -> int:
        return high_watermark(mq, p[i])

    def at_heads(vchannels) -> bool:
        heads = {i: head(i) for i in {pchannel_of[v] for v in vchannels}}
        return all((st := state(v)) is not None and st.checkpoint_offset >= heads[pchannel_of[v]] for v in vchannels)

    def start() -> Pipeline:
        pipe = Pipeline(spark.sparkContext, storage, mq, PipelineSettings(
            trigger=TriggerSettings(interval=0.2), sync=SyncSettings(checkpoint_interval=CHECKPOINT_INTERVAL)),
            on_cycle=cycles.append).start()
        for v in (a0, a1, b):
            pipe.add(VchannelInfo(collectionID=owner[v], channelName=v), schemas[owner[v]])
        return pipe

    try:
        node = Node(writer, mq.kind, mq.address, p)
        mq.create_topics(p)
        # -- each pchannel's burst closed by a TimeTick, as a 2.6 node writes one.
        node.create_collection(cid_a, [(0, a0), (1, a1)])
        node.create_collection(cid_b, [(1, b)])
        node.create_segment(0, a0, cid_a, s0)
        node.insert(0, a0, cid_a, list(range(1, 41)), s0)
        node.delete(0, a0, cid_a, [2])
        node.tick(0)
        node.create_segment(1, a1, cid_a, s1)
        node.insert(1, a1, cid_a, list(range(10001, 10041)), s1)
        node.tick(1)
        pipe = start()
        wait_until(lambda: at_heads([a0, a1, b]), 60, "every vchannel committed up to its pchannel's head", 0.3)

        # -- p0 idle (no message, no TimeTick), p1 busy: a1 takes rows, deletes and a ManualFlush, each
        # burst closed by a TimeTick; b nothing of its own.
        idle_head = head(0)
        a0_before = state(a0)
        moved: dict[str, set[int]] = {a1: set(), b: set()}
        flushed_after: float | None = None
        flush_written: float | None = None
        idle_from = time.monotonic()
        pk, k, restarted = 20001, 0, False
        while time.monotonic() - idle_from < IDLE_S:
            segment = s1 if flush_written is None else s1b
            node.insert(1, a1, cid_a, list(range(pk, pk + 5)), segment)
            if k % 3 == 2:
                node.delete(1, a1, cid_a, [pk - 3])
            pk, k = pk + 5, k + 1
            if k == 4:
                node.manual_flush(1, a1, cid_a, [s1])
                node.create_segment(1, a1, cid_a, s1b)
                flush_written = time.monotonic()
            node.tick(1)
            if not restarted and time.monotonic() - idle_from > IDLE_S / 2:
                # A restart in the middle of the idle time: the idle vchannel starts at its head.
                pipe.stop()
                pipe = start()
                restarted = True
                assert pipe.registry.get(a0).next_offset == idle_head, "the idle vchannel re-reads after a restart"
            time.sleep(0.7)
            view = node_view(pipe)
            ok, body = health(view)
            ready, _ = readiness(view)
            assert ok and ready, body
            snaps = {s.vchannel: s for s in pipe.snapshots()}
            assert all(s.status == FlowgraphStatus.RUNNING and s.failures == 0 for s in snaps.values()), snaps
            a0_now = state(a0)
            assert (a0_now.checkpoint_offset, a0_now.checkpoint_ts) == (a0_before.checkpoint_offset,
                                                                        a0_before.checkpoint_ts)
            for v, offsets in moved.items():
                offsets.add(state(v).checkpoint_offset)
            st1 = state(a1)
            if flushed_after is None and flush_written is not None and st1.segments[s1].state == SegmentState.FLUSHED:
                flushed_after = time.monotonic() - flush_written
        idle_s = time.monotonic() - idle_from

        # The idle vchannel at the end of its idle time: caught up by every figure a node shows.
        view = node_view(pipe)
        wait_until(lambda: pipe.high_watermark(p[0]) is not None, 10, "a cycle to see p0's high watermark")
        progress = {r["vchannel"]: r for r in FlowgraphManager(pipe).progress()}
        lags = lag_seconds(view)
        record = CollectionRecord(collection_id=cid_a, name=f"coll{cid_a}", schema_b64=encode_schema(schemas[cid_a]),
                                  shards=2, vchannels=[a0, a1], pchannels=p)
        asked = time.monotonic()
        late = behind(storage, record, now_ts(), 5.0, mq)
        verify_s = time.monotonic() - asked
        wait_until(lambda: at_heads([a1, b]), 30, "the busy pchannel's vchannels to reach its head", 0.3)

        # -- p0 wakes: rows into its open segment, its own ManualFlush, a new segment.
        node.insert(0, a0, cid_a, list(range(41, 61)), s0)
        node.manual_flush(0, a0, cid_a, [s0])
        node.create_segment(0, a0, cid_a, s0b)
        node.insert(0, a0, cid_a, list(range(61, 71)), s0b)
        node.tick(0)
        node.insert(1, a1, cid_a, list(range(pk, pk + 5)), s1b)
        node.tick(1)
        wait_until(lambda: at_heads([a0, a1, b]), 60, "every vchannel committed up to its head after p0 woke", 0.3)
        pipe.stop()
    finally:
        writer.close()
    elapsed = time.monotonic() - started

    inserts = read_table(storage, storage.insert_log(cid_a), ["pk", "_ts"], include_deleted=True)
    deletes = read_table(storage, storage.delta_log(cid_a), ["pk", "_ts"])
    got_inserts = Counter(zip(inserts.column("pk").to_pylist(), inserts.column("_ts").to_pylist()))
    got_deletes = Counter(zip(deletes.column("pk").to_pylist(), deletes.column("_ts").to_pylist()))
    b_rows = read_table(storage, storage.insert_log(cid_b), ["pk"])
    failed = [f for r in cycles for f in r.failed]
    segments = {(v, sid): (m.state, m.seal_reason, m.num_rows)
                for v in (a0, a1) for sid, m in state(v).segments.items()}
    print(f"{mq.kind}: {writer.steps} steps; p0 idle {idle_s:.1f} s; a1's checkpoint at {len(moved[a1])} offsets, "
          f"b's at {len(moved[b])} meanwhile; a1's ManualFlush Flushed in Delta after {flushed_after} s; "
          f"a0's lag at the end of its idle time: {lags.get(a0)} s, {progress[a0].get('lag_messages')} messages; "
          f"verify's wait for a0 {verify_s:.1f} s, behind {late}; inserts {sum(node.inserts[cid_a].values())} "
          f"expected, {sum(got_inserts.values())} found (a0 {node.rows_of[a0]}, a1 {node.rows_of[a1]}); deletes "
          f"{sum(node.deletes[cid_a].values())} expected, {sum(got_deletes.values())} found; b's rows "
          f"{0 if b_rows is None else b_rows.num_rows}; {len(cycles)} cycles, {len(failed)} failures; {elapsed:.1f} s")

    assert got_inserts == node.inserts[cid_a]
    assert got_deletes == node.deletes[cid_a]
    assert b_rows is None or b_rows.num_rows == 0
    assert failed == []
    assert restarted and idle_s >= IDLE_S
    # The busy vchannels' checkpoints moved all along, the silent sibling's with them.
    assert len(moved[a1]) >= 5 and len(moved[b]) >= 5, moved
    assert flushed_after is not None and flushed_after < 10.0, "the busy vchannel's ManualFlush did not complete"
    assert progress[a0]["status"] == "running" and progress[a0]["lag_messages"] == 0, progress[a0]
    assert lags[a0] < LAG_ALLOWED_S, f"the idle vchannel shows a checkpoint lag of {lags[a0]:.0f} s"
    assert late == () and verify_s < 2.0, f"admin verify found {late} behind after {verify_s:.1f} s"
    assert segments == {
        (a0, s0): (SegmentState.FLUSHED, "manual flush", 60),
        (a0, s0b): (SegmentState.GROWING, "", 10),
        (a1, s1): (SegmentState.FLUSHED, "manual flush", node.rows_of[a1] - segments[(a1, s1b)][2]),
        (a1, s1b): (SegmentState.GROWING, "", segments[(a1, s1b)][2]),
    }
    assert segments[(a1, s1)][2] == 40 + 4 * 5
