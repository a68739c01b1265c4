"""Parked vchannels (``flowgraph.tick_cursor``, ``pipeline.parking``): idle ones move together and
catch up with their cursor to the state they would have reached one read at a time."""

from __future__ import annotations

from dataclasses import replace

from deltanode.config.sections.pipeline import Limits, SealSettings
from deltanode.failure.classify import Failure
from deltanode.failure.kinds import FailureKind
from deltanode.pipeline.parking import GROUP, CursorSpan, Parking
from deltanode.pipeline.plan import Position, plan_cycle
from deltanode.records import RangeKey, ReadStats
from deltanode.state.channel_state import SegmentMeta, SegmentState
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import VchannelFlowgraph
from deltanode.vchannel.tick_cursor import TickCursor
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import schema_from_json

PCHANNEL = "dn-dml_0"
SCHEMA = schema_from_json({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}, "c")


def flowgraph(cid: int, shard: int = 0) -> VchannelFlowgraph:
    info = VchannelInfo(collectionID=cid, channelName=f"{PCHANNEL}_{cid}v{shard}")
    info.seek_position.msgID = CODECS["kafka"].to_msg_id(0)
    fg = VchannelFlowgraph(info, SCHEMA, node_id=1)
    fg.load(None, Watermarks(), 0.0)
    return fg


def ticks(first: int, end: int, tick: int = 0, tick_offset: int = -1, routed: frozenset[str] = frozenset(),
          error: str | None = None) -> ReadStats:
    return ReadStats(PCHANNEL, first, end, messages=end - first, bytes=60 * (end - first), tick=tick,
                     tick_offset=tick_offset, routed=routed,
                     error=Failure(kind=FailureKind.BROKER, message=error) if error is not None else None)


def range_key(first: int, end: int) -> RangeKey:
    return RangeKey(pchannel=PCHANNEL, partition=0, first=first, end=end)


def parked(n: int) -> tuple[Parking, list[VchannelFlowgraph]]:
    """``n`` flowgraphs that read [0, 10) (a tick at 8) and parked."""
    parking, fgs = Parking(), [flowgraph(100 + i) for i in range(n)]
    for fg in fgs:
        fg.route_row()   # the cycle's plan makes it, and runs the seal policies
        fg.seal_due(SealSettings())
        assert fg.read_ticks(0, 10, 1000, 0.0, 60.0)
        parking.park(fg)
    assert all(fg.parked for fg in fgs)
    return parking, fgs


def test_a_parked_vchannel_catches_up_to_the_state_of_reading_one_range_at_a_time():
    parking, (moving,) = parked(1)
    alone = flowgraph(100)
    assert alone.read_ticks(0, 10, 1000, 0.0, 60.0)
    cursor = parking.cursors()[0]
    spans = [(10, 20, 1005, 18), (20, 30, 0, -1), (30, 45, 1010, 40), (45, 50, 0, -1)]
    for first, end, tick, at in spans:
        parking.settle([ticks(first, end, tick, at)], {range_key(first, end): cursor.key},
                       {cursor.key: (moving.vchannel,)}, {PCHANNEL: 60.0})
        assert alone.read_ticks(first, end, tick if at >= first else 0, 0.0, 60.0)
    assert cursor.offset == 50 and moving.parked
    assert replace(moving.working, batches=0) == replace(alone.working, batches=0)
    assert moving.working.checkpoint_offset == 50 and moving.working.checkpoint_ts == 1010
    rows: dict = {}
    parking.rows([cursor.key], rows, {}, {}, {})   # its row starts after the cursor's last TimeTick
    assert (rows[moving.vchannel].start, rows[moving.vchannel].tick) == (50, 1010)
    assert [(b.start, b.end, b.idle) for b in moving.batches.pending] == [(0, 50, True)] == \
        [(b.start, b.end, b.idle) for b in alone.batches.pending]


def test_a_member_parked_later_takes_only_the_ticks_read_after_it_parked():
    parking, (first,) = parked(1)
    cursor = parking.cursors()[0]
    cursor.move(20, 1200, 15, None)
    second = flowgraph(200)
    second.route_row()
    assert second.read_ticks(0, 20, 1200, 0.0)
    second.seal_due(SealSettings())
    parking.park(second)
    cursor.move(30, 0, -1, None)        # no tick in [20, 30): the one at 15 stays the cursor's last
    assert second.parked and second.working.checkpoint_ts == 1200 and second.working.checkpoint_offset == 30
    assert first.working.checkpoint_ts == 1200 and first.working.checkpoint_offset == 30
    cursor.move(40, 1300, 35, None)
    assert first.working.checkpoint_ts == second.working.checkpoint_ts == 1300


def test_a_member_with_a_message_of_its_own_leaves_at_the_offset_its_read_started():
    parking, fgs = parked(3)
    cursor = parking.cursors()[0]
    key = cursor.key
    names = tuple(fg.vchannel for fg in fgs)
    general = parking.settle([ticks(10, 20, 1005, 15, routed=frozenset({fgs[1].vchannel}))],
                             {range_key(10, 20): key}, {key: names}, {PCHANNEL: 60.0})
    assert general == {key: [fgs[1].vchannel]}
    assert not fgs[1].parked and fgs[1].working.checkpoint_offset == 10   # its portion starts there
    assert fgs[0].parked and fgs[0].working.checkpoint_offset == 20 and fgs[0].working.checkpoint_ts == 1005


def test_a_failed_read_sends_every_member_the_general_way():
    parking, fgs = parked(2)
    key = parking.cursors()[0].key
    general = parking.settle([ticks(10, 20, error="broker down")], {range_key(10, 20): key},
                             {key: tuple(fg.vchannel for fg in fgs)}, {})
    assert general == {key: [fg.vchannel for fg in fgs]}
    assert not any(fg.parked for fg in fgs) and all(fg.working.checkpoint_offset == 10 for fg in fgs)


def test_a_commit_a_flush_request_or_a_release_takes_a_member_off():
    parking, fgs = parked(3)
    cursor = parking.cursors()[0]
    cursor.move(20, 1005, 15, None)
    sync = fgs[0].sync()
    assert sync.end == 20
    fgs[0].committed_sync(sync, Watermarks(insert=20), 1.0)
    assert not fgs[0].parked and fgs[0].batches.pending == []
    members = {fg.vchannel: fg for fg in fgs[1:]}
    parking.prepare(members, {})
    parking.prepare(members, {fgs[1].collection_id: 1005})
    assert not fgs[1].parked and fgs[2].parked
    parking.prepare({}, {fgs[1].collection_id: 1005})      # fgs[2] released
    assert parking.cursors() == []


def test_only_what_ticks_can_only_move_parks():
    parking = Parking()
    fg = flowgraph(100)
    fg.route_row()
    sealed = fg.working.copy()
    sealed.segments[5] = SegmentMeta(5, 1, SegmentState.SEALED, sealed_ts=900)
    fg.batches.state = sealed
    assert not fg.read_ticks(0, 10, 1000, 0.0)     # a Sealed segment waits for a tick: the general path
    parking.park(fg)
    assert not fg.parked
    other = flowgraph(101)
    other.route_row()
    assert other.read_ticks(0, 10, 1000, 0.0)
    parking.park(other)
    late = flowgraph(102)
    late.route_row()
    assert late.read_ticks(0, 5, 0, 0.0)
    parking.park(late)                             # not where the cursor stands
    assert other.parked and not late.parked


def test_a_cursor_plans_as_one_position_and_its_members_get_their_rows():
    parking, fgs = parked(3)
    busy = flowgraph(300)
    plan = plan_cycle([Position(busy.vchannel, PCHANNEL, 0, 4), *parking.positions()], {(PCHANNEL, 0): 30},
                      {PCHANNEL: 60.0}, Limits())
    assert [r.members for r in plan.ranges] == [(f"{GROUP}{PCHANNEL}[0]", busy.vchannel)]
    ranges, spans = parking.expand(plan.ranges)
    assert ranges[0].members == (busy.vchannel, *(fg.vchannel for fg in fgs))
    assert spans == {(PCHANNEL, 0): CursorSpan(first=4, end=30, own=1)}
    rows: dict = {}
    starts: dict = {}
    loads: dict = {}
    parking.rows({}, rows, {}, starts, loads)      # a cursor the cycle does not read: nothing to ship
    assert rows == starts == loads == {}
    parking.rows(spans, rows, {}, starts, loads)
    assert all(rows[fg.vchannel] == fg.route_row() for fg in fgs) and set(starts.values()) == {10}
    assert set(loads) == {fg.vchannel for fg in fgs}
    assert all(fg.parked for fg in fgs)
    assert isinstance(parking.cursors()[0], TickCursor)


def test_a_tick_that_reaches_a_seal_policy_sends_the_members_back_to_the_policies():
    settings = SealSettings(max_life=1.0)
    fg = flowgraph(100)
    growing = fg.working.copy()
    growing.segments[5] = SegmentMeta(5, 1, SegmentState.GROWING, num_rows=50, start_offset=0, start_ts=1000 << 18)
    fg.batches.state = growing
    fg.route_row()
    assert fg.seal_due(settings) == []                  # no tick yet; due from 2.0 s on
    assert fg.read_ticks(0, 10, 1500 << 18, 0.0)
    parking = Parking()
    parking.park(fg)
    cursor = parking.cursors()[0]
    cursor.move(20, 1900 << 18, 15, None)
    parking.prepare({fg.vchannel: fg}, {})
    assert fg.parked
    cursor.move(30, 2100 << 18, 25, None)
    parking.prepare({fg.vchannel: fg}, {})
    assert not fg.parked and fg.working.checkpoint_offset == 30
    assert fg.seal_due(settings) == [5]


def test_the_pieces_of_a_split_range_read_for_its_cursor():
    parking, fgs = parked(2)
    busy = flowgraph(300)
    plan = plan_cycle([Position(busy.vchannel, PCHANNEL, 0, 4), *parking.positions()], {(PCHANNEL, 0): 30},
                      {PCHANNEL: 60.0}, Limits())
    ranges, spans = parking.expand(plan.ranges)
    pieces = [replace(ranges[0], end=17), replace(ranges[0], first=17)]
    own, grouped = parking.pieces(pieces, spans)
    assert own == {p.key: (busy.vchannel,) for p in pieces}
    assert grouped == {p.key: (PCHANNEL, 0) for p in pieces}
    reads = [ticks(4, 17, 1100, 12), ticks(17, 30, 0, -1, routed=frozenset({fgs[0].vchannel}))]
    general = parking.settle(reads, grouped, {(PCHANNEL, 0): parking.members((PCHANNEL, 0))}, {})
    assert general == {(PCHANNEL, 0): [fgs[0].vchannel]} and fgs[0].working.checkpoint_offset == 10
    assert fgs[1].parked and fgs[1].working.checkpoint_offset == 30 and fgs[1].working.checkpoint_ts == 1100


def test_members_of_a_cursor_past_the_brokers_end_are_unparked_for_the_plan_to_fail():
    parking, fgs = parked(2)
    key = parking.cursors()[0].key
    assert parking.unpark_past({key: 10}) == [] and all(fg.parked for fg in fgs)
    assert parking.unpark_past({key: 4}) == fgs and not any(fg.parked for fg in fgs)
    plan = plan_cycle([Position(fg.vchannel, PCHANNEL, 0, fg.next_offset) for fg in fgs], {key: 4}, {PCHANNEL: 60.0},
                      Limits())
    assert sorted(plan.lost) == sorted(fg.vchannel for fg in fgs)


def test_a_vchannel_released_and_watched_again_parks_as_the_new_flowgraph_only():
    parking, (old,) = parked(1)
    new = flowgraph(100)                            # the same vchannel, watched again
    parking.prepare({new.vchannel: new}, {})        # the next cycle forgets the old flowgraph
    assert parking.cursors() == [] and not old.parked
    new.route_row()
    new.seal_due(SealSettings())
    assert new.read_ticks(0, 10, 1000, 0.0)
    parking.park(new)
    old.unpark()
    assert new.parked and parking.members(parking.cursors()[0].key) == (new.vchannel,)
