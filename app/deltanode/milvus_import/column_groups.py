"""The rows of a segment Milvus persisted in storage version 2: its column groups joined by row order.

A segment of storage version 2 (Milvus 2.6's default) keeps a Parquet file per column group per
sync (``insert_log/{coll}/{part}/{seg}/{group}/{log}``): group 0 holds RowID, Timestamp, the
primary key and the partition and clustering keys, each vector and Text field a group of its
own, the other fields one more group (docs/milvus-facts.md §10). The i-th file of every group
holds the same rows in the same order, so one sync's rows are the i-th files' columns side by
side. Every file's footer is checked against the meta (its fields, its rows) and the groups of
a sync must hold the same number of rows; anything else is refused, naming the file. A nullable
field no group holds was added to the live collection after the segment was written: it reads as
null in every row, as Milvus reads it; a field that is not nullable must be held.

Runs on executors.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..delta.layout import StorageLayout
from ..wire.schema import CollectionLayout, DataType, FieldSpec
from .binlog_format import BinlogFormatError
from .column_group_format import ColumnGroupFile, open_column_group
from .columns import ROW_ID, TIMESTAMP, added_later, insert_column, struct_array_column
from .meta import PersistedSegment
from .source import read_file


@dataclass(frozen=True, kw_only=True)
class GroupFiles:
    """The files of one column group that a step of the import reads together, with the rows the
    meta lists for each.

    Runs on executors."""

    group_id: int
    paths: tuple[str, ...]
    rows: tuple[int | None, ...]
    child_fields: tuple[int, ...]


def _plan(segment: PersistedSegment) -> list[list[GroupFiles]]:
    """The steps of the segment's import: a sync's files of every group at a time when every group
    lists as many files, else each group's files whole at once."""
    seg = segment.segment_id
    if not segment.binlogs:
        raise BinlogFormatError(f"segment {seg}: storage version 2 but no column group listed")
    children, entries = dict(segment.child_fields), dict(segment.entries)

    def files(group: int, paths: tuple[str, ...], at: slice) -> GroupFiles:
        rows = entries.get(group, ())
        listed = tuple(rows[at]) if len(rows) == len(paths) else (None,) * len(paths[at])
        return GroupFiles(group_id=group, paths=paths[at], rows=listed, child_fields=children.get(group, ()))

    counts = {len(paths) for _, paths in segment.binlogs}
    if len(counts) == 1:
        return [[files(g, paths, slice(i, i + 1)) for g, paths in segment.binlogs] for i in range(counts.pop())]
    return [[files(g, paths, slice(None)) for g, paths in segment.binlogs]]


def _needed(layout: CollectionLayout) -> list[int]:
    """The field ids whose columns the insert table is made of (a struct array's: its sub-fields')."""
    ids = [ROW_ID.field_id, TIMESTAMP.field_id]
    for spec in layout.fields:
        ids.extend(sub.field_id for sub in spec.sub_fields) if spec.data_type == DataType.ArrayOfStruct \
            else ids.append(spec.field_id)
    return ids


def _added_later(layout: CollectionLayout, stored: dict[int, int]) -> frozenset[int]:
    """The nullable fields (a struct array: by its own id) of which no group holds anything
    (``stored``: field id -> its group): added to the live collection after the segment was
    written."""
    out = set()
    for spec in layout.fields:
        ids = [sub.field_id for sub in spec.sub_fields] if spec.data_type == DataType.ArrayOfStruct \
            else [spec.field_id]
        if spec.nullable and not any(i in stored for i in ids):
            out.update([spec.field_id, *ids])
    return frozenset(out)


def _open(source: StorageLayout, group: GroupFiles) -> list[ColumnGroupFile]:
    return [open_column_group(read_file(source, path), where=path, child_fields=group.child_fields, rows=rows)
            for path, rows in zip(group.paths, group.rows)]


def _step_table(segment: PersistedSegment, source: StorageLayout, layout: CollectionLayout,
                step: list[GroupFiles]) -> pa.Table:
    """One step's rows: every group's files opened and checked, the needed columns read and converted."""
    opened = {g.group_id: _open(source, g) for g in step}
    rows = {g: sum(file.rows for file in fs) for g, fs in opened.items()}
    if len(set(rows.values())) != 1:
        held = ", ".join(f"group {g} ({', '.join(file.path for file in opened[g])}): {n}" for g, n in rows.items())
        raise BinlogFormatError(f"segment {segment.segment_id}: its column groups hold different numbers of rows, "
                                f"{held}; they join by row order, so they must agree")
    where: dict[int, int] = {}     # field id -> the group holding it
    for g, fs in opened.items():
        for other in fs[1:]:
            if other.field_ids != fs[0].field_ids:
                raise BinlogFormatError(f"segment {segment.segment_id}: the files of column group {g} hold different "
                                        f"fields: {list(fs[0].field_ids)} in {fs[0].path}, {list(other.field_ids)} in "
                                        f"{other.path}")
        for field_id in fs[0].field_ids if fs else ():
            if field_id in where:
                raise BinlogFormatError(f"segment {segment.segment_id}: field {field_id} is in column groups "
                                        f"{where[field_id]} and {g} ({fs[0].path})")
            where[field_id] = g
    absent = _added_later(layout, where)
    needed = [f for f in _needed(layout) if f not in absent]
    missing = [f for f in needed if f not in where]
    if missing:
        raise BinlogFormatError(f"segment {segment.segment_id}: no column group of {sorted(opened)} holds field(s) "
                                f"{missing} ({', '.join(fs[0].path for fs in opened.values() if fs)})")
    values: dict[int, pa.Array] = {}
    paths: dict[int, str] = {}     # field id -> the file(s) its values come from, for the errors
    for g, fs in opened.items():
        ids = [field_id for field_id in needed if where[field_id] == g]
        parts = [file.columns(ids) for file in fs]
        for field_id in ids:
            chunks = [part[field_id] for part in parts]
            values[field_id] = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
            paths[field_id] = ", ".join(file.path for file in fs)

    n = next(iter(rows.values()))

    def column(spec: FieldSpec) -> pa.Array:
        if spec.field_id in absent:
            return added_later(spec, n)
        if spec.data_type == DataType.ArrayOfStruct:
            subs = [sub.field_id for sub in spec.sub_fields]
            return struct_array_column(spec, [values[s] for s in subs], where=paths[subs[0]])
        return insert_column(spec, values[spec.field_id], where=paths[spec.field_id])

    specs = [*layout.fields, TIMESTAMP, ROW_ID]   # the insert schema's order, but segment and partition
    return pa.Table.from_arrays([column(s) for s in specs], names=[s.name for s in specs])


def packed_syncs(segment: PersistedSegment, source: StorageLayout, layout: CollectionLayout) -> Iterator[pa.Table]:
    """The segment's rows, one table a step (a sync when the groups' files line up), with the
    insert schema's columns but segment and partition."""
    for step in _plan(segment):
        yield _step_table(segment, source, layout, step)
