"""An insert_log table's schema as it evolves with its collection's (pure logic, driver).

Milvus 2.6 adds fields to a live collection (docs/milvus-facts.md §13). The files written after
such a change carry the new columns; Delta reads a table by the schema of its ``metaData`` action,
so a commit whose files may have columns the table lacks carries a new ``metaData`` with the
table's schema widened by those columns, each nullable: every reader (delta-rs, Spark, DuckDB,
Polars) reads an older file, which lacks the column, as null there. Columns are only ever added,
never removed or changed (``executor.schema_change`` refuses any other change). The same
``metaData`` records the Milvus schema the columns come from in the table's configuration
(``SCHEMA_KEY``: the standard base64 of the serialized ``CollectionSchema``), so that a DataNode that
starts again, or another one, writes with it even when the schema its collection's catalog gives
it is older (DeltaNode's own catalog never hears of a field Milvus added).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from deltalake import Schema as DeltaSchema
from google.protobuf.message import DecodeError

from ..wire.milvus_proto import schema_pb2
from . import json_codec

SCHEMA_KEY = "deltanode.milvus.schema"


@dataclass(frozen=True, kw_only=True)
class TableSchema:
    """The columns a commit's files may have, and the Milvus schema they come from. Runs on the driver."""

    columns: pa.Schema
    milvus_schema: bytes   # a serialized CollectionSchema

    def configuration(self) -> dict[str, str]:
        """What the table's configuration records of it."""
        return {SCHEMA_KEY: base64.b64encode(self.milvus_schema).decode()}


def schema_rank(schema: schema_pb2.CollectionSchema) -> tuple[int, int]:
    """How new a collection's schema is: its ``version`` (Milvus adds one with every change), then
    its number of fields (DeltaNode's own catalog keeps every schema at version 0)."""
    return schema.version, len(schema.fields) + len(schema.struct_array_fields)


def recorded_schema(configuration: Mapping[str, str] | None) -> schema_pb2.CollectionSchema | None:
    """The Milvus schema a table's configuration records (``SCHEMA_KEY``), None when it records none;
    raises ``ValueError`` when what it records does not decode."""
    text = (configuration or {}).get(SCHEMA_KEY)
    if not text:
        return None
    try:
        return schema_pb2.CollectionSchema.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, DecodeError) as e:
        raise ValueError(f"the table's {SCHEMA_KEY} is not a base64 CollectionSchema: {e}") from None


def widened(schema_string: str, columns: pa.Schema) -> str | None:
    """The Delta schema ``schema_string`` (a ``metaData.schemaString``) with the columns of ``columns``
    it lacks appended, nullable; None when it lacks none."""
    doc = json_codec.loads(schema_string)
    have = {f["name"] for f in doc["fields"]}
    missing = [f.with_nullable(True) for f in columns if f.name not in have]
    if not missing:
        return None
    added = json_codec.loads(DeltaSchema.from_arrow(pa.schema(missing)).to_json())["fields"]
    return json_codec.dumps({**doc, "fields": doc["fields"] + added})
