"""The deletes a Milvus persisted of one vchannel, written as delete binlogs of DeltaNode's delta_log.

Runs on executors (one task for the vchannel: its deltalogs are read together, so a delete that
Milvus put in several segments' deltalogs, each segment whose key filter may hold the key, is
written once). The insert files an import writes already carry these deletes as deletion vectors;
delta_log keeps, as for every delete DeltaNode reads from the stream, the record of each: its key,
timestamp and partition (the deltalog's segment's, -1 for an L0 segment of every partition).

Only deletes in ``(after_ts, upto_ts]`` are written: those past Milvus's channel checkpoint
(``upto_ts``) are read again from the stream, which records them; ``after_ts`` is where an earlier
attempt of the same import left delta_log (a crash between its delta_log and insert_log commits).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..delta.layout import StorageLayout
from ..executor.binlog_writer import BinlogWriter
from ..records import FileEntry
from ..wire.schema import CollectionLayout
from .binlog_format import DELETE_EVENT, BinlogFormatError, read_binlog
from .columns import delete_rows
from .source import FileGone, read_file


@dataclass(frozen=True, kw_only=True)
class DeltalogFile:
    path: str
    partition_id: int      # the partition its deletes are of (-1: every partition)
    may_be_gone: bool      # a dropped segment's: Milvus's garbage collector may have removed it


@dataclass(frozen=True, kw_only=True)
class DeleteImport:
    storage: StorageLayout
    source: StorageLayout
    collection_id: int
    schema: bytes
    deltalogs: tuple[DeltalogFile, ...]
    after_ts: int
    upto_ts: int


@dataclass(frozen=True, kw_only=True)
class ImportedDeletes:
    entries: tuple[FileEntry, ...] = ()
    rows: int = 0
    gone: str = ""
    error: str = ""


def import_deletes(task: DeleteImport) -> ImportedDeletes:
    layout = CollectionLayout.from_bytes(task.schema)
    pk = layout.primary_key
    parts = []
    try:
        for f in task.deltalogs:
            try:
                data = read_file(task.source, f.path)
            except FileGone:
                if f.may_be_gone:
                    continue
                raise
            _, values = read_binlog(data, where=f.path, event=DELETE_EVENT)
            keys, stamps = delete_rows(values, pk, where=f.path)
            parts.append(pa.table({"key": keys, "ts": stamps,
                                   "partition": pa.array([f.partition_id] * len(keys), pa.int64())}))
    except FileGone as e:
        return ImportedDeletes(gone=str(e))
    except (BinlogFormatError, pa.ArrowInvalid) as e:
        return ImportedDeletes(error=str(e))
    if not parts:
        return ImportedDeletes()
    table = pa.concat_tables(parts)
    table = table.filter(pc.and_(pc.greater(table.column("ts"), task.after_ts),
                                 pc.less_equal(table.column("ts"), task.upto_ts)))
    table = table.group_by(["key", "ts", "partition"]).aggregate([])   # once each
    if not len(table):
        return ImportedDeletes()
    writer = BinlogWriter(task.storage, task.collection_id, layout.insert_schema(), layout.delete_schema())
    try:
        for partition in pc.unique(table.column("partition")).to_pylist():
            rows = table.filter(pc.equal(table.column("partition"), partition))
            writer.add_delete(partition, rows.column("key").combine_chunks(), rows.column("ts").combine_chunks())
        return ImportedDeletes(entries=tuple(writer.close()), rows=len(table))
    except BaseException:
        writer.abort()
        raise
