"""A user's own PySpark session on DeltaNode's tables, as README's "Reading the current state" makes
it, in a process of its own (the JVM gets the conf's settings at its start):

    python spark_user_session.py CONF_FILE COLLECTION OUT_DIR

``configure(builder, conf)`` and ``register_tables(spark, conf)``, then the collection's primary keys
printed as one JSON list on stdout. What Spark shows of the session goes into OUT_DIR for the test
to search: the UI's environment page (after an ``addFile``, so it lists the Hadoop configuration as
it is once the credentials are in it) and the driver JVM's command line."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from pyspark.sql import SparkSession

from deltanode.config import load_conf
from deltanode.config.jvm_options import spark_defaults
from deltanode.lake.spark import configure, register_tables


def main() -> None:
    conf_file, name, out = sys.argv[1:]
    conf = load_conf(conf_file)
    builder = SparkSession.builder.config(map={**spark_defaults(), "spark.driver.memory": "1g"})
    spark = configure(builder, conf).getOrCreate()
    try:
        spark.sparkContext.setLogLevel("ERROR")
        assert register_tables(spark, conf, [name]) == [name]
        pks = [row.pk for row in spark.sql(f"SELECT pk FROM {name}").toLocalIterator()]
        context = spark.sparkContext
        context.addFile(conf_file)   # Spark posts its environment again, Hadoop's configuration included
        api = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/environment"
        Path(out, "environment.json").write_bytes(urllib.request.urlopen(api, timeout=30).read())
        Path(out, "cmdline").write_bytes(Path(f"/proc/{context._gateway.proc.pid}/cmdline").read_bytes())
    finally:
        spark.stop()
    print(json.dumps(pks))


if __name__ == "__main__":
    main()
