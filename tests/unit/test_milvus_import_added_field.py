"""A segment Milvus persisted before a field was added to its live collection, imported with the
collection's newer schema (milvus_import.segment_task, .column_groups): it holds nothing of the
field (no binlog of it in storage v1, no column in any group in v2), and the field reads as null in
every row, as Milvus reads it, when it is nullable; a field that is not nullable is refused. A
segment holding a field the schema does not have yet is refused, naming the field: its rows would
lose it. Files after Milvus's writers (tests/milvus_binlog_files.py, tests/milvus_v2_files.py),
each imported file read back and its rows compared as a multiset with what the segment holds."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltanode.delta.layout import StorageLayout
from deltanode.milvus_import.meta import MilvusSegmentState, PersistedSegment, SegmentLevel
from deltanode.milvus_import.segment_task import ImportedSegment, SegmentImport, import_segment
from deltanode.wire.milvus_proto import schema_pb2
from tests import milvus_binlog_files as binlogs
from tests import milvus_v2_files as v2

DataType = schema_pb2.DataType
COLL, PART, SEG = 447, 448, 449
TS0 = 470767461955796999
PK, VEC, NOTE, SCORE = 100, 101, 102, 103


def schema(*added: schema_pb2.FieldSchema) -> schema_pb2.CollectionSchema:
    """The collection as created (an Int64 key, a vector), then ``added``; RowID and Timestamp after
    the user's fields, as RootCoord keeps them."""
    out = schema_pb2.CollectionSchema(name="grown", version=len(added))
    out.fields.add(fieldID=PK, name="pk", data_type=DataType.Int64, is_primary_key=True)
    out.fields.add(fieldID=VEC, name="vec", data_type=DataType.FloatVector,
                   type_params=[{"key": "dim", "value": "2"}])
    out.fields.extend(added)
    out.fields.add(fieldID=0, name="RowID", data_type=DataType.Int64)
    out.fields.add(fieldID=1, name="Timestamp", data_type=DataType.Int64)
    return out


def note(nullable: bool = True) -> schema_pb2.FieldSchema:
    return schema_pb2.FieldSchema(fieldID=NOTE, name="note", data_type=DataType.VarChar, nullable=nullable,
                                  type_params=[{"key": "max_length", "value": "16"}])


def score() -> schema_pb2.FieldSchema:
    return schema_pb2.FieldSchema(fieldID=SCORE, name="score", data_type=DataType.Float, nullable=True)


def values(pks: list[int], *, notes: bool) -> dict[int, list]:
    """What Milvus's DataNode syncs of rows ``pks``: a value a row by field id."""
    out = {0: [pk * 10 for pk in pks], 1: [TS0 + pk for pk in pks], PK: pks,
           VEC: [[float(pk), -1.0] for pk in pks]}
    if notes:
        out[NOTE] = [None if pk % 3 == 0 else f"n{pk}" for pk in pks]
    return out


def v1_segment(root: Path, syncs: list[list[int]], *, notes: bool, segment: int = SEG,
               collection: int = COLL) -> PersistedSegment:
    """Storage v1: a binlog a field a sync, written as Milvus's DataNode writes them; ``notes``: whether
    the segment was written with ``note`` (after it was added)."""
    log_ids = itertools.count(segment * 100)
    paths: dict[int, list[str]] = {}
    for pks in syncs:
        vals = values(pks, notes=notes)
        payloads = {0: (DataType.Int64, pa.array(vals[0], pa.int64())),
                    1: (DataType.Int64, pa.array(vals[1], pa.int64())),
                    PK: (DataType.Int64, pa.array(pks, pa.int64())),
                    VEC: (DataType.FloatVector, binlogs.float_vector_payload(np.array(vals[VEC])))}
        if notes:
            payloads[NOTE] = (DataType.VarChar, pa.array(vals[NOTE], pa.string()))
        for fid, (dtype, payload) in payloads.items():
            path = f"insert_log/{collection}/{PART}/{segment}/{fid}/{next(log_ids)}"
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(binlogs.insert_binlog(dtype, payload, field_id=fid, collection_id=collection,
                                                            partition_id=PART, segment_id=segment))
            paths.setdefault(fid, []).append(path)
    return PersistedSegment(segment_id=segment, partition_id=PART, state=MilvusSegmentState.FLUSHED,
                            level=SegmentLevel.L1, rows=sum(map(len, syncs)), dml_ts=TS0 + 100, start_ts=TS0,
                            binlogs=tuple((fid, tuple(p)) for fid, p in sorted(paths.items())), deltalogs=(),
                            entries=tuple((fid, tuple(map(len, syncs))) for fid in sorted(paths)))


def v2_segment(root: Path, syncs: list[list[int]], *, written_with: schema_pb2.CollectionSchema, segment: int = SEG,
               collection: int = COLL) -> PersistedSegment:
    """Storage v2: a Parquet file a column group a sync, the groups of ``written_with``."""
    log_ids = itertools.count(segment * 100)
    written = [v2.write_sync(root, written_with, collection_id=collection, partition_id=PART, segment_id=segment,
                             values=values(pks, notes=any(f.fieldID == NOTE for f in written_with.fields)),
                             log_ids=log_ids) for pks in syncs]
    groups = sorted({w.group_id for w in written[0]})

    def of(g: int) -> list[v2.WrittenGroup]:
        return [w for sync in written for w in sync if w.group_id == g]
    return PersistedSegment(segment_id=segment, partition_id=PART, state=MilvusSegmentState.FLUSHED,
                            level=SegmentLevel.L1, rows=sum(map(len, syncs)), dml_ts=TS0 + 100, start_ts=TS0,
                            binlogs=tuple((g, tuple(w.path for w in of(g))) for g in groups), deltalogs=(),
                            storage_version=2, child_fields=tuple((g, of(g)[0].field_ids) for g in groups),
                            entries=tuple((g, tuple(w.rows for w in of(g))) for g in groups))


def run(tmp_path: Path, segment: PersistedSegment, read_with: schema_pb2.CollectionSchema) -> ImportedSegment:
    return import_segment(SegmentImport(storage=StorageLayout(str(tmp_path / "delta")),
                                        source=StorageLayout(str(tmp_path / "milvus")), collection_id=COLL,
                                        schema=read_with.SerializeToString(), segment=segment, deltalogs=()))


def imported_rows(tmp_path: Path, result: ImportedSegment, columns: list[str]) -> Counter:
    assert result.error == "" and result.entry is not None, result
    storage = StorageLayout(str(tmp_path / "delta"))
    table = pq.read_table(f"{storage.insert_log(COLL)}/{result.entry.path}")
    return Counter(zip(*(table.column(c).to_pylist() for c in columns)))


def expected(pks: list[int], *, notes: bool) -> Counter:
    return Counter((pk, TS0 + pk, (None if pk % 3 == 0 else f"n{pk}") if notes else None, None) for pk in pks)


def test_a_v1_segment_written_before_two_fields_were_added_reads_them_as_null(tmp_path):
    syncs = [[1, 2, 3], [4, 5]]
    segment = v1_segment(tmp_path / "milvus", syncs, notes=False)
    result = run(tmp_path, segment, schema(note(), score()))
    got = imported_rows(tmp_path, result, ["pk", "_ts", "note", "score"])
    print(f"v1: {sum(got.values())} rows imported of {sum(map(len, syncs))}, {result.entry.rows} in the file")
    assert got == expected([1, 2, 3, 4, 5], notes=False)
    assert result.rows == 5


def test_a_v1_segment_written_after_one_was_added_keeps_it_and_reads_the_later_one_as_null(tmp_path):
    segment = v1_segment(tmp_path / "milvus", [[1, 2, 3, 6]], notes=True)
    got = imported_rows(tmp_path, run(tmp_path, segment, schema(note(), score())), ["pk", "_ts", "note", "score"])
    assert got == expected([1, 2, 3, 6], notes=True)


def test_a_v2_segment_written_before_two_fields_were_added_reads_them_as_null(tmp_path):
    syncs = [[1, 2, 3], [4, 5]]
    segment = v2_segment(tmp_path / "milvus", syncs, written_with=schema())
    result = run(tmp_path, segment, schema(note(), score()))
    got = imported_rows(tmp_path, result, ["pk", "_ts", "note", "score"])
    print(f"v2: {sum(got.values())} rows imported of {sum(map(len, syncs))}, {result.entry.rows} in the file")
    assert got == expected([1, 2, 3, 4, 5], notes=False)
    later = v2_segment(tmp_path / "milvus2", [[6, 7, 9]], written_with=schema(note()))
    got = imported_rows(tmp_path, import_segment(SegmentImport(
        storage=StorageLayout(str(tmp_path / "delta")), source=StorageLayout(str(tmp_path / "milvus2")),
        collection_id=COLL, schema=schema(note(), score()).SerializeToString(), segment=later, deltalogs=())),
        ["pk", "_ts", "note", "score"])
    assert got == expected([6, 7, 9], notes=True)


def test_a_missing_field_that_is_not_nullable_is_refused_in_either_layout(tmp_path):
    strict = schema(note(nullable=False))
    v1 = run(tmp_path, v1_segment(tmp_path / "milvus", [[1, 2]], notes=False), strict)
    assert v1.entry is None and v1.error == f"segment {SEG}: no binlogs of field(s) [{NOTE}]"
    v2_result = run(tmp_path, v2_segment(tmp_path / "milvus", [[1, 2]], written_with=schema()), strict)
    assert v2_result.entry is None and f"segment {SEG}: no column group of " in v2_result.error
    assert f"holds field(s) [{NOTE}]" in v2_result.error


def test_a_segment_holding_a_field_the_schema_lacks_is_refused_naming_it(tmp_path):
    """Milvus broadcasts a field's addition before it saves the collection's meta: a segment written
    with the field may be listed while the schema read from the meta still lacks it."""
    older = schema()
    for segment in (v1_segment(tmp_path / "milvus", [[1, 2]], notes=True),
                    v2_segment(tmp_path / "milvus", [[1, 2]], written_with=schema(note()))):
        result = run(tmp_path, segment, older)
        assert result.entry is None
        assert result.error == (f"segment {SEG} holds field(s) [{NOTE}] that the collection's schema (version 0) "
                                "does not have: a field added to the live collection that Milvus's meta did not "
                                "show yet")
