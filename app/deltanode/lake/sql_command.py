"""``./spark-submit.sh sql --conf FILE "QUERY"``: Spark SQL over the lake, one JSON object a row (driver).

The tables the query names (``tables.mentioned``) are registered as views of a local-driver
Spark session with delta-spark (``views``), the query runs, and each result row is a line of
JSON on stdout (``rows_json``); everything else, Spark's logs included, goes to stderr
(``results``). It runs on the venv's Python, not under spark-submit: spark-submit would merge the
driver's stderr into its stdout. The session takes the conf's spark.* keys as the other
subcommands do (``spark.master`` included: the executors may be a cluster's), in client deploy
mode: the rows come back to this process.

Statements that write or change anything are refused (``statements``): DeltaNode stays the only
writer of its tables.

Exit codes: 0 the rows were printed; 2 the query does not parse, would write, or names an unknown
table or column (the message names the tables there are); 1 anything else failed (etcd, storage,
Spark).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile

from ..config import Conf
from ..config.settings import Settings
from ..failure.errors import DeltaNodeError
from .results import ResultStream
from .rows_json import DuplicateColumn, RowRenderer
from .tables import LakeTable, catalog_tables, mentioned

PROG = "spark-submit.sh sql"
SHOWN_TABLES = 20    # an unknown table's message lists this many of the tables there are


class QueryError(DeltaNodeError):
    """The query cannot run as written (exit 2); the message says why."""


def session_options(conf: Conf, args: argparse.Namespace, warehouse: str) -> dict[str, str]:
    """The spark.* options of the query's session: the subcommand's own (the conf's keys, the
    defaults, the Delta jars), delta-spark's SQL settings, S3A's for a root on S3 (no secret:
    ``_query`` hands the credentials to the running session), and for a one-off query no UI and
    Spark's log at ERROR unless the conf says otherwise. ``warehouse``: where a Milvus
    database's views go (a directory that goes with the process)."""
    from ..config.spark_conf import spark_options
    from ..delta.layout import StorageLayout
    from .spark import with_delta_sql, with_storage
    storage = StorageLayout.of(Settings.of(conf).storage)
    options = with_storage(with_delta_sql(spark_options(args.command, conf)), storage)
    for key, value in {"spark.ui.enabled": "false", "spark.log.level": "ERROR", "spark.driver.memory": "1g",
                       "spark.sql.warehouse.dir": warehouse}.items():
        options.setdefault(key, value)
    options["spark.submit.deployMode"] = "client"
    return options


def unknown_table(relation: str, tables: list[LakeTable]) -> str:
    names = [t.qualified for t in tables]
    listed = ", ".join(names[:SHOWN_TABLES]) + (f" and {len(names) - SHOWN_TABLES} more" if len(names) > SHOWN_TABLES
                                                else "")
    return (f"no table {relation}: the tables are the collections, by name ({listed or 'none yet'}); "
            f"admin show-collections lists them")


def run(conf: Conf, args: argparse.Namespace) -> int:
    results = ResultStream()
    try:
        return _run(conf, args, results)
    finally:
        results.close()


def _run(conf: Conf, args: argparse.Namespace, results: ResultStream) -> int:
    try:
        tables = catalog_tables(conf)
    except Exception as e:  # noqa: BLE001 - etcd away, a catalog it cannot read: said on stderr
        print(f"{PROG}: cannot read the collections from {conf.get('etcd.endpoints')}: {e}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="deltanode-sql-") as warehouse:
        try:
            spark = _session(session_options(conf, args, warehouse))
        except Exception as e:  # noqa: BLE001 - no JVM, a bad spark.* key: said on stderr
            print(f"{PROG}: Spark did not start: {_first_lines(str(e))}", file=sys.stderr)
            return 1
        try:
            _query(spark, conf, tables, args.query, results)
        except QueryError as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            raise
        except Exception as e:  # noqa: BLE001 - a failed Spark job, storage: its message, not a traceback
            print(f"{PROG}: the query failed: {_first_lines(str(e))}", file=sys.stderr)
            return 1
        finally:
            spark.stop()
    return 0


def _session(options: dict[str, str]):
    from pyspark.logger import PySparkLogger
    from pyspark.sql import SparkSession
    # pyspark logs every analysis error as JSON on stderr; this command says it once, plainly.
    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _query(spark, conf: Conf, tables: list[LakeTable], query: str, results: ResultStream) -> None:
    from pyspark.errors import AnalysisException, ParseException

    from ..delta.layout import StorageLayout
    from .s3a import hand_credentials
    from .statements import writing_statement
    from .views import register
    try:
        writes = writing_statement(spark, query)
    except ParseException as e:
        raise QueryError(f"the query does not parse: {str(e).strip()}") from None
    if writes is not None:
        raise QueryError(f"the query would write or change something ({writes}): sql only reads, and "
                         "DeltaNode is the only writer of its tables")
    storage = StorageLayout.of(Settings.of(conf).storage)
    hand_credentials(spark, storage)   # before the first read of the storage
    register(spark, storage, mentioned(tables, query))
    try:
        frame = spark.sql(query)
        renderer = RowRenderer(frame.schema)
    except ParseException as e:
        raise QueryError(f"the query does not parse: {str(e).strip()}") from None
    except AnalysisException as e:
        if e.getCondition() == "TABLE_OR_VIEW_NOT_FOUND":
            relation = (e.getMessageParameters() or {}).get("relationName", "?")
            raise QueryError(unknown_table(relation, tables)) from None
        raise QueryError(_without_plan(str(e))) from None
    except DuplicateColumn as e:
        raise QueryError(str(e)) from None
    for row in frame.toLocalIterator():
        results.write(renderer.render(row))


def _first_lines(message: str, lines: int = 5) -> str:
    """A Java exception's message without its stack trace."""
    kept = [line for line in message.splitlines() if not line.lstrip().startswith("at ")]
    return "\n".join(kept[:lines])


def _without_plan(message: str) -> str:
    """An analysis error's message without the query plan Spark appends after ``;``."""
    return message.split(";\n", 1)[0].strip()
