"""The pipeline loop's trigger policy (pipeline/trigger.py): pure logic."""

from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.trigger import Trigger


def cycle(rows: int = 0, capped: bool = False) -> CycleReport:
    return CycleReport(1, rows=rows, capped=capped)


def test_an_idle_node_keeps_the_interval():
    trigger = Trigger(1.0)
    for i in range(5):
        assert trigger.next_start(10.0 * i, 10.0 * i + 0.3, cycle()) == 10.0 * i + 1.0
    assert not trigger.busy


def test_short_cycles_with_rows_keep_the_interval():
    """256 vchannels: 0.24-s cycles carry rows, and a cycle a second stays the cost."""
    trigger = Trigger(1.0)
    for i in range(20):
        assert trigger.next_start(float(i), i + 0.24, cycle(rows=50)) == i + 1.0
    assert not trigger.busy


def test_one_long_cycle_does_not_make_a_node_busy():
    trigger = Trigger(1.0)
    trigger.next_start(0.0, 0.2, cycle(rows=50))
    assert trigger.next_start(1.0, 1.8, cycle(rows=50)) == 2.0
    assert not trigger.busy


def test_a_busy_node_runs_two_cycles_an_interval_then_back_to_back():
    trigger = Trigger(1.0)
    trigger.next_start(0.0, 0.8, cycle(rows=50))
    assert trigger.next_start(1.0, 1.7, cycle(rows=50)) == 1.5   # already past: the next starts at once
    assert trigger.busy
    # busy cycles carry less and take less; down to 0.3 of the interval it stays busy
    for start in (2.0, 2.5, 3.0, 3.5):
        assert trigger.next_start(start, start + 0.4, cycle(rows=50)) == start + 0.5
    assert trigger.busy


def test_a_node_whose_load_stops_goes_back_to_the_interval():
    trigger = Trigger(1.0)
    for start in (0.0, 1.0, 2.0):
        trigger.next_start(start, start + 0.9, cycle(rows=50))
    assert trigger.busy
    trigger.next_start(3.0, 3.2, cycle())   # no rows: counts as nothing
    assert trigger.next_start(3.5, 3.6, cycle()) == 4.5
    assert not trigger.busy


def test_a_failed_cycle_counts_as_idle():
    trigger = Trigger(1.0)
    for start in (0.0, 1.0, 2.0):
        trigger.next_start(start, start + 0.9, cycle(rows=50))
    trigger.next_start(3.0, 3.1, None)
    assert trigger.next_start(4.0, 4.1, None) == 5.0


def test_a_capped_cycle_is_followed_at_once_busy_or_not():
    trigger = Trigger(1.0)
    assert trigger.next_start(0.0, 0.3, cycle(rows=50, capped=True)) == 0.3
    assert trigger.next_start(0.3, 2.0, cycle(capped=True)) == 2.0


def test_an_interval_of_zero_runs_cycles_back_to_back():
    trigger = Trigger(0.0)
    assert trigger.next_start(5.0, 5.2, cycle(rows=50)) == 5.0
    assert not trigger.busy
