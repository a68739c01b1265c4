"""Milvus's binlog files (insert binlogs and deltalogs, Milvus 2.3-2.5) -> their payload values.

A binlog is an int32 magic number, a descriptor event naming the collection, partition, segment,
field and the payload's DataType, then one or more insert (type 1) or delete (type 2) events,
each a header, two timestamps and a complete Parquet file. The payload is one column (named
``val``, or by the field id or ``delta`` as Milvus's stream writers name it); a deltalog in the
"parquet" format (extras ``version: MULTI_FIELD``) has two, ``pk`` and ``ts``, read here as one
struct column. A nullable field's binlog (extras ``nullable: true``, Milvus 2.5+) holds its nulls
as the column's own Parquet nulls, returned as nulls. Events are followed by their event length,
as Milvus's reader does: its stream writers leave the next position at -1. The layout is in
docs/milvus-facts.md section 10.

Runs on executors: imports pyarrow only, no client library.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq

from ..failure.errors import BadInput

MAGIC = 0xFFFABC
DESCRIPTOR_EVENT, INSERT_EVENT, DELETE_EVENT = 0, 1, 2
MULTI_FIELD = "MULTI_FIELD"      # extras["version"] of a deltalog with pk and ts columns
# Every event header: timestamp u64, type code i8, event length i32, next position i32.
_HEADER = struct.Struct("<Qbii")
_HEADER_SIZE = _HEADER.size                      # 17
# The descriptor's fixed part: collection, partition, segment, field ids (i64), start and end
# timestamps (u64), the payload DataType (i32); then one post-header length byte per event type
# (8 types, descriptor to index file) and the extras' length (i32).
_FIXED = struct.Struct("<qqqqQQi")
_POST_HEADER_LENGTHS = 8
_EXTRAS_AT = 4 + _HEADER_SIZE + _FIXED.size + _POST_HEADER_LENGTHS    # 81
_TIMESTAMPS = struct.Struct("<QQ")               # an insert or delete event's start and end ts
_EVENT_NAMES = {DESCRIPTOR_EVENT: "descriptor", INSERT_EVENT: "insert", DELETE_EVENT: "delete"}
_NO_NEXT = -1


class BinlogFormatError(BadInput):
    """A file that is not a readable Milvus binlog; the message names the file and the fault."""


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    collection_id: int
    partition_id: int
    segment_id: int
    field_id: int                # -1 in a deltalog
    start_ts: int
    end_ts: int
    payload_type: int            # a schema DataType: String (20) in a JSON deltalog
    extras: dict
    event_type: int = INSERT_EVENT   # the type of the file's events: INSERT_EVENT or DELETE_EVENT


def _fail(where: str, what: str) -> BinlogFormatError:
    return BinlogFormatError(f"{where or 'binlog'}: {what}")


def read_descriptor(data: bytes, *, where: str = "") -> tuple[Descriptor, int]:
    """The descriptor event of a binlog and the offset of its first event."""
    if len(data) >= 4:
        (magic,) = struct.unpack_from("<i", data, 0)
        if magic != MAGIC:
            raise _fail(where, f"magic number {magic:#x}, expected {MAGIC:#x}: not a Milvus binlog")
    if len(data) < _EXTRAS_AT + 4:
        raise _fail(where, f"truncated: {len(data)} bytes, shorter than a binlog's magic and descriptor "
                           f"({_EXTRAS_AT + 4})")
    _, type_code, length, next_position = _HEADER.unpack_from(data, 4)
    if type_code != DESCRIPTOR_EVENT:
        raise _fail(where, f"first event has type {type_code}, expected the descriptor (0)")
    coll, part, seg, field, start, end, payload_type = _FIXED.unpack_from(data, 4 + _HEADER_SIZE)
    (extras_len,) = struct.unpack_from("<i", data, _EXTRAS_AT)
    # The event length covers header, fixed part, post-header lengths, extras length and extras:
    # a mismatch means another descriptor layout (a different count of post-header lengths).
    if extras_len < 0 or length != _EXTRAS_AT + extras_len:
        raise _fail(where, f"descriptor event length {length} does not match its extras length {extras_len}")
    end_at = 4 + length
    if len(data) < end_at:
        raise _fail(where, f"truncated: {len(data)} bytes, the descriptor ends at {end_at}")
    if next_position not in (end_at, _NO_NEXT):
        raise _fail(where, f"descriptor next position {next_position}, expected {end_at}")
    try:
        extras = json.loads(data[_EXTRAS_AT + 4:end_at]) if extras_len else {}
    except ValueError as e:
        raise _fail(where, f"descriptor extras are not JSON: {e}") from None
    if not isinstance(extras, dict):
        raise _fail(where, f"descriptor extras are {type(extras).__name__}, not a JSON object")
    # Milvus's reader takes an absent key as false and refuses a value that is not a bool; the
    # nulls themselves are the payload column's own (checked against the schema by columns.py).
    if not isinstance(extras.get("nullable", False), bool):
        raise _fail(where, f"descriptor extras nullable is {extras['nullable']!r}, not a bool")
    if "edek" in extras or "encryption_zone" in extras:
        raise _fail(where, "the binlog is encrypted: encrypted binlogs are not supported")
    desc = Descriptor(collection_id=coll, partition_id=part, segment_id=seg, field_id=field, start_ts=start,
                      end_ts=end, payload_type=payload_type, extras=extras)
    return desc, end_at


def read_binlog(data: bytes, *, where: str = "", event: int | None = None) -> tuple[Descriptor, pa.Array]:
    """The descriptor and every event's payload values, concatenated in file order. ``event``
    (INSERT_EVENT or DELETE_EVENT), when given, is the event type the file must hold; otherwise
    any one of the two is read and is in ``Descriptor.event_type``."""
    desc, pos = read_descriptor(data, where=where)
    buf = pa.py_buffer(data)
    multi = desc.extras.get("version") == MULTI_FIELD
    chunks: list[pa.Array] = []
    types: set[int] = set()
    while pos < len(data):
        if len(data) - pos < _HEADER_SIZE + _TIMESTAMPS.size:
            raise _fail(where, f"truncated: {len(data) - pos} bytes at offset {pos}, less than an event header")
        _, type_code, length, next_position = _HEADER.unpack_from(data, pos)
        what = f"event {len(chunks) + 1} at offset {pos}"
        if type_code not in (INSERT_EVENT, DELETE_EVENT):
            raise _fail(where, f"{what} has type {type_code} ({_EVENT_NAMES.get(type_code, 'unknown')}), "
                               "expected an insert (1) or delete (2) event")
        if event is not None and type_code != event:
            raise _fail(where, f"{what} is a {_EVENT_NAMES[type_code]} event, expected {_EVENT_NAMES[event]} events")
        types.add(type_code)
        if len(types) > 1:
            raise _fail(where, f"{what}: insert and delete events in one file")
        if length <= _HEADER_SIZE + _TIMESTAMPS.size:
            raise _fail(where, f"{what} has event length {length}: no payload")
        if pos + length > len(data):
            raise _fail(where, f"truncated: {what} has length {length}, the file ends {len(data) - pos} bytes after it")
        if next_position not in (pos + length, _NO_NEXT):
            raise _fail(where, f"{what} has next position {next_position}, expected {pos + length}")
        payload = buf.slice(pos + _HEADER_SIZE + _TIMESTAMPS.size, length - _HEADER_SIZE - _TIMESTAMPS.size)
        chunks.append(_payload_values(payload, multi, f"{where or 'binlog'}: {what}"))
        pos += length
    if not chunks:
        raise _fail(where, "the binlog holds no event after its descriptor")
    if len({c.type for c in chunks}) > 1:
        raise _fail(where, f"events of different payload types: {', '.join(sorted({str(c.type) for c in chunks}))}")
    values = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
    return replace(desc, event_type=types.pop()), values


def _payload_values(payload: pa.Buffer, multi: bool, what: str) -> pa.Array:
    """The values of one event's Parquet payload."""
    try:
        table = pq.read_table(pa.BufferReader(payload))
    except (pa.ArrowException, OSError) as e:
        raise BinlogFormatError(f"{what}: payload is not a readable Parquet file: {e}") from None
    if multi:
        if table.column_names != ["pk", "ts"]:
            raise BinlogFormatError(f"{what}: a MULTI_FIELD deltalog has columns {table.column_names}, "
                                    "expected ['pk', 'ts']")
        return pa.StructArray.from_arrays([table.column(0).combine_chunks(), table.column(1).combine_chunks()],
                                          names=["pk", "ts"])
    if table.num_columns != 1:
        raise BinlogFormatError(f"{what}: payload has {table.num_columns} columns {table.column_names}, expected one")
    return table.column(0).combine_chunks()
