"""The DataNode's SparkSession."""

from __future__ import annotations

import logging
import threading

from pyspark.sql import SparkSession

from ..pipeline.warmup import warm_up
from ..settings import Settings

log = logging.getLogger(__name__)
SPARK_STOP_TIMEOUT = 30.0


def spark_session(spark_conf: dict[str, str], settings: Settings, app_name: str = "deltanode-datanode") -> SparkSession:
    """A session with the conf's spark.* keys (spark-submit passes them too), warmed up."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if settings.node.warmup:
        log.info("warming up Spark's Python workers (datanode.warmup)")
        try:
            log.info("warm-up done in %.1f s", warm_up(spark, settings.pipeline.limits.splits))
        except Exception as e:  # noqa: BLE001 - an optimisation: the pipeline reports real failures
            log.warning("warm-up failed, going on without it: %s",
                        str(e).splitlines()[0] if str(e) else type(e).__name__)
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
