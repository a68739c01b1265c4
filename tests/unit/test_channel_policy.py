"""MEP 7's assignment rules (``datacoord.channel_policy``) and the hand-over clocks, without etcd."""

from __future__ import annotations

import math

from deltanode.datacoord.channel_backoff import FAILED_NODE_COOLDOWN, WatchFailures, WatchTimers
from deltanode.datacoord.channel_policy import (
    Action,
    ChannelSpec,
    PassState,
    WatchEntry,
    balance_move,
    decide,
    finish,
    keeper,
    settled,
)
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState

S = ChannelWatchState


def entry(vchannel: str, node: int | None, state: int = S.WatchSuccess, *, version: int = 1,
          legacy: bool = False) -> WatchEntry:
    return WatchEntry(key=f"cw/{node}/{vchannel}", node=node, vchannel=vchannel,
                      info=ChannelWatchInfo(state=state), version=version, legacy_parked=legacy)


def state(load: dict[int, int], *live: str, dropped: tuple[str, ...] = ()) -> PassState:
    specs = {v: ChannelSpec(v, 1) for v in live} | {v: ChannelSpec(v, 1, dropped=True) for v in dropped}
    return PassState(specs=specs, load=dict(load), now=1000.0)


def test_the_keeper_is_the_watched_key_then_the_lowest_live_node():
    p = state({1: 1, 2: 1, 3: 1}, "a")
    pending, watched, gone = entry("a", 1, S.ToWatch), entry("a", 3), entry("a", 9)
    assert keeper([pending, watched, gone], p) is watched
    assert keeper([entry("a", 3, S.ToWatch), pending], p).node == 1
    assert keeper([gone], p) is None
    assert keeper([watched], state({3: 1}, dropped=("a",))) is None


def test_a_second_holder_is_released_and_a_dropped_channel_removed():
    p = state({1: 1, 2: 1}, "a")
    kept, other = entry("a", 1), entry("a", 2)
    assert decide(kept, kept, p, watch_timeout=300).action is Action.KEEP
    d = decide(other, kept, p, watch_timeout=300)
    assert (d.action, d.why) == (Action.RELEASE, "duplicate assignment")
    d = decide(kept, None, state({1: 1}, dropped=("a",)), watch_timeout=300)
    assert (d.action, d.why) == (Action.REMOVE, "its collection was dropped")


def test_a_pending_watch_or_release_is_given_up_on_only_after_the_timeout():
    p = state({1: 1}, "a")
    pending = entry("a", 1, S.ToWatch)
    d = decide(pending, pending, p, watch_timeout=30)
    assert (d.action, d.after_timeout, d.why) == (Action.RELEASE, True, "no answer to ToWatch within 30 s")
    d = decide(entry("a", 1, S.ToRelease), pending, p, watch_timeout=30)
    assert (d.action, d.after_timeout) == (Action.FINISH, True)
    d = decide(entry("a", 1, S.ReleaseSuccess), None, p, watch_timeout=30)
    assert (d.action, d.after_timeout, d.why) == (Action.FINISH, False, "ReleaseSuccess from DataNode 1")
    assert decide(entry("a", 1, S.WatchFailure), None, p, watch_timeout=30).action is Action.WATCH_FAILED


def test_keys_of_a_gone_node_move_to_the_least_loaded_live_node_unless_held_or_dropped():
    p = state({1: 2, 2: 0}, "a", dropped=("b",))
    d = decide(entry("a", 9), None, p, watch_timeout=300)
    assert (d.action, d.node, d.why) == (Action.MOVE, 2, "DataNode 9 is gone")
    assert decide(entry("b", 9), None, p, watch_timeout=300).action is Action.DELETE
    p.held.add("a")
    assert decide(entry("a", 9), None, p, watch_timeout=300).action is Action.DELETE


def test_parked_channels_wait_for_a_node_under_the_buffer_node():
    nobody = state({}, "a")
    assert decide(entry("a", None, S.ToWatch), None, nobody, watch_timeout=300).action is Action.KEEP
    d = decide(entry("a", None, S.ToWatch, legacy=True), None, nobody, watch_timeout=300)
    assert (d.action, d.node) == (Action.MOVE, None)           # from remaining/ to the buffer node
    d = decide(entry("a", None, S.ToWatch), None, state({4: 0}, "a"), watch_timeout=300)
    assert (d.action, d.node) == (Action.MOVE, 4)
    assert decide(entry("a", None), None, state({4: 0}, dropped=("a",)), watch_timeout=300).action is Action.DELETE


def test_a_finished_hand_over_goes_to_the_balance_target_if_alive_else_elsewhere():
    p = state({1: 3, 2: 1, 3: 0}, "a")
    released = entry("a", 1, S.ReleaseSuccess)
    d = finish(released, p, 2, "why")
    assert (d.action, d.node, d.why) == (Action.MOVE, 2, "why")
    assert finish(released, p, 7, "why").node == 3         # the target left: the least loaded node
    assert finish(released, p, 1, "why").node == 3         # never back to the node that let go
    assert finish(released, state({1: 1}, "a"), None, "why").node == 1   # unless it is the only one
    assert finish(released, state({1: 1}, dropped=("a",)), None, "why").action is Action.REMOVE


def test_balance_moves_one_channel_once_settled_and_loads_differ_by_two():
    entries = [entry(v, 1) for v in ("a", "b", "c")] + [entry("d", 2)]
    p = state({1: 3, 2: 1, 3: 0}, "a", "b", "c", "d")
    assert settled(entries, p)
    move = balance_move(entries, p, cooling=())
    assert move is not None and (move.entry.vchannel, move.src, move.dst) == ("c", 1, 3)
    assert move.why == "balance: DataNode 1 holds 3 channels, DataNode 3 0"
    assert balance_move(entries, p, cooling={3}).dst == 2
    assert balance_move(entries[:2] + entries[3:], state({1: 2, 2: 1}, "a", "b", "d"), cooling=()) is None
    assert not settled(entries[:3] + [entry("d", 2, S.ToWatch)], p)
    assert not settled(entries[:3], p)                       # "d" has no key yet


def test_watch_timers_restart_with_each_new_version_and_drop_keys_no_pass_asks_about():
    timers = WatchTimers(timeout=30)
    timers.begin_pass()
    assert not timers.expired("k", 1, now=0.0)
    assert timers.next_deadline() == 30.0
    assert not timers.expired("k", 1, now=29.0) and timers.expired("k", 1, now=30.0)
    assert not timers.expired("k", 2, now=31.0)               # a tickle: the clock starts again
    timers.end_pass()
    assert timers.next_deadline() == 61.0
    timers.begin_pass()
    timers.end_pass()
    assert timers.next_deadline() == math.inf


def test_failed_watches_back_off_doubling_and_keep_the_node_out_of_balance():
    failures = WatchFailures()
    failures.record(node=1, vchannel="a", version=5, now=100.0)
    failures.record(node=1, vchannel="a", version=5, now=100.5)   # the same answer seen again
    assert failures.waiting("a", now=100.9) and not failures.waiting("a", now=101.0)
    failures.record(node=1, vchannel="a", version=8, now=110.0)
    assert failures.next_retry(now=110.0) == 112.0
    for version in range(9, 20):
        failures.record(node=1, vchannel="a", version=version, now=200.0)
    assert failures.next_retry(now=200.0) == 260.0                # capped at 60 s
    assert failures.cooling(now=200.0 + FAILED_NODE_COOLDOWN - 1) == {1}
    assert failures.cooling(now=200.0 + FAILED_NODE_COOLDOWN) == frozenset()
    failures.forget("a")
    assert not failures.waiting("a", now=200.0) and failures.next_retry(now=200.0) == math.inf
