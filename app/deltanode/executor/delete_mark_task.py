"""Marking the rows a vchannel's deletes remove, as deletion vectors on its insert binlogs.

Runs on executors (``mark``); the driver plans the tasks and commits their deletion vectors
with the sync that recorded the deletes (``pipeline.delete_mark_job``).

Milvus's rule (docs/milvus-facts.md §8): a delete of key K at ts T removes the rows of K whose
``_ts`` is below T, in the delete's partition, or in every partition when it is -1. Milvus
routes a key's deletes to the vchannel of its inserts, so a vchannel's deletes are matched
against its own binlogs only. The driver names the candidate files (partition, key range and
``_ts`` range could hold a deleted row: from their stats); here each candidate's bloom filter
(Milvus's stats log: in the file's add action or beside it, ``storage.pk_bloom``) drops those
that hold none of the keys, and the rest are read, their key and ``_ts`` columns only, to find
the positions. A file's new deletion vector is its old one plus those positions, inline in the
commit (``deletion_vectors.inline``): applying a delete twice changes nothing, so a replayed batch marks nothing twice.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..delta.deletion_vectors import inline, positions
from ..delta.layout import StorageLayout, pk_bloom_path
from ..delta.pk_bloom import PkBloom
from ..failure.classify import Failure
from ..failure.kinds import FailureKind
from ..records import FileMark, MarkCandidate, MarkResult, MarkTask, PrimaryKey

ALL_PARTITIONS = -1
# Kept per Python worker, by file (files never change): the same files are candidates cycle after
# cycle, and reading a file's key and ``_ts`` columns is about half of a mark task's time (the
# deletes benchmark, build/bench.sh --deletes, measures this). Bloom filters take 1.2 bytes a row;
# a file's key and ``_ts`` columns 16 bytes a row (an Int64 key).
BLOOM_CACHE_BYTES = 128 << 20
KEY_CACHE_BYTES = 256 << 20

T = TypeVar("T")


class _FileCache(Generic[T]):
    """Something read from each file (a bloom filter, its key columns), least recently used out
    first, within ``capacity`` bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0
        self._items: collections.OrderedDict[str, tuple[T, int]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, load: Callable[[], tuple[T, int] | None]) -> T | None:
        """The item of ``key``, read by ``load`` (item and its size; None: nothing to keep) on a miss."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        loaded = load()
        if loaded is None:
            return None
        with self._lock:
            self._items[key] = loaded
            self.used += loaded[1]
            while self.used > self.capacity and len(self._items) > 1:
                _, (_, size) = self._items.popitem(last=False)
                self.used -= size
        return loaded[0]


BLOOMS: _FileCache[PkBloom] = _FileCache(BLOOM_CACHE_BYTES)
KEYS: _FileCache[SortedKeys] = _FileCache(KEY_CACHE_BYTES)


def _bloom(storage: StorageLayout, root: str, candidate: MarkCandidate) -> PkBloom | None:
    """The file's bloom filter (from the log, or the file beside it), None when it has none
    (then the file is read)."""
    path = candidate.path

    def load() -> tuple[PkBloom, int] | None:
        if candidate.pk_bloom is not None:
            return PkBloom.from_bytes(candidate.pk_bloom), len(candidate.pk_bloom)
        fs, base = storage.filesystem(root)
        try:
            with fs.open_input_stream(f"{base}/{pk_bloom_path(path)}") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return PkBloom.from_bytes(data), len(data)
    return BLOOMS.get(f"{root}/{path}", load)


def _keys(storage: StorageLayout, root: str, path: str, pk: str) -> SortedKeys:
    """The file's keys, sorted, with their row positions and ``_ts``. FileNotFoundError when it is gone."""
    def load() -> tuple[SortedKeys, int]:
        fs, base = storage.filesystem(root)
        table = pq.read_table(f"{base}/{path}", filesystem=fs, columns=[pk, "_ts"])
        keys = SortedKeys.of(table.column(pk), table.column("_ts").to_numpy())
        return keys, table.nbytes + keys.rows.nbytes
    keys = KEYS.get(f"{root}/{path}", load)
    assert keys is not None   # this load() always gives something to keep
    return keys


@dataclass(frozen=True)
class SortedKeys:
    """Keys in ascending order with what goes with each (a file's row positions and ``_ts``, or
    the latest delete ts of each deleted key): a range or a key is found by binary search."""

    keys: np.ndarray        # int64, or object (str) for VarChar keys
    rows: np.ndarray        # int64: row positions (a file's), unused for deletes
    ts: np.ndarray          # int64

    @classmethod
    def of(cls, keys: pa.Array | pa.ChunkedArray, ts: np.ndarray, rows: np.ndarray | None = None) -> SortedKeys:
        values = keys.to_numpy(zero_copy_only=False)
        order = np.argsort(values, kind="stable")
        rows = np.arange(len(values), dtype=np.int64) if rows is None else rows
        return cls(values[order], rows[order], ts[order])

    def between(self, lo: PrimaryKey, hi: PrimaryKey) -> SortedKeys:
        """The entries whose key is in ``[lo, hi]``."""
        i, j = np.searchsorted(self.keys, lo, "left"), np.searchsorted(self.keys, hi, "right")
        return SortedKeys(self.keys[i:j], self.rows[i:j], self.ts[i:j])

    def select(self, mask: np.ndarray) -> SortedKeys:
        return SortedKeys(self.keys[mask], self.rows[mask], self.ts[mask])


def latest_deletes(deletes: pa.Table, pk: str) -> dict[int, SortedKeys]:
    """Per partition the deletes of a file of that partition apply (its own and the all-partition
    ones, -1), each key once with its latest delete ts."""
    latest = deletes.group_by([pk, "_partition_id"]).aggregate([("_ts", "max")])
    partitions = pc.unique(latest.column("_partition_id")).to_pylist()
    out = {}
    for partition in partitions:
        mine = pc.is_in(latest.column("_partition_id"), pa.array(sorted({partition, ALL_PARTITIONS}), pa.int64()))
        part = latest.filter(mine).group_by([pk]).aggregate([("_ts_max", "max")])
        out[partition] = SortedKeys.of(part.column(pk), part.column("_ts_max_max").to_numpy())
    return out


def deleted_positions(rows: SortedKeys, deletes: SortedKeys) -> np.ndarray:
    """Row positions of a file (``rows``: its keys sorted, with row positions and ``_ts``) that
    ``deletes`` (keys sorted, each with its latest delete ts) remove: same key, ``_ts`` strictly
    below the delete's. Binary search both ways; a key may have several rows in a file."""
    lo = np.searchsorted(rows.keys, deletes.keys, "left")
    hi = np.searchsorted(rows.keys, deletes.keys, "right")
    counts = hi - lo
    if not counts.any():
        return np.empty(0, np.int64)
    which = np.repeat(np.arange(len(deletes.keys)), counts)
    at = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    hit = rows.ts[at] < deletes.ts[which]
    return np.sort(rows.rows[at[hit]])


def mark(task: MarkTask) -> MarkResult:
    """Runs on an executor: the new deletion vectors of the candidate files that hold deleted rows."""
    started = time.monotonic()
    try:
        return _mark(task, started)
    except Exception as e:  # noqa: BLE001 - the vchannel fails alone, with the reason
        return MarkResult(vchannel=task.vchannel, seconds=time.monotonic() - started,
                          error=Failure(kind=FailureKind.MARK_FAILED, message=f"{type(e).__name__}: {e}"))


def _mark(task: MarkTask, started: float) -> MarkResult:
    storage, pk = task.storage, task.pk
    delta_fs, delta_base = storage.filesystem(storage.delta_log(task.collection_id))
    deletes = pa.concat_tables([pq.read_table(f"{delta_base}/{path}", filesystem=delta_fs,
                                              columns=[pk, "_ts", "_partition_id"]) for path in task.deletes])
    latest = latest_deletes(deletes, pk)
    root = storage.insert_log(task.collection_id)
    insert_fs, insert_base = storage.filesystem(root)
    marks, read, skipped = [], 0, 0
    for candidate in task.candidates:
        relevant = latest.get(candidate.partition_id, latest.get(ALL_PARTITIONS))
        if relevant is None:
            continue
        if candidate.pk_min is not None:   # the keys the file's range holds (min/max alone prunes little)
            relevant = relevant.between(candidate.pk_min, candidate.pk_max)
        bloom = _bloom(storage, root, candidate) if len(relevant.keys) else None
        if bloom is not None:
            relevant = relevant.select(bloom.might_contain(pa.array(relevant.keys)))
        if not len(relevant.keys):
            skipped += 1
            continue
        read += 1
        try:
            rows = _keys(storage, root, candidate.path, pk)
        except FileNotFoundError:   # compacted and deleted since it was planned (retention 0)
            return MarkResult(vchannel=task.vchannel, seconds=time.monotonic() - started,
                              stale=f"{candidate.path}, where its deletes were to be marked, was compacted meanwhile")
        hit = deleted_positions(rows, relevant)
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
