"""The delete-marking job's driver side: a sync's deletes marked in the insert binlogs they hit,
before its commits (runs on the driver; the executor side is ``executor.delete_mark_task``).

For each vchannel about to commit whose batches read deletes (recorded now, or replayed after
a crash: ``records.TableKind.REPLAYED_DELETES``), one ``records.MarkTask``: its
delete binlogs and the insert binlogs that could hold a row they remove, the live files of
its segments (the committer's log knows them, with their deletion vectors) and the sync's new
files, kept when their partition, key range and ``_ts`` range allow it (from the files'
stats: a delete of ts T only removes rows below T). The tasks run as one Spark job on the
executors (``executor.delete_mark_task``), which read the files; each vchannel's marks go into its
sync, and its commit writes them (``state.commit``). The driver sees paths, stats and deletion vectors, never rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace

from pyspark import SparkContext

from ..delta.actions import AddFile
from ..delta.layout import StorageLayout, segment_of
from ..executor.delete_mark_task import ALL_PARTITIONS, mark
from ..failure.classify import Failure, classify
from ..failure.kinds import FailureKind
from ..jobs.contract import JobGroup, JobKind
from ..jobs.launch import SparkStopped, launch, local_dir
from ..records import FileEntry, MarkCandidate, MarkResult, MarkTask, PrimaryKey, TableKind
from ..state.commit import CollectionCommitter, VchannelSync
from .cycle_report import CycleReport

# One task per vchannel with deletes; the pipeline's group: its stop cancels them with the cycle's.
MARK_DELETES = JobKind(name="deltanode: marking deletes", run=mark, group=JobGroup.PIPELINE)


@dataclass(frozen=True, kw_only=True)
class _Range:
    """What a file's (or a sync's deletes') stats say of its keys and timestamps."""

    pk_min: PrimaryKey
    pk_max: PrimaryKey
    ts_min: int
    ts_max: int

    @classmethod
    def of(cls, stats: str, pk: str) -> _Range | None:
        """None when the stats lack the key's bounds (then the file is a candidate whatever its keys)."""
        doc = json.loads(stats) if stats else {}
        lo, hi = doc.get("minValues", {}), doc.get("maxValues", {})
        if pk not in lo or pk not in hi or "_ts" not in lo:
            return None
        return cls(pk_min=lo[pk], pk_max=hi[pk], ts_min=int(lo["_ts"]), ts_max=int(hi["_ts"]))

    def may_hold_rows_removed_by(self, deletes: _Range) -> bool:
        """Keys overlap, and some row is older than the latest delete."""
        return self.pk_min <= deletes.pk_max and deletes.pk_min <= self.pk_max and self.ts_min < deletes.ts_max


def _deletes_range(files: list[FileEntry], pk: str) -> _Range | None:
    ranges = [r for f in files if (r := _Range.of(f.stats, pk)) is not None]
    if len(ranges) < len(files):   # a file without bounds: any key may be deleted
        return None
    return _Range(pk_min=min(r.pk_min for r in ranges), pk_max=max(r.pk_max for r in ranges),
                  ts_min=min(r.ts_min for r in ranges), ts_max=max(r.ts_max for r in ranges))


def _candidates(sync: VchannelSync, committed: dict[str, AddFile], pk: str,
                deletes: list[FileEntry]) -> list[MarkCandidate]:
    partitions = {f.partition_id for f in deletes}
    every = ALL_PARTITIONS in partitions
    bounds = _deletes_range(deletes, pk)
    segments = {seg_id for seg_id in sync.state.segments if seg_id not in sync.dropped_segments}
    files = [(path, add.rows, add.stats, add.deletion_vector, where[0], add.pk_bloom)
             for path, add in committed.items() if (where := segment_of(path)) is not None and where[1] in segments]
    files += [(f.path, f.rows, f.stats, None, f.partition_id, f.pk_bloom) for f in sync.table_files(TableKind.INSERT)
              if f.segment_id in segments]
    out = []
    for path, rows, stats, dv, partition, bloom in files:
        if not every and partition not in partitions:
            continue
        own = _Range.of(stats, pk)
        if bounds is not None and own is not None and not own.may_hold_rows_removed_by(bounds):
            continue
        out.append(MarkCandidate(path=path, rows=rows, partition_id=partition, deletion_vector=dv,
                                 pk_min=own.pk_min if own else None, pk_max=own.pk_max if own else None,
                                 pk_bloom=bloom))
    return out


class DeleteMarker:
    """Runs on the driver, in the pipeline's loop."""

    def __init__(self, *, sc: SparkContext, storage: StorageLayout, max_tasks: int) -> None:
        self.sc, self.storage, self.max_tasks = sc, storage, max_tasks

    def plan(self, committer: CollectionCommitter, pk: str, syncs: list[VchannelSync]) -> list[MarkTask]:
        """The tasks of one collection's syncs (those with deletes)."""
        with_deletes = [s for s in syncs
                        if s.table_files(TableKind.DELETE) or s.table_files(TableKind.REPLAYED_DELETES)]
        if not with_deletes:
            return []
        with committer.lock:
            insert_log = committer.insert_log()
            committed = dict(insert_log.live_files()) if insert_log is not None else {}
        tasks = []
        for s in with_deletes:
            deletes = s.table_files(TableKind.DELETE) + s.table_files(TableKind.REPLAYED_DELETES)
            tasks.append(MarkTask(collection_id=committer.collection_id, vchannel=s.vchannel, pk=pk,
                                  deletes=tuple(f.path for f in deletes),
                                  candidates=tuple(_candidates(s, committed, pk, deletes)), storage=self.storage))
        return tasks

    def run(self, tasks: list[MarkTask], report: CycleReport) -> dict[str, MarkResult]:
        """The tasks as one Spark job; each vchannel's result. A failed job fails its vchannels
        (their results carry the error); a stopped Spark raises ``SparkStopped`` (none fails)."""
        if not tasks:
            return {}
        started = time.monotonic()
        try:
            results = launch(self.sc, MARK_DELETES, tasks, description=f"the deletes of {len(tasks)} vchannel(s)",
                             slices=min(len(tasks), self.max_tasks))
        except SparkStopped:
            raise
        except Exception as e:  # noqa: BLE001 - these vchannels fail, alone; the next cycle reloads them
            why = self._job_failure(e)
            results = [MarkResult(vchannel=t.vchannel, error=why) for t in tasks]
        report.mark_s += time.monotonic() - started
        for r in results:
            report.marked_files += len(r.marks)
            report.marked_rows += sum(m.newly_deleted for m in r.marks)
            report.marked_dv_bytes += sum(m.deletion_vector.size_in_bytes for m in r.marks)
        return {r.vchannel: r for r in results}

    def _job_failure(self, e: Exception) -> Failure:
        """Why the vchannels of a failed marking job fail: out of space there is Spark's local
        directory (a task's own errors come back in its result)."""
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        return classify(e, kind=FailureKind.MARK_FAILED, where=f"Spark's local directory {local_dir(self.sc)}",
                        step="marking deletes", message=f"its Spark job failed: {first_line}")


def with_marks(sync: VchannelSync, result: MarkResult | None) -> VchannelSync:
    return sync if result is None or not result.marks else replace(sync, marks=result.marks)
