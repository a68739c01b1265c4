"""Spark jobs of Python tasks, as the driver runs them (runs on the driver): a list of tasks in a
scheduler pool and job group of their own, and telling a failed job from a stopped Spark."""

from __future__ import annotations

import os
from collections.abc import Callable

from pyspark import SparkContext


def run_tasks(sc: SparkContext, tasks: list, run: Callable, *, group: str, pool: str, description: str,
              slices: int | None = None) -> list:
    """``run`` over ``tasks`` on executors (``slices`` Spark tasks, one per item by default), in the
    scheduler pool ``pool`` (work beside the pipeline's cycles, which keep their share of the
    cores) and the job group ``group`` (cancelled together); their results, in order."""
    sc.setLocalProperty("spark.scheduler.pool", pool)
    sc.setJobGroup(group, description, interruptOnCancel=True)
    return sc.parallelize(tasks, slices or len(tasks)).map(run).collect()


def spark_stopped(sc: SparkContext) -> bool:
    """Whether the JVM's SparkContext is stopped or stopping (runs on the driver).

    When the JVM stops on its own (its shutdown hooks stop the SparkContext, kill the Python
    workers and delete Spark's temporary directories), PySpark's context does not know, and
    has no public call that asks; the JVM's ``SparkContext.isStopped`` does. A JVM that no
    longer answers counts as stopped.
    """
    try:
        return bool(sc._jsc.sc().isStopped())
    except Exception:  # noqa: BLE001 - the gateway is gone: so is Spark
        return True


def local_dir(sc: SparkContext) -> str:
    """Spark's local directory on the driver: the first of ``SPARK_LOCAL_DIRS``, else of
    ``spark.local.dir``, else ``java.io.tmpdir``. PySpark's ``parallelize`` serializes each job's
    tasks to a file in Spark's own directory under it before the JVM reads them, so a full one
    fails every job. Runs on the driver."""
    try:
        utils = getattr(sc._jvm, "org.apache.spark.util.Utils")
        return os.path.dirname(str(utils.getLocalDir(sc._jsc.sc().conf())))   # its spark-<uuid> directory's
    except Exception:  # noqa: BLE001 - only for the words of a failure
        return "spark.local.dir"
