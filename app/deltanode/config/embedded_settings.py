"""What ``standalone`` starts itself (``Settings.embedded``): kept to the standard library, so that
``spark-submit.sh`` checks the embedded ports before any JVM starts without loading the node."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Conf


@dataclass(frozen=True)
class EmbeddedPort:
    """A loopback port an embedded service listens on, and the conf key that chose it."""

    port: int
    key: str            # "etcd.endpoints", "mq.kafka.bootstrap.servers", "mq.pulsar.service.url"
    source: str         # where the key was set: "conf/x.conf:3", "env DELTANODE_...", "default"

    @property
    def origin(self) -> str:
        """``set by KEY at SOURCE``, for a message about a port that is taken."""
        return f"set by {self.key} at {self.source}"


@dataclass(frozen=True, kw_only=True)
class EmbeddedSettings:
    """What ``standalone`` starts itself: etcd, the broker of ``mq.type``, their data directory."""

    etcd: bool
    broker: bool
    data_dir: Path
    etcd_port: EmbeddedPort = EmbeddedPort(2379, "etcd.endpoints", "default")
    broker_port: EmbeddedPort = EmbeddedPort(9092, "mq.kafka.bootstrap.servers", "default")
    broker_kind: str = "kafka"          # mq.type: kafka (Apache Kafka) or pulsar (Apache Pulsar standalone)
    broker_heap: int = 512 << 20        # bytes of the broker JVM's heap

    @classmethod
    def of(cls, conf: Conf) -> EmbeddedSettings:
        broker_key = conf.broker_key
        return cls(etcd=conf.get("embedded.etcd"), broker=conf.get("embedded.broker"),
                   data_dir=Path(conf.get("embedded.data.dir")),
                   etcd_port=EmbeddedPort(conf.hostports("etcd.endpoints")[0][1], "etcd.endpoints",
                                          conf.source("etcd.endpoints")),
                   broker_port=EmbeddedPort(conf.broker_hostports()[0][1], broker_key, conf.source(broker_key)),
                   broker_kind=conf.get("mq.type"), broker_heap=conf.get("embedded.broker.heap"))
