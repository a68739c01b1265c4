"""Collection schemas: Milvus-like JSON files, ``schema.CollectionSchema`` and the Delta/Arrow layout.

insert_log columns: one per user field, by name, then ``_ts``, ``_row_id``, ``_segment_id``,
``_partition_id`` (int64). delta_log columns: the primary key, ``_ts``, ``_partition_id``.
A user field's column ("since": the Milvus release that added the type; the others are older;
docs/milvus-facts.md §15 has each type's shape on the wire):

| Milvus type (since)       | Arrow                     | Delta                      | a row                         |
|---------------------------|---------------------------|----------------------------|-------------------------------|
| Bool                      | bool                      | boolean                    |                               |
| Int8, Int16, Int32, Int64 | int8, int16, int32, int64 | byte, short, integer, long |                               |
| Float, Double             | float32, float64          | float, double              |                               |
| VarChar, Text (2.6)       | string                    | string                     |                               |
| JSON                      | string                    | string                     | the JSON text as sent         |
| dynamic field (2.3)       | string                    | string                     | JSON text (1)                 |
| Timestamptz (2.6)         | timestamp[us, UTC]        | timestamp                  | the instant, in UTC (4)       |
| Geometry (2.6)            | binary                    | binary                     | WKB, little-endian (5)        |
| Array of E (2.3)          | list<E's type above>      | array<E's type above>      | E: a scalar type above (2)    |
| FloatVector               | list<float32>             | array<float>               | dim floats                    |
| Int8Vector (2.6)          | list<int8>                | array<byte>                | dim integers                  |
| BinaryVector              | binary                    | binary                     | dim / 8 bytes                 |
| Float16Vector             | binary                    | binary                     | dim x 2 bytes (IEEE half, LE) |
| BFloat16Vector (2.4)      | binary                    | binary                     | dim x 2 bytes (bfloat16, LE)  |
| SparseFloatVector (2.4)   | map<int64, float32>       | map<long, float>           | index -> value (3)            |
| struct array (2.6)        | list<struct<...>>         | array<struct<...>>         | its elements (6)              |

(1) The column is named as the field: ``$meta``, as Milvus names it. (2) Bool, Int8-Int64, Float,
Double or VarChar. (3) In the wire's order, indices increasing; they are uint32 on the wire and
Delta has no unsigned types. (4) Milvus keeps microseconds since the epoch, UTC. (5) As Milvus's
proxy turns the WKT a client sends into WKB (its query answers WKT). (6) A ``StructArrayFieldSchema``:
one struct per element, a member per sub-field, named as the sub-field without the ``struct[...]``
Milvus wraps its name in; a scalar sub-field's member is its element's type above, a vector
sub-field's (an ArrayOfVector) the vector's type above.

- Nullable fields (2.5; scalars, JSON, VarChar, Text, Timestamptz, Geometry, Array, struct
  arrays): a row is null where ``FieldData.valid_data`` says so. Every column is nullable in
  Arrow/Delta; only such fields ever hold a null.
- Default values (2.5): the proxy fills them in before it sends an insert, so what arrives is kept
  as is; ``schema_from_json`` stores them in ``FieldSchema.default_value`` for Milvus's sake.
- Partition key (2.3): a flag of one Int64 or VarChar field (``FieldSpec.is_partition_key``); the
  partition a row went to is its ``_partition_id``.
- Function outputs (2.5): the output of a BM25 function has no column. Milvus's proxy refuses an
  insert that carries it, its DataNode computes it when it persists a segment, and its query
  never returns it (``SchemaHelper.CanRetrieveRawFieldData``). Other functions' outputs come in
  the insert and are columns as any field.
- Refused with a ``SchemaError`` naming the field: types newer than Milvus 2.6 (Mol, Date, Time,
  Decimal...), an ArrayOfVector outside a struct array, Arrays whose element is not a scalar of
  note (2), nullable vectors, and a function output no function of the schema makes.
"""

from __future__ import annotations

import functools
import json
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

import pyarrow as pa

from ..failure.errors import BadInput
from .milvus_proto import schema_pb2

DataType = schema_pb2.DataType

SYSTEM_COLUMNS = ("_ts", "_row_id", "_segment_id", "_partition_id")
FIRST_USER_FIELD_ID = 100
DYNAMIC_FIELD = "$meta"       # the name Milvus gives the dynamic field
MAX_CAPACITY = 4096           # the largest Array max_capacity Milvus accepts


class SchemaError(BadInput):
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
    # A struct array (ArrayOfStruct): its sub-fields, each an Array (element_type a scalar) or
    # an ArrayOfVector (element_type a dense vector, with its dim), named without ``struct[...]``.
    sub_fields: tuple[FieldSpec, ...] = ()
    wire_name: str = ""            # a sub-field: the name Milvus gives its column (``struct[sub]``)

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
INT8_LIST = pa.list_(pa.field("element", pa.int8()))
SPARSE_MAP = pa.map_(pa.int64(), pa.float32())
TIMESTAMPTZ = pa.timestamp("us", tz="UTC")
_VECTOR_ARROW = {
    DataType.FloatVector: FLOAT_LIST,
    DataType.Int8Vector: INT8_LIST,
    DataType.BinaryVector: pa.binary(),
    DataType.Float16Vector: pa.binary(),
    DataType.BFloat16Vector: pa.binary(),
    DataType.SparseFloatVector: SPARSE_MAP,
}
_ARROW = {**_SCALAR_ARROW, DataType.JSON: pa.string(), DataType.Text: pa.string(), DataType.Timestamptz: TIMESTAMPTZ,
          DataType.Geometry: pa.binary(), **_VECTOR_ARROW}
# Arrays hold scalars only; the element Arrow type is the scalar's.
_ARRAY_ARROW = {t: pa.list_(pa.field("element", a)) for t, a in _SCALAR_ARROW.items()}
_DENSE_VECTORS = frozenset(_VECTOR_ARROW) - {DataType.SparseFloatVector}   # the ones with a dim
VECTORS = frozenset(_VECTOR_ARROW)
SUPPORTED = frozenset(_ARROW) | {DataType.Array, DataType.ArrayOfStruct}
# The member of ScalarField (an Array row is one) and of ValueField (a default value) holding
# each scalar type's values.
VALUE_SLOTS = {DataType.Bool: "bool_data", DataType.Int8: "int_data", DataType.Int16: "int_data",
               DataType.Int32: "int_data", DataType.Int64: "long_data", DataType.Float: "float_data",
               DataType.Double: "double_data", DataType.VarChar: "string_data"}
# Field types of later Milvus releases, with where they came from (milvus-proto schema.proto).
_LATER = {name: "a milvus-proto newer than Milvus 2.6" for name in ("Mol", "Date", "Time", "Decimal")}
# What a struct array's sub-field may be: Milvus's proxy flattens a struct array into one column
# of each (an Array of scalars, or an ArrayOfVector of dense vectors).
_SUB_FIELD_TYPES = frozenset({DataType.Array, DataType.ArrayOfVector})
_INT_BITS = {DataType.Int8: 8, DataType.Int16: 16, DataType.Int32: 32, DataType.Int64: 64}


def arrow_type(field: FieldSpec) -> pa.DataType:
    t = field.data_type
    if t == DataType.Array:
        return _ARRAY_ARROW[field.element_type]
    if t == DataType.ArrayOfVector:
        return pa.list_(pa.field("element", _VECTOR_ARROW[field.element_type]))
    if t == DataType.ArrayOfStruct:
        return pa.list_(pa.field("element", pa.struct([pa.field(sub.name, arrow_type(sub).value_type)
                                                       for sub in field.sub_fields])))
    return _ARROW[t]


def _unsupported(what: str, data_type: int) -> str:
    name = type_name(data_type)
    since = _LATER.get(name)
    if since:
        return f"{what} {name} is not supported: it came with {since}; DeltaNode handles the types of Milvus 2.3-2.6"
    return f"{what} {name} is not supported"


def _check_field(f: FieldSpec) -> None:
    """One field's type and flags, as Milvus 2.5 would accept them."""
    where = f"field {f.name!r}"
    if f.data_type == DataType.ArrayOfVector:
        raise SchemaError(f"{where}: an ArrayOfVector is a sub-field of a struct array in Milvus 2.6, not a field "
                          "of its own")
    if f.data_type not in SUPPORTED:
        raise SchemaError(f"{where}: {_unsupported('data type', f.data_type)}")
    if f.name.startswith("_"):
        raise SchemaError(f"{where}: names starting with '_' are reserved")
    if f.data_type == DataType.ArrayOfStruct:
        _check_struct(f, where)
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


def _check_struct(f: FieldSpec, where: str) -> None:
    """A struct array's sub-fields: Arrays of scalars and ArrayOfVectors of dense vectors."""
    if not f.sub_fields:
        raise SchemaError(f"{where}: a struct array without sub-fields (struct arrays come with a Milvus's meta, "
                          "root-coord/struct-array-fields/; a schema file cannot describe one)")
    if f.is_primary_key or f.is_partition_key or f.is_dynamic:
        raise SchemaError(f"{where}: a struct array cannot be a primary key, partition key or dynamic field")
    names = [sub.name for sub in f.sub_fields]
    if len(set(names)) != len(names):
        raise SchemaError(f"{where}: duplicate sub-field names in {names}")
    for sub in f.sub_fields:
        at = f"{where}, sub-field {sub.name!r}"
        if sub.data_type not in _SUB_FIELD_TYPES:
            raise SchemaError(f"{at}: {sub.type_name}; a struct array's sub-fields are Arrays and ArrayOfVectors")
        if sub.data_type == DataType.Array and sub.element_type not in _SCALAR_ARROW:
            raise SchemaError(f"{at}: {_unsupported('an Array of', sub.element_type)}")
        if sub.data_type == DataType.ArrayOfVector:
            if sub.element_type not in _DENSE_VECTORS:
                raise SchemaError(f"{at}: {_unsupported('an ArrayOfVector of', sub.element_type)} (Milvus's vectors "
                                  "in a struct are dense)")
            if sub.dim <= 0 or (sub.element_type == DataType.BinaryVector and sub.dim % 8):
                raise SchemaError(f"{at}: an ArrayOfVector of {sub.element_type_name} needs a positive 'dim'"
                                  + (" that is a multiple of 8" if sub.element_type == DataType.BinaryVector else ""))


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
        """The columns of ``schema``: its fields (system fields and BM25 outputs left out), then
        its struct arrays."""
        left_out = _bm25_outputs(schema)
        fields = []
        for f in schema.fields:
            if f.fieldID < FIRST_USER_FIELD_ID or (f.fieldID, f.name) in left_out:
                continue  # RowID/Timestamp system fields live in _row_id/_ts
            fields.append(_spec(f))
        for struct in schema.struct_array_fields:
            fields.append(_struct_spec(struct))
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


def _params(f) -> dict[str, str]:
    return {p.key: p.value for p in f.type_params}


def _spec(f: schema_pb2.FieldSchema, *, name: str = "", wire_name: str = "", nullable: bool | None = None,
          inherited: dict[str, str] | None = None) -> FieldSpec:
    params = (inherited or {}) | _params(f)
    return FieldSpec(
        f.fieldID, name or f.name, f.data_type, int(params.get("dim", 0) or 0), f.is_primary_key,
        int(params.get("max_length", 0) or 0), element_type=f.element_type,
        max_capacity=int(params.get("max_capacity", 0) or 0), nullable=f.nullable if nullable is None else nullable,
        is_partition_key=f.is_partition_key, is_dynamic=f.is_dynamic, wire_name=wire_name)


def _struct_spec(struct: schema_pb2.StructArrayFieldSchema) -> FieldSpec:
    """A struct array and its sub-fields. Milvus 2.6 names a sub-field ``struct[sub]`` in its
    schema and on the wire; its member in the struct is ``sub``. A sub-field takes the struct's
    ``max_capacity`` when it has none, and the struct's nullability (a row's struct is null or
    not as a whole)."""
    nullable = struct.nullable if "nullable" in struct.DESCRIPTOR.fields_by_name else False
    inherited = _params(struct)
    subs = []
    for f in struct.fields:
        prefix = f"{struct.name}["
        raw = f.name[len(prefix):-1] if f.name.startswith(prefix) and f.name.endswith("]") else f.name
        subs.append(_spec(f, name=raw, wire_name=f"{struct.name}[{raw}]", nullable=nullable, inherited=inherited))
    return FieldSpec(struct.fieldID, struct.name, DataType.ArrayOfStruct, nullable=nullable,
                     max_capacity=int(inherited.get("max_capacity", 0) or 0), sub_fields=tuple(subs))


def _bm25_outputs(schema: schema_pb2.CollectionSchema) -> set[tuple[int, str]]:
    """(id, name) of the fields BM25 functions output; a field marked as a function's output that
    no function of the schema makes is refused (the meta read is incomplete)."""
    made, bm25 = set(), set()
    for fn in schema.functions:
        outputs = set(fn.output_field_ids) | set(fn.output_field_names)
        made |= outputs
        if fn.type == schema_pb2.FunctionType.BM25:
            bm25 |= outputs
    out = set()
    for f in schema.fields:
        if not f.is_function_output:
            continue
        if f.fieldID not in made and f.name not in made:
            raise SchemaError(f"field {f.name!r} is a function's output, but no function of the schema makes it "
                              f"(functions: {[fn.name for fn in schema.functions]})")
        if f.fieldID in bm25 or f.name in bm25:
            out.add((f.fieldID, f.name))
    return out


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
