"""The argument parser of ``./spark-submit.sh SUBCOMMAND --conf FILE [...]`` (``cli`` runs what it
parses): one function per group of subcommands. Standard library only, so ``--help`` starts no
more than this."""

from __future__ import annotations

import argparse

from deltanode import __version__
from deltanode.config import ENV_PREFIX

PROG = "spark-submit.sh"
DEFAULT_STANDALONE_CONF = "conf/standalone.conf"

_ENV_HELP = f"""\
Conf files hold `key = value` lines (# starts a comment); spark.* keys are passed to Spark.
Environment variables override keys: {ENV_PREFIX}<KEY> with the key upper-cased and dots as
underscores, e.g. {ENV_PREFIX}STORAGE_ROOT=/data/delta, {ENV_PREFIX}SPARK_MASTER='local[4]'.
Use --print-conf to see the effective values and where each came from."""


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
    _add_services(sub)
    _add_sql(sub)
    _add_admin(sub)
    return parser


def _add_services(sub) -> None:
    """The long-running subcommands: standalone, datanode, datacoord."""
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


def _add_sql(sub) -> None:
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


def _add_admin(sub) -> None:
    p = sub.add_parser(
        "admin", formatter_class=_Formatter, epilog=_ENV_HELP,
        help="administration: create-collection, show-collections, show-channels, show-segments, flush, health, "
             "produce, verify",
        description="Administrative commands against the configured etcd, message queue and "
                    "storage.")
    p.add_argument("--conf", metavar="FILE", default=None, help="conf file (required; before or after COMMAND)")
    p.add_argument("--print-conf", action="store_true",
                   help="print the effective configuration with the source of each value, then exit")
    admin = p.add_subparsers(dest="admin_command", metavar="COMMAND", required=True)
    _add_admin_catalog(admin)
    _add_admin_operations(admin)
    _add_admin_verify(admin)


def _add_admin_catalog(admin) -> None:
    """admin create-collection and the show-* commands."""
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


def _add_admin_operations(admin) -> None:
    """admin flush, produce and health."""
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


def _add_admin_verify(admin) -> None:
    """admin verify."""
    a = admin.add_parser(
        "verify", formatter_class=_Formatter,
        help="check a mirror against the Milvus it mirrors: counts, every primary key, field values",
        description="Hold each mirrored collection (all of Milvus's created ones, or those named) against "
                    "Milvus itself, through pymilvus: Milvus's count(*) (consistency Strong) against the rows "
                    "Delta's readers see (deletion vectors applied); every primary key of Milvus against every "
                    "key in Delta, counted (missing, extra or duplicated in Delta); every field's value of a "
                    "seeded sample of rows, or of all rows. Prints the differences by key and a summary per "
                    "collection as JSON, progress on stderr. Exit 0: no difference; 1: a difference, or Milvus "
                    "or etcd could not be read; 2: a usage error (no milvus.meta.root, an unknown collection). "
                    "Verify a Milvus at rest: rows written while it runs show as differences.")
    a.add_argument("--collection", action="append", metavar="N",
                   help="a collection name (db.name outside the default database) or ID; repeatable "
                        "(default: every collection)")
    fields = a.add_mutually_exclusive_group()
    fields.add_argument("--sample", type=int, default=None, metavar="N",
                        help="compare every field of N rows, chosen at random among the keys both hold (100)")
    fields.add_argument("--all-fields", action="store_true",
                        help="compare every field of every row (reads every row of Milvus and Delta)")
    a.add_argument("--seed", type=int, default=0, metavar="S", help="the sample's random seed (0)")
    a.add_argument("--milvus-uri", default="http://127.0.0.1:19530", metavar="URI",
                   help="Milvus's proxy, as pymilvus takes it (http://127.0.0.1:19530)")
    token = a.add_mutually_exclusive_group()
    token.add_argument("--milvus-token", metavar="TOKEN",
                       help="Milvus's token (user:password), when it authenticates; visible to ps: prefer the file")
    token.add_argument("--milvus-token-file", metavar="FILE", help="a file holding Milvus's token")
    a.add_argument("--catch-up-timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait for DeltaNode to commit past the moment Milvus was read (60)")
    a.add_argument("--max-listed", type=int, default=1000, metavar="K",
                   help="differences listed per collection; all are counted in its summary (1000)")
    _common(a, default_conf=None, admin=True)
