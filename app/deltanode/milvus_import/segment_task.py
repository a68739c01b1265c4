"""One segment a Milvus persisted, written as one binlog file of DeltaNode's insert_log.

Runs on executors. A task reads the segment's insert binlogs from Milvus's storage one sync at a
time (binlog ``i`` of every field holds the same rows: Milvus writes a sync's fields together),
or, for a segment of storage version 2, its column groups' files (``column_groups``), turns each
field into DeltaNode's column (``columns.insert_column``) and writes the rows, with
Milvus's segment id, partition, timestamps and row ids, through the same writer compaction uses
(stats, primary-key bloom filter). A nullable field the segment holds nothing of (added to the
live collection after the segment was written) is null in every row. The deletes that apply to
the segment (its deltalogs, and in 2.4 those of the L0 segments of its partition) mark rows by
Milvus's rule, a row of key K at ts t is deleted by a delete of K at T > t (docs/milvus-facts.md
§8): they become the file's deletion vector, so Milvus's deleted rows stay readable as history
and its current state is the table's.

A file that is gone (Milvus's compaction or garbage collector removed it since the meta was read)
ends the task with ``gone`` set, not an exception: the driver reads the meta again and retries,
and Spark does not retry a task that would fail the same way. What it wrote is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..delta.deletion_vectors import DeletionVector, inline
from ..delta.layout import StorageLayout
from ..executor.binlog_writer import write_segment_file
from ..records import FileEntry
from ..wire.milvus_proto import schema_pb2
from ..wire.schema import CollectionLayout, FieldSpec
from .binlog_format import DELETE_EVENT, INSERT_EVENT, BinlogFormatError, read_binlog
from .column_groups import packed_syncs
from .columns import ROW_ID, TIMESTAMP, added_later, check_descriptor, delete_rows, insert_column
from .meta import PersistedSegment
from .source import FileGone, read_file

ORIGIN = "milvus"   # the name's tail of the files an import writes


@dataclass(frozen=True, kw_only=True)
class SegmentImport:
    """A segment to import: where its files are (``source``: Milvus's storage root) and where it goes."""

    storage: StorageLayout
    source: StorageLayout
    collection_id: int
    schema: bytes                    # the collection's serialized CollectionSchema
    segment: PersistedSegment
    deltalogs: tuple[str, ...]       # every deltalog whose deletes apply to the segment


@dataclass(frozen=True, kw_only=True)
class ImportedSegment:
    """What a task did: its file (None when the segment has no rows), or why it did nothing."""

    segment_id: int
    entry: FileEntry | None = None
    deletion_vector: DeletionVector | None = None
    rows: int = 0
    deleted: int = 0
    gone: str = ""                   # a file that no longer exists: read the meta again
    error: str = ""                  # a file that cannot be read as Milvus's format


def _latest_deletes(task: SegmentImport, pk: FieldSpec) -> pa.Table | None:
    """Each deleted key with its latest delete ts (``key``, ``ts``), None when there is none."""
    keys, stamps = [], []
    for path in task.deltalogs:
        _, values = read_binlog(read_file(task.source, path), where=path, event=DELETE_EVENT)
        k, t = delete_rows(values, pk, where=path)
        keys.append(k)
        stamps.append(t)
    if not keys or not sum(len(k) for k in keys):
        return None
    table = pa.table({"key": pa.concat_arrays(keys), "ts": pa.concat_arrays(stamps)})
    latest = table.group_by("key").aggregate([("ts", "max")])
    return pa.table({"key": latest.column("key"), "ts": latest.column("ts_max")})


def _deleted(keys: pa.Array, stamps: pa.Array, deletes: pa.Table | None) -> np.ndarray:
    """Positions of the rows a delete removes: one of the key at a later ts."""
    if deletes is None:
        return np.empty(0, np.int64)
    at = pc.index_in(keys, value_set=deletes.column("key"))
    later = pc.take(deletes.column("ts"), at)
    hit = pc.fill_null(pc.less(stamps, later), False)
    return np.flatnonzero(hit.to_numpy(zero_copy_only=False))


def _syncs(task: SegmentImport, layout: CollectionLayout):
    """The segment's rows, one table per sync (binlog index), with the insert schema's columns
    but its segment and partition; the RowID/Timestamp binlogs become ``_row_id``/``_ts``. A
    nullable field without binlogs was added to the live collection after the segment was
    written: null in every row (``columns.added_later``)."""
    if task.segment.packed:
        yield from packed_syncs(task.segment, task.source, layout)
        return
    by_field = dict(task.segment.binlogs)
    specs = [*layout.fields, TIMESTAMP, ROW_ID]   # the insert schema's order, but segment and partition
    missing = [s.field_id for s in specs if s.field_id not in by_field and not s.nullable]
    if missing:
        raise BinlogFormatError(f"segment {task.segment.segment_id}: no binlogs of field(s) {missing}")
    stored = [s for s in specs if s.field_id in by_field]
    counts = {len(by_field[s.field_id]) for s in stored}
    groups = range(counts.pop()) if len(counts) == 1 else None
    names = [s.name for s in specs]

    def column(spec: FieldSpec, paths: tuple[str, ...]) -> pa.Array:
        values = []
        for path in paths:
            desc, raw = read_binlog(read_file(task.source, path), where=path, event=INSERT_EVENT)
            check_descriptor(desc, spec, where=path)
            values.append(insert_column(spec, raw, where=path))
        return pa.concat_arrays(values) if len(values) > 1 else values[0]

    plan = [tuple((by_field[s.field_id][i],) for s in stored) for i in groups] if groups is not None else \
        [tuple(by_field[s.field_id] for s in stored)]   # unaligned lists: the fields whole, at once
    for paths in plan:
        read = {s.field_id: column(s, p) for s, p in zip(stored, paths)}
        lengths = {len(c) for c in read.values()}
        if len(lengths) != 1:
            raise BinlogFormatError(f"segment {task.segment.segment_id}: its fields' binlogs {paths} hold "
                                    f"different numbers of rows {sorted(lengths)}")
        n = lengths.pop()
        yield pa.Table.from_arrays([read[s.field_id] if s.field_id in read else added_later(s, n) for s in specs],
                                   names=names)


def _newer_fields(task: SegmentImport) -> list[int]:
    """The fields the segment's meta says it holds that the import's schema does not have: the
    segment was written after a field was added that the schema DeltaNode was given does not know
    yet (Milvus broadcasts the change before it saves the collection's meta)."""
    seg = task.segment
    held = {f for _, ids in seg.child_fields for f in ids} if seg.packed else {f for f, _ in seg.binlogs}
    schema = schema_pb2.CollectionSchema.FromString(task.schema)
    known = {ROW_ID.field_id, TIMESTAMP.field_id, *(f.fieldID for f in schema.fields)}
    for struct in schema.struct_array_fields:
        known.update([struct.fieldID, *(f.fieldID for f in struct.fields)])
    return sorted(held - known)


def import_segment(task: SegmentImport) -> ImportedSegment:
    """Write the segment's rows as one binlog file, with its deletion vector. A segment holding a
    field the schema lacks is refused (``error``): its rows would be written without it."""
    seg = task.segment
    newer = _newer_fields(task)
    if newer:
        version = schema_pb2.CollectionSchema.FromString(task.schema).version
        return ImportedSegment(segment_id=seg.segment_id, error=(
            f"segment {seg.segment_id} holds field(s) {newer} that the collection's schema (version {version}) "
            f"does not have: a field added to the live collection that Milvus's meta did not show yet"))
    layout = CollectionLayout.from_bytes(task.schema)
    schema = layout.insert_schema()
    pk = layout.primary_key
    deleted_at: list[np.ndarray] = []
    written = 0

    def tables():
        nonlocal written
        for table in _syncs(task, layout):
            deleted_at.append(_deleted(table.column(pk.name).combine_chunks(), table.column("_ts").combine_chunks(),
                                       deletes) + written)
            written += len(table)
            yield table

    try:
        deletes = _latest_deletes(task, pk)
        if seg.rows == 0 and not any(paths for _, paths in seg.binlogs):
            return ImportedSegment(segment_id=seg.segment_id)
        entry = write_segment_file(task.storage, task.collection_id, schema, pk.name, seg.segment_id,
                                   seg.partition_id, tables(), origin=ORIGIN)
    except FileGone as e:
        return ImportedSegment(segment_id=seg.segment_id, gone=str(e))
    except (BinlogFormatError, pa.ArrowInvalid) as e:
        return ImportedSegment(segment_id=seg.segment_id, error=str(e))
    positions = np.concatenate(deleted_at) if deleted_at else np.empty(0, np.int64)
    return ImportedSegment(segment_id=seg.segment_id, entry=entry, rows=entry.rows, deleted=int(positions.size),
                           deletion_vector=inline(positions) if positions.size else None)
