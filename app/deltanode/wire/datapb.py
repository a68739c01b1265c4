"""The subset of Milvus's internal ``datapb`` messages DeltaNode exchanges through etcd.

pymilvus ships the public milvus-proto modules (msg, schema, common) but not
``internal/proto/data_coord.proto``. The messages below are declared with the same
package, names and field numbers as Milvus 2.3/2.4 (see docs/milvus-facts.md §4), so
bytes written here decode in Milvus and the other way round. Fields DeltaNode never
reads are left out; protobuf skips unknown fields, so that is wire compatible.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from .descriptors import DEPENDENCIES, field, load
from .descriptors import FieldProto as F


def _build() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="deltanode/data_coord_subset.proto",
        package="milvus.proto.data",
        syntax="proto3",
        dependency=DEPENDENCIES,
    )
    _channel_watch_state(f)
    _binlogs(f)
    _segment_info(f)
    _vchannel_info(f)
    _channel_watch_info(f)
    return f


def _channel_watch_state(f: descriptor_pb2.FileDescriptorProto) -> None:
    state = f.enum_type.add(name="ChannelWatchState")
    for name, value in [("Uncomplete", 0), ("Complete", 1), ("ToWatch", 2), ("WatchSuccess", 3),
                        ("WatchFailure", 4), ("ToRelease", 5), ("ReleaseSuccess", 6),
                        ("ReleaseFailure", 7)]:
        state.value.add(name=name, number=value)


def _binlogs(f: descriptor_pb2.FileDescriptorProto) -> None:
    binlog = f.message_type.add(name="Binlog")
    binlog.field.extend([
        field("entries_num", 1, F.TYPE_INT64),
        field("timestamp_from", 2, F.TYPE_UINT64),
        field("timestamp_to", 3, F.TYPE_UINT64),
        field("log_path", 4, F.TYPE_STRING),
        field("log_size", 5, F.TYPE_INT64),
        field("logID", 6, F.TYPE_INT64),
        field("memory_size", 7, F.TYPE_INT64),
    ])
    field_binlog = f.message_type.add(name="FieldBinlog")
    field_binlog.field.extend([
        field("fieldID", 1, F.TYPE_INT64),
        field("binlogs", 2, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.Binlog"),
        field("child_fields", 3, F.TYPE_INT64, repeated=True),   # storage v2: the fields of a column group
        field("format", 4, F.TYPE_STRING),   # after 2.6.6: a column group's file format ("parquet", ...)
    ])


def _segment_info(f: descriptor_pb2.FileDescriptorProto) -> None:
    seg = f.message_type.add(name="SegmentInfo")
    seg.field.extend([
        field("ID", 1, F.TYPE_INT64),
        field("collectionID", 2, F.TYPE_INT64),
        field("partitionID", 3, F.TYPE_INT64),
        field("insert_channel", 4, F.TYPE_STRING),
        field("num_of_rows", 5, F.TYPE_INT64),
        field("state", 6, F.TYPE_ENUM, type_name=".milvus.proto.common.SegmentState"),
        field("max_row_num", 7, F.TYPE_INT64),
        field("last_expire_time", 8, F.TYPE_UINT64),
        field("start_position", 9, F.TYPE_MESSAGE, type_name=".milvus.proto.msg.MsgPosition"),
        field("dml_position", 10, F.TYPE_MESSAGE, type_name=".milvus.proto.msg.MsgPosition"),
        field("binlogs", 11, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.FieldBinlog"),
        field("statslogs", 12, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.FieldBinlog"),
        field("deltalogs", 13, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.FieldBinlog"),
        field("createdByCompaction", 14, F.TYPE_BOOL),
        field("compactionFrom", 15, F.TYPE_INT64, repeated=True),
        field("dropped_at", 16, F.TYPE_UINT64),
        field("is_importing", 17, F.TYPE_BOOL),
        field("compacted", 19, F.TYPE_BOOL),
        field("level", 20, F.TYPE_INT32),   # SegmentLevel (2.4): Legacy 0, L0 1, L1 2, L2 3
        field("storage_version", 21, F.TYPE_INT64),   # 0 and 1: the binlog format; 2 (2.5+): packed columns
        field("manifest_path", 32, F.TYPE_STRING),   # after 2.6.6: a storage v3 segment's manifest
    ])


def _vchannel_info(f: descriptor_pb2.FileDescriptorProto) -> None:
    vchan = f.message_type.add(name="VchannelInfo")
    vchan.field.extend([
        field("collectionID", 1, F.TYPE_INT64),
        field("channelName", 2, F.TYPE_STRING),
        field("seek_position", 3, F.TYPE_MESSAGE, type_name=".milvus.proto.msg.MsgPosition"),
        field("unflushedSegments", 4, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.SegmentInfo"),
        field("flushedSegments", 5, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.SegmentInfo"),
        field("dropped_segments", 6, F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.SegmentInfo"),
        field("unflushedSegmentIds", 7, F.TYPE_INT64, repeated=True),
        field("flushedSegmentIds", 8, F.TYPE_INT64, repeated=True),
        field("dropped_segmentIds", 9, F.TYPE_INT64, repeated=True),
        field("indexed_segmentIds", 10, F.TYPE_INT64, repeated=True),
        field("level_zero_segment_ids", 12, F.TYPE_INT64, repeated=True),
    ])


def _channel_watch_info(f: descriptor_pb2.FileDescriptorProto) -> None:
    watch = f.message_type.add(name="ChannelWatchInfo")
    watch.field.extend([
        field("vchan", 1, F.TYPE_MESSAGE, type_name=".milvus.proto.data.VchannelInfo"),
        field("startTs", 2, F.TYPE_INT64),
        field("state", 3, F.TYPE_ENUM, type_name=".milvus.proto.data.ChannelWatchState"),
        field("timeoutTs", 4, F.TYPE_INT64),
        field("schema", 5, F.TYPE_MESSAGE, type_name=".milvus.proto.schema.CollectionSchema"),
        field("progress", 6, F.TYPE_INT32),
        field("opID", 7, F.TYPE_INT64),
    ])


_classes, _file = load(_build())

Binlog = _classes["milvus.proto.data.Binlog"]
FieldBinlog = _classes["milvus.proto.data.FieldBinlog"]
SegmentInfo = _classes["milvus.proto.data.SegmentInfo"]
VchannelInfo = _classes["milvus.proto.data.VchannelInfo"]
ChannelWatchInfo = _classes["milvus.proto.data.ChannelWatchInfo"]


class ChannelWatchState:
    """Values of ``datapb.ChannelWatchState``."""

    Uncomplete = 0
    Complete = 1
    ToWatch = 2
    WatchSuccess = 3
    WatchFailure = 4
    ToRelease = 5
    ReleaseSuccess = 6
    ReleaseFailure = 7

    @classmethod
    def name(cls, value: int) -> str:
        return _file.enum_types_by_name["ChannelWatchState"].values_by_number[value].name
