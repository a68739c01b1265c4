"""The DataNode's SparkContext.

A DataNode runs RDD jobs only (a cycle's tasks, delete marking, compaction, Milvus imports), so it
starts a SparkContext and no SparkSession: the session's JVM side (its catalog, SQL conf and
extensions) costs 1.3 s of start-up on this machine and nothing on the node uses it
(docs/benchmarks.md, "Start-up"). Spark SQL over the tables is ``lake``'s, in a process of its own.

The context starts on a thread of its own (``start_spark_context``): its JVM side (the gateway's
launch, or under spark-submit the context's own start) mostly waits, and Python's imports of
the node's modules (pyarrow, deltalake: ~1 s) run meanwhile.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from pyspark import SparkConf, SparkContext

from ..config.jvm_options import launcher_options

if TYPE_CHECKING:
    from ..config.settings import Settings


log = logging.getLogger(__name__)
SPARK_STOP_TIMEOUT = 30.0


def start_spark_context(spark_conf: dict[str, str], app_name: str = "deltanode-datanode") -> Future[SparkContext]:
    """A context with the conf's spark.* keys (spark-submit passes them too), made on a thread of
    its own. Made off the main thread, pyspark leaves SIGINT to the node's own handler. When pyspark
    launches the JVM itself (not under spark-submit), its launcher gets ``config.jvm_options.launcher_options``."""
    started: Future[SparkContext] = Future()
    os.environ.setdefault("SPARK_LAUNCHER_OPTS", launcher_options())

    def make() -> None:
        try:
            conf = SparkConf().setAppName(app_name).setAll(list(spark_conf.items()))
            sc = SparkContext.getOrCreate(conf)
            sc.setLogLevel("WARN")
            started.set_result(sc)
        except BaseException as e:  # noqa: BLE001 - the caller's result() raises it
            started.set_exception(e)

    threading.Thread(target=make, name="spark-start", daemon=True).start()
    return started


def spark_context(started: Future[SparkContext], settings: Settings) -> SparkContext:
    """The context ``start_spark_context`` made, its Python workers warming up beside the node's
    start (``pipeline.warmup``)."""
    # Imported here: the node's modules load beside the context's start (``datanode.run``).
    from ..pipeline.warmup import warm_up_in_background

    sc = started.result()
    if settings.node.warmup:
        log.info("warming up Spark's Python workers (datanode.warmup)")
        warm_up_in_background(sc, settings.pipeline.limits.splits)
    return sc


def stop_spark(sc: SparkContext, timeout: float = SPARK_STOP_TIMEOUT) -> bool:
    """Stop the context; False when it did not stop within ``timeout`` seconds.

    Seen: with its JVM already killed (a SIGTERM to the whole process tree), ``SparkContext.stop``
    waited forever for pyspark's accumulator server, and the DataNode's driver outlived the rest.
    """
    stopper = threading.Thread(target=sc.stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(timeout)
    return not stopper.is_alive()
