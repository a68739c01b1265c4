"""Delta Lake in a Spark session (driver): the jars bootstrap fetched, delta-spark's SQL settings,
and the collections as tables of a user's own PySpark session.

    from pyspark.sql import SparkSession
    from deltanode.config import load_conf
    from deltanode.lake.spark import configure, register_tables
    conf = load_conf("conf/standalone.conf")
    spark = configure(SparkSession.builder.master("local[2]"), conf).getOrCreate()
    register_tables(spark, conf)
    spark.table("demo").count()

``configure`` puts the Delta jars of ``.venv/share/deltanode/jars/delta/`` in ``spark.jars`` (the
driver's and the executors' class path; nothing is downloaded: PyPI delta-spark's own
``configure_spark_with_delta_pip`` asks Maven for them) and sets Delta's SQL extension and catalog
(``delta.`path``` tables, ``DESCRIBE HISTORY``, time travel). Given a conf whose ``storage.root``
is on S3, it adds the S3A connector's jars and settings (``s3a``); ``register_tables`` then hands
the session the conf's S3 credentials. It must come before the session's JVM starts. Every Spark
subcommand of DeltaNode has the Delta jars (``cli.spark_submit_args``); the ``sql`` subcommand adds
the SQL settings and S3A.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..config.jars import component_jars
from ..config.settings import Settings
from ..config.spark_conf import appended, with_delta_jars
from ..delta.layout import StorageLayout
from ..delta.object_store import is_object_store
from .s3a import hand_credentials, s3a_options, trust_options, trust_store

EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
SQL_DEFAULTS = {
    "spark.sql.catalog.spark_catalog": CATALOG,
    # Delta rebuilds a snapshot's file list in this many partitions (default 50): its first read of
    # a small table ran 50 tasks with a code generation each, 34 s against 10 s with 2 under
    # load here (docs/spark-sql.md). DeltaNode's tables hold few files for their rows.
    "spark.databricks.delta.snapshotPartitions": "2",
}


def with_delta_sql(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with the Delta jars, Delta's extension added to ``spark.sql.extensions``, and
    ``SQL_DEFAULTS`` where ``options`` has no value of its own."""
    out = with_delta_jars(options)
    out["spark.sql.extensions"] = appended(out.get("spark.sql.extensions"), [EXTENSION])
    for key, value in SQL_DEFAULTS.items():
        out.setdefault(key, value)
    return out


def with_storage(options: Mapping[str, str], storage) -> dict[str, str]:
    """``options`` with what reaches ``storage`` (a ``StorageLayout``): for a root on S3, the S3A
    jars after the others in ``spark.jars`` and ``s3a.s3a_options`` where ``options`` has no value
    of its own; with ``storage.s3.ca.file``, its trust store added to the JVMs' options. A local
    root needs nothing."""
    if not is_object_store(storage.root):
        return dict(options)
    out = {**options, "spark.jars": appended(options.get("spark.jars"), [str(p) for p in component_jars("s3a")])}
    for key, value in s3a_options(storage.options).items():
        out.setdefault(key, value)
    if storage.options.ca_file:
        trust = trust_options(trust_store(storage.options.ca_file))
        out["spark.files"] = appended(out.get("spark.files"), [trust.pop("spark.files")])
        for key, value in trust.items():   # Java options: after the conf's own
            out[key] = " ".join(v for v in (out.get(key), value) if v)
    return out


def configure(builder, conf=None):
    """``builder`` (a ``SparkSession.Builder``) with the Delta jars and delta-spark's SQL
    settings, kept with the builder's own ``spark.jars`` and ``spark.sql.extensions``; with
    ``conf`` (a ``deltanode.config.Conf``), what reaches its ``storage.root`` (``with_storage``)."""
    own = dict(getattr(builder, "_options", {}))
    wanted = with_delta_sql(own)
    if conf is not None:
        wanted = with_storage(wanted, StorageLayout.of(Settings.of(conf).storage))
    for key, value in wanted.items():
        if own.get(key) != value:
            builder = builder.config(key, value)
    return builder


def register_tables(spark, conf, names: list[str] | None = None) -> list[str]:
    """Make the collections of ``conf``'s catalog (a ``deltanode.config.Conf``: etcd and
    ``storage.root``) tables of ``spark``, each named after its collection (``db.collection`` for a
    Milvus database other than the default one): all of them, or those ``names`` lists. Returns
    the names registered. Each table reads its Delta log once when registered.

    For a ``storage.root`` on S3, ``spark`` must have been made by ``configure`` with ``conf``
    (the S3A jars and endpoint); its Hadoop configuration gets the conf's credentials first."""
    from .tables import catalog_tables
    from .views import register
    tables = catalog_tables(conf)
    if names is not None:
        known = {t.qualified for t in tables}
        missing = [n for n in names if n not in known]
        if missing:
            raise KeyError(f"no collection named {', '.join(missing)} (the tables: {', '.join(sorted(known))})")
        tables = [t for t in tables if t.qualified in names]
    storage = StorageLayout.of(Settings.of(conf).storage)
    hand_credentials(spark, storage)
    register(spark, storage, tables)
    return [t.qualified for t in tables]
