"""The DataNode's SparkSession."""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from ..config import Conf
from ..pipeline.warmup import warm_up

log = logging.getLogger(__name__)


def spark_session(conf: Conf, app_name: str = "deltanode-datanode") -> SparkSession:
    """A session with the conf's spark.* keys (spark-submit passes them too), warmed up."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.spark_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if conf.get("datanode.warmup"):
        log.info("warming up Spark's Python workers (datanode.warmup)")
        try:
            log.info("warm-up done in %.1f s", warm_up(spark, conf.get("datanode.read.splits")))
        except Exception as e:  # noqa: BLE001 - an optimisation: the pipeline reports real failures
            log.warning("warm-up failed, going on without it: %s",
                        str(e).splitlines()[0] if str(e) else type(e).__name__)
    return spark
