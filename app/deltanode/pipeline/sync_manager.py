"""The sync step of a cycle (driver): which collections to commit, the fence, the Delta commits.

After a cycle's batches are applied, the sync policies (``sync_policy``) pick collections;
one fence check (one etcd read) covers every vchannel about to commit; the rows their deletes
remove are marked (``delete_mark_job``: one Spark job), and each chosen collection gets one
Delta commit for all its vchannels on this node (``state.commit.CollectionCommitter``, one
per collection, kept here). A vchannel refused by the fence or by Delta, or whose deletes
could not be marked, fails alone, through the pipeline's failure callback.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import pyarrow as pa
from pyspark import SparkContext

from ..config.sections.pipeline import SyncSettings
from ..delta.layout import StorageLayout
from ..delta.object_store import is_object_store
from ..failure.classify import Failure, classify
from ..failure.kinds import FailureKind
from ..records import TableKind
from ..state.commit import CollectionCommitter, QuarantineLog, VchannelSync
from ..vchannel.flowgraph import FlowgraphStatus, VchannelFlowgraph
from ..wire.positions import physical_ms
from .cycle_report import CycleReport
from .delete_mark_job import DeleteMarker, with_marks
from .sync_policy import Candidate, SyncSelector
from .vchannel_stops import Fence

# Commits of one sync logged at INFO, the rest at DEBUG (the cycle's line counts them all): a line
# per commit took a sixth of the driver's time at 1,000 vchannels (500 commits a cycle, py-spy).
COMMIT_LINES = 20

log = logging.getLogger(__name__)


class FailVchannel(Protocol):
    def __call__(self, fg: VchannelFlowgraph, failure: Failure, now: float, report: CycleReport | None = None,
                 at_once: bool = False, keep_files: bool = False) -> None:
        """Fail ``fg`` (``vchannel_stops.VchannelStops.fail``)."""


class SyncManager:
    """Runs on the driver, in the pipeline's loop; ``committer`` and ``take_due`` from any thread."""

    def __init__(self, *, sc: SparkContext, storage: StorageLayout, settings: SyncSettings, fence: Fence | None,
                 fail: FailVchannel, new_collection_files: int, max_tasks: int) -> None:
        """``new_collection_files``: what a collection seen for the first time counts as committed
        files, for ``take_due`` (the compactor then looks at its files from before this node once);
        ``max_tasks``: the Spark tasks marking deletes may use."""
        self.storage, self.fence, self._fail = storage, fence, fail
        self._marker = DeleteMarker(sc=sc, storage=storage, max_tasks=max_tasks)
        self._selector = SyncSelector(settings, time.monotonic())
        self._quarantine = QuarantineLog(storage)
        self._committers: dict[int, CollectionCommitter] = {}
        self._new_files: dict[int, int] = {}      # collection id -> insert files committed since take_due
        self._first_count = new_collection_files
        self._lock = threading.Lock()

    def committer(self, collection_id: int, insert_schema: pa.Schema, delete_schema: pa.Schema) -> CollectionCommitter:
        """The collection's committer, made on first use."""
        with self._lock:
            found = self._committers.get(collection_id)
            if found is None:
                self._new_files[collection_id] = self._first_count
                found = self._committers[collection_id] = CollectionCommitter(
                    self.storage, collection_id, insert_schema, delete_schema, self._quarantine)
            return found

    def take_due(self, min_new_files: int) -> dict[int, CollectionCommitter]:
        """The collections into which ``min_new_files`` insert files or more were committed since
        they were last taken, with their committers; their counts start again from 0."""
        with self._lock:
            due = [cid for cid, n in self._new_files.items() if n >= min_new_files]
            for cid in due:
                self._new_files[cid] = 0
            return {cid: self._committers[cid] for cid in due}

    def sync(self, current: dict[str, VchannelFlowgraph], now: float, report: CycleReport) -> None:
        """Commit the collections the policies pick among ``current`` (the cycle's live vchannels)."""
        waiting = [fg for fg in current.values()
                   if fg.uncommitted and fg.status in (FlowgraphStatus.RUNNING, FlowgraphStatus.DROPPED)]
        chosen = set(self._selector.select([
            Candidate(fg.vchannel, fg.collection_id, fg.urgent, fg.batches.pending_since, fg.batches.pending_bytes(),
                      fg.committed_at) for fg in waiting
            if not fg.ticks_only or self._selector.may_pick_idle(fg.committed_at, now)], now))
        syncing = [fg for fg in waiting if fg.collection_id in chosen]
        if not syncing:
            return
        if self.fence is not None:
            for vchannel, why in self.fence.check(sorted(fg.vchannel for fg in syncing)).items():
                self._fail(current[vchannel], Failure(kind=FailureKind.OWNERSHIP_LOST, message=why), now, report)
            syncing = [fg for fg in syncing if fg.status != FlowgraphStatus.FAILED]
        groups: dict[int, list[VchannelFlowgraph]] = {}
        for fg in sorted(syncing, key=lambda fg: fg.collection_id):
            groups.setdefault(fg.collection_id, []).append(fg)
        syncs = {fg.vchannel: fg.sync() for fg in syncing}
        tasks = [task for group in groups.values() for task in self._marker.plan(
            self._committer_of(group[0]), group[0].layout.primary_key.name, [syncs[fg.vchannel] for fg in group])]
        marked = self._marker.run(tasks, report)
        for fg in syncing:
            result = marked.get(fg.vchannel)
            if result is not None and result.error is not None:
                self._fail(fg, result.error, now, report)
            elif result is not None and result.stale:
                log.info("%s: commit waits for the next cycle: %s", fg.vchannel, result.stale)
        stale = {v for v, r in marked.items() if r.stale}
        for cid, group in groups.items():
            live = [fg for fg in group if fg.status != FlowgraphStatus.FAILED and fg.vchannel not in stale]
            if live:
                self._commit_collection(cid, live, {fg.vchannel: with_marks(syncs[fg.vchannel], marked.get(fg.vchannel))
                                                    for fg in live}, now, report)

    def _committer_of(self, fg: VchannelFlowgraph) -> CollectionCommitter:
        return self.committer(fg.collection_id, fg.layout.insert_schema(), fg.layout.delete_schema())

    def _commit_collection(self, cid: int, group: list[VchannelFlowgraph], syncs: dict[str, VchannelSync], now: float,
                           report: CycleReport) -> None:
        committer = self._committer_of(group[0])
        commit_started = time.monotonic()
        schema = max(group, key=lambda fg: fg.schema_rank).table_schema   # the columns their files may have
        try:
            with committer.lock:
                result = committer.commit(list(syncs.values()), schema)
        except Exception as e:  # noqa: BLE001 - this collection's vchannels fail, alone
            # The commit may have landed (a lost answer, CommitInDoubt) or its side commits did:
            # the files stay, and the reload from Delta resumes after whatever landed. Files no
            # version names are the compactor's sweep's orphans.
            for fg in group:
                self._fail(fg, classify(e, kind=FailureKind.COMMIT_FAILED, where=self.storage.root, step="committing",
                                        store=is_object_store(self.storage.root)),
                           now, report, keep_files=True)
            return
        if result.version is not None:
            with self._lock:
                self._new_files[cid] = self._new_files.get(cid, 0) + sum(
                    len(syncs[v].table_files(TableKind.INSERT)) for v in result.committed)
            report.commits += 1
            report.commit_seconds.append(time.monotonic() - commit_started)
            _log_commit(cid, result.version, group, syncs, result.committed, report.commits)
        for vchannel, why in result.deferred.items():
            log.info("%s: commit waits for the next cycle: %s", vchannel, why)
        # The fence passed before the commit, but the refusal may come long after it (a node paused
        # past its lease): etcd is asked again for the refused vchannels alone.
        refused = sorted(v for v in result.refused if v in {fg.vchannel for fg in group})
        lost = self.fence.check(refused) if self.fence is not None and refused else {}
        for fg in group:
            if fg.vchannel in lost:
                self._fail(fg, Failure(kind=FailureKind.OWNERSHIP_LOST, message=lost[fg.vchannel]), now, report,
                           keep_files=True)
            elif fg.vchannel in result.committed:
                had_rows = fg.batches.pending_since is not None
                fg.committed_sync(syncs[fg.vchannel], result.committed[fg.vchannel], time.monotonic())
                tick = syncs[fg.vchannel].state.checkpoint_ts
                if had_rows and tick:
                    report.commit_lag.append((fg.vchannel, time.time() - physical_ms(tick) / 1000))
                report.vchannels_committed += 1
            elif fg.vchannel in result.refused:
                # etcd confirmed just now that this node owns the vchannel: the other writer is a
                # node cut off from etcd, which stops at its next refused commit, or this node's own
                # commit whose answer was lost landed late; restart at once.
                owner = self.fence is not None and self.fence.reachable
                self._fail(fg, Failure(kind=FailureKind.COMMIT_REFUSED, message=result.refused[fg.vchannel]), now,
                           report, at_once=owner, keep_files=True)


def _log_commit(cid: int, version: int, group: list[VchannelFlowgraph], syncs: dict[str, VchannelSync],
                committed: dict, nth: int) -> None:
    """One line per Delta commit, the ``nth`` of its sync: INFO when it carries rows or events
    and is among the sync's first ``COMMIT_LINES``, DEBUG when it only moves idle checkpoints (at
    1,000 idle vchannels those are up to ``checkpoint.max.rate`` a second) or comes later."""
    moved = [(fg, syncs[fg.vchannel]) for fg in group if fg.vchannel in committed]
    if not moved:
        return
    carries = any(sync.files or sync.dropped_segments for _, sync in moved)
    level = logging.INFO if carries and nth <= COMMIT_LINES else logging.DEBUG
    if nth == COMMIT_LINES + 1 and log.isEnabledFor(logging.INFO):
        log.info("more commits in this sync: logged at DEBUG (the cycle's line counts them)")
    if log.isEnabledFor(level):
        log.log(level, "collection %d: Delta version %d: %s", cid, version, "; ".join(
            f"{fg.vchannel} {fg.committed.checkpoint_offset if fg.committed else '-'}->{sync.end} "
            f"(ts {sync.state.checkpoint_ts}, {sum(f.rows for f in sync.files)} rows in {len(sync.files)} files)"
            for fg, sync in moved))

