"""Reading Milvus's binlogs and deltalogs (milvus_import.binlog_format, milvus_import.columns),
against files from tests/milvus_binlog_files.py (written after Milvus's Go writers) and two
deltalogs Milvus's own Go writer made."""

from __future__ import annotations

import base64
import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltanode.milvus_import.binlog_format import (
    DELETE_EVENT,
    INSERT_EVENT,
    BinlogFormatError,
    read_binlog,
)
from deltanode.milvus_import.columns import (
    ROW_ID,
    TIMESTAMP,
    check_descriptor,
    delete_rows,
    insert_column,
)
from deltanode.wire.milvus_proto import schema_pb2
from deltanode.wire.schema import (
    FLOAT_LIST,
    SPARSE_MAP,
    DataType,
    FieldSpec,
    arrow_type,
)
from tests import milvus_binlog_files as mb

PATH = "insert_log/447/448/449/100/450"
INT_PK = FieldSpec(100, "id", DataType.Int64, is_primary_key=True)
STR_PK = FieldSpec(100, "id", DataType.VarChar, is_primary_key=True, max_length=64)

# Deltalogs written by Milvus's Go NewDeltalogWriter (collection 1, partition 2, segment 3; Int64
# keys 30400 and 30401 deleted at 200 and 201), in its two formats: JSON rows ("json", the
# default) and pk/ts columns ("parquet"). From Milvus's tests/go_client/testcases/snapshot_test.go
# (TestSnapshotL0FixtureDecoder), Apache License 2.0.
MILVUS_JSON_DELTALOG = (
    "vPr/AAAArNxJ9IEGAGcAAABrAAAAAQAAAAAAAAACAAAAAAAAAAMAAAAAAAAA//////////8AAAAAAAAAAAAAAAAAAAAAFAAAADQQEBAQEBAQ"
    "FgAAAHsib3JpZ2luYWxfc2l6ZSI6Ijc3In0AAKzcSfSBBgK7AQAA/////wEAAAAAAAAAAQAAAAAAAABQQVIxFQQVkAEVfkwVBBUAEgAAKLUv"
    "/QQAlQEAZAIgAAAAeyJwayI6MzA0MDAsInRzIjoyMDAsInBrVHlwZSI6NX0xMQMQBYfLIS6P/ARhBKfVFQAVEhUsLBUEFRAVBhUGHDYAFgAY"
    "IHsicGsiOjMwNDAxLCJ0cyI6MjAxLCJwa1R5cGUiOjV9GCB7InBrIjozMDQwMCwidHMiOjIwMCwicGtUeXBlIjo1fQAAACi1L/0EAEkAAAIA"
    "AAAEAQEDApUZdAEVBBksNQQYBnNjaGVtYRUCABUMJQIYATAlAEwcAAAAFgQZHBkcJoYDHBUMGTUQAAYZGAEwFQwWBBb2Ahb+AiakASYIHDYA"
    "FgAYIHsicGsiOjMwNDAxLCJ0cyI6MjAxLCJwa1R5cGUiOjV9GCB7InBrIjozMDQwMCwidHMiOjIwMCwicGtUeXBlIjo1fQAZLBUEFQAVAgAV"
    "ABUQFQIAAAAW/gIWBCYIFv4CFAAAGQwYGXBhcnF1ZXQtZ28gdmVyc2lvbiAxNy4wLjAZHBwAAADPAAAAUEFSMQ==")
MILVUS_PARQUET_DELTALOG = (
    "vPr/AAAArNxJ9IEGAH8AAACDAAAAAQAAAAAAAAACAAAAAAAAAAMAAAAAAAAA//////////8AAAAAAAAAAAAAAAAAAAAABQAAADQQEBAQEBAQ"
    "LgAAAHsib3JpZ2luYWxfc2l6ZSI6IjM0IiwidmVyc2lvbiI6Ik1VTFRJX0ZJRUxEIn0AAKzcSfSBBgIZAgAA/////wEAAAAAAAAAAQAAAAAA"
    "AABQQVIxFQQVIBUgTBUEFQASAADAdgAAAAAAAMF2AAAAAAAAFQAVBhUGLBUEFRAVBhUGHBgIwXYAAAAAAAAYCMB2AAAAAAAAFgAWABgIwXYA"
    "AAAAAAAYCMB2AAAAAAAAAAAAAQMCFQQVIBUgTBUEFQASAADIAAAAAAAAAMkAAAAAAAAAFQAVBhUGLBUEFRAVBhUGHBgIyQAAAAAAAAAYCMgA"
    "AAAAAAAAFgAWABgIyQAAAAAAAAAYCMgAAAAAAAAAAAAAAQMCFQQZPDUEGAZzY2hlbWEVBAAVBCUAGAJwayUkTKwTQBEAAAAVBCUAGAJ0cyUk"
    "TKwTQBEAAAAWBBkcGSwmyAEcFQQZNRAABhkYAnBrFQAWBBbAARbAASZEJggcGAjBdgAAAAAAABgIwHYAAAAAAAAWABYAGAjBdgAAAAAAABgI"
    "wHYAAAAAAAAAGSwVBBUAFQIAFQAVEBUCAAAAJogDHBUEGTUQAAYZGAJ0cxUAFgQWwAEWwAEmhAImyAEcGAjJAAAAAAAAABgIyAAAAAAAAAAW"
    "ABYAGAjJAAAAAAAAABgIyAAAAAAAAAAAGSwVBBUAFQIAFQAVEBUCAAAAFoADFgQmCBaAAxQAABkMGBlwYXJxdWV0LWdvIHZlcnNpb24gMTcu"
    "MC4wGSwcAAAcAAAALAEAAFBBUjE=")


def _read(spec: FieldSpec, data: bytes) -> pa.Array:
    desc, values = read_binlog(data, where=PATH, event=INSERT_EVENT)
    check_descriptor(desc, spec, where=PATH)
    col = insert_column(spec, values, where=PATH)
    assert col.type == arrow_type(spec)
    return col


def _spec(data_type: int, **kw) -> FieldSpec:
    return FieldSpec(100, "f", data_type, **kw)


# The descriptor and the events.

def test_descriptor_fields_and_offsets():
    data = mb.insert_binlog(DataType.Int64, pa.array([1, 2], pa.int64()), field_id=101, collection_id=7,
                            partition_id=8, segment_id=9, start_ts=11, end_ts=12)
    assert struct.unpack_from("<i", data, 0)[0] == 0xFFFABC
    assert struct.unpack_from("<qqqq", data, 21) == (7, 8, 9, 101)      # the ids at offset 21
    assert struct.unpack_from("<i", data, 69)[0] == DataType.Int64      # the payload type at 69
    desc, values = read_binlog(data, where=PATH)
    assert (desc.collection_id, desc.partition_id, desc.segment_id, desc.field_id) == (7, 8, 9, 101)
    assert (desc.start_ts, desc.end_ts, desc.payload_type, desc.event_type) == (11, 12, DataType.Int64, INSERT_EVENT)
    assert desc.extras == {"original_size": "1024"}
    assert values.to_pylist() == [1, 2]


def test_several_events_are_concatenated_in_order():
    data = mb.insert_binlog(DataType.Int64, pa.array([1, 2], pa.int64()), pa.array([3], pa.int64()),
                            pa.array([4, 5, 6], pa.int64()))
    _, values = read_binlog(data, where=PATH)
    assert values.to_pylist() == [1, 2, 3, 4, 5, 6]


def test_stream_writer_layout_of_milvus_2_4():
    """Next position -1, timestamps 1, the column named by the field id, extras nullable false."""
    data = mb.insert_binlog(DataType.Int32, pa.array([5, -6], pa.int32()), field_id=102, stream=True,
                            extras={"nullable": False})
    desc, values = read_binlog(data, where=PATH)
    assert (desc.start_ts, desc.end_ts, desc.extras["nullable"]) == (1, 1, False)
    assert values.to_pylist() == [5, -6]


# Every type's payload -> DeltaNode's column.

@pytest.mark.parametrize(("data_type", "arrow", "values"), [
    (DataType.Bool, pa.bool_(), [True, False, True]),
    (DataType.Int8, pa.int8(), [-128, 0, 127]),
    (DataType.Int16, pa.int16(), [-32768, 1, 32767]),
    (DataType.Int32, pa.int32(), [-2**31, 2, 2**31 - 1]),
    (DataType.Int64, pa.int64(), [-2**63, 3, 2**63 - 1]),
    (DataType.Float, pa.float32(), [1.5, -0.25, 3.0]),
    (DataType.Double, pa.float64(), [1e300, -2.5, 0.1]),
    (DataType.VarChar, pa.string(), ["a", "", "héllo"]),
])
def test_scalars(data_type, arrow, values):
    col = _read(_spec(data_type), mb.insert_binlog(data_type, pa.array(values, arrow)))
    assert col.to_pylist() == values


def test_narrower_payload_is_widened_and_wider_one_checked():
    assert insert_column(_spec(DataType.Int64), pa.array([1, -2], pa.int32())).to_pylist() == [1, -2]
    assert insert_column(_spec(DataType.Int8), pa.array([1, -2], pa.int32())).type == pa.int8()
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: .*out of range"):
        insert_column(_spec(DataType.Int8), pa.array([1, 300], pa.int32()), where=PATH)


def test_system_fields():
    rows = mb.insert_binlog(DataType.Int64, pa.array([10, 11], pa.int64()), field_id=0)
    stamps = mb.insert_binlog(DataType.Int64, pa.array([470767461955796999, 470767461955797000], pa.int64()),
                              field_id=1)
    assert _read(ROW_ID, rows).to_pylist() == [10, 11]
    assert _read(TIMESTAMP, stamps).to_pylist() == [470767461955796999, 470767461955797000]
    assert (ROW_ID.name, TIMESTAMP.name) == ("_row_id", "_ts")


def test_json_and_dynamic_field():
    texts = [b'{"a": 1}', b'{"b": [1, 2], "c": "\xc3\xa9"}', b"null"]
    for spec in (_spec(DataType.JSON), FieldSpec(101, "$meta", DataType.JSON, is_dynamic=True)):
        data = mb.insert_binlog(DataType.JSON, pa.array(texts, pa.binary()), field_id=spec.field_id)
        assert _read(spec, data).to_pylist() == ['{"a": 1}', '{"b": [1, 2], "c": "é"}', "null"]


def test_json_not_utf8_is_refused():
    data = mb.insert_binlog(DataType.JSON, pa.array([b'{"a": "\xff"}'], pa.binary()))
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: field 'f' .*not UTF-8"):
        _read(_spec(DataType.JSON), data)


ARRAY_CASES = [
    (DataType.Bool, "bool_data", [[True, False], [], [True]]),
    (DataType.Int8, "int_data", [[1, -128], [127], []]),
    (DataType.Int16, "int_data", [[300, -300], [], [1]]),
    (DataType.Int32, "int_data", [[2**31 - 1], [0, 1, 2], []]),
    (DataType.Int64, "long_data", [[2**40, -1], [], [7]]),
    (DataType.Float, "float_data", [[1.5, 2.25], [], [-0.5]]),
    (DataType.Double, "double_data", [[1e100], [2.5, 3.5], []]),
    (DataType.VarChar, "string_data", [["a", "bc"], [], ["é"]]),
]


@pytest.mark.parametrize(("element", "slot", "rows"), ARRAY_CASES)
def test_arrays(element, slot, rows):
    fields = []
    for row in rows:
        sf = schema_pb2.ScalarField()
        getattr(sf, slot).data.extend(row)
        fields.append(sf)
    spec = _spec(DataType.Array, element_type=element, max_capacity=8)
    col = _read(spec, mb.insert_binlog(DataType.Array, mb.array_payload(fields)))
    assert col.to_pylist() == rows


def test_array_of_the_wrong_element_type_is_refused():
    sf = schema_pb2.ScalarField()
    sf.long_data.data.extend([1, 2])
    data = mb.insert_binlog(DataType.Array, mb.array_payload([sf]))
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: .*row 0 holds long_data, schema says Array of Int32"):
        _read(_spec(DataType.Array, element_type=DataType.Int32), data)


def test_array_row_that_is_not_a_scalar_field_is_refused():
    data = mb.insert_binlog(DataType.Array, pa.array([b"\xff\xff\xff"], pa.binary()))
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: .*row 0 is not a ScalarField"):
        _read(_spec(DataType.Array, element_type=DataType.Int64), data)


def test_float_vector():
    rows = np.array([[1.0, -2.0, 0.5, 3.25], [0.0, 1e-3, -7.5, 8.0], [9.0, 10.0, 11.0, 12.0]], dtype=np.float32)
    col = _read(_spec(DataType.FloatVector, dim=4), mb.insert_binlog(DataType.FloatVector,
                                                                       mb.float_vector_payload(rows)))
    assert col.type == FLOAT_LIST
    assert col.to_pylist() == rows.tolist()


def test_float_vector_over_several_events_and_a_sliced_payload():
    rows = np.arange(24, dtype=np.float32).reshape(6, 4)
    data = mb.insert_binlog(DataType.FloatVector, mb.float_vector_payload(rows[:2]), mb.float_vector_payload(rows[2:]))
    _, values = read_binlog(data, where=PATH)
    assert insert_column(_spec(DataType.FloatVector, dim=4), values).to_pylist() == rows.tolist()
    assert insert_column(_spec(DataType.FloatVector, dim=4), values.slice(3, 2)).to_pylist() == rows[3:5].tolist()


@pytest.mark.parametrize(("data_type", "dim", "width"), [
    (DataType.BinaryVector, 16, 2), (DataType.Float16Vector, 4, 8), (DataType.BFloat16Vector, 4, 8),
])
def test_binary_vectors(data_type, dim, width):
    rows = [bytes(range(i, i + width)) for i in range(3)]
    col = _read(_spec(data_type, dim=dim), mb.insert_binlog(data_type, mb.fixed_rows_payload(rows, width)))
    assert col.type == pa.binary()
    assert col.to_pylist() == rows


def test_sparse_vector():
    rows = [{3: 0.5, 100: -1.25, 2**32 - 1: 2.0}, {}, {0: 7.0}]
    data = mb.insert_binlog(DataType.SparseFloatVector, mb.sparse_payload(rows))
    col = _read(_spec(DataType.SparseFloatVector), data)
    assert col.type == SPARSE_MAP
    assert [dict(r) for r in col.to_pylist()] == rows


def test_sparse_vector_with_a_bad_row_is_refused():
    odd = mb.insert_binlog(DataType.SparseFloatVector, pa.array([mb.sparse_row({1: 1.0}) + b"\x00"], pa.binary()))
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: .*sparse row 0 has 9 bytes"):
        _read(_spec(DataType.SparseFloatVector), odd)
    unordered = struct.pack("<IfIf", 5, 1.0, 2, 1.0)
    data = mb.insert_binlog(DataType.SparseFloatVector, pa.array([unordered], pa.binary()))
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: .*not strictly increasing"):
        _read(_spec(DataType.SparseFloatVector), data)


@pytest.mark.parametrize(("spec", "payload"), [
    (_spec(DataType.FloatVector, dim=8), mb.float_vector_payload(np.zeros((2, 4), np.float32))),
    (_spec(DataType.BinaryVector, dim=32), mb.fixed_rows_payload([b"ab"], 2)),
    (_spec(DataType.Float16Vector, dim=8), mb.fixed_rows_payload([b"abcd"], 4)),
])
def test_wrong_vector_width_is_refused(spec, payload):
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: field 'f' .*rows of \d+ bytes, dim {spec.dim} means"):
        _read(spec, mb.insert_binlog(spec.data_type, payload))


def test_wrong_payload_type_is_refused():
    data = mb.insert_binlog(DataType.VarChar, pa.array(["x"]))
    _, values = read_binlog(data, where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: field 'f' .*payload is string, expected int64"):
        insert_column(_spec(DataType.Int64), values, where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: field 'f' .*expected fixed_size_binary\[16\]"):
        insert_column(_spec(DataType.FloatVector, dim=4), values, where=PATH)


def test_descriptor_of_another_field_is_refused():
    desc, _ = read_binlog(mb.insert_binlog(DataType.Int64, pa.array([1], pa.int64()), field_id=105), where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: binlog of field id 105"):
        check_descriptor(desc, _spec(DataType.Int64), where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: payload type Int64"):
        check_descriptor(desc, FieldSpec(105, "g", DataType.Int32), where=PATH)


# Deltalogs.

def test_deltalog_json_int64_keys():
    rows = mb.json_delete_rows([6, -7, 2**62], [470767461955796999, 470767461955797000, 470767461955797001])
    assert rows[0] == '{"pk":6,"ts":470767461955796999,"pkType":5}'
    desc, values = read_binlog(mb.deltalog(rows[:2], rows[2:]), where=PATH, event=DELETE_EVENT)
    assert (desc.payload_type, desc.field_id, desc.event_type) == (DataType.String, -1, DELETE_EVENT)
    keys, ts = delete_rows(values, INT_PK, where=PATH)
    assert keys.type == pa.int64() and ts.type == pa.int64()
    assert keys.to_pylist() == [6, -7, 2**62]
    assert ts.to_pylist() == [470767461955796999, 470767461955797000, 470767461955797001]


def test_deltalog_json_varchar_keys():
    rows = mb.json_delete_rows(["a", "b,c", 'q"\n'], [10, 11, 12])
    _, values = read_binlog(mb.deltalog(rows, stream=True), where=PATH)
    keys, ts = delete_rows(values, STR_PK, where=PATH)
    assert keys.type == pa.string()
    assert (keys.to_pylist(), ts.to_pylist()) == (["a", "b,c", 'q"\n'], [10, 11, 12])


def test_deltalog_legacy_and_mixed_rows():
    _, values = read_binlog(mb.deltalog(["6,470767461955796999", "-8,12"]), where=PATH)
    keys, ts = delete_rows(values, INT_PK, where=PATH)
    assert (keys.to_pylist(), ts.to_pylist()) == ([6, -8], [470767461955796999, 12])
    mixed = pa.array(["1,10", '{"pk":2,"ts":20,"pkType":5}', "3,30"])
    keys, ts = delete_rows(mixed, INT_PK)
    assert (keys.to_pylist(), ts.to_pylist()) == ([1, 2, 3], [10, 20, 30])


def test_deltalog_keys_of_the_wrong_type_are_refused():
    _, values = read_binlog(mb.deltalog(mb.json_delete_rows(["a"], [1])), where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: deltalog JSON rows do not parse with Int64 keys"):
        delete_rows(values, INT_PK, where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: legacy \"pk,ts\" deltalog rows hold Int64 keys"):
        delete_rows(pa.array(["1,2"]), STR_PK, where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: deltalog row 0 has pkType 5"):
        delete_rows(pa.array(['{"pk":"1","ts":2,"pkType":5}']), STR_PK, where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: deltalog row 1 '1,2,3' is neither JSON"):
        delete_rows(pa.array(["1,2", "1,2,3"]), INT_PK, where=PATH)


def test_multi_field_deltalog():
    data = mb.multi_field_deltalog(pa.array(["x", "y"]), [5, 6])
    desc, values = read_binlog(data, where=PATH)
    assert desc.extras["version"] == "MULTI_FIELD"
    keys, ts = delete_rows(values, STR_PK, where=PATH)
    assert (keys.to_pylist(), ts.to_pylist()) == (["x", "y"], [5, 6])
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: deltalog keys are string"):
        delete_rows(values, INT_PK, where=PATH)


@pytest.mark.parametrize("encoded", [MILVUS_JSON_DELTALOG, MILVUS_PARQUET_DELTALOG])
def test_deltalogs_milvus_wrote(encoded):
    desc, values = read_binlog(base64.b64decode(encoded), where=PATH, event=DELETE_EVENT)
    assert (desc.collection_id, desc.partition_id, desc.segment_id, desc.field_id) == (1, 2, 3, -1)
    keys, ts = delete_rows(values, INT_PK, where=PATH)
    assert (keys.to_pylist(), ts.to_pylist()) == ([30400, 30401], [200, 201])


# Malformed files.

def _insert_file() -> bytes:
    return mb.insert_binlog(DataType.Int64, pa.array([1, 2, 3], pa.int64()))


def test_bad_magic():
    data = bytearray(_insert_file())
    data[0] = 0
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: magic number 0xfffa00, expected 0xfffabc"):
        read_binlog(bytes(data), where=PATH)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: magic number"):
        read_binlog(b"PAR1" + bytes(100), where=PATH)


@pytest.mark.parametrize("keep", [0, 3, 50, 90, 130, -1])
def test_truncated_file(keep):
    data = _insert_file()
    desc_end = 4 + struct.unpack_from("<i", data, 13)[0]
    cut = {90: desc_end, 130: desc_end + 20}.get(keep, keep)
    with pytest.raises(BinlogFormatError, match=rf"^{PATH}: (truncated|the binlog holds no event)"):
        read_binlog(data[:cut], where=PATH)


def test_truncated_payload():
    """The event length says where the payload ends: a cut Parquet file does not read."""
    data = bytearray(_insert_file())
    desc_end = 4 + struct.unpack_from("<i", data, 13)[0]
    length = struct.unpack_from("<i", data, desc_end + 9)[0]
    struct.pack_into("<ii", data, desc_end + 9, length - 10, -1)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: event 1 at offset {desc_end}: payload is not a readable "
                                                "Parquet file"):
        read_binlog(bytes(data[:desc_end + length - 10]), where=PATH)


def test_wrong_event_type():
    data = _insert_file()
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: event 1 .* is a insert event, expected delete events"):
        read_binlog(data, where=PATH, event=DELETE_EVENT)
    damaged = bytearray(data)
    damaged[4 + struct.unpack_from("<i", data, 13)[0] + 8] = 7      # an index file event
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: event 1 .* has type 7"):
        read_binlog(bytes(damaged), where=PATH)
    damaged = bytearray(data)
    damaged[12] = 1
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: first event has type 1, expected the descriptor"):
        read_binlog(bytes(damaged), where=PATH)


def test_wrong_next_position_and_extras():
    data = bytearray(_insert_file())
    desc_end = 4 + struct.unpack_from("<i", data, 13)[0]
    struct.pack_into("<i", data, desc_end + 13, 5)
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: event 1 at offset {desc_end} has next position 5"):
        read_binlog(bytes(data), where=PATH)
    data = bytearray(_insert_file())
    data[85] = ord("[")
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: descriptor extras are not JSON"):
        read_binlog(bytes(data), where=PATH)


def test_payload_with_two_columns_is_refused():
    out = pa.BufferOutputStream()
    pq.write_table(pa.table({"a": [1], "b": [2]}), out)
    data = mb.binlog(DataType.Int64, [out.getvalue().to_pybytes()])
    with pytest.raises(BinlogFormatError, match=rf"{PATH}: event 1 .*2 columns \['a', 'b'\], expected one"):
        read_binlog(data, where=PATH)


def test_extras_written_as_milvus_does():
    extras = json.loads(_insert_file()[85:85 + struct.unpack_from("<i", _insert_file(), 81)[0]])
    assert extras == {"original_size": "1024"}
