"""Every type Milvus 2.3/2.4 persists, and 2.5's nulls: schemas, decoding to Arrow, what is
rejected and why, and binlog files (written, compacted, read back through Delta) of them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltanode.delta.actions import AddFile
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.executor import decode
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.executor.rewrite_task import rewrite
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy
from deltanode.records import Rewrite, SegmentFile
from deltanode.wire.milvus_proto import schema_pb2
from deltanode.wire.schema import (
    CollectionLayout,
    DataType,
    FieldSpec,
    SchemaError,
    schema_from_json,
)

from ..milvus_rows import EVERY_TYPE, comparable, rows_of, sparse_row

LAYOUT = CollectionLayout.from_proto(schema_from_json(EVERY_TYPE, "c"))
SPARSE = np.dtype([("index", "<u4"), ("value", "<f4")])


def producer(seed: int = 7) -> MilvusProducer:
    """Builds messages only; never sends."""
    return MilvusProducer(Proxy(Broker("kafka", "127.0.0.1:1")), LAYOUT, 1, "c", seed=seed)


def spec(name: str) -> FieldSpec:
    return next(f for f in LAYOUT.fields if f.name == name)


def decoded_rows(req) -> list[dict]:
    cols, n = decode.insert_columns(LAYOUT, req)
    table = pa.Table.from_arrays(cols, names=[f.name for f in LAYOUT.fields] + ["_ts", "_row_id"])
    return [comparable(r, LAYOUT) for r in table.to_pylist()]


# -- schemas -------------------------------------------------------------------------------------
def test_every_type_maps_to_its_arrow_column_and_keeps_its_flags():
    schema = schema_from_json(EVERY_TYPE, "c")
    types = {f.name: f.type for f in LAYOUT.insert_schema()}
    assert types["pk"] == pa.string() and types["i8"] == pa.int8() and types["f"] == pa.float32()
    assert types["a_bool"] == pa.list_(pa.bool_()) and types["a_int8"] == pa.list_(pa.int8())
    assert types["a_float"] == pa.list_(pa.float32()) and types["a_double"] == pa.list_(pa.float64())
    assert types["a_varchar"] == pa.list_(pa.string()) and types["a_int64"] == pa.list_(pa.int64())
    assert types["fv"] == pa.list_(pa.float32()) and types["bf"] == pa.binary() and types["hv"] == pa.binary()
    assert types["sv"] == pa.map_(pa.int64(), pa.float32())
    assert types["$meta"] == pa.string()                                # the dynamic field is a column
    meta = spec("$meta")
    assert meta.is_dynamic and meta.data_type == DataType.JSON and meta.field_id == 100 + len(EVERY_TYPE["fields"])
    assert schema.enable_dynamic_field and schema.fields[-1].name == "$meta" and schema.fields[-1].is_dynamic
    assert spec("a_int8").element_type == DataType.Int8 and spec("a_int8").max_capacity == 8
    assert spec("i16").nullable and not spec("i8").nullable and spec("i64").is_partition_key
    assert next(f for f in schema.fields if f.name == "i16").default_value.int_data == 7


def test_from_proto_keeps_the_dynamic_field_and_skips_system_fields():
    schema = schema_pb2.CollectionSchema(name="c", enable_dynamic_field=True)
    schema.fields.add(fieldID=0, name="RowID", data_type=DataType.Int64)
    schema.fields.add(fieldID=1, name="Timestamp", data_type=DataType.Int64)
    schema.fields.add(fieldID=100, name="id", data_type=DataType.Int64, is_primary_key=True)
    arr = schema.fields.add(fieldID=101, name="tags", data_type=DataType.Array, element_type=DataType.VarChar)
    arr.type_params.add(key="max_capacity", value="4")
    schema.fields.add(fieldID=102, name="$meta", data_type=DataType.JSON, is_dynamic=True)
    layout = CollectionLayout.from_proto(schema)
    assert [f.name for f in layout.fields] == ["id", "tags", "$meta"]
    assert layout.fields[1].max_capacity == 4 and layout.fields[2].is_dynamic


def test_defaults_of_each_scalar_type_are_stored():
    doc = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                      {"name": "b", "data_type": "Bool", "default_value": True},
                      {"name": "i", "data_type": "Int8", "default_value": -3},
                      {"name": "l", "data_type": "Int64", "default_value": 1 << 40},
                      {"name": "f", "data_type": "Float", "default_value": 0.5},
                      {"name": "d", "data_type": "Double", "default_value": 2},
                      {"name": "s", "data_type": "VarChar", "max_length": 4, "default_value": "abc"}]}
    values = {f.name: getattr(f.default_value, f.default_value.WhichOneof("data"))
              for f in schema_from_json(doc, "c").fields if f.HasField("default_value")}
    assert values == {"b": True, "i": -3, "l": 1 << 40, "f": 0.5, "d": 2.0, "s": "abc"}


PK = {"name": "pk", "data_type": "Int64", "is_primary_key": True}


@pytest.mark.parametrize("field, message", [
    ({"name": "m", "data_type": "Mol"}, "'m': data type Mol is not supported: it came with a milvus-proto newer"),
    ({"name": "v", "data_type": "Int8Vector"}, "needs a positive 'dim'"),
    ({"name": "v", "data_type": "ArrayOfVector", "dim": 4}, "a sub-field of a struct array"),
    ({"name": "s", "data_type": "ArrayOfStruct"}, "'s': a struct array without sub-fields"),
    ({"name": "a", "data_type": "Array", "element_type": "JSON", "max_capacity": 4}, "'a': an Array of JSON"),
    ({"name": "a", "data_type": "Array", "element_type": "Array", "max_capacity": 4}, "an Array of Array"),
    ({"name": "a", "data_type": "Array", "element_type": "FloatVector", "max_capacity": 4}, "Array of FloatVector"),
    ({"name": "a", "data_type": "Array", "element_type": "Int8Vector", "max_capacity": 4}, "an Array of Int8Vector"),
    ({"name": "a", "data_type": "Array", "element_type": "Timestamptz", "max_capacity": 4}, "Array of Timestamptz"),
    ({"name": "a", "data_type": "Array", "max_capacity": 4}, "needs an element_type"),
    ({"name": "a", "data_type": "Int32", "element_type": "Int32"}, "only an Array field has one"),
    ({"name": "a", "data_type": "Array", "element_type": "Int32"}, "an Array field needs a max_capacity"),
    ({"name": "a", "data_type": "Array", "element_type": "Int32", "max_capacity": 5000}, "at most 4096"),
    ({"name": "a", "data_type": "Int32", "max_capacity": 5}, "only an Array field has one"),
    ({"name": "a", "data_type": "Array", "element_type": "Nope", "max_capacity": 4}, "unknown element_type"),
    ({"name": "v", "data_type": "FloatVector", "dim": 4, "nullable": True}, "cannot be nullable"),
    ({"name": "v", "data_type": "SparseFloatVector", "nullable": True}, "cannot be nullable"),
    ({"name": "k", "data_type": "Float", "is_partition_key": True}, "partition key must be an Int64 or VarChar"),
    ({"name": "k", "data_type": "Int64", "is_partition_key": True, "nullable": True}, "cannot be nullable"),
    ({"name": "n", "data_type": "Int8", "nullable": "yes"}, "nullable must be true or false"),
    ({"name": "n", "data_type": "Int8", "default_value": 300}, "default_value 300 does not fit a Int8"),
    ({"name": "n", "data_type": "Bool", "default_value": 1}, "does not fit a Bool"),
    ({"name": "n", "data_type": "VarChar", "max_length": 2, "default_value": "abc"}, "of max_length 2"),
    ({"name": "n", "data_type": "JSON", "default_value": "{}"}, "only for scalar fields"),
    ({"name": "n", "data_type": "FloatVector", "dim": 2, "default_value": 1.0}, "only for scalar fields"),
])
def test_refused_fields_say_which_field_and_why(field, message):
    with pytest.raises(SchemaError, match=message):
        schema_from_json({"fields": [PK, field]}, "c")


@pytest.mark.parametrize("doc, message", [
    ({"fields": [{**PK, "nullable": True}]}, "cannot be nullable"),
    ({"fields": [{**PK, "default_value": 1}]}, "other than the primary key"),
    ({"fields": [PK, {"name": "a", "data_type": "Int64", "is_partition_key": True},
                 {"name": "b", "data_type": "VarChar", "is_partition_key": True}]},
     "at most one field with is_partition_key"),
    ({"fields": [PK, {"name": "$meta", "data_type": "JSON"}], "enable_dynamic_field": True}, "duplicate field names"),
    ({"fields": [PK], "enable_dynamic_field": 1}, "enable_dynamic_field must be true or false"),
])
def test_refused_schemas_say_why(doc, message):
    with pytest.raises(SchemaError, match=message):
        schema_from_json(doc, "c")


def test_a_dynamic_field_that_is_not_json_is_refused():
    schema = schema_from_json({"fields": [PK]}, "c")
    schema.fields.add(fieldID=101, name="$meta", data_type=DataType.VarChar, is_dynamic=True)
    with pytest.raises(SchemaError, match="dynamic field must be JSON"):
        CollectionLayout.from_proto(schema)


# -- decoding --------------------------------------------------------------------------------------
def test_every_type_decodes_to_the_values_sent():
    req = producer().insert_request("v", 1, 1, 40)
    rows = decoded_rows(req)
    assert rows == rows_of(LAYOUT, req)
    nullable = ("i16", "d", "s", "j", "a_int64")
    assert all(any(r[name] is None for r in rows) for name in nullable)            # some nulls in each
    assert not any(r[f.name] is None for r in rows for f in LAYOUT.fields if f.name not in nullable)
    assert {len(r["a_varchar"]) for r in rows} > {0, 1}                                # lengths vary
    assert rows[0]["$meta"] == '{"extra": 1}' and rows[0]["pk"] == "pk-1"
    first = req.fields_data[[f.name for f in LAYOUT.fields].index("sv")].vectors.sparse_float_vector.contents[0]
    assert rows[0]["sv"] == sparse_row(first) and list(rows[0]["sv"]) == sorted(rows[0]["sv"])


def fd_of(name: str, **kw) -> schema_pb2.FieldData:
    s = spec(name)
    return schema_pb2.FieldData(type=s.data_type, field_name=s.name, field_id=s.field_id, **kw)


def column(name: str, fd: schema_pb2.FieldData, n: int) -> list:
    return decode.field_column(spec(name), fd, n).to_pylist()


VALID = [True, False, True, False]


@pytest.mark.parametrize("name, full, compact", [
    ("i16", {"int_data": {"data": [1, 0, 3, 0]}}, {"int_data": {"data": [1, 3]}}),
    ("d", {"double_data": {"data": [0.5, 0, 1.5, 0]}}, {"double_data": {"data": [0.5, 1.5]}}),
    ("s", {"string_data": {"data": ["a", "", "c", ""]}}, {"string_data": {"data": ["a", "c"]}}),
    ("j", {"json_data": {"data": [b"{}", b"", b"[1]", b""]}}, {"json_data": {"data": [b"{}", b"[1]"]}}),
])
def test_nulls_come_from_valid_data_in_either_form(name, full, compact):
    expected = [full_v if ok else None for full_v, ok in zip(column(name, fd_of(name, scalars=full), 4), VALID)]
    assert column(name, fd_of(name, scalars=full, valid_data=VALID), 4) == expected
    assert column(name, fd_of(name, scalars=compact, valid_data=VALID), 4) == expected
    assert None in expected


def array_fd(name: str, rows: list[list], element_type: int = 0, valid: list[bool] = ()) -> schema_pb2.FieldData:
    fd = fd_of(name, valid_data=valid)
    fd.scalars.array_data.element_type = element_type
    slot = {"a_int64": "long_data", "a_int8": "int_data", "a_varchar": "string_data"}[name]
    for row in rows:
        getattr(fd.scalars.array_data.data.add(), slot).data.extend(row)
    return fd


def test_arrays_take_their_element_type_from_the_schema_and_nulls_from_valid_data():
    assert column("a_int8", array_fd("a_int8", [[1, -2], [], [127]]), 3) == [[1, -2], [], [127]]  # 2.3.5: unset
    assert column("a_varchar", array_fd("a_varchar", [["x"], ["y", "z"]], DataType.VarChar), 2) == [["x"], ["y", "z"]]
    assert column("a_int64", array_fd("a_int64", [[1], [], [2, 3], []], valid=VALID), 4) == [[1], None, [2, 3], None]
    assert column("a_int64", array_fd("a_int64", [[1], [2, 3]], valid=VALID), 4) == [[1], None, [2, 3], None]


def test_an_empty_scalar_field_is_an_empty_array_row():
    fd = array_fd("a_int64", [[5]])
    fd.scalars.array_data.data.add()             # no member set at all
    assert column("a_int64", fd, 2) == [[5], []]


def sparse_fd(*rows: bytes) -> schema_pb2.FieldData:
    fd = fd_of("sv")
    fd.vectors.sparse_float_vector.contents.extend(rows)
    return fd


def sparse_bytes(pairs) -> bytes:
    entries = np.empty(len(pairs), dtype=SPARSE)
    for i, (index, value) in enumerate(pairs):
        entries[i] = (index, value)
    return entries.tobytes()


def test_sparse_rows_are_maps_of_index_to_value_with_uint32_indices():
    rows = [[(1, 0.5), (7, 2.0), (2**32 - 2, -1.0)], [], [(0, 3.0)]]
    got = column("sv", sparse_fd(*map(sparse_bytes, rows)), 3)
    assert [dict(r) for r in got] == [dict(r) for r in rows]


def test_bfloat16_rows_are_dim_x_2_bytes():
    fd = fd_of("bf")
    fd.vectors.dim = 4
    fd.vectors.bfloat16_vector = bytes(range(16))
    assert column("bf", fd, 2) == [bytes(range(8)), bytes(range(8, 16))]


def test_a_nullable_field_without_valid_data_has_no_nulls():
    assert column("i16", fd_of("i16", scalars={"int_data": {"data": [1, 2]}}), 2) == [1, 2]


def test_valid_data_all_true_is_fine_on_a_field_that_is_not_nullable():
    assert column("i8", fd_of("i8", scalars={"int_data": {"data": [1, 2]}}, valid_data=[True, True]), 2) == [1, 2]


def bf16(data: bytes, dim: int = 4) -> schema_pb2.FieldData:
    fd = fd_of("bf")
    fd.vectors.dim = dim
    fd.vectors.bfloat16_vector = data
    return fd


@pytest.mark.parametrize("name, fd, n, message", [
    ("sv", sparse_fd(sparse_bytes([(1, 1.0)]), b"\x00" * 12), 2, "sparse row 1 has 12 bytes, not a multiple of 8"),
    ("sv", sparse_fd(sparse_bytes([(1, 1.0)]), sparse_bytes([(5, 1.0), (5, 2.0)])), 2,
     "sparse row 1: indices not strictly increasing"),
    ("sv", sparse_fd(sparse_bytes([(9, 1.0), (3, 1.0)])), 1, "sparse row 0: indices not strictly increasing"),
    ("sv", sparse_fd(sparse_bytes([(1, 1.0)])), 2, "1 values for 2 rows"),
    ("bf", bf16(bytes(15)), 2, "15 bytes for 2 rows of 8 bytes"),
    ("bf", bf16(bytes(16), dim=8), 2, "dim 8, schema says 4"),
    ("a_int8", array_fd("a_int8", [list(range(9))]), 1, "an array of 9 elements, max_capacity is 8"),
    ("a_int8", array_fd("a_int8", [[1]], DataType.Int16), 1, "an Array of Int16, schema says Array of Int8"),
    ("a_int8", array_fd("a_int8", [[300]]), 1, "values out of range for Int8"),
    ("a_int8", array_fd("a_varchar", [["x"]]), 1, "row 0 holds string_data, schema says Array of Int8"),
    ("j", fd_of("j", scalars={"json_data": {"data": [b"{}", b"\xff"]}}), 2, "JSON value is not UTF-8"),
    ("i8", fd_of("i8", scalars={"int_data": {"data": [1, 2]}}, valid_data=[True]), 2,
     "valid_data has 1 entries for 2 rows"),
    ("i8", fd_of("i8", scalars={"int_data": {"data": [1, 0]}}, valid_data=[True, False]), 2,
     "1 null\\(s\\) in a field that is not nullable"),
    ("fv", fd_of("fv", vectors={"dim": 8, "float_vector": {"data": [0.0] * 16}}, valid_data=[True, False]), 2,
     "1 null\\(s\\) in a field that is not nullable"),
    ("i16", fd_of("i16", scalars={"int_data": {"data": [1, 2]}}, valid_data=[True, False, True, True]), 4,
     "2 values for 4 rows of which 3 are valid"),
    ("i16", fd_of("i16", scalars={"int_data": {"data": [1]}}, valid_data=[True, False, True, False]), 4,
     "1 values for 4 rows of which 2 are valid"),
])
def test_malformed_columns_are_rejected_with_a_reason(name, fd, n, message):
    with pytest.raises(decode.Reject, match=f"field '{name}': {message}"):
        decode.field_column(spec(name), fd, n)


def test_a_field_of_another_type_is_rejected():
    fd = fd_of("sv")
    fd.type = DataType.Int8Vector
    with pytest.raises(decode.Reject, match="got Int8Vector, schema says SparseFloatVector"):
        decode.field_column(spec("sv"), fd, 1)


# -- files ------------------------------------------------------------------------------------------
def test_binlogs_of_every_type_compact_and_read_back_through_delta(tmp_path):
    """Two tasks' files of one segment, rewritten as one by compaction, committed to a Delta
    table delta-rs created (``$meta``, lists and maps included), read back: the same rows."""
    storage = StorageLayout(str(tmp_path))
    proxy = producer()
    reqs = [proxy.insert_request("v", 5, 1, 30) for _ in range(2)]
    entries = []
    for req in reqs:
        writer = BinlogWriter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema())
        cols, n = decode.insert_columns(LAYOUT, req)
        writer.add_insert(5, 1, cols, n, 1000, 0, min(req.timestamps), max(req.timestamps))
        entries += writer.close()
    uri = storage.insert_log(1)
    first = pq.ParquetFile(f"{uri}/{entries[0].path}").metadata.row_group(0)
    codecs = {first.column(i).path_in_schema: first.column(i).compression for i in range(first.num_columns)}
    assert codecs["fv.list.element"] == codecs["bf"] == codecs["sv.key_value.value"] == "UNCOMPRESSED"
    assert codecs["a_int64.list.element"] == codecs["$meta"] == codecs["s"] == "SNAPPY"
    task = Rewrite(1, "v", 5, 1, tuple(SegmentFile(e.path, e.size, e.rows) for e in entries), LAYOUT.insert_schema(),
                   LAYOUT.primary_key.name, storage)
    compacted = rewrite(task)
    log = DeltaLog(uri, LAYOUT.insert_schema())
    log.commit(adds=[AddFile(path=compacted.path, size=compacted.size, stats=compacted.stats)],
               txns={}, expected={}, info={})
    table = read_table(storage, uri)
    expected = sorted((r | {"_segment_id": 5, "_partition_id": 1} for req in reqs for r in rows_of(LAYOUT, req)),
                      key=lambda r: r["_ts"])
    got = [comparable(r, LAYOUT) for r in table.to_pylist()]
    assert len(got) == 60 and got == expected
    assert any(r["d"] is None for r in got)
