"""The DataNode's SparkContext.

A DataNode runs RDD jobs only (a cycle's tasks, delete marking, compaction, Milvus imports), so it
starts a SparkContext and no SparkSession: the session's JVM side (its catalog, SQL conf and
extensions) costs 1.3 s of start-up on this machine and nothing on the node uses it
(docs/benchmarks.md, "Start-up"). Spark SQL over the tables is ``lake``'s, in a process of its own.
"""

from __future__ import annotations

import logging
import threading

from pyspark import SparkConf, SparkContext

from ..pipeline.warmup import warm_up_in_background
from ..settings import Settings

log = logging.getLogger(__name__)
SPARK_STOP_TIMEOUT = 30.0


def spark_context(spark_conf: dict[str, str], settings: Settings, app_name: str = "deltanode-datanode") -> SparkContext:
    """A context with the conf's spark.* keys (spark-submit passes them too), its Python workers
    warming up beside the node's start (``pipeline.warmup``)."""
    conf = SparkConf().setAppName(app_name)
    for key, value in spark_conf.items():
        conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("WARN")
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
