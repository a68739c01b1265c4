"""The DataNode's compaction rounds: a driver thread (the compactor) that has its segments' binlog
files rewritten, the driver side of the rewrite job (its executor side: ``executor.rewrite_task``).

Every ``interval`` it looks at the collections into which this node committed ``min_files``
insert files or more since it last looked (and at every collection once after the start), takes
their insert_log tables' live files with their deletion vectors from the committer's log
(``DeltaLog.live_files``, under the collection's commit lock: delta-rs lists no DVs), plans
each live segment's rewrites (``state.compaction_plan.plan_segment``: small files, and files with
many deleted rows), runs them on executors as Spark jobs in a scheduler pool of their own
(``POOL``: the pipeline's cycles keep their share of the cores), and commits each collection's
rewrites under the collection's commit lock, so that in this process the pipeline's commits and
the compaction's never interleave (rows deleted meanwhile are carried over to the output:
``state.compaction_plan.commit_rewrites``); other writers, and a compaction commit left in doubt
that lands after the lock was released, are kept out by the commits' own checks. A refused or
failed rewrite deletes what it wrote and stops nothing: the files stay and are tried again in a
later round; a commit that raised (it may have landed) keeps what it wrote. Files replaced by a
rewrite, and their bloom filters, are deleted ``retention`` seconds after its commit. A sweep
at the first round and every hour (or ``retention``, if longer) deletes what any process's
commits removed (rewrites, dropped segments and partitions) more than ``retention`` ago on this
node's collections, what a restart kept the in-memory queue from deleting: the tables'
tombstones, as delta-rs's vacuum lists them (``vacuum(dry_run=True)``: it lists, DeltaNode
deletes, no commit is written). The same sweep deletes the files no commit ever added once they
are ``orphan_retention`` old (a crash between a batch's write and its commit, a refused commit;
Milvus's garbage collector does the same after ``dataCoord.gc.missingTolerance``): delta-rs's
full vacuum lists them by their modification time. Every insert binlog the sweep deletes goes
with its bloom filter (``layout.pk_bloom_path``). delta-rs's vacuum lists no filter (they live
under ``_pk_bloom/``, a directory it skips), so the filters a crash left without their binlog
are found by listing them: deleted once ``orphan_retention`` old when their binlog is neither
live nor on disk.
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
from pyspark import SparkContext

from ..config.sections.pipeline import CompactionSettings
from ..delta.delta_log import FilesRemoved, TxnMoved
from ..delta.layout import StorageLayout, pk_bloom_path
from ..delta.table_schema import TableSchema
from ..delta.tables import open_table
from ..executor.rewrite_task import rewrite
from ..jobs.contract import JobGroup, JobKind
from ..jobs.launch import SparkStopped, cancel, launch
from ..records import FileEntry, Rewrite, TableKind
from ..state.commit import CollectionCommitter, delete_files, delete_paths
from ..state.compaction_plan import (
    commit_rewrites,
    orphaned_filters,
    plan_segment,
    segment_files,
)

log = logging.getLogger(__name__)
# Rewrites in a pool of their own: the pipeline's cycles keep their share of the cores.
REWRITE = JobKind(name="deltanode compaction", run=rewrite, group=JobGroup.COMPACTION, pool=JobGroup.COMPACTION.value)
REWRITES_PER_TASK = 8
TASKS_PER_JOB = 8
SWEEP_EVERY = 3600.0   # seconds between sweeps, at least (``retention`` if longer)


@dataclass(frozen=True)
class CompactionTarget:
    """A collection to look at: its committer and the live segments of its vchannels on this node."""

    collection_id: int
    committer: CollectionCommitter
    insert_schema: pa.Schema
    pk: str                                    # the primary key's column
    segments: dict[int, str]                   # segment id -> its vchannel
    schema: TableSchema | None = None          # the columns its outputs have: the table is widened by those it lacks


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
    files: list[FileEntry] = field(default_factory=list)   # insert binlogs: their bloom filters go too


class Compactor:
    """Runs on the driver."""

    def __init__(self, *, sc: SparkContext, storage: StorageLayout, members: Members,
                 settings: CompactionSettings) -> None:
        self.sc, self.storage, self.members, self.settings = sc, storage, members, settings
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
                cancel(self.sc, JobGroup.COMPACTION)
                self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.wait(self.settings.interval):
            try:
                self.run_once()
            except SparkStopped as e:   # the node is stopping: the pipeline says so, once
                log.info("compaction stops: Spark stopped under a round (%s)", e)
                return
            except Exception:  # compaction is an optimisation: log and try next round
                log.exception("compaction round failed; the next one tries again")
            self.vacuum(time.time())
            if time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + max(SWEEP_EVERY, self.settings.retention)
                try:
                    self.sweep()
                except Exception:  # the next sweep tries again
                    log.exception("sweeping removed files failed; the next sweep tries again")

    # -- a round ---------------------------------------------------------------------------------
    def run_once(self, every_collection: bool = False) -> RoundReport:
        """One round over the collections due (``every_collection``: over all of this node's);
        returns what it did."""
        started = time.monotonic()
        report = RoundReport()
        planned: list[tuple[CompactionTarget, list[Rewrite]]] = []
        for target in self.members.compaction_targets(0 if every_collection else self.settings.min_files):
            rewrites = self._plan(target)
            if rewrites:
                planned.append((target, rewrites))
        report.collections = len(planned)
        for batch in _batches(planned, REWRITES_PER_TASK * TASKS_PER_JOB):
            if self._stopping.is_set():
                break
            done = self._rewrite([r for _, rewrites in batch for r in rewrites], report)
            for target, rewrites in batch:
                mine = [(r, done[id(r)]) for r in rewrites if id(r) in done]
                if mine:
                    self._commit(target, mine, report)
        report.seconds = time.monotonic() - started
        self.rounds.append(report)
        self.totals.add(report)
        if report.rewrites or report.refused or report.failed:
            log.info("compaction: %d collection(s), %d segment rewrite(s): %d files -> %d, %d refused, %d failed, "
                     "%.1f s", report.collections, report.rewrites, report.files_in, report.files_out, report.refused,
                     report.failed, report.seconds)
        return report

    def _plan(self, target: CompactionTarget) -> list[Rewrite]:
        """The rewrites of a collection's live segments, from its live files and their DVs at the
        version its committer knows (the file records are immutable: read after the lock)."""
        with target.committer.lock:
            insert_log = target.committer.insert_log()
            live = list(insert_log.live_files().values()) if insert_log is not None else []
        return [Rewrite(target.collection_id, target.segments[seg], seg, partition, group, target.insert_schema,
                        target.pk, self.storage)
                for (partition, seg), files in sorted(segment_files(live, target.segments).items())
                for group in plan_segment(files, self.settings)]

    def _rewrite(self, rewrites: list[Rewrite], report: RoundReport) -> dict[int, FileEntry | None]:
        """The rewrites on executors; by ``id`` of the rewrite, the file written (None: every row
        was deleted). A failed job fails only this batch (its files, if any were written, are
        never committed: the sweep's orphans)."""
        try:
            slices = max(1, min(TASKS_PER_JOB, -(-len(rewrites) // REWRITES_PER_TASK)))
            files = launch(self.sc, REWRITE, rewrites, slices=slices, description=f"{len(rewrites)} segment rewrite(s)")
        except SparkStopped:
            raise
        except Exception as e:  # noqa: BLE001 - tried again next round
            report.failed += len(rewrites)
            log.warning("compaction: a rewrite job failed (%s); next round tries again",
                        (str(e).strip().splitlines() or [type(e).__name__])[0][:300])
            return {}
        return {id(r): f for r, f in zip(rewrites, files)}

    def _commit(self, target: CompactionTarget, done: list[tuple[Rewrite, FileEntry | None]],
                report: RoundReport) -> None:
        committer = target.committer
        with committer.lock:
            locked = time.monotonic()
            try:
                self._commit_locked(target, done, report)
            finally:
                report.locked_s = max(report.locked_s, time.monotonic() - locked)

    def _commit_locked(self, target: CompactionTarget, done: list[tuple[Rewrite, FileEntry | None]],
                       report: RoundReport) -> None:
        committer = target.committer
        live = {}
        for r, entry in done:
            txn = self.members.compactable(r.vchannel, r.segment_id)
            if txn is None:   # released, failed or dropped since it was planned
                delete_files(self.storage, committer.insert_log_uri, _written([(r, entry)]))
            else:
                live[id(r)] = txn
        kept = [(r, entry) for r, entry in done if id(r) in live]
        if not kept:
            return
        insert_log = committer.insert_log()
        assert insert_log is not None   # the rewrites were planned from its live files: the table exists
        try:
            commit_rewrites(insert_log, kept, {r.vchannel: live[id(r)] for r, _ in kept}, target.schema)
        except (FilesRemoved, TxnMoved) as e:
            report.refused += len(kept)
            delete_files(self.storage, insert_log.uri, _written(kept))
            log.info("compaction of collection %d refused: %s", target.collection_id, e)
            return
        except Exception as e:  # noqa: BLE001 - the other collections' rewrites still commit
            # It may have landed (CommitInDoubt, a lost answer): its files stay, and a version
            # that names none of them leaves them to the sweep's orphans. The pipeline's commits
            # check their removes against whatever lands (FilesRemoved).
            report.failed += len(kept)
            log.warning("compaction of collection %d failed, its files kept: %s: %s", target.collection_id,
                        type(e).__name__, e)
            return
        report.rewrites += len(kept)
        report.files_in += sum(len(r.inputs) for r, _ in kept)
        report.files_out += len(_written(kept))
        inputs = [FileEntry(TableKind.INSERT, f.path, f.size, f.rows, "") for r, _ in kept for f in r.inputs]
        self._replaced.append(_Replaced(time.time() + self.settings.retention, insert_log.uri, inputs))

    def sweep(self) -> int:
        """Delete the files this node's tables removed more than ``retention`` ago, and the files no
        commit added that are older than ``orphan_retention`` (delta-rs counts both in whole hours:
        rounded up), each insert binlog with its bloom filter, and the filters older than that whose
        binlog is gone; how many (a filter deleted with its binlog not counted). A full vacuum also
        lists the removed files older than its retention, hence never less than ``retention`` for it."""
        hours = math.ceil(self.settings.retention / 3600)
        orphan_hours = max(hours, math.ceil(self.settings.orphan_retention / 3600))
        removed = orphans = filters = 0
        for collection_id in self.members.collection_ids():
            for uri, filtered in ((self.storage.insert_log(collection_id), True),
                                  (self.storage.delta_log(collection_id), False)):
                found = self._sweep_table(uri, hours, orphan_hours, filtered)
                removed, orphans, filters = removed + found[0], orphans + found[1], filters + found[2]
        if removed or orphans or filters:
            log.info("compaction: deleted %d file(s) removed from the tables over %d h ago, %d file(s) no commit "
                     "added and %d bloom filter(s) of no binlog, over %d h old", removed, hours, orphans, filters,
                     orphan_hours)
        return removed + orphans + filters

    def _sweep_table(self, uri: str, hours: int, orphan_hours: int, filtered: bool) -> tuple[int, int, int]:
        """One table's sweep: how many removed files, files no commit added and orphaned bloom
        filters it deleted. ``filtered``: its files have bloom filters (insert_log). Binlogs go
        before their filters: a filter a crash then leaves is an orphan for a later sweep."""
        table = open_table(uri, self.storage.delta_options(uri))
        if table is None:
            return 0, 0, 0
        # delta-rs lists no live path (a DV update removes a path and adds it back); never one here either
        live = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
        tombstones = set(table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False)) - live
        unknown = set(table.vacuum(retention_hours=orphan_hours, dry_run=True, enforce_retention_duration=False,
                                   full=True)) - tombstones - live
        paths = sorted(tombstones | unknown)
        delete_paths(self.storage, uri, paths + ([pk_bloom_path(p) for p in paths] if filtered else []))
        stale = []
        if filtered:
            fs, base = self.storage.filesystem(uri)
            stale = orphaned_filters(fs, base, live, time.time() - orphan_hours * 3600)
            delete_paths(self.storage, uri, stale)
        return len(tombstones), len(unknown), len(stale)

    def vacuum(self, now: float) -> int:
        """Delete the files rewrites replaced ``retention`` seconds ago or earlier; how many."""
        deleted = 0
        while self._replaced and self._replaced[0].due <= now:
            done = self._replaced.popleft()
            delete_files(self.storage, done.root, done.files)
            deleted += len(done.files)
        return deleted


def _written(done: list[tuple[Rewrite, FileEntry | None]]) -> list[FileEntry]:
    """The files rewrites wrote (one that deleted every row wrote none)."""
    return [entry for _, entry in done if entry is not None]


_Planned = tuple[CompactionTarget, list[Rewrite]]   # a collection's target and its rewrites


def _batches(planned: list[_Planned], max_rewrites: int) -> list[list[_Planned]]:
    """Planned collections in batches of about ``max_rewrites`` rewrites (one Spark job each)."""
    out: list[list[_Planned]] = []
    batch: list[_Planned] = []
    n = 0
    for item in planned:
        if batch and n + len(item[1]) > max_rewrites:
            out.append(batch)
            batch, n = [], 0
        batch.append(item)
        n += len(item[1])
    if batch:
        out.append(batch)
    return out
