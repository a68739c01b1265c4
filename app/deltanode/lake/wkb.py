"""A Geometry column's WKB as the WKT Milvus's query answers with (driver, pure logic).

Milvus 2.6 keeps a Geometry as WKB (its proxy turns the WKT a client sends into little-endian
WKB) and turns it back into WKT for a query; the lake keeps the WKB and the JSON writer
(``rows_json``) gives the WKT. Read here: both byte orders, the seven OGC types (Point to
GeometryCollection) in 2D, with Z, M or both, as ISO WKB numbers them (type + 1000, 2000, 3000)
or as PostGIS's EWKB flags them (high bits, an SRID after the type when flagged), and an empty
point written as NaN coordinates. Coordinates are written as Python's shortest repr of the
double, without a trailing ``.0``.
"""

from __future__ import annotations

import math
import struct

from ..failure.errors import BadInput

_NAMES = {1: "POINT", 2: "LINESTRING", 3: "POLYGON", 4: "MULTIPOINT", 5: "MULTILINESTRING", 6: "MULTIPOLYGON",
          7: "GEOMETRYCOLLECTION"}
_EWKB_Z, _EWKB_M, _EWKB_SRID = 0x80000000, 0x40000000, 0x20000000
_MAX_DEPTH = 32   # collections of collections: far more than any geometry Milvus takes


class NotWkb(BadInput):
    """The bytes are not a geometry in WKB."""


class _Reader:
    def __init__(self, raw: bytes) -> None:
        self.raw, self.pos = raw, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.raw):
            raise NotWkb(f"ends at byte {len(self.raw)}, {size} more expected at {self.pos}")
        values = struct.unpack_from(fmt, self.raw, self.pos)
        self.pos += size
        return values


def to_wkt(raw: bytes) -> str:
    """The WKT of one WKB geometry; ``NotWkb`` when ``raw`` is not one."""
    reader = _Reader(bytes(raw))
    text = _geometry(reader, 0)
    if reader.pos != len(reader.raw):
        raise NotWkb(f"{len(reader.raw) - reader.pos} bytes after the geometry")
    return text


def _geometry(r: _Reader, depth: int) -> str:
    if depth > _MAX_DEPTH:
        raise NotWkb("geometries nested too deep")
    (order,) = r.take("B")
    if order > 1:
        raise NotWkb(f"byte order mark {order}, not 0 or 1")
    e = "<" if order == 1 else ">"
    (code,) = r.take(e + "I")
    has_z, has_m = bool(code & _EWKB_Z), bool(code & _EWKB_M)
    if code & _EWKB_SRID:
        r.take(e + "i")
    code &= 0x0FFFFFFF
    kind, dims = code % 1000, code // 1000
    if kind not in _NAMES or dims > 3:
        raise NotWkb(f"geometry type {code}")
    has_z, has_m = has_z or dims in (1, 3), has_m or dims in (2, 3)
    width = 2 + has_z + has_m
    name = _NAMES[kind] + (" ZM" if has_z and has_m else " Z" if has_z else " M" if has_m else "")
    body = _body(r, e, kind, width, depth)
    return f"{name} {body}"


def _body(r: _Reader, e: str, kind: int, width: int, depth: int) -> str:
    if kind == 1:
        point = r.take(e + "d" * width)
        return "EMPTY" if all(math.isnan(c) for c in point) else f"({_coords(point)})"
    (count,) = r.take(e + "I")
    if count == 0:
        return "EMPTY"
    if kind == 2:
        return _points(r, e, width, count)
    if kind == 3:
        return "(" + ", ".join(_points(r, e, width, r.take(e + "I")[0]) for _ in range(count)) + ")"
    # Multi* and collections: each member a whole WKB geometry; a multi's members lose their name.
    members = [_geometry(r, depth + 1) for _ in range(count)]
    if kind == 7:
        return "(" + ", ".join(members) + ")"
    return "(" + ", ".join(m.split(" ", 1)[1].lstrip("ZM ") for m in members) + ")"


def _points(r: _Reader, e: str, width: int, count: int) -> str:
    if count == 0:
        return "EMPTY"
    if count * width * 8 > len(r.raw) - r.pos:
        raise NotWkb(f"{count} points announced, fewer bytes left")
    values = r.take(e + "d" * (width * count))
    return "(" + ", ".join(_coords(values[i:i + width]) for i in range(0, len(values), width)) + ")"


def _coords(values: tuple) -> str:
    return " ".join(_number(v) for v in values)


def _number(v: float) -> str:
    text = repr(v)
    return text[:-2] if text.endswith(".0") else text
