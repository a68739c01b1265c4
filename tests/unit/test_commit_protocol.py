"""The driver's commit protocol on real Delta tables (no Spark): txn CAS, replays, coalescing, resuming."""

import pyarrow as pa
import pytest
from deltanode.flowgraph.launch import initial_state
from deltanode.flowgraph.records import INSERT, RECORD_SCHEMA, to_ipc
from deltanode.storage.binlog_writer import BinlogWriter
from deltanode.storage.channel_state import ChannelState
from deltanode.storage.commit import CommitRefused, commit_batch, discard
from deltanode.storage.layout import StorageLayout
from deltanode.storage.tables import open_table
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.schema import CollectionLayout, schema_from_json

LAYOUT = CollectionLayout.from_proto(schema_from_json(
    {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}, "c"))


def task_result(storage: StorageLayout, first: int, end: int, pks: list[int]):
    """What one executor task hands the driver for offsets [first, end): rows of segment 5."""
    writer = BinlogWriter(storage.insert_log(1), storage.delta_log(1), storage.quarantine(),
                          LAYOUT.insert_schema(), LAYOUT.delete_schema())
    if pks:
        n = len(pks)
        rows = pa.RecordBatch.from_arrays([pa.array(pks, pa.int64()), pa.array(range(100, 100 + n), pa.int64()),
                                           pa.array(pks, pa.int64()), pa.array([5] * n, pa.int64()),
                                           pa.array([1] * n, pa.int64())], schema=LAYOUT.insert_schema())
        writer.add(pa.RecordBatch.from_pylist([{"_kind": INSERT, "_offset": first, "_segment_id": 5,
                                                "_partition_id": 1, "_rows": n, "_min_ts": 100,
                                                "_max_ts": 99 + n, "_event": None,
                                                "_payload": to_ipc(rows).to_pybytes()}], schema=RECORD_SCHEMA))
    result = writer.close()
    result.events.append({"type": "task", "first": first, "end": end, "messages": end - first, "bytes": 1,
                          "max_tick": 0, "dml_messages": int(bool(pks)), "dml_bytes": 1,
                          "inserted_rows": len(pks), "deleted_rows": 0, "quarantined": 0, "skipped": {},
                          "replay": None})
    return result


def commit(storage, state, first, end, pks, coalesce_ms=0):
    return commit_batch(storage, state, [task_result(storage, first, end, pks)], LAYOUT.insert_schema(),
                        LAYOUT.delete_schema(), coalesce_ms=coalesce_ms)


def pks_in(storage):
    return sorted(open_table(storage.insert_log(1)).to_pyarrow_table().column("pk").to_pylist())


def test_commits_move_the_txn_and_refuse_a_foreign_writer(tmp_path):
    storage = StorageLayout(str(tmp_path))
    state = ChannelState("v", 1, "p")
    done = commit(storage, state, 0, 10, [1, 2])
    assert done.committed and open_table(storage.insert_log(1)).transaction_version("v") == 10
    assert done.state.checkpoint_offset == 10 and done.state.segments[5].num_rows == 2
    # The same batch again (a retry after a crash between commit and Spark's bookkeeping):
    again = commit(storage, state, 0, 10, [1, 2])
    assert not again.committed and pks_in(storage) == [1, 2]
    # A writer that still believes the channel is at 0 while it is at 10 and plans [0, 20):
    with pytest.raises(CommitRefused, match="another writer"):
        commit(storage, state, 0, 20, [1, 2, 3])
    assert pks_in(storage) == [1, 2]


def test_idle_batches_are_coalesced_into_the_next_commit(tmp_path):
    storage = StorageLayout(str(tmp_path))
    state = commit(storage, ChannelState("v", 1, "p"), 0, 10, [1], coalesce_ms=60_000).state
    idle = commit(storage, state, 10, 15, [], coalesce_ms=60_000)
    assert not idle.committed and idle.state.resume_offset == 15 and idle.state.checkpoint_offset == 10
    assert open_table(storage.insert_log(1)).transaction_version("v") == 10
    busy = commit(storage, idle.state, 15, 20, [2], coalesce_ms=60_000)
    assert busy.committed and busy.state.checkpoint_offset == 20 and busy.state.resume_offset == -1
    assert open_table(storage.insert_log(1)).transaction_version("v") == 20 and pks_in(storage) == [1, 2]
    # once the interval is over, an idle batch is committed: the checkpoint moves on its own
    late = commit(storage, busy.state, 20, 25, [], coalesce_ms=0)
    assert late.committed and open_table(storage.insert_log(1)).transaction_version("v") == 25


def test_resuming_at_the_committed_offset_filters_only_segments_delta_does_not_know(tmp_path):
    storage = StorageLayout(str(tmp_path))
    commit(storage, ChannelState("v", 1, "p"), 0, 10, [1, 2])      # segment 5, growing, dml_ts 101
    info = VchannelInfo(collectionID=1, channelName="v")
    assert initial_state(storage, info).replay is None             # both splits from the first batch
    foreign = info.unflushedSegments.add(ID=9, partitionID=1, num_of_rows=3)
    foreign.dml_position.timestamp = 500
    state = initial_state(storage, info)
    assert state.checkpoint_offset == 10 and set(state.segments) == {5, 9}
    assert state.replay == {"flushed": {}, "unflushed": {"9": 500}}


def test_discard_removes_an_aborted_batch_files_from_their_tables(tmp_path):
    storage = StorageLayout(str(tmp_path))
    result = task_result(storage, 0, 10, [1, 2])
    paths = [tmp_path / "insert_log" / "1" / f.path for f in result.files]
    assert paths and all(p.exists() for p in paths)
    discard(storage, 1, result.files + result.files)  # twice over: a file already gone is no error
    assert not any(p.exists() for p in paths)
    assert open_table(storage.insert_log(1)) is None  # nothing was committed
