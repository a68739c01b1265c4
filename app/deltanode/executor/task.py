"""A task of a cycle: read its offset ranges once, route every vchannel's messages, write binlogs.

``run_task`` runs on executors, in one Python worker: the payloads never leave it (no row
of message data crosses the JVM; the driver gets file lists and counts). A task's memory is
bounded by the broker client's prefetch plus one chunk, whatever its ranges' size.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time

import pyarrow as pa

from ..faults import crash_point
from ..mq.broker import BrokerError, Gap, OffsetRange
from ..records import TaskOutput, TaskSpec
from ..wire.schema import CollectionLayout
from .dispatch import PchannelDispatcher
from .route import VchannelRouter


def run_task(spec: TaskSpec) -> TaskOutput:
    """Runs on an executor."""
    started, cpu_started = time.monotonic(), time.process_time()
    crash_point("before_binlog_write")
    storage = spec.storage
    layouts = {cid: CollectionLayout.from_bytes(raw) for cid, raw in spec.schemas.items()}
    dispatchers = []
    for piece in spec.pieces:
        routers = [VchannelRouter(ctx, layouts[ctx.collection_id], storage, max(piece.first, ctx.start), piece.end)
                   for ctx in (spec.contexts[v] for v in piece.members) if ctx.start < piece.end]
        dispatchers.append(PchannelDispatcher(piece, routers))
    ranges = [OffsetRange(p.pchannel, p.partition, p.first, p.end) for p in spec.pieces]
    for i, item in spec.broker.read_ranges(ranges):
        if isinstance(item, BrokerError):
            dispatchers[i].broker_failed(str(item))
            continue
        if isinstance(item, Gap):
            dispatchers[i].next_position = item.position
            continue
        on_message = dispatchers[i].on_message
        for offset, value in item:
            on_message(offset, value)
        del item  # not kept alive through release_task_memory below
    portions, reads = [], []
    for d in dispatchers:
        done, read = d.finish()
        portions += done
        reads.append(read)
    release_task_memory()
    return TaskOutput(tuple(portions), tuple(reads), time.monotonic() - started, time.process_time() - cpu_started)


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
