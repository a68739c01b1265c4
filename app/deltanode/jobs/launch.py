"""The one way the driver runs a Spark job (runs on the driver): specs pickled, the job in its
kind's job group and scheduler pool, set the same way for every job on the launching thread,
results unpickled on that thread, cancelled by group, and a stopped Spark told from a failed job
(``SparkStopped``)."""

from __future__ import annotations

import functools
import logging
import os
import pickle
import re
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from pyspark import SparkContext

from ..failure.causes import out_of_space
from ..failure.errors import DeltaNodeError
from ..failure.kinds import FailureKind
from .contract import JobGroup, JobKind, Outcome, run_pickled

log = logging.getLogger(__name__)
S = TypeVar("S")
R = TypeVar("R")
_last_job_end = time.monotonic()   # when this driver's last job ended (``idle_seconds``)


class SparkStopped(DeltaNodeError):
    """Spark stopped under a running job: spark-submit's JVM is exiting (a SIGTERM sent to the
    ``java`` process rather than to ``spark-submit.sh``, or the JVM's own failure). Nothing is
    wrong with what the job was for: the pipeline ends without failing its vchannels, and what it
    did not commit is read again at the next start."""

    kind = FailureKind.SPARK_STOPPED


def launch(sc: SparkContext, kind: JobKind[S, R], specs: Sequence[S], *, description: str,
           slices: int | None = None) -> list[R]:
    """``kind.run`` over ``specs`` on executors as one Spark job (``slices`` Spark tasks, one per
    spec by default): their results, in order. A failed job raises what Spark raised, for the
    caller to abort; ``SparkStopped`` when Spark itself stopped."""
    global _last_job_end
    if not specs:
        return []
    sc.setLocalProperty("spark.scheduler.pool", kind.pool)
    sc.setJobGroup(kind.group, f"{kind.name}: {description}", interruptOnCancel=True)
    pickled = [pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL) for spec in specs]
    try:
        out = sc.parallelize(pickled, slices or len(pickled)).map(functools.partial(run_pickled, kind.run)).collect()
    except Exception as e:
        # Asked first, whatever the caller does next: a SIGTERM that reaches the JVM beside the
        # driver's own stop has Spark's shutdown hook stop the context under the job.
        if spark_stopped(sc):
            raise SparkStopped(summarize_error(str(e))) from e
        raise
    finally:
        _last_job_end = time.monotonic()
    return [pickle.loads(result) for result in out]


def launch_isolated(sc: SparkContext, kind: JobKind[S, R], specs: Sequence[S], *, description: str,
                    stopping: Callable[[], bool]) -> Outcome[S, R]:
    """``launch``, then, if the job failed, each spec again as a job of its own, so a spec that
    breaks its task (a worker crash) fails alone: the results to commit and the specs to abort.
    Not when ``stopping()`` says the caller is stopping (the failure is raised), nor when Spark
    stopped (``SparkStopped``)."""
    try:
        return Outcome(results=launch(sc, kind, specs, description=description), failed=[])
    except SparkStopped:
        raise
    except Exception as e:  # isolated below
        if stopping():
            raise
        # a full local directory fails every job alike: what the specs were for says it, once
        log.log(logging.DEBUG if out_of_space(e) else logging.WARNING,
                "%s: its Spark job failed (%s); running its %d task(s) one by one", kind.name,
                str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__, len(specs))
    results: list[R] = []
    failed: list[tuple[S, Exception]] = []
    for spec in specs:
        try:
            results += launch(sc, kind, [spec], description=f"{description} (one task)")
        except SparkStopped:
            raise
        except Exception as e:  # noqa: BLE001 - this spec's task fails, alone
            failed.append((spec, e))
    return Outcome(results=results, failed=failed)


def idle_seconds() -> float:
    """Seconds since this driver's last Spark job ended (since the module loaded, before any)."""
    return time.monotonic() - _last_job_end


def cancel(sc: SparkContext, group: JobGroup) -> None:
    """Cancel the group's running jobs (their tasks interrupted)."""
    sc.cancelJobGroup(group)


def spark_stopped(sc: SparkContext) -> bool:
    """Whether the JVM's SparkContext is stopped or stopping.

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
    fails every job (what a job's failure says when it is out of space)."""
    try:
        utils = getattr(sc._jvm, "org.apache.spark.util.Utils")
        return os.path.dirname(str(utils.getLocalDir(sc._jsc.sc().conf())))   # its spark-<uuid> directory's
    except Exception:  # noqa: BLE001 - only for the words of a failure
        return "spark.local.dir"


_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", re.MULTILINE)
_JVM_PREFIXES = ("org.", "java.", "scala.", "py4j.", "pyspark.errors")


def summarize_error(text: str) -> str:
    """The Python exception behind a failed Spark job, not the JVM stack around it."""
    found = [m for m in _PY_ERROR.finditer(text) if not m.group(1).startswith(_JVM_PREFIXES)]
    line = f"{found[-1].group(1)}: {found[-1].group(2)}" if found else (text.strip().splitlines() or ["?"])[0]
    return line[:500]
