"""Executor side of a sync: write one vchannel's rows of one task as binlog files.

Insert rows go to one parquet file per segment per task (under ``{partition}/{segment}/`` in
the insert_log table, the Milvus binlog path shape); delete rows to one file per partition
per task in delta_log (so the driver can retract a partition's deletes after a drop);
quarantine rows to the quarantine table. Files are written as rows arrive (a row group per
message), so a task's memory does not grow with its offset range. Nothing is visible to
readers until the driver commits the files.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .layout import QUARANTINE_SCHEMA, StorageLayout, filesystem

INSERT_TABLE, DELETE_TABLE, QUARANTINE_TABLE = "insert", "delete", "quarantine"
ROW_GROUP_BYTES = 4 << 20
# Embeddings do not compress: snappy saved 3% of a 128-dim FloatVector file and took a fifth
# of the time a 150-row file takes to write (docs/platform.md). Vector columns are written plain.
VECTOR_TYPES = (pa.list_(pa.float32()), pa.binary())
_made_dirs: set[str] = set()   # per Python worker: each directory is created once


@dataclass(frozen=True)
class FileEntry:
    """A written, not yet committed, binlog file."""

    table: str         # INSERT_TABLE, DELETE_TABLE or QUARANTINE_TABLE
    path: str          # relative to the table root
    size: int
    rows: int
    stats: str         # Delta add-action stats JSON
    segment_id: int = -1
    partition_id: int = -1


@dataclass
class SegmentStats:
    """Rows one task wrote into one segment, and where the first of them was read."""

    partition_id: int
    rows: int = 0
    min_ts: int = 0
    max_ts: int = 0
    first_offset: int = -1
    first_ts: int = 0


@dataclass(frozen=True)
class QuarantineRow:
    vchannel: str
    pchannel: str
    partition: int
    offset: int
    msg_type: int | None
    reason: str
    payload: bytes


class _File:
    def __init__(self, table: str, root: str, rel: str, schema: pa.Schema, stat_cols: list[str],
                 segment_id: int = -1, partition_id: int = -1, plain: frozenset[str] = frozenset()) -> None:
        self.fs, base = filesystem(root)
        self.table, self.rel, self.schema = table, rel, schema
        self.path = f"{base}/{rel}"
        self.segment_id, self.partition_id = segment_id, partition_id
        self.stat_cols = stat_cols
        compression = {f.name: "none" if f.name in plain else "snappy" for f in schema}
        self.writer = pq.ParquetWriter(self._open(), schema, compression=compression,
                                       write_statistics=stat_cols, use_dictionary=stat_cols)
        self.rows = 0
        self.min: dict = {}
        self.max: dict = {}
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0

    def _open(self):
        parent = self.path.rsplit("/", 1)[0]
        if parent not in _made_dirs:
            self.fs.create_dir(parent, recursive=True)
            _made_dirs.add(parent)
        try:
            return self.fs.open_output_stream(self.path)
        except FileNotFoundError:   # removed since this worker created it
            self.fs.create_dir(parent, recursive=True)
            return self.fs.open_output_stream(self.path)

    def write(self, batch: pa.RecordBatch) -> None:
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        if self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        group = pa.Table.from_batches(self._pending, self.schema)
        self._pending, self._pending_bytes = [], 0
        self.writer.write_table(group)
        self.rows += group.num_rows
        for col in self.stat_cols:
            mm = pc.min_max(group.column(col))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is not None:
                self.min[col] = lo if col not in self.min else min(self.min[col], lo)
                self.max[col] = hi if col not in self.max else max(self.max[col], hi)

    def close(self) -> FileEntry:
        self._flush()
        self.writer.close()
        size = self.fs.get_file_info(self.path).size
        stats = json.dumps({"numRecords": self.rows, "minValues": self.min, "maxValues": self.max,
                            "nullCount": {c: 0 for c in self.min}})
        return FileEntry(self.table, self.rel, size, self.rows, stats, self.segment_id, self.partition_id)


class BinlogWriter:
    """Writes one vchannel's rows of one task; ``close()`` returns its files and segment counts."""

    def __init__(self, storage: StorageLayout, collection_id: int, insert_schema: pa.Schema,
                 delete_schema: pa.Schema) -> None:
        self.roots = {INSERT_TABLE: storage.insert_log(collection_id), DELETE_TABLE: storage.delta_log(collection_id),
                      QUARANTINE_TABLE: storage.quarantine()}
        self.insert_schema, self.delete_schema = insert_schema, delete_schema
        self._plain = frozenset(f.name for f in insert_schema if f.type in VECTOR_TYPES)
        self.task_id = uuid.uuid4().hex
        self._segments: dict[int, _File] = {}
        self._deletes: dict[int, _File] = {}
        self._quarantine: _File | None = None
        self.segments: dict[int, SegmentStats] = {}

    def _name(self) -> str:
        return f"part-{self.task_id}-{uuid.uuid4().hex[:8]}.parquet"

    def add_insert(self, segment: int, partition: int, rows: pa.RecordBatch, offset: int, min_ts: int,
                   max_ts: int) -> None:
        f = self._segments.get(segment)
        if f is None:
            f = self._segments[segment] = _File(INSERT_TABLE, self.roots[INSERT_TABLE],
                                                f"{partition}/{segment}/{self._name()}", self.insert_schema,
                                                ["_ts", "_row_id", "_segment_id", "_partition_id"], segment, partition,
                                                self._plain)
        f.write(rows)
        st = self.segments.get(segment)
        if st is None:
            st = self.segments[segment] = SegmentStats(partition, 0, min_ts, max_ts, offset, min_ts)
        st.rows += rows.num_rows
        st.min_ts, st.max_ts = min(st.min_ts, min_ts), max(st.max_ts, max_ts)
        if offset < st.first_offset:
            st.first_offset, st.first_ts = offset, min_ts

    def add_delete(self, partition: int, rows: pa.RecordBatch) -> None:
        f = self._deletes.get(partition)
        if f is None:
            f = self._deletes[partition] = _File(DELETE_TABLE, self.roots[DELETE_TABLE], self._name(),
                                                 self.delete_schema, ["_ts", "_partition_id"], partition_id=partition)
        f.write(rows)

    def add_quarantine(self, row: QuarantineRow) -> None:
        if self._quarantine is None:
            self._quarantine = _File(QUARANTINE_TABLE, self.roots[QUARANTINE_TABLE], self._name(),
                                     QUARANTINE_SCHEMA, ["offset"])
        self._quarantine.write(pa.RecordBatch.from_pydict({
            "vchannel": [row.vchannel], "pchannel": [row.pchannel], "partition": [row.partition],
            "offset": [row.offset], "msg_type": [row.msg_type], "reason": [row.reason], "payload": [row.payload],
            "recorded_at_ms": [int(time.time() * 1000)]}, schema=QUARANTINE_SCHEMA))

    def close(self) -> list[FileEntry]:
        return [f.close() for f in [*self._segments.values(), *self._deletes.values(), self._quarantine]
                if f is not None]

    def abort(self) -> None:
        """Close and delete what was written (the task failed for this vchannel)."""
        for f in self.close():
            fs, base = filesystem(self.roots[f.table])
            try:
                fs.delete_file(f"{base}/{f.path}")
            except FileNotFoundError:
                pass
