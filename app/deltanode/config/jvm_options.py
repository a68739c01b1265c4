"""JVM options DeltaNode gives Spark unless the conf sets the key (``spark_defaults``).

C1 only (``-XX:TieredStopAtLevel=1``): the JVMs only schedule tasks and move small records (a
task's payloads stay in its Python worker), so the C2 compiler's faster code is not worth its
compile time: with C2 the driver JVM starts slower, moves a backlog no faster and takes about
twice the CPU at a steady load (docs/platform.md, "The driver's JVM").

Class data sharing: ``build/bootstrap.sh`` records the classes a DataNode's driver JVM loads
(SparkSession and the warm-up query, ``build/cds_archive.py``) in an archive inside the venv. A
JVM started with it maps those classes instead of loading and verifying them again, which
takes seconds off a driver's start (docs/platform.md, "The driver's JVM"). Only the driver uses it
(executors on other hosts have no such file); a Java or Spark other than the one it was made
with prints a warning and starts without it.

spark-submit's launcher (the short JVM ``bin/spark-class`` runs to build the driver's command
line, before the driver's JVM starts) gets C1 only and an archive of its own through
``SPARK_LAUNCHER_OPTS`` (``launcher_options``), which brings a DataNode's SparkContext a few
tenths of a second sooner (docs/platform.md). Its stdout is the command line spark-class runs,
so the JVM's own warnings (an archive made by another Java) go to stderr.

Both go in ``defaultJavaOptions``, which Spark puts before ``extraJavaOptions``: a conf can add
its own options or override these.

Unix domain sockets between each JVM and its Python processes
(``spark.python.unix.domain.socket.enabled``, Spark 4.1+): over local TCP a task's Python worker
waits tens of milliseconds after the task's launch before it begins, more than a trivial job
takes over a Unix socket (docs/platform.md). The pipeline runs a job every cycle, so that wait
would be a part of every insert's latency.
"""

from __future__ import annotations

import sys
from pathlib import Path

C1_ONLY = "-XX:TieredStopAtLevel=1"


def cds_archive() -> Path:
    """Where ``build/bootstrap.sh`` puts the class archive: in the venv of this interpreter."""
    return Path(sys.prefix) / "share" / "deltanode" / "spark-cds.jsa"


def launcher_archive() -> Path:
    """The class archive of spark-submit's launcher JVM, beside ``cds_archive``; ``spark-submit.sh``
    names the same file."""
    return cds_archive().with_name("spark-launcher-cds.jsa")


# spark-submit's launcher JVM: C1 only, its own log lines on stderr (its stdout is the command
# spark-class runs). spark-class splits SPARK_LAUNCHER_OPTS on spaces and takes no quotes.
LAUNCHER_BASE = f"{C1_ONLY} -Xlog:disable -Xlog:all=warning:stderr"


def launcher_options() -> str:
    """``SPARK_LAUNCHER_OPTS`` for spark-submit's launcher JVM: ``LAUNCHER_BASE``, and the archive
    when bootstrap made one (``build/cds_archive.py`` records it with the same base)."""
    archive = launcher_archive()
    return f"{LAUNCHER_BASE} -XX:SharedArchiveFile={archive}" if archive.is_file() else LAUNCHER_BASE


def spark_defaults() -> dict[str, str]:
    """spark.* defaults for a DataNode: local[2], C1 only, the class archive when there is one, no
    console progress bar (the pipeline runs a job every cycle; it logs its own progress), the
    FAIR scheduler (compaction jobs run in a pool of their own and never hold every core while a
    cycle's tasks wait: FIFO gives all free cores to the job submitted first), and Unix domain
    sockets to the Python processes."""
    driver = C1_ONLY
    archive = cds_archive()
    if archive.is_file():
        driver += f' -XX:SharedArchiveFile="{archive}"'
    return {"spark.master": "local[2]", "spark.driver.defaultJavaOptions": driver,
            "spark.executor.defaultJavaOptions": C1_ONLY, "spark.ui.showConsoleProgress": "false",
            "spark.scheduler.mode": "FAIR", "spark.python.unix.domain.socket.enabled": "true"}
