"""A task of a cycle: read its offset ranges once, route every vchannel's messages, write binlogs.

``run_task`` runs on executors, in one Python worker: the payloads never leave it (no row
of message data crosses the JVM; the driver gets file lists and counts). A task's memory is
bounded by the broker client's prefetch plus one chunk, whatever its ranges' size.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Iterable
from typing import Generic, TypeVar

import pyarrow as pa

from ..failure.crash_points import crash_point
from ..mq.broker import BrokerError, BrokerUnreachable, Gap, OffsetRange
from ..records import RouteContext, TaskOutput, TaskSpec
from ..wire.schema import CollectionLayout
from . import schema_change
from .contexts import TaskContexts
from .dispatch import PchannelDispatcher
from .route import VchannelRouter
from .worker_gc import collector_for_task

T = TypeVar("T")


def run_task(spec: TaskSpec) -> TaskOutput:
    """Runs on an executor (the cycle's job kind: ``pipeline.cycle.CYCLE``), the cyclic garbage
    collector set as ``worker_gc`` says."""
    with collector_for_task():
        return _run(spec)


def _run(spec: TaskSpec) -> TaskOutput:
    started, cpu_started = time.monotonic(), time.process_time()
    crash_point("before_binlog_write")
    storage = spec.storage

    def router(ctx: RouteContext, first: int, end: int) -> VchannelRouter:
        schema = spec.schemas[ctx.collection_id]
        return VchannelRouter(ctx, CollectionLayout.from_bytes(schema), storage, first, end,
                              schema_version=schema_change.version_of(schema))

    contexts = TaskContexts(spec.contexts)
    dispatchers = [PchannelDispatcher(piece, contexts, router, where=storage.root) for piece in spec.pieces]
    ranges = [OffsetRange(p.pchannel, p.partition, p.first, p.end) for p in spec.pieces]
    reads = _Waited(spec.broker.read_ranges(ranges))
    for i, item in reads:
        if isinstance(item, BrokerError):
            dispatchers[i].broker_failed(str(item), unanswered=isinstance(item, BrokerUnreachable))
            continue
        if isinstance(item, Gap):
            dispatchers[i].next_position = item.position
            continue
        on_message = dispatchers[i].on_message
        for offset, value, props in item:
            on_message(offset, value, props)
        del item  # not kept alive through release_task_memory below
    portions, stats = [], []
    for d in dispatchers:
        done, read = d.finish()
        portions += done
        stats.append(read)
    release_task_memory()
    return TaskOutput(tuple(portions), tuple(stats), time.monotonic() - started, time.process_time() - cpu_started,
                      reads.seconds)


class _Waited(Generic[T]):
    """An iterator's items, and the wall clock spent waiting for them (``seconds``)."""

    def __init__(self, items: Iterable[T]) -> None:
        self._items = iter(items)
        self.seconds = 0.0

    def __iter__(self) -> _Waited[T]:
        return self

    def __next__(self) -> T:
        started = time.monotonic()
        try:
            return next(self._items)
        finally:
            self.seconds += time.monotonic() - started


_libc_name = ctypes.util.find_library("c")
_malloc_trim = getattr(ctypes.CDLL(_libc_name), "malloc_trim", None) if _libc_name else None


def release_task_memory() -> None:
    """Give a finished task's memory back to the OS.

    Spark reuses Python workers across tasks, and a task passes up to its share of the cycle's
    byte cap through them (message bytes from malloc, Arrow buffers from Arrow's pool). Both
    allocators keep freed memory by default, so without this every worker would stay at its
    largest task's size.
    """
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:  # glibc only
        _malloc_trim(0)
