"""The replay filter, rule by rule (the recovery design: executor/replay_filter.py)."""

from deltanode.executor.replay_filter import ReplayFilter


def test_flushed_segment_drops_inserts_until_a_later_message_passes_its_position():
    f = ReplayFilter(flushed={1: 100})
    assert f.admit(1, 90) is False          # EndTs <= dml ts: already in the flushed segment
    assert f.admit(2, 100) is True          # another segment, EndTs == ts: S keeps 1
    assert f.admit(1, 100) is False
    assert f.admit(2, 101) is True          # EndTs > ts removes 1 from S for good...
    assert f.admit(1, 95) is True           # ...so even an older-looking insert of 1 is kept now
    assert not f.active


def test_unflushed_segment_drops_until_its_own_message_is_newer():
    f = ReplayFilter(unflushed={5: 200})
    assert f.admit(5, 150) is False
    assert f.admit(6, 300) is True          # other segments do not clear G
    assert f.admit(5, 200) is False         # EndTs == dml ts: dropped
    assert f.admit(5, 201) is True          # newer: kept, and 5 leaves G
    assert f.admit(5, 10) is True
    assert not f.active


def test_flushed_check_runs_before_the_unflushed_one():
    f = ReplayFilter(flushed={1: 100}, unflushed={2: 50})
    assert f.admit(2, 80) is True           # 80 <= 100 keeps 1 in S; 80 > 50 frees 2
    assert f.admit(1, 99) is False
    assert f.flushed == {1: 100} and f.unflushed == {}


def test_a_tick_past_every_position_empties_the_filter():
    f = ReplayFilter(flushed={1: 100}, unflushed={2: 300})
    f.on_tick(299)
    assert f.active
    f.on_tick(300)
    assert not f.active and f.admit(2, 1) is True


def test_json_round_trip():
    f = ReplayFilter(flushed={1: 100}, unflushed={2: 300})
    assert ReplayFilter.of(f.state()) == f and ReplayFilter().state() is None
