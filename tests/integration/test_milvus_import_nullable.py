"""The history import of a Milvus 2.5 collection with nullable fields of every payload shape (Bool,
Int32, Double, VarChar, JSON, Array) and a nullable field with a default value, persisted in
storage v1: two segments as Milvus's DataNode syncs them (``InsertCodec``: column ``val``,
descriptor extras ``nullable``), one as its compaction writes it (the stream writers' layout),
their DataCoord meta in a real etcd, imported by Spark tasks. Every row lands once with its nulls
where Milvus has them: compared as a multiset of whole rows, then field by field in every Delta
reader. A segment holding a null in a field the schema says is not nullable stops the import,
naming the file. Files from tests/milvus_binlog_files.py, written after Milvus's Go writers."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.etcd.client import EtcdClient
from deltanode.milvus_import.importer import ImportFailed, MilvusSource, VchannelImporter
from deltanode.milvus_import.meta import MilvusSegmentState
from deltanode.state.commit import CollectionCommitter, QuarantineLog
from deltanode.wire.datapb import Binlog, FieldBinlog, SegmentInfo
from deltanode.wire.milvus_proto import msg_pb2, schema_pb2
from deltanode.wire.positions import CODECS, kafka_msg_id
from deltanode.wire.schema import CollectionLayout

from .. import milvus_binlog_files as files
from ..delta_readers import READERS, by_spark

pytestmark = pytest.mark.spark
DataType = schema_pb2.DataType
CID, PART = 5251, 5252
VCHANNEL = f"null-rootcoord-dml_0_{CID}v0"
TS0 = 470767461955796999
DEFAULT_LEVEL = 5
# name, field id, DataType, type params, nullable
FIELDS = [("pk", 100, DataType.Int64, {}, False), ("vec", 101, DataType.FloatVector, {"dim": "2"}, False),
          ("flag", 102, DataType.Bool, {}, True), ("n", 103, DataType.Int32, {}, True),
          ("score", 104, DataType.Double, {}, True), ("tag", 105, DataType.VarChar, {"max_length": "8"}, True),
          ("meta", 106, DataType.JSON, {}, True), ("nums", 107, DataType.Array, {"max_capacity": "4"}, True),
          ("level", 108, DataType.Int32, {}, True)]
NULLABLE = [name for name, *_, nullable in FIELDS if nullable]


def schema() -> schema_pb2.CollectionSchema:
    out = schema_pb2.CollectionSchema(name="nullable")
    for name, fid, dtype, params, nullable in FIELDS:
        f = out.fields.add(fieldID=fid, name=name, data_type=dtype, is_primary_key=name == "pk", nullable=nullable)
        if dtype == DataType.Array:
            f.element_type = DataType.Int64
        if name == "level":
            f.default_value.int_data = DEFAULT_LEVEL
        for k, v in params.items():
            f.type_params.add(key=k, value=v)
    return out


def row(pk: int) -> dict:
    """Row ``pk`` as Milvus persisted it, each field null on a pattern of its own. ``level`` has a
    default: the proxy wrote it where the client sent null, so the binlog holds no null of it."""
    return {"pk": pk, "vec": [float(pk), -1.0], "flag": None if pk % 2 == 0 else pk % 3 == 0,
            "n": None if pk % 3 == 0 else pk * 7, "score": None if pk % 4 == 1 else pk / 4,
            "tag": None if pk % 5 == 0 else ("" if pk % 5 == 1 else f"t{pk}"),
            "meta": None if pk % 2 == 1 else ("null" if pk % 6 == 0 else json.dumps({"pk": pk})),
            "nums": None if pk % 3 == 1 else [pk] * (pk % 3), "level": DEFAULT_LEVEL if pk % 4 == 0 else pk}


def _payloads(pks: list[int]) -> dict[int, tuple[int, pa.Array]]:
    """Each field's payload values (a null: a null row), and the system fields'."""
    rows = [row(pk) for pk in pks]

    def arrays(r: dict) -> bytes | None:
        if r["nums"] is None:
            return None
        sf = schema_pb2.ScalarField()
        sf.long_data.data.extend(r["nums"])
        return sf.SerializeToString()
    return {0: (DataType.Int64, pa.array([pk * 10 for pk in pks], pa.int64())),
            1: (DataType.Int64, pa.array([TS0 + pk for pk in pks], pa.int64())),
            100: (DataType.Int64, pa.array(pks, pa.int64())),
            101: (DataType.FloatVector, files.float_vector_payload(np.array([r["vec"] for r in rows]))),
            102: (DataType.Bool, pa.array([r["flag"] for r in rows], pa.bool_())),
            103: (DataType.Int32, pa.array([r["n"] for r in rows], pa.int32())),
            104: (DataType.Double, pa.array([r["score"] for r in rows], pa.float64())),
            105: (DataType.VarChar, pa.array([r["tag"] for r in rows], pa.string())),
            106: (DataType.JSON, pa.array([None if r["meta"] is None else r["meta"].encode() for r in rows],
                                          pa.binary())),
            107: (DataType.Array, pa.array([arrays(r) for r in rows], pa.binary())),
            108: (DataType.Int32, pa.array([r["level"] for r in rows], pa.int32()))}


def put_segment(client: EtcdClient, base: str, root, seg: int, syncs: list[list[int]], *, stream: bool,
                state: MilvusSegmentState = MilvusSegmentState.FLUSHED) -> None:
    """A segment of a binlog a field a sync, ``stream``: in the compaction's layout; its meta."""
    nullable = {fid: flag for _, fid, _, _, flag in FIELDS}
    logs: dict[int, list[Binlog]] = {}
    for i, pks in enumerate(syncs):
        for fid, (dtype, values) in _payloads(pks).items():
            log_id = seg * 1000 + i * 100 + fid
            path = root / f"insert_log/{CID}/{PART}/{seg}/{fid}/{log_id}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files.insert_binlog(dtype, values, field_id=fid, collection_id=CID, partition_id=PART,
                                                 segment_id=seg, stream=stream, nullable=nullable.get(fid, False)))
            logs.setdefault(fid, []).append(Binlog(entries_num=len(pks), logID=log_id))
    info = SegmentInfo(ID=seg, collectionID=CID, partitionID=PART, insert_channel=VCHANNEL,
                       num_of_rows=sum(map(len, syncs)), state=int(state),
                       dml_position=msg_pb2.MsgPosition(channel_name=VCHANNEL, timestamp=TS0 + 100))
    client.put(f"{base}/s/{CID}/{PART}/{seg}", info.SerializeToString())
    for fid, binlogs in logs.items():
        client.put(f"{base}/binlog/{CID}/{PART}/{seg}/{fid}",
                   FieldBinlog(fieldID=fid, binlogs=binlogs).SerializeToString())


def _import(client, etcd_root, tmp_path, spark, collection: schema_pb2.CollectionSchema) -> StorageLayout:
    """The vchannel's import, with Milvus's checkpoint past every segment; the Delta storage."""
    client.put(f"{etcd_root}/datacoord-meta/channel-cp/{VCHANNEL}", msg_pb2.MsgPosition(
        channel_name=VCHANNEL, msgID=kafka_msg_id(30), timestamp=TS0 + 200).SerializeToString())
    storage = StorageLayout(str(tmp_path / "delta"))
    layout = CollectionLayout.from_proto(collection)
    committer = CollectionCommitter(storage, CID, layout.insert_schema(), layout.delete_schema(),
                                    QuarantineLog(storage))
    importer = VchannelImporter(spark.sparkContext, storage, MilvusSource(
        client=client, meta_root=etcd_root, storage=StorageLayout(str(tmp_path / "milvus")),
        positions=CODECS["kafka"]))
    importer.run(VCHANNEL, CID, collection, committer, 7)
    return storage


def _frozen(value):
    return tuple(value) if isinstance(value, list) else value


def test_an_import_of_2_5_segments_keeps_every_null_where_milvus_has_it(client, etcd_root, tmp_path, spark):
    base, root = f"{etcd_root}/datacoord-meta", tmp_path / "milvus"
    put_segment(client, base, root, 11, [[1, 2, 3, 4], [5, 6, 7, 8]], stream=False)
    put_segment(client, base, root, 12, [[9, 10, 11, 12, 13, 14]], stream=True)
    put_segment(client, base, root, 13, [[15, 16, 17]], stream=False, state=MilvusSegmentState.GROWING)
    pks = list(range(1, 18))
    names = [name for name, *_ in FIELDS]
    expected = Counter(tuple(_frozen(row(pk)[n]) for n in names) for pk in pks)

    storage = _import(client, etcd_root, tmp_path, spark, schema())

    uri = storage.insert_log(CID)
    table = read_table(storage, uri, names + ["_ts", "_row_id", "_segment_id"])
    got = Counter(tuple(_frozen(v) for v in r) for r in zip(*(table.column(n).to_pylist() for n in names)))
    nulls = {n: table.column(n).null_count for n in NULLABLE}
    print(f"{len(pks)} rows persisted in 3 segments, {table.num_rows} imported; nulls by field: {nulls}")
    assert got == expected
    assert nulls == {n: sum(row(pk)[n] is None for pk in pks) for n in NULLABLE}
    assert nulls["level"] == 0 and all(nulls[n] for n in NULLABLE if n != "level")
    assert Counter(zip(table.column("pk").to_pylist(), table.column("_ts").to_pylist(),
                       table.column("_row_id").to_pylist())) == Counter((pk, TS0 + pk, pk * 10) for pk in pks)
    readers = {**READERS, "spark": lambda u, c: by_spark(spark, u, c)}
    for name in NULLABLE:
        want = Counter((pk, _frozen(row(pk)[name])) for pk in pks)
        for reader, read in readers.items():
            t = read(uri, ["pk", name])
            assert Counter(zip(t.column("pk").to_pylist(), map(_frozen, t.column(name).to_pylist()))) == want, \
                (name, reader)


def test_a_null_in_a_field_that_is_not_nullable_stops_the_import_naming_its_file(client, etcd_root, tmp_path,
                                                                                 spark):
    """Segment 21's binlog of ``n`` says nullable and holds a null; the schema's ``n`` is not."""
    base, root = f"{etcd_root}/datacoord-meta", tmp_path / "milvus"
    put_segment(client, base, root, 21, [[1, 2, 3]], stream=False)
    strict = schema()
    next(f for f in strict.fields if f.name == "n").nullable = False
    with pytest.raises(ImportFailed, match=rf"insert_log/{CID}/{PART}/21/103/\d+: field 'n' \(id 103, Int32\): "
                                           r"1 null value\(s\) in a field that is not nullable"):
        _import(client, etcd_root, tmp_path, spark, strict)
    storage = StorageLayout(str(tmp_path / "delta"))
    assert read_table(storage, storage.insert_log(CID), ["pk"]).num_rows == 0   # nothing of the segment committed
