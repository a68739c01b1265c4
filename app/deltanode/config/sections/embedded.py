"""What ``standalone`` starts itself (``embedded.*``): etcd, the broker, their data directory and ports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
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
    """What ``standalone`` starts itself: etcd, the broker of ``mq.type``, their data directory.
    Runs in the launcher (``spark-submit.sh`` checks the ports before any JVM starts) and the driver."""

    etcd: bool
    broker: bool
    data_dir: Path
    etcd_port: EmbeddedPort = EmbeddedPort(port=2379, key="etcd.endpoints", source="default")
    broker_port: EmbeddedPort = EmbeddedPort(port=9092, key="mq.kafka.bootstrap.servers", source="default")
    broker_kind: str = "kafka"          # mq.type: kafka (Apache Kafka) or pulsar (Apache Pulsar standalone)
    broker_heap: int = 512 << 20        # bytes of the broker JVM's heap
