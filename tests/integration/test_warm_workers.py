"""Spark's Python workers kept warm while the driver runs no job (``pipeline.warmup.keep_warm``).

Spark stops an executor's idle Python workers after a minute without a worker taken or given back,
fixed in ``PythonWorkerFactory``; each stopped worker's daemon prints a ``BrokenPipeError``
traceback, and the next cycle starts its workers afresh. A DataNode with nothing to read runs the
warm-up job again before that minute, and a busy one never does. The minute itself is Spark's, so
this test runs the policy on shorter clocks on the suite's Spark session.
"""

from __future__ import annotations

import threading
import time

import pytest

from deltanode.jobs.contract import JobGroup, JobKind
from deltanode.jobs.launch import idle_seconds, launch
from deltanode.pipeline.warmup import keep_warm

from .support import wait_until

pytestmark = pytest.mark.spark
BUSY = JobKind(name="deltanode test: a cycle's stand-in", run=abs, group=JobGroup.PIPELINE)


def test_an_idle_driver_warms_its_workers_again_and_a_busy_one_does_not(spark):
    sc = spark.sparkContext
    tracker = sc.statusTracker()

    def warm_ups() -> int:
        return len(tracker.getJobIdsForGroup(JobGroup.WARM_UP))

    assert launch(sc, BUSY, [-1], description="busy") == [1]   # the workers up before the clock starts
    before = warm_ups()
    stop = threading.Event()
    keeper = threading.Thread(target=keep_warm, args=(sc,), kwargs=dict(after=2.0, look=0.1, stop=stop), daemon=True)
    keeper.start()
    try:
        busy_until = time.monotonic() + 5
        while time.monotonic() < busy_until:   # a job every half second: never 2 s without one
            assert launch(sc, BUSY, [-1], description="busy") == [1]
            time.sleep(0.5)
        assert warm_ups() == before
        assert idle_seconds() < 2.0
        wait_until(lambda: warm_ups() >= before + 2, 30, "two warm-ups of the idle driver")
    finally:
        stop.set()
        keeper.join(15)
    assert not keeper.is_alive()
