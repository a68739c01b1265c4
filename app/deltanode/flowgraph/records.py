"""The Arrow record layout that flows from the source to the sink of one flowgraph.

One schema carries four kinds of rows, told apart by ``_kind``, so that a single Spark
streaming query can move them without a shuffle:

- INSERT: user columns + ``_ts``, ``_row_id``, ``_segment_id``, ``_partition_id``
- DELETE: primary key column + ``_ts`` + ``_partition_id``
- EVENT: ``_event`` JSON for the driver (DDL, flush, ticks, per-task summaries); a few per task
- QUARANTINE: ``_event`` JSON reason + ``_payload`` raw message bytes
"""

from __future__ import annotations

import pyarrow as pa

from ..wire.schema import CollectionLayout

INSERT, DELETE, EVENT, QUARANTINE = 0, 1, 2, 3

HEAD = [pa.field("_kind", pa.int8()), pa.field("_offset", pa.int64())]
TAIL = [pa.field("_event", pa.string()), pa.field("_payload", pa.binary())]


def record_schema(layout: CollectionLayout) -> pa.Schema:
    return pa.schema(HEAD + list(layout.insert_schema()) + TAIL)


def spark_ddl(schema: pa.Schema) -> str:
    """The Spark SQL DDL string of an Arrow schema (the types used by record_schema only)."""
    def sql(t: pa.DataType) -> str:
        if pa.types.is_list(t):
            return f"array<{sql(t.value_type)}>"
        return {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
                pa.float32(): "float", pa.float64(): "double", pa.bool_(): "boolean",
                pa.string(): "string", pa.binary(): "binary"}[t]
    return ", ".join(f"`{f.name}` {sql(f.type)}" for f in schema)
