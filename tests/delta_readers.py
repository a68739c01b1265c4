"""The Delta readers users have, each reading a table's columns as a pyarrow table: DuckDB's Delta
extension (PyPI duckdb + duckdb-ext-delta, built on delta-kernel), Polars, deltalake's SQL
(DataFusion). Each applies deletion vectors; ``read_table`` is DeltaNode's own."""

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
