"""Milvus wire messages -> Arrow columns, on executors.

The message type comes from ``MsgHeader.base.msg_type``; the payload is then parsed with that
type's message class. Columns are built from the protobuf repeated fields in bulk
(``np.asarray`` over a repeated scalar is a C loop; ``np.fromiter`` is ~10x slower), never value
by value. Array and SparseFloatVector columns, which Milvus sends one message a row, take one
loop over the rows to concatenate them; their values are then converted at once, and so do
Geometry (WKB rows) and ArrayOfVector rows. A struct array comes flattened, a column per
sub-field, and is put back together as a list of structs (``struct_column``). An insert without
a nullable field (written before the field was added to the live collection) has it null in every
row. Anything that does not fit the collection's schema raises ``Reject`` with a reason; the
caller quarantines the message.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError

from ..failure.errors import DeltaNodeError
from ..failure.kinds import FailureKind
from ..wire.milvus_proto import common_pb2, milvus_pb2, msg_pb2, schema_pb2
from ..wire.schema import (
    FLOAT_LIST,
    INT8_LIST,
    SPARSE_MAP,
    TIMESTAMPTZ,
    VALUE_SLOTS,
    CollectionLayout,
    DataType,
    FieldSpec,
    arrow_type,
    type_name,
)

MsgType = common_pb2.MsgType
# Plain ints on the per-message paths: each attribute read of a protobuf enum wrapper costs
# about a microsecond, and an insert made seventeen of them.
MSG_INSERT, MSG_DELETE, MSG_TIME_TICK = MsgType.Insert, MsgType.Delete, MsgType.TimeTick
MSG_FLUSH, MSG_DROP_COLLECTION, MSG_DROP_PARTITION = MsgType.Flush, MsgType.DropCollection, MsgType.DropPartition
_BOOL, _INT8, _INT16, _INT32, _INT64 = DataType.Bool, DataType.Int8, DataType.Int16, DataType.Int32, DataType.Int64
_FLOAT, _DOUBLE, _VARCHAR, _JSON = DataType.Float, DataType.Double, DataType.VarChar, DataType.JSON
_FLOAT_VECTOR, _BINARY_VECTOR, _FLOAT16_VECTOR = DataType.FloatVector, DataType.BinaryVector, DataType.Float16Vector
_BFLOAT16_VECTOR, _SPARSE_VECTOR, _ARRAY = DataType.BFloat16Vector, DataType.SparseFloatVector, DataType.Array
_INT8_VECTOR, _TEXT, _TIMESTAMPTZ = DataType.Int8Vector, DataType.Text, DataType.Timestamptz
_GEOMETRY = DataType.Geometry
_ARRAY_OF_VECTOR, _ARRAY_OF_STRUCT = DataType.ArrayOfVector, DataType.ArrayOfStruct
_COLUMN_BASED = msg_pb2.ColumnBased
_NARROW_INTS = {_INT8: np.int8, _INT16: np.int16, _INT32: np.int32}
# A SparseFloatVector row: pairs of little-endian uint32 index and float32 value.
_SPARSE_ENTRY = np.dtype([("index", "<u4"), ("value", "<f4")])

PARSERS = {
    MsgType.Insert: msg_pb2.InsertRequest,
    MsgType.Delete: msg_pb2.DeleteRequest,
    MsgType.TimeTick: msg_pb2.TimeTickMsg,
    MsgType.Flush: milvus_pb2.FlushRequest,
    MsgType.DropCollection: msg_pb2.DropCollectionRequest,
    MsgType.DropPartition: msg_pb2.DropPartitionRequest,
}
# Known types that carry nothing for a DataNode's vchannel.
IGNORED = {MsgType.CreateCollection, MsgType.CreatePartition, MsgType.DataNodeTt,
           MsgType.Replicate, MsgType.Upsert}


class Reject(DeltaNodeError):
    """The message cannot be applied; ``str(self)`` is the reason recorded in quarantine."""

    kind = FailureKind.REJECTED


def parse(value: bytes | None):
    """Return ``(msg_type, message)``; ``message`` is None for known types that are ignored."""
    if not value:
        raise Reject("empty payload")
    try:
        header = common_pb2.MsgHeader.FromString(value)
    except DecodeError as e:
        raise Reject(f"payload does not parse as a Milvus MsgHeader: {e}") from None
    if not header.HasField("base"):
        raise Reject("MsgHeader has no base")
    msg_type = header.base.msg_type
    parser = PARSERS.get(msg_type)
    if parser is None:
        if msg_type in IGNORED:
            return msg_type, None
        raise Reject(f"unknown message type {msg_type}")
    try:
        return msg_type, parser.FromString(value)
    except DecodeError as e:
        raise Reject(f"{MsgType.Name(msg_type)} payload does not parse: {e}") from None


@functools.lru_cache(maxsize=256)
def _list_offsets(n: int, width: int) -> pa.Array:
    """Offsets of ``n`` lists of ``width`` values: the same for every message of a size."""
    return pa.array(np.arange(0, (n + 1) * width, width, dtype=np.int32))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """int32 list offsets of rows of ``lengths``."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _fixed_binary_rows(data: bytes, n: int, width: int, what: str) -> pa.Array:
    if len(data) != n * width:
        raise Reject(f"{what}: {len(data)} bytes for {n} rows of {width} bytes")
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _check_dim(spec: FieldSpec, v: schema_pb2.VectorField) -> None:
    if v.dim != spec.dim:
        raise Reject(f"field {spec.name!r}: dim {v.dim}, schema says {spec.dim}")


def _float_vector(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    v = fd.vectors
    _check_dim(spec, v)
    values = np.asarray(v.float_vector.data, dtype=np.float32)
    if values.size != n * spec.dim:
        raise Reject(f"field {spec.name!r}: {values.size} floats for {n} rows of dim {spec.dim}")
    return pa.ListArray.from_arrays(_list_offsets(n, spec.dim), pa.array(values), type=FLOAT_LIST)


def _binary_vector(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    _check_dim(spec, fd.vectors)
    return _fixed_binary_rows(fd.vectors.binary_vector, n, spec.dim // 8, f"field {spec.name!r}")


def _float16_vector(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    _check_dim(spec, fd.vectors)
    return _fixed_binary_rows(fd.vectors.float16_vector, n, spec.dim * 2, f"field {spec.name!r}")


def _bfloat16_vector(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    _check_dim(spec, fd.vectors)
    return _fixed_binary_rows(fd.vectors.bfloat16_vector, n, spec.dim * 2, f"field {spec.name!r}")


def _int8_vector(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """dim signed bytes a row (``VectorField.int8_vector``) -> list<int8>, without a copy."""
    _check_dim(spec, fd.vectors)
    raw = fd.vectors.int8_vector
    if len(raw) != n * spec.dim:
        raise Reject(f"field {spec.name!r}: {len(raw)} bytes for {n} rows of dim {spec.dim}")
    values = pa.Array.from_buffers(pa.int8(), len(raw), [None, pa.py_buffer(raw)])
    return pa.ListArray.from_arrays(_list_offsets(n, spec.dim), values, type=INT8_LIST)


def _sparse_vector(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """One map a row from ``sparse_float_vector.contents``: each row n x (uint32 index, float32
    value), little-endian, indices increasing (Milvus 2.4+). All rows are parsed as one buffer:
    0.13 ms per 1,000 rows of 4.5 entries on average."""
    rows = fd.vectors.sparse_float_vector.contents
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    odd = np.flatnonzero(lengths % _SPARSE_ENTRY.itemsize)
    if odd.size:
        raise Reject(f"field {spec.name!r}: sparse row {odd[0]} has {lengths[odd[0]]} bytes, not a multiple of 8 "
                     "(uint32 index + float32 value pairs)")
    entries = np.frombuffer(b"".join(rows), dtype=_SPARSE_ENTRY)
    offsets = _offsets(lengths // _SPARSE_ENTRY.itemsize)
    indices = entries["index"].astype(np.int64)
    _check_increasing(spec, indices, offsets)
    return pa.MapArray.from_arrays(pa.array(offsets), pa.array(indices),
                                   pa.array(np.ascontiguousarray(entries["value"])), type=SPARSE_MAP)


def _check_increasing(spec: FieldSpec, indices: np.ndarray, offsets: np.ndarray) -> None:
    """Within each row, sparse indices strictly increase (a map has each key once)."""
    if indices.size < 2:
        return
    bad = np.diff(indices) <= 0
    starts = offsets[1:-1]
    bad[starts[(starts > 0) & (starts < indices.size)] - 1] = False    # row boundaries
    if bad.any():
        row = int(np.searchsorted(offsets, np.flatnonzero(bad)[0], side="right")) - 1
        raise Reject(f"field {spec.name!r}: sparse row {row}: indices not strictly increasing")


def _narrow_ints(spec: FieldSpec, raw, data_type: int) -> np.ndarray:
    """Int8/16/32 values (int32 on the wire) as their own width, checked for range."""
    wide = np.asarray(raw, dtype=np.int32)
    cast = wide.astype(_NARROW_INTS[data_type])
    if not np.array_equal(cast, wide):
        raise Reject(f"field {spec.name!r}: values out of range for {DataType.Name(data_type)}")
    return cast


def _bool(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    return pa.array(np.asarray(fd.scalars.bool_data.data, dtype=np.bool_))


def _narrow(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    return pa.array(_narrow_ints(spec, fd.scalars.int_data.data, spec.data_type))


def _int64(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    return pa.array(np.asarray(fd.scalars.long_data.data, dtype=np.int64))


def _float(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    return pa.array(np.asarray(fd.scalars.float_data.data, dtype=np.float32))


def _double(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    return pa.array(np.asarray(fd.scalars.double_data.data, dtype=np.float64))


def _varchar(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """``max_length`` is left to Milvus's proxy, which checks it before sending: here it would cost
    3.5 us (byte lengths from the offsets) to 10.5 us (``utf8_length``) per 1,000 values, 4-11% of
    a 1,000-row Int64 + 128-dim FloatVector + VarChar insert's decode (90 us)."""
    return pa.array(list(fd.scalars.string_data.data), type=pa.string())


def _timestamptz(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """``timestamptz_data``: microseconds since the epoch, UTC, as Milvus's proxy turns the time a
    client sends into (pkg/v2 ``util/timestamptz``)."""
    micros = np.asarray(fd.scalars.timestamptz_data.data, dtype=np.int64)
    return pa.Array.from_buffers(TIMESTAMPTZ, len(micros), [None, pa.py_buffer(micros)])


def _geometry(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """``geometry_data``: WKB, which Milvus's proxy makes of the WKT a client sends. WKT text on
    the wire is refused rather than stored in a column of WKB. A row that is not empty must begin
    with WKB's byte order mark (0 or 1); an empty one is a null's slot."""
    which = fd.scalars.WhichOneof("data")
    if which not in (None, "geometry_data"):
        raise Reject(f"field {spec.name!r}: a Geometry as {which}; Milvus's proxy sends WKB (geometry_data)")
    rows = list(fd.scalars.geometry_data.data)
    bad = next((i for i, row in enumerate(rows) if row and row[0] > 1), None)
    if bad is not None:
        raise Reject(f"field {spec.name!r}: row {bad} is not WKB (byte order mark {rows[bad][0]}, not 0 or 1)")
    return pa.array(rows, type=pa.binary())


def _json(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """The JSON text as sent. Arrow checks the UTF-8 in bulk: 55 us for 1,000 short values,
    against 91 us for a ``bytes.decode`` of each."""
    try:
        return pa.array(list(fd.scalars.json_data.data), type=pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        raise Reject(f"field {spec.name!r}: JSON value is not UTF-8") from None


def _array(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """One list a row from ``scalars.array_data``: each row is a ScalarField of the element type.
    Milvus 2.3.5's proxy leaves ``ArrayArray.element_type`` unset: the schema's is used.

    About 0.75 ms per 1,000 rows of 2.5 Int64 elements on average, most of it protobuf objects:
    a wrapper for each row's container (0.31 ms) and a Python int for each element (0.26 ms).
    """
    arrays = fd.scalars.array_data
    element = spec.element_type
    if arrays.element_type and arrays.element_type != element:
        raise Reject(f"field {spec.name!r}: an Array of {type_name(arrays.element_type)}, "
                     f"schema says Array of {spec.element_type_name}")
    slot = VALUE_SLOTS[element]
    rows = arrays.data
    containers = [getattr(row, slot).data for row in rows]
    lengths = np.fromiter(map(len, containers), dtype=np.int32, count=len(containers))
    for i in np.flatnonzero(lengths == 0):   # an empty row, or one holding the wrong type
        which = rows[i].WhichOneof("data")
        if which not in (None, slot):
            raise Reject(f"field {spec.name!r}: row {i} holds {which}, schema says Array of {spec.element_type_name}")
    if spec.max_capacity and lengths.size and lengths.max() > spec.max_capacity:
        raise Reject(f"field {spec.name!r}: an array of {lengths.max()} elements, max_capacity is {spec.max_capacity}")
    flat = list(itertools.chain.from_iterable(containers))
    list_type = arrow_type(spec)
    if element in _NARROW_INTS:
        values = pa.array(_narrow_ints(spec, flat, element))
    else:
        values = pa.array(flat, type=list_type.value_type)
    return pa.ListArray.from_arrays(pa.array(_offsets(lengths)), values, type=list_type)


# A vector of an ArrayOfVector row: its VectorField member, how many bytes (or floats) a vector
# holds for a dim, and the Arrow type of one vector.
_VECTOR_SLOTS = {_FLOAT_VECTOR: "float_vector", _INT8_VECTOR: "int8_vector", _BINARY_VECTOR: "binary_vector",
                 _FLOAT16_VECTOR: "float16_vector", _BFLOAT16_VECTOR: "bfloat16_vector"}


def _vector_width(element: int, dim: int) -> int:
    """Floats (a FloatVector) or bytes (the others) of one vector of ``dim``."""
    if element == _BINARY_VECTOR:
        return dim // 8
    return dim * 2 if element in (_FLOAT16_VECTOR, _BFLOAT16_VECTOR) else dim


def _vector_array(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """An ArrayOfVector (a struct array's vector sub-field): ``vectors.vector_array.data`` holds a
    VectorField a row, its vectors one after the other -> a list of vectors a row, each vector as
    that vector type's column holds it."""
    va = fd.vectors.vector_array
    element = spec.element_type
    if va.element_type and va.element_type != element:
        raise Reject(f"field {spec.name!r}: an ArrayOfVector of {type_name(va.element_type)}, schema says "
                     f"ArrayOfVector of {spec.element_type_name}")
    for dim in (va.dim, fd.vectors.dim):
        if dim and dim != spec.dim:
            raise Reject(f"field {spec.name!r}: dim {dim}, schema says {spec.dim}")
    width = _vector_width(element, spec.dim)
    if element == _FLOAT_VECTOR:
        floats = [np.asarray(row.float_vector.data, dtype=np.float32) for row in va.data]
        counts = _vectors_a_row(spec, [len(f) for f in floats], width, "floats")
        flat = np.concatenate(floats) if floats else np.empty(0, dtype=np.float32)
        vectors = pa.ListArray.from_arrays(_list_offsets(len(flat) // width, spec.dim), pa.array(flat),
                                           type=FLOAT_LIST)
    else:
        slot = _VECTOR_SLOTS[element]
        raw_rows: list[bytes] = [getattr(row, slot) for row in va.data]
        counts = _vectors_a_row(spec, [len(r) for r in raw_rows], width, "bytes")
        raw = b"".join(raw_rows)
        if element == _INT8_VECTOR:
            vectors = pa.ListArray.from_arrays(_list_offsets(len(raw) // width, spec.dim),
                                               pa.Array.from_buffers(pa.int8(), len(raw), [None, pa.py_buffer(raw)]),
                                               type=INT8_LIST)
        else:
            vectors = _fixed_binary_rows(raw, len(raw) // width, width, f"field {spec.name!r}")
    return pa.ListArray.from_arrays(pa.array(_offsets(counts)), vectors, type=arrow_type(spec))


def _vectors_a_row(spec: FieldSpec, sizes: list[int], width: int, unit: str) -> np.ndarray:
    """How many vectors of ``width`` each row's ``sizes`` hold, checked to be whole and at most
    ``max_capacity``."""
    size = np.asarray(sizes, dtype=np.int64)
    odd = np.flatnonzero(size % width)
    if odd.size:
        raise Reject(f"field {spec.name!r}: row {odd[0]} holds {size[odd[0]]} {unit}, not whole vectors of "
                     f"{width} {unit} (dim {spec.dim})")
    counts = size // width
    if spec.max_capacity and counts.size and counts.max() > spec.max_capacity:
        raise Reject(f"field {spec.name!r}: {counts.max()} vectors in a row, max_capacity is {spec.max_capacity}")
    return counts


_DECODERS = {
    _FLOAT_VECTOR: _float_vector, _BINARY_VECTOR: _binary_vector, _FLOAT16_VECTOR: _float16_vector,
    _BFLOAT16_VECTOR: _bfloat16_vector, _SPARSE_VECTOR: _sparse_vector, _INT8_VECTOR: _int8_vector,
    _BOOL: _bool, _INT8: _narrow, _INT16: _narrow, _INT32: _narrow, _INT64: _int64, _FLOAT: _float,
    _DOUBLE: _double, _VARCHAR: _varchar, _TEXT: _varchar, _JSON: _json, _ARRAY: _array,
    _TIMESTAMPTZ: _timestamptz, _GEOMETRY: _geometry, _ARRAY_OF_VECTOR: _vector_array,
}


def field_column(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """One FieldData as an Arrow column of ``n`` rows, checked against ``spec``."""
    if spec.data_type == _ARRAY_OF_STRUCT:
        return struct_column(spec, _struct_parts(spec, [fd]), n)
    if fd.type != spec.data_type:
        raise Reject(f"field {spec.name!r}: got {type_name(fd.type)}, schema says {spec.type_name}")
    if fd.valid_data:   # 0.1 us a field when empty, as it is but for Milvus 2.5's nullable fields
        valid = _nulls(spec, fd, n)
        if valid is not None:
            return _with_nulls(spec, fd, n, valid)
    arr = _DECODERS[spec.data_type](spec, fd, n)
    if len(arr) != n:
        raise Reject(f"field {spec.name!r}: {len(arr)} values for {n} rows")
    return arr


def _nulls(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> np.ndarray | None:
    """``valid_data`` (Milvus 2.5+, one bool a row) as a mask, or None when no row is null."""
    valid = np.asarray(fd.valid_data, dtype=np.bool_)
    if valid.size != n:
        raise Reject(f"field {spec.name!r}: valid_data has {valid.size} entries for {n} rows")
    nulls = n - int(np.count_nonzero(valid))
    if not nulls:
        return None
    if not spec.nullable:
        raise Reject(f"field {spec.name!r}: {nulls} null(s) in a field that is not nullable")
    return valid


def _with_nulls(spec: FieldSpec, fd: schema_pb2.FieldData, n: int, valid: np.ndarray) -> pa.Array:
    """The column, null where ``valid`` is False. Its values come in the full form (a slot for
    every row, as Milvus 2.5's proxy sends them: a zero value where null) or compact (the valid
    values only)."""
    arr = _DECODERS[spec.data_type](spec, fd, n)
    k = int(np.count_nonzero(valid))
    if len(arr) == n:
        return pc.if_else(pa.array(valid), arr, pa.scalar(None, arr.type))
    if len(arr) == k:
        return arr.take(pa.array(np.cumsum(valid) - 1, mask=~valid))
    raise Reject(f"field {spec.name!r}: {len(arr)} values for {n} rows of which {k} are valid "
                 f"(expected {n}, or {k})")


def _struct_parts(spec: FieldSpec, fields_data) -> list[schema_pb2.FieldData]:
    """A struct array's sub-fields among ``fields_data``, in the spec's order. Milvus's proxy
    flattens a struct array: each sub-field comes as a column of its own (its id, the name
    ``struct[sub]``); a FieldData of type ArrayOfStruct holding them (``struct_arrays``) is taken too."""
    whole = next((fd for fd in fields_data if (fd.field_id == spec.field_id if fd.field_id else
                                               fd.field_name == spec.name)), None)
    if whole is not None:
        if whole.type != _ARRAY_OF_STRUCT:
            raise Reject(f"field {spec.name!r}: got {type_name(whole.type)}, schema says ArrayOfStruct")
        fields_data = whole.struct_arrays.fields
    by_id = {fd.field_id: fd for fd in fields_data if fd.field_id}
    by_name = {fd.field_name: fd for fd in fields_data}
    parts = []
    for sub in spec.sub_fields:
        fd = by_id.get(sub.field_id) or by_name.get(sub.wire_name) or by_name.get(sub.name)
        if fd is None:
            raise Reject(f"field {spec.name!r}: sub-field {sub.wire_name or sub.name!r} (id {sub.field_id}) missing "
                         "from the insert")
        parts.append(fd)
    return parts


def _struct_sent(spec: FieldSpec, fields_data) -> bool:
    """Whether the insert carries any part of the struct array: itself, or one of its sub-fields."""
    ids = {spec.field_id} | {sub.field_id for sub in spec.sub_fields}
    names = {spec.name} | {sub.wire_name for sub in spec.sub_fields} | {sub.name for sub in spec.sub_fields}
    return any((fd.field_id in ids) if fd.field_id else (fd.field_name in names) for fd in fields_data)


def struct_column(spec: FieldSpec, parts: list[schema_pb2.FieldData], n: int) -> pa.Array:
    """A struct array from its sub-fields' columns: row i holds as many structs as each of its
    sub-fields holds elements in row i (they must agree), the k-th struct made of their k-th
    elements; a row is null when its sub-fields are (they must agree too)."""
    columns = [field_column(sub, fd, n) for sub, fd in zip(spec.sub_fields, parts)]
    first = spec.sub_fields[0].name
    valid = np.asarray(pc.is_valid(columns[0]))
    lengths = np.asarray(pc.fill_null(pc.list_value_length(columns[0]), 0), dtype=np.int64)
    for sub, column in zip(spec.sub_fields[1:], columns[1:]):
        other = np.asarray(pc.is_valid(column))
        if not np.array_equal(other, valid):
            row = int(np.flatnonzero(other != valid)[0])
            raise Reject(f"field {spec.name!r}: row {row} is null in sub-field {first!r} or {sub.name!r} but not both")
        count = np.asarray(pc.fill_null(pc.list_value_length(column), 0), dtype=np.int64)
        if not np.array_equal(count, lengths):
            row = int(np.flatnonzero(count != lengths)[0])
            raise Reject(f"field {spec.name!r}: row {row} has {lengths[row]} elements in sub-field {first!r}, "
                         f"{count[row]} in {sub.name!r}")
    struct_type = arrow_type(spec).value_type
    structs = pa.StructArray.from_arrays([pc.list_flatten(c) for c in columns], fields=list(struct_type))
    mask = None if valid.all() else pa.array(~valid)
    return pa.ListArray.from_arrays(pa.array(_offsets(lengths)), structs, type=arrow_type(spec), mask=mask)


def insert_columns(layout: CollectionLayout, req: msg_pb2.InsertRequest) -> tuple[list[pa.Array], int]:
    """The user columns and ``_ts``/``_row_id`` of an InsertRequest, checked against the schema."""
    if req.version != _COLUMN_BASED and req.row_data:
        raise Reject("row-based InsertRequest (row_data) is not supported; Milvus >= 2.2 sends column-based")
    n = len(req.timestamps)
    if n == 0 or req.num_rows != n:
        raise Reject(f"row count mismatch: num_rows {req.num_rows}, {n} timestamps")
    if len(req.rowIDs) != n:
        raise Reject(f"row count mismatch: {len(req.rowIDs)} rowIDs for {n} rows")
    by_id = {fd.field_id: fd for fd in req.fields_data}
    by_name = None   # only when a field comes without its id
    cols = []
    for spec in layout.fields:
        if spec.data_type == _ARRAY_OF_STRUCT:
            if spec.nullable and not _struct_sent(spec, req.fields_data):
                cols.append(pa.nulls(n, arrow_type(spec)))
            else:
                cols.append(struct_column(spec, _struct_parts(spec, req.fields_data), n))
            continue
        fd = by_id.get(spec.field_id)
        if fd is None:
            by_name = by_name or {fd.field_name: fd for fd in req.fields_data}
            fd = by_name.get(spec.name)
            if fd is None:
                if not spec.nullable:
                    raise Reject(f"field {spec.name!r} (id {spec.field_id}) missing from the insert")
                # An insert written before the field was added to the live collection: Milvus
                # reads its rows as null there (docs/milvus-facts.md §14).
                cols.append(pa.nulls(n, arrow_type(spec)))
                continue
        cols.append(field_column(spec, fd, n))
    cols.append(pa.array(np.asarray(req.timestamps, dtype=np.uint64).astype(np.int64)))
    cols.append(pa.array(np.asarray(req.rowIDs, dtype=np.int64)))
    return cols, n


def delete_columns(layout: CollectionLayout, req: msg_pb2.DeleteRequest) -> tuple[pa.Array, pa.Array, int]:
    """The primary keys and timestamps of a DeleteRequest, checked against the schema."""
    pk = layout.primary_key
    ids = req.primary_keys
    if pk.data_type == _INT64:
        if ids.HasField("str_id"):
            raise Reject(f"delete carries string keys; primary key {pk.name!r} is Int64")
        keys = pa.array(np.asarray(ids.int_id.data if ids.HasField("int_id") else req.int64_primary_keys,
                                   dtype=np.int64))
    else:
        if ids.HasField("int_id"):
            raise Reject(f"delete carries Int64 keys; primary key {pk.name!r} is VarChar")
        keys = pa.array(list(ids.str_id.data), type=pa.string())
    n = len(req.timestamps)
    if n == 0 or len(keys) != n or (req.num_rows and req.num_rows != n):
        raise Reject(f"row count mismatch: num_rows {req.num_rows}, {len(keys)} keys, {n} timestamps")
    ts = pa.array(np.asarray(req.timestamps, dtype=np.uint64).astype(np.int64))
    return keys, ts, n
