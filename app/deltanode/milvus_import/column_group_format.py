"""A column-group file of Milvus 2.6's storage version 2 -> its columns, by field id.

Milvus's packed writer (milvus-storage, called by the DataNode's sync and by compaction) writes
each column group of a segment as one Parquet file: the group's fields as columns named by the
field's name, each carrying its field id as the Parquet field id (Arrow's ``PARQUET:field_id``
metadata), nullable fields with real nulls, and three key-value entries Milvus's own reader
requires: ``group_field_id_list`` (every group's field ids, ``,`` within a group, ``;`` between
groups), ``row_group_metadata`` (``memory|rows|offset`` a row group, ``;`` between them) and
``storage_version`` (``1.0.0``). A file Milvus's reader would not take, or one that does not match
what the meta says of it, raises ``BinlogFormatError`` naming the file and the fault; the layout is
in docs/milvus-facts.md section 10.

Runs on executors: imports pyarrow only, no client library.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from .binlog_format import BinlogFormatError

FIELD_ID_KEY = b"PARQUET:field_id"
GROUP_FIELD_ID_LIST_KEY = b"group_field_id_list"
ROW_GROUP_META_KEY = b"row_group_metadata"
STORAGE_VERSION_KEY = b"storage_version"
PACKED_FILE_VERSION = "1.0.0"      # the only storage_version milvus-storage's Parquet writer puts in a file
_PLAIN_MAGIC, _ENCRYPTED_MAGIC = b"PAR1", b"PARE"


@dataclass(frozen=True, kw_only=True)
class ColumnGroupFile:
    """One column-group file's footer, checked: the fields it holds (in column order) and its rows.

    Runs on executors."""

    path: str
    field_ids: tuple[int, ...]
    names: tuple[str, ...]          # each field's column name (Milvus's field name)
    rows: int
    parquet: pq.ParquetFile

    def columns(self, field_ids: list[int]) -> dict[int, pa.Array]:
        """The columns of ``field_ids`` (each one of the file's), read in one pass."""
        if not field_ids:
            return {}
        at = {f: i for i, f in enumerate(self.field_ids)}
        try:
            table = self.parquet.read(columns=[self.names[at[f]] for f in field_ids], use_threads=False)
        except (pa.ArrowException, OSError) as e:
            raise _fail(self.path, f"columns do not read: {e}") from None
        return {f: table.column(i).combine_chunks() for i, f in enumerate(field_ids)}


def _fail(where: str, what: str) -> BinlogFormatError:
    return BinlogFormatError(f"{where or 'column group file'}: {what}")


def _kv(metadata: dict[bytes, bytes], key: bytes, where: str) -> str:
    value = metadata.get(key)
    if value is None:
        raise _fail(where, f"no {key.decode()!r} in the Parquet key-value metadata: not a column group "
                           "Milvus's packed writer made")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise _fail(where, f"{key.decode()!r} is not text") from None


def _id_groups(text: str, where: str) -> list[tuple[int, ...]]:
    try:
        return [tuple(int(f) for f in group.split(",") if f) for group in text.split(";") if group]
    except ValueError:
        raise _fail(where, f"group_field_id_list {text!r} is not field ids") from None


def _row_group_rows(text: str, where: str) -> int:
    """The rows ``row_group_metadata`` counts: ``memory|rows|offset`` a row group."""
    total = 0
    for entry in (e for e in text.split(";") if e):
        parts = entry.split("|")
        if len(parts) != 3 or not all(p.lstrip("-").isdigit() for p in parts):
            raise _fail(where, f"row_group_metadata entry {entry!r} is not memory|rows|offset")
        total += int(parts[1])
    return total


def open_column_group(data: bytes, *, where: str = "", child_fields: tuple[int, ...] = (),
                      rows: int | None = None) -> ColumnGroupFile:
    """The footer of a column group file, checked against what the meta says of it:
    ``child_fields`` (the group's fields; empty when the meta names none, as before 2.6) and
    ``rows`` (its binlog's ``entries_num``)."""
    if data[-4:] == _ENCRYPTED_MAGIC:
        raise _fail(where, "the Parquet file is encrypted (a Milvus encryption zone): encrypted column groups are "
                           "not supported")
    if len(data) < 12 or data[:4] != _PLAIN_MAGIC or data[-4:] != _PLAIN_MAGIC:
        raise _fail(where, f"not a Parquet file ({len(data)} bytes, starting {data[:4]!r}, ending {data[-4:]!r})")
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError) as e:
        raise _fail(where, f"not a readable Parquet file: {e}") from None
    kv = parquet.metadata.metadata or {}
    version = _kv(kv, STORAGE_VERSION_KEY, where)
    if version != PACKED_FILE_VERSION:
        raise _fail(where, f"packed file version {version!r}; DeltaNode reads version {PACKED_FILE_VERSION} "
                           "(milvus-storage's Parquet writer in Milvus 2.6)")
    ids = []
    for f in schema:
        raw = (f.metadata or {}).get(FIELD_ID_KEY)
        if raw is None or not raw.lstrip(b"-").isdigit():
            raise _fail(where, f"column {f.name!r} carries no Parquet field id (Milvus's packed writer gives every "
                               "column its field's id)")
        ids.append(int(raw))
    field_ids = tuple(ids)
    if len(set(field_ids)) != len(field_ids):
        raise _fail(where, f"a field id held by two columns: {list(field_ids)}")
    if field_ids not in _id_groups(_kv(kv, GROUP_FIELD_ID_LIST_KEY, where), where):
        raise _fail(where, f"its columns hold fields {list(field_ids)}, which group_field_id_list "
                           f"{kv[GROUP_FIELD_ID_LIST_KEY].decode()!r} names as no group")
    if child_fields and sorted(field_ids) != sorted(child_fields):
        raise _fail(where, f"its columns hold fields {sorted(field_ids)}; the segment's meta lists the group's fields "
                           f"as {sorted(child_fields)}")
    n = parquet.metadata.num_rows
    counted = _row_group_rows(_kv(kv, ROW_GROUP_META_KEY, where), where)
    if counted != n:
        raise _fail(where, f"row_group_metadata counts {counted} rows, the Parquet footer {n}")
    if rows is not None and rows != n:
        raise _fail(where, f"{n} rows; the segment's meta says {rows} (entries_num)")
    return ColumnGroupFile(path=where, field_ids=field_ids, names=tuple(schema.names), rows=n, parquet=parquet)
