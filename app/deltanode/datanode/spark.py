"""The DataNode's SparkSession."""

from __future__ import annotations

from pyspark.sql import SparkSession

from ..config import Conf
from ..flowgraph.launch import prepare_spark


def spark_session(conf: Conf, app_name: str = "deltanode-datanode") -> SparkSession:
    """A session with the conf's spark.* keys (spark-submit passes them too), ready for flowgraphs."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.spark_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    prepare_spark(spark)
    return spark
