"""A Milvus 2.6 log appended out of time-tick order, mirrored as Milvus's own scanner reads it, on
Apache Kafka and Apache Pulsar.

A 2.6 streaming node allocates a message's time tick, then appends it, and appends run
concurrently: between two persisted TimeTicks messages land in any order, and one whose time tick
is past a TimeTick's may land before that TimeTick (docs/milvus-facts.md §13). The script, written by
Milvus's own Go code (pkg/v2 v2.6.6 through tests/milvus_wal), allocates each message's time tick and
appends in another order, closing each burst with a TimeTick that covers what it allocated:

- shard 0, read from its CreateCollection: a delete of rows inserted with lower time ticks appended
  later, an insert into a segment appended after the Flush of that segment that it precedes in
  time-tick order, a transaction whose members land out of order around a plain insert, and an
  insert past a TimeTick landing before it, still held when the first mirror run stops: that run's
  checkpoint is right before it, and the second run, restarted from Delta, delivers it once;
- shard 1, started (``milvus.start = segments``) from Milvus's channel checkpoint: a TimeTick's
  time tick and its last confirmed id, held back to an open transaction's BeginTxn, after which
  messages at or below the checkpoint land among ones past it. What is at or below it is Milvus's
  segments' (none is persisted in the script: nothing of it is expected in Delta).

What each table must hold is worked out from the script alone, as Milvus's scanner delivers it: every
message once, a transaction's members at their commit's time tick, and from a checkpoint only what
is past it (a transaction by its commit). Compared as multisets of (pk, ts): each row exactly once.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from google.protobuf import json_format

from deltanode.delta.tables import read_table
from deltanode.mq.pulsar_positions import position as pulsar_position
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.state.current_state import current_rows
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.schema import schema_from_json

from .milvus26_wal import LOGICAL_BITS, Written, append_step, etcd_put_step, open_step, run_script, tso
from .milvus_mirror import Mirror
from .support import ALL_BROKERS, wait_until
from .test_milvus26_types import msg_id

pytestmark = pytest.mark.spark
SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                     {"name": "vec", "data_type": "FloatVector", "dim": 2}]}
KEEPALIVE_MS = 600_000   # no transaction of the script expires
_ids = itertools.count(int(time.time()) % 100000 * 100 + 37)


@dataclass(frozen=True)
class Effect:
    """A row change a message makes once delivered: at its own time tick, or its transaction's commit's."""

    vchannel: str
    kind: str            # "insert" or "delete"
    pks: tuple[int, ...]
    tt: int
    txn: int | None
    segment: int = 0


class Node:
    """One streaming node's appends to the collection's two pchannels: each message carries the time
    tick the test allocated it and lands in the order the test appends it."""

    def __init__(self, kind: str, address: str, cid: int) -> None:
        self.kind, self.address, self.cid, self.pid = kind, address, cid, cid + 1
        self.p = [pchannel_name(f"m26r{cid}-rootcoord-dml", i) for i in range(2)]
        self.v = [vchannel_name(p, cid, i) for i, p in enumerate(self.p)]
        self.steps: list[dict] = []
        self.effects: list[Effect] = []
        self.commits: dict[int, int] = {}      # txn id -> its CommitTxn's time tick
        self.last_tick = [0, 0]
        self._clock = tso(int(time.time() * 1000))
        self.run_start = 0
        self.begin_run()

    def begin_run(self) -> None:
        """A writer run: the pchannels opened for writing again."""
        self.run_start = len(self.steps)
        self.steps += [open_step(self.kind, self.address, p) for p in self.p]

    def alloc(self) -> int:
        """The next time tick, a millisecond after the last (the TSO a node's interceptor allocates)."""
        self._clock += 1 << LOGICAL_BITS
        return self._clock

    def _append(self, i: int, msg_type: str, tt: int, *, vchannel: bool = True, header: dict | None = None,
                body: Any = None, txn: int | None = None, last_confirmed: str = "self",
                broadcast: bool = False) -> int:
        self.steps.append(append_step(
            self.p[i], msg_type, tt, vchannel=self.v[i] if vchannel else None, header=header,
            body=json_format.MessageToDict(body) if body is not None else {}, last_confirmed=last_confirmed,
            txn=(txn, KEEPALIVE_MS) if txn is not None else None, broadcast=(self.v, 9) if broadcast else None))
        return len(self.steps) - 1

    def tick(self, i: int, tt: int | None = None, *, last_confirmed: int | None = None) -> int:
        """A persisted TimeTick; ``last_confirmed``: the step its ``_lc`` names (default its own id)."""
        tt = tt or self.alloc()
        self.last_tick[i] = tt
        body = msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick, timestamp=tt))
        lc = "self" if last_confirmed is None else f"step:{last_confirmed - self.run_start + 1}"
        return self._append(i, "TimeTick", tt, vchannel=False, body=body, last_confirmed=lc)

    def create_collection(self) -> list[int]:
        schema = schema_from_json(SCHEMA, f"coll{self.cid}")
        body = msg_pb2.CreateCollectionRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection), collectionName=f"coll{self.cid}",
            collectionID=self.cid, partitionIDs=[self.pid], partitionNames=["_default"],
            virtualChannelNames=self.v, physicalChannelNames=self.p, schema=schema.SerializeToString())
        tt = self.alloc()
        return [self._append(i, "CreateCollection", tt, body=body, broadcast=True, header={
            "collection_id": str(self.cid), "partition_ids": [str(self.pid)], "db_id": "1"}) for i in range(2)]

    def create_segment(self, i: int, segment: int, tt: int) -> int:
        return self._append(i, "CreateSegment", tt, header={
            "collection_id": str(self.cid), "partition_id": str(self.pid), "segment_id": str(segment),
            "storage_version": "2", "level": "L1"})

    def insert(self, i: int, pks: list[int], segment: int, tt: int, txn: int | None = None) -> int:
        """An insert as a 2.6 proxy sends it (no timestamps, no segment), ``_h`` placing it."""
        body = msg_pb2.InsertRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=self.v[i],
            collection_name=f"coll{self.cid}", collectionID=self.cid, partitionID=self.pid, rowIDs=pks,
            num_rows=len(pks), version=msg_pb2.InsertDataVersion.ColumnBased, fields_data=[
                schema_pb2.FieldData(type=schema_pb2.DataType.Int64, field_name="pk", field_id=100,
                                     scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=pks))),
                schema_pb2.FieldData(type=schema_pb2.DataType.FloatVector, field_name="vec", field_id=101,
                                     vectors=schema_pb2.VectorField(dim=2, float_vector=schema_pb2.FloatArray(
                                         data=[float(x) for pk in pks for x in (pk, -pk)])))])
        header = {"collection_id": str(self.cid), "partitions": [
            {"partition_id": str(self.pid), "rows": str(len(pks)), "binary_size": "0",
             "segment_assignment": {"segment_id": str(segment)}}]}
        self.effects.append(Effect(self.v[i], "insert", tuple(pks), tt, txn, segment))
        return self._append(i, "Insert", tt, header=header, body=body, txn=txn)

    def delete(self, i: int, pks: list[int], tt: int, txn: int | None = None) -> int:
        body = msg_pb2.DeleteRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Delete), shardName=self.v[i],
            collection_name=f"coll{self.cid}", collectionID=self.cid, partitionID=self.pid, num_rows=len(pks),
            primary_keys=schema_pb2.IDs(int_id=schema_pb2.LongArray(data=pks)), timestamps=[1] * len(pks))
        self.effects.append(Effect(self.v[i], "delete", tuple(pks), tt, txn))
        return self._append(i, "Delete", tt, header={"collection_id": str(self.cid), "rows": str(len(pks))},
                            body=body, txn=txn)

    def flush(self, i: int, segment: int, tt: int) -> int:
        return self._append(i, "Flush", tt, header={"collection_id": str(self.cid), "partition_id": str(self.pid),
                                                    "segment_id": str(segment)})

    def begin(self, i: int, txn: int, tt: int) -> int:
        return self._append(i, "BeginTxn", tt, header={"keepalive_milliseconds": str(KEEPALIVE_MS)}, txn=txn)

    def commit(self, i: int, txn: int, tt: int) -> int:
        self.commits[txn] = tt
        return self._append(i, "CommitTxn", tt, txn=txn)

    def run(self) -> list[Written]:
        """The current run's steps through one writer process; the results, by step index."""
        return [Written(step=0, op="")] * self.run_start + run_script(self.steps[self.run_start:])

    # -- what Milvus's scanner delivers, from the script alone ---------------------------------
    def delivered(self, after: dict[str, int]) -> tuple[Counter, Counter, Counter]:
        """(pk, ts) of every insert and delete delivered, and rows per (vchannel, segment): each message
        at its time tick, a transaction's at its commit's (none for one never committed); of a
        vchannel started from a checkpoint (``after``: its time tick), only what is past it."""
        inserts: Counter = Counter()
        deletes: Counter = Counter()
        segments: Counter = Counter()
        for e in self.effects:
            ts = e.tt if e.txn is None else self.commits.get(e.txn)
            if ts is None or ts <= after.get(e.vchannel, 0):
                continue
            (inserts if e.kind == "insert" else deletes).update((pk, ts) for pk in e.pks)
            if e.kind == "insert":
                segments[(e.vchannel, e.segment)] += len(e.pks)
        return inserts, deletes, segments


def current(inserts: Counter, deletes: Counter) -> Counter:
    """A query's answer (docs/milvus-facts.md §8): a delete at T removes its key's rows older than T;
    of the rows left, each key's newest."""
    standing: dict[int, int] = {}
    for pk, ts in inserts:
        if any(dpk == pk and ts < dts for dpk, dts in deletes):
            continue
        standing[pk] = max(ts, standing.get(pk, ts))
    return Counter(standing.items())


def meta_steps(node: Node, endpoints: str, root: str, starts: list[bytes], create_tt: int) -> list[dict]:
    """The collection as RootCoord 2.6 keeps it: database, collection info, a key a field, the partition."""
    base = f"{root}/root-coord"
    b64 = [base64.b64encode(s).decode() for s in starts]
    info = {"ID": str(node.cid), "schema": {"name": f"coll{node.cid}"}, "create_time": str(create_tt),
            "virtual_channel_names": node.v, "physical_channel_names": node.p, "shards_num": 2, "db_id": "1",
            "start_positions": [{"key": p, "data": d} for p, d in zip(node.p, b64)]}
    steps = [etcd_put_step(endpoints, f"{base}/database/db-info/1", "milvus.proto.etcd.DatabaseInfo",
                           {"name": "default", "id": "1"}),
             etcd_put_step(endpoints, f"{base}/database/collection-info/1/{node.cid}",
                           "milvus.proto.etcd.CollectionInfo", info),
             etcd_put_step(endpoints, f"{base}/partitions/{node.cid}/{node.pid}", "milvus.proto.etcd.PartitionInfo",
                           {"partitionID": str(node.pid), "partitionName": "_default",
                            "collection_id": str(node.cid)})]
    steps += [etcd_put_step(endpoints, f"{base}/fields/{node.cid}/{f.fieldID}", "milvus.proto.schema.FieldSchema",
                            json_format.MessageToDict(f)) for f in schema_from_json(SCHEMA, "c").fields]
    return steps


@ALL_BROKERS
def test_a_log_appended_out_of_time_tick_order_is_mirrored_as_milvus_delivers_it(mq, etcd_server, etcd_root,
                                                                                  tmp_path):
    cid = next(_ids)
    node = Node(mq.kind, mq.address, cid)
    mq.create_topics(node.p)
    v0, v1 = node.v
    s0, s0b, s1 = cid + 100, cid + 101, cid + 102
    started = time.monotonic()

    def position(w: Written) -> int:
        """Where DeltaNode numbers the message a step wrote."""
        return w.offset if mq.kind == "kafka" else pulsar_position(*map(int, str(w.offset).split(":")))

    # -- before the mirror: both shards' history; each burst's appends out of its time-tick order.
    for i in range(2):
        node.tick(i)
    creates = node.create_collection()
    create_tt = node._clock
    node.create_segment(0, s0, node.alloc())
    node.create_segment(1, s1, node.alloc())
    # Shard 0, burst A: a delete of rows inserted earlier in time ticks, landing before them; an
    # insert into S0 landing after S0's Flush, which it precedes in time ticks.
    a1, a2, a3, flush, a5, a6 = (node.alloc() for _ in range(6))
    node.delete(0, [1, 12], a3)
    node.insert(0, list(range(11, 21)), s0, a2)
    node.flush(0, s0, flush)
    node.insert(0, list(range(1, 11)), s0, a1)
    node.create_segment(0, s0b, a5)
    node.insert(0, list(range(21, 31)), s0b, a6)
    node.tick(0)
    # Burst B: transaction 72's members land out of order around a plain insert; it deletes a row of A.
    b1, b2, b3, b4, b5, b6 = (node.alloc() for _ in range(6))
    node.begin(0, 72, b1)
    node.insert(0, list(range(61, 66)), s0b, b3)
    node.insert(0, list(range(56, 61)), s0b, b4, txn=72)
    node.insert(0, list(range(51, 56)), s0b, b2, txn=72)
    node.delete(0, [21], b5, txn=72)
    node.commit(0, 72, b6)
    node.tick(0)
    tick_b = node.last_tick[0]
    # Burst C: the insert at c2 is past the TimeTick at tc and lands before it: held until the next.
    c1, tc, c2 = node.alloc(), node.alloc(), node.alloc()
    held = node.insert(0, list(range(76, 81)), s0b, c2)
    node.insert(0, list(range(71, 76)), s0b, c1)
    node.tick(0, tc)
    # Shard 1: a burst before Milvus's checkpoint; then transaction 71 open across it, the checkpoint's
    # TimeTick at tc1 naming its BeginTxn as last confirmed, messages at or below tc1 landing among
    # one past it (e5, before the TimeTick).
    node.insert(1, list(range(1001, 1011)), s1, node.alloc())
    node.tick(1)
    e0, e1, e2, e3, e4, tc1, e5 = (node.alloc() for _ in range(7))
    begin = node.begin(1, 71, e0)
    node.insert(1, list(range(1031, 1036)), s1, e1, txn=71)
    node.insert(1, list(range(1016, 1021)), s1, e3)
    node.insert(1, list(range(1021, 1026)), s1, e5)
    node.insert(1, list(range(1011, 1016)), s1, e2)
    node.delete(1, [1001], e4)
    node.tick(1, tc1, last_confirmed=begin)
    f1, f2, f4, f3 = (node.alloc() for _ in range(4))
    node.insert(1, list(range(1041, 1046)), s1, f2)
    node.delete(1, [1021], f1, txn=71)
    node.insert(1, list(range(1026, 1031)), s1, f4)
    node.commit(1, 71, f3)
    node.tick(1)
    first = node.run()
    endpoints, milvus_root = etcd_server.endpoint, f"{etcd_root}/milvus/meta"
    checkpoint = msg_pb2.MsgPosition(channel_name=v1, msgID=msg_id(mq.kind, first[begin]), timestamp=tc1,
                                     msgGroup="datanode-1")
    run_script(meta_steps(node, endpoints, milvus_root, [msg_id(mq.kind, first[c]) for c in creates], create_tt) + [
        etcd_put_step(endpoints, f"{milvus_root}/datacoord-meta/channel-cp/{v1}", "milvus.proto.msg.MsgPosition",
                      json_format.MessageToDict(checkpoint))])

    mirror = Mirror(etcd_server, SimpleNamespace(mq=mq.kind, broker_address=mq.address, meta_root=milvus_root),
                    tmp_path)
    mirror.env["DELTANODE_MILVUS_START"] = "segments"   # Milvus's channel checkpoint where it has one

    def state(v: str):
        return meta.channel_state(mirror.storage, cid, v)

    def caught_up(targets: dict[str, int], what: str) -> None:
        def behind() -> list[str]:
            return [v for v, tt in targets.items() if (st := state(v)) is None or st.checkpoint_ts < tt]
        try:
            wait_until(lambda: not behind(), 120, what, 0.5)
        except AssertionError:
            raise AssertionError(f"behind: {behind()}\n{mirror.log.read_text()[-4000:]}") from None

    # -- the first run: shard 0 up to the held insert, shard 1 to its last TimeTick.
    mirror.start()
    try:
        caught_up({v0: tick_b, v1: node.last_tick[1]},
                  "the first run to reach shard 0's held insert and shard 1's last tick")
        time.sleep(2.0)   # cycles that read the held insert and its TimeTick, and commit nothing past them
        run1 = state(v0)
        log = mirror.log.read_text()
    finally:
        mirror.stop()
    assert (run1.checkpoint_offset, run1.checkpoint_ts) == (position(first[held]), tick_b), \
        "shard 0's checkpoint is not right before the insert held past its TimeTick"

    # -- written while no mirror runs: the TimeTick that releases the held insert, more on both.
    node.begin_run()
    node.insert(0, list(range(81, 86)), s0b, node.alloc())
    node.tick(0)
    node.insert(1, list(range(1051, 1056)), s1, node.alloc())
    node.tick(1)
    node.run()

    # -- the second run, from what Delta committed.
    mirror.start()
    try:
        caught_up({v0: node.last_tick[0], v1: node.last_tick[1]}, "the second run to reach both shards' last ticks")
        errors = mirror.log_errors()   # both runs' (Mirror.log_errors: not what their stops logged)
    finally:
        mirror.stop()
    elapsed = time.monotonic() - started

    inserts, deletes, segments = node.delivered({v1: tc1})
    storage = mirror.storage
    got_rows = read_table(storage, storage.insert_log(cid), ["pk", "_ts", "_segment_id"], include_deleted=True)
    got_deletes = read_table(storage, storage.delta_log(cid), ["pk", "_ts"])
    got_current = current_rows(storage, cid, "pk")
    got_inserts = Counter(zip(got_rows.column("pk").to_pylist(), got_rows.column("_ts").to_pylist()))
    got_deleted = Counter(zip(got_deletes.column("pk").to_pylist(), got_deletes.column("_ts").to_pylist()))
    got_standing = Counter(zip(got_current.column("pk").to_pylist(), got_current.column("_ts").to_pylist()))
    quarantine = read_table(storage, storage.quarantine(), ["vchannel", "reason"])
    ours = [q for q in (quarantine.to_pylist() if quarantine is not None else []) if q["vchannel"] in node.v]
    print(f"{mq.kind}: {len(node.steps)} steps; inserts {sum(inserts.values())} expected, "
          f"{sum(got_inserts.values())} found; deletes {sum(deletes.values())} expected, "
          f"{sum(got_deleted.values())} found; current {sum(current(inserts, deletes).values())} expected, "
          f"{sum(got_standing.values())} found; quarantined {len(ours)}; {elapsed:.1f} s")
    assert not errors and ours == []
    assert got_inserts == inserts
    assert got_deleted == deletes
    assert got_standing == current(inserts, deletes)
    # S0 took its late insert and is Flushed by its Flush; the others grow.
    states = {(v, sid): (m.state, m.seal_reason, m.num_rows) for v in node.v for sid, m in state(v).segments.items()
              if m.num_rows}
    assert states == {(v0, s0): (SegmentState.FLUSHED, "flush message", segments[(v0, s0)]),
                      (v0, s0b): (SegmentState.GROWING, "", segments[(v0, s0b)]),
                      (v1, s1): (SegmentState.GROWING, "", segments[(v1, s1)])}
    # Shard 1 started at the checkpoint: its last confirmed id, the BeginTxn, and its time tick.
    assert f"{v1}: starts at Milvus's channel checkpoint (offset {position(first[begin])}, ts {tc1})" in log
