"""A collection as Milvus returns it: the insert_log's rows with the delta_log's deletes applied.

The tables keep every row ever inserted (insert_log) and every delete apart (delta_log), each
with its hybrid timestamp ``_ts`` and ``_partition_id``. Milvus's rules make the current state
a function of the two (docs/milvus-facts.md §8):

- a delete of key K at ts T removes the rows of K with ``_ts < T`` (strictly: an upsert is an
  insert and a delete of the same keys at the same ts, and its new row survives), in the
  delete's partition, or in every partition when its ``_partition_id`` is -1 (a delete by
  expression, or any delete of a partition-key collection);
- of the rows of one key still standing, a query returns the newest (largest ``_ts``).

The insert_log's deletion vectors apply the first rule as deletes arrive (``delete_mark_task``), so
Delta readers see the current state without this module. It computes the same from the two
tables independently, from every row ever inserted and every delete recorded: the reference
the tests compare Milvus's ``query`` and every Delta reader with.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..delta.layout import StorageLayout
from ..delta.tables import read_table

ALL_PARTITIONS = -1


def _latest_deletes(deletes: pa.Table, pk: str, keys: list[str]) -> pa.Table:
    """The largest delete ts per ``keys`` (pk, or pk and partition), as column ``_deleted_ts``."""
    return deletes.group_by(keys).aggregate([("_ts", "max")]).rename_columns([*keys, "_deleted_ts"])


def standing(inserts: pa.Table, deletes: pa.Table | None, pk: str) -> pa.Table:
    """The rows of ``inserts`` a Milvus query returns, given ``deletes`` (pk, ``_ts``,
    ``_partition_id``), in primary-key order."""
    index = pa.table({pk: inserts.column(pk), "_ts": inserts.column("_ts"),
                      "_partition_id": inserts.column("_partition_id"),
                      "_row": pa.array(np.arange(len(inserts), dtype=np.int64))})
    if deletes is not None and len(deletes):
        everywhere = deletes.filter(pc.equal(deletes.column("_partition_id"), ALL_PARTITIONS))
        one = deletes.filter(pc.not_equal(deletes.column("_partition_id"), ALL_PARTITIONS))
        for dels, keys in ((everywhere, [pk]), (one, [pk, "_partition_id"])):
            if not len(dels):
                continue
            joined = index.join(_latest_deletes(dels, pk, keys), keys=keys, join_type="left outer")
            gone = pc.fill_null(pc.less(joined.column("_ts"), joined.column("_deleted_ts")), False)
            index = joined.filter(pc.invert(gone)).drop_columns(["_deleted_ts"])
    newest = index.group_by([pk]).aggregate([("_ts", "max")]).rename_columns([pk, "_newest"])
    index = index.join(newest, keys=[pk], join_type="inner")
    index = index.filter(pc.equal(index.column("_ts"), index.column("_newest")))
    # One row per key (two rows of a key at one ts: an insert that repeated the key).
    rows = index.group_by([pk]).aggregate([("_row", "min")]).column("_row_min")
    return inserts.take(rows).sort_by(pk)


def current_rows(storage: StorageLayout, collection_id: int, pk: str) -> pa.Table | None:
    """The collection's current rows (None when nothing was committed yet); ``pk``: the primary
    key's column name."""
    inserts = read_table(storage, storage.insert_log(collection_id), include_deleted=True)
    if inserts is None:
        return None
    deletes = read_table(storage, storage.delta_log(collection_id), [pk, "_ts", "_partition_id"])
    return standing(inserts, deletes, pk)
