"""A collection schema with every type DeltaNode persists, and a plain-Python reading of Milvus
InsertRequests (row by row, independent of ``flowgraph.decode``) to compare stored rows with:
shared by the unit and integration tests of the types."""

from __future__ import annotations

import struct

from deltanode.wire.milvus_proto import msg_pb2, schema_pb2
from deltanode.wire.schema import VALUE_SLOTS, CollectionLayout, DataType, FieldSpec

ARRAY_ELEMENTS = ("Bool", "Int8", "Int16", "Int32", "Int64", "Float", "Double", "VarChar")
EVERY_TYPE = {"enable_dynamic_field": True, "fields": [
    {"name": "pk", "data_type": "VarChar", "is_primary_key": True, "max_length": 64},
    {"name": "b", "data_type": "Bool"},
    {"name": "i8", "data_type": "Int8"},
    {"name": "i16", "data_type": "Int16", "nullable": True, "default_value": 7},
    {"name": "i32", "data_type": "Int32"},
    {"name": "i64", "data_type": "Int64", "is_partition_key": True},
    {"name": "f", "data_type": "Float"},
    {"name": "d", "data_type": "Double", "nullable": True},
    {"name": "s", "data_type": "VarChar", "max_length": 64, "nullable": True},
    {"name": "j", "data_type": "JSON", "nullable": True},
    *({"name": f"a_{e.lower()}", "data_type": "Array", "element_type": e, "max_capacity": 8,
       **({"max_length": 16} if e == "VarChar" else {}), **({"nullable": True} if e == "Int64" else {})}
      for e in ARRAY_ELEMENTS),
    {"name": "fv", "data_type": "FloatVector", "dim": 8},
    {"name": "bv", "data_type": "BinaryVector", "dim": 16},
    {"name": "hv", "data_type": "Float16Vector", "dim": 4},
    {"name": "bf", "data_type": "BFloat16Vector", "dim": 4},
    {"name": "sv", "data_type": "SparseFloatVector"},
]}


def sparse_row(raw: bytes) -> dict[int, float]:
    """One SparseFloatVector row: (uint32 index, float32 value) pairs, little-endian."""
    return {index: value for index, value in struct.iter_unpack("<If", raw)}


def values_of(spec: FieldSpec, fd: schema_pb2.FieldData, n: int) -> list:
    """A field's ``n`` values, None where ``valid_data`` says null (full or compact form)."""
    t = spec.data_type
    if t == DataType.FloatVector:
        data = list(fd.vectors.float_vector.data)
        return [data[i * spec.dim:(i + 1) * spec.dim] for i in range(n)]
    if t in (DataType.BinaryVector, DataType.Float16Vector, DataType.BFloat16Vector):
        raw = {DataType.BinaryVector: fd.vectors.binary_vector, DataType.Float16Vector: fd.vectors.float16_vector,
               DataType.BFloat16Vector: fd.vectors.bfloat16_vector}[t]
        width = spec.dim // 8 if t == DataType.BinaryVector else spec.dim * 2
        return [raw[i * width:(i + 1) * width] for i in range(n)]
    if t == DataType.SparseFloatVector:
        return [sparse_row(raw) for raw in fd.vectors.sparse_float_vector.contents]
    if t == DataType.Array:
        slot = VALUE_SLOTS[spec.element_type]
        values = [list(getattr(row, slot).data) for row in fd.scalars.array_data.data]
    elif t == DataType.JSON:
        values = [raw.decode() for raw in fd.scalars.json_data.data]
    else:
        values = list(getattr(fd.scalars, VALUE_SLOTS[t]).data)
    valid = list(fd.valid_data) or [True] * n
    if len(values) == n:
        return [v if ok else None for v, ok in zip(values, valid)]
    compact = iter(values)
    return [next(compact) if ok else None for ok in valid]


def rows_of(layout: CollectionLayout, req: msg_pb2.InsertRequest) -> list[dict]:
    """The rows an InsertRequest carries, as ``read_table(...).to_pylist()`` gives them back
    (sparse vectors as ``{index: value}``), with ``_ts`` and ``_row_id``."""
    n = len(req.timestamps)
    by_id = {fd.field_id: fd for fd in req.fields_data}
    columns = {f.name: values_of(f, by_id[f.field_id], n) for f in layout.fields}
    columns["_ts"], columns["_row_id"] = list(req.timestamps), list(req.rowIDs)
    return [{name: values[i] for name, values in columns.items()} for i in range(n)]


def comparable(row: dict, layout: CollectionLayout) -> dict:
    """A row read from Delta with its map columns (sparse vectors) as dicts."""
    out = dict(row)
    for f in layout.fields:
        if f.data_type == DataType.SparseFloatVector and out[f.name] is not None:
            out[f.name] = dict(out[f.name])
    return out
