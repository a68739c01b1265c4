"""The seam between DeltaNode and a message queue (Kafka or Pulsar).

The pipeline needs two things of a broker: on the driver, how far each pchannel goes (its
high watermark) to plan a cycle's offset ranges; on the executors, the messages of those
ranges, in order, with the failure of one range reported apart from the others. Positions
are 64-bit integers that grow with every message (Kafka offsets; Pulsar message ids mapped
as docs/pulsar.md says). The catalog, the admin commands and standalone also create topics,
send a message and learn its position, and check that the broker answers. ``Broker`` is
small and picklable: tasks carry it, with the client settings a secured broker needs (SASL,
TLS, tokens), so executors reach the broker as the driver does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from . import kafka, pulsar
from .kafka import BrokerError, Chunk, Delivered, Gap, OffsetRange

__all__ = ["Broker", "BrokerError", "Chunk", "Delivered", "Gap", "HighWatermarks", "OffsetRange", "Sender"]


class HighWatermarks(Protocol):
    """Driver side: a long-lived metadata client."""

    def high(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The position after the last message of ``topic[partition]`` the broker reports."""

    def first(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The position of the first message the broker still holds (the high watermark when none)."""

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        """``high`` of every ``(topic, partition)``, in as few round trips as the broker allows; a
        partition the broker cannot answer for maps to its ``BrokerError``."""

    def topic_id(self, topic: str, timeout: float = 10.0) -> str:
        """The id the broker gave ``topic`` when it created it ("" where the broker has none): a
        topic deleted and created again under the same name gets a new one."""

    def close(self) -> None:
        ...


class Sender(Protocol):
    """A producer as the Milvus proxy stand-in uses it (``kafka.Sender``, ``pulsar.Sender``)."""

    def produce(self, topic: str, value: bytes, on_delivery: Delivered | None = None) -> None:
        """Queue ``value`` for ``topic``; ``on_delivery(position, error)`` once it landed or failed."""

    def flush(self, timeout: float = 30.0) -> int:
        """Block until sent; the number of messages not sent."""

    def close(self) -> None:
        ...


PULSAR_CLIENT_KEYS = ("auth.plugin", "auth.params", "tls.trust.certs.file", "tls.allow.insecure",
                      "tls.validate.hostname")


@dataclass(frozen=True)
class Broker:
    kind: str                   # "kafka" or "pulsar"
    address: str                # Kafka bootstrap servers, or a Pulsar service URL
    tenant: str = "public"      # Pulsar topics: persistent://{tenant}/{namespace}/{pchannel}
    namespace: str = "default"
    # Client settings: librdkafka properties (mq.kafka.*), or Pulsar's auth and TLS (mq.pulsar.auth.*,
    # mq.pulsar.tls.*, without the prefix). Kept out of repr: they may hold secrets.
    client: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_conf(cls, conf) -> Broker:
        """The broker of a ``config.Conf``'s ``mq.*`` keys."""
        if conf.get("mq.type") == "pulsar":
            settings = tuple((k, str(conf.get(f"mq.pulsar.{k}"))) for k in PULSAR_CLIENT_KEYS
                             if conf.get(f"mq.pulsar.{k}") not in (None, False))   # False: the client's default
            return cls("pulsar", conf.get("mq.pulsar.service.url"), conf.get("mq.pulsar.tenant"),
                       conf.get("mq.pulsar.namespace"), settings)
        return cls("kafka", conf.get("mq.kafka.bootstrap.servers"), client=tuple(conf.kafka_client_conf().items()))

    @property
    def settings(self) -> dict[str, str]:
        return dict(self.client)

    def watermarks(self) -> HighWatermarks:
        """Runs on the driver."""
        if self.kind == "pulsar":
            return pulsar.Watermarks(self.address, self.tenant, self.namespace, self.settings)
        return kafka.Watermarks(self.address, self.settings)

    def read_ranges(self, ranges: list[OffsetRange]) -> Iterator[tuple[int, Chunk | Gap | BrokerError]]:
        """Runs on executors: ``(i, chunk)`` of ``ranges[i]`` in offset order, or ``(i, BrokerError)`` once;
        ``(i, Gap)`` last when the range ended in a gap of positions."""
        if self.kind == "pulsar":
            return pulsar.read_ranges(self.address, ranges, tenant=self.tenant, namespace=self.namespace,
                                      settings=self.settings)
        return kafka.read_ranges(self.address, ranges, settings=self.settings)

    def cut_points(self, first: int, end: int, parts: int, high: int) -> list[int]:
        """Runs on the driver: up to ``parts - 1`` positions inside [first, end) where a read can start,
        to share one range among tasks; ``high``: the topic's high watermark (Kafka: evenly; Pulsar:
        only inside the ledger of its last message)."""
        return (pulsar if self.kind == "pulsar" else kafka).cut_points(first, end, parts, high)

    def create_topics(self, pchannels: list[str]) -> list[str]:
        """Create the missing pchannel topics; those created (Pulsar creates topics on first use)."""
        return kafka.create_topics(self.address, pchannels, settings=self.settings) if self.kind == "kafka" else []

    def send_each(self, payloads: dict[str, bytes]) -> dict[str, int]:
        """Send one message to each pchannel; the position each landed at."""
        if self.kind == "pulsar":
            return pulsar.send_each(self.address, payloads, self.tenant, self.namespace, self.settings)
        return kafka.send_each(self.address, payloads, settings=self.settings)

    def sender(self) -> Sender:
        if self.kind == "pulsar":
            return pulsar.Sender(self.address, self.tenant, self.namespace, self.settings)
        return kafka.Sender(self.address, self.settings)

    def ping(self, probe_topic: str, timeout: float = 5.0) -> None:
        """Raise BrokerError unless the broker answers (``probe_topic``: a pchannel, Pulsar needs one)."""
        if self.kind == "pulsar":
            pulsar.ping(self.address, pulsar.topic_name(probe_topic, self.tenant, self.namespace), timeout,
                        self.settings)
            return
        watermarks = kafka.Watermarks(self.address, self.settings)
        try:
            watermarks.list_topics(timeout=timeout)
        finally:
            watermarks.close()
