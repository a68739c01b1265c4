"""The types Milvus 2.5 and 2.6 add, from a 2.6 schema and the InsertRequests its proxy sends:
each field's Arrow/Delta column, its values decoded one by one with their nulls (full and compact
forms), what is refused and why, binlogs of them compacted and read back through Delta, and how
the lake's readers show them (comments, Spark types, JSON rows, WKT)."""

from __future__ import annotations

import datetime
import struct

import numpy as np
import pyarrow as pa
import pytest

from deltanode.delta.actions import AddFile
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.executor import decode
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.executor.rewrite_task import rewrite
from deltanode.lake import columns, views
from deltanode.lake.rows_json import converter
from deltanode.lake.wkb import NotWkb, to_wkt
from deltanode.records import Rewrite, SegmentFile
from deltanode.wire.milvus_proto import schema_pb2
from deltanode.wire.schema import TIMESTAMPTZ, CollectionLayout, DataType, SchemaError, schema_from_json

from .. import milvus26_types as m

LAYOUT = CollectionLayout.from_proto(m.schema())
ROWS = [m.row(i) for i in range(24)]
NAMES = [f.name for f in LAYOUT.fields]


def decoded(req) -> list[dict]:
    cols, n = decode.insert_columns(LAYOUT, req)
    return pa.Table.from_arrays(cols, names=NAMES + ["_ts", "_row_id"]).to_pylist()


def request(rows: list[dict] = ROWS):
    return m.insert_request(rows, collection_id=1, partition_id=2, timestamps=[5] * len(rows))


def fd_of(req, fid: int) -> schema_pb2.FieldData:
    return next(fd for fd in req.fields_data if fd.field_id == fid)


def spec(name: str):
    return next(f for f in LAYOUT.fields if f.name == name)


# -- schemas ------------------------------------------------------------------------------------
def test_each_26_type_has_its_column_and_the_bm25_output_has_none():
    types = dict(zip(LAYOUT.insert_schema().names, LAYOUT.insert_schema().types))
    assert list(types) == list(m.COLUMNS) + ["_ts", "_row_id", "_segment_id", "_partition_id"]
    assert "sparse" not in types   # BM25's output: not on the channel, never in a query's answer
    assert types["body"] == pa.string() and types["at"] == TIMESTAMPTZ == pa.timestamp("us", tz="UTC")
    assert types["place"] == pa.binary() and types["qvec"] == pa.list_(pa.int8())
    assert types[m.STRUCT] == pa.list_(pa.struct([pa.field(m.LEN, pa.int32()),
                                                  pa.field(m.EMB, pa.list_(pa.float32()))]))
    clips = spec(m.STRUCT)
    assert (clips.data_type, clips.field_id, clips.max_capacity) == (DataType.ArrayOfStruct, m.STRUCT_ID, m.MAX_CLIPS)
    assert [(s.name, s.wire_name, s.field_id, s.data_type, s.element_type, s.dim, s.max_capacity)
            for s in clips.sub_fields] == [
        (m.LEN, "clips[len]", m.LEN_ID, DataType.Array, DataType.Int32, 0, m.MAX_CLIPS),
        (m.EMB, "clips[emb]", m.EMB_ID, DataType.ArrayOfVector, DataType.FloatVector, m.EMB_DIM, m.MAX_CLIPS)]
    assert spec("qvec").dim == m.QVEC_DIM and spec("tenant").is_partition_key and spec("score").nullable


def test_a_function_output_other_than_bm25_is_a_column_and_one_no_function_makes_is_refused():
    schema = m.schema()
    schema.functions[0].type = schema_pb2.FunctionType.TextEmbedding   # computed by the proxy: in the insert
    assert "sparse" in CollectionLayout.from_proto(schema).insert_schema().names
    del schema.functions[:]
    with pytest.raises(SchemaError, match="field 'sparse' is a function's output, but no function of the schema"):
        CollectionLayout.from_proto(schema)


def _with_struct(**changes) -> schema_pb2.CollectionSchema:
    schema = m.schema()
    for key, value in changes.items():
        setattr(schema.struct_array_fields[0].fields[1], key, value)
    return schema


@pytest.mark.parametrize("schema, message", [
    (_with_struct(element_type=DataType.SparseFloatVector), "sub-field 'emb': an ArrayOfVector of SparseFloatVector"),
    (_with_struct(data_type=DataType.FloatVector), "sub-field 'emb': FloatVector; a struct array's sub-fields"),
    (_with_struct(name="clips[len]"), "duplicate sub-field names"),
])
def test_struct_arrays_milvus_would_not_make_are_refused_naming_the_field(schema, message):
    with pytest.raises(SchemaError, match=f"field 'clips', {message}" if "sub-field '" in message else message):
        CollectionLayout.from_proto(schema)


def test_an_arrayofvector_without_its_dim_is_refused():
    schema = m.schema()
    del schema.struct_array_fields[0].fields[1].type_params[:]
    with pytest.raises(SchemaError, match="'emb': an ArrayOfVector of FloatVector needs a positive 'dim'"):
        CollectionLayout.from_proto(schema)


def test_schema_files_take_the_26_scalars_and_int8_vectors():
    schema = schema_from_json({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                                          {"name": "t", "data_type": "Text", "nullable": True},
                                          {"name": "at", "data_type": "Timestamptz", "nullable": True},
                                          {"name": "g", "data_type": "Geometry"},
                                          {"name": "q", "data_type": "Int8Vector", "dim": 4}]}, "c")
    layout = CollectionLayout.from_proto(schema)
    assert [arrow for arrow in layout.insert_schema().types[:5]] == [
        pa.int64(), pa.string(), TIMESTAMPTZ, pa.binary(), pa.list_(pa.int8())]


# -- decoding -------------------------------------------------------------------------------------
def test_every_row_decodes_to_the_values_sent_with_nulls_as_nulls():
    got = decoded(request())
    want = [m.expected_row(r) | {"_ts": 5, "_row_id": r["pk"]} for r in ROWS]
    assert got == want
    # Every kind of null and of value is in there.
    for name in ("body", "at", "place", "tags", "doc", "flag"):
        assert any(r[name] is None for r in got) and any(r[name] is not None for r in got), name
    assert any(r["tags"] == [] for r in got) and any(r[m.STRUCT] == [] for r in got)
    assert max(len(r[m.STRUCT]) for r in got) == m.MAX_CLIPS
    assert {r["score"] for r in got if ROWS[r["pk"]]["score"] is None} == {m.SCORE_DEFAULT}
    assert got[3]["at"] == datetime.datetime(2023, 11, 14, 22, 13, 23, 9, tzinfo=datetime.UTC)
    assert got[1]["qvec"] == [-121, -120, -119, -118, -117, -116, -115, -114]


@pytest.mark.parametrize("fid, slot", [(m.BODY, "string_data"), (m.AT, "timestamptz_data"),
                                       (m.PLACE, "geometry_data"), (m.TAGS, "array_data")])
def test_nulls_in_the_compact_form_read_the_same(fid, slot):
    """A FieldData holding only the valid rows' values (as a client sends them) reads as the
    proxy's full form does."""
    req = request()
    fd = fd_of(req, fid)
    values = getattr(fd.scalars, slot).data
    kept = [v for v, ok in zip(list(values), fd.valid_data) if ok]
    del values[:]
    if slot == "array_data":
        for v in kept:
            values.add().CopyFrom(v)
    else:
        values.extend(kept)
    assert decoded(req) == decoded(request())


def test_a_struct_array_not_flattened_reads_as_the_flattened_one():
    """An ArrayOfStruct FieldData holding its sub-fields (``struct_arrays``), as a client sends it
    before the proxy flattens it."""
    req = request()
    subs = [fd for fd in req.fields_data if fd.field_id in (m.LEN_ID, m.EMB_ID)]
    whole = schema_pb2.FieldData(field_id=m.STRUCT_ID, field_name=m.STRUCT, type=DataType.ArrayOfStruct)
    whole.struct_arrays.fields.extend(subs)
    keep = [fd for fd in req.fields_data if fd.field_id not in (m.LEN_ID, m.EMB_ID)]
    del req.fields_data[:]
    req.fields_data.extend(keep + [whole])
    assert decoded(req) == decoded(request())


def test_a_nullable_struct_array_has_null_rows_where_its_sub_fields_agree():
    schema = m.schema()
    schema.struct_array_fields[0].nullable = True     # a later milvus-proto's flag; 2.6.6's has none
    layout = CollectionLayout.from_proto(schema)
    req = request(ROWS[:4])
    for fd in req.fields_data:
        if fd.field_id in (m.LEN_ID, m.EMB_ID):
            fd.valid_data.extend([True, False, True, True])
    cols, _ = decode.insert_columns(layout, req)
    clips = cols[[f.name for f in layout.fields].index(m.STRUCT)].to_pylist()
    assert clips == [ROWS[0][m.STRUCT], None, ROWS[2][m.STRUCT], ROWS[3][m.STRUCT]]
    fd_of(req, m.EMB_ID).valid_data[2] = False
    with pytest.raises(decode.Reject, match="field 'clips': row 2 is null in sub-field 'len' or 'emb' but not both"):
        decode.insert_columns(layout, req)


def test_an_insert_written_before_a_nullable_field_was_added_has_it_null_in_every_row():
    """Milvus reads the rows of an insert that predates a field added to the live collection as null
    there; the same insert's other fields keep their values."""
    req = _drop(_drop(_drop(request(ROWS[:4]), m.AT), m.TAGS), m.FLAG)
    got = decoded(req)
    assert [(r["at"], r["tags"], r["flag"]) for r in got] == [(None, None, None)] * 4
    want = decoded(request(ROWS[:4]))
    assert [{k: v for k, v in r.items() if k not in ("at", "tags", "flag")} for r in got] == \
        [{k: v for k, v in r.items() if k not in ("at", "tags", "flag")} for r in want]
    cols, _ = decode.insert_columns(LAYOUT, req)
    assert cols[NAMES.index("at")].type == TIMESTAMPTZ and cols[NAMES.index("tags")].null_count == 4


def test_a_nullable_struct_array_missing_whole_is_null_and_missing_in_part_is_refused():
    schema = m.schema()
    schema.struct_array_fields[0].nullable = True
    layout = CollectionLayout.from_proto(schema)
    req = _drop(_drop(request(ROWS[:4]), m.LEN_ID), m.EMB_ID)
    cols, _ = decode.insert_columns(layout, req)
    assert cols[[f.name for f in layout.fields].index(m.STRUCT)].to_pylist() == [None] * 4
    with pytest.raises(decode.Reject, match="sub-field 'clips\\[emb\\]' \\(id 116\\) missing"):
        decode.insert_columns(layout, _drop(request(ROWS[:4]), m.EMB_ID))
    with pytest.raises(decode.Reject, match="sub-field 'clips\\[len\\]' \\(id 115\\) missing"):
        decode.insert_columns(LAYOUT, req)   # not nullable: refused whole


def _drop(req, fid: int):
    keep = [fd for fd in req.fields_data if fd.field_id != fid]
    del req.fields_data[:]
    req.fields_data.extend(keep)
    return req


def _mangle(fid: int, change):
    def make():
        req = request(ROWS[:4])
        change(fd_of(req, fid))
        return req
    return make


def _wkt_geometry(fd):
    fd.scalars.geometry_wkt_data.data.extend(["POINT (1 2)"] * 4)


def _bad_wkb(fd):
    fd.scalars.geometry_data.data[1] = b"\x07junk"


def _short_int8(fd):
    fd.vectors.int8_vector = fd.vectors.int8_vector[:-1]


def _half_vector(fd):
    fd.vectors.vector_array.data[1].float_vector.data.append(1.0)


def _other_vector(fd):
    fd.vectors.vector_array.element_type = DataType.BinaryVector


def _one_less_length(fd):
    fd.scalars.array_data.data[1].int_data.data.append(9)


def _too_many(fd):
    fd.scalars.array_data.data[0].int_data.data.extend([1] * 5)


def _nulls_not_nullable(fd):
    fd.valid_data.extend([True, False, True, True])


def _dim(fd):
    fd.vectors.dim = 4


@pytest.mark.parametrize("make, message", [
    (_mangle(m.PLACE, _wkt_geometry), "field 'place': a Geometry as geometry_wkt_data; Milvus's proxy sends WKB"),
    (_mangle(m.PLACE, _bad_wkb), "field 'place': row 1 is not WKB"),
    (_mangle(m.QVEC, _short_int8), "field 'qvec': 31 bytes for 4 rows of dim 8"),
    (_mangle(m.QVEC, _dim), "field 'qvec': dim 4, schema says 8"),
    (_mangle(m.EMB_ID, _half_vector), "field 'emb': row 1 holds 3 floats, not whole vectors of 2 floats"),
    (_mangle(m.EMB_ID, _other_vector), "field 'emb': an ArrayOfVector of BinaryVector, schema says"),
    (_mangle(m.LEN_ID, _one_less_length), "field 'clips': row 1 has 2 elements in sub-field 'len', 1 in 'emb'"),
    (_mangle(m.LEN_ID, _too_many), "field 'len': an array of 5 elements, max_capacity is 3"),
    (_mangle(m.VEC, _nulls_not_nullable), "field 'vec': 1 null"),
    (lambda: _drop(request(ROWS[:4]), m.EMB_ID), "field 'clips': sub-field 'clips\\[emb\\]' \\(id 116\\) missing"),
    (lambda: _drop(request(ROWS[:4]), m.VEC), "field 'vec' \\(id 109\\) missing from the insert"),
    (lambda: _drop(request(ROWS[:4]), m.TITLE), "field 'title' \\(id 101\\) missing from the insert"),
])
def test_what_does_not_fit_is_refused_with_the_field_and_the_reason(make, message):
    with pytest.raises(decode.Reject, match=message):
        decode.insert_columns(LAYOUT, make())


def test_an_arrayofvector_of_each_dense_vector_type_keeps_its_vectors():
    rng = np.random.default_rng(3)
    for element, dim, slot, width in ((DataType.Int8Vector, 4, "int8_vector", 4),
                                      (DataType.BinaryVector, 16, "binary_vector", 2),
                                      (DataType.Float16Vector, 2, "float16_vector", 4),
                                      (DataType.BFloat16Vector, 2, "bfloat16_vector", 4)):
        schema = m.schema()
        sub = schema.struct_array_fields[0].fields[1]
        sub.element_type = element
        sub.type_params[0].value = str(dim)
        layout = CollectionLayout.from_proto(schema)
        sub_spec = next(f for f in layout.fields if f.name == m.STRUCT).sub_fields[1]
        fd = schema_pb2.FieldData(field_id=m.EMB_ID, type=DataType.ArrayOfVector)
        fd.vectors.vector_array.element_type = element
        rows = [[rng.bytes(width) for _ in range(k)] for k in (2, 0, 1)]
        for vectors in rows:
            setattr(fd.vectors.vector_array.data.add(), slot, b"".join(vectors))
        got = decode.field_column(sub_spec, fd, 3).to_pylist()
        if element == DataType.Int8Vector:
            rows = [[list(np.frombuffer(v, np.int8)) for v in vectors] for vectors in rows]
        assert got == rows, element


# -- files ----------------------------------------------------------------------------------------
def test_binlogs_of_the_26_types_compact_and_read_back_through_delta(tmp_path):
    """Two tasks' files of one segment (pyarrow writes them: a timestamp, a struct), merged by
    compaction, committed to a Delta table delta-rs created, read back: the same rows."""
    storage = StorageLayout(str(tmp_path))
    entries = []
    for part, ts in ((ROWS[:12], 100), (ROWS[12:], 200)):
        writer = BinlogWriter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema())
        req = m.insert_request(part, collection_id=1, partition_id=2, timestamps=[ts] * len(part))
        cols, n = decode.insert_columns(LAYOUT, req)
        writer.add_insert(5, 2, cols, n, 1000, 0, ts, ts)
        entries += writer.close()
    uri = storage.insert_log(1)
    task = Rewrite(1, "v", 5, 2, tuple(SegmentFile(e.path, e.size, e.rows) for e in entries), LAYOUT.insert_schema(),
                   LAYOUT.primary_key.name, storage)
    compacted = rewrite(task)
    DeltaLog(uri, LAYOUT.insert_schema()).commit(adds=[AddFile(path=compacted.path, size=compacted.size,
                                                               stats=compacted.stats)], txns={}, expected={}, info={})
    got = sorted(read_table(storage, uri).to_pylist(), key=lambda r: r["pk"])
    want = [m.expected_row(r) | {"_ts": 100 if r["pk"] < 12 else 200, "_row_id": r["pk"], "_segment_id": 5,
                                 "_partition_id": 2} for r in ROWS]
    assert len(got) == len(ROWS) and got == want


# -- the lake's readers ------------------------------------------------------------------------------
def test_comments_and_spark_types_of_the_26_columns():
    comments = {f.name: columns.comment(f) for f in LAYOUT.fields}
    assert comments["qvec"] == "Milvus Int8Vector, dim 8"
    assert comments["at"] == "Milvus Timestamptz, nullable" and comments["place"] == "Milvus Geometry, nullable"
    assert comments[m.STRUCT] == "Milvus ArrayOfStruct (len: Array of Int32, emb: ArrayOfVector of FloatVector, dim 2)"
    assert {n: columns.milvus_type({"comment": c}) for n, c in comments.items()}[m.STRUCT] == "ArrayOfStruct"
    sql = {f.name: views.sql_type(f.type) for f in LAYOUT.insert_schema()}
    assert sql["at"] == "TIMESTAMP" and sql["qvec"] == "ARRAY<TINYINT>" and sql["place"] == "BINARY"
    assert sql[m.STRUCT] == "ARRAY<STRUCT<`len`: INT, `emb`: ARRAY<FLOAT>>>"


def test_json_rows_give_a_geometry_as_wkt_and_a_timestamptz_in_utc():
    from pyspark.sql import types as T

    wkt = converter(T.BinaryType(), {"comment": "Milvus Geometry, nullable"})
    assert wkt(bytearray(m.wkb_point(1, -0.5))) == "POINT (1 -0.5)" and wkt(None) is None
    assert wkt(bytearray(b"\x05not wkb")) == "BW5vdCB3a2I="   # kept as any bytes are
    instant = converter(T.TimestampType(), {"comment": "Milvus Timestamptz"})
    local = datetime.datetime(2025, 1, 1, 8, 0, 0, 5)   # Spark's naive local time
    utc = local.astimezone(datetime.UTC)
    assert instant(local) == utc.isoformat() and instant(local).endswith("+00:00")


def _le(fmt: str, *values) -> bytes:
    return struct.pack("<" + fmt, *values)


@pytest.mark.parametrize("raw, text", [
    (m.wkb_point(1.5, 2), "POINT (1.5 2)"),
    (struct.pack(">BIdd", 0, 1, 3, 4), "POINT (3 4)"),                          # big-endian
    (_le("BIdd", 1, 1, float("nan"), float("nan")), "POINT EMPTY"),
    (m.wkb_line([(0, 0), (1, 1.25)]), "LINESTRING (0 0, 1 1.25)"),
    (_le("BIII" + "dd" * 4, 1, 3, 1, 4, 0, 0, 1, 0, 1, 1, 0, 0), "POLYGON ((0 0, 1 0, 1 1, 0 0))"),
    (_le("BII", 1, 4, 2) + m.wkb_point(1, 2) + m.wkb_point(3, 4), "MULTIPOINT ((1 2), (3 4))"),
    (_le("BIddd", 1, 1001, 1, 2, 3), "POINT Z (1 2 3)"),                     # ISO Z
    (_le("BIiddd", 1, 0xA0000001, 4326, 1, 2, 3), "POINT Z (1 2 3)"),        # EWKB Z with an SRID
    (_le("BII", 1, 7, 2) + m.wkb_point(1, 2) + m.wkb_line([(0, 0), (1, 1)]),
     "GEOMETRYCOLLECTION (POINT (1 2), LINESTRING (0 0, 1 1))"),
    (_le("BII", 1, 6, 0), "MULTIPOLYGON EMPTY"),
])
def test_wkb_reads_as_wkt(raw, text):
    assert to_wkt(raw) == text


@pytest.mark.parametrize("raw", [b"", b"\x01\x01\x00\x00\x00", m.wkb_point(1, 2) + b"\x00", _le("BI", 1, 99),
                                 _le("BII", 1, 2, 1 << 30)])
def test_what_is_not_wkb_is_said_so(raw):
    with pytest.raises(NotWkb):
        to_wkt(raw)


# -- a 2.6 collection's meta ------------------------------------------------------------------------
class _Keys:
    """The keys of an etcd prefix read (``EtcdClient.get_prefix``'s (key, value, revision) rows)."""

    def __init__(self, keys: dict[str, bytes]) -> None:
        self.keys = keys

    def get_prefix(self, prefix: str):
        return [(k, v, 1) for k, v in sorted(self.keys.items()) if k.startswith(prefix)]


def test_a_26_collection_is_joined_from_its_keys_skipping_tombstones():
    from deltanode.datacoord.milvus_catalog import TOMBSTONE, MilvusCatalog
    from deltanode.wire.etcdpb import CollectionInfo
    from deltanode.wire.positions import CODECS

    root, cid = "by-dev/meta/root-coord", 5
    info = CollectionInfo(ID=cid, schema=schema_pb2.CollectionSchema(name="every26", enable_dynamic_field=True),
                          virtual_channel_names=["p_0_5v0"], physical_channel_names=["p_0"], shards_num=1)
    keys = {f"{root}/database/collection-info/1/{cid}": info.SerializeToString(),
            f"{root}/struct-array-fields/{cid}/{m.STRUCT_ID}": m.struct_field().SerializeToString(),
            f"{root}/struct-array-fields/{cid}/3": TOMBSTONE,
            f"{root}/functions/{cid}/{m.BM25_ID}": m.bm25().SerializeToString(),
            f"{root}/functions/{cid}/2": TOMBSTONE, f"{root}/fields/{cid}/999": TOMBSTONE,
            f"{root}/functions/{cid + 1}/{m.BM25_ID}": m.bm25().SerializeToString()}   # another collection's
    keys |= {f"{root}/fields/{cid}/{f.fieldID}": f.SerializeToString() for f in m.fields()}
    catalog = MilvusCatalog(_Keys(keys), "by-dev/meta", own_client=None, own_root="dn", broker=None,  # type: ignore
                            positions=CODECS["kafka"])
    [record] = catalog.collections()
    assert [f.fieldID for f in record.schema.fields] == [f.fieldID for f in m.fields()]   # in id order
    assert list(record.schema.struct_array_fields) == [m.struct_field()] and list(record.schema.functions) == [m.bm25()]
    assert CollectionLayout.from_proto(record.schema).insert_schema() == LAYOUT.insert_schema()
