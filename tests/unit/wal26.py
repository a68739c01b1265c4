"""Milvus 2.6 WAL messages for unit tests, as its streaming node puts them on a broker: properties
and payloads built from Milvus's field numbers (pkg/v2 v2.6.6 ``proto/messages.proto``, written out by
hand here, not through DeltaNode's declarations) and pymilvus's msgpb requests. docs/milvus-facts.md
§13 lists what each carries; tests/integration/test_milvus26_wire.py checks the same layout against
what Milvus's own Go code writes."""

from __future__ import annotations

import base64
import string

import numpy as np

from deltanode.mq.milvus_producer import field_data
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.schema import CollectionLayout, schema_from_json
from deltanode.wire.varint import encode_varint

CID, PID, PCHANNEL = 7, 70, "dn26-dml_0"
VCHANNEL, OTHER = f"{PCHANNEL}_{CID}v0", f"{PCHANNEL}_8v0"
SCHEMA = schema_from_json({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                                      {"name": "vec", "data_type": "FloatVector", "dim": 2}]}, "c")
LAYOUT = CollectionLayout.from_proto(SCHEMA)

# messagespb.MessageType and the payload version Milvus builds each with.
TYPES = {"TimeTick": (1, 1), "Insert": (2, 1), "Delete": (3, 1), "Flush": (4, 2), "CreateCollection": (5, 1),
         "DropCollection": (6, 1), "CreatePartition": (7, 1), "DropPartition": (8, 1), "ManualFlush": (9, 2),
         "CreateSegment": (10, 2), "Import": (11, 1), "SchemaChange": (12, 2), "AlterCollection": (13, 2),
         "CreateIndex": (34, 2), "BeginTxn": (900, 2), "CommitTxn": (901, 2), "RollbackTxn": (902, 2)}
_DIGITS = string.digits + string.ascii_lowercase


def base36(n: int) -> str:
    """As Go's ``strconv.FormatUint(n, 36)``."""
    out = ""
    while True:
        n, d = divmod(n, 36)
        out = _DIGITS[d] + out
        if not n:
            return out


def pb(*fields: tuple[int, int | bytes | str | list[int]]) -> bytes:
    """A protobuf message of ``(number, value)``: ints as varints, str/bytes/messages length-delimited,
    a list of ints packed (proto3's repeated scalars)."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, int):
            out += encode_varint(number << 3) + encode_varint(value)
            continue
        if isinstance(value, list):
            value = b"".join(encode_varint(v) for v in value)
        data = value.encode() if isinstance(value, str) else value
        out += encode_varint(number << 3 | 2) + encode_varint(len(data)) + data
    return bytes(out)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def props(kind: str, tt: int, vchannel: str | None = VCHANNEL, *, header: bytes = b"", version: int | None = None,
          txn: tuple[int, int] | None = None, cipher_zone: int | None = None, broadcast: list[str] | None = None,
          replicated: bool = False) -> dict[str, str]:
    """The properties of a message of ``kind`` at time tick ``tt``, every key as Milvus writes it."""
    msg_type, v = TYPES[kind]
    out = {"_t": str(msg_type), "_v": str(version if version is not None else v), "_tt": base36(tt), "_wt": "1",
           "_h": b64(header), "_lc": base36(3)}
    if vchannel is not None:
        out["_vc"] = vchannel
    if txn is not None:   # TxnContext: txn_id 1, keepalive_milliseconds 2
        out["_tx"] = b64(pb((1, txn[0]), (2, txn[1] & (1 << 64) - 1)))
    if cipher_zone is not None:   # CipherHeader: ez_id 1, collection_id 2, safe_key 3, payload_bytes 4
        out["_ch"] = b64(pb((1, cipher_zone), (2, CID), (3, b"wrapped"), (4, 99)))
    if broadcast is not None:   # BroadcastHeader: broadcast_id 1, vchannels 2
        out["_bh"] = b64(pb((1, 5), *((2, v) for v in broadcast)))
    if replicated:   # ReplicateHeader: cluster_id 1, time_tick 4, vchannel 5
        out["_rh"] = b64(pb((1, "by-dev-source"), (4, tt), (5, vchannel or "")))
    return out


def insert_header(assignments: dict[int, int], collection_id: int = CID) -> bytes:
    """InsertMessageHeader: collection_id 1, partitions 2 (PartitionSegmentAssignment: partition_id 1,
    rows 2, binary_size 3, segment_assignment 4 -> segment_id 1)."""
    return pb((1, collection_id), *((2, pb((1, part), (2, 1), (3, 64), (4, pb((1, seg)))))
                                    for part, seg in assignments.items()))


def insert(pks: list[int], *, partition: int = PID, vchannel: str = VCHANNEL, collection_id: int = CID) -> bytes:
    """An InsertRequest as a 2.6 proxy sends it: no timestamps, no segment; the streaming node places it."""
    req = msg_pb2.InsertRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=vchannel,
                                collectionID=collection_id, partitionID=partition, rowIDs=pks, num_rows=len(pks),
                                version=msg_pb2.ColumnBased)
    req.fields_data.extend(field_data(f, len(pks), np.random.default_rng(pks[0]), pks[0]) for f in LAYOUT.fields)
    return req.SerializeToString()


def delete(pks: list[int], *, partition: int = PID, vchannel: str = VCHANNEL) -> bytes:
    req = msg_pb2.DeleteRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Delete), shardName=vchannel,
                                collectionID=CID, partitionID=partition, num_rows=len(pks), timestamps=[1] * len(pks))
    req.primary_keys.int_id.data.extend(pks)
    return req.SerializeToString()


def time_tick(tt: int) -> bytes:
    return msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick,
                                                       timestamp=tt)).SerializeToString()


def drop_partition(partition: int) -> bytes:
    return msg_pb2.DropPartitionRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.DropPartition),
                                        collectionID=CID, partitionID=partition).SerializeToString()


def drop_collection() -> bytes:
    return msg_pb2.DropCollectionRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.DropCollection),
                                         collectionID=CID).SerializeToString()


def added_field(version: int = 1, *, name: str = "note", nullable: bool = True,
                base: schema_pb2.CollectionSchema = SCHEMA) -> schema_pb2.CollectionSchema:
    """``base`` with a VarChar field added as Milvus's RootCoord adds one: the next field id, the
    schema's ``version`` set."""
    schema = schema_pb2.CollectionSchema()
    schema.CopyFrom(base)
    fid = max(f.fieldID for f in schema.fields) + 1
    f = schema.fields.add(fieldID=fid, name=name, data_type=schema_pb2.DataType.VarChar, nullable=nullable)
    f.type_params.add(key="max_length", value="64")
    schema.version = version
    return schema


def schema_change(schema: schema_pb2.CollectionSchema, flushed: list[int], *, alter: bool = True,
                  collection_id: int = CID) -> tuple[bytes, bytes]:
    """(payload, header) of a schema change as v2.6.6 writes it: an AlterCollection whose update_mask
    names ``schema`` (header: db_id 1, collection_id 2, update_mask 3, flushed_segment_ids 5; body:
    updates 1 -> schema 5), or the older SchemaChange (header: collection_id 1, flushed_segment_ids
    2; body: schema 1)."""
    raw = schema.SerializeToString()
    if alter:
        return pb((1, pb((5, raw)))), pb((1, 1), (2, collection_id), (3, pb((1, "schema"))), (5, flushed))
    return pb((1, raw)), pb((1, collection_id), (2, flushed))
