"""Which rows of a file a vchannel's deletes remove (the executor's search, pure)."""

import numpy as np
import pyarrow as pa
import pytest

from deltanode.executor.delete_mark_task import (
    ALL_PARTITIONS,
    SortedKeys,
    deleted_positions,
    latest_deletes,
)


def file_keys(keys: list, ts: list[int]) -> SortedKeys:
    return SortedKeys.of(pa.array(keys), np.array(ts, np.int64))


@pytest.mark.parametrize("key", [lambda i: i, lambda i: f"k{i:03d}"], ids=["int64", "varchar"])
def test_a_delete_removes_the_older_rows_of_its_key_only(key):
    # rows: key 5 twice (ts 10 and 30: an upsert's new row), key 7 at ts 20, key 9 at ts 40
    rows = file_keys([key(9), key(5), key(7), key(5)], [40, 10, 20, 30])
    deletes = SortedKeys.of(pa.array([key(5), key(7), key(8)]), np.array([30, 25, 99], np.int64))
    # key 5 at ts 30 removes the ts-10 row (position 1), not its own upsert's (ts 30, position 3);
    # key 7 at ts 25 removes position 2; key 8 is in no row
    assert deleted_positions(rows, deletes).tolist() == [1, 2]
    assert deleted_positions(rows, deletes.between(key(6), key(9))).tolist() == [2]
    assert deleted_positions(rows, deletes.select(np.array([False, False, True]))).tolist() == []


def test_deletes_apply_to_their_partition_and_all_partition_ones_to_every_partition():
    deletes = pa.table({"pk": [1, 1, 2, 3], "_ts": [10, 50, 20, 30], "_partition_id": [7, 7, 8, ALL_PARTITIONS]})
    latest = latest_deletes(deletes, "pk")
    assert sorted(latest) == [ALL_PARTITIONS, 7, 8]
    assert (latest[7].keys.tolist(), latest[7].ts.tolist()) == ([1, 3], [50, 30])
    assert (latest[8].keys.tolist(), latest[8].ts.tolist()) == ([2, 3], [20, 30])
    assert latest[ALL_PARTITIONS].keys.tolist() == [3]
