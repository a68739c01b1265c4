"""The lake's tables as views of a Spark session (driver), each over its collection's insert_log.

A collection of the default database is a temporary view; one of another Milvus database is a
view in a database of the session catalog with that name (a temporary view's name has one part),
which a session with a Hive metastore keeps. Each view selects the collection's columns by name,
each user field with its Milvus type as comment (``columns``), from ``delta.`<insert_log>```:
delta-spark reads the table's current version with its deletion vectors applied. A collection
that never committed has no Delta table yet: its view is empty, with the collection's columns.

A field added to the live collection (Milvus 2.6) widens the table at DeltaNode's next commit
(``storage.table_schema``): the view then takes the schema the table records when it is newer
than the catalog's (DeltaNode's own catalog never hears of the field), reads a column the table
does not have yet as null, and shows a field's default value where the table holds null (the rows
written before the field was added), as Milvus's query answers them; a Geometry's aside, which
reads null there. Raw readers of the table see null there.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import replace

import pyarrow as pa

from ..delta.table_schema import recorded_schema, schema_rank
from ..wire.milvus_proto import schema_pb2
from ..wire.schema import CollectionLayout, DataType
from .columns import SYSTEM_COMMENTS, comment
from .tables import DEFAULT_DATABASE, LakeTable

log = logging.getLogger(__name__)

_SCALARS = {pa.bool_(): "BOOLEAN", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
            pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.string(): "STRING",
            pa.binary(): "BINARY"}


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_type(t: pa.DataType) -> str:
    """Spark SQL's name of a column type DeltaNode writes (``wire.schema``)."""
    if pa.types.is_list(t):
        return f"ARRAY<{sql_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"MAP<{sql_type(t.key_type)}, {sql_type(t.item_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ", ".join(f"{quote(f.name)}: {sql_type(f.type)}" for f in t) + ">"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    return _SCALARS[t]


def spark_path(uri: str) -> str:
    """The insert_log's URI as Hadoop names it: ``s3://`` is Hadoop's S3A connector, ``s3a://``."""
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def view_name(table: LakeTable) -> str:
    if table.database == DEFAULT_DATABASE:
        return quote(table.name)
    return f"{quote(table.database)}.{quote(table.name)}"


def view_statement(table: LakeTable, committed: bool, present: Collection[str] | None = None) -> str:
    """``CREATE OR REPLACE [TEMPORARY] VIEW`` of ``table``; ``committed``: its Delta table exists;
    ``present``: the columns it has (None: every one of the collection's); one it lacks reads as
    null. A field with a default value shows it where the table holds null."""
    schema = table.layout.insert_schema()
    comments = {f.name: comment(f) for f in table.layout.fields} | SYSTEM_COMMENTS
    columns = ", ".join(f"{quote(n)} COMMENT {_literal(comments[n])}" for n in schema.names)
    if committed:
        defaults = default_literals(table.schema) if table.schema is not None else {}

        def select(f: pa.Field) -> str:
            if present is not None and f.name not in present:
                return f"CAST(NULL AS {sql_type(f.type)})"
            if f.name in defaults:
                return f"COALESCE({quote(f.name)}, {defaults[f.name]})"
            return quote(f.name)
        body = f"SELECT {', '.join(map(select, schema))} FROM delta.{quote(spark_path(table.uri))}"
    else:
        body = "SELECT " + ", ".join(f"CAST(NULL AS {sql_type(f.type)})" for f in schema) + " WHERE false"
    temporary = "TEMPORARY " if table.database == DEFAULT_DATABASE else ""
    return f"CREATE OR REPLACE {temporary}VIEW {view_name(table)} ({columns}) AS {body}"


def committed(storage, table: LakeTable) -> bool:
    """Whether ``table``'s Delta log has a version yet (``storage``: a ``StorageLayout``)."""
    from pyarrow import fs as pafs
    fs, path = storage.filesystem(table.uri)
    found = fs.get_file_info(pafs.FileSelector(f"{path}/_delta_log", allow_not_found=True))
    return any(f.path.endswith(".json") or f.path.endswith(".parquet") for f in found)


def default_literals(schema: schema_pb2.CollectionSchema) -> dict[str, str]:
    """Spark SQL literals of the default values of ``schema``'s fields, by field name: the scalars',
    a Timestamptz's and a JSON field's (its text). A Geometry's is left out: Milvus gives it as WKT
    and the table holds WKB, which no literal here makes."""
    out = {}
    for f in schema.fields:
        value = f.default_value
        which = value.WhichOneof("data") if f.HasField("default_value") else None
        if which is None:
            continue
        literal = _DEFAULT_LITERALS.get(which)
        cast = _DEFAULT_TYPES.get(f.data_type)
        if literal is not None and cast is not None:
            out[f.name] = literal(getattr(value, which), cast)
    return out


def _text(v: object, cast: str) -> str:
    return f"CAST({_literal(str(v))} AS {cast})"


_DEFAULT_LITERALS = {
    "bool_data": lambda v, cast: "true" if v else "false",
    "int_data": lambda v, cast: f"CAST({int(v)} AS {cast})",
    "long_data": lambda v, cast: f"CAST({int(v)} AS {cast})",
    "float_data": lambda v, cast: _text(repr(float(v)), cast),
    "double_data": lambda v, cast: _text(repr(float(v)), cast),
    "string_data": _text,
    "bytes_data": lambda v, cast: _text(bytes(v).decode("utf-8", "replace"), cast),   # a JSON field's text
    "timestamptz_data": lambda v, cast: f"timestamp_micros({int(v)})",
}
_DEFAULT_TYPES = {DataType.Bool: "BOOLEAN", DataType.Int8: "TINYINT", DataType.Int16: "SMALLINT",
                  DataType.Int32: "INT", DataType.Int64: "BIGINT", DataType.Float: "FLOAT", DataType.Double: "DOUBLE",
                  DataType.VarChar: "STRING", DataType.Text: "STRING", DataType.Timestamptz: "TIMESTAMP",
                  DataType.JSON: "STRING"}


def stored(spark, uri: str) -> tuple[frozenset[str], dict[str, str]]:
    """The columns and the configuration of the Delta table at ``uri``, read through ``spark``: the
    session reaches an object store as its views will (its endpoint, credentials and CA file), which
    a reader of its own (delta-rs) may not."""
    path = spark_path(uri)
    columns = frozenset(spark.read.format("delta").load(path).schema.names)
    detail = spark.sql(f"DESCRIBE DETAIL delta.{quote(path)}").collect()[0]
    return columns, dict(detail["properties"] or {})


def as_stored(table: LakeTable, columns: frozenset[str],
              configuration: dict[str, str]) -> tuple[LakeTable, frozenset[str]]:
    """``table`` with the schema its Delta table records (in ``configuration``) when that is newer
    than its catalog's, and the columns the Delta table has. A recorded schema that does not decode
    leaves the catalog's: one table's bad property must not keep the others from their views."""
    try:
        recorded = recorded_schema(configuration)
    except ValueError as e:
        log.warning("the view of %s keeps its catalog's schema: %s", table.name, e)
        recorded = None
    if recorded is not None and (table.schema is None or schema_rank(recorded) > schema_rank(table.schema)):
        table = replace(table, layout=CollectionLayout.from_proto(recorded), schema=recorded)
    return table, columns


def register(spark, storage, tables: list[LakeTable]) -> None:
    """Make each of ``tables`` a view of the ``spark`` session (whose conf has delta-spark's
    extension and catalog: ``lake.spark.configure``)."""
    for table in tables:
        if table.database != DEFAULT_DATABASE:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote(table.database)}")
        if committed(storage, table):
            stored_table, present = as_stored(table, *stored(spark, table.uri))
            spark.sql(view_statement(stored_table, True, present))
        else:
            spark.sql(view_statement(table, False))

