"""Reading a segment Milvus 2.6 persisted in storage version 2 (milvus_import.column_group_format,
milvus_import.column_groups, milvus_import.columns), against files from tests/milvus_v2_files.py
(written after Milvus's and milvus-storage's writers): every 2.5/2.6 type, nulls, a struct array
and a BM25 output, compared with the columns the wire decoder makes of the same rows; and each
layout the import refuses, with the file and the reason."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.executor.decode import insert_columns
from deltanode.milvus_import.binlog_format import BinlogFormatError
from deltanode.milvus_import.column_group_format import open_column_group
from deltanode.milvus_import.column_groups import packed_syncs
from deltanode.milvus_import.columns import insert_column
from deltanode.milvus_import.meta import MilvusSegmentState, PersistedSegment, SegmentLevel
from deltanode.wire.milvus_proto import schema_pb2
from deltanode.wire.schema import CollectionLayout, FieldSpec
from tests import milvus26_types as m
from tests import milvus_v2_files as v2

DataType = schema_pb2.DataType
COLL, PART, SEG = 447, 448, 449
TS0 = 470767461955796999


def _schema() -> schema_pb2.CollectionSchema:
    """The 2.6 collection of every type, with RowID and Timestamp after the user's fields, as
    RootCoord appends them."""
    schema = m.schema()
    system = [f for f in schema.fields if f.fieldID < 100]
    user = [f for f in schema.fields if f.fieldID >= 100]
    del schema.fields[:]
    schema.fields.extend([*user, *system])
    return schema


def _values(schema: schema_pb2.CollectionSchema, rows: list[dict], ts: list[int]) -> dict[int, list]:
    """What a DataNode's InsertData holds of ``rows``: a value a row by field id (None a null),
    the struct array's sub-fields each a column, and the BM25 output the DataNode computed."""
    out: dict[int, list] = {0: [r["pk"] * 10 for r in rows], 1: ts}
    for f in schema.fields:
        if f.fieldID < 100:
            continue
        if f.fieldID == m.SPARSE:
            out[f.fieldID] = [{r["pk"] + 1: 0.5} for r in rows]
        elif f.fieldID == m.SCORE:
            out[f.fieldID] = [m.SCORE_DEFAULT if r["score"] is None else r["score"] for r in rows]
        elif f.data_type == DataType.Array:
            out[f.fieldID] = [None if r[f.name] is None else _strings(r[f.name]) for r in rows]
        elif f.data_type == DataType.Int8Vector:
            out[f.fieldID] = [r[f.name] for r in rows]
        else:
            out[f.fieldID] = [r[f.name] for r in rows]
    out[m.LEN_ID] = [_ints([c[m.LEN] for c in r[m.STRUCT]]) for r in rows]
    out[m.EMB_ID] = [[c[m.EMB] for c in r[m.STRUCT]] for r in rows]
    return out


def _strings(values: list[str]) -> schema_pb2.ScalarField:
    return schema_pb2.ScalarField(string_data=schema_pb2.StringArray(data=values))


def _ints(values: list[int]) -> schema_pb2.ScalarField:
    return schema_pb2.ScalarField(int_data=schema_pb2.IntArray(data=values))


def _segment(syncs: list[list[v2.WrittenGroup]], **kw) -> PersistedSegment:
    groups = sorted({w.group_id for sync in syncs for w in sync})

    def of(g: int) -> list[v2.WrittenGroup]:
        return [w for sync in syncs for w in sync if w.group_id == g]
    fields = dict(binlogs=tuple((g, tuple(w.path for w in of(g))) for g in groups),
                  child_fields=tuple((g, of(g)[0].field_ids) for g in groups),
                  entries=tuple((g, tuple(w.rows for w in of(g))) for g in groups))
    fields.update(kw)
    return PersistedSegment(segment_id=SEG, partition_id=PART, state=MilvusSegmentState.FLUSHED, level=SegmentLevel.L1,
                            rows=sum(len(s) and s[0].rows for s in syncs), dml_ts=TS0 + 100, start_ts=TS0,
                            deltalogs=(), storage_version=2, **fields)


def _write(root: Path, schema, rows: list[dict], ts: list[int], log_ids) -> list[v2.WrittenGroup]:
    return v2.write_sync(root, schema, collection_id=COLL, partition_id=PART, segment_id=SEG,
                         values=_values(schema, rows, ts), log_ids=log_ids)


def test_column_groups_are_split_as_milvus_2_6_6_splits_them():
    groups = v2.column_groups(v2.all_fields(_schema()))
    assert [(g.group_id, g.field_ids) for g in groups] == [
        (0, (m.PK, m.TENANT, 0, 1)),
        (1, (m.TITLE, m.AT, m.PLACE, m.SCORE, m.TAGS, m.DOC, m.FLAG, m.META, m.LEN_ID)),
        (m.BODY, (m.BODY,)), (m.VEC, (m.VEC,)), (m.QVEC, (m.QVEC,)), (m.SPARSE, (m.SPARSE,)),
        (m.EMB_ID, (m.EMB_ID,))]


def test_a_segment_of_every_26_type_reads_as_the_wire_decoder_reads_its_rows(tmp_path):
    schema = _schema()
    layout = CollectionLayout.from_proto(schema)
    log_ids = itertools.count(9000)
    batches = [[m.row(i) for i in range(0, 13)], [m.row(i, 1) for i in range(13, 20)]]
    stamps = [[TS0 + r["pk"] for r in rows] for rows in batches]
    syncs = [_write(tmp_path, schema, rows, ts, log_ids) for rows, ts in zip(batches, stamps)]
    groups = {w.group_id: w for w in syncs[0]}
    first = open_column_group((tmp_path / groups[1].path).read_bytes(), where=groups[1].path,
                              child_fields=groups[1].field_ids, rows=13)
    assert (first.field_ids, first.rows) == (groups[1].field_ids, 13)

    tables = list(packed_syncs(_segment(syncs), StorageLayout(str(tmp_path)), layout))

    assert [t.num_rows for t in tables] == [13, 7]
    for table, rows, ts in zip(tables, batches, stamps):
        req = m.insert_request(rows, collection_id=COLL, partition_id=PART, row_ids=[r["pk"] * 10 for r in rows],
                               timestamps=ts)
        wire, n = insert_columns(layout, req)
        assert table.column_names == [f.name for f in layout.fields] + ["_ts", "_row_id"]
        assert (len(wire), n) == (table.num_columns, table.num_rows)
        for name, got, want in zip(table.column_names, table.columns, wire):
            assert got.combine_chunks().equals(want), name
    nulls = {name: tables[0].column(name).null_count for name in ("body", "at", "place", "tags", "doc", "flag")}
    assert all(nulls.values()), nulls


def _small_schema(nullable: bool = True) -> schema_pb2.CollectionSchema:
    schema = schema_pb2.CollectionSchema(name="small")
    schema.fields.add(fieldID=100, name="pk", data_type=DataType.VarChar, is_primary_key=True,
                      type_params=[{"key": "max_length", "value": "16"}])
    schema.fields.add(fieldID=101, name="n", data_type=DataType.Int32, nullable=nullable)
    schema.fields.add(fieldID=102, name="vec", data_type=DataType.FloatVector,
                      type_params=[{"key": "dim", "value": "2"}])
    schema.fields.add(fieldID=0, name="RowID", data_type=DataType.Int64)
    schema.fields.add(fieldID=1, name="Timestamp", data_type=DataType.Int64)
    return schema


def _small_values(n: int, first: int = 0) -> dict[int, list]:
    return {100: [f"k{i}" for i in range(first, first + n)], 101: [None if i % 2 else i for i in range(n)],
            102: [[float(i), 1.0] for i in range(n)], 0: list(range(n)), 1: [TS0 + i for i in range(n)]}


def _small(tmp_path: Path, n: int = 4, syncs: int = 1) -> list[list[v2.WrittenGroup]]:
    log_ids = itertools.count(100)
    return [v2.write_sync(tmp_path, _small_schema(), collection_id=COLL, partition_id=PART, segment_id=SEG,
                          values=_small_values(n, s * n), log_ids=log_ids) for s in range(syncs)]


def _read(tmp_path: Path, segment: PersistedSegment, schema=None) -> list[pa.Table]:
    layout = CollectionLayout.from_proto(schema or _small_schema())
    return list(packed_syncs(segment, StorageLayout(str(tmp_path)), layout))


def test_syncs_of_a_small_segment_and_their_nulls(tmp_path):
    tables = _read(tmp_path, _segment(_small(tmp_path, 4, syncs=2)))
    rows = [r for t in tables for r in t.to_pylist()]
    assert [(r["pk"], r["n"], r["vec"], r["_row_id"]) for r in rows[:4]] == [
        ("k0", 0, [0.0, 1.0], 0), ("k1", None, [1.0, 1.0], 1), ("k2", 2, [2.0, 1.0], 2), ("k3", None, [3.0, 1.0], 3)]
    assert [r["pk"] for r in rows] == [f"k{i}" for i in range(8)]


def test_groups_listing_different_file_counts_are_read_whole(tmp_path):
    """A group whose two syncs' rows are in one file (the others list a file a sync): every
    group is read whole, its files one after the other."""
    syncs = _small(tmp_path, 3, syncs=2)
    vec = [w for sync in syncs for w in sync if w.group_id == 102]
    fields = [f for f in _small_schema().fields if f.fieldID == 102]
    values = [[float(i), 1.0] for i in range(6)]
    _rewrite(tmp_path, vec[0], v2.column_group_file(fields, [v2.arrow_column(fields[0], values)],
                                                    v2.column_groups(v2.all_fields(_small_schema()))))
    seg = _segment(syncs)
    seg = _segment(syncs, binlogs=tuple((g, p[:1] if g == 102 else p) for g, p in seg.binlogs),
                   entries=tuple((g, (6,) if g == 102 else r) for g, r in seg.entries))
    tables = _read(tmp_path, seg)
    assert len(tables) == 1
    assert [(r["pk"], r["vec"][0]) for r in tables[0].to_pylist()] == [(f"k{i}", float(i)) for i in range(6)]


def _rewrite(tmp_path: Path, w: v2.WrittenGroup, data: bytes) -> None:
    (tmp_path / w.path).write_bytes(data)


def test_groups_that_disagree_on_rows_are_refused(tmp_path):
    syncs = _small(tmp_path, 4)
    vec = next(w for w in syncs[0] if w.group_id == 102)
    fields = [f for f in _small_schema().fields if f.fieldID == 102]
    _rewrite(tmp_path, vec, v2.column_group_file(fields, [v2.arrow_column(fields[0], [[1.0, 2.0]] * 3)],
                                                 v2.column_groups(v2.all_fields(_small_schema()))))
    seg = _segment(syncs, entries=tuple((g, (3,) if g == 102 else rows) for g, rows in _segment(syncs).entries))
    with pytest.raises(BinlogFormatError, match=rf"segment {SEG}: its column groups hold different numbers of rows.*"
                                                rf"{vec.path}\): 3"):
        _read(tmp_path, seg)


def test_a_file_holding_fewer_rows_than_the_meta_lists_is_refused(tmp_path):
    syncs = _small(tmp_path, 4)
    seg = _segment(syncs, entries=tuple((g, (5,)) for g, _ in _segment(syncs).entries))
    first = syncs[0][0].path
    with pytest.raises(BinlogFormatError, match=rf"{first}: 4 rows; the segment's meta says 5"):
        _read(tmp_path, seg)


def test_a_file_whose_fields_are_not_the_groups_is_refused(tmp_path):
    syncs = _small(tmp_path, 4)
    seg = _segment(syncs, child_fields=tuple((g, (101, 102) if g == 1 else f) for g, f in _segment(syncs).child_fields))
    other = next(w for w in syncs[0] if w.group_id == 1)
    with pytest.raises(BinlogFormatError, match=rf"{other.path}: its columns hold fields \[101\]; the segment's meta "
                                                r"lists the group's fields as \[101, 102\]"):
        _read(tmp_path, seg)


@pytest.mark.parametrize("kv, reason", [
    ({b"group_field_id_list": b"100,0,1;101;102", b"row_group_metadata": b"10|4|0"},
     "no 'storage_version' in the Parquet key-value metadata"),
    ({b"group_field_id_list": b"100,0,1;101;102", b"row_group_metadata": b"10|4|0", b"storage_version": b"2.0.0"},
     "packed file version '2.0.0'"),
    ({b"row_group_metadata": b"10|4|0", b"storage_version": b"1.0.0"}, "no 'group_field_id_list'"),
    ({b"group_field_id_list": b"100;101;102", b"row_group_metadata": b"10|4|0", b"storage_version": b"1.0.0"},
     r"its columns hold fields \[100, 0, 1\], which group_field_id_list"),
    ({b"group_field_id_list": b"100,0,1;101;102", b"row_group_metadata": b"10|3|0", b"storage_version": b"1.0.0"},
     "row_group_metadata counts 3 rows, the Parquet footer 4"),
])
def test_a_file_without_the_packed_writers_metadata_is_refused(tmp_path, kv, reason):
    syncs = _small(tmp_path, 4)
    system = next(w for w in syncs[0] if w.group_id == 0)
    by_id = {f.fieldID: f for f in _small_schema().fields}
    fields = [by_id[i] for i in system.field_ids]
    values = _small_values(4)
    _rewrite(tmp_path, system, v2.column_group_file(fields, [v2.arrow_column(f, values[f.fieldID]) for f in fields],
                                                    [], kv=kv))
    with pytest.raises(BinlogFormatError, match=rf"{system.path}: {reason}"):
        _read(tmp_path, _segment(syncs))


def test_encrypted_and_foreign_files_are_refused(tmp_path):
    syncs = _small(tmp_path, 4)
    system = next(w for w in syncs[0] if w.group_id == 0)
    data = (tmp_path / system.path).read_bytes()
    _rewrite(tmp_path, system, data[:-4] + b"PARE")
    with pytest.raises(BinlogFormatError, match=rf"{system.path}: the Parquet file is encrypted"):
        _read(tmp_path, _segment(syncs))
    _rewrite(tmp_path, system, b"\xfa\xbc\xff\x00" + data[4:])
    with pytest.raises(BinlogFormatError, match=rf"{system.path}: not a Parquet file"):
        _read(tmp_path, _segment(syncs))


def test_a_null_in_a_field_the_schema_says_is_not_nullable_is_refused(tmp_path):
    syncs = _small(tmp_path, 4)
    other = next(w for w in syncs[0] if w.group_id == 1)
    with pytest.raises(BinlogFormatError, match=rf"{other.path}: field 'n' \(id 101, Int32\): 2 null value\(s\) in a "
                                                "field that is not nullable"):
        _read(tmp_path, _segment(syncs), _small_schema(nullable=False))


def test_a_column_of_another_type_is_refused_naming_the_file_and_field(tmp_path):
    syncs = _small(tmp_path, 4)
    vec = next(w for w in syncs[0] if w.group_id == 102)
    wrong = schema_pb2.FieldSchema(fieldID=102, name="vec", data_type=DataType.SparseFloatVector)
    _rewrite(tmp_path, vec, v2.column_group_file([wrong], [v2.arrow_column(wrong, [{1: 0.5}] * 4)],
                                                 v2.column_groups(v2.all_fields(_small_schema()))))
    with pytest.raises(BinlogFormatError, match=rf"{vec.path}: field 'vec' \(id 102, FloatVector\): payload is binary, "
                                                r"expected fixed_size_binary\[8\]"):
        _read(tmp_path, _segment(syncs))


def test_a_field_no_group_holds_is_refused(tmp_path):
    syncs = _small(tmp_path, 4)
    schema = _small_schema()
    schema.fields.add(fieldID=103, name="extra", data_type=DataType.Int64)
    with pytest.raises(BinlogFormatError, match=rf"segment {SEG}: no column group of \[0, 1, 102\] holds field\(s\) "
                                                r"\[103\]"):
        _read(tmp_path, _segment(syncs), schema)


def test_an_all_null_column_and_a_geometry_that_is_not_wkb(tmp_path):
    spec = FieldSpec(101, "n", DataType.Int32, nullable=True)
    assert insert_column(spec, pa.array([None, None], pa.int32())).to_pylist() == [None, None]
    place = FieldSpec(104, "place", DataType.Geometry, nullable=True)
    good = insert_column(place, pa.array([v2.wkb_point(1, 2), None, b""], pa.binary()), where="f")
    assert good.to_pylist() == [v2.wkb_point(1, 2), None, b""]
    with pytest.raises(BinlogFormatError, match=r"f: field 'place' \(id 104, Geometry\): row 1 is not WKB "
                                                r"\(byte order mark 80, not 0 or 1\)"):
        insert_column(place, pa.array([v2.wkb_point(1, 2), b"POINT (1 2)"], pa.binary()), where="f")
    at = FieldSpec(105, "at", DataType.Timestamptz, nullable=True)
    with pytest.raises(BinlogFormatError, match=r"f: field 'at' \(id 105, Timestamptz\): payload is string"):
        insert_column(at, pa.array(["2025-01-01"]), where="f")
