"""Warm Spark's Python workers before the first vchannel arrives.

A cycle's first Spark job in a fresh driver is mostly Python start-up: Spark starts its Python
worker daemon, which imports pyspark and forks workers, and each worker imports the task's
modules (protobuf, the Kafka client, parquet, deltalake). A DataNode runs one throw-away job
through the same path at start, so the workers are up when a channel is assigned, and a
failover does not pay for them.
"""

from __future__ import annotations

import time

from pyspark.sql import SparkSession


def _load_task_modules(_: int) -> int:
    """Runs on executors: import what ``run_task`` and delete marking import, in the worker that will run them."""
    return 1


def warm_up(spark: SparkSession, splits: int = 2) -> float:
    """Run one job of ``splits`` tasks through fresh Python workers; returns the seconds it took."""
    t0 = time.monotonic()
    spark.sparkContext.parallelize(range(splits), splits).map(_load_task_modules).collect()
    return time.monotonic() - t0
