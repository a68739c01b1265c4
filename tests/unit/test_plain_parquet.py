"""A live binlog encoded by ``plain_parquet`` reads back, with the table's Arrow types, in every
reader users have (pyarrow, DuckDB, Polars, delta-rs); data or schemas it does not encode go to
pyarrow's writer, never to a wrong file."""

from __future__ import annotations

import io

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltanode.delta.actions import AddFile
from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.executor import plain_parquet
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.wire.schema import FLOAT_LIST, CollectionLayout, schema_from_json

N = 40


def element_list(t: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("element", t))


def every_kind(n: int = N) -> pa.Table:
    """A column of each kind the encoder writes, as DeltaNode's schemas type them."""
    rng = np.random.default_rng(7)
    lengths = [1 + i % 4 for i in range(n)]
    return pa.table({
        "pk": pa.array(np.arange(n, dtype=np.int64) * 3 - 50),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8).cast(FLOAT_LIST),
        "b": pa.array([i % 3 == 0 for i in range(n)]),
        "i8": pa.array(np.arange(n, dtype=np.int8) - 20),
        "i16": pa.array(np.arange(n, dtype=np.int16) * -300),
        "i32": pa.array(np.arange(n, dtype=np.int32) * 70000),
        "f": pa.array(rng.random(n, dtype=np.float32)),
        "d": pa.array(rng.random(n)),
        "s": pa.array(["" if i % 5 == 0 else f"é{i}" * (i % 3 + 1) for i in range(n)]),
        "bin": pa.array([bytes([i % 256]) * (i % 6) for i in range(n)], pa.binary()),
        "a_int": pa.array([list(range(i, i + k)) for i, k in enumerate(lengths)], element_list(pa.int64())),
        "a_str": pa.array([[f"x{i}"] * k for i, k in enumerate(lengths)], element_list(pa.string())),
        "a_bool": pa.array([[i % 2 == 0] * k for i, k in enumerate(lengths)], element_list(pa.bool_())),
        "_ts": pa.array(np.arange(n, dtype=np.int64) + (1 << 40)),
        "_segment_id": pa.repeat(pa.scalar(9, pa.int64()), n),
    })


def encoded(table: pa.Table) -> bytes:
    encoder = plain_parquet.for_schema(table.schema)
    assert encoder is not None
    data = encoder.encode(table)
    assert data is not None
    return data


@pytest.mark.parametrize("rows", [1, N, 1000])
def test_every_kind_reads_back_with_its_arrow_types(rows):
    table = every_kind(rows)
    back = pq.read_table(io.BytesIO(encoded(table)))
    assert back.schema.equals(table.schema) and back.equals(table)


@pytest.mark.parametrize("dim", [1, 128, 768])
def test_vectors_of_every_size_read_back(dim):
    """Runs of repetition levels longer than 63 take a varint of two bytes."""
    values = pa.array(np.arange(N * dim, dtype=np.float32))
    table = pa.table({"vec": pa.FixedSizeListArray.from_arrays(values, dim).cast(FLOAT_LIST)})
    assert pq.read_table(io.BytesIO(encoded(table))).equals(table)


def test_slices_and_chunked_columns_are_encoded_as_their_rows():
    table = every_kind()
    part = table.slice(5, 17)
    assert pq.read_table(io.BytesIO(encoded(part))).equals(part)
    chunked = pa.concat_tables([table.slice(0, 10), table.slice(10)])
    assert chunked.column("vec").num_chunks == 2
    assert pq.read_table(io.BytesIO(encoded(chunked))).equals(table)


def test_duckdb_and_polars_read_the_same_rows(tmp_path):
    table = every_kind()
    path = tmp_path / "f.parquet"
    path.write_bytes(encoded(table))
    got = duckdb.sql(f"select sum(pk), sum(len(vec)), sum(i8), sum(i16), sum(i32), count(*) filter (where b), "
                     f"max(s), sum(len(a_int)), sum(list_sum(a_int)), sum(len(a_str)) from '{path}'").fetchone()
    assert got == (sum(table["pk"].to_pylist()), N * 8, sum(table["i8"].to_pylist()), sum(table["i16"].to_pylist()),
                   sum(table["i32"].to_pylist()), sum(table["b"].to_pylist()), max(table["s"].to_pylist()),
                   sum(1 + i % 4 for i in range(N)), sum(sum(a) for a in table["a_int"].to_pylist()),
                   sum(1 + i % 4 for i in range(N)))
    frame = pl.read_parquet(path)
    assert frame.height == N
    assert frame["vec"].to_list() == table["vec"].to_pylist()
    assert frame["s"].to_list() == table["s"].to_pylist() and frame["bin"].to_list() == table["bin"].to_pylist()
    assert frame["a_str"].to_list() == table["a_str"].to_pylist()


@pytest.mark.parametrize("column,values", [
    ("pk", [None] + list(range(1, N))),                       # a null
    ("a_int", [[]] + [[i] for i in range(1, N)]),             # an empty list
    ("a_int", [None] + [[i] for i in range(1, N)]),           # a null list
    ("a_int", [[None]] + [[i] for i in range(1, N)]),         # a null element
])
def test_data_with_nulls_or_empty_lists_is_left_to_pyarrow(column, values):
    table = every_kind()
    table = table.set_column(table.schema.get_field_index(column), table.schema.field(column),
                             pa.array(values, table.schema.field(column).type))
    encoder = plain_parquet.for_schema(table.schema)
    assert encoder is not None and encoder.encode(table) is None
    assert encoder.encode(table.slice(1)) is not None   # the same column without that row
    assert encoder.encode(every_kind().slice(0, 0)) is None   # no rows


@pytest.mark.parametrize("t", [pa.map_(pa.int64(), pa.float32()), pa.uint32(), pa.large_string(),
                               pa.struct([("a", pa.int64())]), element_list(element_list(pa.int64())),
                               pa.binary(4), pa.float16()])
def test_schemas_of_other_kinds_are_left_to_pyarrow(t):
    assert plain_parquet.for_schema(pa.schema([pa.field("pk", pa.int64()), pa.field("x", t)])) is None


def test_a_column_that_is_not_nullable_is_left_to_pyarrow():
    """Its levels differ (a REQUIRED column has none): every DeltaNode column is nullable."""
    assert plain_parquet.for_schema(pa.schema([pa.field("pk", pa.int64(), nullable=False)])) is None


def test_a_live_binlog_is_encoded_here_and_delta_rs_reads_it(tmp_path):
    layout = CollectionLayout.from_proto(schema_from_json(
        {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                    {"name": "vec", "data_type": "FloatVector", "dim": 4},
                    {"name": "title", "data_type": "VarChar", "max_length": 64}]}, "c"))
    storage = StorageLayout(str(tmp_path))
    writer = BinlogWriter(storage, 1, layout.insert_schema(), layout.delete_schema())
    n = 30
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 4, dtype=np.float32)), 4).cast(FLOAT_LIST)
    columns = [pa.array(np.arange(n, dtype=np.int64)), vec, pa.array([f"t{i}" for i in range(n)]),
               pa.array(np.arange(n, dtype=np.int64) + 100), pa.array(np.arange(n, dtype=np.int64) + 500)]
    writer.add_insert(9, 2, columns, n, 1000, 0, 100, 129)
    (entry,) = writer.close()
    path = f"{storage.insert_log(1)}/{entry.path}"
    assert pq.ParquetFile(path).metadata.created_by == plain_parquet.CREATED_BY.decode()
    log = DeltaLog(storage.insert_log(1), layout.insert_schema())
    log.commit(adds=[AddFile(path=entry.path, size=entry.size, stats=entry.stats)], txns={}, expected={}, info={})
    rows = read_table(storage, storage.insert_log(1)).sort_by("pk")
    assert rows.column("pk").to_pylist() == list(range(n))
    assert rows.column("vec").to_pylist()[3] == [12.0, 13.0, 14.0, 15.0]
    assert set(rows.column("_segment_id").to_pylist()) == {9} and set(rows.column("_partition_id").to_pylist()) == {2}


def test_files_of_one_shape_share_their_footer_and_keep_their_values():
    """The footer is kept by row count and page sizes: a second file of the same shape takes it,
    with its own pages (fixed-width columns: every file of 50 rows has the same sizes)."""
    first, second = every_kind(50).select(["pk", "vec", "_ts"]), every_kind(50).select(["pk", "vec", "_ts"])
    second = second.set_column(0, "pk", pa.array(np.arange(50, dtype=np.int64) + 1000))
    a, b = encoded(first), encoded(second)
    footer = slice(-8 - int.from_bytes(a[-8:-4], "little"), None)
    assert a[footer] == b[footer] and a != b
    assert pq.read_table(io.BytesIO(a)).equals(first) and pq.read_table(io.BytesIO(b)).equals(second)


def test_columns_are_encoded_as_the_table_they_make():
    """A live binlog's writer hands its arrays over without a Table; a column of another type than
    the schema's is left to pyarrow's writer, which says what is wrong with it."""
    table = every_kind()
    encoder = plain_parquet.for_schema(table.schema)
    assert encoder is not None
    assert encoder.encode_columns([c.chunk(0) for c in table.columns], N) == encoded(table)
    wrong = [c.chunk(0) for c in table.columns]
    wrong[0] = wrong[0].cast(pa.int32())
    assert encoder.encode_columns(wrong, N) is None
    assert encoder.encode_columns([c.chunk(0) for c in table.columns][:-1], N) is None   # a column short
