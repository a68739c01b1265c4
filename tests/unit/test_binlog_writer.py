"""A binlog's add-action stats and key filter describe exactly the rows written to it, whether
the file holds one row group (a live cycle's) or several (a backlog's), with Int64 or VarChar keys."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.pk_bloom import PkBloom
from deltanode.executor import binlog_writer
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.wire.schema import CollectionLayout, schema_from_json


def layout(pk_type: str) -> CollectionLayout:
    extra = {"max_length": 32} if pk_type == "VarChar" else {}
    return CollectionLayout.from_proto(schema_from_json(
        {"fields": [{"name": "pk", "data_type": pk_type, "is_primary_key": True, **extra},
                    {"name": "score", "data_type": "Int64"}]}, "c"))


def keys(pk_type: str, lo: int, n: int, step: int) -> pa.Array:
    values = np.arange(lo, lo + n * step, step, dtype=np.int64)
    return pa.array(values) if pk_type == "Int64" else pa.array([f"k{v:06d}" for v in values])


@pytest.mark.parametrize("pk_type", ["Int64", "VarChar"])
@pytest.mark.parametrize("pieces,groups", [(1, 1), (3, 1), (3, 3)])   # messages, row groups they make
@pytest.mark.parametrize("step", [1, 3])   # 1: a run of Int64 keys (an exact filter), 3: a bloom filter
def test_a_binlogs_stats_and_key_filter_match_its_rows(tmp_path, monkeypatch, pk_type, pieces, groups, step):
    if groups > 1:
        monkeypatch.setattr(binlog_writer, "ROW_GROUP_BYTES", 1)   # each piece its own row group
    lay = layout(pk_type)
    storage = StorageLayout(str(tmp_path))
    writer = BinlogWriter(storage, 1, lay.insert_schema(), lay.delete_schema())
    n, written = 40, []
    for i in range(pieces):
        pk = keys(pk_type, 1000 + i * n * step, n, step)
        ts = pa.array(np.arange(n, dtype=np.int64) + 5000 - 100 * i)
        row_ids = pa.array(np.arange(n, dtype=np.int64) + 70 * i)
        writer.add_insert(9, 2, [pk, pa.array(np.full(n, -i, dtype=np.int64)), ts, row_ids], n, 100, i, 0, 0)
        written.append((pk, ts, row_ids))
    (entry,) = writer.close()
    rows = pq.read_table(f"{storage.insert_log(1)}/{entry.path}")
    assert rows.num_rows == entry.rows == n * pieces
    assert pq.ParquetFile(f"{storage.insert_log(1)}/{entry.path}").metadata.num_row_groups == groups
    assert set(rows.column("_segment_id").to_pylist()) == {9} and set(rows.column("_partition_id").to_pylist()) == {2}
    stats = json.loads(entry.stats)
    for col in ("pk", "_ts", "_row_id"):
        values = rows.column(col).to_pylist()
        assert (stats["minValues"][col], stats["maxValues"][col]) == (min(values), max(values))
    assert stats["minValues"]["_segment_id"] == stats["maxValues"]["_segment_id"] == 9
    assert stats["numRecords"] == n * pieces and set(stats["nullCount"].values()) == {0}
    assert entry.pk_bloom is not None   # small: carried in the add action
    bloom = PkBloom.from_bytes(entry.pk_bloom)
    assert bloom.kind == ("string" if pk_type == "VarChar" else "int64-run" if step == 1 else "int64")
    assert bloom.count == n * pieces and bloom.might_contain(rows.column("pk")).all()
    absent = keys(pk_type, 1000 + n * pieces * step + 7, 200, 5)
    assert bloom.might_contain(absent).mean() < (0.05 if bloom.kind != "int64-run" else 1e-9)
