#!/usr/bin/env python3
"""Record the classes a DataNode's driver JVM loads in a class data sharing archive.

``build/cds_archive.py ARCHIVE``: starts a SparkSession as a DataNode does (local[2], C1 only)
with ``-XX:ArchiveClassesAtExit=ARCHIVE``, runs the DataNode's warm-up job, and stops; the JVM
writes the archive as it exits; spark-submit's launcher JVM writes its own beside it
(``config.jvm_options.launcher_archive``). ``build/bootstrap.sh`` runs this when the
archive is missing or was made for another Java or pyspark; ``deltanode.config.jvm_options`` says why.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

APP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "app")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="build/cds_archive.py", description=__doc__.split("\n\n")[0])
    p.add_argument("archive", help="the .jsa file to write")
    args = p.parse_args(argv)
    archive = os.path.abspath(args.archive)
    sys.path.insert(0, os.path.abspath(APP))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from deltanode.config.jvm_options import C1_ONLY, LAUNCHER_BASE, launcher_archive
    from deltanode.pipeline.warmup import warm_up

    launcher = launcher_archive()
    if launcher.exists():
        launcher.unlink()
    # No quotes in this variable (jvm.LAUNCHER_BASE), so no path with spaces either.
    os.environ["SPARK_LAUNCHER_OPTS"] = f"{LAUNCHER_BASE} -XX:ArchiveClassesAtExit={launcher}"
    t0 = time.monotonic()
    spark = SparkSession.builder.appName("deltanode-cds-archive").config(map={
        "spark.master": "local[2]", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.driver.defaultJavaOptions": f'{C1_ONLY} -XX:ArchiveClassesAtExit="{archive}"'}).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    warm_up(spark.sparkContext)
    jvm = spark.sparkContext._gateway.proc  # pyspark's spark-submit child
    spark.stop()
    jvm.stdin.close()  # the gateway exits at EOF on its stdin; the JVM writes the archive as it goes
    jvm.wait(timeout=120)
    if not os.path.isfile(archive):
        print(f"cds_archive: the JVM wrote no {archive}", file=sys.stderr)
        return 1
    if not launcher.is_file():   # the launcher starts without one
        print(f"cds_archive: spark-submit's launcher wrote no {launcher}", file=sys.stderr)
    print(f"cds_archive: {archive} ({os.path.getsize(archive) >> 20} MiB) in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
