"""A Milvus 2.6 collection of every type 2.5/2.6 add, mirrored: its etcd meta at the 2.6 keys and its
stream, both written by Milvus's own Go code (pkg/v2 v2.6.6 through tests/milvus_wal), read by
DeltaNode in mirror mode (``spark-submit.sh standalone`` with ``milvus.meta.root``) on Apache Kafka
and Apache Pulsar.

The collection (tests/milvus26_types.py): Text, Timestamptz, Geometry, Int8Vector, a struct array
of an Int32 array and a FloatVector array, nullable fields with nulls, a field with a default
value, a partition key over two partitions, the dynamic field and a BM25 function whose sparse
output never reaches the channel; two shards, each its own pchannel. This test adds the other
vector types a client sends (``VECTORS``): a SparseFloatVector of its own (rows of 0 to 4
entries, indices up to 2^32 - 2), a BinaryVector, a Float16Vector and a BFloat16Vector, each in
the shape the 2.6 proxy gives it on the wire (``vector_field_data``). Its fields, struct array
and function are keys of their own (``root-coord/fields/``, ``struct-array-fields/``,
``functions/``), next to tombstones. Upserts arrive as Milvus's streaming proxy appends them: a
transaction of the keys' Delete and Insert on their vchannel.

On Kafka the second shard's beginning is gone from the broker (DeleteRecords, as retention
does) and ``milvus.start = checkpoint``: that vchannel starts at Milvus's channel checkpoint, a
TimeTick's position, whose msgID is a last-confirmed id (a BeginTxn's, held back by the
transaction open at the checkpoint), and skips what is at or below its time tick: the transaction,
committed after it, lands whole. On Pulsar both shards start at their CreateCollection. Each burst
of appends is closed by a persisted TimeTick, as a 2.6 node writes one.

The rows each table must hold are worked out from the script alone and compared as multisets of
(pk, ts), then field by field; the lake's view gives every vector as Milvus's query does.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import time
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from google.protobuf import json_format

from deltanode.datacoord.milvus_catalog import TOMBSTONE, MilvusCatalog, read_gaps
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.etcd.client import EtcdClient
from deltanode.mq.broker import Broker
from deltanode.state import meta
from deltanode.state.current_state import current_rows
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import CODECS, kafka_msg_id

from .. import milvus26_types as m
from .milvus26_wal import Written, append_step, etcd_put_step, open_step, run_script, tso
from .milvus_mirror import Mirror
from .support import ALL_BROKERS, wait_until

pytestmark = pytest.mark.spark
DataType = schema_pb2.DataType
_ids = itertools.count(int(time.time()) % 100000 * 100 + 26)
KEEPALIVE_MS = 600_000
ROWS = 60            # pks 0..59 in the first writes, their upserts and 60..69 later
TOMBSTONE_TEXT = TOMBSTONE.decode()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# -- the other vector types: fields, values, the wire ----------------------------------------------
# Ids after the struct array's, so the shared collection's numbering stays as it is.
SPLADE, BITS, HALF, BRAIN = 117, 118, 119, 120
BITS_DIM, HALF_DIM, BRAIN_DIM = 16, 4, 4
VECTORS = ("splade", "bits", "half", "brain")
# The largest sparse index Milvus takes: its proxy refuses 2^32 - 1 (typeutil.ValidateSparseFloatRows).
TOP_INDEX = 2**32 - 2


def vector_fields() -> list[schema_pb2.FieldSchema]:
    def one(fid: int, name: str, t: int, dim: int | None) -> schema_pb2.FieldSchema:
        f = schema_pb2.FieldSchema(fieldID=fid, name=name, data_type=t)
        if dim is not None:
            f.type_params.add(key="dim", value=str(dim))
        return f
    return [one(SPLADE, "splade", DataType.SparseFloatVector, None), one(BITS, "bits", DataType.BinaryVector, BITS_DIM),
            one(HALF, "half", DataType.Float16Vector, HALF_DIM),
            one(BRAIN, "brain", DataType.BFloat16Vector, BRAIN_DIM)]


def fields() -> list[schema_pb2.FieldSchema]:
    return m.fields() + vector_fields()


def schema() -> schema_pb2.CollectionSchema:
    out = m.schema()
    out.fields.extend(vector_fields())
    return out


def vectors(v: int) -> dict:
    """The four vectors of row version ``v`` as a client means them: a sparse row as index -> value
    (0 to 4 entries; values at least 0, as Milvus's proxy takes them), 16 bits as 2 bytes, and
    floats each half type holds exactly (65504 and 2^-24: float16's largest and smallest; 2^100
    and 2^-100: beyond float16, exact in bfloat16)."""
    indices = [v % 97, 5000 + v, 2**31 + v, TOP_INDEX][:v % 5]
    return {"splade": {i: v % 13 / 4 + k for k, i in enumerate(indices)},
            "bits": bytes([v * 37 % 256, (v * 91 + 1) % 256]),
            "half": [v % 64 / 4 - 8, 1024.0 + v % 1024, 65504.0, -(2.0**-24)],
            "brain": [v % 32 / 4 - 4, 2.0**100, -(v % 9) * 2.0**-100, 1.5]}


def row(pk: int, version: int) -> dict:
    return m.row(pk, version) | vectors(pk + 1000 * version)


def sparse_bytes(entries: dict[int, float]) -> bytes:
    """A sparse row as Milvus's clients pack it: (uint32 index, float32 value) pairs, little-endian,
    indices increasing."""
    return b"".join(struct.pack("<If", i, x) for i, x in sorted(entries.items()))


def half_bytes(values: list[float]) -> bytes:
    """IEEE half precision, 2 bytes a dimension, little-endian."""
    raw = struct.pack(f"<{len(values)}e", *values)
    assert list(struct.unpack(f"<{len(values)}e", raw)) == values, "a value float16 does not hold exactly"
    return raw


def brain_bytes(values: list[float]) -> bytes:
    """bfloat16: a float32's high half, 2 bytes a dimension, little-endian."""
    words = [struct.pack("<f", x) for x in values]
    assert all(w[:2] == b"\0\0" for w in words), "a value bfloat16 does not hold exactly"
    return b"".join(w[2:] for w in words)


def sparse_dim(rows: list[dict]) -> int:
    """A batch's sparse dim: its largest index + 1 (0 when every row is empty)."""
    return max((max(r["splade"]) + 1 for r in rows if r["splade"]), default=0)


def vector_field_data(rows: list[dict], batch: list[dict]) -> list[schema_pb2.FieldData]:
    """The four fields of an Insert of ``rows``, cut from a client's insert of ``batch`` as the 2.6
    proxy cuts one message a partition (``typeutil.AppendFieldData``, row by row): the sparse
    field's ``vectors.dim`` the batch's sparse dim as the client sent it, its
    ``sparse_float_vector.dim`` the message's own; the others' ``vectors.dim`` the schema's."""
    out = []
    for fid, name, t in ((SPLADE, "splade", DataType.SparseFloatVector), (BITS, "bits", DataType.BinaryVector),
                         (HALF, "half", DataType.Float16Vector), (BRAIN, "brain", DataType.BFloat16Vector)):
        out.append(schema_pb2.FieldData(field_id=fid, field_name=name, type=t))
    splade, bits, half, brain = (fd.vectors for fd in out)
    splade.dim = sparse_dim(batch)
    splade.sparse_float_vector.dim = sparse_dim(rows)
    splade.sparse_float_vector.contents.extend(sparse_bytes(r["splade"]) for r in rows)
    bits.dim, bits.binary_vector = BITS_DIM, b"".join(r["bits"] for r in rows)
    half.dim, half.float16_vector = HALF_DIM, b"".join(half_bytes(r["half"]) for r in rows)
    brain.dim, brain.bfloat16_vector = BRAIN_DIM, b"".join(brain_bytes(r["brain"]) for r in rows)
    return out


def expected_row(r: dict) -> dict:
    """``r`` as the insert table holds it: the shared collection's columns as ``m.expected_row``
    says, a sparse row as its (index, value) pairs in index order, the other three as their bytes."""
    return m.expected_row(r) | {"splade": sorted(r["splade"].items()), "bits": r["bits"],
                                "half": half_bytes(r["half"]), "brain": brain_bytes(r["brain"])}


def lake_vectors(r: dict) -> dict:
    """``r``'s four vectors as the lake's rows give them (docs/spark-sql.md): a sparse row an object
    from index to value, a BinaryVector its bytes as numbers, the half types their floats."""
    return {"splade": {str(i): x for i, x in r["splade"].items()}, "bits": list(r["bits"]), "half": r["half"],
            "brain": r["brain"]}


@dataclass
class Expected:
    """What the tables must hold, from the script: each insert row's (pk, ts) with the version of
    its values, its partition and segment; each delete's (pk, ts)."""

    rows: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict)   # (pk, ts) -> version, part, seg
    inserts: Counter = field(default_factory=Counter)
    deletes: Counter = field(default_factory=Counter)

    def insert(self, pks: list[int], version: int, partition: int, segment: int, ts: int) -> None:
        self.inserts.update((pk, ts) for pk in pks)
        self.rows.update({(pk, ts): (version, partition, segment) for pk in pks})

    def delete(self, pks: list[int], ts: int) -> None:
        self.deletes.update((pk, ts) for pk in pks)

    def after(self, ts: int, pks: set[int]) -> Expected:
        """Only the effects on ``pks`` later than ``ts`` (what a start past ``ts`` reads), and all
        the others."""
        out = Expected()
        out.rows = {k: v for k, v in self.rows.items() if k[0] not in pks or k[1] > ts}
        out.inserts = Counter({k: n for k, n in self.inserts.items() if k[0] not in pks or k[1] > ts})
        out.deletes = Counter({k: n for k, n in self.deletes.items() if k[0] not in pks or k[1] > ts})
        return out

    def live(self) -> Counter:
        """The rows no delete removes (a delete at T removes its key's rows older than T): what a
        reader of the table's current version sees, deletion vectors applied."""
        return Counter({(pk, ts): n for (pk, ts), n in self.inserts.items()
                        if not any(dpk == pk and ts < dts for dpk, dts in self.deletes)})

    def current(self) -> Counter:
        """A query's answer (docs/milvus-facts.md §8): of the live rows, each key's newest."""
        standing: dict[int, int] = {}
        for pk, ts in self.live():
            standing[pk] = max(ts, standing.get(pk, ts))
        return Counter(standing.items())


class Script:
    """The history of one streaming node with the collection's two pchannels: its steps, each
    append's time tick, and what each does to the tables."""

    def __init__(self, kind: str, address: str, cid: int) -> None:
        self.kind, self.address, self.cid = kind, address, cid
        self.p = [pchannel_name(f"m26t{cid}-rootcoord-dml", i) for i in range(2)]
        self.v = [vchannel_name(p, cid, i) for i, p in enumerate(self.p)]
        self.parts = [cid + 1, cid + 2]                          # _default_0, _default_1
        self.segments = {(i, k): cid + 100 + 2 * i + k for i in range(2) for k in range(2)}   # (shard, partition)
        self.expected = Expected()
        self.steps: list[dict] = []
        self.tts: list[int] = []                                 # each step's time tick (0: not an append)
        self.pending: list[tuple] = []                           # effects of the open transaction
        self.last_tt = [0, 0]
        self._tt = 0
        self._lc: list[str | None] = [None, None]               # an open transaction's BeginTxn, per pchannel
        self.run_start = 0
        self.begin()

    def begin(self) -> None:
        """A new writer run: the pchannels opened for writing again."""
        self.run_start = len(self.steps)
        for p in self.p:
            self.steps.append(open_step(self.kind, self.address, p))
            self.tts.append(0)

    def tt(self) -> int:
        self._tt = max(self._tt + 1, tso(int(time.time() * 1000)))
        return self._tt

    def append(self, i: int, msg_type: str, *, body: Any = None, header: dict | None = None, txn: int | None = None,
               vchannel: bool = True, broadcast: bool = False) -> int:
        """Step index of an append to pchannel ``i``; ``_lc`` is the message's own id, or the
        BeginTxn's while a transaction is open on the pchannel (as a 2.6 node holds it back)."""
        tt = self.tt()
        lc = self._lc[i] or "self"
        self.steps.append(append_step(
            self.p[i], msg_type, tt, vchannel=self.v[i] if vchannel else None, header=header,
            body=json_format.MessageToDict(body) if body is not None else {}, last_confirmed=lc,
            txn=(txn, KEEPALIVE_MS) if txn is not None else None, broadcast=(self.v, 7) if broadcast else None))
        self.tts.append(tt)
        self.last_tt[i] = tt
        return len(self.steps) - 1

    def tick(self, i: int) -> None:
        body = msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick))
        self.append(i, "TimeTick", body=body, vchannel=False)

    def create_collection(self, i: int) -> int:
        body = msg_pb2.CreateCollectionRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection), collectionName="every26",
            collectionID=self.cid, partitionIDs=self.parts, partitionNames=["_default_0", "_default_1"],
            virtualChannelNames=self.v, physicalChannelNames=self.p, schema=schema().SerializeToString())
        return self.append(i, "CreateCollection", body=body, broadcast=True, header={
            "collection_id": str(self.cid), "partition_ids": [str(p) for p in self.parts], "db_id": "1"})

    def create_segments(self, i: int) -> None:
        for k, part in enumerate(self.parts):
            self.append(i, "CreateSegment", header={"collection_id": str(self.cid), "partition_id": str(part),
                                                    "segment_id": str(self.segments[(i, k)]), "storage_version": "2",
                                                    "level": "L1"})

    def insert(self, i: int, pks: list[int], version: int = 0, txn: int | None = None) -> list[int]:
        """The rows of ``pks`` at ``version``: one Insert a partition (the proxy splits a batch by
        its partition key), placed in the shard's segment of that partition by ``_h``."""
        steps = []
        batch = [row(pk, version) for pk in pks]
        for k, part in enumerate(self.parts):
            rows = [r for r in batch if r["tenant"] % 2 == k]
            if not rows:
                continue
            segment = self.segments[(i, k)]
            body = m.insert_request(rows, collection_id=self.cid, partition_id=part, shard=self.v[i],
                                    row_ids=[r["pk"] * 10 + version for r in rows])
            body.fields_data.extend(vector_field_data(rows, batch))
            header = {"collection_id": str(self.cid), "partitions": [
                {"partition_id": str(part), "rows": str(len(rows)), "binary_size": "0",
                 "segment_assignment": {"segment_id": str(segment)}}]}
            steps.append(self.append(i, "Insert", body=body, header=header, txn=txn))
            effect = ("insert", [r["pk"] for r in rows], version, part, segment)
            if txn is None:
                self.expected.insert(*effect[1:], self.tts[-1])
            else:
                self.pending.append(effect)
        return steps

    def delete(self, i: int, pks: list[int], txn: int | None = None) -> int:
        """A delete of a partition-key collection: every partition (-1)."""
        body = msg_pb2.DeleteRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Delete), shardName=self.v[i], collection_name="every26",
            collectionID=self.cid, partitionID=-1, num_rows=len(pks),
            primary_keys=schema_pb2.IDs(int_id=schema_pb2.LongArray(data=pks)), timestamps=[1] * len(pks))
        step = self.append(i, "Delete", body=body, header={"collection_id": str(self.cid), "rows": str(len(pks))},
                           txn=txn)
        if txn is None:
            self.expected.delete(pks, self.tts[-1])
        else:
            self.pending.append(("delete", pks))
        return step

    def begin_txn(self, i: int, txn: int) -> int:
        step = self.append(i, "BeginTxn", header={"keepalive_milliseconds": str(KEEPALIVE_MS)}, txn=txn)
        self._lc[i] = f"step:{step - self.run_start + 1}"   # a run's steps count from 1
        return step

    def commit(self, i: int, txn: int) -> int:
        step = self.append(i, "CommitTxn", txn=txn)
        self._lc[i] = None
        for effect in self.pending:   # at the commit's time tick, as Milvus's txn buffer re-stamps them
            if effect[0] == "insert":
                self.expected.insert(*effect[1:], self.tts[step])
            else:
                self.expected.delete(effect[1], self.tts[step])
        self.pending = []
        return step

    def upsert(self, i: int, pks: list[int], version: int, txn: int) -> None:
        """As the 2.6 proxy appends an upsert to one vchannel: a transaction of its Delete and its
        Inserts."""
        self.begin_txn(i, txn)
        self.delete(i, pks, txn=txn)
        self.insert(i, pks, version, txn=txn)
        self.commit(i, txn)

    def run(self) -> list[Written]:
        """Writes the current run's steps with one writer process; the results, by step index."""
        return [Written(step=0, op="")] * self.run_start + run_script(self.steps[self.run_start:])


def meta_steps(s: Script, endpoints: str, root: str, starts: dict[str, bytes], create_tt: int) -> list[dict]:
    """The collection's meta as RootCoord 2.6 keeps it (``root-coord/``), as etcd_put steps."""
    base = f"{root}/root-coord"
    info = {"ID": str(s.cid), "schema": {"name": "every26", "enable_dynamic_field": True},
            "create_time": str(create_tt),
            "virtual_channel_names": s.v, "physical_channel_names": s.p, "shards_num": 2, "db_id": "1",
            "start_positions": [{"key": p, "data": b64(starts[p])} for p in s.p]}
    steps = [etcd_put_step(endpoints, f"{base}/database/db-info/1", "milvus.proto.etcd.DatabaseInfo",
                           {"name": "default", "id": "1"}),
             etcd_put_step(endpoints, f"{base}/database/collection-info/1/{s.cid}", "milvus.proto.etcd.CollectionInfo",
                           info)]
    for f in fields():
        steps.append(etcd_put_step(endpoints, f"{base}/fields/{s.cid}/{f.fieldID}", "milvus.proto.schema.FieldSchema",
                                   json_format.MessageToDict(f)))
    steps.append(etcd_put_step(endpoints, f"{base}/struct-array-fields/{s.cid}/{m.STRUCT_ID}",
                               "milvus.proto.schema.StructArrayFieldSchema",
                               json_format.MessageToDict(m.struct_field())))
    steps.append(etcd_put_step(endpoints, f"{base}/functions/{s.cid}/{m.BM25_ID}", "milvus.proto.schema.FunctionSchema",
                               json_format.MessageToDict(m.bm25())))
    for k, part in enumerate(s.parts):
        steps.append(etcd_put_step(endpoints, f"{base}/partitions/{s.cid}/{part}", "milvus.proto.etcd.PartitionInfo",
                                   {"partitionID": str(part), "partitionName": f"_default_{k}",
                                    "collection_id": str(s.cid)}))
    # Removed keys a snapshot KV leaves behind: a field, a struct array and a function of old.
    for key in (f"fields/{s.cid}/199", f"struct-array-fields/{s.cid}/198", f"functions/{s.cid}/1"):
        steps.append(etcd_put_step(endpoints, f"{base}/{key}", raw=TOMBSTONE_TEXT))
    return steps


def msg_id(kind: str, w: Written) -> bytes:
    """The id a step's message got, in the encoding Milvus's positions use (``MsgPosition.msgID``,
    ``start_positions``): Kafka's offset as 8 bytes little-endian, Pulsar's MessageIdData."""
    if kind == "kafka":
        assert isinstance(w.offset, int)
        return kafka_msg_id(w.offset)
    assert w.id is not None
    return base64.b64decode(w.id)


def delete_records_before(bootstrap: str, offsets: dict[str, int]) -> dict[str, int]:
    """Removes each topic's records before its offset (Kafka's DeleteRecords, as retention does);
    each topic's low watermark afterwards."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_records([TopicPartition(t, 0, o) for t, o in offsets.items()], operation_timeout=30,
                                  request_timeout=60).values():
        f.result()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"low-watermarks-{time.time_ns()}"})
    try:
        return {t: consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=30)[0] for t in offsets}
    finally:
        consumer.close()


def delta_rows(storage: StorageLayout, cid: int) -> list[dict]:
    table = read_table(storage, storage.insert_log(cid), include_deleted=True)
    return table.to_pylist() if table is not None else []


@ALL_BROKERS
def test_every_26_type_is_mirrored_from_milvus_meta_and_stream(mq, etcd_server, etcd_root, tmp_path, spark):
    cid = next(_ids)
    s = Script(mq.kind, mq.address, cid)
    mq.create_topics(s.p)
    v0, v1 = s.v
    on_kafka = mq.kind == "kafka"
    started = time.monotonic()

    # -- before the mirror starts: both shards' first writes; on p1 a transaction open across
    # the point Milvus's channel checkpoint names.
    for i in range(2):
        s.tick(i)
    creates = [s.create_collection(i) for i in range(2)]
    for i in range(2):
        s.create_segments(i)
    even, odd = list(range(0, ROWS, 2)), list(range(1, ROWS, 2))   # a pk's shard, as its hash would pick one
    s.insert(0, even[:20])
    s.insert(1, odd[:10])
    begin = s.begin_txn(1, 611)
    s.insert(1, odd[10:15], txn=611)
    s.delete(1, [1, 3], txn=611)
    s.insert(1, odd[15:20])                       # _lc: the open transaction's BeginTxn
    s.tick(1)                                     # so is the TimeTick's: Milvus's checkpoint
    checkpoint_ts = s.last_tt[1]
    s.commit(1, 611)
    s.insert(1, odd[20:])
    s.delete(0, [0, 2, 4])
    s.upsert(0, [6, 8, 10], 1, txn=612)
    s.insert(0, even[20:])
    for i in range(2):
        s.tick(i)
    first = s.run()
    endpoints, milvus_root = etcd_server.endpoint, f"{etcd_root}/milvus/meta"
    starts = {s.p[i]: msg_id(mq.kind, first[creates[i]]) for i in range(2)}
    steps = meta_steps(s, endpoints, milvus_root, starts, s.tts[creates[0]])
    if on_kafka:   # Milvus's checkpoint of v1: the TimeTick's position, its last confirmed id the BeginTxn's
        position = msg_pb2.MsgPosition(channel_name=v1, msgID=msg_id(mq.kind, first[begin]), timestamp=checkpoint_ts,
                                       msgGroup="datanode-1")
        steps.append(etcd_put_step(endpoints, f"{milvus_root}/datacoord-meta/channel-cp/{v1}",
                                   "milvus.proto.msg.MsgPosition", json_format.MessageToDict(position)))
    run_script(steps)
    with EtcdClient(endpoints) as client:
        record = MilvusCatalog(client, milvus_root, own_client=client, own_root=etcd_root,
                               broker=Broker(mq.kind, mq.address), positions=CODECS[mq.kind]).collections()[0]
    assert [f.fieldID for f in record.schema.fields] == [f.fieldID for f in fields()]
    assert list(record.schema.struct_array_fields) == [m.struct_field()] and list(record.schema.functions) == [m.bm25()]
    assert record.partitions == {"_default_0": s.parts[0], "_default_1": s.parts[1]}
    if on_kafka:   # retention removed p1's beginning: the collection's start is gone
        assert delete_records_before(mq.address, {s.p[1]: first[begin].offset})[s.p[1]] == first[begin].offset

    # -- the mirror, as a user runs it; more writes while it runs.
    milvus = SimpleNamespace(mq=mq.kind, broker_address=mq.address, meta_root=milvus_root)
    mirror = Mirror(etcd_server, milvus, tmp_path)
    mirror.env["DELTANODE_MILVUS_START"] = "checkpoint"
    mirror.start()
    try:
        s.begin()
        s.upsert(1, [5, 7, 21], 1, txn=613)
        s.delete(1, [9])
        s.insert(0, list(range(ROWS, ROWS + 10, 2)))
        s.insert(1, list(range(ROWS + 1, ROWS + 10, 2)))
        for i in range(2):
            s.tick(i)
        s.run()
        last = {v0: s.last_tt[0], v1: s.last_tt[1]}

        def behind() -> list[str]:
            return [v for v, tt in last.items()
                    if (st := meta.channel_state(mirror.storage, cid, v)) is None or st.checkpoint_ts < tt]
        try:
            wait_until(lambda: not behind(), 120, "the mirror to reach the last writes", 0.5)
        except AssertionError:
            raise AssertionError(f"behind: {behind()}\n{mirror.log.read_text()[-4000:]}") from None
        errors = mirror.log_errors()
    finally:
        mirror.stop()
    elapsed = time.monotonic() - started

    expected = s.expected.after(checkpoint_ts, set(odd) | {ROWS + k for k in range(1, 10, 2)}) if on_kafka \
        else s.expected
    storage = mirror.storage
    rows = delta_rows(storage, cid)
    deletes = read_table(storage, storage.delta_log(cid), ["pk", "_ts"])
    current = current_rows(storage, cid, "pk")
    got_inserts = Counter((r["pk"], r["_ts"]) for r in rows)
    got_deletes = Counter(zip(deletes.column("pk").to_pylist(), deletes.column("_ts").to_pylist()))
    got_current = Counter(zip(current.column("pk").to_pylist(), current.column("_ts").to_pylist()))
    quarantine = read_table(storage, storage.quarantine(), ["vchannel", "reason"])
    ours = [q for q in (quarantine.to_pylist() if quarantine is not None else []) if q["vchannel"] in s.v]
    print(f"{mq.kind}: {len(s.steps)} steps; inserts {sum(expected.inserts.values())} expected, "
          f"{sum(got_inserts.values())} found; deletes {sum(expected.deletes.values())} expected, "
          f"{sum(got_deletes.values())} found; current {sum(expected.current().values())} expected, "
          f"{sum(got_current.values())} found; quarantined {len(ours)}; {elapsed:.1f} s")
    assert not errors and ours == []
    assert got_inserts == expected.inserts
    assert got_deletes == expected.deletes
    assert got_current == expected.current()
    # Field by field: each row holds the values its version was sent with, nulls as nulls.
    for r in rows:
        version, partition, segment = expected.rows[(r["pk"], r["_ts"])]
        want = expected_row(row(r["pk"], version)) | {
            "_ts": r["_ts"], "_row_id": r["pk"] * 10 + version, "_partition_id": partition, "_segment_id": segment}
        assert r == want, r["pk"]
    assert {k for k in rows[0]} == set(m.COLUMNS) | set(VECTORS) | {"_ts", "_row_id", "_segment_id", "_partition_id"}
    assert all(any(r[c] is None for r in rows) for c in ("body", "at", "place", "tags", "doc", "flag"))
    # Sparse rows of every length, the empty one and the largest index among them.
    assert {len(r["splade"]) for r in rows} == set(range(5))
    assert any(i == TOP_INDEX for r in rows for i, _ in r["splade"])
    with EtcdClient(endpoints) as client:
        gaps = read_gaps(client, f"deltanode-{tmp_path.name}/meta")
    if on_kafka:   # v1 started at Milvus's checkpoint: its last confirmed id, the BeginTxn
        assert gaps.keys() == {v1} and gaps[v1]["to_offset"] == first[begin].offset
        assert gaps[v1]["to_ts"] == checkpoint_ts
    else:
        assert gaps == {}

    # -- the lake's reader: Spark over the table, rows as JSON as Milvus's query gives them.
    from deltanode.lake.rows_json import RowRenderer
    from deltanode.lake.tables import lake_tables
    from deltanode.lake.views import register
    register(spark, storage, lake_tables([record], storage))
    frame = spark.sql(f"SELECT pk, _ts, at, place, qvec, clips, {', '.join(VECTORS)} FROM every26")
    renderer = RowRenderer(frame.schema)
    docs = [json.loads(renderer.render(one)) for one in frame.collect()]
    assert Counter((d["pk"], d["_ts"]) for d in docs) == expected.live()
    got = {doc["pk"]: doc for doc in sorted(docs, key=lambda d: d["_ts"])}   # each key's newest
    for pk, version in ((6, 1), (61, 0)):
        sent = m.row(pk, version)
        at = m.expected_row(sent)["at"]
        assert got[pk]["at"] == (at.isoformat() if at is not None else None)
        assert got[pk]["qvec"] == sent["qvec"] and got[pk]["clips"] == sent[m.STRUCT]
        assert (got[pk]["place"] is None) == (sent["place"] is None)
        assert got[pk]["place"] is None or got[pk]["place"].split(" ")[0] in ("POINT", "LINESTRING")
    # Every vector of every row the view shows, as Milvus's query gives it.
    for doc in docs:
        version = expected.rows[(doc["pk"], doc["_ts"])][0]
        assert {c: doc[c] for c in VECTORS} == lake_vectors(row(doc["pk"], version)), doc["pk"]
    assert {len(d["splade"]) for d in docs} == set(range(5))
    print(f"{mq.kind}: the view's vectors: {sum(expected.live().values())} rows expected, {len(docs)} found, "
          "each as the script sent it")
