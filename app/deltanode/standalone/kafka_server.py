"""Apache Kafka, one node in KRaft combined mode, as the embedded broker (runs on the driver).

``standalone`` with ``mq.type = kafka`` and the test suite start it. Its jars come from Maven
Central through ``build/bootstrap.sh`` (``build/jvm/kafka/pom.xml``: Kafka 3.9, which still serves
every protocol version Milvus 2.3.5's librdkafka 1.9.1 speaks; docs/platform.md). Its topics live
under ``data_dir`` and survive a restart, a SIGKILL included: Kafka recovers its logs at start.

The data directory is formatted once (``kafka.tools.StorageTool format``, ~3 s of a JVM) and then
reused; the controller listens on a loopback port of its own, chosen afresh at each start (a
single voter's address is read from the configuration, never from the log).

Given ``security`` (a ``KafkaSecurity``), it also opens a SASL_SSL listener, as a production Kafka
behind SASL/TLS does: TLS with the given certificate and key (a PEM key store: Kafka reads PEM
since 2.7, no keytool step) and SCRAM-SHA-512 for the given user. The PLAINTEXT listener stays on
loopback for the broker's own traffic and the ready check, so the rest of the start is the same.
The SCRAM credential is written through the admin API once the broker answers (at every start,
an upsert), rather than at ``StorageTool format`` time (``--add-scram``): a data directory formatted
without it, or a changed password, takes effect at the next start, and the password never appears
on a command line or in ``server.properties``.

Given a ``ForwardedListener``, it opens one more PLAINTEXT listener whose clients are told to
connect elsewhere: a Kafka client reaches a broker at the address the broker advertises for the
listener the client bootstrapped through, so a client that must come in through a forwarder (a
proxy, NAT, a test's TCP relay) needs a listener that advertises the forwarder's address.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..config.jars import MissingJars, component_jars
from ..config.jvm_options import C1_ONLY
from .services import ServiceError, _Process, ensure_port_free, free_port, java_binary

DEFAULT_HEAP = "512m"
MAX_MESSAGE_BYTES = 16 << 20   # as DeltaNode's producers (mq/kafka.py): Milvus inserts of 768-dim vectors pass 1 MiB
READY_TIMEOUT = 60.0
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192   # Kafka's minimum for SCRAM-SHA-512 is 4096

_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
log4j.logger.kafka.log.LogManager=INFO
"""


@dataclass(frozen=True, kw_only=True)
class KafkaSecurity:
    """A SASL_SSL listener's settings: the SCRAM-SHA-512 user clients log in as, and the TLS
    certificate (with its chain), its key (PKCS#8 PEM, no passphrase) and the CA that signed it
    (PEM files). The password stays out of ``repr``."""

    username: str
    password: str = field(repr=False)
    cert: Path
    key: Path
    ca: Path

    def client_settings(self) -> dict[str, str]:
        """The librdkafka properties a client of the SASL_SSL listener needs (``mq.kafka.*``)."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": self.username, "sasl.password": self.password, "ssl.ca.location": str(self.ca)}


@dataclass(frozen=True, kw_only=True)
class ForwardedListener:
    """A PLAINTEXT listener on loopback ``port`` that advertises loopback ``advertised_port``
    instead, where a forwarder listens and relays to ``port``."""

    port: int
    advertised_port: int


def server_properties(*, port: int, controller_port: int, log_dirs: Path, sasl_ssl_port: int | None = None,
                      keystore: Path | None = None, forwarded: ForwardedListener | None = None) -> str:
    """A single node's ``server.properties``: broker and controller in one process, on loopback,
    every internal topic with one replica, and messages up to ``MAX_MESSAGE_BYTES``; with
    ``sasl_ssl_port``, a SASL_SSL listener there too (SCRAM-SHA-512, TLS from the PEM ``keystore``:
    the private key and the certificate chain in one file); with ``forwarded``, a FORWARDED
    listener."""
    secured = sasl_ssl_port is not None
    listeners = f"PLAINTEXT://127.0.0.1:{port}" + (f",SASL_SSL://127.0.0.1:{sasl_ssl_port}" if secured else "")
    advertised = listeners
    if forwarded is not None:
        listeners += f",FORWARDED://127.0.0.1:{forwarded.port}"
        advertised += f",FORWARDED://127.0.0.1:{forwarded.advertised_port}"
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners={listeners},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners={advertised}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        + (",SASL_SSL:SASL_SSL" if secured else "") + (",FORWARDED:PLAINTEXT" if forwarded else ""),
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
        *(_sasl_ssl_properties(keystore) if secured else []),
        "",
    ])


def _sasl_ssl_properties(keystore: Path | None) -> list[str]:
    """The SASL_SSL listener's settings (``listener.name.sasl_ssl.*``: they apply to it alone)."""
    if keystore is None:
        raise ValueError("a SASL_SSL listener needs its PEM key store")
    prefix = "listener.name.sasl_ssl."
    return [
        f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
        # A SASL listener needs a server-side login module even when it verifies passwords only:
        # SCRAM's checks them against the credentials in the cluster's metadata (KRaft).
        f"{prefix}{SCRAM_MECHANISM.lower()}.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"{prefix}ssl.keystore.type=PEM",
        f"{prefix}ssl.keystore.location={keystore}",
        f"{prefix}ssl.client.auth=none",
    ]


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
    the JVM's heap bounded by ``heap`` (``-Xmx``). With ``security``, a SASL_SSL listener on
    ``sasl_ssl_port`` (a free one when not given) beside the PLAINTEXT one. With ``forwarded``,
    its FORWARDED listener too (``forwarded_bootstrap_servers``: the forwarder's address)."""

    name = "Kafka broker"

    def __init__(self, data_dir: str | Path, port: int | None = None, *, heap: str = DEFAULT_HEAP,
                 security: KafkaSecurity | None = None, sasl_ssl_port: int | None = None,
                 forwarded: ForwardedListener | None = None) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.heap = heap
        self.security = security
        self.sasl_ssl_port = (sasl_ssl_port or free_port()) if security is not None else None
        self.forwarded = forwarded

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The SASL_SSL listener's address (only with ``security``)."""
        if self.sasl_ssl_port is None:
            raise ValueError(f"{self.name} has no SASL_SSL listener: it was started without security")
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def forwarded_bootstrap_servers(self) -> str:
        """The address the FORWARDED listener advertises (only with ``forwarded``)."""
        if self.forwarded is None:
            raise ValueError(f"{self.name} has no FORWARDED listener: it was started without one")
        return f"127.0.0.1:{self.forwarded.advertised_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "kafka.log"

    def start(self) -> None:
        ensure_port_free(self.port, "Kafka broker port")
        if self.sasl_ssl_port is not None:
            ensure_port_free(self.sasl_ssl_port, "Kafka broker SASL_SSL port")
        if self.forwarded is not None:
            ensure_port_free(self.forwarded.port, "Kafka broker FORWARDED port")
        try:
            classpath = os.pathsep.join(str(j) for j in component_jars("kafka"))
        except MissingJars as e:
            raise ServiceError(str(e)) from None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logs = self.data_dir / "data"
        props = self.data_dir / "server.properties"
        if self.security is None:
            props.write_text(server_properties(port=self.port, controller_port=free_port(), log_dirs=logs,
                                               forwarded=self.forwarded))
        else:
            props.write_text(server_properties(port=self.port, controller_port=free_port(), log_dirs=logs,
                                               sasl_ssl_port=self.sasl_ssl_port, keystore=self._keystore(),
                                               forwarded=self.forwarded))
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

    def _keystore(self) -> Path:
        """Kafka's PEM key store: the private key, then the certificate chain, in one file that only
        this user reads (written afresh at each start, so new files are picked up)."""
        assert self.security is not None
        try:
            pem = self.security.key.read_text() + self.security.cert.read_text()
        except OSError as e:
            raise ServiceError(f"{self.name}: cannot read the SASL_SSL listener's key or certificate: {e}") from None
        path = self.data_dir / "sasl-ssl-keystore.pem"
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(pem)
        return path

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
                    break
            except Exception:  # noqa: BLE001 - not answering yet: ask again
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"{self.name} did not answer metadata requests within {READY_TIMEOUT:.0f} s; "
                                   f"see {self.log_path}")
            time.sleep(0.1)
        if self.security is not None:
            self._add_scram_user(admin, deadline)

    def _add_scram_user(self, admin, deadline: float) -> None:
        """Upsert the SCRAM user over the PLAINTEXT listener, then wait until it logs in over SASL_SSL:
        the controller's metadata reaches the broker's credential cache a moment after the answer."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )
        assert self.security is not None
        upsert = UserScramCredentialUpsertion(
            self.security.username, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            self.security.password.encode())
        try:
            for future in admin.alter_user_scram_credentials([upsert], request_timeout=10).values():
                future.result(10)
        except Exception as e:  # noqa: BLE001 - KafkaException, or the future's timeout
            self.stop()
            raise ServiceError(f"{self.name}: cannot add the SCRAM user {self.security.username!r}: {e}") from None
        secured = AdminClient({"bootstrap.servers": self.sasl_ssl_bootstrap_servers, "socket.timeout.ms": 2000,
                               **self.security.client_settings()})
        last = "no answer"
        while True:
            try:
                if secured.list_topics(timeout=2).brokers:
                    return
            except Exception as e:  # noqa: BLE001 - not answering (or not knowing the user) yet: ask again
                last = str(e)
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"{self.name}: its SASL_SSL listener {self.sasl_ssl_bootstrap_servers} did not "
                                   f"let {self.security.username!r} in within {READY_TIMEOUT:.0f} s ({last}); "
                                   f"see {self.log_path}")
            time.sleep(0.1)
