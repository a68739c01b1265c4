"""Which collections a cycle commits: data at once, idle checkpoints at a bounded rate."""

from deltanode.config.sections.pipeline import SyncSettings
from deltanode.pipeline.sync_policy import Candidate, SyncSelector, TokenBucket


def cand(v, cid, *, urgent=False, data_since=None, pending_bytes=0, committed_at=0.0):
    return Candidate(v, cid, urgent, data_since, pending_bytes, committed_at)


def test_data_and_events_are_committed_at_the_end_of_the_cycle_that_read_them():
    sel = SyncSelector(SyncSettings(), now=0.0)
    chosen = sel.select([cand("a", 1, data_since=100.0, committed_at=99.0),
                         cand("b", 2, urgent=True, committed_at=99.0),
                         cand("c", 3, committed_at=99.5)], now=100.0)
    assert chosen == [1, 2]   # c only moved its checkpoint, 0.5 s after its last commit


def test_a_max_delay_or_a_full_buffer_holds_data_back():
    sel = SyncSelector(SyncSettings(max_delay=5.0, max_bytes=1000), now=0.0)
    assert sel.select([cand("a", 1, data_since=98.0, committed_at=98.0)], now=100.0) == []
    assert sel.select([cand("a", 1, data_since=95.0, committed_at=95.0)], now=100.0) == [1]
    assert sel.select([cand("a", 1, data_since=99.0, pending_bytes=1000, committed_at=99.0)], now=100.0) == [1]


def test_idle_checkpoints_are_committed_oldest_first_within_the_rate():
    sel = SyncSelector(SyncSettings(checkpoint_interval=10.0, idle_rate=3.0), now=0.0)
    idle = [cand(f"v{i}", i, committed_at=float(i)) for i in range(100)]
    first = sel.select(idle, now=100.0)
    assert first == [0, 1, 2]                               # one second's worth, oldest first
    assert sel.select(idle, now=100.0) == []               # nothing left in the bucket
    assert sel.select(idle, now=101.0) == [0, 1, 2]        # (the caller marks them committed)
    assert sel.select([cand("young", 7, committed_at=95.0)], now=102.0) == []  # under the interval


def test_a_vchannel_that_read_only_ticks_needs_a_candidate_only_once_its_idle_checkpoint_is_due():
    sel = SyncSelector(SyncSettings(checkpoint_interval=10.0), now=0.0)
    # Exactly what ``select`` would do with its candidate: nothing under the interval.
    for committed_at in (85.0, 90.0, 95.0, 99.9):
        assert sel.may_pick_idle(committed_at, now=100.0) == bool(sel.select([cand("v", 1, committed_at=committed_at)],
                                                                             now=100.0))
    assert sel.may_pick_idle(90.0, now=100.0) and not sel.may_pick_idle(95.0, now=100.0)


def test_the_token_bucket_saves_at_most_one_second():
    bucket = TokenBucket(rate=2.0, now=0.0)
    assert bucket.take(10, now=100.0) == 2
    assert bucket.take(10, now=100.5) == 1
