"""Payload values of Milvus's binlogs -> DeltaNode's columns (``schema.arrow_type``), checked.

An insert binlog holds one field of one segment, and a column group file (storage version 2)
some fields of one, in the Arrow type Milvus's payload writer gives each: the scalars as
themselves, VarChar and Text as string, Timestamptz as int64 (UTC microseconds), JSON, Geometry
(WKB) and Array as binary (an Array row is a marshalled ``schema.ScalarField``), dense vectors as
fixed_size_binary of a row's bytes, SparseFloatVector as binary (a row is n x (uint32 index,
float32 value), little-endian) and a struct array's vector sub-field as a list of
fixed_size_binary; a nullable field's nulls are nulls. They become the columns ``executor.decode``
builds from the wire, with its helpers, so an imported row equals a streamed one. A deltalog
holds JSON rows ``{"pk":..,"ts":..,"pkType":..}``, the legacy ``"pk,ts"`` strings or (the
"parquet" deltalog format) ``pk`` and ``ts`` columns; all become the primary keys and their
delete timestamps. Anything that does not fit the field raises ``BinlogFormatError`` naming the
file. Whole columns are converted at once with numpy/pyarrow; Array rows, protobuf messages,
take one loop.

Runs on executors.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
from google.protobuf.message import DecodeError

from ..executor.decode import (
    _SPARSE_ENTRY,
    Reject,
    _check_increasing,
    _list_offsets,
    field_column,
)
from ..wire.milvus_proto import schema_pb2
from ..wire.schema import (
    FLOAT_LIST,
    INT8_LIST,
    SPARSE_MAP,
    TIMESTAMPTZ,
    DataType,
    FieldSpec,
    arrow_type,
    type_name,
)
from .binlog_format import BinlogFormatError, Descriptor

# Milvus's system fields have binlogs of their own (Int64 payloads); they become these columns.
ROW_ID = FieldSpec(0, "_row_id", DataType.Int64)
TIMESTAMP = FieldSpec(1, "_ts", DataType.Int64)
SYSTEM_FIELDS = {ROW_ID.field_id: ROW_ID, TIMESTAMP.field_id: TIMESTAMP}
_PK_ARROW = {DataType.Int64: pa.int64(), DataType.VarChar: pa.string()}
_DELETE_JSON_SCHEMA = {t: pa.schema([("pk", a), ("ts", pa.uint64()), ("pkType", pa.int64())])
                       for t, a in _PK_ARROW.items()}
_MAX_OFFSET = 2**31 - 1     # a binary or list column's int32 offsets


def _fail(where: str, what: str) -> BinlogFormatError:
    return BinlogFormatError(f"{where or 'binlog'}: {what}")


def _field(spec: FieldSpec) -> str:
    return f"field {spec.name!r} (id {spec.field_id}, {spec.type_name})"


def check_descriptor(desc: Descriptor, spec: FieldSpec, *, where: str = "") -> None:
    """The binlog is the field's: same field id and the payload type the field's type writes."""
    if desc.field_id != spec.field_id:
        raise _fail(where, f"binlog of field id {desc.field_id}, expected {_field(spec)}")
    if desc.payload_type != spec.data_type:
        raise _fail(where, f"payload type {type_name(desc.payload_type)}, expected {_field(spec)}")


def added_later(spec: FieldSpec, rows: int) -> pa.Array:
    """The column of a nullable field a segment holds nothing of: the field was added to the live
    collection after the segment was written (Milvus 2.6 adds only nullable fields, and writes no
    data for them into older segments), and Milvus reads it as null in every row of the segment
    (docs/milvus-facts.md §13), as the wire decoder reads an insert sent before it."""
    return pa.nulls(rows, arrow_type(spec))


def insert_column(spec: FieldSpec, values: pa.Array, *, where: str = "") -> pa.Array:
    """An insert binlog's payload values as the field's DeltaNode column (``arrow_type(spec)``);
    a nullable field's nulls stay nulls, the other values converted as a column of their own."""
    convert = _CONVERTERS.get(spec.data_type)
    if convert is None:
        raise _fail(where, f"{_field(spec)}: type not supported in a binlog import")
    nulls = values.null_count
    if nulls and not spec.nullable:
        raise _fail(where, f"{_field(spec)}: {nulls} null value(s) in a field that is not nullable")
    try:
        if not nulls:
            return convert(spec, values, where)
        valid = np.asarray(values.is_valid())
        dense = convert(spec, values.filter(pa.array(valid)), where)
        return dense.take(pa.array(np.cumsum(valid) - 1, mask=~valid))
    except Reject as e:     # from the wire decoder's helpers, which name the field
        raise _fail(where, str(e)) from None


def struct_array_column(spec: FieldSpec, parts: list[pa.Array], *, where: str = "") -> pa.Array:
    """A struct array from its sub-fields' stored columns (in ``spec.sub_fields`` order), as the
    wire decoder puts one together: row i holds as many structs as each sub-field holds elements
    in row i (they must agree), the k-th struct made of their k-th elements; a row is null when
    its sub-fields are (they must agree too)."""
    columns = [insert_column(sub, values, where=where) for sub, values in zip(spec.sub_fields, parts)]
    valid = np.asarray(columns[0].is_valid())
    lengths = np.asarray(pc.fill_null(pc.list_value_length(columns[0]), 0), dtype=np.int64)
    first = spec.sub_fields[0].name
    for sub, column in zip(spec.sub_fields[1:], columns[1:]):
        other = np.asarray(column.is_valid())
        count = np.asarray(pc.fill_null(pc.list_value_length(column), 0), dtype=np.int64)
        if not np.array_equal(other, valid) or not np.array_equal(count, lengths):
            row = int(np.flatnonzero((other != valid) | (count != lengths))[0])
            raise _fail(where, f"{_field(spec)}: row {row} has {lengths[row]} element(s) in sub-field {first!r} "
                               f"(null: {not valid[row]}), {count[row]} in {sub.name!r} (null: {not other[row]})")
    struct_type = arrow_type(spec).value_type
    structs = pa.StructArray.from_arrays([pc.list_flatten(c) for c in columns], fields=list(struct_type))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), structs, type=arrow_type(spec),
                                    mask=None if valid.all() else pa.array(~valid))


def _mismatch(spec: FieldSpec, values: pa.Array, expected: str, where: str) -> BinlogFormatError:
    return _fail(where, f"{_field(spec)}: payload is {values.type}, expected {expected}")


def _scalar(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """Same type, or a safe cast between integers or a widening one between floats."""
    target = arrow_type(spec)
    if values.type == target:
        return values
    t = values.type
    ints = pa.types.is_integer(t) and pa.types.is_integer(target)
    floats = pa.types.is_floating(t) and pa.types.is_floating(target) and t.bit_width < target.bit_width
    if not (ints or floats):
        raise _mismatch(spec, values, str(target), where)
    try:
        return values.cast(target)      # safe: an out-of-range value raises
    except pa.ArrowInvalid as e:
        raise _fail(where, f"{_field(spec)}: {t} values out of range of {target}: {e}") from None


def _varchar(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise _mismatch(spec, values, "string", where)
    return values.cast(pa.string())


def _timestamptz(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """int64 UTC microseconds (what the wire's ``timestamptz_data`` holds) -> timestamp[us, UTC]."""
    if not pa.types.is_int64(values.type):
        raise _mismatch(spec, values, "int64 (UTC microseconds)", where)
    return values.cast(TIMESTAMPTZ)


def _geometry(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """WKB rows, kept as they are; a row that is not empty begins with WKB's byte order mark (0 or
    1), as the wire decoder checks."""
    if not pa.types.is_binary(values.type):
        raise _mismatch(spec, values, "binary (WKB)", where)
    n = len(values)
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=values.offset * 4)
    starts = offsets[:-1][np.diff(offsets) > 0]
    if starts.size:
        marks = np.frombuffer(data_buf, dtype=np.uint8)[starts]
        bad = np.flatnonzero(marks > 1)
        if bad.size:
            row = int(np.flatnonzero(np.diff(offsets) > 0)[bad[0]])
            raise _fail(where, f"{_field(spec)}: row {row} is not WKB (byte order mark {marks[bad[0]]}, not 0 or 1)")
    return values


def _json(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """The JSON text, checked to be UTF-8 (Arrow checks in bulk)."""
    t = values.type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t)):
        raise _mismatch(spec, values, "binary (JSON text)", where)
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        raise _fail(where, f"{_field(spec)}: a JSON value is not UTF-8") from None


def _array(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """Each row a marshalled ScalarField: parsed into one FieldData (a loop over the rows), then
    converted by the wire decoder, which checks the element type and ``max_capacity``."""
    if not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        raise _mismatch(spec, values, "binary (a marshalled ScalarField a row)", where)
    fd = schema_pb2.FieldData(type=DataType.Array, field_id=spec.field_id, field_name=spec.name)
    arrays = fd.scalars.array_data
    arrays.element_type = spec.element_type
    rows = arrays.data
    for i, row in enumerate(values.to_pylist()):
        try:
            rows.add().MergeFromString(row)
        except DecodeError as e:
            raise _fail(where, f"{_field(spec)}: row {i} is not a ScalarField: {e}") from None
    return field_column(spec, fd, len(values))


def _fixed_width(spec: FieldSpec, values: pa.Array, width: int, where: str) -> pa.Buffer:
    """The values buffer of fixed_size_binary[width] rows, from the array's first row."""
    t = values.type
    if not pa.types.is_fixed_size_binary(t):
        raise _mismatch(spec, values, f"fixed_size_binary[{width}]", where)
    if t.byte_width != width:
        raise _fail(where, f"{_field(spec)}: rows of {t.byte_width} bytes, dim {spec.dim} means {width}")
    n = len(values)
    if n * width > _MAX_OFFSET:
        raise _fail(where, f"{_field(spec)}: {n} rows of {width} bytes exceed a column's 2 GiB")
    return values.buffers()[1].slice(values.offset * width, n * width)


def _float_vector(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """dim little-endian float32 a row -> list<float32>, on the payload's buffer (no copy)."""
    data = _fixed_width(spec, values, spec.dim * 4, where)
    n = len(values)
    floats = np.frombuffer(data, dtype="<f4", count=n * spec.dim)
    return pa.ListArray.from_arrays(_list_offsets(n, spec.dim), pa.array(floats), type=FLOAT_LIST)


def _int8_vector(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """dim signed bytes a row -> list<int8>, on the payload's buffer (no copy)."""
    data = _fixed_width(spec, values, spec.dim, where)
    n = len(values)
    int8s = pa.Array.from_buffers(pa.int8(), n * spec.dim, [None, data])
    return pa.ListArray.from_arrays(_list_offsets(n, spec.dim), int8s, type=INT8_LIST)


def _binary_rows(spec: FieldSpec, values: pa.Array, width: int, where: str) -> pa.Array:
    data = _fixed_width(spec, values, width, where)
    n = len(values)
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), data])


def _binary_vector(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    return _binary_rows(spec, values, spec.dim // 8, where)


def _half_vector(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """Float16Vector and BFloat16Vector: dim x 2 bytes a row."""
    return _binary_rows(spec, values, spec.dim * 2, where)


def _sparse_vector(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """Binary rows of (uint32 index, float32 value) pairs -> map<int64, float32>, all rows parsed
    as one buffer from the binary column's offsets."""
    t = values.type
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        raise _mismatch(spec, values, "binary (index/value pairs a row)", where)
    n = len(values)
    _, offsets_buf, data_buf = values.buffers()
    offset_type = np.dtype(np.int64 if pa.types.is_large_binary(t) else np.int32)
    offsets = np.frombuffer(offsets_buf, dtype=offset_type, count=n + 1, offset=values.offset * offset_type.itemsize)
    lengths = np.diff(offsets)
    odd = np.flatnonzero(lengths % _SPARSE_ENTRY.itemsize)
    if odd.size:
        raise _fail(where, f"{_field(spec)}: sparse row {odd[0]} has {lengths[odd[0]]} bytes, not a multiple of 8 "
                           "(uint32 index + float32 value pairs)")
    count = int(offsets[-1] - offsets[0]) // _SPARSE_ENTRY.itemsize
    if count * _SPARSE_ENTRY.itemsize > _MAX_OFFSET:
        raise _fail(where, f"{_field(spec)}: {count} sparse entries exceed a column's 2 GiB")
    entries = (np.frombuffer(data_buf, dtype=_SPARSE_ENTRY, count=count, offset=int(offsets[0])) if count
               else np.empty(0, dtype=_SPARSE_ENTRY))
    map_offsets = ((offsets - offsets[0]) // _SPARSE_ENTRY.itemsize).astype(np.int32)
    indices = entries["index"].astype(np.int64)
    _check_increasing(spec, indices, map_offsets)
    return pa.MapArray.from_arrays(pa.array(map_offsets), pa.array(indices),
                                   pa.array(np.ascontiguousarray(entries["value"])), type=SPARSE_MAP)


def _vector_array(spec: FieldSpec, values: pa.Array, where: str) -> pa.Array:
    """A struct array's vector sub-field: a list of fixed_size_binary vectors a row -> a list of
    the element type's vectors, each converted as a vector field of that type is."""
    if not pa.types.is_list(values.type):
        raise _mismatch(spec, values, "a list of vectors a row", where)
    element = FieldSpec(spec.field_id, spec.name, spec.element_type, spec.dim)
    convert = _CONVERTERS.get(spec.element_type)
    if convert is None or spec.element_type == DataType.SparseFloatVector:
        raise _fail(where, f"{_field(spec)}: an ArrayOfVector of {spec.element_type_name} is not supported")
    counts = np.asarray(pc.list_value_length(values), dtype=np.int64)
    if spec.max_capacity and counts.size and counts.max() > spec.max_capacity:
        raise _fail(where, f"{_field(spec)}: {counts.max()} vectors in a row, max_capacity is {spec.max_capacity}")
    vectors = convert(element, pc.list_flatten(values), where)
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), vectors, type=arrow_type(spec))


_CONVERTERS = {
    DataType.Bool: _scalar, DataType.Int8: _scalar, DataType.Int16: _scalar, DataType.Int32: _scalar,
    DataType.Int64: _scalar, DataType.Float: _scalar, DataType.Double: _scalar, DataType.VarChar: _varchar,
    DataType.Text: _varchar, DataType.Timestamptz: _timestamptz, DataType.Geometry: _geometry,
    DataType.JSON: _json, DataType.Array: _array, DataType.FloatVector: _float_vector,
    DataType.BinaryVector: _binary_vector, DataType.Float16Vector: _half_vector,
    DataType.BFloat16Vector: _half_vector, DataType.SparseFloatVector: _sparse_vector,
    DataType.Int8Vector: _int8_vector, DataType.ArrayOfVector: _vector_array,
}


def delete_rows(values: pa.Array, pk: FieldSpec, *, where: str = "") -> tuple[pa.Array, pa.Array]:
    """A deltalog's payload values -> (primary keys, int64 or string per ``pk``; int64 delete ts)."""
    key_type = _PK_ARROW.get(pk.data_type)
    if key_type is None:
        raise _fail(where, f"primary key {_field(pk)}: not an Int64 or VarChar")
    if values.null_count:
        raise _fail(where, f"{values.null_count} null delete row(s)")
    if pa.types.is_struct(values.type):
        return _pk_ts_columns(values, pk, key_type, where)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise _fail(where, f"deltalog payload is {values.type}, expected string rows")
    values = values.cast(pa.string())
    if len(values) == 0:
        return pa.array([], key_type), pa.array([], pa.int64())
    is_json = pc.starts_with(pc.utf8_ltrim_whitespace(values), "{").to_numpy(zero_copy_only=False)
    if is_json.all():
        return _json_rows(values, pk, where)
    if not is_json.any():
        return _legacy_rows(values, pk, where)
    # Both forms in one file (Milvus parses each row on its own): each part, then file order.
    json_at, legacy_at = np.flatnonzero(is_json), np.flatnonzero(~is_json)
    json_keys, json_ts = _json_rows(values.take(pa.array(json_at)), pk, where)
    legacy_keys, legacy_ts = _legacy_rows(values.take(pa.array(legacy_at)), pk, where)
    order = pa.array(np.argsort(np.concatenate([json_at, legacy_at]), kind="stable"))
    return (pa.concat_arrays([json_keys, legacy_keys]).take(order),
            pa.concat_arrays([json_ts, legacy_ts]).take(order))


def _delete_ts(ts: pa.Array, where: str) -> pa.Array:
    try:
        return ts.cast(pa.int64())
    except pa.ArrowInvalid as e:
        raise _fail(where, f"a delete timestamp beyond int64: {e}") from None


def _pk_ts_columns(values: pa.StructArray, pk: FieldSpec, key_type: pa.DataType,
                   where: str) -> tuple[pa.Array, pa.Array]:
    """The "parquet" deltalog format: ``pk`` and ``ts`` (int64) columns."""
    names = [values.type.field(i).name for i in range(values.type.num_fields)]
    if names != ["pk", "ts"]:
        raise _fail(where, f"deltalog columns {names}, expected ['pk', 'ts']")
    keys, ts = values.field("pk"), values.field("ts")
    if keys.null_count or ts.null_count:
        raise _fail(where, "null pk or ts in a deltalog")
    if keys.type != key_type and not (key_type == pa.string() and pa.types.is_large_string(keys.type)):
        raise _fail(where, f"deltalog keys are {keys.type}; primary key {_field(pk)} is {key_type}")
    if not pa.types.is_integer(ts.type):
        raise _fail(where, f"deltalog ts is {ts.type}, expected int64")
    return keys.cast(key_type), _delete_ts(ts, where)


def _json_rows(values: pa.Array, pk: FieldSpec, where: str) -> tuple[pa.Array, pa.Array]:
    """``{"pk":6,"ts":470767461955796999,"pkType":5}`` rows, read as one newline-delimited JSON
    buffer by Arrow's JSON reader."""
    n = len(values)
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), values), "\n")[0]
    schema = _DELETE_JSON_SCHEMA[pk.data_type]
    try:
        table = pajson.read_json(pa.BufferReader(joined.as_buffer()),
                                 parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                                   unexpected_field_behavior="ignore"))
    except pa.ArrowInvalid as e:
        raise _fail(where, f"deltalog JSON rows do not parse with {pk.type_name} keys: {e}") from None
    if table.num_rows != n:
        raise _fail(where, f"{n} deltalog rows read as {table.num_rows} JSON objects")
    keys, ts, pk_types = (table.column(c).combine_chunks() for c in ("pk", "ts", "pkType"))
    if keys.null_count or ts.null_count:
        raise _fail(where, "a deltalog JSON row without pk or ts")
    wrong = pc.invert(pc.fill_null(pc.equal(pk_types, pk.data_type), False))
    if pc.any(wrong).as_py():
        row = int(np.flatnonzero(wrong.to_numpy(zero_copy_only=False))[0])
        raise _fail(where, f"deltalog row {row} has pkType {pk_types[row].as_py()}; primary key "
                           f"{_field(pk)} is {int(pk.data_type)}")
    return keys, _delete_ts(ts, where)


def _legacy_rows(values: pa.Array, pk: FieldSpec, where: str) -> tuple[pa.Array, pa.Array]:
    """``"pk,ts"`` rows of the first Milvus releases, which had Int64 primary keys only."""
    if pk.data_type != DataType.Int64:
        raise _fail(where, f"legacy \"pk,ts\" deltalog rows hold Int64 keys; primary key {_field(pk)} is not Int64")
    parts = pc.split_pattern(values, ",")
    sizes = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(sizes != 2)
    if bad.size:
        raise _fail(where, f"deltalog row {bad[0]} {values[int(bad[0])].as_py()!r} is neither JSON nor \"pk,ts\"")
    try:
        keys = pc.list_element(parts, 0).cast(pa.int64())
        ts = pc.list_element(parts, 1).cast(pa.uint64())
    except pa.ArrowInvalid as e:
        raise _fail(where, f"legacy \"pk,ts\" deltalog row is not two integers: {e}") from None
    return keys, _delete_ts(ts, where)
