"""A mirrored collection as its readers see it: the insert table with its deletion vectors
applied (``storage.tables.read_table``), as Spark, DuckDB, Polars and delta-rs read it. That is
what ``admin verify`` holds against Milvus, row for row: a row stored twice is read twice.

Not ``storage.current_state.current_rows``: that derives the state from every row ever inserted
and the delete table by Milvus's rules, past the deletion vectors, and keeps one row per key, so
a row read twice, or one a deletion vector hides, would not show there.

A field Milvus's meta has and the table does not have yet (a field added to the live collection:
DeltaNode widens the table at the first commit after it reads the change) is null in every row,
as the table's readers read the rows written before it, and as Milvus answers those rows."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from ..delta.layout import StorageLayout
from ..delta.tables import open_table, read_table
from ..wire.schema import CollectionLayout, arrow_type

Key = int | str


class MirrorTable:
    """One collection's insert table, read once for its keys and once more, when rows are asked
    for, for every field. Runs in the admin command's process (no Spark)."""

    def __init__(self, *, storage: StorageLayout, collection_id: int, layout: CollectionLayout) -> None:
        self.storage, self.layout = storage, layout
        self.uri = storage.insert_log(collection_id)
        self._keys: list[Key] | None = None
        self._rows: pa.Table | None = None
        self._positions: dict[Key, list[int]] | None = None

    def keys(self) -> list[Key]:
        """The primary key of every row, as often as the table holds it."""
        if self._keys is None:
            pk = self.layout.primary_key.name
            table = read_table(self.storage, self.uri, [pk])
            self._keys = table.column(pk).to_pylist() if table is not None else []
        return self._keys

    def rows(self, keys: list[Key]) -> dict[Key, list[dict]]:
        """Every row of ``keys`` (each field by its name), by key."""
        if self._positions is None:
            self._rows = self._read_fields()
            positions: dict[Key, list[int]] = defaultdict(list)
            pk = self.layout.primary_key.name
            for i, key in enumerate(self._rows.column(pk).to_pylist() if len(self._rows) else []):
                positions[key].append(i)
            self._positions = positions
        assert self._rows is not None
        wanted = [(key, i) for key in keys for i in self._positions.get(key, ())]
        taken = self._rows.take([i for _, i in wanted]).to_pylist() if wanted else []
        out: dict[Key, list[dict]] = defaultdict(list)
        for (key, _), row in zip(wanted, taken):
            out[key].append(row)
        return out

    def _read_fields(self) -> pa.Table:
        """Every row, a column a field of the layout (one the table lacks: null); an empty table when
        there is no table yet."""
        delta = open_table(self.uri, self.storage.delta_options(self.uri))
        if delta is None:
            return pa.table({})
        present = {f.name for f in delta.schema().fields}
        stored = [f.name for f in self.layout.fields if f.name in present]
        table = read_table(self.storage, self.uri, stored)
        if table is None:
            return pa.table({})
        return pa.table({f.name: table.column(f.name) if f.name in present else pa.nulls(len(table), arrow_type(f))
                         for f in self.layout.fields})
