"""DeltaNode configuration: ``key = value`` files in the style of spark-defaults.conf.

File syntax
  * one ``key = value`` per line; blank lines and lines starting with ``#`` are ignored;
  * `` # text`` after a value (a ``#`` preceded by white space) is a comment;
  * one pair of matching quotes around a value of a DeltaNode key is removed;
  * a key may be set once per file; a line without ``=`` is an error.

Keys
  Every DeltaNode key is declared in ``KEYS`` below (name, type, default or required, doc);
  an unknown key is an error. Any ``spark.*`` key is passed to Spark untouched
  (``Conf.spark_conf()``).

Environment
  ``DELTANODE_<KEY>`` overrides a key: the key upper-cased with ``.`` and ``-`` replaced by
  ``_`` (``DELTANODE_STORAGE_ROOT=/data/delta`` sets ``storage.root``). Spark keys work the same
  way (``DELTANODE_SPARK_MASTER=local[4]`` sets ``spark.master``); a Spark key with capitals
  (``spark.driver.extraJavaOptions``) is matched when it is in the file or is one of
  ``COMMON_SPARK_KEYS``, otherwise the name is lower-cased with ``_`` read as ``.``.
  An empty variable counts as unset. An unknown ``DELTANODE_*`` variable is an error.

Broker client settings
  ``mq.kafka.<property>`` (besides ``mq.kafka.bootstrap.servers``) is a librdkafka property
  given to every Kafka client DeltaNode makes (``mq.kafka.security.protocol = SASL_SSL``,
  ``mq.kafka.sasl.mechanism``, ``mq.kafka.ssl.ca.location``, ...), like ``spark.*`` to Spark.
  Properties DeltaNode must own to stay exactly-once (``KAFKA_RESERVED``) are refused. Secrets
  belong in the environment: ``DELTANODE_MQ_KAFKA_SASL_PASSWORD`` sets ``mq.kafka.sasl.password``
  (lower-cased, ``_`` read as ``.``). Pulsar's authentication and TLS are keys of their own
  (``mq.pulsar.auth.*``, ``mq.pulsar.tls.*``), as are etcd's (``etcd.ssl.*``, ``etcd.auth.*``).

Secrets
  A secret (a password, token, secret key: ``is_secret``) shows as ``****`` wherever the conf is
  printed. It comes from the environment (above), or from a file: ``<key>.file = path`` (or
  ``DELTANODE_<KEY>_FILE``) reads the value from that file, a trailing newline removed, as
  Kubernetes and Docker mount secrets (``etcd.auth.password.file = /run/secrets/etcd-password``).

Precedence: environment, then file, then default.

Relative paths (``storage.root``, ``embedded.data.dir``) resolve
against the working directory (``base_dir`` of ``load_conf``); values with a URI scheme
(``file://``, ``s3://``, ...) are kept as given.

Errors name where the value came from::

    conf/standalone.conf:12: unknown key 'etcd.endpoint' (did you mean 'etcd.endpoints'?)
    conf/standalone.conf:7: bad value for 'datanode.read.splits': 'x' is not an integer
    env DELTANODE_DATANODE_READ_SPLITS: bad value for 'datanode.read.splits': 'x' is not an integer
    conf/x.conf: missing required key 'storage.root'

``python -m deltanode.config`` prints the table of keys (Markdown).
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ConfError", "Conf", "Key", "KEYS", "ENV_PREFIX", "COMMON_SPARK_KEYS", "load_conf",
    "parse_size", "parse_duration", "parse_bool", "parse_hostports", "env_name", "is_secret", "keys_markdown",
]

ENV_PREFIX = "DELTANODE_"
#: Set by spark-submit.sh for the driver (``deltanode.lifeline``), not conf overrides.
INTERNAL_VARIABLES = frozenset({"DELTANODE_LAUNCHER_PID"})
SPARK_PREFIX = "spark."
KAFKA_CLIENT_PREFIX = "mq.kafka."
#: Keys passed through untouched: Spark's, and librdkafka's (see module doc).
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
#: ``<secret key>.file`` names a file holding the secret (see module doc).
SECRET_FILE_SUFFIX = ".file"

#: Spark keys with capitals that environment variables can name (see module doc).
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


class ConfError(ValueError):
    """A configuration problem; the message names the key and where it was set."""


# ----------------------------------------------------------------------------- value parsers

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(us|ms|s|sec|m|min|h|d)?$", re.IGNORECASE)
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0,
                   "min": 60.0, "h": 3600.0, "d": 86400.0}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_KEY_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def parse_size(text: str) -> int:
    """Bytes from ``"64m"``, ``"256MiB"``, ``"1.5g"``, ``"4096"`` (1k = 1024 bytes)."""
    m = _SIZE_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a size (examples: 4096, 64k, 256m, 1g)")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_duration(text: str) -> float:
    """Seconds from ``"1s"``, ``"500ms"``, ``"5m"``, ``"2h"``, ``"1d"``; a bare number is seconds."""
    m = _DURATION_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration (examples: 500ms, 1s, 5m, 2h)")
    unit = m.group(2).lower() if m.group(2) else None
    return float(m.group(1)) * _DURATION_UNITS[unit]


def parse_bool(text: str) -> bool:
    t = str(text).strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (use true or false)")


def parse_hostports(text: str) -> list[tuple[str, int]]:
    """``"h1:2379,h2:2379"`` -> ``[("h1", 2379), ("h2", 2379)]``; an ``http://`` prefix is allowed."""
    out = []
    for part in str(text).split(","):
        item = part.strip()
        item = re.sub(r"^[A-Za-z][A-Za-z0-9+.\-]*://", "", item).rstrip("/")
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{part.strip()!r} is not host:port")
        out.append((host, int(port)))
    return out


def _parse_int(text: str) -> int:
    try:
        return int(str(text).strip().replace("_", ""))
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _parse_float(text: str) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def is_secret(key: str) -> bool:
    """Whether ``key`` holds a secret: masked when shown, and readable from ``<key>.file``. A path
    key is not one (``etcd.ssl.tls.key`` names the key's file, which is readable only by its owner)."""
    spec = KEYS.get(key)
    return bool(_SECRET_RE.search(key)) and (spec is None or spec.type == KeyType.STR)


def _secret_of_file_key(key: str) -> str | None:
    """The secret key a ``<key>.file`` key gives the file of, or None when ``key`` is no such key."""
    if not key.endswith(SECRET_FILE_SUFFIX):
        return None
    stem = key[:-len(SECRET_FILE_SUFFIX)]
    return stem if (stem in KEYS or stem.startswith(KAFKA_CLIENT_PREFIX)) and is_secret(stem) else None


def env_name(key: str) -> str:
    """The environment variable that overrides ``key``: ``storage.root`` -> ``DELTANODE_STORAGE_ROOT``."""
    return ENV_PREFIX + re.sub(r"[.\-]", "_", key).upper()


# ----------------------------------------------------------------------------- the key table

class KeyType(enum.StrEnum):
    """How a key's text is parsed (and shown in the key table)."""

    STR = "str"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    SIZE = "size"              # 64m, 1g: bytes
    DURATION = "duration"      # 1s, 500ms: seconds
    ENUM = "enum"              # one of ``Key.choices``
    PATH = "path"              # a local path (resolved against the conf file's folder) or a URI
    LOCALPATH = "localpath"    # a local path only
    HOSTPORTS = "hostports"    # host:port[,host:port]
    URL = "url"                # a URL with one of ``Key.schemes``


@dataclass(frozen=True)
class Key:
    """One known key. ``default`` is text, parsed like a file value; None with required=False
    means the key has no value unless set."""

    name: str
    type: KeyType
    default: str | None
    doc: str
    required: bool = False
    choices: tuple[str, ...] = ()
    min: float | None = None
    schemes: tuple[str, ...] = ()

    def parse(self, raw: str, base_dir: Path) -> Any:
        """The typed value of ``raw``; raises ValueError with a short reason."""
        text = raw.strip()
        if text == "":
            raise ValueError("the value is empty")
        t = self.type
        if t == KeyType.STR:
            value: Any = text
        elif t == KeyType.INT:
            value = _parse_int(text)
        elif t == KeyType.FLOAT:
            value = _parse_float(text)
        elif t == KeyType.BOOL:
            value = parse_bool(text)
        elif t == KeyType.SIZE:
            value = parse_size(text)
        elif t == KeyType.DURATION:
            value = parse_duration(text)
        elif t == KeyType.ENUM:
            for choice in self.choices:
                if text.lower() == choice.lower():
                    return choice
            raise ValueError(f"{text!r} is not one of {' | '.join(self.choices)}")
        elif t in (KeyType.PATH, KeyType.LOCALPATH):
            if _URI_RE.match(text):
                if t == KeyType.PATH:
                    return text
                if not text.startswith("file://"):
                    raise ValueError(f"{text!r} must be a local directory, not a URI")
                text = text[len("file://"):]
            p = Path(os.path.expanduser(text))
            return str(p if p.is_absolute() else (base_dir / p).resolve())
        elif t == KeyType.HOSTPORTS:
            parse_hostports(text)
            return ",".join(p.strip() for p in text.split(","))
        elif t == KeyType.URL:
            scheme = text.split("://", 1)[0] if "://" in text else ""
            if scheme not in self.schemes or not text.split("://", 1)[1]:
                raise ValueError(f"{text!r} is not a URL starting with "
                                 + " or ".join(s + "://" for s in self.schemes))
            return text
        else:  # pragma: no cover - table error
            raise AssertionError(f"unknown key type {t}")
        if self.min is not None and value < self.min:
            unit = {KeyType.SIZE: " bytes", KeyType.DURATION: " s"}.get(t, "")
            raise ValueError(f"{text!r} is below the minimum {self.min:g}{unit}")
        return value

    @property
    def type_doc(self) -> str:
        if self.type == KeyType.ENUM:
            return " | ".join(self.choices)
        return {KeyType.SIZE: "size (64m)", KeyType.DURATION: "duration (1s, 500ms)",
                KeyType.HOSTPORTS: "host:port[,host:port]", KeyType.PATH: "path or URI",
                KeyType.LOCALPATH: "local path"}.get(self.type, str(self.type))


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
    _k("mq.pulsar.receiver.queue.size", KeyType.INT, "1000",
       "messages a reader of a pchannel range prefetches (never more than its range holds); 1 for a "
       "Pulsar-protocol broker that mis-delivers a fuller queue", min=1),
    _k("mq.pchannel.prefix", KeyType.STR, "by-dev-rootcoord-dml",
       "name prefix of the physical DML channels (topics)"),
    _k("mq.pchannel.count", KeyType.INT, "16", "number of physical DML channels", min=1),
    _k("storage.root", KeyType.PATH, None,
       "root of the Delta tables: a path (relative to the working directory) or a URI",
       required=True),
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
    _k("datanode.trigger.interval", KeyType.DURATION, "1s", "how often the pipeline runs a cycle (at once while "
       "a backlog remains; up to twice as often while its cycles with rows take half of it or more)", min=0),
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
       "Python workers and imports and decodes as a cycle's tasks do, so the first cycle does not pay for it"),
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
       "DataNode driver: serve Prometheus metrics on /metrics and health on /healthz at this port (0: off)",
       min=0),
    _k("metrics.address", KeyType.STR, "127.0.0.1",
       "address the metrics server binds (0.0.0.0: every interface, for a Prometheus on another host)"),
    _k("log.level", KeyType.ENUM, "INFO", "log level of the DeltaNode processes",
       choices=("DEBUG", "INFO", "WARNING", "ERROR")),
]}

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


# ----------------------------------------------------------------------------- Conf

class Conf:
    """Typed, validated configuration. Build it with ``load_conf`` or ``Conf.from_dict``."""

    def __init__(self, values: Mapping[str, Any], raw: Mapping[str, str],
                 sources: Mapping[str, str], passthrough: Mapping[str, str],
                 path: str | None, base_dir: Path) -> None:
        self._values = dict(values)
        self._raw = dict(raw)
        self._sources = dict(sources)
        self._passthrough = dict(passthrough)   # spark.* and mq.kafka.* keys, as written
        self.path = path
        self.base_dir = base_dir

    # -- lookup
    def get(self, key: str) -> Any:
        """The typed value of a known key (None if it has none), or a passed-through value (None if unset)."""
        if key in KEYS:
            return self._values.get(key)
        if key.startswith(PASSTHROUGH_PREFIXES):
            return self._passthrough.get(key)
        raise KeyError(_unknown_key_msg(key))

    __getitem__ = get

    def __contains__(self, key: str) -> bool:
        return (key in KEYS and self._values.get(key) is not None) or key in self._passthrough

    def raw(self, key: str) -> str | None:
        """The text the value was parsed from."""
        if key.startswith(PASSTHROUGH_PREFIXES) and key not in KEYS:
            return self._passthrough.get(key)
        self.get(key)
        return self._raw.get(key)

    def source(self, key: str) -> str:
        """``"conf/x.conf:12"``, ``"env DELTANODE_X"``, ``"default"`` (or ``"unset"``)."""
        self.get(key)
        return self._sources.get(key, "unset")

    def spark_conf(self) -> dict[str, str]:
        """Every spark.* key, untouched, in file order."""
        return {k: v for k, v in self._passthrough.items() if k.startswith(SPARK_PREFIX)}

    def kafka_client_conf(self) -> dict[str, str]:
        """The librdkafka properties of the ``mq.kafka.*`` keys (prefix removed)."""
        return {k[len(KAFKA_CLIENT_PREFIX):]: v for k, v in self._passthrough.items()
                if k.startswith(KAFKA_CLIENT_PREFIX)}

    @property
    def broker_key(self) -> str:
        """The key that names the broker of ``mq.type``."""
        return "mq.pulsar.service.url" if self.get("mq.type") == "pulsar" else "mq.kafka.bootstrap.servers"

    def broker_hostports(self) -> list[tuple[str, int]]:
        """The broker's ``[(host, port), ...]``, whatever ``mq.type``."""
        if self.get("mq.type") == "pulsar":
            url = urllib.parse.urlsplit(self.get("mq.pulsar.service.url"))
            return [(url.hostname or "", url.port or 6650)]
        return self.hostports("mq.kafka.bootstrap.servers")

    def hostports(self, key: str) -> list[tuple[str, int]]:
        """``etcd.endpoints`` / ``mq.kafka.bootstrap.servers`` as ``[(host, port), ...]``."""
        return parse_hostports(self.get(key))

    def to_dict(self) -> dict[str, Any]:
        """All known keys (typed) followed by the passed-through keys."""
        out = {k: self._values.get(k) for k in KEYS}
        out.update(self._passthrough)
        return out

    def with_overrides(self, overrides: Mapping[str, Any]) -> Conf:
        """A copy with some keys replaced (values as in a file, or plain Python values)."""
        entries = {k: (self._raw[k], self._sources[k]) for k in self._raw
                   if self._sources.get(k) != "default"}
        entries.update({k: (v, self._sources[k]) for k, v in self._passthrough.items()})
        for k, v in overrides.items():
            entries[k] = (_to_text(v), "override")
        return _build(entries, self.path or "<code>", self.base_dir, self.path)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, base_dir: str | Path | None = None) -> Conf:
        """A Conf from a mapping (strings as in a file, or bool/int/float); for tests and tools."""
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        return _build({k: (_to_text(v), "code") for k, v in values.items()}, "<code>", base, None)

    def describe(self) -> str:
        """``key = value  # source`` lines, for --print-conf; secret values show as ``****``."""
        lines = []
        for k, spec in KEYS.items():
            raw = self._raw.get(k)
            if spec.type in (KeyType.PATH, KeyType.LOCALPATH) and raw is not None:
                raw = self._values[k]
            lines.append(f"{k} = {'' if raw is None else _masked(k, raw)}  # {self._sources.get(k, 'unset')}")
        for k, v in self._passthrough.items():
            lines.append(f"{k} = {_masked(k, v)}  # {self._sources[k]}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        shown = {k: "****" if v is not None and is_secret(k) else v for k, v in self.to_dict().items()}
        return f"Conf(path={self.path!r}, {shown!r})"


def _masked(key: str, value: str) -> str:
    return "****" if value and is_secret(key) else value


def _to_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


#: Keys earlier versions knew, and why they are gone.
REMOVED_KEYS = {
    "datanode.handoff.dir": "payloads no longer cross the JVM (a task reads and writes in one Python "
                            "worker); remove the line",
    "datanode.checkpoint.dir": "the pipeline runs no Spark streaming query, so it keeps no Spark "
                               "checkpoint (Delta holds the checkpoints); remove the line",
}


def _unknown_key_msg(key: str) -> str:
    if key in REMOVED_KEYS:
        return f"{key!r} is no longer used: {REMOVED_KEYS[key]}"
    msg = f"unknown key {key!r}"
    guess = difflib.get_close_matches(key.lower(), list(KEYS), n=1, cutoff=0.6)
    if not guess and key.lower().startswith(("sprak.", "sparks.", "spak.", "saprk.")):
        guess = ["spark." + key.split(".", 1)[1]]
    if guess:
        msg += f" (did you mean {guess[0]!r}?)"
    return msg


def _strip_value(value: str, spark: bool) -> str:
    value = re.sub(r"\s+#.*$", "", value).strip()
    if not spark and len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def _read_file(path: Path, display: str) -> dict[str, tuple[str, str]]:
    """``{key: (raw value, "file:line")}`` from a conf file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfError(f"{display}: conf file not found") from None
    except OSError as e:
        raise ConfError(f"{display}: cannot read the conf file: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfError(f"{display}: the conf file is not UTF-8 text") from None
    entries: dict[str, tuple[str, str]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{display}:{lineno}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep or not key or not _KEY_RE.match(key):
            raise ConfError(f"{where}: malformed line {stripped[:60]!r} (expected 'key = value')")
        if key in entries:
            raise ConfError(f"{where}: key {key!r} is set twice (first at {entries[key][1]})")
        if key not in KEYS and not key.startswith(PASSTHROUGH_PREFIXES) and _secret_of_file_key(key) is None:
            raise ConfError(f"{where}: {_unknown_key_msg(key)}")
        entries[key] = (_strip_value(value, key.startswith(PASSTHROUGH_PREFIXES) and key not in KEYS), where)
    return entries


def _env_entries(env: Mapping[str, str], passthrough_keys: Iterable[str]) -> dict[str, tuple[str, str]]:
    known = {env_name(k): k for k in KEYS}
    known.update({env_name(k + SECRET_FILE_SUFFIX): k + SECRET_FILE_SUFFIX for k in KEYS if is_secret(k)})
    spark_names = {env_name(k): k for k in (*COMMON_SPARK_KEYS, *passthrough_keys)}
    out: dict[str, tuple[str, str]] = {}
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var in INTERNAL_VARIABLES:
            continue
        value = env[var]
        if value == "":
            continue
        where = f"env {var}"
        if var in known:
            out[known[var]] = (_strip_value(value, False), where)
        elif var in spark_names:
            out[spark_names[var]] = (value, where)
        elif var.startswith((ENV_PREFIX + "SPARK_", ENV_PREFIX + "MQ_KAFKA_")) and not var.endswith("_"):
            out[var[len(ENV_PREFIX):].lower().replace("_", ".")] = (value, where)
        elif var in {env_name(k) for k in REMOVED_KEYS}:
            key = next(k for k in REMOVED_KEYS if env_name(k) == var)
            raise ConfError(f"{where}: {_unknown_key_msg(key)}")
        else:
            msg = (f"{where}: unknown variable; {ENV_PREFIX}* variables override conf keys, "
                   f"e.g. {env_name('storage.root')} for 'storage.root'")
            guess = difflib.get_close_matches(var, list(known), n=1, cutoff=0.7)
            if guess:
                msg += f" (did you mean {guess[0]}?)"
            raise ConfError(msg)
    return out


def _build(entries: Mapping[str, tuple[str, str]], display: str, base_dir: Path,
           path: str | None) -> Conf:
    entries = _read_secret_files(entries, base_dir)
    values: dict[str, Any] = {}
    raw: dict[str, str] = {}
    sources: dict[str, str] = {}
    passthrough: dict[str, str] = {}
    for key, (text, where) in entries.items():
        if key in KEYS:
            continue
        if not key.startswith(PASSTHROUGH_PREFIXES):
            raise ConfError(f"{where}: {_unknown_key_msg(key)}")
        prop = key[len(KAFKA_CLIENT_PREFIX):]
        if key.startswith(KAFKA_CLIENT_PREFIX) and prop in KAFKA_RESERVED:
            raise ConfError(f"{where}: {key!r} cannot be set: {KAFKA_RESERVED[prop]}")
        passthrough[key] = text
        sources[key] = where
    for key, spec in KEYS.items():
        if key in entries:
            text, where = entries[key]
        elif spec.required:
            raise ConfError(f"{display}: missing required key {key!r} "
                            f"(set it in the file or with {env_name(key)})")
        elif spec.default is None:
            continue
        else:
            text, where = spec.default, "default"
        try:
            values[key] = spec.parse(text, base_dir)
        except ValueError as e:
            raise ConfError(f"{where}: bad value for {key!r}: {e}") from None
        raw[key] = text
        sources[key] = where
    conf = Conf(values, raw, sources, passthrough, path, base_dir)
    _check_cross(conf)
    return conf


def _read_secret_files(entries: Mapping[str, tuple[str, str]], base_dir: Path) -> dict[str, tuple[str, str]]:
    """``entries`` with each ``<key>.file`` replaced by ``<key>`` and the content of the file it names.
    A key set both ways is an error, unless one of the two comes from the environment, which wins."""
    out = dict(entries)
    for key, (text, where) in entries.items():
        secret = _secret_of_file_key(key)
        if secret is None:
            continue
        del out[key]
        if secret in entries:
            other = entries[secret][1]
            if other.startswith("env ") != where.startswith("env "):
                if where.startswith("env "):
                    out[secret] = _secret_from_file(secret, text, where, base_dir)
                continue
            raise ConfError(f"{where}: {key!r} and {secret!r} ({other}) are both set: keep one")
        out[secret] = _secret_from_file(secret, text, where, base_dir)
    return out


def _secret_from_file(key: str, text: str, where: str, base_dir: Path) -> tuple[str, str]:
    path = Path(os.path.expanduser(text.strip()))
    path = path if path.is_absolute() else base_dir / path
    try:
        value = path.read_text(encoding="utf-8").rstrip("\r\n")   # an editor's last newline is not the secret's
    except OSError as e:
        raise ConfError(f"{where}: cannot read the file of {key!r}, {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfError(f"{where}: the file of {key!r}, {path}, is not UTF-8 text") from None
    if not value:
        raise ConfError(f"{where}: the file of {key!r}, {path}, is empty")
    return value, f"{where} (file {path})"


def _check_cross(conf: Conf) -> None:
    def fail(key: str, msg: str) -> None:
        raise ConfError(f"{conf.source(key)}: bad value for {key!r}: {msg}")

    root = str(conf.get("storage.root"))
    scheme = root.split("://", 1)[0].lower() if "://" in root else "file"
    if scheme not in ("file", "s3"):
        fail("storage.root", f"{root!r}: Delta commits need an atomic put-if-absent, which DeltaNode has for a "
                             f"local or mounted filesystem (a path or file://) and for S3 (s3://bucket/prefix)")
    milvus_root = conf.get("milvus.meta.root")
    if milvus_root is not None:
        own, theirs = conf.get("etcd.root").strip("/"), milvus_root.strip("/")
        if not theirs:
            fail("milvus.meta.root", "empty: give the Milvus meta root, e.g. by-dev/meta")
        if own == theirs or own.startswith(theirs + "/"):
            blamed = "milvus.meta.root" if conf.source("etcd.root") == "default" else "etcd.root"
            where = "the" if own == theirs else "inside the"
            fail(blamed, f"etcd.root {conf.get('etcd.root')!r} ({conf.source('etcd.root')}) is {where} Milvus "
                         f"meta root {milvus_root!r} (milvus.meta.root): DeltaNode never writes under Milvus's "
                         f"keys; give it a root of its own, e.g. deltanode/meta")
    for prefix in ("etcd.", "milvus.etcd."):
        _check_etcd_security(conf, prefix, fail)
    if conf.get("embedded.etcd"):
        eps = conf.hostports("etcd.endpoints")
        if len(eps) != 1 or eps[0][0] not in _LOOPBACK:
            fail("etcd.endpoints", f"{conf.get('etcd.endpoints')!r}: with embedded.etcd = true "
                                   "it must be one loopback endpoint, e.g. 127.0.0.1:2379")
    if conf.get("embedded.broker"):
        eps = conf.broker_hostports()
        if len(eps) != 1 or eps[0][0] not in _LOOPBACK:
            example = "pulsar://127.0.0.1:6650" if conf.get("mq.type") == "pulsar" else "127.0.0.1:9092"
            fail(conf.broker_key, f"{conf.get(conf.broker_key)!r}: with embedded.broker = true it "
                                  f"must be one loopback endpoint, e.g. {example}")


def _check_etcd_security(conf: Conf, prefix: str, fail: Callable[[str, str], None]) -> None:
    """Security keys that would be ignored are errors: a user who set them expects them to apply."""
    def given(name: str) -> bool:
        return conf.source(prefix + name) not in ("default", "unset")

    named = [n for n in ("ssl.enabled", "ssl.tls.ca.cert", "ssl.tls.cert", "ssl.tls.key", "ssl.server.name",
                         "auth.enabled", "auth.username", "auth.password") if given(n)]
    if prefix == "milvus.etcd." and conf.get("milvus.etcd.endpoints") is None:
        if named:
            fail(prefix + named[0], "milvus.etcd.endpoints is unset, so Milvus's etcd is DeltaNode's and etcd.* "
                                    "apply to it: set etcd.* instead, or set milvus.etcd.endpoints")
        return
    endpoints = conf.get(prefix + "endpoints")
    if not conf.get(prefix + "ssl.enabled"):
        if any(n.startswith("ssl.") for n in named):
            fail(prefix + next(n for n in named if n.startswith("ssl.")),
                 f"{prefix}ssl.enabled is false: set it to true for TLS, or remove the line")
        if "https://" in endpoints:
            fail(prefix + "endpoints", f"{endpoints!r} names https:// while {prefix}ssl.enabled is false")
    if given("ssl.tls.cert") != given("ssl.tls.key"):
        fail(prefix + ("ssl.tls.key" if given("ssl.tls.cert") else "ssl.tls.cert"),
             f"a client certificate needs both {prefix}ssl.tls.cert and {prefix}ssl.tls.key")
    if conf.get(prefix + "auth.enabled"):
        for name in ("auth.username", "auth.password"):
            if conf.get(prefix + name) is None:
                fail(prefix + "auth.enabled", f"true, but {prefix}{name} is unset")
    elif given("auth.username") or given("auth.password"):
        fail(prefix + ("auth.username" if given("auth.username") else "auth.password"),
             f"{prefix}auth.enabled is false: set it to true to log in, or remove the line")


def load_conf(path: str | os.PathLike, env: Mapping[str, str] | None = None, *,
              base_dir: str | os.PathLike | None = None) -> Conf:
    """Read and validate a conf file, then apply ``DELTANODE_*`` overrides from ``env``.

    ``env`` defaults to ``os.environ``; ``base_dir`` (relative paths) to the working directory.
    Raises ConfError naming the key, the file and the line (or the variable).
    """
    env = os.environ if env is None else env
    display = os.fspath(path)
    entries = _read_file(Path(path), display)
    passthrough_in_file = [k for k in entries if k.startswith(PASSTHROUGH_PREFIXES)]
    entries.update(_env_entries(env, passthrough_in_file))
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    return _build(entries, display, base, display)


def keys_markdown() -> str:
    """The key table as Markdown (for docs/configuration.md)."""
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for k in KEYS.values():
        default = "(required)" if k.required else (k.default if k.default is not None else "")
        rows.append(f"| `{k.name}` | {k.type_doc.replace('|', chr(92) + '|')} | `{default}` | {k.doc} |")
    rows.append("| `spark.*` | text | | passed to Spark (spark-submit --conf) untouched |")
    rows.append("| `mq.kafka.*` | text | | librdkafka properties for every Kafka client (SASL, TLS, ...), "
                "untouched; not group.id, enable.auto.commit, auto.offset.reset, enable.partition.eof |")
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    print(keys_markdown())
