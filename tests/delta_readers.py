"""The Delta readers users have, each reading a table's columns as a pyarrow table: DuckDB's Delta
extension (PyPI duckdb + duckdb-ext-delta, built on delta-kernel), Polars, deltalake's SQL
(DataFusion), and Spark with delta-spark (``by_spark``: it needs the tests' session). Each applies
deletion vectors; ``read_table`` is DeltaNode's own."""

from __future__ import annotations

import importlib.metadata

import duckdb
import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

DUCKDB_DELTA = importlib.metadata.distribution("duckdb-ext-delta").locate_file(
    f"duckdb_ext/extensions/v{duckdb.__version__}/linux_amd64/delta.duckdb_extension")


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """A connection with the Delta extension loaded from its wheel (no download)."""
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{DUCKDB_DELTA}'")
    return con


def _select(columns: list[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def by_duckdb(uri: str, columns: list[str]) -> pa.Table:
    with duckdb_connection() as con:
        return con.execute(f"SELECT {_select(columns)} FROM delta_scan('{uri}')").fetch_arrow_table()


def by_polars(uri: str, columns: list[str]) -> pa.Table:
    return pl.scan_delta(uri).select(columns).collect().to_arrow()


def by_deltalake_sql(uri: str, columns: list[str]) -> pa.Table:
    query = QueryBuilder().register("t", DeltaTable(uri))
    return pa.table(query.execute(f"SELECT {_select(columns)} FROM t").read_all())


READERS = {"duckdb": by_duckdb, "polars": by_polars, "deltalake-sql": by_deltalake_sql}


def by_spark(spark, uri: str, columns: list[str] | None = None) -> pa.Table:
    """The table as delta-spark reads it in ``spark`` (a session with the Delta jars and settings)."""
    frame = spark.read.format("delta").load(uri)
    return frame.select(*(f"`{c}`" for c in columns)).toArrow() if columns else frame.toArrow()


def sorted_rows(table: pa.Table, keys: list[str]) -> list[dict]:
    """The rows as Python values, ordered by ``keys``: readers return them in no set order."""
    return sorted(table.to_pylist(), key=lambda r: tuple(r[k] for k in keys))


def assert_spark_reads_as_duckdb(spark, uri: str, keys: list[str]) -> list[dict]:
    """Spark and DuckDB read the same rows, every column, value for value; the rows."""
    by_spark_rows = by_spark(spark, uri)
    spark_rows = sorted_rows(by_spark_rows, keys)
    duck_rows = sorted_rows(by_duckdb(uri, by_spark_rows.column_names), keys)
    assert len(spark_rows) == len(duck_rows)
    differ = [(s, d) for s, d in zip(spark_rows, duck_rows) if s != d]
    assert not differ, f"{len(differ)} rows differ, e.g.\n Spark  {differ[0][0]}\n DuckDB {differ[0][1]}"
    return spark_rows
