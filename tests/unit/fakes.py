"""Small fakes of the pipeline's external boundaries, shared by the unit tests of its driver stages.

Only what lies outside the driver is faked: the Spark job runner (``FakeSparkContext``: the
job's function runs here, on the driver, unless a test gives the job's result), etcd's ownership
fence (``FakeFence``), the broker's metadata client (``FakeBrokerMetadata``) and the executors
reading a broker (``TicksOnlyExecutors``). Delta tables, flowgraphs and the stages themselves are
the real ones (``tests/unit/vchannels.py``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deltanode.mq.broker import BrokerError
from deltanode.records import ReadStats, TaskOutput, TaskSpec


@dataclass
class SubmittedJob:
    """One job a stage ran: its group and description, the items and the slices asked for."""

    group: str
    description: str
    items: list
    slices: int
    pool: str | None = None

    @property
    def specs(self) -> list:
        """The items as the driver planned them (the launcher pickles them: ``jobs.launch``)."""
        return [pickle.loads(item) if isinstance(item, bytes) else item for item in self.items]


class _Rdd:
    def __init__(self, sc: FakeSparkContext, items: list, slices: int, fn: Callable | None = None) -> None:
        self._sc, self._items, self._slices, self._fn = sc, items, slices, fn

    def map(self, fn: Callable) -> _Rdd:
        return _Rdd(self._sc, self._items, self._slices, fn)

    def collect(self) -> list:
        return self._sc._run(self._items, self._slices, self._fn)


class _FakeJavaContext:
    """What ``jobs.launch.spark_stopped`` asks of the JVM's SparkContext."""

    def __init__(self, sc: FakeSparkContext) -> None:
        self._sc = sc

    def sc(self) -> _FakeJavaContext:
        return self

    def isStopped(self) -> bool:
        return self._sc.stopped


class FakeSparkContext:
    """The SparkContext calls the driver's launcher (``jobs.launch``) makes to run a job:
    ``setLocalProperty`` (the pool), ``setJobGroup``, ``parallelize(items, slices).map(fn).collect()``
    and ``cancelJobGroup``; ``stopped``: what the JVM answers when asked whether Spark stopped.

    A job runs ``fn`` over its items here, in order, unless ``executors`` is given (what the
    executors return for ``fn`` and one item: e.g. a broker's reads without a broker), or
    ``failure`` is set (the job raises it, as a failed Spark job does on the driver)."""

    def __init__(self, executors: Callable[[Callable, Any], Any] | None = None) -> None:
        self.executors = executors
        self.failure: Exception | None = None
        self.jobs: list[SubmittedJob] = []
        self.stopped = False
        self.cancelled: list[str] = []
        self._group = ("", "")
        self._pool: str | None = None
        self._jsc = _FakeJavaContext(self)

    def setLocalProperty(self, key: str, value: str | None) -> None:
        if key == "spark.scheduler.pool":
            self._pool = value

    def cancelJobGroup(self, group: str) -> None:
        self.cancelled.append(group)

    def setJobGroup(self, group: str, description: str, interruptOnCancel: bool = False) -> None:
        self._group = (group, description)

    def parallelize(self, items: list, slices: int | None = None) -> _Rdd:
        return _Rdd(self, list(items), slices or len(items))

    def _run(self, items: list, slices: int, fn: Callable | None) -> list:
        assert fn is not None, "a job without a function"
        self.jobs.append(SubmittedJob(self._group[0], self._group[1], items, slices, self._pool))
        if self.failure is not None:
            raise self.failure
        run = self.executors or (lambda f, item: f(item))
        return [run(fn, item) for item in items]


class FakeFence:
    """etcd's ownership check (``pipeline.vchannel_stops.Fence``): ``lost`` vchannels are no longer this
    node's; ``checked`` records each check's vchannels."""

    def __init__(self, lost: dict[str, str] | None = None, reachable: bool = True) -> None:
        self.lost = dict(lost or {})
        self.reachable = reachable
        self.checked: list[list[str]] = []

    def check(self, vchannels: list[str]) -> dict[str, str]:
        self.checked.append(list(vchannels))
        return {v: why for v, why in self.lost.items() if v in vchannels}


@dataclass
class FakeBrokerMetadata:
    """The broker's metadata client (``mq.broker.HighWatermarks``): each pchannel's high watermark
    and topic id; ``topic_error`` makes ``topic_id`` fail; ``asked`` records ``topic_id`` calls;
    ``planning``: called as a cycle asks the high watermarks (what happens meanwhile on the driver);
    ``answered``: pchannel -> its ``answered_since`` (0.0 when not named)."""

    high: int = 0
    topic_ids: dict[str, str] = field(default_factory=dict)
    topic_error: str | None = None
    asked: list[str] = field(default_factory=list)
    planning: Callable[[], None] | None = None
    answered: dict[str, float | None] = field(default_factory=dict)

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        if self.planning is not None:
            self.planning()
        return {key: self.high for key in keys}

    def topic_id(self, topic: str, timeout: float = 10.0) -> str:
        self.asked.append(topic)
        if self.topic_error is not None:
            raise BrokerError(self.topic_error)
        return self.topic_ids.get(topic, "")

    def answered_since(self, topic: str) -> float | None:
        return self.answered.get(topic, 0.0)

    def close(self) -> None:
        pass


class TicksOnlyExecutors:
    """The executors of a cycle's Spark job (``FakeSparkContext(executors=...)``) on a broker whose
    messages are all TimeTicks: each task reads its ranges in full, no vchannel has a message of
    its own, and a range's last message is a tick (ts ``tick_base`` plus its offset). ``during``:
    called in each task before it returns (a test's look at the driver while the job runs)."""

    def __init__(self, tick_base: int = 1000) -> None:
        self.tick_base = tick_base
        self.during: Callable[[], None] | None = None
        self.specs: list[TaskSpec] = []

    def __call__(self, fn: Callable, item: bytes) -> bytes:
        spec = pickle.loads(item)
        self.specs.append(spec)
        if self.during is not None:
            self.during()
        reads = tuple(ReadStats(pchannel=r.pchannel, partition=r.partition, first=r.first, end=r.end,
                                messages=r.end - r.first, bytes=64 * (r.end - r.first),
                                tick=self.tick_base + r.end - 1, tick_offset=r.end - 1) for r in spec.pieces)
        return pickle.dumps(TaskOutput(portions=(), reads=reads), protocol=pickle.HIGHEST_PROTOCOL)
