"""Compaction as pure logic (which files are rewritten together) and its commit on real Delta
tables (no Spark): the rewrite keeps every row its inputs' deletion vectors (DVs) keep, in input
order, marks itself OPTIMIZE / dataChange=false, carries the rows deleted meanwhile over to its
output's DV, and is refused when a file it rewrites is no longer live or another writer took the
vchannel. The sweep deletes binlogs with their bloom filters, and filters whose binlog is gone."""

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyarrow import fs as pafs

from deltanode.config.sections.pipeline import CompactionSettings
from deltanode.delta import deletion_vectors as dv
from deltanode.delta import delta_log
from deltanode.delta.delta_log import DeltaLog, FilesRemoved, TxnMoved
from deltanode.delta.layout import StorageLayout, pk_bloom_path, segment_of
from deltanode.delta.log_replay import live_adds
from deltanode.delta.pk_bloom import PkBloom
from deltanode.delta.tables import open_table
from deltanode.executor import binlog_writer
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.executor.rewrite_task import rewrite
from deltanode.pipeline.compaction_rounds import CompactionTarget, Compactor, RoundReport
from deltanode.records import Rewrite, SegmentFile
from deltanode.state.channel_state import ChannelState
from deltanode.state.commit import (
    CollectionCommitter,
    QuarantineLog,
    VchannelSync,
    Watermarks,
)
from deltanode.state.compaction_plan import commit_rewrites, plan_segment, segment_files

from .. import dv_files
from .test_commit_protocol import LAYOUT, committer, pks_in, written

# --- planning ------------------------------------------------------------------------------------


def files(*sizes):
    return [SegmentFile(f"1/5/part-{i}.parquet", size, 10) for i, size in enumerate(sizes)]


def deleted(f: SegmentFile, n: int, min_ts: int = 0) -> SegmentFile:
    """``f`` with a DV deleting its first ``n`` rows (and a least ``_ts``)."""
    return SegmentFile(f.path, f.size, f.rows, min_ts, dv.inline(np.arange(n)))


def test_small_files_are_grouped_up_to_the_target_and_large_ones_left_alone():
    settings = CompactionSettings(min_files=3, target_bytes=100)
    assert plan_segment(files(10, 10), settings) == []                       # fewer than min_files
    groups = plan_segment(files(10, 20, 30, 40, 150, 60), settings)
    assert [sorted(f.size for f in g) for g in groups] == [[10, 20, 30, 40]]  # 60 alone is no group; 150 is large
    assert all(sum(f.size for f in g) <= 100 for g in groups)
    assert plan_segment(files(*[1] * 16), CompactionSettings()) != []      # the defaults: 16 small files


def test_a_file_whose_dv_deletes_the_ratio_of_its_rows_is_rewritten():
    settings = CompactionSettings(min_files=16, target_bytes=100, deleted_ratio=0.2)
    small, other, large, large2 = files(10, 20, 150, 200)
    # below the ratio: nothing (too few small files, no large file is rewritten)
    assert plan_segment([deleted(small, 1), other, deleted(large, 1)], settings) == []
    # a large file at the ratio: alone; the small ones stay (too few)
    assert plan_segment([small, other, deleted(large, 2), large2], settings) == [(deleted(large, 2),)]
    # a small one at the ratio: with the other small ones, however few
    assert plan_segment([deleted(small, 2), other, large], settings) == [(deleted(small, 2), other)]
    assert plan_segment([deleted(small, 10)], settings) == [(deleted(small, 10),)]   # alone: all deleted
    assert plan_segment([deleted(small, 9), deleted(large, 9)], CompactionSettings(target_bytes=100,
                                                                                     deleted_ratio=1.5)) == []


def test_a_groups_inputs_are_in_the_order_of_their_least_ts():
    a, b, c = (SegmentFile(f"1/5/{name}.parquet", size, 10, ts) for name, size, ts in
               [("a", 10, 300), ("b", 20, 100), ("c", 30, 200)])
    (group,) = plan_segment([a, b, c], CompactionSettings(min_files=2))
    assert [f.path for f in group] == ["1/5/b.parquet", "1/5/c.parquet", "1/5/a.parquet"]


def test_a_binlog_path_names_its_partition_and_segment():
    assert segment_of("7/12/part-x.parquet") == (7, 12)
    assert segment_of("part-x.parquet") is None and segment_of("7/x/part.parquet") is None


# --- tables ----------------------------------------------------------------------------------------


def binlog(storage, pks: list[int], ts: int) -> tuple:
    """One task's insert binlog of segment 5 (partition 1): ``pks`` at ``_ts`` ts, ts + 1, ..."""
    writer = BinlogWriter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema())
    n = len(pks)
    columns = [pa.array(pks, pa.int64()), pa.array(range(ts, ts + n), pa.int64()), pa.array(pks, pa.int64())]
    writer.add_insert(5, 1, columns, n, 24 * n, 0, ts, ts + n - 1)
    return tuple(writer.close())


def commit_batches(storage, c: CollectionCommitter, batches: list[list[int]], end: int | None = None) -> int:
    """One commit per batch, each a binlog whose ``_ts`` follow the previous one's; the txn after them."""
    for pks in batches:
        after = (end or 0) + 1
        state = ChannelState("v", 1, "p", checkpoint_offset=after)
        result = c.commit([VchannelSync(state, Watermarks(end), binlog(storage, pks, 1000 * after))])
        assert "v" in result.committed
        end = after
    return end


def plan(storage, c: CollectionCommitter) -> Rewrite:
    """One rewrite of every live file of segment 5, as the compactor plans it (DVs included)."""
    (group,) = plan_segment(segment_files(c.insert_log().live_files().values())[(1, 5)],
                            CompactionSettings(min_files=2))
    return Rewrite(1, "v", 5, 1, group, LAYOUT.insert_schema(), LAYOUT.primary_key.name, storage)


def enable_deletion_vectors(c: CollectionCommitter) -> None:
    """One version with the upgrade tests/unit/test_deletion_vectors.py checks: protocol 3/7 with
    deletionVectors (and the legacy features of writer version 2), the table property set."""
    log = c.insert_log()
    logs = Path(log.uri) / "_delta_log"
    meta = next(json.loads(line)["metaData"] for line in (logs / f"{0:020d}.json").read_text().splitlines()
                if "metaData" in line)
    configuration = {**meta["configuration"], "delta.enableDeletionVectors": "true"}
    actions = [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES"}},
               {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                             "writerFeatures": ["appendOnly", "invariants", "deletionVectors"]}},
               {"metaData": {**meta, "configuration": configuration}}]
    with open(logs / f"{log.version + 1:020d}.json", "x") as f:
        f.writelines(json.dumps(a) + "\n" for a in actions)
    c.insert_log()


def delete_rows(log: DeltaLog, path: str, rows: list[int]) -> None:
    """One version marking ``rows`` of the live file ``path`` deleted, as the pipeline's marks do:
    remove with its old DV, add with the union."""
    add = log.live_files()[path]
    new = dv.inline(dv_files.union(add.deletion_vector, rows))
    log.commit(adds=[add.with_deletion_vector(new)], removes=[add.removal()], txns={}, expected={}, info={})


def binlog_paths(c: CollectionCommitter) -> list[str]:
    """The live binlogs, oldest rows first."""
    return [f.path for f in plan(c.storage, c).inputs]


def output_pks(storage, entry) -> list[int]:
    return pq.read_table(f"{storage.insert_log(1)}/{entry.path}").column("pk").to_pylist()


def test_a_rewrite_keeps_every_row_and_commits_as_optimize_without_data_change(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2], [3], [4, 5, 6]])
    task = plan(storage, c)
    entry = rewrite(task)
    committed = commit_rewrites(c.insert_log(), [(task, entry)], {"v": end})
    table = open_table(storage.insert_log(1))
    assert pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist() == [entry.path]
    assert pks_in(storage) == [1, 2, 3, 4, 5, 6]
    with open(tmp_path / "insert_log" / "1" / "_delta_log" / f"{committed:020d}.json") as f:
        lines = [json.loads(line) for line in f]
    assert lines[0]["commitInfo"]["operation"] == "OPTIMIZE"
    assert all(not line[kind]["dataChange"] for line in lines for kind in ("add", "remove") if kind in line)
    assert not any("txn" in line for line in lines)
    assert table.transaction_version("v") == end   # the vchannel's checkpoint did not move


def test_a_rewrite_drops_the_rows_its_dvs_delete_and_keeps_the_input_order(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2, 3], [4, 5], [6, 7, 8]])
    enable_deletion_vectors(c)
    first, _, third = binlog_paths(c)
    delete_rows(c.insert_log(), first, [1])
    delete_rows(c.insert_log(), third, [0, 2])
    task = plan(storage, c)
    entry = rewrite(task)
    assert output_pks(storage, entry) == [1, 3, 4, 5, 7]      # input order, no sort
    commit_rewrites(c.insert_log(), [(task, entry)], {"v": end})
    assert pks_in(storage) == [1, 3, 4, 5, 7]
    # the removes carried the inputs' DVs: from a fresh replay and for delta-rs, only the output is live
    fs, base = storage.filesystem(storage.insert_log(1))
    assert list(live_adds(fs, base)) == [entry.path] and live_adds(fs, base)[entry.path].deletion_vector is None
    assert pa.table(open_table(storage.insert_log(1)).get_add_actions(flatten=True)).column("path").to_pylist() \
        == [entry.path]


def test_a_group_whose_rows_are_all_deleted_writes_no_file_and_removes_its_inputs(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2], [3]])
    enable_deletion_vectors(c)
    first, second = binlog_paths(c)
    delete_rows(c.insert_log(), first, [0, 1])
    delete_rows(c.insert_log(), second, [0])
    task = plan(storage, c)
    assert rewrite(task) is None
    commit_rewrites(c.insert_log(), [(task, None)], {"v": end})
    assert c.insert_log().live_files() == {} and pks_in(storage) == []


def test_rows_deleted_after_planning_become_the_outputs_dv_at_their_output_rows(tmp_path):
    """Inputs of 4, 2 and 3 rows; planned DVs {1}, none, {0}: the output holds input rows
    (0,0) (0,2) (0,3) (1,0) (1,1) (2,1) (2,2). Deleted meanwhile: (0,0) (0,3) (1,1) (2,2), rows 0, 2, 4, 6."""
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2, 3, 4], [5, 6], [7, 8, 9]])
    enable_deletion_vectors(c)
    first, second, third = binlog_paths(c)
    delete_rows(c.insert_log(), first, [1])
    delete_rows(c.insert_log(), third, [0])
    task = plan(storage, c)
    entry = rewrite(task)
    assert output_pks(storage, entry) == [1, 3, 4, 5, 6, 8, 9]
    delete_rows(c.insert_log(), first, [0, 3])
    delete_rows(c.insert_log(), second, [1])
    delete_rows(c.insert_log(), third, [2])
    insert_log = c.insert_log()
    commit_rewrites(insert_log, [(task, entry)], {"v": end})
    (add,) = insert_log.live_files().values()
    assert add.path == entry.path
    assert dv.positions(add.deletion_vector, "", None).tolist() == [0, 2, 4, 6]
    assert json.loads(add.stats)["numRecords"] == 7 and json.loads(add.stats)["tightBounds"] is False
    assert pks_in(storage) == [3, 5, 8]                      # delta-rs applies the output's DV


def test_a_rewrite_planned_many_versions_ago_commits_while_its_inputs_are_live(tmp_path, monkeypatch):
    monkeypatch.setattr(delta_log, "REMOVES_VERSIONS", 2)
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1], [2]])
    task = plan(storage, c)
    entry = rewrite(task)
    end = commit_batches(storage, c, [[3], [4], [5]], end)
    commit_rewrites(c.insert_log(), [(task, entry)], {"v": end})
    assert pks_in(storage) == [1, 2, 3, 4, 5] and len(c.insert_log().live_files()) == 4


def test_a_rewrite_is_refused_when_an_input_is_no_longer_live_or_the_vchannel_moved(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1], [2], [3]])
    task = plan(storage, c)
    first = rewrite(task)
    commit_rewrites(c.insert_log(), [(task, first)], {"v": end})
    # a second rewrite of the same files, planned before the first committed, loses: they are gone
    version = c.insert_log().version
    with pytest.raises(FilesRemoved):
        commit_rewrites(c.insert_log(), [(task, rewrite(task))], {"v": end})
    assert c.insert_log().version == version
    # another writer moved the txn: refused even though the files are there
    end2 = end + 1
    other = CollectionCommitter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema(), QuarantineLog(storage))
    assert "v" in other.commit([VchannelSync(ChannelState("v", 1, "p", checkpoint_offset=end2), Watermarks(end),
                                             written(storage, [4]))]).committed
    task = plan(storage, c)
    with pytest.raises(TxnMoved):
        commit_rewrites(c.insert_log(), [(task, rewrite(task))], {"v": end})
    assert pks_in(storage) == [1, 2, 3, 4]


def test_another_process_touching_an_input_between_the_check_and_the_commit_refuses_it(tmp_path):
    """The commit's check is against the versions this process knows; a version another process
    wins meanwhile that gives an input a bigger DV is caught when the commit loses the race."""
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2], [3]])
    enable_deletion_vectors(c)
    task = plan(storage, c)
    entry = rewrite(task)
    insert_log = c.insert_log()
    elsewhere = DeltaLog(storage.insert_log(1))
    delete_rows(elsewhere, task.inputs[0].path, [0])
    with pytest.raises(FilesRemoved):
        commit_rewrites(insert_log, [(task, entry)], {"v": end})
    assert pks_in(storage) == [2, 3]


class OneCollection:
    """The compactor's view of a node holding collection 1 and its vchannel ``v`` (txn ``end``)."""

    def __init__(self, end: int | None = None) -> None:
        self.end = end

    def collection_ids(self) -> list[int]:
        return [1]

    def compactable(self, vchannel: str, segment_id: int) -> int | None:
        return self.end


def target(c: CollectionCommitter) -> CompactionTarget:
    return CompactionTarget(collection_id=1, committer=c, insert_schema=LAYOUT.insert_schema(),
                            pk=LAYOUT.primary_key.name, segments={5: "v"})


def test_the_compactor_plans_from_the_committers_live_files_with_their_dvs(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2, 3, 4, 5], [6]])
    enable_deletion_vectors(c)
    first, second = binlog_paths(c)
    delete_rows(c.insert_log(), first, [0])
    compactor = Compactor(sc=None, storage=storage, members=OneCollection(end),
                          settings=CompactionSettings(min_files=16, deleted_ratio=0.2))
    (task,) = compactor._plan(target(c))                   # one file of five, 20% deleted: with the small ones
    assert [(f.path, f.deleted) for f in task.inputs] == [(first, 1), (second, 0)]
    lenient = Compactor(sc=None, storage=storage, members=OneCollection(end),
                        settings=CompactionSettings(deleted_ratio=0.3))
    assert lenient._plan(target(c)) == []


def test_a_small_binlogs_filter_is_in_its_add_action_through_the_log_and_a_checkpoint(tmp_path):
    """One file per binlog: the filter is a tag of the add, kept by delta-rs's checkpoint, read
    back by the log replay, and the file is read as any other."""
    storage = StorageLayout(str(tmp_path))
    root = tmp_path / "insert_log" / "1"
    c = committer(storage)
    commit_batches(storage, c, [[1, 2], [3]])
    assert not (root / "_pk_bloom").exists()
    fs = pafs.LocalFileSystem()

    def filters() -> dict[str, list[bool]]:
        adds = live_adds(fs, str(root))
        return {path: PkBloom.from_bytes(add.pk_bloom).might_contain(pa.array([1, 2, 3])).tolist()
                for path, add in adds.items() if add.pk_bloom is not None and len(adds) == 2}

    from_log = filters()
    assert sorted(from_log.values()) == [[False, False, True], [True, True, False]]
    DeltaTable(str(root)).create_checkpoint()
    assert filters() == from_log and pks_in(storage) == [1, 2, 3]


@pytest.fixture
def filters_beside_files(monkeypatch):
    """Every binlog's bloom filter in a file beside it, as a large binlog's is (a small one's
    travels in its add action)."""
    monkeypatch.setattr(binlog_writer, "INLINE_MAX_KEYS", 0)


def test_a_refused_commit_deletes_its_file_and_replaced_inputs_go_with_their_filters(tmp_path, filters_beside_files):
    storage = StorageLayout(str(tmp_path))
    root = tmp_path / "insert_log" / "1"
    c = committer(storage)
    end = commit_batches(storage, c, [[1], [2], [3]])
    compactor = Compactor(sc=None, storage=storage, members=OneCollection(end),
                          settings=CompactionSettings(retention=0))
    task = plan(storage, c)
    refused, report = rewrite(task), RoundReport()
    insert_log = c.insert_log()     # one input dropped (removed) before the commit
    insert_log.commit(removes=[insert_log.live_files()[task.inputs[0].path].removal()], txns={}, expected={}, info={})
    compactor._commit(target(c), [(task, refused)], report)
    assert report.refused == 1 and not (root / refused.path).exists()
    assert not (root / pk_bloom_path(refused.path)).exists()
    task = plan(storage, c)
    entry = rewrite(task)
    compactor._commit(target(c), [(task, entry)], report)
    assert report.rewrites == 1 and all((root / pk_bloom_path(f.path)).exists() for f in task.inputs)
    assert compactor.vacuum(time.time() + 1) == 2
    assert not any((root / f.path).exists() or (root / pk_bloom_path(f.path)).exists() for f in task.inputs)
    assert (root / pk_bloom_path(entry.path)).exists() and pks_in(storage) == [2, 3]


def test_a_sweep_deletes_what_the_log_removed_longer_than_retention_ago_and_old_orphans(tmp_path, monkeypatch,
                                                                                      filters_beside_files):
    """What a restart keeps the in-memory queue from deleting: a rewrite's inputs removed 3 h ago
    go (retention 1 h), the ones removed now stay, so do live files; a file no commit added goes
    once older than the orphan retention (1 day), a young one stays (its batch may commit yet).
    Each binlog goes with its bloom filter; a filter whose binlog is gone goes once as old (delta-rs
    never lists a filter), one whose binlog is live or on disk stays however old."""
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1], [2]])
    old_task = plan(storage, c)
    real_time = delta_log.time.time
    monkeypatch.setattr(delta_log.time, "time", lambda: real_time() - 3 * 3600)
    commit_rewrites(c.insert_log(), [(old_task, rewrite(old_task))], {"v": end})
    monkeypatch.setattr(delta_log.time, "time", real_time)
    end = commit_batches(storage, c, [[3]], end)
    new_task = plan(storage, c)
    output = rewrite(new_task)
    commit_rewrites(c.insert_log(), [(new_task, output)], {"v": end})
    uncommitted = written(storage, [4])
    orphan = written(storage, [5])      # written before a crash two days ago, never committed
    lost, young_lost = written(storage, [6]), written(storage, [7])   # binlogs deleted, their filters not
    root = tmp_path / "insert_log" / "1"
    (root / lost[0].path).unlink()
    (root / young_lost[0].path).unlink()
    two_days_ago = time.time() - 2 * 86400
    for path in [orphan[0].path, *(pk_bloom_path(f.path) for f in
                                   [*old_task.inputs, *new_task.inputs, output, uncommitted[0], orphan[0], lost[0]])]:
        os.utime(root / path, (two_days_ago, two_days_ago))
    listed = open_table(storage.insert_log(1)).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False,
                                                      full=True)
    assert not any(p.startswith("_pk_bloom/") for p in listed)
    on_disk = lambda: {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}  # noqa: E731
    before = on_disk()
    compactor = Compactor(sc=None, storage=storage, members=OneCollection(),
                          settings=CompactionSettings(retention=3600, orphan_retention=86400))
    assert compactor.sweep() == len(old_task.inputs) + 1 + 1 == 4
    gone = {f.path for f in [*old_task.inputs, orphan[0]]}
    assert before - on_disk() == gone | {pk_bloom_path(p) for p in gone} | {pk_bloom_path(lost[0].path)}
    kept = [*new_task.inputs, output, uncommitted[0]]
    assert all(f.path in on_disk() and pk_bloom_path(f.path) in on_disk() for f in kept)
    assert pk_bloom_path(young_lost[0].path) in on_disk()
    assert pks_in(storage) == [1, 2, 3]
