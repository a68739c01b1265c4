"""A cycle bounded in time: the messages it may read follow the last cycles' cost per message."""

from deltanode.pipeline.cycle_budget import MIN_MESSAGES, CycleBudget, CycleCost


def test_no_bound_until_a_cycle_with_enough_messages_taught_the_cost():
    budget = CycleBudget(max_seconds=2.0, floor=200)
    assert budget.messages() is None
    budget.observe(CycleCost(messages=MIN_MESSAGES - 1, job_seconds=5.0))   # a few ticks: their fixed cost
    assert budget.messages() is None
    budget.observe(CycleCost(messages=1000, job_seconds=1.0))               # 1 ms a message
    assert budget.messages() == 2000


def test_a_slower_node_reads_fewer_messages_a_cycle_and_recovers_when_it_speeds_up():
    budget = CycleBudget(max_seconds=2.0, floor=200)
    budget.observe(CycleCost(messages=1000, job_seconds=1.0))
    for _ in range(10):                                                     # a neighbour took a core
        budget.observe(CycleCost(messages=1000, job_seconds=4.0))
    slow = budget.messages()
    assert slow is not None and 500 <= slow < 600
    for _ in range(10):
        budget.observe(CycleCost(messages=1000, job_seconds=1.0))
    fast = budget.messages()
    assert fast is not None and 1800 <= fast <= 2000   # within ten cycles


def test_the_floor_keeps_a_cycle_reading_and_zero_seconds_means_no_bound():
    budget = CycleBudget(max_seconds=2.0, floor=200)
    budget.observe(CycleCost(messages=100, job_seconds=60.0))               # a stalled job
    assert budget.messages() == 200
    off = CycleBudget(max_seconds=0, floor=200)
    off.observe(CycleCost(messages=1000, job_seconds=1.0))
    assert off.messages() is None
