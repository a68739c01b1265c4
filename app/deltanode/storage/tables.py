"""Opening, creating and reading DeltaNode's Delta tables."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError
from pyarrow import fs as pafs

from .layout import TABLE_CONFIG, StorageLayout


def open_table(uri: str, storage_options: dict[str, str] | None = None, version: int | None = None) -> DeltaTable | None:
    """``storage_options``: delta-rs's, for an object store (``StorageLayout.delta_options``);
    ``version``: that version of the table (default: the newest)."""
    try:
        return DeltaTable(uri, version=version, storage_options=storage_options)
    except TableNotFoundError:
        return None


def open_or_create(uri: str, schema: pa.Schema, storage_options: dict[str, str] | None = None) -> DeltaTable:
    """Open ``uri``, creating it with ``schema`` if absent (safe when several writers race)."""
    table = open_table(uri, storage_options)
    if table is not None:
        return table
    try:
        return DeltaTable.create(uri, schema, mode="ignore", configuration=TABLE_CONFIG,
                                 storage_options=storage_options)
    except DeltaError:
        table = open_table(uri, storage_options)  # another writer created it between our check and create
        if table is None:
            raise
        return table


def read_table(storage: StorageLayout, uri: str, columns: list[str] | None = None,
               version: int | None = None) -> pa.Table | None:
    """The rows of the table at ``uri`` (None when there is none yet), read through pyarrow's own
    filesystem for ``uri``. Not ``DeltaTable.to_pyarrow_table()``: that reads through delta-rs's
    filesystem, and a process that did so aborts at its exit in most runs (docs/platform.md)."""
    table = open_table(uri, storage.delta_options(uri), version)
    if table is None:
        return None
    fs, path = storage.filesystem(uri)
    return table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(path, fs)).to_table(columns=columns)
