"""The subset of Milvus's ``etcdpb`` (internal/proto/etcd_meta.proto) that mirror mode reads.

RootCoord keeps each collection, field, partition and database as one protobuf value in etcd
(docs/milvus-facts.md §7). Declared with Milvus 2.3/2.4's package, names and field numbers;
enums are read as plain integers (``CollectionState`` and ``PartitionState`` below).
"""

from __future__ import annotations

import enum

from google.protobuf import descriptor_pb2

from .descriptors import DEPENDENCIES, field, load
from .descriptors import FieldProto as F


class CollectionState(enum.IntEnum):
    """``etcdpb.CollectionState``."""

    CREATED = 0
    CREATING = 1
    DROPPING = 2
    DROPPED = 3


class PartitionState(enum.IntEnum):
    """``etcdpb.PartitionState``."""

    CREATED = 0
    CREATING = 1
    DROPPING = 2
    DROPPED = 3


def _build() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="deltanode/etcd_meta_subset.proto", package="milvus.proto.etcd",
                                           syntax="proto3", dependency=DEPENDENCIES)
    collection = f.message_type.add(name="CollectionInfo")
    collection.field.extend([
        field("ID", 1, F.TYPE_INT64),
        field("schema", 2, F.TYPE_MESSAGE, type_name=".milvus.proto.schema.CollectionSchema"),
        field("create_time", 3, F.TYPE_UINT64),
        field("partitionIDs", 4, F.TYPE_INT64, repeated=True),
        field("partitionNames", 5, F.TYPE_STRING, repeated=True),
        field("virtual_channel_names", 7, F.TYPE_STRING, repeated=True),
        field("physical_channel_names", 8, F.TYPE_STRING, repeated=True),
        field("partition_created_timestamps", 9, F.TYPE_UINT64, repeated=True),
        field("shards_num", 10, F.TYPE_INT32),
        field("start_positions", 11, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.common.KeyDataPair"),
        field("consistency_level", 12, F.TYPE_INT32),
        field("state", 13, F.TYPE_INT32),
        field("properties", 14, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.common.KeyValuePair"),
        field("db_id", 15, F.TYPE_INT64),
    ])
    partition = f.message_type.add(name="PartitionInfo")
    partition.field.extend([
        field("partitionID", 1, F.TYPE_INT64),
        field("partitionName", 2, F.TYPE_STRING),
        field("partition_created_timestamp", 3, F.TYPE_UINT64),
        field("collection_id", 4, F.TYPE_INT64),
        field("state", 5, F.TYPE_INT32),
    ])
    database = f.message_type.add(name="DatabaseInfo")
    database.field.extend([
        field("tenant_id", 1, F.TYPE_STRING),
        field("name", 2, F.TYPE_STRING),
        field("id", 3, F.TYPE_INT64),
        field("state", 4, F.TYPE_INT32),
        field("created_time", 5, F.TYPE_UINT64),
    ])
    return f


_classes, _file = load(_build())

CollectionInfo = _classes["milvus.proto.etcd.CollectionInfo"]
PartitionInfo = _classes["milvus.proto.etcd.PartitionInfo"]
DatabaseInfo = _classes["milvus.proto.etcd.DatabaseInfo"]
