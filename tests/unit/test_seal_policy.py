"""Sealing and flushing a vchannel's segments: a flush request, Milvus's seal policies, and the
batch whose TimeTick makes the sealed segments Flushed (pure logic)."""

import math
from dataclasses import replace

from deltanode.config.sections.pipeline import SealSettings
from deltanode.records import Portion, PortionStats, SegmentStats
from deltanode.state.channel_state import ChannelState, SegmentMeta, SegmentState
from deltanode.vchannel.seal_policy import first_due_ms, seal_by_policies, seal_for_flush
from deltanode.vchannel.state_update import advance
from deltanode.wire.positions import compose_ts, physical_ms

T0 = compose_ts(1_700_000_000_000)          # a hybrid ts; + compose_ts(ms) moves it by ms


def at(seconds: float) -> int:
    return T0 + compose_ts(int(seconds * 1000))


def channel(**segments: SegmentMeta) -> ChannelState:
    return ChannelState("v", 1, "p", checkpoint_offset=100, checkpoint_ts=at(10),
                        segments={s.segment_id: s for s in segments.values()})


def seg(segment_id: int, rows: int = 10, start: float = 0, last: float = 9, size: int = 1000) -> SegmentMeta:
    return SegmentMeta(segment_id, 1, SegmentState.GROWING, rows, start_offset=1, start_ts=at(start), dml_offset=90,
                       dml_ts=at(last), size_bytes=size)


def batch(first: int, end: int, tick: int, segments: dict | None = None, sealed: tuple = ()) -> Portion:
    return Portion("v", first, end, segments=segments or {}, stats=PortionStats(tick), sealed=sealed)


def test_a_flush_seals_the_segments_with_rows_and_a_tick_past_it_flushes_them_in_that_batch():
    state = channel(a=seg(1), b=seg(2, rows=0))
    sealed = seal_for_flush(state, at(12))
    assert sealed.segments[1].state == SegmentState.SEALED and sealed.segments[1].sealed_ts == at(12)
    assert sealed.segments[2].state == SegmentState.GROWING          # no rows: nothing to seal
    assert sealed.flush_ts == at(12) and state.segments[1].state == SegmentState.GROWING   # the input is not changed
    # A batch before the flush ts: rows up to it into a segment first seen now seal it too.
    mid = advance(sealed, [batch(100, 110, at(11), {3: SegmentStats(1, 5, at(11), at(11.5), 105, at(11))},
                                 sealed=(3,))])
    assert mid.state.segments[3].state == SegmentState.SEALED and mid.state.segments[3].sealed_ts == at(12)
    assert mid.state.segments[1].state == SegmentState.SEALED and mid.urgent
    # The batch whose tick reaches the flush ts makes them Flushed, in its own commit.
    done = advance(mid.state, [batch(110, 120, at(12.2))])
    assert {s: done.state.segments[s].state for s in (1, 3)} == {1: SegmentState.FLUSHED, 3: SegmentState.FLUSHED}
    assert done.state.segments[1].dml_offset == 120 and done.state.flush_ts == 0
    assert done.urgent and not done.idle


def test_a_flush_the_vchannel_read_past_seals_at_the_largest_ts_it_read():
    state = replace(channel(a=seg(1, last=30)), checkpoint_ts=at(25))
    sealed = seal_for_flush(state, at(12))
    assert sealed.flush_ts == at(30) and sealed.segments[1].sealed_ts == at(30)
    assert advance(sealed, [batch(100, 101, at(30))]).state.segments[1].state == SegmentState.FLUSHED


def test_a_request_is_taken_once():
    state = seal_for_flush(channel(a=seg(1)), at(12))
    state = advance(state, [batch(100, 110, at(13))]).state
    state.segments[4] = seg(4)
    assert seal_for_flush(state, at(12)) is None            # the same etcd key read again
    assert seal_for_flush(state, at(11)) is None
    assert seal_for_flush(state, at(14)).segments[4].state == SegmentState.SEALED


def test_the_seal_policies_use_the_vchannels_clock_and_milvus_defaults():
    settings = SealSettings()
    big = seg(1, size=math.ceil(0.12 * (1024 << 20)))           # sealProportion x maxSize
    old = seg(2, start=-86400)                                   # maxLife
    idle = seg(3, last=10 - 600, size=16 << 20)                  # maxIdleTime, minSizeFromIdleToSealed
    idle_small = seg(4, last=10 - 600, size=(16 << 20) - 1)
    young = seg(5, size=(16 << 20))
    sealed = seal_by_policies(channel(a=big, b=old, c=idle, d=idle_small, e=young), settings)
    reasons = {s.segment_id: s.seal_reason for s in sealed.segments.values() if s.state == SegmentState.SEALED}
    assert reasons == {1: "size", 2: "lifetime", 3: "idle"}
    assert sealed.segments[1].sealed_ts == at(10)               # the vchannel's last tick
    assert seal_by_policies(channel(e=young), settings) is None
    # Replaying an old backlog: its clock is the ticks it read, not the wall clock.
    assert seal_by_policies(replace(channel(e=young), checkpoint_ts=at(11)), settings) is None


def test_no_policy_seals_before_the_clock_first_due_ms_gives_and_one_does_from_it():
    settings = SealSettings(max_life=60.0, max_idle=30.0, min_size_from_idle=500)
    cases = {"lifetime": channel(a=seg(1, start=0, last=50, size=100)),          # due at 60 s
             "idle": channel(a=seg(1, start=0, last=5, size=1000)),              # due at 35 s
             "earliest of two": channel(a=seg(1, start=-40, last=9, size=100),   # due at 20 s
                                        b=seg(2, start=0, last=-10, size=1000))}  # due at 20 s as well
    for name, state in cases.items():
        due = first_due_ms(state, settings)
        for ms in range(0, 70_000, 250):
            clock = T0 + compose_ts(ms)
            sealed = seal_by_policies(replace(state, checkpoint_ts=clock), settings)
            if physical_ms(clock) < due:
                assert sealed is None, (name, ms)
        first = next(ms for ms in range(0, 70_000, 250)
                     if seal_by_policies(replace(state, checkpoint_ts=T0 + compose_ts(ms)), settings))
        assert 0 <= first - (due - physical_ms(T0)) <= 250, name    # fires within a step of the clock given
    assert first_due_ms(channel(a=seg(1, size=math.ceil(0.12 * (1024 << 20)))), SealSettings()) == 0   # by size: now
    assert first_due_ms(channel(a=seg(1, rows=0)), settings) == math.inf             # nothing Growing with rows
    assert first_due_ms(channel(a=seg(1)), SealSettings(by_policies=False)) == math.inf
