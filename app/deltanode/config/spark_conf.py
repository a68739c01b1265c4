"""The Spark conf a subcommand starts Spark with (runs in the launcher and the driver): the conf's
spark.* keys, DeltaNode's JVM defaults, and the Delta jars, checked for a YARN master before any
JVM starts."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from .conf import Conf
from .jars import component_jars
from .jvm_options import spark_defaults
from .values import ConfError


def spark_options(command: str, conf: Conf) -> dict[str, str]:
    """The Spark conf of a subcommand: every spark.* key of the conf (after environment
    overrides), then ``jvm_options.spark_defaults()`` the conf leaves unset, spark.app.name =
    deltanode-``command``, and the Delta jars bootstrap fetched after any ``spark.jars`` of the
    conf (every Spark that DeltaNode starts can read its tables with delta-spark, ``lake.spark``)."""
    spark = conf.spark_conf()
    for key, value in spark_defaults().items():
        spark.setdefault(key, value)
    spark.setdefault("spark.app.name", f"deltanode-{command}")
    if "spark.pyspark.python" in spark and spark.get("spark.submit.deployMode", "client") == "client":
        # The executors' Python (``./env/bin/python`` from spark.archives, README "On a cluster")
        # is no path here: the driver, in this process's place, runs on this interpreter.
        spark.setdefault("spark.pyspark.driver.python", sys.executable)
    if spark["spark.master"].startswith("yarn"):
        _check_hadoop_conf_dir()
        # Spark puts the Unix sockets to its Python workers in java.io.tmpdir, which YARN sets to the
        # container's directory, deep in the NodeManager's local dirs: past the 107 bytes a socket's
        # path may have ("AF_UNIX path too long"). /tmp is on every host.
        spark.setdefault("spark.python.unix.domain.socket.dir", "/tmp")
    return with_delta_jars(spark)


def appended(current: str | None, values: list[str]) -> str:
    """A comma-separated Spark list (``spark.jars``, ``spark.files``, ...) with ``values`` after
    ``current``'s, each once."""
    items = [v.strip() for v in (current or "").split(",") if v.strip()]
    return ",".join(items + [v for v in values if v not in items])


def with_delta_jars(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with the Delta jars added to ``spark.jars`` (after any the conf lists)."""
    return {**options, "spark.jars": appended(options.get("spark.jars"), [str(p) for p in component_jars("delta")])}


def _check_hadoop_conf_dir() -> None:
    """spark.master = yarn: spark-submit finds the ResourceManager in ``HADOOP_CONF_DIR`` (or
    ``YARN_CONF_DIR``). Without one it refuses, after a JVM started; with a directory lacking
    yarn-site.xml it asks 0.0.0.0:8032 again and again. Both are told before any JVM starts."""
    dirs = [os.environ[var] for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if os.environ.get(var)]
    if not dirs:
        raise ConfError("spark.master = yarn: set HADOOP_CONF_DIR (or YARN_CONF_DIR) to the directory of the "
                        "cluster's yarn-site.xml and core-site.xml, which name its ResourceManager")
    if not any(os.path.isfile(os.path.join(d, "yarn-site.xml")) for d in dirs):
        raise ConfError(f"spark.master = yarn: no yarn-site.xml in {' or '.join(dirs)} (HADOOP_CONF_DIR / "
                        f"YARN_CONF_DIR); without it Spark looks for a ResourceManager at 0.0.0.0:8032")
