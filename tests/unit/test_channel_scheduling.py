"""Scheduling pieces of channel assignment that need no etcd: per-channel queues, node choice."""

from __future__ import annotations

import threading
import time

from deltanode.datacoord.channel_policy import ChannelSpec, PassState
from deltanode.datanode.channel_watch import SerialQueues


def test_serial_queues_keep_order_per_key_and_run_keys_in_parallel():
    queues = SerialQueues("test")
    done: list[tuple[str, int]] = []
    release_a = threading.Event()

    def task(key: str, i: int, gate: threading.Event | None = None):
        def run():
            if gate is not None:
                assert gate.wait(5)
            done.append((key, i))
        return run

    queues.submit("a", task("a", 0, release_a))
    for i in range(1, 4):
        queues.submit("a", task("a", i))
    for i in range(3):
        queues.submit("b", task("b", i))
    deadline = time.monotonic() + 5
    while len(done) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == [("b", 0), ("b", 1), ("b", 2)]  # "b" is not held up by the blocked "a"
    release_a.set()
    queues.join(5)
    assert [i for key, i in done if key == "a"] == [0, 1, 2, 3]


def test_a_hung_key_holds_one_worker_and_the_other_keys_go_on():
    queues = SerialQueues("test", workers=2)
    hang, done = threading.Event(), []
    queues.submit("stuck", lambda: hang.wait(5))
    for i in range(50):
        queues.submit(f"k{i}", lambda i=i: done.append(i))
    deadline = time.monotonic() + 5
    while len(done) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(done) == list(range(50))
    hang.set()
    queues.join(5)


def test_a_failing_task_does_not_stop_its_queue():
    queues = SerialQueues("test")
    done = []
    queues.submit("a", lambda: 1 / 0)
    queues.submit("a", lambda: done.append("after"))
    queues.join(5)
    assert done == ["after"]


def test_least_loaded_prefers_fewest_channels_then_lowest_id():
    p = PassState(specs={}, load={3: 1, 5: 0, 4: 0})
    assert p.least_loaded() == 4
    p.moved(None, 4)
    assert p.least_loaded() == 5
    assert p.least_loaded(exclude=5) == 3  # tie between 3 and 4 goes to the lower id
    p.moved(3, 5)
    assert p.load == {3: 0, 5: 1, 4: 1}


def test_least_loaded_falls_back_to_the_excluded_node_when_it_is_alone():
    assert PassState(specs={}, load={7: 3}).least_loaded(exclude=7) == 7
    assert PassState(specs={}, load={}).least_loaded() is None


def test_only_known_undropped_channels_are_live():
    p = PassState(specs={"a": ChannelSpec("a", 1), "b": ChannelSpec("b", 1, dropped=True)}, load={})
    assert p.live("a") and not p.live("b") and not p.live("unknown")
