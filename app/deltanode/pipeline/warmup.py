"""Warm Spark's Python workers before the first vchannel arrives.

A cycle's first Spark job in a fresh driver is mostly Python start-up: Spark starts its Python
worker daemon, which imports pyspark and forks workers, and each worker imports the task's
modules (protobuf, the Kafka and Pulsar clients, pyarrow, numpy) and pays its first-call costs
(pyarrow asks pandas how to convert a numpy array the first time it sees one). A DataNode runs one
throw-away job through the same path at start, a task per core Spark offers (so every worker
that a cycle's tasks run on takes one): each task imports what a cycle's task and a
delete-marking task import and decodes a small InsertRequest, so the workers are up and warm
when a channel is assigned, and a failover does not pay for them. The log line names how many
workers it warmed. What stays cold is each collection's own first pass in a worker (its layout,
schema and file formats, made once per worker), which no warm-up can know in advance.

The job runs beside the node's start (``warm_up_in_background``): registering in etcd, loading
vchannels' state from Delta and planning the first cycle need no worker, and a cycle's job that
comes before the warm-up's end waits for the same workers it would have started itself.

Then the workers are kept warm: Spark stops every idle Python worker of an executor after a minute
without a worker taken or given back (``PythonWorkerFactory``: fixed, not a setting, looked at every
10 s). A node with no channel, or whose channels are all silent, would lose its warm workers, each
stopped worker's daemon would print a ``BrokenPipeError`` traceback on the console, and the next
cycle would pay the start-up again. So after ``KEEP_WARM_AFTER`` seconds without a job the warm-up
runs again (``keep_warm``), a job of a few milliseconds.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark import SparkContext

from ..jobs.contract import JobGroup, JobKind
from ..jobs.launch import SparkStopped, idle_seconds, launch, spark_stopped

log = logging.getLogger(__name__)
# Below Spark's minute, with the 10 s it takes to look and this module's own look every few seconds.
KEEP_WARM_AFTER = 40.0
_KEEP_WARM_LOOK = 5.0

WARM_SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                          {"name": "vec", "data_type": "FloatVector", "dim": 4},
                          {"name": "title", "data_type": "VarChar", "max_length": 16}]}


@dataclass(frozen=True, kw_only=True)
class WarmedWorker:
    """A Python worker the warm-up ran in: where it runs and the rows its decode gave back."""

    host: str
    pid: int
    rows: int


@dataclass(frozen=True, kw_only=True)
class WarmUp:
    """What ``warm_up`` did: its seconds and the distinct Python workers it ran in."""

    seconds: float
    workers: int


def _load_task_modules(_task: int) -> WarmedWorker:
    """Runs on executors: import what a cycle's task and delete marking import, and decode a
    small InsertRequest, in the worker that will run them."""
    from ..executor import decode, delete_mark_task, task  # noqa: F401 - imported for the worker's sake
    from ..wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
    from ..wire.schema import CollectionLayout, schema_from_json

    layout = CollectionLayout.from_proto(schema_from_json(WARM_SCHEMA, "warm_up"))
    rows = 2
    req = msg_pb2.InsertRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName="warm_up",
                                version=msg_pb2.ColumnBased, num_rows=rows, timestamps=[1, 2], rowIDs=[1, 2])
    pk, vec, title = layout.fields
    req.fields_data.add(type=schema_pb2.DataType.Int64, field_name=pk.name,
                        field_id=pk.field_id).scalars.long_data.data.extend([1, 2])
    v = req.fields_data.add(type=schema_pb2.DataType.FloatVector, field_name=vec.name, field_id=vec.field_id).vectors
    v.dim = 4
    v.float_vector.data.extend([0.0] * 8)
    req.fields_data.add(type=schema_pb2.DataType.VarChar, field_name=title.name,
                        field_id=title.field_id).scalars.string_data.data.extend(["a", "b"])
    _columns, n = decode.insert_columns(layout, msg_pb2.InsertRequest.FromString(req.SerializeToString()))
    if n != rows:
        raise RuntimeError(f"warm-up: decoded {n} rows of a {rows}-row InsertRequest")
    return WarmedWorker(host=socket.gethostname(), pid=os.getpid(), rows=n)


# Each task imports and decodes as a cycle's task would (``_load_task_modules``): a task number -> its worker.
WARM_UP = JobKind(name="deltanode warm-up", run=_load_task_modules, group=JobGroup.WARM_UP)


def warm_up(sc: SparkContext, splits: int = 2) -> WarmUp:
    """Run one job through fresh Python workers: ``splits`` tasks, or as many as Spark's default
    parallelism (its cores) when that is more."""
    t0 = time.monotonic()
    tasks = max(splits, sc.defaultParallelism)
    workers = launch(sc, WARM_UP, list(range(tasks)), description=f"{tasks} task(s)")
    return WarmUp(seconds=time.monotonic() - t0, workers=len({(w.host, w.pid) for w in workers}))


def warm_up_in_background(sc: SparkContext, splits: int = 2,
                          done: Callable[[float | None], None] | None = None) -> threading.Thread:
    """``warm_up`` on a thread of its own, logged; ``done`` gets its seconds (None: it failed)."""

    def run() -> None:
        seconds: float | None = None
        try:
            result = warm_up(sc, splits)
            seconds = result.seconds
            log.info("warm-up done in %.1f s: %d Python worker(s) imported a task's modules and decoded an "
                     "InsertRequest", seconds, result.workers)
        except SparkStopped:
            log.info("warm-up ended: Spark stopped (the node is stopping)")
        except Exception as e:  # noqa: BLE001 - an optimisation: the pipeline reports real failures
            log.warning("warm-up failed, going on without it: %s",
                        str(e).splitlines()[0] if str(e) else type(e).__name__)
        if done is not None:
            done(seconds)
        if seconds is not None:
            keep_warm(sc, splits)

    thread = threading.Thread(target=run, name="deltanode-warm-up", daemon=True)
    thread.start()
    return thread


def keep_warm(sc: SparkContext, splits: int = 2, *, after: float = KEEP_WARM_AFTER, look: float = _KEEP_WARM_LOOK,
              stop: threading.Event | None = None) -> None:
    """Run ``warm_up`` whenever the driver has run no job for ``after`` seconds, until Spark stops
    or ``stop`` is set (on the calling thread). A failed warm-up is logged at DEBUG and tried again
    ``after`` seconds later: the cycles report real failures."""
    while not (stop is not None and stop.is_set()) and not spark_stopped(sc):
        if idle_seconds() >= after:
            try:
                warm_up(sc, splits)
            except SparkStopped:
                return
            except Exception as e:  # noqa: BLE001 - an optimisation, as the first warm-up
                log.debug("keeping the Python workers warm failed: %s", e)
        time.sleep(look)
