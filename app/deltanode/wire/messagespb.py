"""The subset of Milvus 2.6's ``messagespb`` that a reader of its WAL needs (pkg/v2 ``proto/messages.proto``).

A 2.6 streaming node puts a message's type-specific header, its transaction, its cipher and its
broadcast header in the message's properties, each the standard base64 of one of these messages
(docs/milvus-facts.md §13). pymilvus ships no ``messages.proto``: they are declared here with
Milvus's package, names and field numbers, the fields DeltaNode reads and no others (protobuf skips
the rest, so the subset stays wire compatible). ``AlterCollectionMessageHeader.update_mask`` is a
``google.protobuf.FieldMask``; only its ``paths`` (field 1) are declared, under a name of this file.
The message bodies declared are those of a schema change, their ``CollectionSchema`` as bytes.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from .descriptors import DEPENDENCIES, field, load
from .descriptors import FieldProto as F

_PACKAGE = "milvus.proto.messages"


def _message(f: descriptor_pb2.FileDescriptorProto, name: str, *fields: F) -> None:
    f.message_type.add(name=name).field.extend(fields)


def _of(name: str) -> str:
    return f".{_PACKAGE}.{name}"


def _build() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="deltanode/messages_subset.proto", package=_PACKAGE,
                                           syntax="proto3", dependency=DEPENDENCIES)
    i64, u64, string = F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_STRING
    _message(f, "SegmentAssignment", field("segment_id", 1, i64))
    _message(f, "PartitionSegmentAssignment",
             field("partition_id", 1, i64), field("rows", 2, u64), field("binary_size", 3, u64),
             field("segment_assignment", 4, F.TYPE_MESSAGE, type_name=_of("SegmentAssignment")))
    _message(f, "InsertMessageHeader", field("collection_id", 1, i64),
             field("partitions", 2, F.TYPE_MESSAGE, repeated=True, type_name=_of("PartitionSegmentAssignment")))
    _message(f, "DeleteMessageHeader", field("collection_id", 1, i64), field("rows", 2, u64))
    _message(f, "FlushMessageHeader", field("collection_id", 1, i64), field("partition_id", 2, i64),
             field("segment_id", 3, i64))
    _message(f, "ManualFlushMessageHeader", field("collection_id", 1, i64), field("flush_ts", 2, u64),
             field("segment_ids", 3, i64, repeated=True))
    _message(f, "CreateSegmentMessageHeader", field("collection_id", 1, i64), field("partition_id", 2, i64),
             field("segment_id", 3, i64), field("storage_version", 4, i64), field("max_segment_size", 5, u64),
             field("max_rows", 6, u64), field("level", 7, F.TYPE_INT32))
    _message(f, "DropCollectionMessageHeader", field("collection_id", 1, i64), field("db_id", 2, i64))
    _message(f, "DropPartitionMessageHeader", field("collection_id", 1, i64), field("partition_id", 2, i64))
    _message(f, "SchemaChangeMessageHeader", field("collection_id", 1, i64),
             field("flushed_segment_ids", 2, i64, repeated=True))
    _message(f, "FieldMaskPaths", field("paths", 1, string, repeated=True))
    _message(f, "AlterCollectionMessageHeader", field("db_id", 1, i64), field("collection_id", 2, i64),
             field("update_mask", 3, F.TYPE_MESSAGE, type_name=_of("FieldMaskPaths")),
             field("flushed_segment_ids", 5, i64, repeated=True))
    # A body's CollectionSchema is kept as its bytes (a message field and a bytes field share the
    # wire form): the schema goes on to the driver as it came.
    _message(f, "SchemaChangeMessageBody", field("schema", 1, F.TYPE_BYTES))
    _message(f, "AlterCollectionMessageUpdates", field("schema", 5, F.TYPE_BYTES))
    _message(f, "AlterCollectionMessageBody",
             field("updates", 1, F.TYPE_MESSAGE, type_name=_of("AlterCollectionMessageUpdates")))
    _message(f, "BeginTxnMessageHeader", field("keepalive_milliseconds", 1, i64))
    _message(f, "TxnContext", field("txn_id", 1, i64), field("keepalive_milliseconds", 2, i64))
    _message(f, "CipherHeader", field("ez_id", 1, i64), field("collection_id", 2, i64),
             field("safe_key", 3, F.TYPE_BYTES), field("payload_bytes", 4, i64))
    _message(f, "BroadcastHeader", field("broadcast_id", 1, u64), field("vchannels", 2, string, repeated=True))
    _message(f, "ReplicateHeader", field("cluster_id", 1, string), field("time_tick", 4, u64),
             field("vchannel", 5, string))
    return f


_classes, _file = load(_build())


def _class(name: str):
    return _classes[f"{_PACKAGE}.{name}"]


SegmentAssignment = _class("SegmentAssignment")
PartitionSegmentAssignment = _class("PartitionSegmentAssignment")
InsertMessageHeader = _class("InsertMessageHeader")
DeleteMessageHeader = _class("DeleteMessageHeader")
FlushMessageHeader = _class("FlushMessageHeader")
ManualFlushMessageHeader = _class("ManualFlushMessageHeader")
CreateSegmentMessageHeader = _class("CreateSegmentMessageHeader")
DropCollectionMessageHeader = _class("DropCollectionMessageHeader")
DropPartitionMessageHeader = _class("DropPartitionMessageHeader")
SchemaChangeMessageHeader = _class("SchemaChangeMessageHeader")
AlterCollectionMessageHeader = _class("AlterCollectionMessageHeader")
SchemaChangeMessageBody = _class("SchemaChangeMessageBody")
AlterCollectionMessageUpdates = _class("AlterCollectionMessageUpdates")
AlterCollectionMessageBody = _class("AlterCollectionMessageBody")
BeginTxnMessageHeader = _class("BeginTxnMessageHeader")
TxnContext = _class("TxnContext")
CipherHeader = _class("CipherHeader")
BroadcastHeader = _class("BroadcastHeader")
ReplicateHeader = _class("ReplicateHeader")
