"""The pipeline's Spark jobs: their job group, and telling a failed job from a stopped Spark."""

from __future__ import annotations

from pyspark import SparkContext

JOB_GROUP = "deltanode-pipeline"   # cancelled together when the pipeline stops


class SparkStopped(Exception):
    """Spark stopped under a running job: spark-submit's JVM is exiting (a SIGTERM sent to the
    ``java`` process rather than to ``spark-submit.sh``, or the JVM's own failure). Nothing is
    wrong with the vchannels: the pipeline ends without failing them, and what it did not
    commit is read again at the next start."""


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
