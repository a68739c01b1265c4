"""A writer of Milvus's binlog files for tests, following Milvus's Go writers (internal/storage:
binlog_writer.go, event_writer.go, event_data.go, payload_writer.go, serde_events.go) rather
than DeltaNode's reader, so the reader is checked against an encoding of its own.

- ``binlog``: magic, descriptor, then one insert or delete event per payload, as
  ``baseBinlogWriter.Finish`` lays them out (each next position the absolute offset after the
  event); ``stream=True`` as the stream writers of Milvus 2.4+ do (next position -1, start and end
  ts 1, the column named by the field id or ``delta``).
- Payload builders: the Arrow arrays Milvus's payload writer makes of each type's rows.
- Nullable fields (Milvus 2.5+): ``insert_binlog(..., nullable=...)`` writes the descriptor's
  ``nullable`` extra as Milvus's writers do (``NewInsertBinlogWriter``, ``BinlogStreamWriter``),
  and the payload's nulls as Parquet nulls: ``InsertCodec`` declares the column nullable only for
  a nullable field (``NativePayloadWriter``, ``WithNullable``), the stream writers declare every
  column nullable. A null row's value is an Arrow null (``AppendNull``, or a validity bitmap over
  the placeholder the proxy put there), never stored.
"""

from __future__ import annotations

import io
import json
import struct
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from deltanode.wire.milvus_proto import schema_pb2

MAGIC = 0xFFFABC
INSERT, DELETE = 1, 2
# descriptorEventData's post-header lengths: the fixed part's size of each event type, from the
# descriptor (52) to the index file event (16): 8 bytes.
POST_HEADER_LENGTHS = bytes([52, 16, 16, 16, 16, 16, 16, 16])
DataType = schema_pb2.DataType


def _header(type_code: int, length: int, next_position: int) -> bytes:
    # baseEventHeader: Timestamp u64 (a TSO of now), TypeCode int8, EventLength int32, NextPosition int32.
    return struct.pack("<Qbii", (int(time.time() * 1000) << 18), type_code, length, next_position)


def parquet_payload(values: pa.Array, column: str = "val", *, nullable: bool = True) -> bytes:
    """A complete Parquet file of one column, zstd level 3 as NativePayloadWriter writes it;
    ``nullable`` False declares the column required, as ``InsertCodec`` does for a field that is
    not nullable."""
    if not nullable and values.null_count:
        # NativePayloadWriter: "not support null when nullable is false".
        raise ValueError(f"{values.null_count} null(s) in a payload that is not nullable")
    out = io.BytesIO()
    schema = pa.schema([pa.field(column, values.type, nullable=nullable)])
    pq.write_table(pa.Table.from_arrays([values], schema=schema), out, compression="zstd", compression_level=3)
    return out.getvalue()


def descriptor(*, collection_id: int, partition_id: int, segment_id: int, field_id: int, payload_type: int,
               start_ts: int, end_ts: int, extras: dict | None = None, next_position: bool = True) -> bytes:
    """The descriptor event (after the magic): header, fixed part, post-header lengths, extras."""
    # Go's json.Marshal writes a map's keys sorted.
    extras_bytes = json.dumps({"original_size": "1024", **(extras or {})}, separators=(",", ":"),
                              sort_keys=True).encode()
    data = struct.pack("<qqqqQQi", collection_id, partition_id, segment_id, field_id, start_ts, end_ts,
                       payload_type)
    data += POST_HEADER_LENGTHS + struct.pack("<i", len(extras_bytes)) + extras_bytes
    length = 17 + len(data)
    return _header(0, length, 4 + length if next_position else -1) + data


def binlog(payload_type: int, payloads: list[bytes], *, event: int = INSERT, collection_id: int = 447,
           partition_id: int = 448, segment_id: int = 449, field_id: int = 100, extras: dict | None = None,
           start_ts: int = 470767461955796999, end_ts: int = 470767461955797999, stream: bool = False) -> bytes:
    """A binlog of one event per (Parquet) payload."""
    if stream:
        start_ts = end_ts = 1
    out = struct.pack("<i", MAGIC) + descriptor(
        collection_id=collection_id, partition_id=partition_id, segment_id=segment_id, field_id=field_id,
        payload_type=payload_type, start_ts=start_ts, end_ts=end_ts, extras=extras)
    for payload in payloads:
        length = 17 + 16 + len(payload)
        next_position = -1 if stream else len(out) + length
        out += _header(event, length, next_position) + struct.pack("<QQ", start_ts, end_ts) + payload
    return out


def insert_binlog(payload_type: int, *events: pa.Array, field_id: int = 100, stream: bool = False,
                  nullable: bool | None = None, **kw) -> bytes:
    """An insert binlog of a field, one event per array of payload values (a null: a null row).
    ``nullable`` None writes 2.4's binlog, whose extras have no ``nullable`` key; True or False
    writes 2.5's, with the key, the column required in ``InsertCodec``'s layout when False."""
    column = str(field_id) if stream else "val"
    declared = stream or nullable is None or nullable
    if nullable is not None:
        kw["extras"] = {"nullable": nullable, **(kw.get("extras") or {})}
    return binlog(payload_type, [parquet_payload(v, column, nullable=declared) for v in events], field_id=field_id,
                  stream=stream, **kw)


def deltalog(*events: list[str], stream: bool = False, **kw) -> bytes:
    """A deltalog of string rows (JSON or legacy ``pk,ts``): payload type String, field id -1."""
    column = "delta" if stream else "val"
    payloads = [parquet_payload(pa.array(rows, pa.string()), column) for rows in events]
    return binlog(DataType.String, payloads, event=DELETE, field_id=-1, stream=stream, **kw)


def json_delete_rows(pks: list, tss: list[int]) -> list[str]:
    """DeleteLog rows as Go's json.Marshal writes them: pk, ts, pkType in that order, no spaces."""
    rows = []
    for pk, ts in zip(pks, tss):
        pk_type = DataType.VarChar if isinstance(pk, str) else DataType.Int64
        rows.append(json.dumps({"pk": pk, "ts": ts, "pkType": pk_type}, separators=(",", ":")))
    return rows


def multi_field_deltalog(pks: pa.Array, tss: list[int], **kw) -> bytes:
    """The "parquet" deltalog format (MultiFieldDeltalogStreamWriter): pk and ts columns, payload
    type Int64 whatever the key's type, extras version MULTI_FIELD."""
    out = io.BytesIO()
    pq.write_table(pa.table({"pk": pks, "ts": pa.array(tss, pa.int64())}), out, compression="zstd")
    return binlog(DataType.Int64, [out.getvalue()], event=DELETE, field_id=-1, stream=True,
                  extras={"version": "MULTI_FIELD"}, **kw)


# Payload values per Milvus type, as NativePayloadWriter builds them.

def float_vector_payload(rows: np.ndarray) -> pa.Array:
    """float32 rows -> fixed_size_binary[dim*4], each float little-endian."""
    rows = np.ascontiguousarray(rows, dtype="<f4")
    width = rows.shape[1] * 4
    return pa.array([r.tobytes() for r in rows], pa.binary(width))


def fixed_rows_payload(rows: list[bytes], width: int) -> pa.Array:
    """BinaryVector (dim/8), Float16Vector and BFloat16Vector (dim*2 bytes) rows."""
    return pa.array(rows, pa.binary(width))


def array_payload(rows: list[schema_pb2.ScalarField]) -> pa.Array:
    """Array rows: each a marshalled ScalarField (AddOneArrayToPayload's proto.Marshal)."""
    return pa.array([r.SerializeToString() for r in rows], pa.binary())


def sparse_row(entries: dict[int, float]) -> bytes:
    """A SparseFloatVector row: (uint32 index, float32 value) pairs, little-endian, by index."""
    return b"".join(struct.pack("<If", i, v) for i, v in sorted(entries.items()))


def sparse_payload(rows: list[dict[int, float]]) -> pa.Array:
    return pa.array([sparse_row(r) for r in rows], pa.binary())
