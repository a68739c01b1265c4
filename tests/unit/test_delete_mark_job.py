"""Marking a sync's deletes (``pipeline.delete_mark_job.DeleteMarker``), its driver side on real Delta
tables: which syncs get a task, which insert binlogs are their candidates (their segments' live
files and new ones, kept by partition, key and ``_ts`` range), and the one job that runs the tasks
(a fake Spark job runner: the executors' ``mark`` runs here)."""

from __future__ import annotations

import time

from deltanode.executor.delete_mark_task import ALL_PARTITIONS
from deltanode.jobs.contract import JobGroup
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.delete_mark_job import DeleteMarker, with_marks
from deltanode.records import MarkResult, TableKind

from .fakes import FakeSparkContext
from .vchannels import loaded, read_deletes, read_rows, stages


def committed(s, *fgs) -> None:
    """What ``fgs`` read is committed (the sync stage, with no policy holding it back)."""
    s.syncs.sync({fg.vchannel: fg for fg in fgs}, time.monotonic(), CycleReport(0))
    assert not any(fg.uncommitted for fg in fgs)


def paths(fg, segment: int) -> set[str]:
    """The insert binlogs of ``segment`` among ``fg``'s uncommitted files."""
    return {f.path for f in fg.batches.uncommitted_files() if f.table == TableKind.INSERT and f.segment_id == segment}


def test_only_syncs_with_deletes_get_a_task_with_their_delete_binlogs(tmp_path):
    s = stages(tmp_path)
    marker = DeleteMarker(sc=s.sc, storage=s.storage, max_tasks=4)   # type: ignore[arg-type]
    a0, a1 = loaded(s, 1, 0), loaded(s, 1, 1)
    read_rows(a0, s.storage, [1])
    read_rows(a1, s.storage, [2])
    read_deletes(a1, s.storage, [2])
    tasks = marker.plan(s.loader.committer(a0), "pk", [a0.sync(), a1.sync()])
    assert [t.vchannel for t in tasks] == [a1.vchannel]
    deletes = {f.path for f in a1.batches.uncommitted_files() if f.table == TableKind.DELETE}
    assert set(tasks[0].deletes) == deletes and tasks[0].collection_id == 1 and tasks[0].pk == "pk"
    assert marker.plan(s.loader.committer(a0), "pk", [a0.sync()]) == []


def test_candidates_are_the_files_of_its_own_segments_that_may_hold_a_row_its_deletes_remove(tmp_path):
    s = stages(tmp_path)
    marker = DeleteMarker(sc=s.sc, storage=s.storage, max_tasks=4)   # type: ignore[arg-type]
    a0, a1 = loaded(s, 1, 0), loaded(s, 1, 1)
    read_rows(a0, s.storage, [1, 2, 3], segment=5, partition=1, ts=100)   # may hold key 2 below ts 500
    read_rows(a0, s.storage, [10, 11], segment=6, partition=1, ts=100)    # keys out of the deletes' range
    read_rows(a0, s.storage, [2], segment=7, partition=2, ts=100)         # another partition
    read_rows(a0, s.storage, [2], segment=8, partition=1, ts=600)         # every row newer than the deletes
    read_rows(a1, s.storage, [2], segment=20, partition=1, ts=100)        # another vchannel's segment
    wanted = paths(a0, 5)
    committed(s, a0, a1)
    read_rows(a0, s.storage, [2], segment=9, partition=1, ts=300)         # new in this sync
    wanted |= paths(a0, 9)
    read_deletes(a0, s.storage, [2], partition=1, ts=500)
    [task] = marker.plan(s.loader.committer(a0), "pk", [a0.sync()])
    assert {c.path for c in task.candidates} == wanted
    seg5 = next(c for c in task.candidates if c.path.startswith("1/5/"))
    assert (seg5.rows, seg5.partition_id, seg5.pk_min, seg5.pk_max, seg5.deletion_vector) == (3, 1, 1, 3, None)


def test_a_delete_of_every_partition_looks_in_every_partition(tmp_path):
    s = stages(tmp_path)
    marker = DeleteMarker(sc=s.sc, storage=s.storage, max_tasks=4)   # type: ignore[arg-type]
    fg = loaded(s, 1)
    read_rows(fg, s.storage, [2], segment=5, partition=1)
    read_rows(fg, s.storage, [2], segment=7, partition=2)
    wanted = paths(fg, 5) | paths(fg, 7)
    committed(s, fg)
    read_deletes(fg, s.storage, [2], partition=ALL_PARTITIONS)
    [task] = marker.plan(s.loader.committer(fg), "pk", [fg.sync()])
    assert {c.path for c in task.candidates} == wanted


def test_the_tasks_run_as_one_job_and_each_vchannel_gets_its_marks(tmp_path):
    s = stages(tmp_path)
    fgs = [loaded(s, 1, shard) for shard in range(3)]
    for i, fg in enumerate(fgs):
        read_rows(fg, s.storage, [10 * i + 1, 10 * i + 2, 10 * i + 3], segment=5 + i)
    committed(s, *fgs)
    for i, fg in enumerate(fgs):
        read_deletes(fg, s.storage, [10 * i + 1, 10 * i + 3] if i else [99])   # shard 0 deletes no row of its own
    sc = FakeSparkContext()
    marker = DeleteMarker(sc=sc, storage=s.storage, max_tasks=2)   # type: ignore[arg-type]
    tasks = marker.plan(s.loader.committer(fgs[0]), "pk", [fg.sync() for fg in fgs])
    report = CycleReport(1)
    results = marker.run(tasks, report)
    assert [(job.group, len(job.items), job.slices) for job in sc.jobs] == [(JobGroup.PIPELINE, 3, 2)]
    assert set(results) == {fg.vchannel for fg in fgs} and not any(r.error for r in results.values())
    assert results[fgs[0].vchannel].marks == ()
    for i in (1, 2):
        [mark] = results[fgs[i].vchannel].marks
        assert mark.path.startswith(f"1/{5 + i}/") and mark.base is None and mark.newly_deleted == 2
    assert (report.marked_files, report.marked_rows) == (2, 4) and report.marked_dv_bytes > 0
    assert report.mark_s > 0


def test_a_failed_job_gives_each_of_its_vchannels_the_error_and_marks_nothing(tmp_path):
    s = stages(tmp_path)
    fgs = [loaded(s, 1, shard) for shard in range(2)]
    for fg in fgs:
        read_rows(fg, s.storage, [1, 2])
        read_deletes(fg, s.storage, [1])
    sc = FakeSparkContext()
    sc.failure = RuntimeError("\nPython worker exited unexpectedly (crashed)\njava.io.EOFException ...")
    marker = DeleteMarker(sc=sc, storage=s.storage, max_tasks=4)   # type: ignore[arg-type]
    report = CycleReport(1)
    results = marker.run(marker.plan(s.loader.committer(fgs[0]), "pk", [fg.sync() for fg in fgs]), report)
    assert set(results) == {fg.vchannel for fg in fgs}
    # The error's first line only (not the JVM's stack), whatever type carries it.
    assert all(str(r.error).endswith("its Spark job failed: Python worker exited unexpectedly (crashed)")
               for r in results.values())
    assert all(r.marks == () for r in results.values()) and report.marked_files == report.marked_rows == 0


def test_no_task_no_job(tmp_path):
    sc = FakeSparkContext()
    marker = DeleteMarker(sc=sc, storage=stages(tmp_path).storage, max_tasks=4)   # type: ignore[arg-type]
    assert marker.run([], CycleReport(1)) == {} and sc.jobs == []


def test_a_sync_takes_its_marks_only_when_it_has_some(tmp_path):
    s = stages(tmp_path)
    fg = loaded(s, 1)
    read_rows(fg, s.storage, [1, 2])
    committed(s, fg)
    read_deletes(fg, s.storage, [2])
    sync = fg.sync()
    marker = DeleteMarker(sc=FakeSparkContext(), storage=s.storage, max_tasks=4)   # type: ignore[arg-type]
    result = marker.run(marker.plan(s.loader.committer(fg), "pk", [sync]), CycleReport(1))[fg.vchannel]
    assert result.marks and with_marks(sync, result).marks == result.marks
    assert with_marks(sync, result).files == sync.files and with_marks(sync, result).state is sync.state
    assert with_marks(sync, None) is sync and with_marks(sync, MarkResult(vchannel=fg.vchannel)) is sync
