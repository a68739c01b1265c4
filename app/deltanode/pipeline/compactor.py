"""The DataNode's compactor: a driver thread that has its segments' small binlog files rewritten.

Every ``interval`` it looks at the collections into which this node committed ``min_files``
insert files or more since it last looked (and at every collection once after the start),
lists their tables' files at the version its commit log knows, plans each live segment's
rewrites (``storage.compaction.plan_segment``), runs them on executors as Spark jobs in a
scheduler pool of their own (``POOL``: the pipeline's cycles keep their share of the cores),
and commits each collection's rewrites under the collection's commit lock, so that in this
process the pipeline's commits and the compaction's never interleave; other writers are kept
out by the commit's own checks. A refused or failed rewrite deletes what it wrote and stops
nothing: the files stay and are tried again in a later round. Files replaced by a rewrite are
deleted ``retention`` seconds after its commit. A sweep at the first round and every hour (or
``retention``, if longer) deletes what any process's commits removed (rewrites, dropped
segments and partitions) more than ``retention`` ago on this node's collections, what a
restart kept the in-memory queue from deleting: the tables' tombstones, as delta-rs's vacuum
lists them (``vacuum(dry_run=True)``: it lists, DeltaNode deletes, no commit is written). The
same sweep deletes the files no commit ever added once they are ``orphan_retention`` old (a
crash between a batch's write and its commit, a refused commit; Milvus's garbage collector
does the same after ``dataCoord.gc.missingTolerance``): delta-rs's full vacuum lists them by
their modification time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
from pyspark.sql import SparkSession

from ..storage.binlog_writer import INSERT_TABLE, FileEntry
from ..storage.commit import CollectionCommitter, delete_files, delete_paths
from ..storage.compaction import CompactionSettings, Rewrite, SegmentFile, commit_rewrites, plan_segment, \
    rewrite, segment_of
from ..storage.delta_log import FilesRemoved, TxnMoved
from ..storage.layout import StorageLayout
from ..storage.tables import open_table

log = logging.getLogger(__name__)
JOB_GROUP = "deltanode-compaction"
POOL = "deltanode-compaction"
REWRITES_PER_TASK = 8
TASKS_PER_JOB = 8
SWEEP_EVERY = 3600.0   # seconds between sweeps, at least (``retention`` if longer)


@dataclass(frozen=True)
class CompactionTarget:
    """A collection to look at: its committer and the live segments of its vchannels on this node."""

    collection_id: int
    committer: CollectionCommitter
    insert_schema: pa.Schema
    segments: dict[int, str]                   # segment id -> its vchannel


class Members(Protocol):
    """What the compactor asks of the pipeline (``Pipeline``)."""

    def compaction_targets(self, min_new_files: int) -> list[CompactionTarget]:
        """Collections with ``min_new_files`` insert files committed since they were last returned."""

    def collection_ids(self) -> list[int]:
        """The collections of the vchannels on this node."""

    def compactable(self, vchannel: str, segment_id: int) -> int | None:
        """The vchannel's insert txn as this node last committed or loaded it, while this node runs it
        and the segment, its partition and its collection are live; else None. Callers hold the
        collection's commit lock."""


@dataclass
class RoundReport:
    collections: int = 0
    rewrites: int = 0
    files_in: int = 0
    files_out: int = 0
    refused: int = 0
    failed: int = 0
    seconds: float = 0.0
    locked_s: float = 0.0          # the longest a commit held a collection's commit lock

    def add(self, other: RoundReport) -> None:
        """Sums ``other``'s counts into this one (``locked_s``: the longest of both)."""
        for name in ("collections", "rewrites", "files_in", "files_out", "refused", "failed", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.locked_s = max(self.locked_s, other.locked_s)


@dataclass
class _Replaced:
    due: float                     # wall clock after which the files may be deleted
    root: str                      # table root
    files: list[FileEntry] = field(default_factory=list)


class Compactor:
    """Runs on the driver."""

    def __init__(self, spark: SparkSession, storage: StorageLayout, members: Members,
                 settings: CompactionSettings) -> None:
        self.spark, self.storage, self.members, self.settings = spark, storage, members, settings
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._replaced: deque[_Replaced] = deque()
        self.rounds: deque[RoundReport] = deque(maxlen=20)      # the latest rounds
        self._next_sweep = 0.0                                     # monotonic
        self.totals = RoundReport()                                # every round since the start

    def start(self) -> Compactor:
        if self.settings.interval > 0:
            self._thread = threading.Thread(target=self._run, name="deltanode-compactor", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.spark.sparkContext.cancelJobGroup(JOB_GROUP)
                self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.wait(self.settings.interval):
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - compaction is an optimisation: log and try next round
                log.exception("compaction round failed; the next one tries again")
            self.vacuum(time.time())
            if time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + max(SWEEP_EVERY, self.settings.retention)
                try:
                    self.sweep()
                except Exception:  # noqa: BLE001 - the next sweep tries again
                    log.exception("sweeping removed files failed; the next sweep tries again")

    # -- a round ---------------------------------------------------------------------------------
    def run_once(self, every_collection: bool = False) -> RoundReport:
        """One round over the collections due (``every_collection``: over all of this node's);
        returns what it did."""
        started = time.monotonic()
        report = RoundReport()
        planned: list[tuple[CompactionTarget, int, list[Rewrite]]] = []
        for target in self.members.compaction_targets(0 if every_collection else self.settings.min_files):
            version, rewrites = self._plan(target)
            if rewrites:
                planned.append((target, version, rewrites))
        report.collections = len(planned)
        for batch in _batches(planned, REWRITES_PER_TASK * TASKS_PER_JOB):
            if self._stopping.is_set():
                break
            done = self._rewrite([r for _, _, rewrites in batch for r in rewrites], report)
            for target, version, rewrites in batch:
                mine = [(r, done[id(r)]) for r in rewrites if id(r) in done]
                if mine:
                    self._commit(target, version, mine, report)
        report.seconds = time.monotonic() - started
        self.rounds.append(report)
        self.totals.add(report)
        if report.rewrites or report.refused or report.failed:
            log.info("compaction: %d collection(s), %d segment rewrite(s): %d files -> %d, %d refused, %d failed, "
                     "%.1f s", report.collections, report.rewrites, report.files_in, report.files_out, report.refused,
                     report.failed, report.seconds)
        return report

    def _plan(self, target: CompactionTarget) -> tuple[int, list[Rewrite]]:
        with target.committer.lock:      # a version whose txns and files are the committer's own
            insert_log = target.committer.insert_log()
            version = insert_log.version if insert_log is not None else 0
        if insert_log is None:
            return 0, []
        table = open_table(insert_log.uri, insert_log.storage_options, version=version)
        if table is None:
            return 0, []
        actions = pa.table(table.get_add_actions(flatten=True))
        by_segment: dict[int, list[SegmentFile]] = {}
        partitions: dict[int, int] = {}
        for path, size, rows in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(),
                                    actions.column("num_records").to_pylist()):
            where = segment_of(path)
            if where is not None and where[1] in target.segments:
                partitions[where[1]] = where[0]
                by_segment.setdefault(where[1], []).append(SegmentFile(path, size, rows))
        rewrites = [Rewrite(target.collection_id, target.segments[seg], seg, partitions[seg], group, target.insert_schema,
                            self.storage)
                    for seg, files in sorted(by_segment.items()) for group in plan_segment(files, self.settings)]
        return version, rewrites

    def _rewrite(self, rewrites: list[Rewrite], report: RoundReport) -> dict[int, FileEntry]:
        """The rewrites on executors; by ``id`` of the rewrite, the files written. A failed job fails
        only this batch (its files, if any were written, are never committed: ``vacuum`` territory)."""
        sc = self.spark.sparkContext
        sc.setLocalProperty("spark.scheduler.pool", POOL)
        sc.setJobGroup(JOB_GROUP, f"deltanode compaction: {len(rewrites)} segment rewrite(s)", interruptOnCancel=True)
        try:
            slices = max(1, min(TASKS_PER_JOB, -(-len(rewrites) // REWRITES_PER_TASK)))
            files = sc.parallelize(rewrites, slices).map(rewrite).collect()
        except Exception as e:  # noqa: BLE001 - tried again next round
            report.failed += len(rewrites)
            log.warning("compaction: a rewrite job failed (%s); next round tries again",
                        (str(e).strip().splitlines() or [type(e).__name__])[0][:300])
            return {}
        return {id(r): f for r, f in zip(rewrites, files)}

    def _commit(self, target: CompactionTarget, version: int, done: list[tuple[Rewrite, FileEntry]],
                report: RoundReport) -> None:
        committer = target.committer
        with committer.lock:
            locked = time.monotonic()
            try:
                self._commit_locked(target, version, done, report)
            finally:
                report.locked_s = max(report.locked_s, time.monotonic() - locked)

    def _commit_locked(self, target: CompactionTarget, version: int, done: list[tuple[Rewrite, FileEntry]],
                       report: RoundReport) -> None:
        committer = target.committer
        live = {}
        for r, entry in done:
            txn = self.members.compactable(r.vchannel, r.segment_id)
            if txn is None:   # released, failed or dropped since it was planned
                delete_files(self.storage, committer.insert_log_uri, [entry])
            else:
                live[id(r)] = txn
        kept = [(r, entry) for r, entry in done if id(r) in live]
        if not kept:
            return
        insert_log = committer.insert_log()
        try:
            commit_rewrites(insert_log, version, kept, {r.vchannel: live[id(r)] for r, _ in kept})
        except (FilesRemoved, TxnMoved) as e:
            report.refused += len(kept)
            delete_files(self.storage, insert_log.uri, [entry for _, entry in kept])
            log.info("compaction of collection %d refused: %s", target.collection_id, e)
            return
        report.rewrites += len(kept)
        report.files_in += sum(len(r.inputs) for r, _ in kept)
        report.files_out += len(kept)
        inputs = [FileEntry(INSERT_TABLE, f.path, f.size, f.rows, "") for r, _ in kept for f in r.inputs]
        self._replaced.append(_Replaced(time.time() + self.settings.retention, insert_log.uri, inputs))

    def sweep(self) -> int:
        """Delete the files this node's tables removed more than ``retention`` ago, and the files no
        commit added that are older than ``orphan_retention`` (delta-rs counts both in whole hours:
        rounded up); how many. A full vacuum also lists the removed files older than its retention,
        hence never less than ``retention`` for it."""
        hours = math.ceil(self.settings.retention / 3600)
        orphan_hours = max(hours, math.ceil(self.settings.orphan_retention / 3600))
        removed = orphans = 0
        for collection_id in self.members.collection_ids():
            for uri in (self.storage.insert_log(collection_id), self.storage.delta_log(collection_id)):
                table = open_table(uri, self.storage.delta_options(uri))
                if table is None:
                    continue
                tombstones = set(table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False))
                unknown = set(table.vacuum(retention_hours=orphan_hours, dry_run=True, enforce_retention_duration=False,
                                           full=True)) - tombstones
                delete_paths(self.storage, uri, sorted(tombstones | unknown))
                removed, orphans = removed + len(tombstones), orphans + len(unknown)
        if removed or orphans:
            log.info("compaction: deleted %d file(s) removed from the tables over %d h ago and %d file(s) no commit "
                     "added, over %d h old", removed, hours, orphans, orphan_hours)
        return removed + orphans

    def vacuum(self, now: float) -> int:
        """Delete the files rewrites replaced ``retention`` seconds ago or earlier; how many."""
        deleted = 0
        while self._replaced and self._replaced[0].due <= now:
            done = self._replaced.popleft()
            delete_files(self.storage, done.root, done.files)
            deleted += len(done.files)
        return deleted


def _batches(planned: list, max_rewrites: int) -> list[list]:
    """Planned collections in batches of about ``max_rewrites`` rewrites (one Spark job each)."""
    out, batch, n = [], [], 0
    for item in planned:
        if batch and n + len(item[2]) > max_rewrites:
            out.append(batch)
            batch, n = [], 0
        batch.append(item)
        n += len(item[2])
    if batch:
        out.append(batch)
    return out
