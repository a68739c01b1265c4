"""Vchannels end to end: Milvus wire messages on Apache Kafka or Apache Pulsar -> the shared Spark pipeline -> Delta."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pymilvus.grpc_gen import common_pb2, msg_pb2

from deltanode.delta.tables import open_table, read_table

from .support import ALL_BROKERS, settled_watermark, wait_until

pytestmark = pytest.mark.spark


def caught_up(coll, vchannel, pchannel):
    target = settled_watermark(coll, pchannel)
    return lambda: coll.committed_offset(vchannel) >= target


@ALL_BROKERS
def test_two_shards_on_one_pchannel_share_its_reads_and_commits(pipelines, make_collection):
    coll = make_collection(shards=2, shared_pchannel=True)
    p = coll.pchannels[0]
    pks = {v: [] for v in coll.vchannels}
    for i in range(30):
        v = coll.vchannels[i % 2]
        first = coll.producer.insert(p, v, segment_id=100 + i % 2, partition_id=7, rows=50)
        pks[v] += range(first, first + 50)
    coll.producer.flush_producer()
    pipe = pipelines(splits=2, max_messages=8)
    coll.watch(pipe)
    for v in coll.vchannels:
        wait_until(caught_up(coll, v, p), timeout=90, what=f"{v} to commit the backlog")
    pipe.stop()
    rows = coll.insert_rows()
    assert len(rows) == 1500
    assert sorted(r["pk"] for r in rows) == sorted(pks[coll.vchannels[0]] + pks[coll.vchannels[1]])
    by_segment = {}
    for r in rows:
        by_segment.setdefault(r["_segment_id"], set()).add(r["pk"])
    assert by_segment[100] == set(pks[coll.vchannels[0]])  # shard filter: each vchannel kept its own
    assert all(len(r["vec"]) == 8 and r["_partition_id"] == 7 for r in rows)
    state = coll.state(coll.vchannels[0])
    assert state.segments[100].num_rows == 750 and state.checkpoint_offset == coll.committed_offset(coll.vchannels[0])
    assert state.checkpoint_ts > 0  # ticks were consumed
    # Both vchannels moved in the same Delta commits: one commit per cycle, a txn each.
    log_dir = f"{coll.storage.insert_log(coll.collection_id)}/_delta_log"
    last = open(f"{log_dir}/{open_table(coll.storage.insert_log(coll.collection_id)).version():020d}.json").read()
    txns = [json.loads(line)["txn"]["appId"] for line in last.splitlines() if '"txn"' in line]
    assert sorted(txns) == sorted(coll.vchannels)


@ALL_BROKERS
def test_deletes_and_bad_messages_are_recorded_and_the_channel_goes_on(pipelines, make_collection):
    coll = make_collection()
    p, v = coll.pchannels[0], coll.vchannels[0]
    prod = coll.producer
    prod.insert(p, v, 1, 1, 10)
    prod.send_raw(p, b"\xff\x00garbage")                                   # does not parse
    prod.send_raw(p, msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=999)).SerializeToString())  # unknown type
    bad = prod.insert_request(v, 1, 1, 5)
    bad.fields_data[1].vectors.dim = 16                                     # wrong dim
    prod.send_raw(p, bad.SerializeToString())
    short = prod.insert_request(v, 1, 1, 5)
    short.num_rows = 4                                                      # row count mismatch
    prod.send_raw(p, short.SerializeToString())
    prod.insert(p, v, 1, 1, 10)
    prod.delete(p, v, 1, [1, 2])
    prod.flush_producer()
    coll.watch(pipelines(splits=1))
    wait_until(caught_up(coll, v, p), timeout=90, what="the channel to pass the bad messages")
    assert len(coll.insert_rows()) == 20
    deletes = read_table(coll.storage, coll.storage.delta_log(coll.collection_id))
    assert sorted(deletes.column("pk").to_pylist()) == [1, 2]
    quarantine = read_table(coll.storage, coll.storage.quarantine())
    mine = quarantine.filter(pa.compute.equal(quarantine.column("vchannel"), v)).to_pylist()
    reasons = sorted(r["reason"] for r in mine)
    assert len(mine) == 4, reasons
    assert any("MsgHeader" in r or "parse" in r for r in reasons)
    assert any("unknown message type 999" in r for r in reasons)
    assert any("dim 16" in r for r in reasons)
    assert any("row count mismatch" in r for r in reasons)
    assert all(r["payload"] and r["offset"] >= 0 for r in mine)


@ALL_BROKERS
def test_flush_drop_partition_and_drop_collection(pipelines, make_collection):
    coll = make_collection()
    p, v = coll.pchannels[0], coll.vchannels[0]
    prod = coll.producer
    coll.watch(pipelines(splits=2))
    prod.insert(p, v, segment_id=1, partition_id=10, rows=10)
    prod.insert(p, v, segment_id=2, partition_id=20, rows=10)
    prod.flush(p)
    prod.insert(p, v, segment_id=3, partition_id=10, rows=10)
    wait_until(caught_up(coll, v, p), 90, "the flush to commit")
    segs = coll.state(v).segments
    assert (segs[1].state, segs[2].state, segs[3].state) == ("Flushed", "Flushed", "Growing")
    assert segs[1].num_rows == 10 and len(coll.insert_rows()) == 30

    prod.drop_partition(p, 20)
    prod.insert(p, v, segment_id=4, partition_id=20, rows=10)   # into the dropped partition
    prod.insert(p, v, segment_id=3, partition_id=10, rows=5)
    wait_until(caught_up(coll, v, p), 90, "the partition drop to commit")
    state = coll.state(v)
    assert state.segments[2].state == "Dropped" and 20 in state.dropped_partitions and 4 not in state.segments
    rows = coll.insert_rows()
    assert len(rows) == 25 and {r["_partition_id"] for r in rows} == {10}  # partition 20's files removed

    prod.drop_collection(p)
    prod.insert(p, v, segment_id=3, partition_id=10, rows=5)
    wait_until(lambda: coll.state(v).collection_dropped, 90, "the collection drop to commit")
    assert all(s.state == "Dropped" for s in coll.state(v).segments.values())
    assert coll.insert_rows() == []


def test_a_drop_read_by_one_task_filters_what_a_concurrent_later_task_kept(pipelines, make_collection):
    """One batch of 8 messages split into [0, 4) and [4, 8): the partition drop at offset 3 is
    seen by the first task only, yet the second task's rows of that partition must not land."""
    coll = make_collection(ticking=False)
    p, v = coll.pchannels[0], coll.vchannels[0]
    prod = coll.producer
    prod.insert(p, v, segment_id=1, partition_id=10, rows=10)        # 0
    first_pk = prod.insert(p, v, segment_id=2, partition_id=20, rows=10)  # 1
    prod.delete(p, v, 10, [1])                                        # 2
    prod.drop_partition(p, 20)                                        # 3
    prod.insert(p, v, segment_id=4, partition_id=20, rows=10)        # 4: dropped partition
    prod.delete(p, v, 20, [first_pk])                                 # 5: dropped partition
    prod.delete(p, v, 10, [2])                                        # 6
    prod.insert(p, v, segment_id=1, partition_id=10, rows=5)         # 7
    assert settled_watermark(coll, p) >= 8
    coll.watch(pipelines(splits=2, max_messages=8))
    wait_until(lambda: coll.committed_offset(v) >= 8, 90, "the 8 messages to commit")
    state = coll.state(v)
    assert 4 not in state.segments and state.segments[2].state == "Dropped"
    assert state.segments[1].num_rows == 15 and state.rows == 25
    rows = coll.insert_rows()
    assert len(rows) == 15 and {r["_partition_id"] for r in rows} == {10}
    deletes = read_table(coll.storage, coll.storage.delta_log(coll.collection_id)).to_pylist()
    assert sorted((d["_partition_id"], d["pk"]) for d in deletes) == [(10, 1), (10, 2)]
