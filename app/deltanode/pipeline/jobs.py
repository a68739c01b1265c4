"""The pipeline's Spark jobs: their job group, and the error that ends the pipeline when Spark stops
(``spark_jobs.spark_stopped`` tells it from a failed job)."""

from __future__ import annotations

JOB_GROUP = "deltanode-pipeline"   # cancelled together when the pipeline stops


class SparkStopped(Exception):
    """Spark stopped under a running job: spark-submit's JVM is exiting (a SIGTERM sent to the
    ``java`` process rather than to ``spark-submit.sh``, or the JVM's own failure). Nothing is
    wrong with the vchannels: the pipeline ends without failing them, and what it did not
    commit is read again at the next start."""
