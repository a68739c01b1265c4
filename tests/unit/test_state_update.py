"""How a batch of portions changes a vchannel's ChannelState."""

import pytest

from deltanode.records import (
    ControlEvent,
    EventKind,
    FileEntry,
    Portion,
    PortionStats,
    ReplayState,
    SegmentStats,
)
from deltanode.state.channel_state import ChannelState, SegmentMeta, SegmentState
from deltanode.vchannel.state_update import (
    BatchRangeError,
    advance,
    retract_after_drops,
)


def portion(first, end, max_tick=0, inserted=0, deleted=0, replay=None, files=(), segments=None, events=()):
    return Portion("v", first, end, tuple(files), segments or {}, tuple(events),
                   PortionStats(max_tick, inserted_rows=inserted, deleted_rows=deleted), replay)


def state():
    return ChannelState("v", 1, "p", checkpoint_offset=10, checkpoint_ts=500,
                        segments={7: SegmentMeta(7, 1, SegmentState.GROWING, 5, 3, 400, 10, 450)})


def test_rows_and_positions_accumulate_and_the_checkpoint_moves_to_the_batch_end():
    portions = [portion(10, 15, max_tick=650, inserted=14,
                        segments={7: SegmentStats(1, 10, 600, 700, 12, 600), 8: SegmentStats(2, 4, 610, 620, 13, 610)}),
                portion(15, 20, max_tick=640)]
    out = advance(state(), portions)
    s = out.state
    assert (out.start, out.end, out.inserted_rows) == (10, 20, 14)
    assert s.checkpoint_offset == 20 and s.checkpoint_ts == 650
    assert s.segments[7].num_rows == 15 and s.segments[7].dml_ts == 700 and s.segments[7].dml_offset == 20
    assert s.segments[7].start_offset == 3  # unchanged: it started earlier
    assert s.segments[8].start_offset == 13 and s.segments[8].state == SegmentState.GROWING
    assert not out.idle and not out.urgent


def test_a_batch_of_ticks_is_idle_and_never_moves_the_checkpoint_ts_back():
    out = advance(state(), [portion(10, 12, max_tick=0)])
    assert out.state.checkpoint_ts == 500 and out.state.checkpoint_offset == 12 and out.idle


def test_flush_and_drops_are_urgent():
    events = [ControlEvent(EventKind.FLUSH, 11, 610), ControlEvent(EventKind.DROP_PARTITION, 12, 620, 2)]
    out = advance(state(), [portion(10, 14, segments={9: SegmentStats(2, 1, 600, 600, 11, 600)}, events=events)])
    assert out.urgent
    assert out.state.segments[7].state == SegmentState.FLUSHED
    # first row at 11: not sealed
    assert out.state.segments[9].state == SegmentState.DROPPED and out.newly_dropped == {9}
    assert out.state.dropped_partitions == [2]
    out2 = advance(out.state, [portion(14, 15, events=[ControlEvent(EventKind.DROP_COLLECTION, 14, 1)])])
    assert out2.state.collection_dropped and out2.newly_dropped == {7}


def test_gaps_and_a_wrong_start_are_refused():
    with pytest.raises(BatchRangeError, match="not contiguous"):
        advance(state(), [portion(10, 12), portion(13, 15)])
    with pytest.raises(BatchRangeError, match="expected 10"):
        advance(state(), [portion(11, 12)])


def test_the_replay_state_of_a_single_portion_is_kept_until_empty():
    active = ReplayState(flushed=((7, 1),))
    kept = advance(state(), [portion(10, 11, replay=active)])
    assert kept.state.replay == active and kept.urgent  # a changed filter state is committed at once
    with_filter = ChannelState("v", 1, "p", checkpoint_offset=10, replay=active)
    assert advance(with_filter, [portion(10, 11)]).state.replay is None
    with pytest.raises(BatchRangeError, match="split batch"):
        advance(state(), [portion(10, 11, replay=active), portion(11, 12)])


def test_a_flush_seals_only_segments_that_had_rows_before_it():
    out = advance(state(), [portion(10, 14, segments={9: SegmentStats(1, 3, 700, 700, 13, 700)},
                                    events=[ControlEvent(EventKind.FLUSH, 12, 690)])])
    assert out.state.segments[7].state == SegmentState.FLUSHED and out.state.segments[9].state == SegmentState.GROWING


def file(table, partition, rows, segment=-1):
    return FileEntry(table, f"{partition}/{segment}/f-{table}-{rows}.parquet", 100, rows, "{}", segment, partition)


def test_a_drop_in_an_earlier_portion_of_a_split_batch_retracts_what_later_portions_kept():
    # Portion 1 drops partition 2 at offset 12; portion 2 (offsets 14..) was read concurrently
    # from the batch's starting state, so it kept an insert into partition 2 and a delete of it.
    first = portion(10, 14, inserted=5, files=[file("insert", 2, 5, segment=9)],
                    segments={9: SegmentStats(2, 5, 600, 600, 11, 600)},
                    events=[ControlEvent(EventKind.DROP_PARTITION, 12, 620, 2)])
    later = [file("insert", 2, 4, segment=11), file("insert", 1, 3, segment=7), file("delete", 2, 6),
             file("delete", 1, 2), file("quarantine", -1, 1)]
    second = portion(14, 18, inserted=7, deleted=8, files=later,
                     segments={11: SegmentStats(2, 4, 630, 640, 15, 630), 7: SegmentStats(1, 3, 650, 650, 16, 650)})
    portions, discarded = retract_after_drops([first, second])
    assert discarded == [later[0], later[2]]
    assert portions[0] is first and portions[1].files == (later[1], later[3], later[4])
    out = advance(state(), portions)
    assert 11 not in out.state.segments and out.state.segments[9].state == SegmentState.DROPPED
    assert out.state.segments[7].num_rows == 5 + 3 and out.newly_dropped == {9}
    assert (out.inserted_rows, out.deleted_rows) == (8, 2)


def test_a_collection_drop_in_an_earlier_portion_retracts_every_later_insert_and_delete():
    first = portion(10, 12, events=[ControlEvent(EventKind.DROP_COLLECTION, 11, 620)])
    second = portion(12, 14, inserted=3, deleted=2, files=[file("insert", 1, 3, segment=7), file("delete", -1, 2)],
                     segments={7: SegmentStats(1, 3, 650, 650, 13, 650)})
    portions, discarded = retract_after_drops([first, second])
    assert len(discarded) == 2 and portions[1].files == () and portions[1].segments == {}
    out = advance(state(), portions)
    assert out.state.segments[7].num_rows == 5 and (out.inserted_rows, out.deleted_rows) == (0, 0)
