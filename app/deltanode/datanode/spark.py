"""The DataNode's SparkSession."""

from __future__ import annotations

import logging
import threading

from pyspark.sql import SparkSession

from ..pipeline.warmup import warm_up_in_background
from ..settings import Settings

log = logging.getLogger(__name__)
SPARK_STOP_TIMEOUT = 30.0


def spark_session(spark_conf: dict[str, str], settings: Settings, app_name: str = "deltanode-datanode") -> SparkSession:
    """A session with the conf's spark.* keys (spark-submit passes them too), its Python workers
    warming up beside the node's start (``pipeline.warmup``)."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if settings.node.warmup:
        log.info("warming up Spark's Python workers (datanode.warmup)")
        warm_up_in_background(spark, settings.pipeline.limits.splits)
    return spark


def stop_spark(spark: SparkSession, timeout: float = SPARK_STOP_TIMEOUT) -> bool:
    """Stop the session; False when it did not stop within ``timeout`` seconds.

    Seen: with its JVM already killed (a SIGTERM to the whole process tree), ``SparkSession.stop``
    waited forever for pyspark's accumulator server, and the DataNode's driver outlived the rest.
    """
    stopper = threading.Thread(target=spark.stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(timeout)
    return not stopper.is_alive()
