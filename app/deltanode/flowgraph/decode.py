"""Milvus wire messages -> Arrow columns, on executors.

The message type comes from ``MsgHeader.base.msg_type``; the payload is then parsed with that
type's message class. Columns are built from the protobuf repeated fields in bulk
(``np.asarray`` over a repeated scalar is a C loop; ``np.fromiter`` is ~10x slower), never row
by row. Anything that does not fit the collection's schema raises ``Reject`` with a reason;
the caller quarantines the message.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from ..wire.milvus_proto import common_pb2, milvus_pb2, msg_pb2, schema_pb2
from ..wire.schema import FLOAT_LIST, CollectionLayout, DataType, FieldSpec

MsgType = common_pb2.MsgType
# Plain ints on the per-message paths: each attribute read of a protobuf enum wrapper costs
# about a microsecond, and an insert made seventeen of them.
MSG_INSERT, MSG_DELETE, MSG_TIME_TICK = MsgType.Insert, MsgType.Delete, MsgType.TimeTick
MSG_FLUSH, MSG_DROP_COLLECTION, MSG_DROP_PARTITION = MsgType.Flush, MsgType.DropCollection, MsgType.DropPartition
_BOOL, _INT8, _INT16, _INT32, _INT64 = DataType.Bool, DataType.Int8, DataType.Int16, DataType.Int32, DataType.Int64
_FLOAT, _DOUBLE, _VARCHAR, _JSON = DataType.Float, DataType.Double, DataType.VarChar, DataType.JSON
_FLOAT_VECTOR, _BINARY_VECTOR, _FLOAT16_VECTOR = DataType.FloatVector, DataType.BinaryVector, DataType.Float16Vector
_COLUMN_BASED = msg_pb2.ColumnBased
_NARROW_INTS = {_INT8: np.int8, _INT16: np.int16, _INT32: np.int32}

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


class Reject(Exception):
    """The message cannot be applied; ``str(self)`` is the reason recorded in quarantine."""


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


def _fixed_binary_rows(data: bytes, n: int, width: int, what: str) -> pa.Array:
    if len(data) != n * width:
        raise Reject(f"{what}: {len(data)} bytes for {n} rows of {width} bytes")
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def field_column(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> pa.Array:
    """One FieldData as an Arrow column of ``n`` rows, checked against ``spec``."""
    if fd.type != spec.data_type:
        raise Reject(f"field {spec.name!r}: got {DataType.Name(fd.type) if fd.type in DataType.values() else fd.type},"
                     f" schema says {spec.type_name}")
    t = spec.data_type
    if t == _FLOAT_VECTOR:
        v = fd.vectors
        if v.dim != spec.dim:
            raise Reject(f"field {spec.name!r}: dim {v.dim}, schema says {spec.dim}")
        values = np.asarray(v.float_vector.data, dtype=np.float32)
        if values.size != n * spec.dim:
            raise Reject(f"field {spec.name!r}: {values.size} floats for {n} rows of dim {spec.dim}")
        return pa.ListArray.from_arrays(_list_offsets(n, spec.dim), pa.array(values), type=FLOAT_LIST)
    if t in (_BINARY_VECTOR, _FLOAT16_VECTOR):
        v = fd.vectors
        if v.dim != spec.dim:
            raise Reject(f"field {spec.name!r}: dim {v.dim}, schema says {spec.dim}")
        if t == _BINARY_VECTOR:
            return _fixed_binary_rows(v.binary_vector, n, spec.dim // 8, f"field {spec.name!r}")
        return _fixed_binary_rows(v.float16_vector, n, spec.dim * 2, f"field {spec.name!r}")
    s = fd.scalars
    if t == _BOOL:
        arr = pa.array(np.asarray(s.bool_data.data, dtype=np.bool_))
    elif t in (_INT8, _INT16, _INT32):
        raw = np.asarray(s.int_data.data, dtype=np.int32)
        target = _NARROW_INTS[t]
        cast = raw.astype(target)
        if not np.array_equal(cast, raw):
            raise Reject(f"field {spec.name!r}: values out of range for {spec.type_name}")
        arr = pa.array(cast)
    elif t == _INT64:
        arr = pa.array(np.asarray(s.long_data.data, dtype=np.int64))
    elif t == _FLOAT:
        arr = pa.array(np.asarray(s.float_data.data, dtype=np.float32))
    elif t == _DOUBLE:
        arr = pa.array(np.asarray(s.double_data.data, dtype=np.float64))
    elif t == _VARCHAR:
        arr = pa.array(list(s.string_data.data), type=pa.string())
    elif t == _JSON:
        try:
            arr = pa.array([b.decode("utf-8") for b in s.json_data.data], type=pa.string())
        except UnicodeDecodeError:
            raise Reject(f"field {spec.name!r}: JSON value is not UTF-8") from None
    else:  # pragma: no cover - CollectionLayout.validate keeps other types out
        raise Reject(f"field {spec.name!r}: unsupported type {spec.type_name}")
    if len(arr) != n:
        raise Reject(f"field {spec.name!r}: {len(arr)} values for {n} rows")
    return arr


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
        fd = by_id.get(spec.field_id)
        if fd is None:
            by_name = by_name or {fd.field_name: fd for fd in req.fields_data}
            fd = by_name.get(spec.name)
            if fd is None:
                raise Reject(f"field {spec.name!r} (id {spec.field_id}) missing from the insert")
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
