"""The key table: every DeltaNode key (name, type, default or required, doc), the prefixes passed
through untouched, the environment names, and which keys hold secrets."""

from __future__ import annotations

import difflib
import re
from typing import Any

from ..failure.crash_points import CRASH_AT, CRASH_DIR, CRASH_PGID, PAUSE_AT
from .values import Key, KeyType

ENV_PREFIX = "DELTANODE_"
#: Not conf overrides: set by spark-submit.sh for the driver (``deltanode.lifeline``), and the
#: fault points a test arms in a DataNode it starts (``deltanode.failure.crash_points``).
INTERNAL_VARIABLES = frozenset({"DELTANODE_LAUNCHER_PID", CRASH_AT, PAUSE_AT, CRASH_DIR, CRASH_PGID})
SPARK_PREFIX = "spark."
KAFKA_CLIENT_PREFIX = "mq.kafka."
#: Keys passed through untouched: Spark's, and librdkafka's (see ``deltanode.config``).
PASSTHROUGH_PREFIXES = (SPARK_PREFIX, KAFKA_CLIENT_PREFIX)
#: librdkafka properties DeltaNode sets itself, with the reason a conf file may not.
KAFKA_RESERVED = {
    "bootstrap.servers": "set mq.kafka.bootstrap.servers",
    "group.id": "DeltaNode reads by offset ranges, with consumer groups of its own",
    "enable.auto.commit": "positions are committed to Delta with the data, never to the broker",
    "auto.offset.reset": "a lost offset must fail the vchannel, never skip data",
    "enable.partition.eof": "range reads depend on it",
}
_SECRET_RE = re.compile(r"(password|secret|token|params|credentials|key|pem)$", re.IGNORECASE)
#: ``<secret key>.file`` names a file holding the secret (see ``deltanode.config``).
SECRET_FILE_SUFFIX = ".file"

#: Spark keys with capitals that environment variables can name (see ``deltanode.config``).
COMMON_SPARK_KEYS = (
    "spark.master", "spark.app.name", "spark.submit.deployMode", "spark.driver.memory",
    "spark.driver.cores", "spark.driver.host", "spark.driver.bindAddress",
    "spark.driver.extraJavaOptions", "spark.driver.maxResultSize", "spark.executor.memory",
    "spark.executor.cores", "spark.executor.instances", "spark.executor.extraJavaOptions",
    "spark.cores.max", "spark.local.dir", "spark.ui.enabled", "spark.ui.port",
    "spark.sql.shuffle.partitions", "spark.pyspark.python", "spark.pyspark.driver.python",
    "spark.eventLog.enabled", "spark.eventLog.dir", "spark.eventLog.compress", "spark.default.parallelism",
    "spark.driver.defaultJavaOptions", "spark.executor.defaultJavaOptions",
)


def is_secret(key: str) -> bool:
    """Whether ``key`` holds a secret: masked when shown, and readable from ``<key>.file``. A path
    key is not one (``etcd.ssl.tls.key`` names the key's file, which is readable only by its owner)."""
    spec = KEYS.get(key)
    return bool(_SECRET_RE.search(key)) and (spec is None or spec.type == KeyType.STR)


def secret_of_file_key(key: str) -> str | None:
    """The secret key a ``<key>.file`` key gives the file of, or None when ``key`` is no such key."""
    if not key.endswith(SECRET_FILE_SUFFIX):
        return None
    stem = key[:-len(SECRET_FILE_SUFFIX)]
    return stem if (stem in KEYS or stem.startswith(KAFKA_CLIENT_PREFIX)) and is_secret(stem) else None


def env_name(key: str) -> str:
    """The environment variable that overrides ``key``: ``storage.root`` -> ``DELTANODE_STORAGE_ROOT``."""
    return ENV_PREFIX + re.sub(r"[.\-]", "_", key).upper()


def _k(name: str, type_: KeyType, default: str | None, doc: str, **kw: Any) -> Key:
    return Key(name, type_, default, doc, **kw)


def _etcd_security_keys(prefix: str, who: str) -> list[Key]:
    """TLS and user keys of an etcd, named after Milvus's ``etcd.ssl.*`` and ``etcd.auth.*``."""
    return [_k(f"{prefix}{name}", type_, default, f"{who}{doc}") for name, type_, default, doc in (
        ("ssl.enabled", KeyType.BOOL, "false", "connect to etcd over TLS (Milvus etcd.ssl.enabled)"),
        ("ssl.tls.ca.cert", KeyType.LOCALPATH, None,
         "CA certificates (PEM) etcd's server certificate must chain to (Milvus etcd.ssl.tlsCACert); "
         "unset: the system's"),
        ("ssl.tls.cert", KeyType.LOCALPATH, None,
         "client certificate (PEM) for an etcd that asks for one, --client-cert-auth (Milvus etcd.ssl.tlsCert)"),
        ("ssl.tls.key", KeyType.LOCALPATH, None, "the client certificate's private key (PEM; Milvus etcd.ssl.tlsKey)"),
        ("ssl.server.name", KeyType.STR, None, "the name etcd's certificate must carry; unset: each endpoint's host"),
        ("auth.enabled", KeyType.BOOL, "false", "log in to etcd as a user (Milvus etcd.auth.enabled)"),
        ("auth.username", KeyType.STR, None, "the user to log in as (Milvus etcd.auth.userName); unset: none"),
        ("auth.password", KeyType.STR, None,
         f"its password (Milvus etcd.auth.password), a secret: set it with {env_name(prefix + 'auth.password')}, "
         f"or name a file holding it with {prefix}auth.password.file; unset: none"),
    )]


KEYS: dict[str, Key] = {k.name: k for k in [
    _k("etcd.endpoints", KeyType.HOSTPORTS, "127.0.0.1:2379",
       "etcd client endpoints, comma-separated host:port"),
    *_etcd_security_keys("etcd.", ""),
    _k("etcd.root", KeyType.STR, "by-dev/meta",
       "etcd key prefix of DeltaNode's meta: sessions, channel watch, catalog (Milvus's MetaRoot layout); "
       "in mirror mode not equal to or inside milvus.meta.root"),
    _k("milvus.meta.root", KeyType.STR, None,
       "mirror mode: the meta root of a running Milvus (its etcd.rootPath/etcd.metaSubPath, e.g. by-dev/meta), "
       "whose collections are mirrored from its own meta and streams, read only; unset: DeltaNode's own catalog"),
    _k("milvus.etcd.endpoints", KeyType.HOSTPORTS, None,
       "mirror mode: the etcd of that Milvus; unset: etcd.endpoints"),
    *_etcd_security_keys("milvus.etcd.", "mirror mode, the etcd of milvus.etcd.endpoints (etcd.*'s apply while "
                                         "that is unset): "),
    _k("milvus.start", KeyType.ENUM, "creation",
       "mirror mode: where a vchannel DeltaNode never committed starts: creation (right after the collection's "
       "CreateCollection message; when the broker no longer holds it, the segments Milvus persisted are imported "
       "from milvus.storage.root and the stream followed from Milvus's channel checkpoint), segments (that "
       "import for every new vchannel Milvus has persisted rows of), or checkpoint (creation, else Milvus's "
       "channel checkpoint without an import, the skipped range recorded as a gap)",
       choices=("creation", "segments", "checkpoint")),
    _k("milvus.storage.root", KeyType.PATH, None,
       "mirror mode: Milvus's storage, read only, to import the segments it persisted: its localStorage.path, "
       "or s3://<minio.bucketName>/<minio.rootPath> with the milvus.storage.s3.* keys; unset: no import"),
    _k("milvus.storage.s3.endpoint", KeyType.URL, None,
       "S3-compatible server of an s3:// milvus.storage.root (Milvus's minio.address:port as http(s)://host:port); "
       "unset: AWS's",
       schemes=("http", "https")),
    _k("milvus.storage.s3.region", KeyType.STR, None, "region of Milvus's bucket; unset: the environment's"),
    _k("milvus.storage.s3.access.key.id", KeyType.STR, None,
       "access key to Milvus's bucket (minio.accessKeyID); unset: the environment's credentials"),
    _k("milvus.storage.s3.secret.access.key", KeyType.STR, None,
       "its secret (minio.secretAccessKey); set it with DELTANODE_MILVUS_STORAGE_S3_SECRET_ACCESS_KEY"),
    _k("milvus.storage.s3.session.token", KeyType.STR, None, "session token to Milvus's bucket; unset: none"),
    _k("milvus.storage.s3.ca.file", KeyType.LOCALPATH, None,
       "PEM bundle trusted for https:// to that server; unset: the system's"),
    _k("milvus.import.batch", KeyType.INT, "8",
       "mirror mode: Milvus segments one Spark job of an import reads (one task each), committed together",
       min=1),
    _k("mq.type", KeyType.ENUM, "kafka", "message queue that carries the DML channels",
       choices=("kafka", "pulsar")),
    _k("mq.kafka.bootstrap.servers", KeyType.HOSTPORTS, "127.0.0.1:9092",
       "Kafka bootstrap servers, comma-separated host:port"),
    _k("mq.pulsar.service.url", KeyType.URL, "pulsar://127.0.0.1:6650", "Pulsar service URL",
       schemes=("pulsar", "pulsar+ssl")),
    _k("mq.pulsar.tenant", KeyType.STR, "public", "Pulsar tenant of the pchannel topics (Milvus pulsar.tenant)"),
    _k("mq.pulsar.namespace", KeyType.STR, "default",
       "Pulsar namespace of the pchannel topics (Milvus pulsar.namespace)"),
    _k("mq.pulsar.auth.plugin", KeyType.STR, None,
       "Pulsar authentication plugin (Milvus pulsar.authPlugin): token, tls, basic, oauth2, or its Java "
       "class name; unset: none"),
    _k("mq.pulsar.auth.params", KeyType.STR, None,
       "the plugin's parameters (Milvus pulsar.authParams), 'key:value,...' or JSON, e.g. token:<jwt>; "
       "a secret: set it with DELTANODE_MQ_PULSAR_AUTH_PARAMS"),
    _k("mq.pulsar.tls.trust.certs.file", KeyType.LOCALPATH, None,
       "CA certificates (PEM) that pulsar+ssl:// connections trust"),
    _k("mq.pulsar.tls.allow.insecure", KeyType.BOOL, "false", "accept any certificate from the Pulsar broker"),
    _k("mq.pulsar.tls.validate.hostname", KeyType.BOOL, "false",
       "check that the Pulsar broker's certificate names its host"),
    _k("mq.pulsar.listener.name", KeyType.STR, None,
       "the broker's advertised listener (advertisedListeners) to reach it by, e.g. one through a proxy or NAT; "
       "unset: its internal one"),
    _k("mq.pulsar.receiver.queue.size", KeyType.INT, "1000",
       "messages a reader of a pchannel range prefetches (never more than its range holds); 1 for a "
       "Pulsar-protocol broker that mis-delivers a fuller queue", min=1),
    _k("mq.pchannel.prefix", KeyType.STR, "by-dev-rootcoord-dml",
       "name prefix of the physical DML channels (topics)"),
    _k("mq.pchannel.count", KeyType.INT, "16", "number of physical DML channels", min=1),
    _k("storage.root", KeyType.PATH, None,
       "root of the Delta tables: a path (relative to the working directory) or a URI",
       required=True),
    _k("storage.fsync", KeyType.BOOL, "true",
       "on a filesystem root: fsync every binlog file, commit file and new directory before a commit counts "
       "as done, so that a power cut loses no committed row (docs/durability.md); false: faster, and a "
       "machine crash may leave tables naming lost files (a killed process never does); ignored on s3://"),
    _k("storage.s3.endpoint", KeyType.URL, None,
       "S3-compatible server for an s3:// storage.root (http:// or https://host:port); unset: AWS's",
       schemes=("http", "https")),
    _k("storage.s3.region", KeyType.STR, None, "S3 region; unset: from the environment (AWS_REGION), else us-east-1"),
    _k("storage.s3.access.key.id", KeyType.STR, None,
       "S3 access key; unset: the environment's credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE, instance role)"),
    _k("storage.s3.secret.access.key", KeyType.STR, None,
       "S3 secret key; a secret: set it with DELTANODE_STORAGE_S3_SECRET_ACCESS_KEY, or leave it unset"),
    _k("storage.s3.session.token", KeyType.STR, None, "S3 session token (temporary credentials); unset: none"),
    _k("storage.s3.ca.file", KeyType.LOCALPATH, None,
       "PEM bundle trusted for https:// to the S3 endpoint (binlog writes and commits; delta-rs uses the "
       "system's trust store)"),
    _k("embedded.etcd", KeyType.BOOL, "false",
       "standalone only: start etcd (Debian binary) on the etcd.endpoints port"),
    _k("embedded.broker", KeyType.BOOL, "false",
       "standalone only: start the broker of mq.type on its configured port, its data under "
       "embedded.data.dir (kafka: Apache Kafka, single node; pulsar: Apache Pulsar standalone)"),
    _k("embedded.broker.heap", KeyType.SIZE, "512m",
       "standalone only: the embedded broker's JVM heap (-Xmx)", min=64 << 20),
    _k("embedded.data.dir", KeyType.LOCALPATH, "var", "data and logs of the embedded services"),
    _k("datanode.batch.max.messages", KeyType.INT, "1000",
       "most MQ messages one cycle reads from a pchannel (per lane)", min=1),
    _k("datanode.batch.max.bytes", KeyType.SIZE, "256m",
       "most MQ payload bytes one cycle reads from all pchannels together (for the vchannels near "
       "their pchannel's head), shared fairly between pchannels", min=1),
    _k("datanode.catchup.max.bytes", KeyType.SIZE, "64m",
       "most MQ payload bytes one cycle reads for vchannels catching up far behind their pchannel's head",
       min=1),
    _k("datanode.cycle.max.seconds", KeyType.DURATION, "0s",
       "longest a cycle's Spark job should take: the cycle reads as many messages as the last cycles' "
       "cost per message allows (0: no bound, the default: a node past its capacity drains a backlog "
       "fastest in long cycles, docs/architecture.md)", min=0),
    _k("datanode.trigger.interval", KeyType.DURATION, "1s", "how often the pipeline runs a cycle, at most (at "
       "once while a backlog remains)", min=0),
    _k("datanode.trigger.files.rate", KeyType.FLOAT, "250",
       "binlog files a second past which cycles space out, so that each file carries more rows (a cycle "
       "writes a file per vchannel with rows; docs/benchmarks.md, \"The pace of cycles\"); 0: latency "
       "first, cycles back to back while busy", min=0),
    _k("datanode.trigger.max.interval", KeyType.DURATION, "10s",
       "the longest the files' rate spaces cycles", min=0),
    _k("datanode.sync.max.delay", KeyType.DURATION, "0s",
       "longest rows may wait in binlog files before their collection is committed (0: at the end of "
       "the cycle that read them)", min=0),
    _k("datanode.checkpoint.interval", KeyType.DURATION, "10s",
       "longest a vchannel's checkpoint may lag while only ticks arrive (budget permitting)", min=0),
    _k("datanode.checkpoint.max.rate", KeyType.FLOAT, "20",
       "most commits per second the node makes only to move idle vchannels' checkpoints", min=0.1),
    _k("datanode.read.splits", KeyType.INT, "2", "Spark tasks per cycle (the cores a busy pchannel can use)", min=1),
    _k("datanode.segment.max.size", KeyType.SIZE, "1024m",
       "segment size the size seal policy measures against (Milvus dataCoord.segment.maxSize)", min=1),
    _k("datanode.segment.seal.proportion", KeyType.FLOAT, "0.12",
       "a Growing segment holding this share of datanode.segment.max.size is sealed (Milvus "
       "dataCoord.segment.sealProportion)", min=0.0001),
    _k("datanode.segment.max.life", KeyType.DURATION, "86400s",
       "a Growing segment this old (its vchannel's clock) is sealed (Milvus dataCoord.segment.maxLife)", min=1),
    _k("datanode.segment.max.idle", KeyType.DURATION, "600s",
       "a Growing segment without a row this long is sealed, once datanode.segment.min.size.from.idle big "
       "(Milvus dataCoord.segment.maxIdleTime)", min=1),
    _k("datanode.segment.min.size.from.idle", KeyType.SIZE, "16m",
       "smallest segment the idle seal policy seals (Milvus dataCoord.segment.minSizeFromIdleToSealed)", min=0),
    _k("datanode.compaction.interval", KeyType.DURATION, "600s",
       "how often the DataNode rewrites its segments' small binlog files into larger ones (0: never)", min=0),
    _k("datanode.compaction.min.files", KeyType.INT, "16",
       "small binlog files a segment needs before compaction rewrites them", min=2),
    _k("datanode.compaction.target.size", KeyType.SIZE, "64m",
       "size of the files compaction writes; files this large are left alone", min=1),
    _k("datanode.compaction.retention", KeyType.DURATION, "3h",
       "how long files that compaction replaced stay on disk for readers of older table versions "
       "(Milvus dataCoord.gc.dropTolerance)", min=0),
    _k("datanode.compaction.orphan.retention", KeyType.DURATION, "24h",
       "how long a binlog file no commit added (written before a crash, a refused commit) stays on disk "
       "before the hourly sweep deletes it; at least datanode.compaction.retention "
       "(Milvus dataCoord.gc.missingTolerance)", min=3600),
    _k("datanode.compaction.deleted.ratio", KeyType.FLOAT, "0.2",
       "a binlog file whose deletion vector deletes this share of its rows is rewritten without them, alone "
       "or with its segment's small files; above 1: never (Milvus dataCoord.compaction.single.ratio.threshold)",
       min=0.0001),
    _k("datanode.warmup", KeyType.BOOL, "true",
       "run one throw-away Spark job at start, beside registering and loading vchannels, that starts Spark's "
       "Python workers and imports and decodes as a cycle's tasks do, so the first cycle does not pay for it; "
       "and again after 40 s without a job, before Spark stops idle workers at a minute"),
    _k("datanode.watch.workers", KeyType.INT, "32",
       "channel watches the DataNode carries out at once (they mostly wait on storage and etcd; the more "
       "wait together, the more answers share one etcd transaction)", min=1),
    _k("datanode.address", KeyType.STR, "127.0.0.1", "address the DataNode registers in its session"),
    _k("session.ttl", KeyType.DURATION, "30s", "etcd lease TTL of a node session", min=1),
    _k("datacoord.watch.timeout", KeyType.DURATION, "300s",
       "how long a channel watch may stay unacknowledged before it is reassigned", min=1),
    _k("datacoord.channel.balance", KeyType.BOOL, "true",
       "move channels, one at a time, from the most loaded DataNode to one holding two or more fewer "
       "(a DataNode that joins takes over its share)"),
    _k("standalone.timetick.interval", KeyType.DURATION, "200ms",
       "standalone only: a TimeTick on every pchannel this often, as Milvus's rootcoord writes them "
       "(0: none; then only producers' ticks move checkpoints and flushes)", min=0),
    _k("standalone.progress.interval", KeyType.DURATION, "10s",
       "standalone: how often progress is logged", min=0.1),
    _k("metrics.port", KeyType.INT, "0",
       "DataNode driver: serve Prometheus metrics on /metrics, liveness on /healthz and readiness on /readyz "
       "at this port (0: off)",
       min=0),
    _k("metrics.address", KeyType.STR, "127.0.0.1",
       "address the metrics server binds (0.0.0.0: every interface, for a Prometheus on another host)"),
    _k("log.level", KeyType.ENUM, "INFO", "log level of the DeltaNode processes",
       choices=("DEBUG", "INFO", "WARNING", "ERROR")),
]}

#: Keys earlier versions knew, and why they are gone.
REMOVED_KEYS = {
    "datanode.handoff.dir": "payloads no longer cross the JVM (a task reads and writes in one Python "
                            "worker); remove the line",
    "datanode.checkpoint.dir": "the pipeline runs no Spark streaming query, so it keeps no Spark "
                               "checkpoint (Delta holds the checkpoints); remove the line",
}


def unknown_key_msg(key: str) -> str:
    if key in REMOVED_KEYS:
        return f"{key!r} is no longer used: {REMOVED_KEYS[key]}"
    msg = f"unknown key {key!r}"
    guess = difflib.get_close_matches(key.lower(), list(KEYS), n=1, cutoff=0.6)
    if not guess and key.lower().startswith(("sprak.", "sparks.", "spak.", "saprk.")):
        guess = ["spark." + key.split(".", 1)[1]]
    if guess:
        msg += f" (did you mean {guess[0]!r}?)"
    return msg
