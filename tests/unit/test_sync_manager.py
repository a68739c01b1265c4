"""The sync step (``pipeline.sync_manager.SyncManager``) on real Delta tables and flowgraphs: it
commits the collections the policies pick, one Delta commit each, and a vchannel refused by the
fence or by Delta, or whose deletes could not be marked, fails alone (Spark and etcd are fakes)."""

from __future__ import annotations

import shutil
import time

import pytest

from deltanode.config.sections.pipeline import SyncSettings
from deltanode.delta.tables import open_table, read_table
from deltanode.failure.kinds import FailureKind
from deltanode.jobs.contract import JobGroup
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.state import meta
from deltanode.vchannel.flowgraph import FlowgraphStatus

from .fakes import FakeFence
from .vchannels import loaded, read_deletes, read_rows, read_ticks, stages

# Idle vchannels (ticks only) wait for their checkpoint interval: an hour, so never in these tests.
SETTINGS = SyncSettings(checkpoint_interval=3600.0)


def sync(s, *fgs) -> CycleReport:
    report = CycleReport(1)
    s.syncs.sync({fg.vchannel: fg for fg in fgs}, time.monotonic(), report)
    return report


def insert_pks(storage, collection_id: int) -> list[int]:
    return sorted(read_table(storage, storage.insert_log(collection_id)).column("pk").to_pylist())


def test_the_collections_with_data_get_one_commit_each_and_idle_ones_wait(tmp_path):
    s = stages(tmp_path, settings=SETTINGS)
    a0, a1, b0 = loaded(s, 1, 0), loaded(s, 1, 1), loaded(s, 2, 0)
    read_rows(a0, s.storage, [1, 2])
    read_rows(a1, s.storage, [3])
    read_ticks(b0)
    before = open_table(s.storage.insert_log(1)).version()
    report = sync(s, a0, a1, b0)
    assert (report.commits, report.vchannels_committed, report.failed) == (1, 2, [])
    assert open_table(s.storage.insert_log(1)).version() == before + 1   # both vchannels in ONE commit
    assert insert_pks(s.storage, 1) == [1, 2, 3]
    for fg in (a0, a1):
        assert not fg.uncommitted and fg.committed is not None and fg.committed.checkpoint_offset == 10
        assert meta.channel_state(s.storage, 1, fg.vchannel).checkpoint_offset == 10
    # The idle collection's checkpoint is not due: nothing of it was committed.
    assert b0.uncommitted and meta.channel_state(s.storage, 2, b0.vchannel) is None


def test_an_idle_vchannel_is_committed_once_its_checkpoint_interval_is_over(tmp_path):
    s = stages(tmp_path, settings=SyncSettings(checkpoint_interval=0.0))
    fg = loaded(s, 1)
    read_ticks(fg, tick=1234)
    report = sync(s, fg)
    assert report.commits == 1 and not fg.uncommitted
    committed = meta.channel_state(s.storage, 1, fg.vchannel)
    assert (committed.checkpoint_offset, committed.checkpoint_ts) == (10, 1234)


def test_a_vchannel_the_fence_refuses_fails_alone_and_its_files_are_deleted(tmp_path):
    fence = FakeFence()
    s = stages(tmp_path, fence=fence, settings=SETTINGS)
    a0, a1 = loaded(s, 1, 0), loaded(s, 1, 1)
    read_rows(a0, s.storage, [1])
    read_rows(a1, s.storage, [2])
    lost = a0.batches.uncommitted_files()
    fence.lost = {a0.vchannel: "etcd: another node owns it"}
    report = sync(s, a0, a1)
    assert fence.checked == [sorted([a0.vchannel, a1.vchannel])]   # one check for every vchannel to commit
    assert report.failed == [a0.vchannel] and a0.status == FlowgraphStatus.FAILED
    assert a0.last_failure.kind == FailureKind.OWNERSHIP_LOST and "another node owns it" in a0.last_error
    assert not (tmp_path / "insert_log" / "1" / lost[0].path).exists()
    assert insert_pks(s.storage, 1) == [2] and a1.status == FlowgraphStatus.RUNNING and not a1.uncommitted
    assert meta.channel_state(s.storage, 1, a0.vchannel) is None


@pytest.mark.parametrize("etcd_reachable", [True, False])
def test_a_vchannel_another_writer_moved_is_refused_alone_and_restarts_at_once_if_etcd_says_it_is_ours(
        tmp_path, etcd_reachable):
    s = stages(tmp_path, fence=FakeFence(reachable=etcd_reachable), settings=SETTINGS)
    a0, a1 = loaded(s, 1, 0), loaded(s, 1, 1)
    read_rows(a0, s.storage, [1])
    read_rows(a1, s.storage, [2])
    other = stages(tmp_path, settings=SETTINGS)   # a node that took a1 over meanwhile, on the same tables
    taken = loaded(other, 1, 1)
    read_rows(taken, other.storage, [3])
    assert sync(other, taken).commits == 1
    now = time.monotonic()
    report = CycleReport(1)
    s.syncs.sync({a0.vchannel: a0, a1.vchannel: a1}, now, report)
    assert report.failed == [a1.vchannel] and a1.last_failure.kind == FailureKind.COMMIT_REFUSED
    # etcd confirmed just now the vchannel is this node's: it restarts without a backoff (else it waits)
    assert (a1.retry_at == now) is etcd_reachable
    assert a0.status == FlowgraphStatus.RUNNING and not a0.uncommitted
    assert insert_pks(s.storage, 1) == [1, 3]


def test_a_collection_whose_commit_raises_fails_its_vchannels_and_the_other_collections_commit(tmp_path):
    s = stages(tmp_path, settings=SETTINGS)
    a0, b0 = loaded(s, 1), loaded(s, 2)
    read_rows(a0, s.storage, [1])
    read_rows(b0, s.storage, [2])
    log_dir = tmp_path / "insert_log" / "1" / "_delta_log"
    shutil.rmtree(log_dir)
    log_dir.write_text("not a directory")   # collection 1's table cannot take a commit
    report = sync(s, a0, b0)
    assert report.failed == [a0.vchannel] and a0.last_failure.kind == FailureKind.COMMIT_FAILED
    assert b0.status == FlowgraphStatus.RUNNING and not b0.uncommitted and insert_pks(s.storage, 2) == [2]
    assert report.commits == 1


def test_deletes_are_marked_by_one_job_and_committed_as_deletion_vectors(tmp_path):
    s = stages(tmp_path, settings=SETTINGS)
    a0, a1 = loaded(s, 1, 0), loaded(s, 1, 1)
    read_rows(a0, s.storage, [1, 2, 3])
    read_rows(a1, s.storage, [11, 12], segment=6)
    sync(s, a0, a1)
    assert s.sc.jobs == []   # no deletes: no marking job
    read_deletes(a0, s.storage, [2])
    read_deletes(a1, s.storage, [12])
    report = sync(s, a0, a1)
    assert [(job.group, sorted(t.vchannel for t in job.specs)) for job in s.sc.jobs] == [
        (JobGroup.PIPELINE, sorted([a0.vchannel, a1.vchannel]))]
    assert (report.marked_rows, report.marked_files, report.commits) == (2, 2, 1)
    assert insert_pks(s.storage, 1) == [1, 3, 11]
    pks = read_table(s.storage, s.storage.delta_log(1)).column("pk").to_pylist()
    assert sorted(pks) == [2, 12] and not a0.uncommitted and not a1.uncommitted


def test_a_failed_marking_job_fails_the_vchannels_with_deletes_only(tmp_path):
    s = stages(tmp_path, settings=SETTINGS)
    a0, a1 = loaded(s, 1, 0), loaded(s, 1, 1)
    read_rows(a0, s.storage, [1, 2])
    sync(s, a0)
    read_deletes(a0, s.storage, [2])
    read_rows(a1, s.storage, [5])
    s.sc.failure = RuntimeError("Job aborted: executor lost\n at org.apache.spark...")
    report = sync(s, a0, a1)
    assert report.failed == [a0.vchannel] and a0.last_failure.kind == FailureKind.MARK_FAILED
    assert "executor lost" in a0.last_error and "org.apache" not in a0.last_error
    assert a1.status == FlowgraphStatus.RUNNING and not a1.uncommitted
    assert insert_pks(s.storage, 1) == [1, 2, 5]   # nothing of a0's batch, its deletes included
    assert open_table(s.storage.delta_log(1)) is None


def test_collections_are_due_for_compaction_after_enough_new_insert_files(tmp_path):
    s = stages(tmp_path, settings=SETTINGS, new_collection_files=3)
    a0 = loaded(s, 1)   # seen for the first time: counts as 3 files committed
    assert set(s.syncs.take_due(3)) == {1}
    assert s.syncs.take_due(1) == {}   # taken: its count starts again from 0
    read_rows(a0, s.storage, [1], segment=5)
    sync(s, a0)
    assert s.syncs.take_due(2) == {}
    read_rows(a0, s.storage, [2], segment=6)
    sync(s, a0)
    due = s.syncs.take_due(2)
    assert list(due) == [1] and due[1] is s.loader.committer(a0)   # the collection's one committer
    assert len(open_table(s.storage.insert_log(1)).get_add_actions(flatten=True).column("path")) == 2
