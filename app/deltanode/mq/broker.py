"""The seam between DeltaNode and a message queue (Kafka or Pulsar).

The pipeline needs two things of a broker: on the driver, how far each pchannel goes (its
high watermark) to plan a cycle's offset ranges; on the executors, the messages of those
ranges, in order, with the failure of one range reported apart from the others. Positions
are 64-bit integers that grow with every message (Kafka offsets; Pulsar message ids mapped
as docs/pulsar.md says). The catalog, the admin commands and standalone also create topics,
send a message and learn its position, and check that the broker answers.

``Broker`` is the broker's address and client settings only (SASL, TLS, tokens): a small,
hashable, picklable record that tasks carry, so executors reach the broker as the driver does.
What differs between the protocols lives in their ``backend.BrokerBackend``; ``connect`` gives
the one of a ``Broker`` from a per-process cache, so every task a Python worker runs (each
unpickles its own ``Broker``) shares it, and the clients it keeps between reads. Importing this
module loads no client library: ``connect`` imports the protocol's module on first use.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .backend import BrokerBackend, HighWatermarks, Sender
from .types import BrokerError, BrokerRefused, BrokerUnreachable, Chunk, Delivered, Gap, OffsetRange

if TYPE_CHECKING:   # a task's worker unpickles a Broker and never loads the conf's modules
    from ..config.sections.broker import BrokerSettings

__all__ = ["Broker", "BrokerError", "BrokerKind", "BrokerRefused", "BrokerUnreachable", "Chunk", "Delivered", "Gap",
           "HighWatermarks", "OffsetRange", "Sender", "connect"]


class BrokerKind(enum.StrEnum):
    """The broker protocol; equal to its ``mq.type`` string."""

    KAFKA = "kafka"
    PULSAR = "pulsar"


@dataclass(frozen=True)
class Broker:
    """Where the broker is and how to log in; its methods run on ``connect(self)``."""

    kind: BrokerKind            # "kafka" or "pulsar" are accepted too
    address: str                # Kafka bootstrap servers, or a Pulsar service URL
    tenant: str = "public"      # Pulsar topics: persistent://{tenant}/{namespace}/{pchannel}
    namespace: str = "default"
    # Client settings: librdkafka properties (mq.kafka.*), or Pulsar's auth, TLS and receiver queue
    # (mq.pulsar.auth.*, mq.pulsar.tls.*, ..., without the prefix). Kept out of repr: they may hold secrets.
    client: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", BrokerKind(self.kind))   # frozen: set once, here; an unknown kind fails

    @classmethod
    def of(cls, settings: BrokerSettings) -> Broker:
        """The broker of the conf's ``mq.*`` keys (``config.Settings.broker``)."""
        return cls(BrokerKind(settings.kind), settings.address, settings.tenant, settings.namespace, settings.client)

    @property
    def settings(self) -> dict[str, str]:
        return dict(self.client)

    def watermarks(self) -> HighWatermarks:
        """Runs on the driver."""
        return connect(self).watermarks()

    def read_ranges(self, ranges: list[OffsetRange]) -> Iterator[tuple[int, Chunk | Gap | BrokerError]]:
        """Runs on executors: ``(i, chunk)`` of ``ranges[i]`` in offset order, or ``(i, BrokerError)`` once;
        ``(i, Gap)`` last when the range ended in a gap of positions."""
        return connect(self).read_ranges(ranges)

    def cut_points(self, first: int, end: int, parts: int, high: int) -> list[int]:
        """Runs on the driver: up to ``parts - 1`` positions inside [first, end) where a read can start,
        to share one range among tasks; ``high``: the topic's high watermark (Kafka: evenly; Pulsar:
        only inside the ledger of its last message)."""
        return connect(self).cut_points(first, end, parts, high)

    def create_topics(self, pchannels: list[str]) -> list[str]:
        """Create the missing pchannel topics; those created (Pulsar creates topics on first use)."""
        return connect(self).create_topics(pchannels)

    def send_all(self, messages: Sequence[tuple[str, bytes]]) -> list[int]:
        """Send each ``(pchannel, payload)``, in order per pchannel; the position each landed at."""
        return connect(self).send_all(messages)

    def sender(self) -> Sender:
        return connect(self).sender()

    def ping(self, probe_topic: str, timeout: float = 5.0) -> None:
        """Raise BrokerError unless the broker answers (``probe_topic``: a pchannel, Pulsar needs one)."""
        connect(self).ping(probe_topic, timeout)


# Per process, by broker: equal records (a task's unpickled copy, the driver's own) share one backend.
_backends: dict[Broker, BrokerBackend] = {}


def connect(broker: Broker) -> BrokerBackend:
    """The backend of ``broker`` in this process, made on first use."""
    found = _backends.get(broker)
    if found is None:
        found = _backends.setdefault(broker, _new_backend(broker))   # two threads at once: one backend wins
    return found


def _new_backend(broker: Broker) -> BrokerBackend:
    if broker.kind == BrokerKind.PULSAR:
        from .pulsar import PulsarBackend
        return PulsarBackend(address=broker.address, tenant=broker.tenant, namespace=broker.namespace,
                             settings=broker.settings)
    from .kafka import KafkaBackend
    return KafkaBackend(address=broker.address, settings=broker.settings)
