"""The rows that flow from a flowgraph's source to its sink: one row per Milvus message.

A decoded insert or delete travels as ONE row whose ``_payload`` is the message's Arrow
columns serialized as an Arrow IPC record batch. Spark then moves a few large binary values
per batch instead of converting every vector of every row to JVM arrays and back, which
is where a row-per-entity layout spends most of its time; the sink reads the payload back
zero-copy. A large payload may instead wait in a host-local file whose path is ``_handoff``
(``handoff``), with ``_payload`` empty. Kinds (``_kind``):

- INSERT: ``_payload`` (or the ``_handoff`` file) = insert_log columns (user fields + _ts,
  _row_id, _segment_id, _partition_id)
- DELETE: ``_payload`` (or the ``_handoff`` file) = delta_log columns (primary key, _ts, _partition_id)
- EVENT: ``_event`` = JSON for the driver (DDL, flush, per-task summaries)
- QUARANTINE: ``_event`` = JSON reason, ``_payload`` = the raw message bytes
"""

from __future__ import annotations

import pyarrow as pa

INSERT, DELETE, EVENT, QUARANTINE = 0, 1, 2, 3

RECORD_SCHEMA = pa.schema([
    pa.field("_kind", pa.int8()), pa.field("_offset", pa.int64()),
    pa.field("_segment_id", pa.int64()), pa.field("_partition_id", pa.int64()),
    pa.field("_rows", pa.int32()), pa.field("_min_ts", pa.int64()), pa.field("_max_ts", pa.int64()),
    pa.field("_event", pa.string()), pa.field("_payload", pa.binary()), pa.field("_handoff", pa.string()),
])


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark SQL DDL string of an Arrow schema of flat columns."""
    names = {pa.int8(): "tinyint", pa.int32(): "int", pa.int64(): "bigint", pa.string(): "string",
             pa.binary(): "binary"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)


def to_ipc(batch: pa.RecordBatch) -> pa.Buffer:
    return batch.serialize()


def from_ipc(buffer: pa.Buffer, schema: pa.Schema) -> pa.RecordBatch:
    return pa.ipc.read_record_batch(buffer, schema)
