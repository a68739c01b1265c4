"""Apache Kafka, one node in KRaft combined mode, as the embedded broker (runs on the driver).

``standalone`` with ``mq.type = kafka`` and the test suite start it. Its jars come from Maven
Central through ``build/bootstrap.sh`` (``build/jvm/kafka/pom.xml``: Kafka 3.9, which still serves
every protocol version Milvus 2.3.5's librdkafka 1.9.1 speaks; docs/platform.md). Its topics live
under ``data_dir`` and survive a restart, a SIGKILL included: Kafka recovers its logs at start.

The data directory is formatted once (``kafka.tools.StorageTool format``, ~3 s of a JVM) and then
reused; the controller listens on a loopback port of its own, chosen afresh at each start (a
single voter's address is read from the configuration, never from the log).
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from pathlib import Path

from ..jars import MissingJars, component_jars
from ..jvm import C1_ONLY
from .services import ServiceError, _Process, ensure_port_free, free_port, java_binary

DEFAULT_HEAP = "512m"
MAX_MESSAGE_BYTES = 16 << 20   # as DeltaNode's producers (mq/kafka.py): Milvus inserts of 768-dim vectors pass 1 MiB
READY_TIMEOUT = 60.0

_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
log4j.logger.kafka.log.LogManager=INFO
"""


def server_properties(*, port: int, controller_port: int, log_dirs: Path) -> str:
    """A single node's ``server.properties``: broker and controller in one process, on loopback,
    every internal topic with one replica, and messages up to ``MAX_MESSAGE_BYTES``."""
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={log_dirs}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        # After a SIGKILL the controller admits the broker's new incarnation only once the old one's
        # session has expired: 12.6 s of a 15.9-s restart with the default 9 s; 6.6 s in all with these.
        "broker.session.timeout.ms=3000",
        "broker.heartbeat.interval.ms=500",
        f"message.max.bytes={MAX_MESSAGE_BYTES}",
        f"replica.fetch.max.bytes={MAX_MESSAGE_BYTES}",
        # Milvus's producers create their topics by writing to them, as on a default Kafka.
        "auto.create.topics.enable=true",
        "",
    ])


def cluster_id() -> str:
    """A new KRaft cluster id: a UUID in URL-safe base64 without padding, as ``StorageTool random-uuid``
    prints, never starting with "-" (as Kafka's own ``Uuid.randomUuid``: a command line would read
    such an id as an option)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


class EmbeddedKafka(_Process):
    """Apache Kafka on loopback, its logs and data under ``data_dir`` (they survive restarts);
    the JVM's heap bounded by ``heap`` (``-Xmx``)."""

    name = "Kafka broker"

    def __init__(self, data_dir: str | Path, port: int | None = None, *, heap: str = DEFAULT_HEAP) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.heap = heap

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "kafka.log"

    def start(self) -> None:
        ensure_port_free(self.port, "Kafka broker port")
        try:
            classpath = os.pathsep.join(str(j) for j in component_jars("kafka"))
        except MissingJars as e:
            raise ServiceError(str(e)) from None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logs = self.data_dir / "data"
        props = self.data_dir / "server.properties"
        props.write_text(server_properties(port=self.port, controller_port=free_port(), log_dirs=logs))
        log4j = self.data_dir / "log4j.properties"
        log4j.write_text(_LOG4J)
        java = [java_binary(), f"-Dlog4j.configuration=file:{log4j}", "-cp", classpath]
        if not (logs / "meta.properties").exists():
            self._format(java, props)
        # Both compilers, the JVM's default, as any Kafka a user runs: C2 costs CPU while it compiles
        # the load's paths, then the broker takes about 40% less. Under the 1,000-vchannel load
        # beside a neighbour it took 0.98 cores over the first 10 s and 0.31 over the last, against
        # 0.58-0.69 and 0.46-0.55 with C1 only (docs/platform.md).
        self._spawn([*java[:1], f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                     "-Djava.awt.headless=true", *java[1:], "kafka.Kafka", str(props)],
                    self.log_path, self.port, timeout=READY_TIMEOUT)
        self._wait_ready()

    def _format(self, java: list[str], props: Path) -> None:
        """Give the data directory its cluster id and the controller's first metadata (once)."""
        done = subprocess.run([*java[:1], "-Xmx256m", C1_ONLY, *java[1:], "kafka.tools.StorageTool", "format",
                               f"--cluster-id={cluster_id()}", f"--config={props}"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ServiceError(f"formatting Kafka's data directory {self.data_dir} failed "
                               f"(exit {done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")

    def _wait_ready(self) -> None:
        """The port listens before the broker has joined its controller: wait until a metadata
        request names the broker (librdkafka's own clients would otherwise retry for a while)."""
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "socket.timeout.ms": 2000})
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise ServiceError(f"{self.name} exited with code {self.proc.returncode} at start; see {self.log_path}")
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:  # noqa: BLE001 - not answering yet: ask again
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"{self.name} did not answer metadata requests within {READY_TIMEOUT:.0f} s; "
                                   f"see {self.log_path}")
            time.sleep(0.1)
