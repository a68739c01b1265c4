"""The subset of Milvus's internal ``datapb`` messages DeltaNode exchanges through etcd.

pymilvus ships the public milvus-proto modules (msg, schema, common) but not
``internal/proto/data_coord.proto``. The messages below are declared with the same
package, names and field numbers as Milvus 2.3/2.4 (see docs/milvus-facts.md §4), so
bytes written here decode in Milvus and the other way round. Fields DeltaNode never
reads are left out; protobuf skips unknown fields, so that is wire compatible.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from .milvus_proto import common_pb2, msg_pb2, schema_pb2

_F = descriptor_pb2.FieldDescriptorProto


def _field(name: str, number: int, ftype: int, *, repeated: bool = False, type_name: str = "") -> _F:
    label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    field = _F(name=name, number=number, type=ftype, label=label)
    if type_name:
        field.type_name = type_name
    return field


def _build() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="deltanode/data_coord_subset.proto",
        package="milvus.proto.data",
        syntax="proto3",
        dependency=["common.proto", "msg.proto", "schema.proto"],
    )
    state = f.enum_type.add(name="ChannelWatchState")
    for name, value in [("Uncomplete", 0), ("Complete", 1), ("ToWatch", 2), ("WatchSuccess", 3),
                        ("WatchFailure", 4), ("ToRelease", 5), ("ReleaseSuccess", 6),
                        ("ReleaseFailure", 7)]:
        state.value.add(name=name, number=value)

    binlog = f.message_type.add(name="Binlog")
    binlog.field.extend([
        _field("entries_num", 1, _F.TYPE_INT64),
        _field("timestamp_from", 2, _F.TYPE_UINT64),
        _field("timestamp_to", 3, _F.TYPE_UINT64),
        _field("log_path", 4, _F.TYPE_STRING),
        _field("log_size", 5, _F.TYPE_INT64),
        _field("logID", 6, _F.TYPE_INT64),
    ])
    field_binlog = f.message_type.add(name="FieldBinlog")
    field_binlog.field.extend([
        _field("fieldID", 1, _F.TYPE_INT64),
        _field("binlogs", 2, _F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.Binlog"),
    ])
    seg = f.message_type.add(name="SegmentInfo")
    seg.field.extend([
        _field("ID", 1, _F.TYPE_INT64),
        _field("collectionID", 2, _F.TYPE_INT64),
        _field("partitionID", 3, _F.TYPE_INT64),
        _field("insert_channel", 4, _F.TYPE_STRING),
        _field("num_of_rows", 5, _F.TYPE_INT64),
        _field("state", 6, _F.TYPE_ENUM, type_name=".milvus.proto.common.SegmentState"),
        _field("max_row_num", 7, _F.TYPE_INT64),
        _field("last_expire_time", 8, _F.TYPE_UINT64),
        _field("start_position", 9, _F.TYPE_MESSAGE, type_name=".milvus.proto.msg.MsgPosition"),
        _field("dml_position", 10, _F.TYPE_MESSAGE, type_name=".milvus.proto.msg.MsgPosition"),
        _field("binlogs", 11, _F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.FieldBinlog"),
        _field("statslogs", 12, _F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.FieldBinlog"),
        _field("deltalogs", 13, _F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.FieldBinlog"),
        _field("dropped_at", 16, _F.TYPE_UINT64),
    ])
    vchan = f.message_type.add(name="VchannelInfo")
    vchan.field.extend([
        _field("collectionID", 1, _F.TYPE_INT64),
        _field("channelName", 2, _F.TYPE_STRING),
        _field("seek_position", 3, _F.TYPE_MESSAGE, type_name=".milvus.proto.msg.MsgPosition"),
        _field("unflushedSegments", 4, _F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.SegmentInfo"),
        _field("flushedSegments", 5, _F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.SegmentInfo"),
        _field("dropped_segments", 6, _F.TYPE_MESSAGE, repeated=True, type_name=".milvus.proto.data.SegmentInfo"),
        _field("unflushedSegmentIds", 7, _F.TYPE_INT64, repeated=True),
        _field("flushedSegmentIds", 8, _F.TYPE_INT64, repeated=True),
        _field("dropped_segmentIds", 9, _F.TYPE_INT64, repeated=True),
        _field("indexed_segmentIds", 10, _F.TYPE_INT64, repeated=True),
        _field("level_zero_segment_ids", 12, _F.TYPE_INT64, repeated=True),
    ])
    watch = f.message_type.add(name="ChannelWatchInfo")
    watch.field.extend([
        _field("vchan", 1, _F.TYPE_MESSAGE, type_name=".milvus.proto.data.VchannelInfo"),
        _field("startTs", 2, _F.TYPE_INT64),
        _field("state", 3, _F.TYPE_ENUM, type_name=".milvus.proto.data.ChannelWatchState"),
        _field("timeoutTs", 4, _F.TYPE_INT64),
        _field("schema", 5, _F.TYPE_MESSAGE, type_name=".milvus.proto.schema.CollectionSchema"),
        _field("progress", 6, _F.TYPE_INT32),
        _field("opID", 7, _F.TYPE_INT64),
    ])
    return f


def _load():
    # The generated milvus modules live in protobuf's default pool; our file must join it
    # so that its references to MsgPosition, SegmentState and CollectionSchema resolve.
    pool = descriptor_pool.Default()
    for module in (common_pb2, msg_pb2, schema_pb2):  # make sure the dependencies are loaded
        assert module.DESCRIPTOR.name in ("common.proto", "msg.proto", "schema.proto")
    try:
        fd = pool.FindFileByName("deltanode/data_coord_subset.proto")
    except KeyError:
        fd = pool.Add(_build())
        fd = pool.FindFileByName("deltanode/data_coord_subset.proto")
    classes = message_factory.GetMessages([descriptor_pb2.FileDescriptorProto.FromString(fd.serialized_pb)], pool=pool)
    return classes, fd


_classes, _file = _load()

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
