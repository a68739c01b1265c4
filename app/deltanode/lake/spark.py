"""Delta Lake in a Spark session (driver): the jars bootstrap fetched, delta-spark's SQL settings,
and the collections as tables of a user's own PySpark session.

    from pyspark.sql import SparkSession
    from deltanode.config import load_conf
    from deltanode.lake.spark import configure, register_tables
    spark = configure(SparkSession.builder.master("local[2]")).getOrCreate()
    register_tables(spark, load_conf("conf/standalone.conf"))
    spark.table("demo").count()

``configure`` puts the Delta jars of ``.venv/share/deltanode/jars/delta/`` in ``spark.jars`` (the
driver's and the executors' class path; nothing is downloaded: PyPI delta-spark's own
``configure_spark_with_delta_pip`` asks Maven for them) and sets Delta's SQL extension and catalog
(``delta.`path``` tables, ``DESCRIBE HISTORY``, time travel). It must come before the session's
JVM starts. Every Spark subcommand of DeltaNode has the jars (``cli.spark_submit_args``); the
``sql`` subcommand adds the SQL settings.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..jars import component_jars

EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
SQL_DEFAULTS = {
    "spark.sql.catalog.spark_catalog": CATALOG,
    # Delta rebuilds a snapshot's file list in this many partitions (default 50): its first read of
    # a small table ran 50 tasks with a code generation each, 34 s against 10 s with 2 under
    # load here (docs/spark-sql.md). DeltaNode's tables hold few files for their rows.
    "spark.databricks.delta.snapshotPartitions": "2",
}


def _append(current: str | None, values: list[str]) -> str:
    """A comma-separated Spark list with ``values`` after ``current``'s, each once."""
    items = [v.strip() for v in (current or "").split(",") if v.strip()]
    return ",".join(items + [v for v in values if v not in items])


def with_delta_jars(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with the Delta jars added to ``spark.jars`` (after any the conf lists)."""
    return {**options, "spark.jars": _append(options.get("spark.jars"), [str(p) for p in component_jars("delta")])}


def with_delta_sql(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with the Delta jars, Delta's extension added to ``spark.sql.extensions``, and
    ``SQL_DEFAULTS`` where ``options`` has no value of its own."""
    out = with_delta_jars(options)
    out["spark.sql.extensions"] = _append(out.get("spark.sql.extensions"), [EXTENSION])
    for key, value in SQL_DEFAULTS.items():
        out.setdefault(key, value)
    return out


def configure(builder):
    """``builder`` (a ``SparkSession.Builder``) with the Delta jars and delta-spark's SQL
    settings, kept with the builder's own ``spark.jars`` and ``spark.sql.extensions``."""
    own = dict(getattr(builder, "_options", {}))
    for key, value in with_delta_sql(own).items():
        if own.get(key) != value:
            builder = builder.config(key, value)
    return builder


def register_tables(spark, conf, names: list[str] | None = None) -> list[str]:
    """Make the collections of ``conf``'s catalog (a ``deltanode.config.Conf``: etcd and
    ``storage.root``) tables of ``spark``, each named after its collection (``db.collection`` for a
    Milvus database other than the default one): all of them, or those ``names`` lists. Returns
    the names registered. Each table reads its Delta log once when registered."""
    from ..storage.layout import StorageLayout
    from .tables import catalog_tables
    from .views import register
    tables = catalog_tables(conf)
    if names is not None:
        known = {t.qualified for t in tables}
        missing = [n for n in names if n not in known]
        if missing:
            raise KeyError(f"no collection named {', '.join(missing)} (the tables: {', '.join(sorted(known))})")
        tables = [t for t in tables if t.qualified in names]
    register(spark, StorageLayout.from_conf(conf), tables)
    return [t.qualified for t in tables]
