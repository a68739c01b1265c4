"""Executor side of a sync: write one vchannel's rows of one task as binlog files.

Insert rows go to one parquet file per segment per task (under ``{partition}/{segment}/`` in
the insert_log table, the Milvus binlog path shape), each with a bloom filter of its primary
keys (Milvus's stats log: in its add action, or beside it when large, ``storage.pk_bloom``), so
that deletes find the files that may hold a key without reading them; delete rows to one file per partition per task in
delta_log (so the driver can retract a partition's deletes after a drop), and deletes a
replay reads again after their delta_log commit (a crash before the insert_log commit) to
files of their own that only mark rows and are never committed; quarantine rows to the
quarantine table. Rows are written as they arrive, in row groups of
``ROW_GROUP_BYTES``, so a task's memory does not grow with its offset range. Nothing is
visible to readers until the driver commits the files. On a filesystem root with
``storage.fsync``, a writer's files, and the directories their names are in, are fsynced
before it returns them (``storage.durable``): the commit that names them may follow at once.
"""

from __future__ import annotations

import functools
import itertools
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..delta import durable, json_codec
from ..delta.layout import QUARANTINE_SCHEMA, StorageLayout, pk_bloom_path
from ..delta.object_store import StoreOptions, is_object_store
from ..delta.pk_bloom import INLINE_MAX_KEYS, PkBloom
from ..records import FileEntry, QuarantineRow, SegmentStats, TableKind
from ..state.written_files import table_roots
from . import plain_parquet

ROW_GROUP_BYTES = 4 << 20
# Embeddings do not compress: snappy saved 3% of a 128-dim FloatVector file and took a fifth
# of the time a 150-row file takes to write (docs/platform.md). Vector columns are written plain:
# FloatVector, the binary ones (Binary/Float16/BFloat16Vector) and SparseFloatVector. An
# Array(Float) column has FloatVector's Arrow type and is written plain as well.
VECTOR_TYPES = (pa.list_(pa.float32()), pa.binary(), pa.map_(pa.int64(), pa.float32()))
# Statistics kept per table (Delta add-action stats, parquet column statistics), and the
# columns whose value is the same for a whole file (the last ones of their schema). System
# columns and the primary key (the first column of the delete schema), which are never null:
# every nullCount is 0.
INSERT_STATS = ("_ts", "_row_id", "_segment_id", "_partition_id")
INSERT_CONSTANTS = ("_segment_id", "_partition_id")
DELETE_STATS = ("_ts", "_partition_id")
DELETE_CONSTANTS = ("_partition_id",)


@dataclass(frozen=True)
class _FileFormat:
    """How one table's files are written: made once per schema in a Python worker, shared by
    every file of that table."""

    schema: pa.Schema
    stat_cols: tuple[str, ...]     # min/max in the add action's stats (and parquet statistics)
    compression: dict[str, str]
    constants: tuple[str, ...] = ()  # columns with one value per file, appended at flush
    bloom_key: str | None = None     # the column a bloom filter beside each file covers
    measured: tuple[tuple[str, int], ...] = ()   # (stat column, its place in a piece): the non-constant ones
    key_at: int = -1                 # the bloom key's place in a piece
    plain: plain_parquet.PlainEncoder | None = None   # a live binlog's encoder, when the schema is one it writes

    @staticmethod
    @functools.lru_cache(maxsize=1 << 15)   # more than a node's collections (see CollectionLayout.from_bytes)
    def of(schema: pa.Schema, stat_cols: tuple[str, ...], constants: tuple[str, ...] = (),
           bloom_key: str | None = None) -> _FileFormat:
        names = schema.names   # a piece holds the schema's columns but its constants (the last ones)
        measured = tuple((c, names.index(c)) for c in stat_cols if c not in constants)
        if bloom_key is not None and bloom_key not in stat_cols:
            raise ValueError(f"the filter's key {bloom_key!r} must be a stat column: its values are taken there")
        key_at = names.index(bloom_key) if bloom_key is not None else -1
        return _FileFormat(schema, stat_cols, _compression(schema), constants, bloom_key, measured, key_at,
                           plain_parquet.for_schema(schema))


def insert_format(insert_schema: pa.Schema, pk: str) -> _FileFormat:
    """An insert binlog's: stats of the system columns and the primary key, a bloom filter of the key."""
    return _FileFormat.of(insert_schema, (pk, *INSERT_STATS), INSERT_CONSTANTS, pk)


def delete_format(delete_schema: pa.Schema) -> _FileFormat:
    """A delete binlog's: stats of its key (its first column), ``_ts`` and the partition."""
    return _FileFormat.of(delete_schema, (delete_schema.names[0], *DELETE_STATS), DELETE_CONSTANTS)


def _compression(schema: pa.Schema) -> dict[str, str]:
    """The codec of each parquet leaf column: none for vectors, snappy for the rest.

    Keyed by leaf path: the values of a list or map column are leaves such as
    ``vec.list.element`` or ``sparse.key_value.key``, which a codec keyed by the column's name
    does not reach (pyarrow then writes them uncompressed, whatever that codec). The paths are
    pyarrow's own, read from an empty file written with the schema (0.2 ms, once per schema
    and worker).
    """
    plain = {f.name for f in schema if f.type in VECTOR_TYPES}
    _, leaves = plain_parquet.empty_file(schema)
    codecs = {}
    for i in range(len(leaves)):
        path = leaves.column(i).path
        top = next(f.name for f in schema if path == f.name or path.startswith(f"{f.name}."))
        codecs[path] = "none" if top in plain else "snappy"
    return codecs


class _File:
    """One parquet file being written; rows are buffered into row groups of ``ROW_GROUP_BYTES``.

    A piece is a list of columns (the format's schema without its constant columns). The
    constant columns (a binlog's segment and partition) are built once per row group, and
    their statistics are known without computing them.

    Nothing touches the storage until the first row group is full or the file is closed. A file
    of one row group (every binlog of a live vchannel's cycle) is encoded in memory and written in
    one go at ``close``, in a few system calls instead of about 40, a tenth less CPU for a 50-row
    binlog (docs/platform.md). A larger one streams its row groups into the file.
    """

    def __init__(self, fs: pafs.FileSystem, base: str, table: TableKind, rel: str, fmt: _FileFormat,
                 constants: dict[str, int] | None = None, segment_id: int = -1, partition_id: int = -1, *,
                 lasting: bool = False, sync: bool = False) -> None:
        """``lasting``: a compaction's output, written with every option whatever its size.
        ``sync``: a local file, to be made durable (its directories as they are created, its data
        and name by the writer that returns it: ``durable_close``)."""
        self.fs, self.table, self.rel, self.fmt, self.lasting = fs, table, rel, fmt, lasting
        self.sync = sync and fs.type_name == "local"
        self.path = f"{base}/{rel}"
        self.written: list[str] = []   # the paths of the files it created: the binlog, and a filter beside it
        self.constants = constants or {}
        self.segment_id, self.partition_id = segment_id, partition_id
        self._sink: pa.NativeFile | None = None          # the file, once its first row group is full
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0
        self.min: dict = dict(self.constants)
        self.max: dict = dict(self.constants)
        self._pending: list[list[pa.Array]] = []
        self._pending_rows = self._pending_bytes = 0
        self._keys: list[np.ndarray | pa.Array | pa.ChunkedArray] = []   # the bloom filter's, per row group

    def _open(self, path: str | None = None) -> pa.NativeFile:
        path = path or self.path
        self.written.append(path)
        parent = path.rsplit("/", 1)[0]
        if self.fs.type_name == "s3":   # no directories in an object store: the file's key is all
            return self.fs.open_output_stream(path)
        durable.make_dirs(parent, sync=self.sync)
        try:
            return self.fs.open_output_stream(path)
        except FileNotFoundError:   # removed since this worker created it
            durable.make_dirs(parent, sync=self.sync, again=True)
            return self.fs.open_output_stream(path)

    def _parquet_writer(self, sink: pa.NativeFile, *, whole: bool = False) -> pq.ParquetWriter:
        """``whole``: a file of one row group, written at once. Unless ``lasting``, that is a live
        cycle's binlog: its add action carries the min/max readers skip files by, and it is
        short-lived (the compactor rewrites a segment's small files into a lasting one), so it is
        written without parquet column statistics, which cost a tenth of a 50-row binlog's
        writing (docs/platform.md)."""
        # A dictionary pays off only for the constant columns: _ts and _row_id are unique per row.
        stats = [] if whole and not self.lasting else list(self.fmt.stat_cols)
        return pq.ParquetWriter(sink, self.fmt.schema, compression=self.fmt.compression,
                                write_statistics=stats or False, use_dictionary=list(self.fmt.constants))

    def write(self, columns: list[pa.Array], rows: int, nbytes: int) -> None:
        """Buffer one piece; ``nbytes`` is its size as far as the row-group bound goes."""
        self._pending.append(columns)
        self._pending_rows += rows
        self._pending_bytes += nbytes
        if self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        """Write the pending pieces as a row group into the file (opened now if need be)."""
        group = self._take_group()
        if group is None:
            return
        if self._writer is None:
            self._sink = self._open()
            self._writer = self._parquet_writer(self._sink)
        self._writer.write_table(self._table(group[0]))

    def _table(self, columns: list[pa.Array | pa.ChunkedArray]) -> pa.Table:
        """A row group's columns as the Table pyarrow's writer takes (it checks them against the schema)."""
        return pa.Table.from_arrays(columns, schema=self.fmt.schema)

    def _take_group(self) -> tuple[list[pa.Array | pa.ChunkedArray], int] | None:
        """The pending pieces as one row group: its columns (the schema's, in its order) and
        rows, counted, with their stats and keys kept.

        The constant columns are shared arrays (``_repeated``: a numpy array made for each costs
        more than the group's other work), the stats and keys are taken from the pieces' arrays,
        and an Int64 key is kept as the numpy array its bounds came from, which its filter takes
        as it is (``deltanode_bench.task_cpu``; docs/benchmarks.md, "Where the time went")."""
        if not self._pending:
            return None
        n, pieces = self._pending_rows, self._pending
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        # One piece (a live vchannel's cycle: one insert) needs no chunked arrays.
        columns = list(pieces[0]) if len(pieces) == 1 else \
            [pa.chunked_array([p[i] for p in pieces]) for i in range(len(pieces[0]))]
        self.rows += n
        for col, at in self.fmt.measured:
            values = columns[at]
            integers = _integers(values)
            if integers is not None:
                lo, hi = int(integers.min()), int(integers.max())
            else:
                mm = pc.min_max(values)
                lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if at == self.fmt.key_at:
                self._keys.append(integers if integers is not None else values)
            if lo is not None:
                self.min[col] = lo if col not in self.min else min(self.min[col], lo)
                self.max[col] = hi if col not in self.max else max(self.max[col], hi)
        columns += [_repeated(self.constants[name], n) for name in self.fmt.constants]
        return columns, n

    def _write_whole(self) -> int:
        """The file's one row group (or none), encoded in memory and written at once; its size.

        A live binlog is encoded by ``plain_parquet`` when its schema and data allow, else (and
        for a lasting file) by pyarrow's writer."""
        group = self._take_group()
        plain = self.fmt.plain
        data: bytes | pa.Buffer | None = None
        if plain is not None and group is not None and not self.lasting:
            data = plain.encode_columns(*group)
        if data is None:
            buffer = pa.BufferOutputStream()
            writer = self._parquet_writer(buffer, whole=True)
            if group is not None:
                writer.write_table(self._table(group[0]))
            writer.close()
            data = buffer.getvalue()
        with self._open() as out:
            out.write(data)
        return len(data)

    def close(self) -> FileEntry:
        """Write the footer and close the file (on an object store, close is what uploads it), then
        its bloom filter: a small one goes back with the entry, to be committed in its add action,
        a large one is written beside the file (a file whose filter is missing is read by every
        delete). Not yet durable: see ``durable_close``."""
        if self._writer is None:
            size = self._write_whole()
        else:
            assert self._sink is not None   # opened with the writer
            self._flush()
            self._writer.close()
            size = self._sink.tell()
            self._sink.close()
        inline = None
        if self._keys:
            bloom = PkBloom.build(_joined(self._keys)).to_bytes()
            if self.rows <= INLINE_MAX_KEYS:
                inline = bloom
            else:
                with self._open(self.path[: -len(self.rel)] + pk_bloom_path(self.rel)) as out:
                    out.write(bloom)
        stats = json_codec.dumps({"numRecords": self.rows, "minValues": self.min, "maxValues": self.max,
                                  "nullCount": {c: 0 for c in self.min}})
        return FileEntry(self.table, self.rel, size, self.rows, stats, self.segment_id, self.partition_id, inline)

    def discard(self) -> None:
        """Give up the file: what was written of it is deleted, what was not never will be."""
        if self._sink is not None:
            self._sink.close()
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            pass


@functools.lru_cache(maxsize=4096)   # 50-row arrays: 1.7 KB each with the cache (7 MB full)
def _repeated(value: int, n: int) -> pa.Array:
    """``n`` times the Int64 ``value`` (a constant column: a binlog's segment or partition id).
    Shared by the files of a segment that have as many rows (arrays never change): a live
    vchannel's files are mostly one insert each."""
    return pa.repeat(pa.scalar(value, pa.int64()), n)


def durable_close(files: list[_File]) -> list[FileEntry]:
    """Close ``files``, then fsync those to be made durable and each directory they were created in
    once (a writer's files share a few: its segments' and the delete table's)."""
    entries = [f.close() for f in files]
    durable.sync_files([path for f in files if f.sync for path in f.written])
    return entries


def _integers(values: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """An integer column without nulls as numpy, else None: its min and max through numpy (3
    columns of a 50-row binlog: 0.021 ms with ``pc.min_max``, 0.012 ms this way)."""
    if pa.types.is_integer(values.type) and not values.null_count and len(values):
        return values.to_numpy()
    return None


def _joined(keys: list[np.ndarray | pa.Array | pa.ChunkedArray]) -> np.ndarray | pa.ChunkedArray:
    """A file's keys from its row groups' (numpy when every group's is)."""
    if len(keys) == 1:
        return keys[0]
    if all(isinstance(k, np.ndarray) for k in keys):
        return np.concatenate(keys)
    chunks: list[pa.Array] = []
    for k in keys:
        chunks += k.chunks if isinstance(k, pa.ChunkedArray) else [pa.array(k) if isinstance(k, np.ndarray) else k]
    return pa.chunked_array(chunks)


@dataclass(frozen=True, kw_only=True)
class _CollectionFiles:
    """What every writer of one collection shares in a Python worker: its tables' roots,
    filesystems and file formats. Made once per collection and worker
    (``_collection_files``): a task makes a writer per vchannel with a message, about one per
    message at the 1,000-vchannel point, and making these for each would be most of its cost."""

    insert_schema: pa.Schema
    delete_schema: pa.Schema
    roots: dict[TableKind, str]
    filesystems: dict[TableKind, tuple[pafs.FileSystem, str]]
    formats: dict[TableKind, _FileFormat]
    sync: bool   # fsync the files (storage.fsync, on a filesystem root)


_collections: dict[tuple[str, StoreOptions, int], _CollectionFiles] = {}   # (root, options, collection)


def _collection_files(storage: StorageLayout, collection_id: int, insert_schema: pa.Schema,
                      delete_schema: pa.Schema) -> _CollectionFiles:
    """The collection's shared parts, made again when its schemas are other objects (a layout
    made again after the layouts' cache dropped it, or a schema change)."""
    key = (storage.root, storage.options, collection_id)   # each task brings its own StorageLayout
    found = _collections.get(key)
    if found is not None and found.insert_schema is insert_schema and found.delete_schema is delete_schema:
        return found
    if len(_collections) >= 1 << 15:   # more than a node's collections (see CollectionLayout.from_bytes)
        _collections.clear()
    roots = table_roots(storage, collection_id)
    deletes = delete_format(delete_schema)
    made = _collections[key] = _CollectionFiles(
        insert_schema=insert_schema, delete_schema=delete_schema, roots=roots,
        filesystems={table: storage.filesystem(root) for table, root in roots.items()},
        formats={TableKind.INSERT: insert_format(insert_schema, delete_schema.names[0]),
                 TableKind.DELETE: deletes, TableKind.REPLAYED_DELETES: deletes,
                 TableKind.QUARANTINE: _FileFormat.of(QUARANTINE_SCHEMA, ("offset",))},
        sync=syncs(storage))
    return made


def syncs(storage: StorageLayout) -> bool:
    """Whether files written under ``storage`` are fsynced (``storage.fsync``, on a filesystem)."""
    return storage.options.fsync and not is_object_store(storage.root)


class BinlogWriter:
    """Writes one vchannel's rows of one task; ``close()`` returns its files and segment counts."""

    def __init__(self, storage: StorageLayout, collection_id: int, insert_schema: pa.Schema,
                 delete_schema: pa.Schema) -> None:
        shared = _collection_files(storage, collection_id, insert_schema, delete_schema)
        self.roots, self._filesystems, self._formats = shared.roots, shared.filesystems, shared.formats
        self._sync = shared.sync
        self.task_id = uuid.uuid4().hex
        self._numbers = itertools.count()   # file names: part-{task_id}-{n}, unique per writer
        self._segments: dict[int, _File] = {}
        self._deletes: dict[tuple[str, int], _File] = {}   # (table, partition) -> its file
        self._quarantine: _File | None = None
        self.segments: dict[int, SegmentStats] = {}

    def _new_file(self, table: TableKind, rel_dir: str, constants: dict[str, int] | None = None, segment_id: int = -1,
                  partition_id: int = -1) -> _File:
        rel = f"{rel_dir}part-{self.task_id}-{next(self._numbers):05d}.parquet"
        return _File(*self._filesystems[table], table, rel, self._formats[table], constants, segment_id, partition_id,
                     sync=self._sync)

    def add_insert(self, segment: int, partition: int, columns: list[pa.Array], rows: int, nbytes: int, offset: int,
                   min_ts: int, max_ts: int) -> None:
        """One message's rows: ``columns`` are the insert schema's but its segment and partition."""
        f = self._segments.get(segment)
        if f is None:
            f = self._segments[segment] = self._new_file(
                TableKind.INSERT, f"{partition}/{segment}/", {"_segment_id": segment, "_partition_id": partition},
                segment, partition)
        f.write(columns, rows, nbytes)
        st = self.segments.get(segment)
        if st is None:
            st = self.segments[segment] = SegmentStats(partition, 0, min_ts, max_ts, offset, min_ts)
        st.rows += rows
        st.bytes += nbytes
        st.min_ts, st.max_ts = min(st.min_ts, min_ts), max(st.max_ts, max_ts)
        if offset < st.first_offset:
            st.first_offset, st.first_ts = offset, min_ts

    def add_delete(self, partition: int, keys: pa.Array, timestamps: pa.Array, replayed: bool = False) -> None:
        """``replayed``: already in delta_log (read again after a crash): only marks rows."""
        table = TableKind.REPLAYED_DELETES if replayed else TableKind.DELETE
        f = self._deletes.get((table, partition))
        if f is None:
            f = self._deletes[(table, partition)] = self._new_file(table, "", {"_partition_id": partition},
                                                                   partition_id=partition)
        f.write([keys, timestamps], len(keys), keys.nbytes + timestamps.nbytes)

    def add_quarantine(self, row: QuarantineRow) -> None:
        if self._quarantine is None:
            self._quarantine = self._new_file(TableKind.QUARANTINE, "")
        batch = pa.RecordBatch.from_pydict({
            "vchannel": [row.vchannel], "pchannel": [row.pchannel], "partition": [row.partition],
            "offset": [row.offset], "msg_type": [row.msg_type], "reason": [row.reason], "payload": [row.payload],
            "recorded_at_ms": [int(time.time() * 1000)]}, schema=QUARANTINE_SCHEMA)
        self._quarantine.write(batch.columns, 1, len(row.payload))

    def _files(self) -> list[_File]:
        return [f for f in [*self._segments.values(), *self._deletes.values(), self._quarantine] if f is not None]

    def close(self) -> list[FileEntry]:
        """The files, closed (and durable: ``durable_close``)."""
        return durable_close(self._files())

    def abort(self) -> None:
        """Give up every file (the task failed for this vchannel): what was written is deleted."""
        for f in self._files():
            f.discard()


def write_segment_file(storage: StorageLayout, collection_id: int, insert_schema: pa.Schema, pk: str,
                       segment_id: int, partition_id: int, rows: pa.Table | Iterable[pa.Table], *,
                       origin: str = "compacted") -> FileEntry:
    """Write ``rows`` (the insert schema's columns, all of one segment; a table, or tables one
    after the other so that a large segment is never whole in memory) as one binlog file of the
    segment, in row groups of ``ROW_GROUP_BYTES``, with the stats its add action needs and the
    bloom filter of its key ``pk``. ``origin`` ends the file's name (what wrote it). Runs on
    executors (compaction, Milvus imports)."""
    fmt = insert_format(insert_schema, pk)
    fs, base = storage.filesystem(storage.insert_log(collection_id))
    rel = f"{partition_id}/{segment_id}/part-{uuid.uuid4().hex}-{origin}.parquet"
    out = _File(fs, base, TableKind.INSERT, rel, fmt, {"_segment_id": segment_id, "_partition_id": partition_id},
                segment_id, partition_id, lasting=True, sync=syncs(storage))
    try:
        for table in [rows] if isinstance(rows, pa.Table) else rows:
            variable = table.select([f.name for f in insert_schema if f.name not in INSERT_CONSTANTS])
            chunk = max(1, len(table) * ROW_GROUP_BYTES // max(1, table.nbytes))
            for batch in variable.to_batches(max_chunksize=chunk):
                out.write(batch.columns, batch.num_rows, batch.nbytes)
        return durable_close([out])[0]
    except BaseException:
        out.discard()
        raise
