"""Opening and creating DeltaNode's Delta tables."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from .layout import TABLE_CONFIG


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
