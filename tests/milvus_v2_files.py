"""A writer of the files Milvus 2.6 persists for a segment in storage version 2, for tests: its column
groups as Milvus's code writes them, from Milvus's sources (v2.6.6) and milvus-storage's, rather
than from DeltaNode's reader, so the reader is checked against an encoding of its own.

- ``column_groups``: the split of ``storagecommon.SplitColumns`` with 2.6.6's default policies
  (``DefaultPolicies``): the system columns with the primary, partition and clustering keys in a
  group (the next group id, 0), each vector and Text field a group whose id is its field id, the
  other fields one more group (the next id, 1); sorted by group id. Fields in the order of
  ``typeutil.GetAllFieldSchemas``: the schema's fields (RootCoord appends RowID and Timestamp
  after the user's), then each struct array's sub-fields.
- ``arrow_field`` / ``arrow_column``: the Arrow field ``storage.ConvertToArrowSchema`` makes of a
  field (its name, ``serdeMap``'s type, the field's nullability, ``PARQUET:field_id``) and the
  column ``storage.BuildRecord`` makes of a sync's values (a null for a null).
- ``column_group_file``: what milvus-storage's ``PackedRecordBatchWriter`` writes for one group:
  a Parquet file of the group's columns, zstd level 3, no stored Arrow schema, and the key-value
  metadata ``group_field_id_list``, ``row_group_metadata`` and ``storage_version`` = ``1.0.0``.
- ``write_sync``: one sync of a segment, a file a group under
  ``insert_log/{coll}/{part}/{seg}/{group}/{logID}``, and each group's ``FieldBinlog`` as
  DataCoord keeps it in etcd (protojson for the Go writer's ``etcd_put``; ``log_path`` empty).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltanode.wire.milvus_proto import schema_pb2

from .milvus_binlog_files import sparse_row

DataType = schema_pb2.DataType
FIELD_ID_KEY = b"PARQUET:field_id"
START_OF_USER_FIELD_ID = 100
_VECTORS = {DataType.BinaryVector, DataType.Float16Vector, DataType.BFloat16Vector, DataType.Int8Vector,
            DataType.FloatVector, DataType.SparseFloatVector, DataType.ArrayOfVector}
_SCALARS = {DataType.Bool: pa.bool_(), DataType.Int8: pa.int8(), DataType.Int16: pa.int16(),
            DataType.Int32: pa.int32(), DataType.Int64: pa.int64(), DataType.Float: pa.float32(),
            DataType.Double: pa.float64(), DataType.Timestamptz: pa.int64(), DataType.VarChar: pa.string(),
            DataType.String: pa.string(), DataType.Text: pa.string(), DataType.Array: pa.binary(),
            DataType.JSON: pa.binary(), DataType.Geometry: pa.binary(), DataType.SparseFloatVector: pa.binary()}


@dataclass(frozen=True)
class Group:
    group_id: int
    field_ids: tuple[int, ...]


def all_fields(schema: schema_pb2.CollectionSchema) -> list[schema_pb2.FieldSchema]:
    """``typeutil.GetAllFieldSchemas``: the fields, then each struct array's sub-fields."""
    return [*schema.fields, *(f for s in schema.struct_array_fields for f in s.fields)]


def column_groups(fields: list[schema_pb2.FieldSchema]) -> list[Group]:
    """2.6.6's ``SplitColumns(fields, stats, DefaultPolicies()...)``: the system column policy
    (including the primary key, partition key and clustering key), then the selected data type
    policy, then the remaining short fields; sorted by group id."""
    groups: list[Group] = []
    taken: set[int] = set()
    next_id = 0
    system = tuple(f.fieldID for f in fields if f.fieldID < START_OF_USER_FIELD_ID or f.is_primary_key
                   or f.is_partition_key or f.is_clustering_key)
    groups.append(Group(next_id, system))
    next_id += 1
    taken.update(system)
    for f in fields:
        if f.fieldID not in taken and (f.data_type in _VECTORS or f.data_type == DataType.Text):
            groups.append(Group(f.fieldID, (f.fieldID,)))
            taken.add(f.fieldID)
    rest = tuple(f.fieldID for f in fields if f.fieldID not in taken)
    if rest:
        groups.append(Group(next_id, rest))
    return sorted(groups, key=lambda g: g.group_id)


def _dim(f: schema_pb2.FieldSchema) -> int:
    return int(next((p.value for p in f.type_params if p.key == "dim"), 0))


def _vector_type(data_type: int, dim: int) -> pa.DataType:
    widths = {DataType.FloatVector: dim * 4, DataType.BinaryVector: (dim + 7) // 8, DataType.Float16Vector: dim * 2,
              DataType.BFloat16Vector: dim * 2, DataType.Int8Vector: dim}
    return pa.binary(widths[data_type])


def arrow_type(f: schema_pb2.FieldSchema) -> pa.DataType:
    """``serdeMap[type].arrowType(dim, elementType)``."""
    if f.data_type in _SCALARS:
        return _SCALARS[f.data_type]
    if f.data_type == DataType.ArrayOfVector:
        return pa.list_(_vector_type(f.element_type, _dim(f)))
    return _vector_type(f.data_type, _dim(f))


def arrow_field(f: schema_pb2.FieldSchema) -> pa.Field:
    """``ConvertToArrowField``: the field's name, type and nullability, its id as ``PARQUET:field_id``."""
    return pa.field(f.name, arrow_type(f), nullable=f.nullable, metadata={FIELD_ID_KEY: str(f.fieldID).encode()})


def _vector_bytes(data_type: int, value) -> bytes:
    if data_type == DataType.FloatVector:
        return np.asarray(value, dtype="<f4").tobytes()
    if data_type == DataType.Int8Vector:
        return np.asarray(value, dtype=np.int8).tobytes()
    return bytes(value)


def _value(f: schema_pb2.FieldSchema, value):
    """One row's value as ``serdeMap[type].serialize`` appends it."""
    t = f.data_type
    if t == DataType.JSON:
        return value.encode() if isinstance(value, str) else value
    if t == DataType.Array:
        return value.SerializeToString()     # a ScalarField
    if t == DataType.SparseFloatVector:
        return sparse_row(value)
    if t == DataType.ArrayOfVector:
        return [_vector_bytes(f.element_type, v) for v in value]
    if t in _VECTORS:
        return _vector_bytes(t, value)
    return value


def arrow_column(f: schema_pb2.FieldSchema, values: list) -> pa.Array:
    """``BuildRecord``'s column of a field: a value a row, None a null."""
    return pa.array([None if v is None else _value(f, v) for v in values], type=arrow_type(f))


def _group_field_id_list(groups: list[Group]) -> str:
    return ";".join(",".join(str(f) for f in g.field_ids) for g in groups)


def column_group_file(fields: list[schema_pb2.FieldSchema], columns: list[pa.Array], groups: list[Group], *,
                      kv: dict[bytes, bytes] | None = None) -> bytes:
    """The Parquet file of one group (``fields``, ``columns`` in its column order) as
    ``ParquetFileWriter`` writes it: zstd level 3, the Arrow schema not stored (the field ids are
    the Parquet schema's), one row group here, and the packed writer's key-value metadata.
    ``kv`` replaces those entries (a test's broken file)."""
    schema = pa.schema([arrow_field(f) for f in fields])
    table = pa.Table.from_arrays(columns, schema=schema)
    memory = sum(c.nbytes for c in columns)
    metadata = {b"group_field_id_list": _group_field_id_list(groups).encode(),
                b"row_group_metadata": f"{memory}|{table.num_rows}|0".encode(), b"storage_version": b"1.0.0"}
    if kv is not None:
        metadata = kv
    out = io.BytesIO()
    with pq.ParquetWriter(out, schema, compression="zstd", compression_level=3, store_schema=False) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata(metadata)
    return out.getvalue()


@dataclass(frozen=True)
class WrittenGroup:
    """One group's file of a sync, as DataCoord lists it (``datapb.Binlog``)."""

    group_id: int
    field_ids: tuple[int, ...]
    log_id: int
    path: str
    rows: int
    size: int
    memory: int
    ts_from: int
    ts_to: int


def write_sync(root: Path, schema: schema_pb2.CollectionSchema, *, collection_id: int, partition_id: int,
               segment_id: int, values: dict[int, list], log_ids: Iterator[int]) -> list[WrittenGroup]:
    """A sync of ``values`` (field id -> a value a row, RowID 0 and Timestamp 1 included) written
    as ``BulkPackWriterV2`` writes it: a file a column group under ``root``."""
    fields = all_fields(schema)
    by_id = {f.fieldID: f for f in fields}
    groups = column_groups(fields)
    ts = values[1]
    out = []
    for g in groups:
        group_fields = [by_id[i] for i in g.field_ids]
        columns = [arrow_column(f, values[f.fieldID]) for f in group_fields]
        data = column_group_file(group_fields, columns, groups)
        log_id = next(log_ids)
        path = f"insert_log/{collection_id}/{partition_id}/{segment_id}/{g.group_id}/{log_id}"
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        out.append(WrittenGroup(group_id=g.group_id, field_ids=g.field_ids, log_id=log_id, path=path,
                                rows=len(ts), size=len(data), memory=sum(c.nbytes for c in columns),
                                ts_from=min(ts), ts_to=max(ts)))
    return out


def field_binlog_json(syncs: list[list[WrittenGroup]], group_id: int) -> dict:
    """The ``FieldBinlog`` of a group over ``syncs`` as DataCoord keeps it at
    ``binlog/{coll}/{part}/{seg}/{group}``, as protojson: ``log_path`` compressed away, the log id kept."""
    written = [w for sync in syncs for w in sync if w.group_id == group_id]
    return {"fieldID": str(group_id), "childFields": [str(f) for f in written[0].field_ids],
            "binlogs": [{"entriesNum": str(w.rows), "timestampFrom": str(w.ts_from), "timestampTo": str(w.ts_to),
                         "logSize": str(w.size), "logID": str(w.log_id), "memorySize": str(w.memory)}
                        for w in written]}


def wkb_point(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)
