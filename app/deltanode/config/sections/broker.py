"""The message queue's section (``mq.*``) and DeltaNode's own pchannels (``mq.pchannel.*``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...wire.names import pchannel_name


@dataclass(frozen=True, kw_only=True)
class BrokerSettings:
    """Where the broker is and how to log in (``mq.Broker.of`` makes the broker of it). Both sides."""

    kind: str                   # mq.type: "kafka" or "pulsar"
    address: str                # Kafka bootstrap servers, or a Pulsar service URL
    tenant: str = "public"      # Pulsar topics: persistent://{tenant}/{namespace}/{pchannel}
    namespace: str = "default"
    # Client settings: librdkafka properties (mq.kafka.*), or Pulsar's auth, TLS and receiver queue
    # (mq.pulsar.auth.*, mq.pulsar.tls.*, ..., without the prefix). Kept out of repr: they may hold secrets.
    client: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True, kw_only=True)
class PchannelSettings:
    """DeltaNode's own catalog's pchannels (a mirrored Milvus's come from its meta). Runs on the driver."""

    prefix: str
    count: int

    def names(self) -> list[str]:
        return [pchannel_name(self.prefix, i) for i in range(self.count)]
