"""Opening and creating DeltaNode's Delta tables."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from .layout import TABLE_CONFIG


def open_table(uri: str) -> DeltaTable | None:
    try:
        return DeltaTable(uri)
    except TableNotFoundError:
        return None


def open_or_create(uri: str, schema: pa.Schema) -> DeltaTable:
    """Open ``uri``, creating it with ``schema`` if absent (safe when several writers race)."""
    table = open_table(uri)
    if table is not None:
        return table
    try:
        return DeltaTable.create(uri, schema, mode="ignore", configuration=TABLE_CONFIG)
    except DeltaError:
        table = open_table(uri)  # another writer created it between our check and create
        if table is None:
            raise
        return table
