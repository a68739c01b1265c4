"""Executor side of a sync: split a task's record batches by kind and write binlog files.

Insert rows go to one parquet file per segment per task (under
``{partition}/{segment}/`` in the insert_log table, the Milvus binlog path shape); delete
rows to one file per partition per task in delta_log (so the driver can retract a
partition's deletes, see ``state_update.retract_after_drops``); quarantine rows to the
quarantine table. Files are written incrementally (row group by row group), so a task's memory does not grow with the
size of its offset range. Nothing is visible to readers until the driver commits the files.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..flowgraph import handoff
from ..flowgraph.records import DELETE, EVENT, INSERT, QUARANTINE, from_ipc
from .layout import QUARANTINE_SCHEMA, filesystem

INSERT_TABLE, DELETE_TABLE, QUARANTINE_TABLE = "insert", "delete", "quarantine"


@dataclass
class FileEntry:
    """A written, not yet committed, binlog file."""

    table: str
    path: str          # relative to the table root
    size: int
    rows: int
    stats: str         # Delta add-action stats JSON
    segment_id: int = -1
    partition_id: int = -1


@dataclass
class SegmentStats:
    partition_id: int
    rows: int = 0
    min_ts: int = 0
    max_ts: int = 0
    first_offset: int = -1
    first_ts: int = 0


@dataclass
class TaskResult:
    """What one task hands to the driver: files, per-segment counts and control events."""

    files: list[FileEntry] = field(default_factory=list)
    segments: dict[int, SegmentStats] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)


class _File:
    def __init__(self, table: str, root: str, rel: str, schema: pa.Schema, stat_cols: list[str],
                 segment_id: int = -1, partition_id: int = -1) -> None:
        self.fs, base = filesystem(root)
        self.table, self.rel = table, rel
        self.path = f"{base}/{rel}"
        self.fs.create_dir(self.path.rsplit("/", 1)[0], recursive=True)
        self.segment_id, self.partition_id = segment_id, partition_id
        self.stat_cols = stat_cols
        self.writer = pq.ParquetWriter(self.fs.open_output_stream(self.path), schema, compression="snappy",
                                       write_statistics=stat_cols, use_dictionary=stat_cols)
        self.rows = 0
        self.min: dict = {}
        self.max: dict = {}

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)
        self.rows += batch.num_rows
        for col in self.stat_cols:
            mm = pc.min_max(batch.column(col))
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is not None:
                self.min[col] = lo if col not in self.min else min(self.min[col], lo)
                self.max[col] = hi if col not in self.max else max(self.max[col], hi)

    def close(self) -> FileEntry:
        self.writer.close()
        size = self.fs.get_file_info(self.path).size
        stats = json.dumps({"numRecords": self.rows, "minValues": self.min, "maxValues": self.max,
                            "nullCount": {c: 0 for c in self.min}})
        return FileEntry(self.table, self.rel, size, self.rows, stats, self.segment_id, self.partition_id)


class BinlogWriter:
    """Writes one task's rows; ``close()`` returns the TaskResult for the driver."""

    def __init__(self, insert_root: str, delete_root: str, quarantine_root: str,
                 insert_schema: pa.Schema, delete_schema: pa.Schema) -> None:
        self.roots = {INSERT_TABLE: insert_root, DELETE_TABLE: delete_root, QUARANTINE_TABLE: quarantine_root}
        self.insert_schema, self.delete_schema = insert_schema, delete_schema
        self.task_id = uuid.uuid4().hex
        self._segments: dict[int, _File] = {}
        self._deletes: dict[int, _File] = {}
        self._quarantine: _File | None = None
        self.result = TaskResult()

    def _name(self) -> str:
        return f"part-{self.task_id}-{uuid.uuid4().hex[:8]}.parquet"

    def add(self, batch: pa.RecordBatch) -> None:
        """Take one batch of message rows (``flowgraph.records``)."""
        kinds = batch.column("_kind").to_pylist()
        offsets = batch.column("_offset").to_pylist()
        segments = batch.column("_segment_id").to_pylist()
        partitions = batch.column("_partition_id").to_pylist()
        min_ts, max_ts = batch.column("_min_ts").to_pylist(), batch.column("_max_ts").to_pylist()
        events, payloads = batch.column("_event"), batch.column("_payload")
        handoffs = batch.column("_handoff").to_pylist()

        def payload(i: int) -> pa.Buffer:
            return handoff.take(handoffs[i]) if handoffs[i] else payloads[i].as_buffer()

        for i, kind in enumerate(kinds):
            if kind == INSERT:
                self._add_insert(segments[i], partitions[i], from_ipc(payload(i), self.insert_schema),
                                 offsets[i], min_ts[i], max_ts[i])
            elif kind == DELETE:
                self._add_delete(partitions[i], from_ipc(payload(i), self.delete_schema))
            elif kind == EVENT:
                self.result.events.append(json.loads(events[i].as_py()))
            elif kind == QUARANTINE:
                self._add_quarantine(offsets[i], json.loads(events[i].as_py()), payloads[i].as_py())

    def _add_insert(self, seg: int, part_id: int, batch: pa.RecordBatch, offset: int, lo: int, hi: int) -> None:
        f = self._segments.get(seg)
        if f is None:
            f = self._segments[seg] = _File(INSERT_TABLE, self.roots[INSERT_TABLE], f"{part_id}/{seg}/{self._name()}",
                                            self.insert_schema, ["_ts", "_row_id", "_segment_id", "_partition_id"],
                                            seg, part_id)
        f.write(batch)
        st = self.result.segments.get(seg)
        if st is None:
            st = self.result.segments[seg] = SegmentStats(part_id, 0, lo, hi, offset, lo)
        st.rows += batch.num_rows
        st.min_ts, st.max_ts = min(st.min_ts, lo), max(st.max_ts, hi)
        if offset < st.first_offset:
            st.first_offset, st.first_ts = offset, lo

    def _add_delete(self, part_id: int, batch: pa.RecordBatch) -> None:
        f = self._deletes.get(part_id)
        if f is None:
            f = self._deletes[part_id] = _File(DELETE_TABLE, self.roots[DELETE_TABLE], self._name(), self.delete_schema,
                                               ["_ts", "_partition_id"], partition_id=part_id)
        f.write(batch)

    def _add_quarantine(self, offset: int, doc: dict, payload: bytes) -> None:
        if self._quarantine is None:
            self._quarantine = _File(QUARANTINE_TABLE, self.roots[QUARANTINE_TABLE], self._name(),
                                     QUARANTINE_SCHEMA, ["offset"])
        self._quarantine.write(pa.RecordBatch.from_pydict({
            "vchannel": [doc["vchannel"]], "pchannel": [doc["pchannel"]], "partition": [doc["partition"]],
            "offset": [offset], "msg_type": [doc["msg_type"]], "reason": [doc["reason"]], "payload": [payload],
            "recorded_at_ms": [int(time.time() * 1000)]}, schema=QUARANTINE_SCHEMA))

    def close(self) -> TaskResult:
        for f in [*self._segments.values(), *self._deletes.values(), self._quarantine]:
            if f is not None:
                self.result.files.append(f.close())
        return self.result
