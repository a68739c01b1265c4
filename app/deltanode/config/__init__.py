"""DeltaNode configuration: ``key = value`` files in the style of spark-defaults.conf.

File syntax
  * one ``key = value`` per line; blank lines and lines starting with ``#`` are ignored;
  * `` # text`` after a value (a ``#`` preceded by white space) is a comment;
  * one pair of matching quotes around a value of a DeltaNode key is removed;
  * a key may be set once per file; a line without ``=`` is an error.

Keys
  Every DeltaNode key is declared in ``KEYS`` (``config.keys``: name, type, default or required, doc);
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

The package holds the configuration, each module with one job, and imports none of the layers
above it (``tests/unit/test_layers.py``); it runs in the launcher and on the driver:

- reading: ``values`` (parsers, key types), ``keys`` (the key table), ``sources`` (file,
  environment, secret files), ``checks`` (across keys), ``conf`` (``Conf``, ``load_conf``) and
  ``markdown`` (the key table for the docs); this module is their public face;
- the typed sections: ``sections`` (one frozen dataclass per concern, a module per area) and
  ``settings`` (``Settings.of``: the conf read into them, in one place). A package takes its
  section and makes its own objects of it (``mq.Broker.of``, ``delta.StorageLayout.of``);
- the Spark/JVM launch options: ``spark_conf`` (a subcommand's Spark conf and the Delta jars),
  ``jvm_options`` (DeltaNode's JVM defaults, the launcher's options) and ``jars`` (the JVM
  components bootstrap fetched).
"""

from __future__ import annotations

from .conf import Conf, load_conf
from .keys import (
    COMMON_SPARK_KEYS,
    ENV_PREFIX,
    KAFKA_RESERVED,
    KEYS,
    REMOVED_KEYS,
    SECRET_FILE_SUFFIX,
    env_name,
    is_secret,
)
from .markdown import keys_markdown
from .values import ConfError, Key, KeyType, parse_bool, parse_duration, parse_hostports, parse_size

__all__ = [
    "ConfError", "Conf", "Key", "KeyType", "KEYS", "ENV_PREFIX", "COMMON_SPARK_KEYS", "KAFKA_RESERVED", "REMOVED_KEYS",
    "SECRET_FILE_SUFFIX", "load_conf", "parse_size", "parse_duration", "parse_bool", "parse_hostports", "env_name",
    "is_secret", "keys_markdown",
]

if __name__ == "__main__":  # pragma: no cover
    print(keys_markdown())
