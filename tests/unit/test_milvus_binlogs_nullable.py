"""A nullable field's storage-v1 binlogs (Milvus 2.5+, docs/milvus-facts.md section 10), read by
milvus_import.binlog_format and milvus_import.columns: one test per payload shape (fixed-width
scalars, strings, JSON, Array, and 2.6's Timestamptz and Geometry), each in the layout of
Milvus's sync writer (``InsertCodec``: column ``val``, declared nullable as the field is) and of
its stream writers (compaction: column named by the field id, always declared nullable), over
several events. Nulls land as nulls; a null in a field the schema says is not nullable is refused
naming the file. Files from tests/milvus_binlog_files.py, written after Milvus's Go writers."""

from __future__ import annotations

import io
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltanode.milvus_import.binlog_format import INSERT_EVENT, BinlogFormatError, read_binlog
from deltanode.milvus_import.columns import check_descriptor, insert_column
from deltanode.wire.milvus_proto import schema_pb2
from deltanode.wire.schema import TIMESTAMPTZ, DataType, FieldSpec, arrow_type
from tests import milvus_binlog_files as mb

PATH = "insert_log/447/448/449/101/450"
FIELD = 101
LAYOUTS = pytest.mark.parametrize("stream", [False, True], ids=["sync", "compaction"])


def _spec(data_type: int, *, nullable: bool = True, **kw) -> FieldSpec:
    return FieldSpec(FIELD, "f", data_type, nullable=nullable, **kw)


def _binlog(data_type: int, rows: list, arrow: pa.DataType, *, stream: bool, nullable: bool = True) -> bytes:
    """The rows in two events (a sync's binlog holds one a flush; a file of several is read the
    same), the second starting at the third row."""
    return mb.insert_binlog(data_type, pa.array(rows[:2], arrow), pa.array(rows[2:], arrow), field_id=FIELD,
                            stream=stream, nullable=nullable)


def _read(spec: FieldSpec, data: bytes) -> pa.Array:
    desc, values = read_binlog(data, where=PATH, event=INSERT_EVENT)
    check_descriptor(desc, spec, where=PATH)
    col = insert_column(spec, values, where=PATH)
    assert col.type == arrow_type(spec) and len(col) == len(values)
    return col


def _payload_schema(data: bytes) -> pq.ParquetSchema:
    """The Parquet schema of the binlog's first event's payload."""
    at = 4 + struct.unpack_from("<i", data, 13)[0]
    length = struct.unpack_from("<i", data, at + 9)[0]
    return pq.ParquetFile(io.BytesIO(data[at + 33:at + length])).schema


@LAYOUTS
def test_the_descriptor_and_the_column_say_nullable_as_milvus_writes_them(stream):
    """Extras ``nullable`` true (keys sorted, as Go's json.Marshal writes a map); the column
    optional. A field that is not nullable: extras false, its column required in the sync layout
    (NativePayloadWriter declares it as the field is), optional in the stream writers'."""
    data = _binlog(DataType.Int64, [1, None, 3], pa.int64(), stream=stream)
    extras_len = struct.unpack_from("<i", data, 81)[0]
    assert data[85:85 + extras_len] == b'{"nullable":true,"original_size":"1024"}'
    desc, _ = read_binlog(data, where=PATH)
    assert desc.extras["nullable"] is True
    assert _payload_schema(data).column(0).max_definition_level == 1
    plain = _binlog(DataType.Int64, [1, 2, 3], pa.int64(), stream=stream, nullable=False)
    assert read_binlog(plain, where=PATH)[0].extras["nullable"] is False
    assert _payload_schema(plain).column(0).max_definition_level == (1 if stream else 0)


@LAYOUTS
@pytest.mark.parametrize(("data_type", "arrow", "rows"), [
    (DataType.Bool, pa.bool_(), [True, None, False, None, True]),
    (DataType.Int8, pa.int8(), [None, -128, 127, 0, None]),
    (DataType.Int16, pa.int16(), [-32768, None, None, 32767, 1]),
    (DataType.Int32, pa.int32(), [None, None, 2**31 - 1, -2**31, None]),
    (DataType.Int64, pa.int64(), [-2**63, None, 2**63 - 1, None, 0]),
    (DataType.Float, pa.float32(), [1.5, None, -0.25, None, 3.0]),
    (DataType.Double, pa.float64(), [None, 1e300, None, -2.5, 0.1]),
])
def test_fixed_width_scalars(stream, data_type, arrow, rows):
    col = _read(_spec(data_type), _binlog(data_type, rows, arrow, stream=stream))
    assert col.to_pylist() == rows


@LAYOUTS
def test_varchar(stream):
    rows = [None, "a", "", None, "héllo"]      # "" is a value, not a null
    col = _read(_spec(DataType.VarChar, max_length=16), _binlog(DataType.VarChar, rows, pa.string(), stream=stream))
    assert col.to_pylist() == rows


@LAYOUTS
def test_json(stream):
    rows = [b'{"a": 1}', None, b"null", None, b'{"c": "\xc3\xa9"}']     # JSON's null is a value
    col = _read(_spec(DataType.JSON), _binlog(DataType.JSON, rows, pa.binary(), stream=stream))
    assert col.to_pylist() == ['{"a": 1}', None, "null", None, '{"c": "é"}']


@LAYOUTS
def test_array(stream):
    values: list[list[int] | None] = [[1, 2], None, [], None, [7]]     # an empty Array is a value
    rows = []
    for row in values:
        if row is None:
            rows.append(None)
            continue
        sf = schema_pb2.ScalarField()
        sf.long_data.data.extend(row)
        rows.append(sf.SerializeToString())
    spec = _spec(DataType.Array, element_type=DataType.Int64, max_capacity=4)
    col = _read(spec, _binlog(DataType.Array, rows, pa.binary(), stream=stream))
    assert col.to_pylist() == values


@LAYOUTS
def test_timestamptz_and_geometry_of_2_6(stream):
    micros = [None, 1_700_000_000_000_000, None, 0, -1]
    col = _read(_spec(DataType.Timestamptz), _binlog(DataType.Timestamptz, micros, pa.int64(), stream=stream))
    assert col.type == TIMESTAMPTZ
    assert col.cast(pa.int64()).to_pylist() == micros
    point = b"\x01\x01\x00\x00\x00" + struct.pack("<dd", 1.0, 2.0)
    rows = [point, None, None, point, None]
    col = _read(_spec(DataType.Geometry), _binlog(DataType.Geometry, rows, pa.binary(), stream=stream))
    assert col.to_pylist() == rows


@LAYOUTS
def test_a_nullable_field_with_no_null_and_one_of_only_nulls(stream):
    """A default-valued field's binlog holds the default in each row the client left null (the
    proxy fills it and marks the row valid); a nullable field no row set holds only nulls."""
    spec = _spec(DataType.Int32)
    assert _read(spec, _binlog(DataType.Int32, [7, 7, 1, 7], pa.int32(), stream=stream)).to_pylist() == [7, 7, 1, 7]
    only = _read(spec, _binlog(DataType.Int32, [None] * 4, pa.int32(), stream=stream))
    assert (only.null_count, len(only)) == (4, 4)


@pytest.mark.parametrize(("data_type", "arrow", "rows", "kw"), [
    (DataType.Int64, pa.int64(), [1, None, 3], {}),
    (DataType.VarChar, pa.string(), ["a", "b", None], {"max_length": 8}),
    (DataType.JSON, pa.binary(), [None, b"{}", b"1"], {}),
    (DataType.Array, pa.binary(), [schema_pb2.ScalarField().SerializeToString(), None, b""],
     {"element_type": DataType.Int64}),
    (DataType.FloatVector, pa.binary(8), [np.ones(2, "<f4").tobytes(), None, np.zeros(2, "<f4").tobytes()],
     {"dim": 2}),
])
def test_a_null_in_a_field_the_schema_says_is_not_nullable_is_refused(data_type, arrow, rows, kw):
    """Milvus refuses a nullable vector field (rootcoord: "vector type not support null", 2.5 and
    2.6.6), so a null vector is always refused."""
    data = _binlog(data_type, rows, arrow, stream=True)
    with pytest.raises(BinlogFormatError, match=rf"^{PATH}: field 'f' \(id {FIELD}, \w+\): 1 null value\(s\) in a "
                                                "field that is not nullable"):
        _read(_spec(data_type, nullable=False, **kw), data)


def test_the_schema_decides_whatever_the_extras_say():
    """A binlog that says nullable but holds no null reads into a field that is not; a 2.4 binlog
    (no ``nullable`` key) of a field now nullable reads as its values."""
    said = mb.insert_binlog(DataType.Int64, pa.array([1, 2], pa.int64()), field_id=FIELD, nullable=True)
    assert _read(_spec(DataType.Int64, nullable=False), said).to_pylist() == [1, 2]
    older = mb.insert_binlog(DataType.Int64, pa.array([3, 4], pa.int64()), field_id=FIELD)
    assert "nullable" not in read_binlog(older, where=PATH)[0].extras
    assert _read(_spec(DataType.Int64), older).to_pylist() == [3, 4]


@pytest.mark.parametrize("value", ["true", 1, None])
def test_a_nullable_extra_that_is_not_a_bool_is_refused(value):
    """Milvus's reader refuses it too ("value of nullable must in bool format")."""
    data = mb.insert_binlog(DataType.Int64, pa.array([1], pa.int64()), extras={"nullable": value})
    with pytest.raises(BinlogFormatError, match=rf"^{PATH}: descriptor extras nullable is {value!r}, not a bool"):
        read_binlog(data, where=PATH)
