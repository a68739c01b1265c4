"""Result rows as JSON lines, values as Milvus's query gives them (driver).

A column whose comment names its Milvus type (``columns``) is decoded as Milvus's clients decode
it: a FloatVector is an array of floats, a Float16Vector or BFloat16Vector (stored as 2 bytes a
dimension, little endian) an array of the floats they hold, a BinaryVector (dim / 8 bytes, 8
dimensions a byte, the first in the high bit) an array of its bytes as numbers 0-255, a
SparseFloatVector an object from index to value, a JSON field or the dynamic field ``$meta``
the JSON document it holds, a Geometry (stored as WKB) its WKT (``wkb``), a Timestamptz its
instant in RFC 3339 with the UTC offset; a struct array's structs hold their vectors as those
columns do (the column's comment names each sub-field's type). Any other column is written as Spark's ``to_json``
writes it, except that bytes are base64 text and decimals numbers. NaN and infinities, which
JSON lacks, are null.
"""

from __future__ import annotations

import base64
import datetime
import decimal
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from ..failure.errors import BadInput
from .columns import member_types, milvus_type
from .wkb import NotWkb, to_wkt

Convert = Callable[[Any], Any]
_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


class DuplicateColumn(BadInput):
    """Two result columns have one name: a JSON object cannot hold both."""


def _float16(raw: bytes) -> list[float]:
    return np.frombuffer(raw, "<f2").astype(np.float64).tolist()


def _bfloat16(raw: bytes) -> list[float]:
    # A bfloat16 is the high half of a float32.
    return (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4").astype(np.float64).tolist()


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:   # stored as Milvus received it: not JSON is kept as text
        return text


def _wkt(raw: bytes) -> str:
    try:
        return to_wkt(raw)
    except NotWkb:   # kept as stored, as any bytes are
        return base64.b64encode(raw).decode()


def _instant(value: datetime.datetime) -> str:
    """Spark hands a timestamp over as a naive datetime in the local time zone of the Python
    process; ``astimezone`` reads a naive one so."""
    return value.astimezone(datetime.UTC).isoformat()


_BY_MILVUS_TYPE: dict[tuple[str, str], Convert] = {
    ("BinaryVector", "binary"): list,
    ("Float16Vector", "binary"): _float16,
    ("BFloat16Vector", "binary"): _bfloat16,
    ("JSON", "string"): _json,
    ("Geometry", "binary"): _wkt,
    ("Timestamptz", "timestamp"): _instant,
}


def _nullable(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


def converter(data_type, metadata: dict) -> Convert | None:
    """How a value of a column of Spark type ``data_type`` becomes JSON; None: as it comes."""
    by_type = _BY_MILVUS_TYPE.get((milvus_type(metadata) or "", data_type.typeName()))
    if by_type is not None:
        return _nullable(by_type)
    members = member_types(metadata)
    if members and data_type.typeName() == "array" and data_type.elementType.typeName() == "struct":
        return _structs(data_type.elementType, members)
    return _generic(data_type)


def _structs(struct_type, members: dict[str, str]) -> Convert:
    """A struct array's rows: each member by its sub-field's Milvus type (``members``), as a
    column of that type is written."""
    fields: list[tuple[str, Convert | None]] = []
    for f in struct_type.fields:
        by_type = _BY_MILVUS_TYPE.get((members.get(f.name, ""), f.dataType.typeName()))
        fields.append((f.name, _nullable(by_type) if by_type is not None else _generic(f.dataType)))
    struct = _nullable(lambda row: {n: (c(x) if c else x) for (n, c), x in zip(fields, row)})
    return _nullable(lambda v: [struct(s) for s in v])


def _generic(data_type) -> Convert | None:
    name = data_type.typeName()
    if name == "binary":
        return _nullable(lambda v: base64.b64encode(v).decode())
    if name == "decimal":
        return _nullable(lambda v: int(v) if v == v.to_integral_value() else float(v))
    if name == "array":
        element = _generic(data_type.elementType)
        return None if element is None else _nullable(lambda v: [element(x) for x in v])
    if name == "map":
        key, value = _generic(data_type.keyType), _generic(data_type.valueType)
        if key is None and value is None:
            return None
        k, val = key or (lambda x: x), value or (lambda x: x)
        return _nullable(lambda v: {k(a): val(b) for a, b in v.items()})
    if name == "struct":
        fields = [(f.name, converter(f.dataType, f.metadata)) for f in data_type.fields]
        return _nullable(lambda row: {n: (c(x) if c else x) for (n, c), x in zip(fields, row)})
    return None


class RowRenderer:
    """One result row of a query as a line of JSON, by the result's schema (runs on the driver)."""

    def __init__(self, schema) -> None:
        names = [f.name for f in schema.fields]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise DuplicateColumn(f"the result has more than one column named {', '.join(twice)}: "
                                  "give each its own name (AS)")
        self.names = names
        self._convert = [converter(f.dataType, f.metadata) for f in schema.fields]

    def render(self, row) -> bytes:
        doc = {n: (c(v) if c else v) for n, c, v in zip(self.names, self._convert, row)}
        return orjson.dumps(doc, default=_default, option=_OPTIONS)


def _default(value: Any) -> Any:
    """What orjson does not write itself: bytearrays in columns of no Milvus type, decimals."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"no JSON for {type(value).__name__}")
