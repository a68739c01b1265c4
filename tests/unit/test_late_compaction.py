"""A compaction commit left in doubt (its answer lost, its put still in flight) that lands after
the compactor released the collection's commit lock, just before the pipeline's next put: the
pipeline's commit was planned from the files before it, and must not bring back a file the
compaction removed (its rows would be live twice, in it and in the compaction's output). On real
Delta tables and a real rewrite (no Spark); the insert_log's store holds the compaction's put in
flight and lets it land just before the next put. Rows are counted as a multiset."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from deltanode.config.sections.pipeline import CompactionSettings
from deltanode.delta import deletion_vectors as dv
from deltanode.delta import delta_log
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.executor.rewrite_task import rewrite
from deltanode.pipeline.compaction_rounds import Compactor, RoundReport
from deltanode.records import FileMark
from deltanode.state.channel_state import ChannelState
from deltanode.state.commit import VchannelSync, Watermarks

from .test_commit_protocol import committer, written
from .test_compaction import OneCollection, commit_batches, enable_deletion_vectors, plan, target


class InFlight:
    """A ``LogStore`` whose puts stay in flight (nothing stored, the answer lost) while ``hold``;
    the first put after that lets them land first."""

    def __init__(self, inner) -> None:
        self.inner, self.hold, self.late = inner, True, []

    def get(self, name: str) -> bytes | None:
        return self.inner.get(name)

    def surely_empty(self) -> bool:
        return self.inner.surely_empty()

    def make_durable(self) -> None:
        self.inner.make_durable()

    def put_if_absent(self, name: str, data: bytes) -> bool:
        if self.hold:
            self.late.append((name, data))
            raise OSError("read timeout")
        for late in self.late:
            self.inner.put_if_absent(*late)
        self.late.clear()
        return self.inner.put_if_absent(name, data)


@pytest.fixture
def compacted_in_doubt(tmp_path, monkeypatch):
    """Segment 5 of vchannel ``v`` in two files (keys 1, 2 and 3); a compaction of both into one,
    whose commit is left in doubt: it lands at the pipeline's next put. Returns the storage, the
    committer, the vchannel's txn, the input files and the compaction's output."""
    monkeypatch.setattr(delta_log, "PUT_ATTEMPT_DELAYS", (0.0,))
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    end = commit_batches(storage, c, [[1, 2], [3]])
    enable_deletion_vectors(c)
    task = plan(storage, c)
    output = rewrite(task)
    store = c.insert_log()._store = InFlight(c.insert_log()._store)
    compactor = Compactor(sc=None, storage=storage, members=OneCollection(end),  # type: ignore[arg-type]
                          settings=CompactionSettings(min_files=2))
    report = RoundReport()
    compactor._commit(target(c), [(task, output)], report)
    # The compactor goes on with its round: the rewrite failed, its output kept (it may land).
    assert (report.failed, report.rewrites) == (1, 0) and len(store.late) == 1
    assert (tmp_path / "insert_log" / "1" / output.path).exists()
    store.hold = False
    return storage, c, end, [f.path for f in task.inputs], output.path


def rows(storage: StorageLayout) -> Counter:
    return Counter(read_table(storage, storage.insert_log(1)).column("pk").to_pylist())


def delete_first_row(path: str) -> FileMark:
    """The mark of a delete of row 0 of ``path``, a file without a deletion vector."""
    return FileMark(path=path, base=None, deletion_vector=dv.inline(np.array([0])), newly_deleted=1)


def sync(end: int | None, files, marks=(), dropped=frozenset(), vchannel: str = "v") -> VchannelSync:
    return VchannelSync(ChannelState(vchannel, 1, "p", checkpoint_offset=(end or 0) + 1), Watermarks(end), files,
                        dropped, marks)


def test_marks_on_a_file_the_late_compaction_removed_wait_for_the_next_cycle(compacted_in_doubt):
    storage, c, end, (first, _), output = compacted_in_doubt
    new = written(storage, [4], segment=6)
    other = sync(None, written(storage, [10], segment=7), vchannel="w")        # another vchannel: goes on
    result = c.commit([sync(end, new, marks=(delete_first_row(first),)), other])   # deletes key 1, in ``first``
    assert rows(storage) == Counter({1: 1, 2: 1, 3: 1, 10: 1})               # the compaction's output, w's row
    assert "v" in result.deferred and set(result.committed) == {"w"} and result.refused == {}
    assert output in c.insert_log().live_files() and first not in c.insert_log().live_files()
    # The next cycle marks the delete again, in the output (key 1 is its first row), and commits.
    result = c.commit([sync(end, new, marks=(delete_first_row(output),))])
    assert "v" in result.committed
    assert rows(storage) == Counter({2: 1, 3: 1, 4: 1, 10: 1})


def test_a_vchannel_whose_deletes_landed_reloads_when_its_marks_lost_their_file(compacted_in_doubt):
    storage, c, end, (first, _), output = compacted_in_doubt
    new = written(storage, [4], segment=6)
    deletes = written(storage, [], deletes=[1])
    result = c.commit([sync(end, new + deletes, marks=(delete_first_row(first),))])
    assert rows(storage) == Counter({1: 1, 2: 1, 3: 1})
    assert "reloads" in result.refused["v"] and result.committed == {} and "v" not in result.deferred
    assert Counter(read_table(storage, storage.delta_log(1)).column("pk").to_pylist()) == Counter({1: 1})
    assert [f for f in deletes if not _exists(storage.delta_log(1), f.path)] == []   # landed: kept
    assert [f for f in new if _exists(storage.insert_log(1), f.path)] == []          # never committed: gone


def test_a_drop_removes_what_the_late_compaction_wrote_for_the_segment(compacted_in_doubt):
    storage, c, end, inputs, output = compacted_in_doubt
    result = c.commit([sync(end, written(storage, [4], segment=6), dropped=frozenset({5}))])
    assert "v" in result.committed
    assert rows(storage) == Counter({4: 1})
    assert output not in c.insert_log().live_files() and not set(inputs) & set(c.insert_log().live_files())


def _exists(root: str, path: str) -> bool:
    return os.path.exists(f"{root}/{path}")
