"""Marking the rows a vchannel's deletes remove, as deletion vectors on its insert binlogs.

Runs on executors (``mark``); the driver plans the tasks and commits their deletion vectors
with the sync that recorded the deletes (``pipeline.delete_marking``).

Milvus's rule (docs/milvus-facts.md §8): a delete of key K at ts T removes the rows of K whose
``_ts`` is below T, in the delete's partition, or in every partition when it is -1. Milvus
routes a key's deletes to the vchannel of its inserts, so a vchannel's deletes are matched
against its own binlogs only. The driver names the candidate files (partition, key range and
``_ts`` range could hold a deleted row: from their stats); here each candidate's bloom filter
(``layout.pk_bloom_path``, Milvus's stats log) drops those that hold none of the keys, and the
rest are read, their key and ``_ts`` columns only, to find the positions. A file's new deletion
vector is its old one plus those positions, inline in the commit (``deletion_vectors.inline``):
applying a delete twice changes nothing, so a replayed batch marks nothing twice.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .deletion_vectors import DeletionVector, inline, positions
from .layout import StorageLayout, pk_bloom_path
from .pk_bloom import PkBloom

ALL_PARTITIONS = -1
# Bloom filters kept per Python worker (1.2 bytes a row): the same files are candidates cycle
# after cycle.
BLOOM_CACHE_BYTES = 128 << 20


@dataclass(frozen=True, kw_only=True)
class MarkCandidate:
    """An insert binlog that may hold rows the deletes remove."""

    path: str                                  # relative to the insert_log root
    rows: int
    partition_id: int
    deletion_vector: DeletionVector | None     # its DV when the task was planned


@dataclass(frozen=True, kw_only=True)
class MarkTask:
    """One vchannel's deletes of one sync and the files they may hit. Made on the driver."""

    collection_id: int
    vchannel: str
    pk: str                                    # the primary key's column
    deletes: tuple[str, ...]                   # delete binlogs, relative to the delta_log root
    candidates: tuple[MarkCandidate, ...]
    storage: StorageLayout


@dataclass(frozen=True, kw_only=True)
class FileMark:
    """A file's deletion vector after the task: ``base`` (the one it had) plus the new rows."""

    path: str
    base: DeletionVector | None
    deletion_vector: DeletionVector
    newly_deleted: int


@dataclass(frozen=True, kw_only=True)
class MarkResult:
    vchannel: str
    marks: tuple[FileMark, ...] = ()
    files_read: int = 0
    files_skipped: int = 0                     # by their bloom filter
    seconds: float = 0.0
    error: str | None = None
    stale: str | None = None                   # a candidate file was gone (compacted): marked again next cycle


class _BloomCache:
    """Bloom filters by file, least recently used out first."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0
        self._items: collections.OrderedDict[str, tuple[PkBloom, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, storage: StorageLayout, root: str, path: str) -> PkBloom | None:
        """The filter of ``path``, None when it has none (then the file is read)."""
        key = f"{root}/{path}"
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        fs, base = storage.filesystem(root)
        try:
            with fs.open_input_stream(f"{base}/{pk_bloom_path(path)}") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        bloom = PkBloom.from_bytes(data)
        with self._lock:
            self._items[key] = (bloom, len(data))
            self.used += len(data)
            while self.used > self.capacity and len(self._items) > 1:
                _, (_, size) = self._items.popitem(last=False)
                self.used -= size
        return bloom


BLOOMS = _BloomCache(BLOOM_CACHE_BYTES)


def _latest_deletes(deletes: pa.Table, pk: str) -> dict[int, pa.Table]:
    """Per partition (-1: all), each key's latest delete ts, as (pk, ``_deleted_ts``)."""
    latest = deletes.group_by([pk, "_partition_id"]).aggregate([("_ts", "max")])
    out = {}
    for partition in pc.unique(latest.column("_partition_id")).to_pylist():
        part = latest.filter(pc.equal(latest.column("_partition_id"), partition))
        out[partition] = pa.table({pk: part.column(pk), "_deleted_ts": part.column("_ts_max")})
    return out


def _relevant(latest: dict[int, pa.Table], partition: int, pk: str) -> pa.Table | None:
    """The deletes that apply to a file of ``partition``: its own and the all-partition ones."""
    tables = [t for p, t in latest.items() if p in (partition, ALL_PARTITIONS)]
    if not tables:
        return None
    both = pa.concat_tables(tables)
    return both.group_by([pk]).aggregate([("_deleted_ts", "max")]).rename_columns([pk, "_deleted_ts"]) \
        if len(tables) > 1 else both


def deleted_positions(rows: pa.Table, deletes: pa.Table, pk: str) -> np.ndarray:
    """Row positions of ``rows`` (the file's ``pk`` and ``_ts``, in file order) that ``deletes``
    (``pk``, ``_deleted_ts``) remove: same key, ``_ts`` strictly below the delete's."""
    indexed = rows.append_column("_row", pa.array(np.arange(len(rows), dtype=np.int64)))
    joined = indexed.join(deletes, keys=[pk], join_type="inner")
    hit = joined.filter(pc.less(joined.column("_ts"), joined.column("_deleted_ts")))
    return np.sort(hit.column("_row").to_numpy())


def mark(task: MarkTask) -> MarkResult:
    """Runs on an executor: the new deletion vectors of the candidate files that hold deleted rows."""
    started = time.monotonic()
    try:
        return _mark(task, started)
    except Exception as e:  # noqa: BLE001 - the vchannel fails alone, with the reason
        return MarkResult(vchannel=task.vchannel, seconds=time.monotonic() - started,
                          error=f"marking deletes failed: {type(e).__name__}: {e}")


def _mark(task: MarkTask, started: float) -> MarkResult:
    storage, pk = task.storage, task.pk
    delta_fs, delta_base = storage.filesystem(storage.delta_log(task.collection_id))
    deletes = pa.concat_tables([pq.read_table(f"{delta_base}/{path}", filesystem=delta_fs,
                                              columns=[pk, "_ts", "_partition_id"]) for path in task.deletes])
    latest = _latest_deletes(deletes, pk)
    root = storage.insert_log(task.collection_id)
    insert_fs, insert_base = storage.filesystem(root)
    marks, read, skipped = [], 0, 0
    for candidate in task.candidates:
        relevant = _relevant(latest, candidate.partition_id, pk)
        if relevant is None:
            continue
        bloom = BLOOMS.get(storage, root, candidate.path)
        if bloom is not None:
            maybe = bloom.might_contain(relevant.column(pk))
            if not maybe.any():
                skipped += 1
                continue
            relevant = relevant.filter(pa.array(maybe))
        read += 1
        try:
            rows = pq.read_table(f"{insert_base}/{candidate.path}", filesystem=insert_fs, columns=[pk, "_ts"])
        except FileNotFoundError:   # compacted and deleted since it was planned (retention 0)
            return MarkResult(vchannel=task.vchannel, seconds=time.monotonic() - started,
                              stale=f"{candidate.path}, where its deletes were to be marked, was compacted meanwhile")
        hit = deleted_positions(rows, relevant, pk)
        if not hit.size:
            continue
        old = positions(candidate.deletion_vector, insert_base, insert_fs) if candidate.deletion_vector else \
            np.empty(0, np.uint64)
        union = np.union1d(old.astype(np.uint64), hit.astype(np.uint64))
        if union.size > old.size:
            marks.append(FileMark(path=candidate.path, base=candidate.deletion_vector, deletion_vector=inline(union),
                                  newly_deleted=int(union.size - old.size)))
    return MarkResult(vchannel=task.vchannel, marks=tuple(marks), files_read=read, files_skipped=skipped,
                      seconds=time.monotonic() - started)
