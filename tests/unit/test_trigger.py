"""The pipeline loop's trigger policy (pipeline/trigger.py): pure logic."""

from deltanode.config.sections.pipeline import TriggerSettings
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.trigger import Trigger


def cycle(rows: int = 0, capped: bool = False, files: int = 0) -> CycleReport:
    return CycleReport(1, rows=rows, capped=capped, files=files)


def latency_first(interval: float) -> Trigger:
    return Trigger(TriggerSettings(interval=interval, files_rate=0))


def test_an_idle_node_keeps_the_interval():
    trigger = latency_first(1.0)
    for i in range(5):
        assert trigger.next_start(10.0 * i, 10.0 * i + 0.3, cycle()) == 10.0 * i + 1.0
    assert not trigger.busy


def test_short_cycles_with_rows_keep_the_interval():
    """256 vchannels: 0.24-s cycles carry rows, and a cycle a second stays the cost."""
    trigger = latency_first(1.0)
    for i in range(20):
        assert trigger.next_start(float(i), i + 0.24, cycle(rows=50)) == i + 1.0
    assert not trigger.busy


def test_one_long_cycle_does_not_make_a_node_busy():
    trigger = latency_first(1.0)
    trigger.next_start(0.0, 0.2, cycle(rows=50))
    assert trigger.next_start(1.0, 1.8, cycle(rows=50)) == 2.0
    assert not trigger.busy


def test_a_busy_node_runs_two_cycles_an_interval_then_back_to_back():
    trigger = latency_first(1.0)
    trigger.next_start(0.0, 0.8, cycle(rows=50))
    assert trigger.next_start(1.0, 1.7, cycle(rows=50)) == 1.5   # already past: the next starts at once
    assert trigger.busy
    # busy cycles carry less and take less; down to 0.3 of the interval it stays busy
    for start in (2.0, 2.5, 3.0, 3.5):
        assert trigger.next_start(start, start + 0.4, cycle(rows=50)) == start + 0.5
    assert trigger.busy


def test_a_node_whose_load_stops_goes_back_to_the_interval():
    trigger = latency_first(1.0)
    for start in (0.0, 1.0, 2.0):
        trigger.next_start(start, start + 0.9, cycle(rows=50))
    assert trigger.busy
    trigger.next_start(3.0, 3.2, cycle())   # no rows: counts as nothing
    assert trigger.next_start(3.5, 3.6, cycle()) == 4.5
    assert not trigger.busy


def test_a_failed_cycle_counts_as_idle():
    trigger = latency_first(1.0)
    for start in (0.0, 1.0, 2.0):
        trigger.next_start(start, start + 0.9, cycle(rows=50))
    trigger.next_start(3.0, 3.1, None)
    assert trigger.next_start(4.0, 4.1, None) == 5.0


def test_a_capped_cycle_is_followed_at_once_busy_or_not():
    trigger = latency_first(1.0)
    assert trigger.next_start(0.0, 0.3, cycle(rows=50, capped=True)) == 0.3
    assert trigger.next_start(0.3, 2.0, cycle(capped=True)) == 2.0


def test_an_interval_of_zero_runs_cycles_back_to_back():
    trigger = latency_first(0.0)
    assert trigger.next_start(5.0, 5.2, cycle(rows=50)) == 5.0
    assert not trigger.busy


def paced(interval: float = 1.0, rate: float = 250.0, longest: float = 10.0) -> Trigger:
    return Trigger(TriggerSettings(interval=interval, files_rate=rate, max_interval=longest))


def test_a_few_files_a_cycle_keep_the_interval():
    trigger = paced()
    assert trigger.next_start(0.0, 0.3, cycle(rows=5000, files=100)) == 1.0
    assert trigger.next_start(1.0, 1.1, cycle()) == 2.0      # an idle cycle
    assert trigger.next_start(2.0, 2.1, None) == 3.0         # a failed one


def test_past_the_files_rate_cycles_space_out_so_that_files_carry_more_rows():
    trigger = paced()
    assert trigger.next_start(0.0, 1.2, cycle(rows=50_000, files=1000)) == 4.0   # 1,000 files at 250 a second
    assert trigger.next_start(4.0, 5.5, cycle(rows=200_000, files=1000)) == 8.0


def test_the_pace_counts_files_not_seconds_so_a_slower_cycle_keeps_the_period():
    trigger = paced()
    assert trigger.next_start(0.0, 1.5, cycle(rows=50_000, files=1000)) == 4.0
    assert trigger.next_start(4.0, 7.0, cycle(rows=50_000, files=1000)) == 8.0   # a neighbour took a core


def test_the_pace_stops_at_the_longest_interval():
    trigger = paced(longest=10.0)
    assert trigger.next_start(0.0, 3.0, cycle(rows=500_000, files=10_000)) == 10.0


def test_a_cycle_longer_than_its_period_is_followed_at_once():
    trigger = paced()
    start = trigger.next_start(0.0, 6.0, cycle(rows=50_000, files=1000))
    assert start == 4.0 < 6.0   # the loop waits max(0, start - now): none


def test_a_paced_node_still_drains_a_backlog_at_once():
    trigger = paced()
    assert trigger.next_start(0.0, 2.0, cycle(rows=50_000, files=1000, capped=True)) == 2.0


def test_a_longest_interval_under_the_interval_is_the_interval():
    trigger = paced(interval=2.0, longest=0.5)
    assert trigger.next_start(0.0, 0.1, cycle(rows=50_000, files=5000)) == 2.0
