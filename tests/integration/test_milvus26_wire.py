"""Milvus 2.6 on the wire, as Milvus's own Go code writes it (pkg/v2 v2.6.6 through
tests/milvus_wal), read back raw from the suite's Apache Kafka and Apache Pulsar.

One history for a 2-shard collection: every message kind a 2.6 streaming node puts on a pchannel
(time ticks, broadcast DDL, segment creation, inserts and deletes, a committed and a rolled-back
transaction, flushes, a schema change both ways, an encrypted insert). The test then reads each
topic from its start with the broker's own Python client and checks, message by message, what is
there against the script: each property's encoding, Kafka headers or Pulsar properties, and which
payload each type carries. Nothing here goes through DeltaNode's code but the broker address.
"""

from __future__ import annotations

import base64
import itertools
import time
from typing import Any

import pytest
from google.protobuf import json_format

from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.varint import read_varint

from .milvus26_wal import Written, append_step, open_step, run_script, tso
from .support import ALL_BROKERS

# messagespb.MessageType numbers and payload versions, as written down independently of the writer:
# `_v` 1 carries an msgpb request, `_v` 2 a messagespb.*Body.
V1_TYPES = {"TimeTick": 1, "Insert": 2, "Delete": 3, "CreateCollection": 5, "DropCollection": 6,
            "CreatePartition": 7, "DropPartition": 8}
V2_TYPES = {"Flush": 4, "ManualFlush": 9, "CreateSegment": 10, "SchemaChange": 12, "AlterCollection": 13,
            "BeginTxn": 900, "CommitTxn": 901, "RollbackTxn": 902}
EMPTY_BODY = {"Flush", "ManualFlush", "CreateSegment", "BeginTxn", "CommitTxn", "RollbackTxn"}
TERMS = (1, 2)   # the WAL term each pchannel is opened with: `_wt`
AES_GCM_OVERHEAD = 12 + 16   # the test cipher's nonce and tag around an encrypted payload
READ_TIMEOUT = 30.0

_ids = itertools.count(int(time.time()) % 100000 * 100 + 7)


def fields(data: bytes) -> dict[int, list[Any]]:
    """A protobuf message's fields by number, undecoded: ints for varints, bytes for the rest."""
    out: dict[int, list[Any]] = {}
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 2:
            size, pos = read_varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = data[pos:pos + width], pos + width
        else:
            raise ValueError(f"wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def proto_dict(message) -> dict:
    """protojson of a pymilvus proto message, as the writer's script takes it."""
    return json_format.MessageToDict(message)


def schema(cid: int, *, with_new_field: bool) -> schema_pb2.CollectionSchema:
    s = schema_pb2.CollectionSchema(name=f"coll{cid}", fields=[
        schema_pb2.FieldSchema(fieldID=100, name="pk", is_primary_key=True, data_type=schema_pb2.DataType.Int64),
        schema_pb2.FieldSchema(fieldID=101, name="vec", data_type=schema_pb2.DataType.FloatVector,
                               type_params=[common_pb2.KeyValuePair(key="dim", value="2")])])
    if with_new_field:
        s.fields.append(schema_pb2.FieldSchema(fieldID=102, name="note", data_type=schema_pb2.DataType.VarChar,
                                               nullable=True,
                                               type_params=[common_pb2.KeyValuePair(key="max_length", value="32")]))
    return s


def insert_body(cid: int, pid: int, vchannel: str, pks: list[int]) -> msg_pb2.InsertRequest:
    return msg_pb2.InsertRequest(
        base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=vchannel, collection_name=f"coll{cid}",
        collectionID=cid, partitionID=pid, num_rows=len(pks), version=msg_pb2.InsertDataVersion.ColumnBased,
        fields_data=[
            schema_pb2.FieldData(type=schema_pb2.DataType.Int64, field_name="pk", field_id=100,
                                 scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=pks))),
            schema_pb2.FieldData(type=schema_pb2.DataType.FloatVector, field_name="vec", field_id=101,
                                 vectors=schema_pb2.VectorField(dim=2, float_vector=schema_pb2.FloatArray(
                                     data=[float(v) for pk in pks for v in (pk, -pk)])))])


def delete_body(cid: int, pid: int, vchannel: str, pks: list[int]) -> msg_pb2.DeleteRequest:
    return msg_pb2.DeleteRequest(
        base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Delete), shardName=vchannel, collection_name=f"coll{cid}",
        collectionID=cid, partitionID=pid, num_rows=len(pks),
        primary_keys=schema_pb2.IDs(int_id=schema_pb2.LongArray(data=pks)))


def history(mq_kind: str, address: str, cid: int) -> tuple[list[str], list[str], list[dict], dict[int, Any]]:
    """The script, and what each append's payload must decode to (a pymilvus message, b"" for an
    empty V2 body, or a check)."""
    prefix = f"m26w{cid}-rootcoord-dml"
    p = [pchannel_name(prefix, i) for i in range(2)]
    v = [vchannel_name(p[i], cid, i) for i in range(2)]
    pid, seg = cid + 1, cid + 2
    ticks = itertools.count(tso(int(time.time() * 1000)))
    steps: list[dict] = [open_step(mq_kind, address, p[0], term=TERMS[0]),
                         open_step(mq_kind, address, p[1], term=TERMS[1])]
    payloads: dict[int, Any] = {}

    def add(step: dict, payload: Any) -> int:
        steps.append(step)
        payloads[len(steps)] = payload
        return len(steps)

    def tt_msg(pch: str, ts: int, lc: str) -> int:
        body = msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick, timestamp=ts))
        return add(append_step(pch, "TimeTick", ts, body=proto_dict(body), last_confirmed=lc), body)

    # A WAL's first message is a time tick whose last confirmed id is its own (`_lcs`).
    first = [tt_msg(p[i], next(ticks), "self") for i in range(2)]
    lc = [f"step:{first[0]}", f"step:{first[1]}"]
    created = schema(cid, with_new_field=False)
    for i in range(2):   # the DDL broadcast to both shards: one split per vchannel, `_bh` naming both
        body = msg_pb2.CreateCollectionRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection), collectionName=f"coll{cid}",
            collectionID=cid, partitionIDs=[pid], partitionNames=["_default"], virtualChannelNames=v,
            physicalChannelNames=p, schema=created.SerializeToString())
        add(append_step(p[i], "CreateCollection", next(ticks), vchannel=v[i], last_confirmed=lc[i],
                        header={"collection_id": str(cid), "partition_ids": [str(pid)], "db_id": "1"},
                        body=proto_dict(body), broadcast=(v, 7)), body)
    part = msg_pb2.CreatePartitionRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreatePartition),
                                          collection_name=f"coll{cid}", partition_name="p2", collectionID=cid,
                                          partitionID=pid + 10)
    add(append_step(p[0], "CreatePartition", next(ticks), vchannel=v[0], last_confirmed=lc[0],
                    header={"collection_id": str(cid), "partition_id": str(pid + 10)}, body=proto_dict(part)), part)
    for i in range(2):
        add(append_step(p[i], "CreateSegment", next(ticks), vchannel=v[i], last_confirmed=lc[i],
                        header={"collection_id": str(cid), "partition_id": str(pid), "segment_id": str(seg + i),
                                "storage_version": "2", "max_rows": "100000", "level": "L1"}, body={}), b"")
    assignment = {"collection_id": str(cid), "partitions": [
        {"partition_id": str(pid), "rows": "3", "binary_size": "72", "segment_assignment": {"segment_id": str(seg)}}]}
    ins = insert_body(cid, pid, v[0], [1, 2, 3])
    add(append_step(p[0], "Insert", next(ticks), vchannel=v[0], last_confirmed=lc[0], header=assignment,
                    body=proto_dict(ins)), ins)
    dele = delete_body(cid, pid, v[0], [2])
    add(append_step(p[0], "Delete", next(ticks), vchannel=v[0], last_confirmed=lc[0],
                    header={"collection_id": str(cid), "rows": "1"}, body=proto_dict(dele)), dele)
    # A committed transaction on shard 1: BeginTxn, its members, CommitTxn, all carrying `_tx`.
    for txn_id, end in ((4242, "CommitTxn"), (4243, "RollbackTxn")):
        txn = (txn_id, 5000)
        add(append_step(p[1], "BeginTxn", next(ticks), vchannel=v[1], last_confirmed=lc[1], txn=txn,
                        header={"keepalive_milliseconds": "5000"}, body={}), b"")
        member = insert_body(cid, pid, v[1], [txn_id * 10 + 1, txn_id * 10 + 2])
        add(append_step(p[1], "Insert", next(ticks), vchannel=v[1], last_confirmed=lc[1], txn=txn,
                        header={**assignment, "partitions": [{**assignment["partitions"][0], "rows": "2",
                                                              "segment_assignment": {"segment_id": str(seg + 1)}}]},
                        body=proto_dict(member)), member)
        gone = delete_body(cid, pid, v[1], [txn_id * 10 + 1])
        add(append_step(p[1], "Delete", next(ticks), vchannel=v[1], last_confirmed=lc[1], txn=txn,
                        header={"collection_id": str(cid), "rows": "1"}, body=proto_dict(gone)), gone)
        add(append_step(p[1], end, next(ticks), vchannel=v[1], last_confirmed=lc[1], txn=txn, body={}), b"")
    # A field added mid-stream: SchemaChange (deprecated in 2.6.6) and AlterCollection carry the schema.
    grown = schema(cid, with_new_field=True)
    add(append_step(p[0], "SchemaChange", next(ticks), vchannel=v[0], last_confirmed=lc[0],
                    header={"collection_id": str(cid), "flushed_segment_ids": [str(seg)]},
                    body={"schema": proto_dict(grown)}), ("schema", grown))
    add(append_step(p[0], "AlterCollection", next(ticks), vchannel=v[0], last_confirmed=lc[0],
                    header={"db_id": "1", "collection_id": str(cid), "update_mask": "schema"},
                    body={"updates": {"schema": proto_dict(grown)}}), ("updates.schema", grown))
    enc = insert_body(cid, pid, v[0], [7, 8])
    add(append_step(p[0], "Insert", next(ticks), vchannel=v[0], last_confirmed=lc[0], header=assignment,
                    body=proto_dict(enc), cipher=True), ("encrypted", enc))
    add(append_step(p[0], "Flush", next(ticks), vchannel=v[0], last_confirmed=lc[0],
                    header={"collection_id": str(cid), "partition_id": str(pid), "segment_id": str(seg)}, body={}),
        b"")
    flush_ts = next(ticks)
    add(append_step(p[0], "ManualFlush", flush_ts, vchannel=v[0], last_confirmed=lc[0],
                    header={"collection_id": str(cid), "flush_ts": str(flush_ts), "segment_ids": [str(seg)]},
                    body={}), b"")
    drop_part = msg_pb2.DropPartitionRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.DropPartition),
                                             collectionID=cid, partitionID=pid + 10, partition_name="p2")
    add(append_step(p[0], "DropPartition", next(ticks), vchannel=v[0], last_confirmed=lc[0],
                    header={"collection_id": str(cid), "partition_id": str(pid + 10)}, body=proto_dict(drop_part)),
        drop_part)
    tick = tt_msg(p[0], next(ticks), lc[0])
    for i in range(2):
        drop = msg_pb2.DropCollectionRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.DropCollection),
                                             collectionName=f"coll{cid}", collectionID=cid)
        add(append_step(p[i], "DropCollection", next(ticks), vchannel=v[i],
                        last_confirmed=f"step:{tick}" if i == 0 else lc[i],
                        header={"collection_id": str(cid), "db_id": "1"}, body=proto_dict(drop), broadcast=(v, 8)),
            drop)
    return p, v, steps, payloads


def read_kafka(address: str, topic: str, count: int) -> list[tuple[Any, dict[str, str | None], bytes]]:
    """(offset, headers, value) of the topic's records, partition 0; there are ``count`` of them."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": address, "group.id": f"m26w-{topic}", "enable.auto.commit": False})
    out = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + READ_TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            assert msg.partition() == 0 and msg.key() is None
            headers = msg.headers() or []
            assert len({k for k, _ in headers}) == len(headers), f"a header twice: {headers}"
            out.append((msg.offset(), {k: None if v is None else v.decode() for k, v in headers}, msg.value() or b""))
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=READ_TIMEOUT)
        assert (low, high) == (0, count), f"{topic} holds offsets [{low}, {high}), not the {count} appended"
    finally:
        consumer.close()
    return out


def read_pulsar(address: str, topic: str, count: int) -> list[tuple[Any, dict[str, str | None], bytes]]:
    """("ledger:entry", properties, payload) of the topic's messages; there are ``count`` of them."""
    import pulsar
    client = pulsar.Client(address, operation_timeout_seconds=int(READ_TIMEOUT))
    out = []
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        for _ in range(count):
            msg = reader.read_next(timeout_millis=int(READ_TIMEOUT * 1000))
            mid = msg.message_id()
            assert msg.partition_key() == ""
            out.append((f"{mid.ledger_id()}:{mid.entry_id()}", dict(msg.properties()), msg.data()))
        assert not reader.has_message_available(), f"{topic} holds more than the {count} appended"
        reader.close()
    finally:
        client.close()
    return out


def pulsar_id(marshaled: str) -> str:
    """``ledger:entry`` of a marshaled Pulsar message id (base64 of MessageIdData: ledger 1, entry 2)."""
    f = fields(base64.b64decode(marshaled))
    return f"{f[1][0]}:{f[2][0]}"


def check_last_confirmed(mq_kind: str, props: dict[str, str | None], step: dict, by_step: dict[int, Written]) -> None:
    lc = step["last_confirmed"]
    if lc == "self":
        assert props.get("_lcs") == "" and "_lc" not in props
        return
    assert "_lcs" not in props
    target = by_step[int(lc.removeprefix("step:"))]
    if mq_kind == "kafka":   # the offset in base 36
        assert int(props["_lc"], 36) == target.offset
    else:                    # base64 of Pulsar's MessageIdData
        assert pulsar_id(props["_lc"]) == target.offset


def check_payload(step: dict, payload: bytes, expected: Any, props: dict[str, str | None]) -> None:
    """The message's payload: an msgpb request (`_v` 1), a messagespb body (`_v` 2), or ciphertext."""
    if step["type"] in EMPTY_BODY:
        assert payload == expected == b""
    elif not isinstance(expected, tuple):   # an msgpb request
        assert type(expected).FromString(payload) == expected
    elif expected[0] == "schema":   # SchemaChangeMessageBody: schema 1
        assert schema_pb2.CollectionSchema.FromString(fields(payload)[1][0]) == expected[1]
    elif expected[0] == "updates.schema":   # AlterCollectionMessageBody: updates 1, its schema 5
        updates = fields(fields(payload)[1][0])
        assert schema_pb2.CollectionSchema.FromString(updates[5][0]) == expected[1]
    else:   # encrypted; CipherHeader: ez_id 1, collection_id 2, safe_key 3, payload_bytes 4
        header = fields(base64.b64decode(props["_ch"] or ""))
        plain = expected[1].SerializeToString()
        assert header[1] == [1] and header[2] == [expected[1].collectionID]
        assert header[3] == [b"deltanode-test-safe-key"] and header[4] == [len(plain)]
        assert len(payload) == len(plain) + AES_GCM_OVERHEAD and plain not in payload


def check_header(step: dict, props: dict[str, str | None]) -> None:
    """`_h`: base64 of the type's messagespb header."""
    h = fields(base64.b64decode(props["_h"]))
    header = step.get("header") or {}
    if step["type"] == "TimeTick":
        assert props["_h"] == ""   # TimeTickMessageHeader is empty
    elif step["type"] == "Insert":
        part = fields(h[2][0])   # PartitionSegmentAssignment
        want = header["partitions"][0]
        assert h[1] == [int(header["collection_id"])]
        assert part[1] == [int(want["partition_id"])] and part[2] == [int(want["rows"])]
        assert fields(part[4][0])[1] == [int(want["segment_assignment"]["segment_id"])]
    elif step["type"] == "BeginTxn":
        assert h[1] == [int(header["keepalive_milliseconds"])]
    elif step["type"] == "ManualFlush":
        assert h[1] == [int(header["collection_id"])] and h[2] == [int(header["flush_ts"])]
    elif "collection_id" in header and step["type"] != "AlterCollection":
        assert h[1] == [int(header["collection_id"])]
    elif step["type"] == "AlterCollection":
        assert h[2] == [int(header["collection_id"])] and fields(h[3][0])[1] == [b"schema"]


def expected_keys(step: dict) -> set[str]:
    """The properties a message of ``step`` carries, and no others."""
    keys = {"_t", "_v", "_tt", "_wt", "_h", "_lcs" if step["last_confirmed"] == "self" else "_lc"}
    optional = {"_vc": step["type"] != "TimeTick", "_tx": "txn" in step, "_bh": "broadcast" in step,
                "_ch": bool(step.get("cipher"))}
    return keys | {k for k, present in optional.items() if present}


def check_message(mq_kind: str, term: int, vchannels: list[str], step: dict, props: dict[str, str | None],
                  by_step: dict[int, Written]) -> None:
    """The properties of one message against its step of the script."""
    kind = step["type"]
    assert set(props) == expected_keys(step), f"{kind}: {sorted(props)}"
    assert props["_t"] == str({**V1_TYPES, **V2_TYPES}[kind])
    assert props["_v"] == ("1" if kind in V1_TYPES else "2")
    assert int(props["_tt"] or "", 36) == step["timetick"]
    assert props["_wt"] == str(term)
    if kind != "TimeTick":   # a tick has no `_vc`: it is for every vchannel of the pchannel
        assert props["_vc"] == step["vchannel"]
    check_last_confirmed(mq_kind, props, step, by_step)
    if "txn" in step:   # TxnContext: txn_id 1, keepalive_milliseconds 2
        tx = fields(base64.b64decode(props["_tx"] or ""))
        assert (tx[1], tx[2]) == ([step["txn"]["id"]], [step["txn"]["keepalive_ms"]])
    if "broadcast" in step:   # BroadcastHeader: broadcast_id 1, vchannels 2
        bh = fields(base64.b64decode(props["_bh"] or ""))
        assert bh[1] == [step["broadcast"]["id"]] and sorted(bh[2]) == sorted(s.encode() for s in vchannels)
    check_header(step, props)


@ALL_BROKERS
def test_every_message_kind_on_the_wire(mq):
    cid = next(_ids)
    p, v, steps, payloads = history(mq.kind, mq.address, cid)
    mq.create_topics(p)
    written = run_script(steps)
    by_step = {w.step: w for w in written}
    read = read_kafka if mq.kind == "kafka" else read_pulsar
    for i, pch in enumerate(p):
        appended = [(n, s) for n, s in enumerate(steps, 1) if s["op"] == "append" and s["pchannel"] == pch]
        on_wire = read(mq.address, pch, len(appended))
        assert len(on_wire) == len(appended), f"{pch}: {len(on_wire)} messages read for {len(appended)} appends"
        for (n, step), (position, props, payload) in zip(appended, on_wire):
            w = by_step[n]
            assert (w.type, w.offset) == (step["type"], position), f"step {n} landed at {position}"
            assert props == w.properties, f"step {n}: the properties on the wire are not the ones written"
            check_message(mq.kind, TERMS[i], v, step, props, by_step)
            check_payload(step, payload, payloads[n], props)
    kinds = {s["type"] for s in steps if s["op"] == "append"}
    assert kinds == set(V1_TYPES) | set(V2_TYPES)


def test_meta_in_etcd_as_milvus_marshals_it(etcd_server, etcd_root):
    """The writer's etcd_put: Milvus 2.5/2.6's meta keys, each value the binary proto Milvus's own
    Go types marshal (read back with pymilvus's protos); a field the proto lacks fails the run."""
    from deltanode.etcd.client import EtcdClient

    from .milvus26_wal import WriterFailed, etcd_put_step

    cid, end = next(_ids), etcd_server.endpoint
    pch = pchannel_name(f"m26e{cid}-rootcoord-dml", 0)
    vch = vchannel_name(pch, cid, 0)
    bm25 = schema_pb2.FunctionSchema(name="bm25", id=cid + 5, type=schema_pb2.FunctionType.BM25,
                                     input_field_names=["text"], input_field_ids=[102],
                                     output_field_names=["sparse"], output_field_ids=[103])
    struct = schema_pb2.StructArrayFieldSchema(fieldID=110, name="clips", fields=[
        schema_pb2.FieldSchema(fieldID=111, name="clip_len", data_type=schema_pb2.DataType.Array,
                               element_type=schema_pb2.DataType.Int32)])
    pk = schema(cid, with_new_field=False).fields[0]
    checkpoint = msg_pb2.MsgPosition(channel_name=vch, msgID=(12).to_bytes(8, "little"), timestamp=tso(1000))
    keys = {   # key under the meta root: (proto, value, pymilvus type or None)
        f"root-coord/database/collection-info/1/{cid}": (
            "milvus.proto.etcd.CollectionInfo",
            {"ID": str(cid), "schema": {"name": f"coll{cid}", "functions": [proto_dict(bm25)]},
             "virtual_channel_names": [vch], "physical_channel_names": [pch], "shards_num": 1, "db_id": "1"}, None),
        f"root-coord/fields/{cid}/100": ("milvus.proto.schema.FieldSchema", proto_dict(pk), pk),
        f"root-coord/functions/{cid}/{bm25.id}": ("milvus.proto.schema.FunctionSchema", proto_dict(bm25), bm25),
        f"root-coord/struct-array-fields/{cid}/110": ("milvus.proto.schema.StructArrayFieldSchema",
                                                      proto_dict(struct), struct),
        f"datacoord-meta/channel-cp/{vch}": ("milvus.proto.msg.MsgPosition", proto_dict(checkpoint), checkpoint),
        f"streamingnode-meta/wal/{pch}/consume-checkpoint": (
            "milvus.proto.streaming.WALCheckpoint", {"message_id": {"id": "c", "WAL_name": "Kafka"},
                                                     "time_tick": str(tso(1000))}, None),
    }
    steps = [etcd_put_step(end, f"{etcd_root}/{k}", proto, value) for k, (proto, value, _) in keys.items()]
    steps.append(etcd_put_step(end, f"{etcd_root}/root-coord/partitions/{cid}/1", raw="\u26fc"))   # a tombstone
    assert [w.op for w in run_script(steps)] == ["etcd_put"] * len(steps)
    with EtcdClient(end) as client:
        for key, (_, _, expected) in keys.items():
            got = client.get(f"{etcd_root}/{key}")
            assert got is not None, key
            if expected is not None:
                assert type(expected).FromString(got[0]) == expected, key
        info = fields(client.get(f"{etcd_root}/root-coord/database/collection-info/1/{cid}")[0])   # CollectionInfo
        assert info[1] == [cid] and info[7] == [vch.encode()] and info[10] == [1] and info[15] == [1]
        assert schema_pb2.CollectionSchema.FromString(info[2][0]).functions == [bm25]
        wal_cp = fields(client.get(f"{etcd_root}/streamingnode-meta/wal/{pch}/consume-checkpoint")[0])
        assert fields(wal_cp[1][0]) == {1: [b"c"], 2: [3]} and wal_cp[2] == [tso(1000)]   # MessageID: id, Kafka = 3
        assert client.get(f"{etcd_root}/root-coord/partitions/{cid}/1")[0] == b"\xe2\x9b\xbc"
    with pytest.raises(WriterFailed, match="unknown field"):
        run_script([etcd_put_step(end, f"{etcd_root}/x", "milvus.proto.etcd.PartitionInfo", {"partitionId": "1",
                                                                                             "notAField": 1})])
