"""Collection schemas: Milvus-like JSON files, ``schema.CollectionSchema`` and the Delta/Arrow layout.

insert_log columns: one per user field, by name, then ``_ts``, ``_row_id``, ``_segment_id``,
``_partition_id`` (int64). delta_log columns: the primary key, ``_ts``, ``_partition_id``.
A user field's column ("since": the Milvus release that added the type; the others are older):

| Milvus type (since)       | Arrow                     | Delta                      | a row                         |
|---------------------------|---------------------------|----------------------------|-------------------------------|
| Bool                      | bool                      | boolean                    |                               |
| Int8, Int16, Int32, Int64 | int8, int16, int32, int64 | byte, short, integer, long |                               |
| Float, Double             | float32, float64          | float, double              |                               |
| VarChar                   | string                    | string                     |                               |
| JSON                      | string                    | string                     | the JSON text as sent         |
| dynamic field (2.3)       | string                    | string                     | JSON text (1)                 |
| Array of E (2.3)          | list<E's type above>      | array<E's type above>      | E: a scalar type above (2)    |
| FloatVector               | list<float32>             | array<float>               | dim floats                    |
| BinaryVector              | binary                    | binary                     | dim / 8 bytes                 |
| Float16Vector             | binary                    | binary                     | dim x 2 bytes (IEEE half, LE) |
| BFloat16Vector (2.4)      | binary                    | binary                     | dim x 2 bytes (bfloat16, LE)  |
| SparseFloatVector (2.4)   | map<int64, float32>       | map<long, float>           | index -> value (3)            |

(1) The column is named as the field: ``$meta``, as Milvus names it. (2) Bool, Int8-Int64, Float,
Double or VarChar. (3) In the wire's order, indices increasing; they are uint32 on the wire and
Delta has no unsigned types.

- Nullable fields (2.5; scalars, JSON, VarChar, Array): a row is null where ``FieldData.valid_data``
  says so. Every column is nullable in Arrow/Delta; only such fields ever hold a null.
- Default values (2.5): the proxy fills them in before it sends an insert, so what arrives is kept
  as is; ``schema_from_json`` stores them in ``FieldSchema.default_value`` for Milvus's sake.
- Partition key (2.3): a flag of one Int64 or VarChar field (``FieldSpec.is_partition_key``); the
  partition a row went to is its ``_partition_id``.
- Refused with a ``SchemaError`` naming the field: the types of Milvus 2.6 (Int8Vector, Text,
  Geometry, Timestamptz, struct arrays, arrays of vectors) and newer, and Arrays whose element is
  an Array, JSON or a vector.
"""

from __future__ import annotations

import functools
import json
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

import pyarrow as pa

from .milvus_proto import schema_pb2

DataType = schema_pb2.DataType

SYSTEM_COLUMNS = ("_ts", "_row_id", "_segment_id", "_partition_id")
FIRST_USER_FIELD_ID = 100
DYNAMIC_FIELD = "$meta"       # the name Milvus gives the dynamic field
MAX_CAPACITY = 4096           # the largest Array max_capacity Milvus accepts


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
    _: KW_ONLY
    element_type: int = 0          # Array: the DataType of its elements
    max_capacity: int = 0          # Array: most elements a row holds (0: unchecked)
    nullable: bool = False
    is_partition_key: bool = False
    is_dynamic: bool = False

    @property
    def type_name(self) -> str:
        return type_name(self.data_type)

    @property
    def element_type_name(self) -> str:
        return type_name(self.element_type)


def type_name(data_type: int) -> str:
    """The DataType's name, or its number when this milvus-proto does not know it."""
    return DataType.Name(data_type) if data_type in DataType.values() else str(data_type)


_SCALAR_ARROW = {
    DataType.Bool: pa.bool_(),
    DataType.Int8: pa.int8(),
    DataType.Int16: pa.int16(),
    DataType.Int32: pa.int32(),
    DataType.Int64: pa.int64(),
    DataType.Float: pa.float32(),
    DataType.Double: pa.float64(),
    DataType.VarChar: pa.string(),
}
FLOAT_LIST = pa.list_(pa.field("element", pa.float32()))
SPARSE_MAP = pa.map_(pa.int64(), pa.float32())
_VECTOR_ARROW = {
    DataType.FloatVector: FLOAT_LIST,
    DataType.BinaryVector: pa.binary(),
    DataType.Float16Vector: pa.binary(),
    DataType.BFloat16Vector: pa.binary(),
    DataType.SparseFloatVector: SPARSE_MAP,
}
_ARROW = {**_SCALAR_ARROW, DataType.JSON: pa.string(), **_VECTOR_ARROW}
# Arrays hold scalars only; the element Arrow type is the scalar's.
_ARRAY_ARROW = {t: pa.list_(pa.field("element", a)) for t, a in _SCALAR_ARROW.items()}
_DENSE_VECTORS = frozenset(_VECTOR_ARROW) - {DataType.SparseFloatVector}   # the ones with a dim
VECTORS = frozenset(_VECTOR_ARROW)
SUPPORTED = frozenset(_ARROW) | {DataType.Array}
# The member of ScalarField (an Array row is one) and of ValueField (a default value) holding
# each scalar type's values.
VALUE_SLOTS = {DataType.Bool: "bool_data", DataType.Int8: "int_data", DataType.Int16: "int_data",
               DataType.Int32: "int_data", DataType.Int64: "long_data", DataType.Float: "float_data",
               DataType.Double: "double_data", DataType.VarChar: "string_data"}
# Field types of later Milvus releases, with where they came from (milvus-proto schema.proto).
_LATER = {name: "Milvus 2.6" for name in ("Int8Vector", "Text", "Geometry", "Timestamptz", "ArrayOfVector",
                                          "ArrayOfStruct", "Struct")}
_LATER |= {name: "a milvus-proto newer than Milvus 2.6" for name in ("Mol", "Date", "Time", "Decimal")}
_INT_BITS = {DataType.Int8: 8, DataType.Int16: 16, DataType.Int32: 32, DataType.Int64: 64}


def arrow_type(field: FieldSpec) -> pa.DataType:
    if field.data_type == DataType.Array:
        return _ARRAY_ARROW[field.element_type]
    return _ARROW[field.data_type]


def _unsupported(what: str, data_type: int) -> str:
    name = type_name(data_type)
    since = _LATER.get(name)
    if since:
        return f"{what} {name} is not supported: it came with {since}; DeltaNode handles the types of Milvus 2.3-2.5"
    return f"{what} {name} is not supported"


def _check_field(f: FieldSpec) -> None:
    """One field's type and flags, as Milvus 2.5 would accept them."""
    where = f"field {f.name!r}"
    if f.data_type not in SUPPORTED:
        raise SchemaError(f"{where}: {_unsupported('data type', f.data_type)}")
    if f.name.startswith("_"):
        raise SchemaError(f"{where}: names starting with '_' are reserved")
    if f.data_type in _DENSE_VECTORS and f.dim <= 0:
        raise SchemaError(f"{where}: a {f.type_name} needs a positive 'dim'")
    if f.data_type == DataType.BinaryVector and f.dim % 8:
        raise SchemaError(f"{where}: a BinaryVector dim must be a multiple of 8")
    if f.data_type == DataType.Array and f.element_type not in _SCALAR_ARROW:
        raise SchemaError(f"{where}: {_unsupported('an Array of', f.element_type)} (Milvus arrays hold Bool, "
                          "Int8-Int64, Float, Double or VarChar)")
    if f.nullable and (f.is_primary_key or f.data_type in VECTORS or f.is_partition_key):
        raise SchemaError(f"{where}: a primary key, partition key or vector field cannot be nullable")
    if f.is_partition_key and (f.is_primary_key or f.data_type not in (DataType.Int64, DataType.VarChar)):
        raise SchemaError(f"{where}: a partition key must be an Int64 or VarChar field other than the primary key")
    if f.is_dynamic and f.data_type != DataType.JSON:
        raise SchemaError(f"{where}: the dynamic field must be JSON, not {f.type_name}")


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
            if f.fieldID < FIRST_USER_FIELD_ID:
                continue  # RowID/Timestamp system fields live in _row_id/_ts
            params = {p.key: p.value for p in f.type_params}
            fields.append(FieldSpec(
                f.fieldID, f.name, f.data_type, int(params.get("dim", 0) or 0), f.is_primary_key,
                int(params.get("max_length", 0) or 0), element_type=f.element_type,
                max_capacity=int(params.get("max_capacity", 0) or 0), nullable=f.nullable,
                is_partition_key=f.is_partition_key, is_dynamic=f.is_dynamic))
        layout = cls(tuple(fields))
        layout.validate()
        return layout

    @staticmethod
    @functools.lru_cache(maxsize=1 << 15)
    def from_bytes(raw: bytes) -> "CollectionLayout":
        """The layout of a serialized CollectionSchema, made once per process (executors get
        every collection's schema with every task). The cache holds more collections than a
        node does: a task asks for them in the same order every cycle, which an LRU smaller than
        that set misses every time."""
        return CollectionLayout.from_proto(schema_pb2.CollectionSchema.FromString(raw))

    def validate(self) -> None:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise SchemaError(f"duplicate field names in {names}")
        for f in self.fields:
            _check_field(f)
        pks = [f for f in self.fields if f.is_primary_key]
        if len(pks) != 1 or pks[0].data_type not in (DataType.Int64, DataType.VarChar):
            raise SchemaError("a collection needs exactly one primary key field, Int64 or VarChar")
        for flag in ("is_partition_key", "is_dynamic"):
            flagged = [f.name for f in self.fields if getattr(f, flag)]
            if len(flagged) > 1:
                raise SchemaError(f"a collection has at most one field with {flag}: {flagged}")


def schema_from_json(doc: dict, collection_name: str) -> schema_pb2.CollectionSchema:
    """Build a CollectionSchema from the Milvus-like JSON of ``admin create-collection``.

    A field: ``name``, ``data_type`` (a DataType name), and as its type needs ``dim``,
    ``max_length``, ``element_type`` and ``max_capacity`` (Array), ``is_primary_key``,
    ``auto_id``, ``nullable``, ``default_value`` (scalar types), ``is_partition_key``. A top-level
    ``"enable_dynamic_field": true`` adds the dynamic JSON field ``$meta`` after the user fields,
    as Milvus does.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("fields"), list) or not doc["fields"]:
        raise SchemaError('the schema must be an object with a non-empty "fields" list')
    dynamic = _flag(doc, "enable_dynamic_field", "the schema")
    schema = schema_pb2.CollectionSchema(name=collection_name, description=str(doc.get("description", "")),
                                         enable_dynamic_field=dynamic)
    for i, f in enumerate(doc["fields"]):
        _add_field(schema, FIRST_USER_FIELD_ID + i, f, f"fields[{i}]")
    if dynamic:
        schema.fields.add(fieldID=FIRST_USER_FIELD_ID + len(doc["fields"]), name=DYNAMIC_FIELD,
                          data_type=DataType.JSON, is_dynamic=True, description="dynamic schema")
    CollectionLayout.from_proto(schema)  # validates
    return schema


def _flag(obj: dict, key: str, where: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise SchemaError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _data_type(f: dict, key: str, where: str) -> int:
    name = f.get(key)
    if name not in DataType.keys():
        raise SchemaError(f"{where}: unknown {key} {name!r}")
    return DataType.Value(name)


def _add_field(schema: schema_pb2.CollectionSchema, field_id: int, f: dict, where: str) -> None:
    if not isinstance(f, dict) or not isinstance(f.get("name"), str):
        raise SchemaError(f'{where}: each field needs a "name"')
    where = f"{where} ({f['name']})"
    data_type = _data_type(f, "data_type", where)
    fs = schema.fields.add(fieldID=field_id, name=f["name"], data_type=data_type,
                           is_primary_key=_flag(f, "is_primary_key", where), autoID=_flag(f, "auto_id", where),
                           nullable=_flag(f, "nullable", where),
                           is_partition_key=_flag(f, "is_partition_key", where))
    _set_element_type(fs, f, where)
    _set_type_params(fs, f, where)
    if "default_value" in f:
        _set_default(fs, f["default_value"], f.get("max_length"), where)


def _set_element_type(fs: schema_pb2.FieldSchema, f: dict, where: str) -> None:
    """An Array's ``element_type``; an Array needs one, and a ``max_capacity`` (as Milvus does)."""
    is_array = fs.data_type == DataType.Array
    if is_array != ("element_type" in f):
        raise SchemaError(f"{where}: an Array field needs an element_type, and only an Array field has one")
    if is_array != ("max_capacity" in f):
        raise SchemaError(f"{where}: an Array field needs a max_capacity (1-{MAX_CAPACITY}), and only an Array "
                          "field has one")
    if is_array:
        fs.element_type = _data_type(f, "element_type", where)


def _set_type_params(fs: schema_pb2.FieldSchema, f: dict, where: str) -> None:
    for key in ("dim", "max_length", "max_capacity"):
        if key in f:
            value = f[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SchemaError(f"{where}: {key} must be a positive integer")
            if key == "max_capacity" and value > MAX_CAPACITY:
                raise SchemaError(f"{where}: max_capacity must be at most {MAX_CAPACITY}")
            fs.type_params.add(key=key, value=str(value))


def _set_default(fs: schema_pb2.FieldSchema, value, max_length: int | None, where: str) -> None:
    """``FieldSchema.default_value`` of a scalar field, checked against its type."""
    t = fs.data_type
    slot = VALUE_SLOTS.get(t)
    if slot is None or fs.is_primary_key:
        raise SchemaError(f"{where}: a default_value is only for scalar fields other than the primary key")
    if t == DataType.Bool:
        ok = isinstance(value, bool)
    elif t in _INT_BITS:
        bits = _INT_BITS[t]
        ok = isinstance(value, int) and not isinstance(value, bool) and -(1 << bits - 1) <= value < 1 << bits - 1
    elif t in (DataType.Float, DataType.Double):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str) and (max_length is None or len(value) <= max_length)
    if not ok:
        raise SchemaError(f"{where}: default_value {value!r} does not fit a {DataType.Name(t)}"
                          + (f" of max_length {max_length}" if t == DataType.VarChar and max_length else ""))
    setattr(fs.default_value, slot, value)


def load_schema_file(path: str | Path, collection_name: str) -> schema_pb2.CollectionSchema:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SchemaError(f"{path}: cannot read the schema: {e}") from None
    try:
        return schema_from_json(doc, collection_name)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from None
