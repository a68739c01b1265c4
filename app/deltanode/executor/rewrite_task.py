"""Compaction's rewrite of a segment's files (runs on an executor; ``state.compaction_plan`` plans
and commits it on the driver)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from ..delta.deletion_vectors import keep_mask, positions
from ..records import FileEntry, Rewrite, SegmentFile
from .binlog_writer import write_segment_file


def rewrite(task: Rewrite) -> FileEntry | None:
    """Runs on an executor: the rows of the inputs their planned DVs keep, in input order, as one
    file of the segment; None when every row is deleted."""
    fs, base = task.storage.filesystem(task.storage.insert_log(task.collection_id))
    rows = pa.concat_tables([_kept_rows(task, f, fs, base) for f in task.inputs])
    if len(rows) == 0:
        return None
    return write_segment_file(task.storage, task.collection_id, task.schema, task.pk, task.segment_id,
                              task.partition_id, rows)


def _kept_rows(task: Rewrite, f: SegmentFile, fs: pafs.FileSystem, base: str) -> pa.Table:
    """One input's rows but those its planned DV deletes. Its rows must be what its add action
    says (``numRecords`` counts deleted rows too): the DV's positions index them."""
    table = pq.read_table(f"{base}/{f.path}", filesystem=fs, schema=task.schema)
    if len(table) != f.rows:
        raise RuntimeError(f"segment {task.segment_id}: {f.path} has {len(table)} rows, its add action says {f.rows}")
    if f.deletion_vector is None:
        return table
    return table.filter(keep_mask(positions(f.deletion_vector, base, fs), f.rows))
