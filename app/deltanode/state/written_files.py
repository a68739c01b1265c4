"""Where a collection's written files live by table, and removing one that no commit will add.

Executors write binlog files under these roots (``executor.binlog_writer``); the driver's commit
removes the files of a batch it refuses or abandons (``state.commit``). Runs on either.
"""

from __future__ import annotations

from ..delta.layout import StorageLayout, pk_bloom_path
from ..records import FileEntry, TableKind


def table_roots(storage: StorageLayout, collection_id: int) -> dict[TableKind, str]:
    """The root of each table kind's files."""
    return {TableKind.INSERT: storage.insert_log(collection_id), TableKind.DELETE: storage.delta_log(collection_id),
            TableKind.REPLAYED_DELETES: storage.delta_log(collection_id), TableKind.QUARANTINE: storage.quarantine()}


def delete_written(storage: StorageLayout, root: str, entry: FileEntry) -> None:
    """Delete a written file, and its bloom filter if it is an insert binlog; missing ones are no error."""
    fs, base = storage.filesystem(root)
    paths = [entry.path, pk_bloom_path(entry.path)] if entry.table == TableKind.INSERT else [entry.path]
    for path in paths:
        try:
            fs.delete_file(f"{base}/{path}")
        except FileNotFoundError:
            pass
