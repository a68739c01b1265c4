"""How a committed batch changes a ChannelState."""

import pytest
from deltanode.storage.binlog_writer import FileEntry, SegmentStats, TaskResult
from deltanode.storage.channel_state import (
    DROPPED,
    FLUSHED,
    GROWING,
    ChannelState,
    SegmentMeta,
)
from deltanode.storage.state_update import BatchRangeError, advance, retract_after_drops


def task(first, end, max_tick=0, inserted=0, replay=None, deleted=0):
    return {"type": "task", "first": first, "end": end, "messages": end - first, "bytes": 10, "max_tick": max_tick,
            "dml_messages": 0, "dml_bytes": 0,
            "inserted_rows": inserted, "deleted_rows": deleted, "quarantined": 0, "skipped": {}, "replay": replay}


def state():
    return ChannelState("v", 1, "p", checkpoint_offset=10, checkpoint_ts=500,
                        segments={7: SegmentMeta(7, 1, GROWING, 5, 3, 400, 10, 450)})


def test_rows_and_positions_accumulate_and_the_checkpoint_moves_to_the_batch_end():
    results = [TaskResult(segments={7: SegmentStats(1, 10, 600, 700, 12, 600), 8: SegmentStats(2, 4, 610, 620, 13, 610)},
                          events=[task(10, 15, max_tick=650, inserted=14)]),
               TaskResult(events=[task(15, 20, max_tick=640)])]
    out = advance(state(), results)
    s = out.state
    assert (out.start, out.end, out.inserted_rows) == (10, 20, 14)
    assert s.checkpoint_offset == 20 and s.checkpoint_ts == 650
    assert s.segments[7].num_rows == 15 and s.segments[7].dml_ts == 700 and s.segments[7].dml_offset == 20
    assert s.segments[7].start_offset == 3  # unchanged: it started earlier
    assert s.segments[8].start_offset == 13 and s.segments[8].state == GROWING


def test_checkpoint_ts_never_moves_back():
    out = advance(state(), [TaskResult(events=[task(10, 12, max_tick=0)])])
    assert out.state.checkpoint_ts == 500


def test_flush_and_drops():
    results = [TaskResult(segments={9: SegmentStats(2, 1, 600, 600, 11, 600)},
                          events=[task(10, 14), {"type": "flush", "offset": 11, "ts": 610},
                                  {"type": "drop_partition", "offset": 12, "ts": 620, "partition_id": 2}])]
    out = advance(state(), results)
    assert out.state.segments[7].state == FLUSHED
    assert out.state.segments[9].state == DROPPED and out.newly_dropped == {9}  # first row at 11: not sealed
    assert out.state.dropped_partitions == [2]
    out2 = advance(out.state, [TaskResult(events=[task(14, 15), {"type": "drop_collection", "offset": 14, "ts": 1}])])
    assert out2.state.collection_dropped and out2.newly_dropped == {7}


def test_gaps_between_tasks_are_refused():
    with pytest.raises(BatchRangeError):
        advance(state(), [TaskResult(events=[task(10, 12)]), TaskResult(events=[task(13, 15)])])


def test_the_replay_state_of_a_single_task_is_kept_until_empty():
    active = {"flushed": {"7": 1}, "unflushed": {}}
    assert advance(state(), [TaskResult(events=[task(10, 11, replay=active)])]).state.replay == active
    empty = {"flushed": {}, "unflushed": {}}
    assert advance(state(), [TaskResult(events=[task(10, 11, replay=empty)])]).state.replay is None


def test_a_flush_seals_only_segments_that_had_rows_before_it():
    results = [TaskResult(segments={9: SegmentStats(1, 3, 700, 700, 13, 700)},
                          events=[task(10, 14), {"type": "flush", "offset": 12, "ts": 690}])]
    out = advance(state(), results)
    assert out.state.segments[7].state == FLUSHED and out.state.segments[9].state == GROWING


def file(table, partition, rows, segment=-1):
    return FileEntry(table, f"{partition}/{segment}/f-{table}-{rows}.parquet", 100, rows, "{}", segment, partition)


def test_a_drop_in_an_earlier_task_of_a_split_batch_retracts_what_later_tasks_kept():
    # Task 1 drops partition 2 at offset 12; task 2 (offsets 14..) ran concurrently from the
    # batch's starting state, so it kept an insert into partition 2 and a delete of it.
    first = TaskResult(files=[file("insert", 2, 5, segment=9)], segments={9: SegmentStats(2, 5, 600, 600, 11, 600)},
                       events=[task(10, 14, inserted=5), {"type": "drop_partition", "offset": 12, "ts": 620,
                                                         "partition_id": 2}])
    later = [file("insert", 2, 4, segment=11), file("insert", 1, 3, segment=7), file("delete", 2, 6),
             file("delete", 1, 2), file("quarantine", -1, 1)]
    second = TaskResult(files=later, segments={11: SegmentStats(2, 4, 630, 640, 15, 630),
                                               7: SegmentStats(1, 3, 650, 650, 16, 650)},
                        events=[task(14, 18, inserted=7, deleted=8)])
    results, discarded = retract_after_drops([first, second])
    assert discarded == [later[0], later[2]]
    assert results[0] is first and results[1].files == [later[1], later[3], later[4]]
    out = advance(state(), results)
    assert 11 not in out.state.segments and out.state.segments[9].state == DROPPED
    assert out.state.segments[7].num_rows == 5 + 3 and out.newly_dropped == {9}
    assert (out.inserted_rows, out.deleted_rows) == (8, 2)


def test_a_collection_drop_in_an_earlier_task_retracts_every_later_insert_and_delete():
    first = TaskResult(events=[task(10, 12), {"type": "drop_collection", "offset": 11, "ts": 620}])
    second = TaskResult(files=[file("insert", 1, 3, segment=7), file("delete", -1, 2)],
                        segments={7: SegmentStats(1, 3, 650, 650, 13, 650)},
                        events=[task(12, 14, inserted=3, deleted=2)])
    results, discarded = retract_after_drops([first, second])
    assert len(discarded) == 2 and results[1].files == [] and results[1].segments == {}
    out = advance(state(), results)
    assert out.state.segments[7].num_rows == 5 and (out.inserted_rows, out.deleted_rows) == (0, 0)


def test_the_source_sizes_batches_by_bytes_at_the_average_message_size(tmp_path):
    from deltanode.flowgraph.source import VchannelReader
    from deltanode.flowgraph.spec import FlowgraphSpec, save_state
    from pyspark.sql.streaming.datasource import ReadAllAvailable
    s = state()
    spec = FlowgraphSpec("v", "p", 1, "", "127.0.0.1:1", str(tmp_path), str(tmp_path / "state.json"), 10,
                         max_messages=200, max_bytes=3_000_000)
    save_state(spec.context_file, s)
    reader = VchannelReader(spec)
    assert reader._message_cap(ReadAllAvailable()) == 1            # no history yet: max_bytes of 10 MiB messages
    spec.max_bytes = 256 << 20
    assert reader._message_cap(ReadAllAvailable()) == 25
    spec.max_bytes = 3_000_000
    s.dml_messages, s.dml_bytes = 10, 1_000_000                    # 100 kB an insert on average
    save_state(spec.context_file, s)
    assert reader._message_cap(ReadAllAvailable()) == 30
    spec.max_messages = 20
    assert reader._message_cap(ReadAllAvailable()) == 20
