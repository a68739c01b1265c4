"""A vchannel's batches waiting for their commit: idle ones (ticks only) do not pile up."""

from __future__ import annotations

from deltanode.records import FileEntry, Portion, PortionStats, RouteKept, RouteRow, SegmentStats, TableKind
from deltanode.state.channel_state import SegmentState
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import VchannelFlowgraph
from deltanode.vchannel.state_update import advance
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import schema_from_json

CID, VCHANNEL = 7, "dn-dml_0_7v0"
SCHEMA = schema_from_json({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}, "c")


def flowgraph() -> VchannelFlowgraph:
    info = VchannelInfo(collectionID=CID, channelName=VCHANNEL)
    info.seek_position.msgID = CODECS["kafka"].to_msg_id(0)
    fg = VchannelFlowgraph(info, SCHEMA, node_id=1)
    fg.load(None, Watermarks(), 0.0)
    return fg


def read(fg: VchannelFlowgraph, end: int, tick: int, rows: int = 0) -> None:
    """Apply one batch over ``[next offset, end)`` that saw ``tick``, with ``rows`` inserted rows."""
    first = fg.next_offset
    if rows:
        entry = FileEntry(TableKind.INSERT, f"1/100/part-{first}.parquet", 10, rows, "{}", 100, 1)
        portion = Portion(VCHANNEL, first, end, (entry,), {100: SegmentStats(1, rows, tick - 1, tick - 1, first,
                                                                              tick - 1)},
                          stats=PortionStats(tick, 1, 10, rows))
    else:
        portion = Portion(VCHANNEL, first, end, stats=PortionStats(tick))
    fg.apply(advance(fg.working, [portion]), 1.0)


def test_idle_batches_take_the_place_of_the_idle_one_before_them():
    fg = flowgraph()
    for i in range(1, 6):
        read(fg, 10 * i, 100 + i)
    assert [(b.start, b.end, b.idle) for b in fg.batches.pending] == [(0, 50, True)]
    assert fg.working.checkpoint_offset == 50 and fg.working.checkpoint_ts == 105
    assert fg.batches.pending[0].state is fg.working and not fg.urgent and fg.batches.pending_since is None
    # A batch with rows is kept apart; the idle ones after it merge among themselves.
    read(fg, 60, 200, rows=5)
    read(fg, 70, 201)
    read(fg, 80, 202)
    assert [(b.start, b.end, b.idle) for b in fg.batches.pending] == [(0, 50, True), (50, 60, False), (60, 80, True)]
    sync = fg.sync()
    assert sync.end == 80 and [f.rows for f in sync.files] == [5] and sync.state.rows == 5
    fg.committed_sync(sync, Watermarks(insert=80), 2.0)
    assert fg.batches.pending == [] and fg.committed is sync.state


def test_a_batch_of_ticks_only_moves_the_checkpoint_and_shares_the_segments():
    fg = flowgraph()
    read(fg, 10, 100, rows=5)
    before = fg.working
    outcome = advance(before, [Portion(VCHANNEL, 10, 20, stats=PortionStats(150)),
                               Portion(VCHANNEL, 20, 30, stats=PortionStats(140))])
    expected = before.copy()
    expected.checkpoint_offset, expected.checkpoint_ts, expected.batches = 30, 150, before.batches + 1
    assert outcome.state == expected and outcome.idle and not outcome.urgent and not outcome.files
    assert outcome.state.segments is before.segments and before.checkpoint_offset == 10   # nothing changed in place
    # A Sealed segment waits for a tick: that batch takes the general path and flushes it.
    sealed = before.copy()
    sealed.segments[100].state, sealed.segments[100].sealed_ts = SegmentState.SEALED, 120
    outcome = advance(sealed, [Portion(VCHANNEL, 10, 20, stats=PortionStats(150))])
    assert outcome.state.segments[100].state == SegmentState.FLUSHED and not outcome.idle
    assert sealed.segments[100].state == SegmentState.SEALED


def test_ticks_read_without_a_portion_leave_what_the_general_path_leaves():
    """``read_ticks`` (a cycle's idle vchannels, without a portion each) against ``advance`` then
    ``apply``: the same states, batches and counters, over idle batches before and after rows."""
    fast, general = flowgraph(), flowgraph()
    for fg in (fast, general):
        read(fg, 10, 100, rows=5)
    for end, tick in ((15, 101), (15, 0), (22, 120), (30, 0)):
        first = general.next_offset
        assert fast.read_ticks(first, end, tick, 1.0, 60.0)
        general.apply(advance(general.working, [Portion(VCHANNEL, first, end, stats=PortionStats(tick))]), 1.0, 60.0)
        assert fast.working == general.working and fast.working.segments is not None
        assert [(b.start, b.end, b.idle, b.state) for b in fast.batches.pending] == \
            [(b.start, b.end, b.idle, b.state) for b in general.batches.pending]
        assert (fast.batches.consumed, fast.batches.read_size, fast.batches.pending_since) == \
            (general.batches.consumed, general.batches.read_size, general.batches.pending_since)
    assert fast.working.checkpoint_offset == 30 and fast.working.checkpoint_ts == 120


def test_ticks_that_can_change_the_state_take_the_general_path():
    fg = flowgraph()
    read(fg, 10, 100, rows=5)
    assert not fg.read_ticks(9, 20, 150, 1.0)      # not where it stands: a range error, told by advance
    sealed = fg.working.copy()
    sealed.segments[100].state, sealed.segments[100].sealed_ts = SegmentState.SEALED, 120
    fg.batches.state = sealed
    assert not fg.read_ticks(10, 20, 150, 1.0)     # a Sealed segment waits for a tick
    flushing = fg.working.copy()
    flushing.segments[100].state, flushing.flush_ts = SegmentState.GROWING, 140
    fg.batches.state = flushing
    assert not fg.read_ticks(10, 20, 150, 1.0)     # a flush in progress
    assert fg.working is flushing and [b.end for b in fg.batches.pending] == [10]


def fresh_route_row(fg: VchannelFlowgraph) -> RouteRow:
    """``route_row`` made whole from the flowgraph's state, nothing kept."""
    w, wm = fg.working, fg.watermarks
    return RouteRow(start=w.checkpoint_offset, kept=RouteKept(
        vchannel=fg.vchannel, collection_id=fg.collection_id, collection_name=fg.schema.name, seek_ts=w.seek_ts,
        dropped_segments=frozenset(w.dropped_segments()) or None,
        dropped_partitions=frozenset(w.dropped_partitions) or None, collection_dropped=w.collection_dropped,
        replay=w.replay, delete_watermark=wm.delete or 0, quarantine_watermark=wm.quarantine or 0,
        flush_ts=w.flush_ts, sealed=w.sealed_segments() or None), tick=w.checkpoint_ts)


def test_the_routing_row_follows_every_change_of_the_state_and_watermarks():
    fg = flowgraph()
    rows = [fg.route_row()]
    assert rows[-1] == fresh_route_row(fg)
    read(fg, 10, 100, rows=5)                       # a segment appears
    rows.append(fg.route_row())
    assert rows[-1] == fresh_route_row(fg)
    assert fg.read_ticks(10, 20, 110, 2.0)          # ticks only: the start moves, the rest is kept
    rows.append(fg.route_row())
    assert rows[-1] == fresh_route_row(fg) and (rows[-1].start, rows[-1].tick) == (20, 110) and \
        rows[-1].kept is rows[-2].kept
    assert fg.request_flush(115)                    # the segment sealed for a flush
    rows.append(fg.route_row())
    assert rows[-1] == fresh_route_row(fg) and rows[-1].kept.flush_ts == 115 and rows[-1].kept.sealed == {100: 115}
    read(fg, 30, 120)                               # the flush's tick: Flushed, the flush over
    rows.append(fg.route_row())
    assert rows[-1] == fresh_route_row(fg) and rows[-1].kept.flush_ts == 0
    sync = fg.sync()
    fg.committed_sync(sync, Watermarks(insert=30, delete=25, quarantine=27), 3.0)   # new watermarks
    rows.append(fg.route_row())
    assert rows[-1] == fresh_route_row(fg) and (rows[-1].kept.delete_watermark, rows[-1].kept.quarantine_watermark) == \
        (25, 27)
    assert all(a != b for a, b in zip(rows, rows[1:]))   # every step changed the row


def test_a_vchannel_is_ticks_only_until_it_reads_rows_and_again_once_they_are_committed():
    fg = flowgraph()
    read(fg, 10, 100)
    assert fg.uncommitted and fg.ticks_only
    read(fg, 20, 110, rows=5)
    read(fg, 30, 120)
    assert not fg.ticks_only and fg.batches.pending_since is not None
    sync = fg.sync()
    fg.committed_sync(sync, Watermarks(insert=30), 2.0)
    read(fg, 40, 130)
    assert fg.ticks_only
    fg.claim = True                                  # a claim after a refused commit goes out at once
    assert not fg.ticks_only
