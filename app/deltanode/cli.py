"""Command line of DeltaNode: ``./spark-submit.sh SUBCOMMAND --conf FILE [...]``.

Parsing and ``--help`` need nothing but the standard library; the code behind each
subcommand is imported only when it runs:

  standalone  -> deltanode.standalone.run.run(conf) -> int
  datanode    -> deltanode.datanode.run.run(conf) -> int
  datacoord   -> deltanode.datacoord.run.run(conf) -> int
  admin NAME  -> deltanode.admin.commands.<NAME with - as _>(conf, args) -> int
  sql         -> deltanode.lake.sql_command.run(conf, args) -> int

Exit codes: 0 success, 1 a service failed (message on stderr), 2 usage or configuration
error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from deltanode import __version__
from deltanode.config import ENV_PREFIX, ConfError, load_conf
from deltanode.jvm import spark_defaults
from deltanode.logs import setup_logging

PROG = "spark-submit.sh"
DEFAULT_STANDALONE_CONF = "conf/standalone.conf"

RUNNERS = {
    "standalone": "deltanode.standalone.run",
    "datanode": "deltanode.datanode.run",
    "datacoord": "deltanode.datacoord.run",
}
ADMIN_MODULE = "deltanode.admin.commands"
SQL_MODULE = "deltanode.lake.sql_command"

_ENV_HELP = f"""\
Conf files hold `key = value` lines (# starts a comment); spark.* keys are passed to Spark.
Environment variables override keys: {ENV_PREFIX}<KEY> with the key upper-cased and dots as
underscores, e.g. {ENV_PREFIX}STORAGE_ROOT=/data/delta, {ENV_PREFIX}SPARK_MASTER='local[4]'.
Use --print-conf to see the effective values and where each came from."""

log = logging.getLogger("deltanode")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def _common(p: argparse.ArgumentParser, *, default_conf: str | None, admin: bool = False) -> None:
    if admin:
        # Accepted before or after the admin COMMAND: SUPPRESS keeps an absent option from
        # overwriting the one given before the command (checked in parse_args).
        p.add_argument("--conf", metavar="FILE", default=argparse.SUPPRESS,
                       help="conf file (required; before or after COMMAND)")
        p.add_argument("--print-conf", action="store_true", default=argparse.SUPPRESS,
                       help="print the effective configuration with the source of each value, then exit")
        return
    if default_conf:
        p.add_argument("--conf", metavar="FILE", default=default_conf,
                       help=f"conf file (default: {default_conf})")
    else:
        p.add_argument("--conf", metavar="FILE", required=True, help="conf file (required)")
    p.add_argument("--print-conf", action="store_true",
                   help="print the effective configuration with the source of each value, "
                        "then exit")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_Formatter,
        description="DeltaNode: the Milvus DataNode write path on Apache Spark, persisting to "
                    "Delta Lake.\nEach subcommand runs under spark-submit with the packaged "
                    "build/dist/deltanode-<version>.zip.",
        epilog=_ENV_HELP)
    parser.add_argument("--version", action="version", version=f"deltanode {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser(
        "standalone", formatter_class=_Formatter, epilog=_ENV_HELP,
        help="everything on this machine: embedded etcd and broker (as configured), "
             "channel assigner, one DataNode on local Spark",
        description="Start, on loopback, etcd (embedded.etcd = true), the broker of mq.type "
                    "(embedded.broker = true: Apache Kafka), a channel assigner and one DataNode with "
                    "local Spark. Reports progress while running; Ctrl-C or SIGTERM stops "
                    "everything cleanly.")
    _common(p, default_conf=DEFAULT_STANDALONE_CONF)

    p = sub.add_parser(
        "datanode", formatter_class=_Formatter, epilog=_ENV_HELP,
        help="one DataNode: watches its channels in etcd and writes them to Delta tables",
        description="Run one DataNode against the configured etcd and message queue "
                    "(no embedded services). Its Spark application uses the spark.* keys of the "
                    "conf file (spark.master, executor sizes, ...).")
    _common(p, default_conf=None)

    p = sub.add_parser(
        "datacoord", formatter_class=_Formatter, epilog=_ENV_HELP,
        help="the channel assigner: assigns DML channels to live DataNodes through etcd",
        description="Run the channel assigner (the DataCoord part that hands channels to "
                    "DataNodes) against the configured etcd (no embedded services).")
    _common(p, default_conf=None)

    p = sub.add_parser(
        "sql", formatter_class=_Formatter, epilog=_ENV_HELP,
        help="Spark SQL over the lake: each collection is a table; one JSON object per result row",
        description="Run QUERY with Spark SQL (delta-spark) over the collections' current rows, deletes "
                    "and upserts applied. Each collection of the catalog is a table named after it (with "
                    "milvus.meta.root set: Milvus's names, db.collection for a database other than the "
                    "default one). Prints one JSON object per result row on stdout, vectors as arrays "
                    "and JSON fields as JSON; Spark's logs and errors go to stderr. Exit 2 when the "
                    "query does not parse or names an unknown table. Needs etcd (the catalog) and "
                    "storage.root; the conf's spark.* keys shape the session (docs/spark-sql.md).")
    _common(p, default_conf=None)
    p.add_argument("query", metavar="QUERY", nargs="?",
                   help='the query, e.g. "SELECT count(*) FROM demo"')

    p = sub.add_parser(
        "admin", formatter_class=_Formatter, epilog=_ENV_HELP,
        help="administration: create-collection, show-collections, show-channels, show-segments, flush, health, "
             "produce",
        description="Administrative commands against the configured etcd, message queue and "
                    "storage.")
    p.add_argument("--conf", metavar="FILE", default=None, help="conf file (required; before or after COMMAND)")
    p.add_argument("--print-conf", action="store_true",
                   help="print the effective configuration with the source of each value, then exit")
    admin = p.add_subparsers(dest="admin_command", metavar="COMMAND", required=True)

    a = admin.add_parser("create-collection", formatter_class=_Formatter,
                         help="create a collection from a JSON schema and assign its channels",
                         description="Create a collection: its schema (JSON file), its shards "
                                     "(virtual channels), and their assignment.")
    a.add_argument("--name", required=True, metavar="N", help="collection name")
    a.add_argument("--schema", required=True, metavar="FILE.json", help="schema as JSON")
    a.add_argument("--shards", type=int, default=1, metavar="K",
                   help="number of shards (virtual channels), default 1")
    a.add_argument("--count", type=int, default=1, metavar="C",
                   help="create C collections named N_0 .. N_{C-1} with this schema in one go (one catalog "
                        "read, one broadcast, 64 records per etcd transaction; prints a list), default 1")
    _common(a, default_conf=None, admin=True)

    a = admin.add_parser("show-collections", formatter_class=_Formatter,
                         help="list the collections DeltaNode persists (in mirror mode: the Milvus's)",
                         description="List the collections of the catalog (with milvus.meta.root set: every "
                                     "collection of that Milvus) with their vchannels, state, fields, the rows "
                                     "DeltaNode committed, and any start gap (milvus.start = checkpoint).")
    _common(a, default_conf=None, admin=True)

    a = admin.add_parser("show-channels", formatter_class=_Formatter,
                         help="list channels, their DataNode and checkpoint",
                         description="List the DML channels with their assigned DataNode, "
                                     "watch state and checkpoint.")
    _common(a, default_conf=None, admin=True)

    a = admin.add_parser("show-segments", formatter_class=_Formatter,
                         help="list the segments of a collection",
                         description="List the segments of a collection with row counts "
                                     "and state.")
    a.add_argument("--collection", required=True, metavar="N", help="collection name")
    _common(a, default_conf=None, admin=True)

    a = admin.add_parser("flush", formatter_class=_Formatter,
                         help="seal a collection's segments and wait until they are Flushed",
                         description="Milvus's Flush: seal every segment of the collection at a flush "
                                     "timestamp (now), through etcd to the DataNodes serving its "
                                     "vchannels; each records its sealed segments Flushed once its "
                                     "checkpoint passes that timestamp. Waits for it in Delta and prints "
                                     "the Flushed segments; exit 1 if a vchannel has not flushed in time.")
    a.add_argument("--collection", required=True, metavar="N", help="collection name or ID")
    a.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait for every vchannel (60)")
    _common(a, default_conf=None, admin=True)

    a = admin.add_parser("produce", formatter_class=_Formatter,
                         help="send demo Milvus insert traffic to a collection",
                         description="Send InsertRequests with random rows (and a TimeTick per "
                                     "pchannel every 200 ms, as rootcoord does) to every shard of a "
                                     "collection, as a Milvus proxy would; for trying DeltaNode out.")
    a.add_argument("--collection", required=True, metavar="N", help="collection name")
    a.add_argument("--messages", type=int, default=100, metavar="M", help="InsertRequests to send (100)")
    a.add_argument("--rows", type=int, default=1000, metavar="R", help="rows per InsertRequest (1000)")
    a.add_argument("--deletes", type=int, default=10, metavar="D",
                   help="primary keys to delete afterwards (10)")
    _common(a, default_conf=None, admin=True)

    a = admin.add_parser("health", formatter_class=_Formatter,
                         help="check etcd, the message queue, storage and live DataNodes",
                         description="Check that etcd, the message queue and storage answer and "
                                     "list the live sessions; exit 0 when healthy.")
    _common(a, default_conf=None, admin=True)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse argv; raises SystemExit (0 after --help, 2 on a usage error)."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "admin" and args.conf is None:
        parser.error(f"admin {args.admin_command}: --conf FILE is required (before or after {args.admin_command})")
    if args.command == "sql" and args.query is None and not args.print_conf:
        parser.error("sql: QUERY is required")
    return args


def _resolve(args: argparse.Namespace):
    """(module name, function name) for the parsed subcommand."""
    if args.command == "admin":
        return ADMIN_MODULE, args.admin_command.replace("-", "_")
    if args.command == "sql":
        return SQL_MODULE, "run"
    return RUNNERS[args.command], "run"


def _load_target(module_name: str, func_name: str, what: str):
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            print(f"{PROG} {what}: {module_name} is not part of this build ({e})", file=sys.stderr)
        else:
            print(f"{PROG} {what}: {module_name} needs the module {missing!r}, which is not "
                  f"installed ({e}); run build/bootstrap.sh", file=sys.stderr)
        return None
    func = getattr(module, func_name, None)
    if not callable(func):
        print(f"{PROG} {what}: {module_name} has no function {func_name}()", file=sys.stderr)
        return None
    return func


def _load(args: argparse.Namespace):
    try:
        return load_conf(args.conf)
    except ConfError as e:
        if not os.path.exists(args.conf) and not os.path.isabs(args.conf):
            raise ConfError(f"{e} (relative to {os.getcwd()}; run from the repository root "
                            "or pass --conf FILE)") from None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:  # --help, --version or a usage error (argparse printed it)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    what = args.command + (f" {args.admin_command}" if args.command == "admin" else "")
    try:
        conf = _load(args)
    except ConfError as e:
        print(str(e), file=sys.stderr)
        return 2
    if args.print_conf:
        import deltanode
        print(f"# deltanode {__version__} from {os.path.dirname(deltanode.__file__)}")
        print(f"# conf file: {args.conf}")
        print(conf.describe())
        return 0
    setup_logging(conf.get("log.level"))
    module_name, func_name = _resolve(args)
    func = _load_target(module_name, func_name, what)
    if func is None:
        return 2
    log.debug("%s: conf %s, running %s.%s", what, args.conf, module_name, func_name)
    from deltanode.etcd.errors import EtcdError  # standard library only
    from deltanode.mq.types import BrokerError  # standard library only
    from deltanode.standalone.services import ServiceError  # standard library only
    try:
        rc = func(conf, args) if args.command in ("admin", "sql") else func(conf)
    except ConfError as e:
        print(str(e), file=sys.stderr)
        return 2
    except (ServiceError, EtcdError, BrokerError) as e:   # e.g. an etcd or a broker that refuses us at start
        print(f"{PROG} {what}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG} {what}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (``admin show-segments | head``): stop quietly, as Unix tools do;
        # stdout goes to /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0 if rc is None else int(rc)


# ----------------------------------------------------------------------------- spark-submit glue

def spark_submit_args(argv: Sequence[str]) -> list[str]:
    """The spark-submit options for a command line: ``--conf k=v`` for each of ``spark_options``.
    Raises SystemExit on a usage error and ConfError."""
    args = parse_args(argv)
    conf = _load(args)
    if args.command == "standalone" and not args.print_conf:
        _check_embedded_ports(conf)
    out: list[str] = []
    for key, value in spark_options(args, conf).items():
        out += ["--conf", f"{key}={value}"]
    return out


def spark_options(args: argparse.Namespace, conf) -> dict[str, str]:
    """The Spark conf of a subcommand: every spark.* key of the conf (after environment
    overrides), then ``jvm.spark_defaults()`` the conf leaves unset, spark.app.name =
    deltanode-SUBCOMMAND, and the Delta jars bootstrap fetched after any ``spark.jars`` of the
    conf (``lake.spark``: every Spark that DeltaNode starts can read its tables with delta-spark)."""
    from deltanode.lake.spark import with_delta_jars
    spark = conf.spark_conf()
    for key, value in spark_defaults().items():
        spark.setdefault(key, value)
    spark.setdefault("spark.app.name", f"deltanode-{args.command}")
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


def _check_embedded_ports(conf) -> None:
    """Fail before a JVM starts when a port of an embedded service is taken (standalone checks
    again when it starts them)."""
    from deltanode.standalone.services import PortInUseError, ensure_port_free
    for flag, key, what in (("embedded.etcd", "etcd.endpoints", "etcd client port"),
                            ("embedded.broker", conf.broker_key, "broker port")):
        if conf.get(flag):
            port = (conf.hostports(key) if key == "etcd.endpoints" else conf.broker_hostports())[0][1]
            try:
                ensure_port_free(port, what)
            except PortInUseError as e:
                raise PortInUseError(f"{e} (set by {key} at {conf.source(key)})") from None


def _spark_args_main(argv: Sequence[str]) -> int:
    """Used by spark-submit.sh: checks the command line and conf before any JVM starts, then
    prints NUL-separated the options of spark-submit's launcher JVM (``SPARK_LAUNCHER_OPTS``,
    ``jvm.launcher_options``) and the spark-submit options."""
    from deltanode.jars import MissingJars
    from deltanode.jvm import launcher_options
    from deltanode.standalone.services import ServiceError
    try:
        opts = spark_submit_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    except (ConfError, MissingJars) as e:
        print(str(e), file=sys.stderr)
        return 2
    except ServiceError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(o + "\0" for o in [launcher_options(), *opts]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
