"""The history import of a collection a field was added to while it was live: segments Milvus
persisted before the field (storage v1 binlogs and v2 column groups, which hold nothing of it) and
after it (v2, holding it), their DataCoord meta in a real etcd, imported by Spark tasks into a table
that exists with the collection's older columns (another vchannel of it committed first).

The import's commits widen the table by the new column and record the schema they wrote with
(``deltanode.milvus.schema``); the rows written before the field read as null there in every
reader. A second vchannel's import, given the older schema (a watch made from Milvus's meta before
it showed the field), writes with the newer one the table records: its segment's values of the
field are kept. Rows are compared as multisets of (pk, ts, note) with what the segments hold.
"""

from __future__ import annotations

from collections import Counter

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.table_schema import recorded_schema
from deltanode.delta.tables import open_table, read_table
from deltanode.etcd.client import EtcdClient
from deltanode.milvus_import.importer import MilvusSource, VchannelImporter
from deltanode.milvus_import.meta import PersistedSegment
from deltanode.state.commit import CollectionCommitter, QuarantineLog
from deltanode.wire.datapb import Binlog, FieldBinlog, SegmentInfo
from deltanode.wire.milvus_proto import msg_pb2
from deltanode.wire.positions import CODECS, kafka_msg_id
from deltanode.wire.schema import CollectionLayout

from ..delta_readers import READERS, by_spark
from ..unit.test_milvus_import_added_field import PART, TS0, note, schema, v1_segment, v2_segment

pytestmark = pytest.mark.spark
CID = 5161
VCHANNELS = [f"grow-rootcoord-dml_{i}_{CID}v{i}" for i in range(2)]


def put_segment(client: EtcdClient, base: str, vchannel: str, seg: PersistedSegment) -> None:
    """The segment's DataCoord meta, as Milvus keeps it: its SegmentInfo and a FieldBinlog a field
    (storage v1) or a column group (v2), each log by its id."""
    key = f"{CID}/{PART}/{seg.segment_id}"
    info = SegmentInfo(ID=seg.segment_id, collectionID=CID, partitionID=PART, insert_channel=vchannel,
                       num_of_rows=seg.rows, state=int(seg.state), level=int(seg.level),
                       storage_version=seg.storage_version,
                       dml_position=msg_pb2.MsgPosition(channel_name=vchannel, timestamp=seg.dml_ts))
    client.put(f"{base}/s/{key}", info.SerializeToString())
    children, entries = dict(seg.child_fields), dict(seg.entries)
    for fid, paths in seg.binlogs:
        logs = [Binlog(entries_num=n, logID=int(path.rsplit("/", 1)[1])) for path, n in zip(paths, entries[fid])]
        client.put(f"{base}/binlog/{key}/{fid}",
                   FieldBinlog(fieldID=fid, child_fields=children.get(fid, ()), binlogs=logs).SerializeToString())


def rows(pks: list[int], *, notes: bool) -> Counter:
    """(pk, ts, note) of rows ``pks`` as the segments hold them (test_milvus_import_added_field.values)."""
    return Counter((pk, TS0 + pk, (None if pk % 3 == 0 else f"n{pk}") if notes else None) for pk in pks)


def test_an_import_widens_the_table_by_a_field_added_after_its_older_segments(client, etcd_root, tmp_path, spark):
    files, storage = tmp_path / "milvus", StorageLayout(str(tmp_path / "delta"))
    base = f"{etcd_root}/datacoord-meta"
    created, grown = schema(), schema(note())
    # v0: a v1 segment and a v2 one written before `note` was added, and a v2 one after it; v1: a v2
    # segment after it.
    segments = {VCHANNELS[0]: [v1_segment(files, [[1, 2, 3], [4, 5]], notes=False, segment=11, collection=CID),
                               v2_segment(files, [[6, 7, 8]], written_with=created, segment=12, collection=CID),
                               v2_segment(files, [[9, 10, 11, 12]], written_with=grown, segment=13, collection=CID)],
                VCHANNELS[1]: [v2_segment(files, [[21, 22, 23]], written_with=grown, segment=14, collection=CID)]}
    for vchannel, segs in segments.items():
        for seg in segs:
            put_segment(client, base, vchannel, seg)
        client.put(f"{base}/channel-cp/{vchannel}", msg_pb2.MsgPosition(
            channel_name=vchannel, msgID=kafka_msg_id(40), timestamp=TS0 + 200).SerializeToString())
    expected = rows([1, 2, 3, 4, 5, 6, 7, 8], notes=False) + rows([9, 10, 11, 12, 21, 22, 23], notes=True)
    # The table exists with the created columns, as another vchannel's first commit made it.
    older = CollectionLayout.from_proto(created)
    committer = CollectionCommitter(storage, CID, older.insert_schema(), older.delete_schema(), QuarantineLog(storage))
    committer.created_insert_log()
    assert "note" not in open_table(storage.insert_log(CID)).schema().to_arrow().names
    importer = VchannelImporter(spark.sparkContext, storage, MilvusSource(
        client=client, meta_root=etcd_root, storage=StorageLayout(str(files)), positions=CODECS["kafka"]))

    importer.run(VCHANNELS[0], CID, grown, committer, 7)
    table = open_table(storage.insert_log(CID))
    assert table.schema().to_arrow().names[-1] == "note"
    assert recorded_schema(table.metadata().configuration) == grown
    importer.run(VCHANNELS[1], CID, created, committer, 7)   # the watch's schema predates the field

    uri = storage.insert_log(CID)
    raw = read_table(storage, uri, ["pk", "_ts", "note"])
    got = Counter(zip(*(raw.column(c).to_pylist() for c in ("pk", "_ts", "note"))))
    print(f"{sum(expected.values())} rows persisted, {sum(got.values())} imported "
          f"({sum(1 for r in got.elements() if r[2] is not None)} with a note)")
    assert got == expected
    plain = Counter((pk, n) for pk, _, n in expected.elements())
    for name, reader in {**READERS, "spark": lambda u, c: by_spark(spark, u, c)}.items():
        read = reader(uri, ["pk", "note"])
        assert Counter(zip(read.column("pk").to_pylist(), read.column("note").to_pylist())) == plain, name
