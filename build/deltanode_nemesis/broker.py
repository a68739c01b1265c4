"""The run's broker: Apache Kafka or Apache Pulsar started here as a user's own service, and how
each side reaches it. The traffic's producer and the ledger's read-back reach it directly; the
DeltaNode processes, when the run may partition them, through a relay (``tests/integration/relay.py``)
that the fault cuts: Kafka advertises the relay's port on a listener of its own
(``ForwardedListener``), Pulsar advertises it as its ``forwarded`` listener, which the nodes name
with ``mq.pulsar.listener.name``. Runs in the nemesis process."""

from __future__ import annotations

from pathlib import Path

from deltanode.mq.broker import Broker
from deltanode.standalone.kafka_server import EmbeddedKafka, ForwardedListener
from deltanode.standalone.pulsar_server import FORWARDED_LISTENER, EmbeddedApachePulsar
from deltanode.standalone.services import free_port
from tests.integration.relay import Relay

from .kinds import MqKind

KAFKA_HEAP = "384m"
PULSAR_HEAP = "384m"
# The traffic's Kafka producer is idempotent and retries for longer than any fault is held: a
# message retried across a broker kill lands once and in order, as a Milvus proxy's would (a
# message given up is missing from the broker, not a DeltaNode fault, but leaves less to check).
KAFKA_PRODUCER = (("enable.idempotence", "true"), ("message.timeout.ms", "600000"),
                  ("log_level", "2"))   # a killed broker is the point: no line per reconnect


class RunBroker:
    """The broker of ``kind`` with its data under ``data_dir``; ``relayed``: the nodes reach it
    through a relay the partition fault cuts."""

    def __init__(self, kind: MqKind, data_dir: Path, *, relayed: bool) -> None:
        self.kind, self.relayed = kind, relayed
        self.port = free_port()
        self.relay: Relay | None = None
        self.cut_off = False      # the relay cut: the nodes cannot reach the broker
        self._relay_started = False
        self.server: EmbeddedKafka | EmbeddedApachePulsar
        if kind == MqKind.KAFKA:
            forwarded = None
            if relayed:
                forwarded_port = free_port()
                self.relay = Relay(f"127.0.0.1:{forwarded_port}")
                forwarded = ForwardedListener(port=forwarded_port, advertised_port=self.relay.port)
            self.server = EmbeddedKafka(data_dir, self.port, heap=KAFKA_HEAP, forwarded=forwarded)
        else:
            if relayed:
                self.relay = Relay(f"127.0.0.1:{self.port}")
            self.server = EmbeddedApachePulsar(data_dir, self.port, heap=PULSAR_HEAP, web_port=free_port(),
                                               forwarded_port=self.relay.port if self.relay else None)

    def start(self) -> None:
        """The relay (once) and the broker."""
        if self.relay is not None and not self._relay_started:
            self.relay.start()
            self._relay_started = True
        self.server.start()

    @property
    def proc(self):
        return self.server.proc

    def stop(self) -> None:
        self.server.stop()

    @property
    def direct(self) -> Broker:
        """The broker as the traffic and the ledger reach it."""
        if self.kind == MqKind.KAFKA:
            return Broker("kafka", f"127.0.0.1:{self.port}")
        return Broker("pulsar", f"pulsar://127.0.0.1:{self.port}")

    @property
    def producer(self) -> Broker:
        """``direct`` with the traffic's producer settings."""
        return Broker(self.direct.kind, self.direct.address, client=KAFKA_PRODUCER if self.kind == MqKind.KAFKA else ())

    def node_conf(self) -> list[str]:
        """The nodes' ``mq.*`` lines."""
        if self.kind == MqKind.KAFKA:
            address = self.relay.endpoint if self.relay else f"127.0.0.1:{self.port}"
            return ["mq.type = kafka", f"mq.kafka.bootstrap.servers = {address}"]
        if self.relay is None:
            return ["mq.type = pulsar", f"mq.pulsar.service.url = pulsar://127.0.0.1:{self.port}"]
        return ["mq.type = pulsar", f"mq.pulsar.service.url = pulsar://{self.relay.endpoint}",
                f"mq.pulsar.listener.name = {FORWARDED_LISTENER}"]

    def cut(self) -> None:
        assert self.relay is not None, "partition-broker needs the relay (the run was started without it)"
        if not self.cut_off:
            self.relay.cut()
            self.cut_off = True

    def restore(self) -> None:
        if self.relay is not None and self.cut_off:
            self.relay.restore()
            self.cut_off = False

    def close(self) -> None:
        if self.relay is not None and not self.cut_off:
            self.relay.cut()
            self.cut_off = True
