"""The lake's tables as views of a Spark session (driver), each over its collection's insert_log.

A collection of the default database is a temporary view; one of another Milvus database is a
view in a database of the session catalog with that name (a temporary view's name has one part),
which a session with a Hive metastore keeps. Each view selects the collection's columns by name,
each user field with its Milvus type as comment (``columns``), from ``delta.`<insert_log>```:
delta-spark reads the table's current version with its deletion vectors applied. A collection
that never committed has no Delta table yet: its view is empty, with the collection's columns.
"""

from __future__ import annotations

import pyarrow as pa

from .columns import SYSTEM_COMMENTS, comment
from .tables import DEFAULT_DATABASE, LakeTable

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


def view_statement(table: LakeTable, committed: bool) -> str:
    """``CREATE OR REPLACE [TEMPORARY] VIEW`` of ``table``; ``committed``: its Delta table exists."""
    schema = table.layout.insert_schema()
    comments = {f.name: comment(f) for f in table.layout.fields} | SYSTEM_COMMENTS
    columns = ", ".join(f"{quote(n)} COMMENT {_literal(comments[n])}" for n in schema.names)
    if committed:
        body = f"SELECT {', '.join(quote(n) for n in schema.names)} FROM delta.{quote(spark_path(table.uri))}"
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


def register(spark, storage, tables: list[LakeTable]) -> None:
    """Make each of ``tables`` a view of the ``spark`` session (whose conf has delta-spark's
    extension and catalog: ``lake.spark.configure``)."""
    for table in tables:
        if table.database != DEFAULT_DATABASE:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote(table.database)}")
        spark.sql(view_statement(table, committed(storage, table)))

