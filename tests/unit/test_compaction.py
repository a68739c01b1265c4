"""Compaction as pure logic (which files are rewritten together) and its commit on real Delta
tables (no Spark): the rewrite keeps every row, marks itself OPTIMIZE / dataChange=false, and is
refused when a file it rewrites was removed meanwhile or another writer took the vchannel."""

import json
import os
import time

import pyarrow as pa
import pytest
from deltanode.pipeline.compactor import Compactor
from deltanode.storage.commit import CollectionCommitter, QuarantineLog, VchannelSync, Watermarks
from deltanode.storage.compaction import (CompactionSettings, Rewrite, SegmentFile, commit_rewrites, plan_segment,
                                          rewrite, segment_of)
from deltanode.storage.channel_state import ChannelState
from deltanode.storage import delta_log
from deltanode.storage.delta_log import FilesRemoved, TxnMoved
from deltanode.storage.layout import StorageLayout
from deltanode.storage.tables import open_table

from .test_commit_protocol import LAYOUT, committer, pks_in, written



def files(*sizes):
    return [SegmentFile(f"1/5/part-{i}.parquet", size, 10) for i, size in enumerate(sizes)]


def test_small_files_are_grouped_up_to_the_target_and_large_ones_left_alone():
    settings = CompactionSettings(min_files=3, target_bytes=100)
    assert plan_segment(files(10, 10), settings) == []                       # fewer than min_files
    groups = plan_segment(files(10, 20, 30, 40, 150, 60), settings)
    assert [sorted(f.size for f in g) for g in groups] == [[10, 20, 30, 40]]  # 60 alone is no group; 150 is large
    assert all(sum(f.size for f in g) <= 100 for g in groups)
    assert plan_segment(files(*[1] * 16), CompactionSettings()) != []      # the defaults: 16 small files


def test_a_binlog_path_names_its_partition_and_segment():
    assert segment_of("7/12/part-x.parquet") == (7, 12)
    assert segment_of("part-x.parquet") is None and segment_of("7/x/part.parquet") is None


def commit_batches(storage, c: CollectionCommitter, batches: list[list[int]]) -> int:
    end = None
    for i, pks in enumerate(batches):
        state = ChannelState("v", 1, "p", checkpoint_offset=i + 1)
        result = c.commit([VchannelSync(state, Watermarks(end), written(storage, pks))])
        assert "v" in result.committed
        end = i + 1
    return end


def plan(storage, c: CollectionCommitter) -> tuple[int, list[Rewrite]]:
    log = c.insert_log()
    table = open_table(log.uri, version=log.version)
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    inputs = tuple(SegmentFile(a["path"], a["size_bytes"], a["num_records"]) for a in adds)
    return log.version, [Rewrite(1, "v", 5, 1, inputs, LAYOUT.insert_schema(), storage)]


def test_a_rewrite_keeps_every_row_and_commits_as_optimize_without_data_change(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2], [3], [4, 5, 6]])
    version, (task,) = plan(storage, c)
    entry = rewrite(task)
    committed = commit_rewrites(c.insert_log(), version, [(task, entry)], {"v": end})
    table = open_table(storage.insert_log(1))
    assert pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist() == [entry.path]
    assert pks_in(storage) == [1, 2, 3, 4, 5, 6]
    with open(tmp_path / "insert_log" / "1" / "_delta_log" / f"{committed:020d}.json") as f:
        lines = [json.loads(line) for line in f]
    assert lines[0]["commitInfo"]["operation"] == "OPTIMIZE"
    assert all(not line[kind]["dataChange"] for line in lines for kind in ("add", "remove") if kind in line)
    assert not any("txn" in line for line in lines)
    assert table.transaction_version("v") == end   # the vchannel's checkpoint did not move


def test_a_rewrite_is_refused_when_its_files_were_removed_or_the_vchannel_moved(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1], [2], [3]])
    version, (task,) = plan(storage, c)
    first = rewrite(task)
    commit_rewrites(c.insert_log(), version, [(task, first)], {"v": end})
    # a second rewrite of the same files, planned at the same version, loses: they were removed
    with pytest.raises(FilesRemoved):
        commit_rewrites(c.insert_log(), version, [(task, first)], {"v": end})
    # another writer moved the txn: refused even though the files are there
    end2 = end + 1
    other = CollectionCommitter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema(), QuarantineLog(storage))
    assert "v" in other.commit([VchannelSync(ChannelState("v", 1, "p", checkpoint_offset=end2), Watermarks(end),
                                             written(storage, [4]))]).committed
    version, (task,) = plan(storage, c)
    with pytest.raises(TxnMoved):
        commit_rewrites(c.insert_log(), version, [(task, rewrite(task))], {"v": end})
    assert pks_in(storage) == [1, 2, 3, 4]


def test_a_rewrite_read_longer_ago_than_the_log_remembers_removes_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(delta_log, "REMOVES_VERSIONS", 2)
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1], [2]])
    version, (task,) = plan(storage, c)
    more = end
    for i, pk in enumerate([3, 4, 5]):
        state = ChannelState("v", 1, "p", checkpoint_offset=more + i + 1)
        assert "v" in c.commit([VchannelSync(state, Watermarks(more + i), written(storage, [pk]))]).committed
    with pytest.raises(FilesRemoved):   # three versions later: its removes are no longer known
        commit_rewrites(c.insert_log(), version, [(task, rewrite(task))], {"v": more + 3})
    assert pks_in(storage) == [1, 2, 3, 4, 5]


class OneCollection:
    """The compactor's view of a node holding collection 1 (only ``collection_ids`` is asked)."""

    def collection_ids(self) -> list[int]:
        return [1]


def test_a_sweep_deletes_what_the_log_removed_longer_than_retention_ago_and_old_orphans(tmp_path, monkeypatch):
    """What a restart keeps the in-memory queue from deleting: a rewrite's inputs removed 3 h ago
    go (retention 1 h), the ones removed now stay, so do live files; a file no commit added goes
    once older than the orphan retention (1 day), a young one stays (its batch may commit yet)."""
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1], [2]])
    version, (old_task,) = plan(storage, c)
    real_time = delta_log.time.time
    monkeypatch.setattr(delta_log.time, "time", lambda: real_time() - 3 * 3600)
    commit_rewrites(c.insert_log(), version, [(old_task, rewrite(old_task))], {"v": end})
    monkeypatch.setattr(delta_log.time, "time", real_time)
    state = ChannelState("v", 1, "p", checkpoint_offset=end + 1)
    c.commit([VchannelSync(state, Watermarks(end), written(storage, [3]))])
    version, (new_task,) = plan(storage, c)
    commit_rewrites(c.insert_log(), version, [(new_task, rewrite(new_task))], {"v": end + 1})
    uncommitted = written(storage, [4])
    orphan = written(storage, [5])      # written before a crash two days ago, never committed
    root = tmp_path / "insert_log" / "1"
    two_days_ago = time.time() - 2 * 86400
    os.utime(root / orphan[0].path, (two_days_ago, two_days_ago))
    on_disk = lambda: {str(p.relative_to(root)) for p in root.rglob("*.parquet")}  # noqa: E731
    before = on_disk()
    compactor = Compactor(None, storage, OneCollection(), CompactionSettings(retention=3600, orphan_retention=86400))
    assert compactor.sweep() == len(old_task.inputs) + 1 == 3
    assert before - on_disk() == {f.path for f in old_task.inputs} | {orphan[0].path}
    assert {f.path for f in new_task.inputs} <= on_disk() and uncommitted[0].path in on_disk()
    assert pks_in(storage) == [1, 2, 3]
