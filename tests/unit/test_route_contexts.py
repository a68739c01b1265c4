"""A task's routing contexts travel as columns and come back whole on the executor."""

import pickle

from deltanode.executor.contexts import TaskContexts
from deltanode.records import ReadRange, RouteContext, RouteContexts

PLAIN = RouteContext("p_1v0", 1, "c", "p", 0, 10, tick=4)
SEEKING = RouteContext("p_2v0", 2, "d", "p", 0, 7, seek_ts=5, dropped_segments=frozenset({3}),
                       dropped_partitions=frozenset({4}), collection_dropped=True, delete_watermark=9,
                       quarantine_watermark=8, flush_ts=6, sealed={3: 11})


def test_contexts_come_back_whole_from_their_pickled_columns() -> None:
    task = TaskContexts(pickle.loads(pickle.dumps(RouteContexts.of([PLAIN, SEEKING]))))
    piece = ReadRange("p", 0, 0, 20, (PLAIN.vchannel, SEEKING.vchannel))
    assert [task.context(c.vchannel, piece) for c in (PLAIN, SEEKING)] == [PLAIN, SEEKING]
    assert task.start(SEEKING.vchannel) == 7 and task.collection(PLAIN.vchannel) == (1, "c")
    assert task.ticked == {SEEKING.vchannel}   # its router needs every TimeTick


def test_a_task_without_vchannels_has_empty_columns() -> None:
    assert TaskContexts(RouteContexts.from_rows([])).ticked == frozenset()
