"""A cycle's ranges: one read per pchannel for its vchannels near the head, a catch-up lane, fair byte caps."""

from deltanode.config.sections.pipeline import Limits
from deltanode.mq.broker import Broker
from deltanode.pipeline.plan import (
    MAX_MESSAGE_BYTES,
    UNREAD_FACTOR,
    UNREAD_FLOOR,
    Position,
    plan_cycle,
    planning_sizes,
    share_out,
    split_tasks,
)
from deltanode.records import Lane
from deltanode.wire.positions import pulsar_position

P0, P1 = ("p0", 0), ("p1", 0)
KAFKA, PULSAR = Broker("kafka", "127.0.0.1:9092"), Broker("pulsar", "pulsar://127.0.0.1:6650")


def pos(v, p, offset, replaying=False):
    return Position(v, p, 0, offset, replaying)


def test_vchannels_of_a_pchannel_share_one_read_from_the_smallest_position():
    plan = plan_cycle([pos("a", "p0", 100), pos("b", "p0", 95), pos("c", "p1", 7)], {P0: 120, P1: 9},
                      {"p0": 1000.0, "p1": 1000.0}, Limits())
    assert [(r.pchannel, r.first, r.end, r.members, r.lane) for r in plan.ranges] == [
        ("p0", 95, 120, ("a", "b"), Lane.MAIN), ("p1", 7, 9, ("c",), Lane.MAIN)]
    assert not plan.capped and plan.lost == {}


def test_a_vchannel_far_behind_catches_up_on_its_own_lane_without_holding_the_head_back():
    limits = Limits(max_messages=50, catchup_bytes=10_000)   # merge window: 10 messages of 1 kB
    plan = plan_cycle([pos("head", "p0", 1000), pos("new", "p0", 0)], {P0: 1010}, {"p0": 1000.0}, limits)
    main, catch_up = plan.ranges
    assert (main.first, main.end, main.members, main.lane) == (1000, 1010, ("head",), Lane.MAIN)
    assert (catch_up.first, catch_up.end, catch_up.members, catch_up.lane) == (0, 10, ("new",), Lane.CATCH_UP)
    assert plan.capped   # the catch-up lane stopped short: the next cycle starts at once
    # Once within the merge window of the head, it reads on the main lane again.
    plan = plan_cycle([pos("head", "p0", 1010), pos("new", "p0", 1001)], {P0: 1020}, {"p0": 1000.0}, limits)
    assert [(r.first, r.end, r.members, r.lane) for r in plan.ranges] == [(1001, 1020, ("head", "new"), Lane.MAIN)]


def test_a_position_past_the_broker_end_is_lost_data_and_the_others_go_on():
    plan = plan_cycle([pos("a", "p0", 50), pos("b", "p0", 10)], {P0: 40}, {"p0": 100.0}, Limits())
    assert "before the checkpoint 50" in plan.lost["a"]
    assert [(r.first, r.end, r.members) for r in plan.ranges] == [(10, 40, ("b",))]


def test_byte_caps_are_water_filled_so_a_backlog_does_not_starve_a_live_pchannel():
    limits = Limits(max_messages=1000, max_bytes=100_000)
    plan = plan_cycle([pos("busy", "p0", 0), pos("live", "p1", 0)], {P0: 10_000, P1: 5},
                      {"p0": 1000.0, "p1": 1000.0}, limits)
    by = {r.pchannel: r for r in plan.ranges}
    assert by["p1"].end == 5                  # all it has
    assert by["p0"].end == 95                 # the rest of the 100 kB budget
    assert plan.capped


def test_an_unknown_message_size_counts_as_the_largest_and_a_range_always_moves():
    plan = plan_cycle([pos("a", "p0", 0)], {P0: 500}, {}, Limits(max_bytes=64 * MAX_MESSAGE_BYTES))
    assert plan.ranges[0].end == 64
    plan = plan_cycle([pos("a", "p0", 0)], {P0: 500}, {}, Limits(max_bytes=1))
    assert plan.ranges[0].end == 1


def test_a_vchannel_never_read_counts_at_a_multiple_of_what_its_pchannel_showed():
    """Never below a vchannel's own size; one never read: UNREAD_FACTOR x the pchannel's learned
    size (or its neighbours' when it learned none), or the largest message when no vchannel of
    its pchannel was read."""
    sizes = planning_sizes({"p0": 25_000.0, "p1": 0.0},
                           [("p0", None), ("p0", 30_000.0), ("p1", None), ("p2", 1e6), ("p3", None)])
    assert sizes == {"p0": UNREAD_FACTOR * 25_000.0, "p1": MAX_MESSAGE_BYTES, "p2": 1e6, "p3": MAX_MESSAGE_BYTES}
    assert planning_sizes({"p0": 5e6}, [("p0", None)]) == {"p0": MAX_MESSAGE_BYTES}   # capped at the largest
    assert planning_sizes({"p0": 25_000.0}, [("p0", 4e5)]) == {"p0": 4e5}
    # No Insert or Delete read on the pchannel yet: what its other vchannels were read at (TimeTicks),
    # never below the floor; a vchannel's own size, once read, whatever it is.
    assert planning_sizes({}, [("p0", None), ("p0", 40.0), ("p1", None), ("p1", 1e5)]) == \
        {"p0": UNREAD_FLOOR, "p1": UNREAD_FACTOR * 1e5}
    assert planning_sizes({}, [("p0", 40.0)]) == {"p0": 40.0}
    # 30 vchannels created a message apart, none read, 16 MiB for the pchannel: the whole backlog
    # in one cycle; at the largest message size, a message or six a cycle, on two lanes.
    backlog = [pos(f"v{i}", "p0", i) for i in range(30)]
    sizes = planning_sizes({"p0": 25_000.0}, [("p0", None)] * 30)
    plan = plan_cycle(backlog, {P0: 100}, sizes, Limits(max_bytes=16 << 20))
    assert [(r.first, r.end, r.lane) for r in plan.ranges] == [(0, 100, Lane.MAIN)]
    plan = plan_cycle(backlog, {P0: 100}, {"p0": MAX_MESSAGE_BYTES}, Limits(max_bytes=16 << 20))
    assert [(r.first, r.end, r.lane) for r in plan.ranges] == [(23, 24, Lane.MAIN), (0, 6, Lane.CATCH_UP)]


def test_a_busy_range_is_split_for_every_core_unless_its_replay_filter_runs():
    plan = plan_cycle([pos("a", "p0", 0), pos("b", "p1", 0)], {P0: 100, P1: 2}, {"p0": 1e6, "p1": 1e6}, Limits())
    tasks = split_tasks(plan.ranges, {"p0": 1e6, "p1": 1e6}, 2, KAFKA.cut_points)
    assert len(tasks) == 2
    pieces = sorted((r.pchannel, r.first, r.end) for t in tasks for r in t)
    assert pieces == [("p0", 0, 50), ("p0", 50, 100), ("p1", 0, 2)]
    replaying = plan_cycle([pos("a", "p0", 0, replaying=True)], {P0: 100}, {"p0": 1e6}, Limits())
    tasks = split_tasks(replaying.ranges, {"p0": 1e6}, 2, KAFKA.cut_points)
    assert [[(r.first, r.end) for r in t] for t in tasks] == [[(0, 100)]]


def test_many_small_ranges_are_packed_into_at_most_splits_tasks():
    positions = [pos(f"v{i}", f"p{i}", 0) for i in range(16)]
    plan = plan_cycle(positions, {(f"p{i}", 0): 3 for i in range(16)}, {f"p{i}": 100.0 for i in range(16)}, Limits())
    tasks = split_tasks(plan.ranges, {f"p{i}": 100.0 for i in range(16)}, 2, KAFKA.cut_points)
    assert len(tasks) == 2 and sorted(len(t) for t in tasks) == [8, 8]
    assert sorted(r.pchannel for t in tasks for r in t) == sorted(f"p{i}" for i in range(16))


def test_a_pulsar_range_is_cut_only_inside_one_ledger():
    """Entries of a ledger run from 0 without holes; what lies between ledgers is unknown."""
    high = pulsar_position(7, 111)                    # the last message: entry 110 of ledger 7
    first, end = pulsar_position(7, 10), pulsar_position(7, 110)
    assert PULSAR.cut_points(first, end, 2, high) == [pulsar_position(7, 60)]
    assert PULSAR.cut_points(pulsar_position(5, 900), end, 2, high) == []    # spans ledgers 5 to 7
    older = pulsar_position(5, 900), pulsar_position(5, 1100)                # inside an earlier ledger
    assert PULSAR.cut_points(*older, 2, high) == [pulsar_position(5, 1000)]
    assert PULSAR.cut_points(0, 25, 2, high) == []    # 0 is "the earliest", no message of the topic
    sizes = {"p0": 1.0, "p1": 1.0}
    plan = plan_cycle([pos("a", "p0", first), pos("b", "p1", 0)], {P0: high, P1: 2}, sizes, Limits())
    tasks = split_tasks(plan.ranges, sizes, 2, PULSAR.cut_points)
    assert sorted((r.pchannel, r.first, r.end) for t in tasks for r in t) == [
        ("p0", first, pulsar_position(7, 60)), ("p0", pulsar_position(7, 60), high), ("p1", 0, 2)]
    assert len(tasks) == 2   # ranges are spread over the tasks on Pulsar too


def test_a_vchannel_whose_range_held_no_tick_to_end_at_gets_a_longer_one():
    """Pack order (executor/pack_order.py): the range must reach a TimeTick, past the byte cap
    if need be, never past the high watermark."""
    limits = Limits(max_messages=10)
    short = plan_cycle([pos("a", "p0", 100, replaying=True)], {P0: 200}, {"p0": 1000.0}, limits)
    assert [(r.first, r.end) for r in short.ranges] == [(100, 110)]
    longer = plan_cycle([Position("a", "p0", 0, 100, True, min_messages=20)], {P0: 200}, {"p0": 1000.0}, limits)
    assert [(r.first, r.end, r.splittable) for r in longer.ranges] == [(100, 120, False)]
    at_head = plan_cycle([Position("a", "p0", 0, 100, True, min_messages=400)], {P0: 200}, {"p0": 1000.0}, limits)
    assert [(r.first, r.end) for r in at_head.ranges] == [(100, 200)]


def test_a_cycle_bounded_in_messages_shares_them_out_and_leaves_the_rest_to_the_next_cycle():
    limits = Limits(max_messages=1000, max_bytes=1 << 40, cycle_messages=300)
    plan = plan_cycle([pos("busy", "p0", 0), pos("live", "p1", 0), pos("backlog", "p2", 0)],
                      {P0: 10_000, P1: 20, ("p2", 0): 500}, {"p0": 100.0, "p1": 100.0, "p2": 100.0}, limits)
    by = {r.pchannel: r.end - r.first for r in plan.ranges}
    assert by == {"p0": 140, "p1": 20, "p2": 140}   # the live pchannel gets all it has, the others the rest
    assert plan.capped                               # the next cycle starts at once
    unbounded = plan_cycle([pos("busy", "p0", 0)], {P0: 10_000}, {"p0": 100.0}, Limits(max_bytes=1 << 40))
    assert unbounded.ranges[0].end == 1000


def test_sharing_out_a_budget_keeps_every_range_moving():
    assert share_out([5, 500, 50], 10_000) == [5, 500, 50]
    assert share_out([5, 500, 50], 100) == [5, 48, 47]
    assert share_out([10, 10, 10], 2) == [1, 1, 1]
