"""Collection schemas: Milvus-like JSON files, ``schema.CollectionSchema`` and the Delta/Arrow layout.

insert_log columns: one per user field, by name (FloatVector -> list<float>; BinaryVector and
Float16Vector -> binary; JSON and VarChar -> string), then ``_ts``, ``_row_id``, ``_segment_id``,
``_partition_id``. delta_log columns: the primary key, ``_ts``, ``_partition_id``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from .milvus_proto import schema_pb2

DataType = schema_pb2.DataType

SYSTEM_COLUMNS = ("_ts", "_row_id", "_segment_id", "_partition_id")
FIRST_USER_FIELD_ID = 100


class SchemaError(ValueError):
    """A schema file or message that does not describe a supported collection."""


@dataclass(frozen=True)
class FieldSpec:
    field_id: int
    name: str
    data_type: int
    dim: int = 0
    is_primary_key: bool = False
    max_length: int = 0

    @property
    def type_name(self) -> str:
        return DataType.Name(self.data_type)


_SCALAR_ARROW = {
    DataType.Bool: pa.bool_(),
    DataType.Int8: pa.int8(),
    DataType.Int16: pa.int16(),
    DataType.Int32: pa.int32(),
    DataType.Int64: pa.int64(),
    DataType.Float: pa.float32(),
    DataType.Double: pa.float64(),
    DataType.VarChar: pa.string(),
    DataType.JSON: pa.string(),
}
_VECTORS = {DataType.FloatVector, DataType.BinaryVector, DataType.Float16Vector}
SUPPORTED = set(_SCALAR_ARROW) | _VECTORS
FLOAT_LIST = pa.list_(pa.field("element", pa.float32()))


def arrow_type(field: FieldSpec) -> pa.DataType:
    if field.data_type == DataType.FloatVector:
        return FLOAT_LIST
    if field.data_type in (DataType.BinaryVector, DataType.Float16Vector):
        return pa.binary()
    return _SCALAR_ARROW[field.data_type]


@dataclass(frozen=True)
class CollectionLayout:
    """A collection's user fields and the Arrow schemas of its Delta tables.

    The schemas are built once per layout: a task routes hundreds of vchannels, each of
    which asks for them.
    """

    fields: tuple[FieldSpec, ...]

    @functools.cached_property
    def primary_key(self) -> FieldSpec:
        return next(f for f in self.fields if f.is_primary_key)

    @functools.cached_property
    def _insert_schema(self) -> pa.Schema:
        cols = [pa.field(f.name, arrow_type(f)) for f in self.fields]
        cols += [pa.field(name, pa.int64()) for name in SYSTEM_COLUMNS]
        return pa.schema(cols)

    @functools.cached_property
    def _delete_schema(self) -> pa.Schema:
        pk = self.primary_key
        return pa.schema([pa.field(pk.name, arrow_type(pk)), pa.field("_ts", pa.int64()),
                          pa.field("_partition_id", pa.int64())])

    def insert_schema(self) -> pa.Schema:
        return self._insert_schema

    def delete_schema(self) -> pa.Schema:
        return self._delete_schema

    @classmethod
    def from_proto(cls, schema: schema_pb2.CollectionSchema) -> "CollectionLayout":
        fields = []
        for f in schema.fields:
            if f.fieldID < FIRST_USER_FIELD_ID or f.is_dynamic:
                continue  # RowID/Timestamp system fields live in _row_id/_ts
            params = {p.key: p.value for p in f.type_params}
            fields.append(FieldSpec(f.fieldID, f.name, f.data_type, int(params.get("dim", 0) or 0),
                                    f.is_primary_key, int(params.get("max_length", 0) or 0)))
        layout = cls(tuple(fields))
        layout.validate()
        return layout

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def from_bytes(raw: bytes) -> "CollectionLayout":
        """The layout of a serialized CollectionSchema, made once per process (executors get
        every collection's schema with every task)."""
        return CollectionLayout.from_proto(schema_pb2.CollectionSchema.FromString(raw))

    def validate(self) -> None:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise SchemaError(f"duplicate field names in {names}")
        for f in self.fields:
            if f.data_type not in SUPPORTED:
                raise SchemaError(f"field {f.name!r}: data type {f.type_name} is not supported")
            if f.name.startswith("_"):
                raise SchemaError(f"field {f.name!r}: names starting with '_' are reserved")
            if f.data_type in _VECTORS and f.dim <= 0:
                raise SchemaError(f"field {f.name!r}: a {f.type_name} needs a positive 'dim'")
            if f.data_type == DataType.BinaryVector and f.dim % 8:
                raise SchemaError(f"field {f.name!r}: a BinaryVector dim must be a multiple of 8")
        pks = [f for f in self.fields if f.is_primary_key]
        if len(pks) != 1 or pks[0].data_type not in (DataType.Int64, DataType.VarChar):
            raise SchemaError("a collection needs exactly one primary key field, Int64 or VarChar")


def schema_from_json(doc: dict, collection_name: str) -> schema_pb2.CollectionSchema:
    """Build a CollectionSchema from the Milvus-like JSON of ``admin create-collection``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("fields"), list) or not doc["fields"]:
        raise SchemaError('the schema must be an object with a non-empty "fields" list')
    schema = schema_pb2.CollectionSchema(name=collection_name, description=str(doc.get("description", "")))
    for i, f in enumerate(doc["fields"]):
        where = f"fields[{i}]"
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise SchemaError(f'{where}: each field needs a "name"')
        type_name = f.get("data_type")
        if type_name not in DataType.keys():
            raise SchemaError(f"{where} ({f['name']}): unknown data_type {type_name!r}")
        fs = schema.fields.add(fieldID=FIRST_USER_FIELD_ID + i, name=f["name"],
                               data_type=DataType.Value(type_name),
                               is_primary_key=bool(f.get("is_primary_key", False)),
                               autoID=bool(f.get("auto_id", False)))
        for key in ("dim", "max_length"):
            if key in f:
                if not isinstance(f[key], int) or f[key] <= 0:
                    raise SchemaError(f"{where} ({f['name']}): {key} must be a positive integer")
                fs.type_params.add(key=key, value=str(f[key]))
    CollectionLayout.from_proto(schema)  # validates
    return schema


def load_schema_file(path: str | Path, collection_name: str) -> schema_pb2.CollectionSchema:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SchemaError(f"{path}: cannot read the schema: {e}") from None
    try:
        return schema_from_json(doc, collection_name)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from None
