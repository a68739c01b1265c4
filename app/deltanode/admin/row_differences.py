"""How a mirror's rows differ from Milvus's: primary keys counted as multisets, and each field's
value brought to one form on both sides before it is compared.

Milvus's ``query`` (pymilvus ``MilvusClient``) and the Delta tables give the same value in
different shapes: a FloatVector as a list of floats on both sides, a BinaryVector as bytes (in
a one-element list from pymilvus), a sparse vector as a dict or as (index, value) pairs, a JSON
field parsed by pymilvus and as text in Delta, the dynamic field's keys flattened into the row by
pymilvus and as a JSON object in Delta's ``$meta``. ``milvus_values`` and ``delta_values`` map
each to one value per type, float32 values to their exact bytes, so that equal means bit for bit.

A field with a default value holds null in Delta only in the rows written before it was added to
the live collection (Milvus's proxy fills the default into every row sent after it, docs/
milvus-facts.md §15); Milvus's query answers the default there (§13), and so does
``delta_values`` with ``defaults`` (``default_values``).
"""

from __future__ import annotations

import enum
import json
import struct
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from ..wire.milvus_proto import schema_pb2
from ..wire.schema import CollectionLayout, DataType, FieldSpec

Key = int | str

_FLOAT32 = (DataType.Float, DataType.FloatVector)
_BYTE_VECTORS = (DataType.BinaryVector, DataType.Float16Vector, DataType.BFloat16Vector)


class DifferenceKind(enum.StrEnum):
    """How a key's rows differ. Made and read in the admin command's process."""

    MISSING_IN_DELTA = "missing_in_delta"        # Milvus has the key, Delta has fewer copies (none)
    EXTRA_IN_DELTA = "extra_in_delta"            # Delta has a key Milvus does not
    DUPLICATED_IN_DELTA = "duplicated_in_delta"  # Delta has more copies of the key than Milvus
    FIELD_DIFFERS = "field_differs"              # both have the key; a field's value differs


@dataclass(frozen=True, kw_only=True)
class KeyDifference:
    """One primary key whose rows differ between Milvus and Delta. Made and read in the admin
    command's process."""

    key: Key
    kind: DifferenceKind
    milvus_copies: int
    delta_copies: int
    fields: tuple[str, ...] = ()   # FIELD_DIFFERS: the fields whose values differ

    def to_json(self) -> dict:
        doc: dict = {"key": self.key, "kind": self.kind.value}
        if self.kind != DifferenceKind.FIELD_DIFFERS:
            doc.update(milvus_copies=self.milvus_copies, delta_copies=self.delta_copies)
        else:
            doc["fields"] = list(self.fields)
        return doc


def key_differences(milvus_keys: Iterable[Key], delta_keys: Iterable[Key]) -> list[KeyDifference]:
    """Every key whose number of rows differs between the two sides, in key order. Both are
    counted as multisets: a key Delta holds twice is a difference even when Milvus has it."""
    milvus, delta = Counter(milvus_keys), Counter(delta_keys)
    out = []
    for key in sorted(milvus.keys() | delta.keys()):
        m, d = milvus[key], delta[key]
        if m == d:
            continue
        kind = (DifferenceKind.EXTRA_IN_DELTA if m == 0 else
                DifferenceKind.DUPLICATED_IN_DELTA if d > m else DifferenceKind.MISSING_IN_DELTA)
        out.append(KeyDifference(key=key, kind=kind, milvus_copies=m, delta_copies=d))
    return out


def comparable(spec: FieldSpec, value: Any) -> object:
    """``value`` of field ``spec`` in the one form both sides are compared in (None stays None)."""
    if value is None:
        return None
    t = spec.data_type
    if t in _FLOAT32:
        return np.asarray(value, dtype=np.float32).tobytes()
    if t == DataType.Double:
        return struct.pack("<d", float(value))   # bit for bit: a NaN equals itself
    if t in _BYTE_VECTORS:
        return _vector_bytes(spec, value)
    if t == DataType.SparseFloatVector:
        pairs = value.items() if isinstance(value, Mapping) else value
        return tuple(sorted((int(i), np.float32(v).tobytes()) for i, v in pairs))
    if t == DataType.JSON:
        return value   # parsed: pymilvus parses it, ``delta_values`` parses Delta's text
    if t == DataType.Array:
        element = FieldSpec(0, spec.name, spec.element_type)
        return tuple(comparable(element, v) for v in value)
    if t == DataType.Bool:
        return bool(value)
    if t in (DataType.Int8, DataType.Int16, DataType.Int32, DataType.Int64):
        return int(value)
    return value


def _vector_bytes(spec: FieldSpec, value: Any) -> bytes:
    """A byte-encoded vector: pymilvus gives bytes, or a list holding them; a Float16Vector may
    also come as numbers."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (bytes, bytearray)):
        value = value[0]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, np.ndarray) and value.dtype != np.float64:
        return value.tobytes()
    if spec.data_type == DataType.Float16Vector:
        return np.asarray(value, dtype=np.float16).tobytes()
    return bytes(value)


def milvus_values(layout: CollectionLayout, row: Mapping[str, object]) -> dict[str, object]:
    """A row of Milvus's ``query`` (output ``*``), field by field; the dynamic field as the dict of
    the keys that are no field of the schema."""
    named = {f.name for f in layout.fields if not f.is_dynamic}
    out: dict[str, object] = {}
    for f in layout.fields:
        if f.is_dynamic:
            dynamic = {k: v for k, v in row.items() if k not in named and k != f.name}
            inner = row.get(f.name)
            if isinstance(inner, Mapping):
                dynamic = {**inner, **dynamic}
            out[f.name] = dynamic
        else:
            out[f.name] = comparable(f, row.get(f.name))
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def default_values(schema: schema_pb2.CollectionSchema) -> dict[str, object]:
    """The default value of each field of ``schema`` that has one, as Delta holds the type (a
    Timestamptz as a UTC datetime), by field name."""
    out: dict[str, object] = {}
    for f in schema.fields:
        which = f.default_value.WhichOneof("data") if f.HasField("default_value") else None
        if which is None:
            continue
        value = getattr(f.default_value, which)
        out[f.name] = _EPOCH + timedelta(microseconds=value) if which == "timestamptz_data" else value
    return out


def delta_values(layout: CollectionLayout, row: Mapping[str, object],
                 defaults: Mapping[str, object] | None = None) -> dict[str, object]:
    """A row of the insert table, field by field; the dynamic field (a JSON object, or null
    for none) as a dict; a null of a field in ``defaults`` as its default (``default_values``)."""
    out: dict[str, object] = {}
    for f in layout.fields:
        value = row.get(f.name)
        if value is None and defaults and f.name in defaults:
            value = defaults[f.name]
        if f.data_type == DataType.JSON and isinstance(value, (str, bytes)):
            value = json.loads(value)
        out[f.name] = ({} if value is None else value) if f.is_dynamic else comparable(f, value)
    return out


def differing_fields(milvus_row: Mapping[str, object], delta_row: Mapping[str, object]) -> tuple[str, ...]:
    """The fields whose values differ between two rows given by ``milvus_values`` and
    ``delta_values``, in schema order."""
    return tuple(name for name, value in milvus_row.items() if delta_row.get(name) != value)
