"""Mirror mode's catalog on real etcd, with keys laid out as Milvus 2.3's RootCoord writes them
(the real Milvus tests read the keys a running Milvus wrote: test_real_milvus.py)."""

from __future__ import annotations

import threading

from deltanode.datacoord.catalog import CollectionStatus, StartPosition
from deltanode.datacoord.milvus_catalog import TOMBSTONE, MilvusCatalog, gap_key
from deltanode.mq.broker import Broker
from deltanode.wire.datapb import SegmentInfo
from deltanode.wire.etcdpb import (
    CollectionInfo,
    CollectionState,
    DatabaseInfo,
    PartitionInfo,
    PartitionState,
)
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.positions import CODECS, kafka_msg_id
from deltanode.wire.schema import CollectionLayout, DataType


def _put_collection(client, meta: str, cid: int, name: str, state: int = CollectionState.CREATED,
                    db: int = 1, start: int = 41) -> None:
    info = CollectionInfo(ID=cid, create_time=1000 + cid, shards_num=2, state=state, db_id=db,
                          virtual_channel_names=[f"by-dev-rootcoord-dml_3_{cid}v0", f"by-dev-rootcoord-dml_7_{cid}v1"],
                          physical_channel_names=["by-dev-rootcoord-dml_3", "by-dev-rootcoord-dml_7"],
                          schema=schema_pb2.CollectionSchema(name=name, enable_dynamic_field=True))
    info.start_positions.extend([common_pb2.KeyDataPair(key="by-dev-rootcoord-dml_3", data=kafka_msg_id(start)),
                                 common_pb2.KeyDataPair(key="by-dev-rootcoord-dml_7", data=kafka_msg_id(start + 1))])
    client.put(f"{meta}/root-coord/database/collection-info/{db}/{cid}", info.SerializeToString())
    fields = [schema_pb2.FieldSchema(fieldID=0, name="RowID", data_type=DataType.Int64),
              schema_pb2.FieldSchema(fieldID=1, name="Timestamp", data_type=DataType.Int64),
              schema_pb2.FieldSchema(fieldID=100, name="id", data_type=DataType.Int64, is_primary_key=True),
              schema_pb2.FieldSchema(fieldID=101, name="vec", data_type=DataType.FloatVector,
                                     type_params=[common_pb2.KeyValuePair(key="dim", value="4")]),
              schema_pb2.FieldSchema(fieldID=102, name="$meta", data_type=DataType.JSON, is_dynamic=True)]
    for f in reversed(fields):   # etcd lists keys in byte order, not field order
        client.put(f"{meta}/root-coord/fields/{cid}/{f.fieldID}", f.SerializeToString())
    for pid, pname in ((cid + 1, "_default"), (cid + 2, "p1")):
        client.put(f"{meta}/root-coord/partitions/{cid}/{pid}",
                   PartitionInfo(partitionID=pid, partitionName=pname, collection_id=cid).SerializeToString())


def _catalog(client, meta: str, own_root: str, broker) -> MilvusCatalog:
    return MilvusCatalog(client, meta, own_client=client, own_root=own_root, broker=Broker("kafka", broker),
                         positions=CODECS["kafka"])


def test_collections_are_read_from_milvus_meta_with_fields_and_partitions_joined(client, etcd_root, broker):
    meta = f"{etcd_root}/milvus/meta"
    client.put(f"{meta}/root-coord/database/db-info/1", DatabaseInfo(id=1, name="default").SerializeToString())
    client.put(f"{meta}/root-coord/database/db-info/7", DatabaseInfo(id=7, name="shop").SerializeToString())
    _put_collection(client, meta, 445000000000000001, "docs")
    _put_collection(client, meta, 445000000000000002, "items", db=7, state=CollectionState.DROPPING)
    _put_collection(client, meta, 445000000000000003, "half_made", state=CollectionState.CREATING)
    client.put(f"{meta}/root-coord/partitions/445000000000000001/9", PartitionInfo(
        partitionID=9, partitionName="gone", state=PartitionState.DROPPED).SerializeToString())
    client.put(f"{meta}/root-coord/database/collection-info/1/445000000000000004", TOMBSTONE)
    client.put(f"{meta}/root-coord/database/collection-info/1/445000000000000005", b"\xff not a protobuf")
    client.put(f"{meta}/snapshots/root-coord/database/collection-info/1/445000000000000006_1", b"history")

    records = {r.name: r for r in _catalog(client, meta, etcd_root, broker.bootstrap_servers).collections()}

    assert sorted(records) == ["docs", "items"]   # not being created, not a tombstone or garbage
    docs = records["docs"]
    assert (docs.collection_id, docs.state, docs.database, docs.shards) == (
        445000000000000001, CollectionStatus.CREATED, "default", 2)
    assert docs.vchannels == ["by-dev-rootcoord-dml_3_445000000000000001v0",
                              "by-dev-rootcoord-dml_7_445000000000000001v1"]
    assert docs.start_offsets == {"by-dev-rootcoord-dml_3": 41, "by-dev-rootcoord-dml_7": 42}
    assert docs.partitions == {"_default": 445000000000000002, "p1": 445000000000000003}
    assert [f.fieldID for f in docs.schema.fields] == [0, 1, 100, 101, 102]
    layout = CollectionLayout.from_proto(docs.schema)
    assert [f.name for f in layout.fields] == ["id", "vec", "$meta"]
    assert (records["items"].state, records["items"].database) == (CollectionStatus.DROPPING, "shop")


def test_a_new_collection_is_noticed_through_the_watch(client, etcd_root, broker):
    meta = f"{etcd_root}/milvus/meta"
    catalog = _catalog(client, meta, etcd_root, broker.bootstrap_servers)
    changed = threading.Event()
    watch = catalog.watch(changed.set)
    try:
        assert catalog.collections() == []
        _put_collection(client, meta, 445000000000000011, "late")
        assert changed.wait(10)
        assert [r.name for r in catalog.collections()] == ["late"]
    finally:
        watch.cancel()


def test_a_vchannel_starts_right_after_its_create_collection_message(client, etcd_root, broker):
    """With the broker holding everything (first offset 0), both start modes take the creation
    position and record no gap."""
    meta = f"{etcd_root}/milvus/meta"
    _put_collection(client, meta, 445000000000000021, "docs", start=41)
    Broker("kafka", broker.bootstrap_servers).create_topics(["by-dev-rootcoord-dml_3", "by-dev-rootcoord-dml_7"])
    for start in ("creation", "checkpoint"):
        catalog = _catalog(client, meta, etcd_root, broker.bootstrap_servers)
        catalog.start = start
        record = catalog.collections()[0]
        position = catalog.start_position(record, record.vchannels[1])
        assert (position.offset, position.ts) == (43, 1000 + 445000000000000021)
        assert client.get(gap_key(etcd_root, record.vchannels[1])) is None


def test_with_start_segments_a_vchannel_starts_at_milvus_checkpoint_with_its_persisted_segments(
        client, etcd_root, broker):
    """``milvus.start = segments``: Milvus's channel checkpoint and the ids of the live segments it
    persisted (the DataNode imports them); the collection's start while Milvus persisted nothing."""
    meta = f"{etcd_root}/milvus/meta"
    cid = 445000000000000031
    _put_collection(client, meta, cid, "docs", start=41)
    catalog = _catalog(client, meta, etcd_root, broker.bootstrap_servers)
    catalog.start = "segments"
    record = catalog.collections()[0]
    vchannel = record.vchannels[0]
    assert catalog.start_position(record, vchannel) == StartPosition(offset=42, ts=1000 + cid)

    base = f"{meta}/datacoord-meta"
    for seg, state, level in ((1, common_pb2.SegmentState.Flushed, 0), (2, common_pb2.SegmentState.Growing, 0),
                              (3, common_pb2.SegmentState.Dropped, 0), (4, common_pb2.SegmentState.Flushed, 1),
                              (5, common_pb2.SegmentState.Flushing, 0)):
        client.put(f"{base}/s/{cid}/{cid + 1}/{seg}", SegmentInfo(
            ID=seg, collectionID=cid, partitionID=cid + 1, insert_channel=vchannel, state=state,
            level=level).SerializeToString())
    client.put(f"{base}/s/{cid}/{cid + 1}/6", SegmentInfo(   # the other shard's
        ID=6, collectionID=cid, partitionID=cid + 1, insert_channel=record.vchannels[1],
        state=common_pb2.SegmentState.Flushed).SerializeToString())
    client.put(f"{base}/channel-cp/{vchannel}",
               msg_pb2.MsgPosition(channel_name=vchannel, msgID=kafka_msg_id(900), timestamp=9000).SerializeToString())
    assert catalog.start_position(record, vchannel) == StartPosition(offset=900, ts=9000, flushed=(1, 5),
                                                                     unflushed=(2,))
    assert client.get(gap_key(etcd_root, vchannel)) is None
