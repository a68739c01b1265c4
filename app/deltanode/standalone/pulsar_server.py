"""Apache Pulsar standalone, one broker with an embedded bookie, as the embedded Pulsar (runs on
the driver).

``standalone`` with ``mq.type = pulsar`` and the test suite start it. Its jars come from Maven
Central through ``build/bootstrap.sh`` (``build/jvm/pulsar/pom.xml``: Pulsar 4.0, the LTS line on
Java 17; docs/platform.md), with a launcher built there (``build/jvm/pulsar/src``) that clears a
killed run's ephemeral metadata before Pulsar's own ``PulsarStandaloneStarter`` runs.

Metadata live in a RocksDB store and messages in the bookie's ledgers, both under ``data_dir``: topics
and their messages survive a restart, a SIGKILL included. No functions worker, no stream storage,
no transaction coordinator; every ledger has one replica (one bookie).

Given a ``PulsarSecurity``, it runs as a production Pulsar is commonly secured (the test suite's
secured broker; docs/secured-services.md): every connection, on the plain port and on the TLS
one, authenticates with a JWT signed by the broker's HS256 secret key
(``AuthenticationProviderToken``); the broker's own internal client and admin client present the
superuser token; and a second broker port serves TLS with the given certificate. Without one, it
accepts any client, on plain ports only.

    key = os.urandom(32)
    security = PulsarSecurity(secret_key=key, superuser_token=make_token(key, "admin"),
                              tls_cert=server_pem, tls_key=server_key_pem, tls_ca=ca_pem)
    with EmbeddedApachePulsar(data_dir, security=security) as server:
        server.tls_service_url              # pulsar+ssl://127.0.0.1:<port>
        make_token(key, "deltanode")        # a client's token (mq.pulsar.auth.params = token:<jwt>)

Given ``forwarded_port``, it advertises a second listener, ``forwarded``, at that loopback port, where
a forwarder (a proxy, NAT, a test's TCP relay) listens and relays to the broker's port. A Pulsar client
looks a topic up through its service URL and then connects to the address the lookup answers with,
the one of the listener it names (``mq.pulsar.listener.name``; the internal one when it names none):
a client that must come in through a forwarder names ``forwarded``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config.jars import MissingJars, component_dir, component_jars
from ..config.jvm_options import C1_ONLY
from .services import ServiceError, _Process, ensure_port_free, free_port, java_binary

DEFAULT_HEAP = "256m"
DIRECT_MEMORY = "192m"   # the bookie's write and read-ahead caches and Netty's buffers live here
MAX_MESSAGE_BYTES = 16 << 20   # as Kafka's (kafka_server.py): Milvus inserts of 768-dim vectors pass 1 MiB
READY_TIMEOUT = 120.0
LAUNCHER = "DeltaNodePulsarStandalone"

# PulsarStandalone reads this one file twice: as the broker's ServiceConfiguration and as the
# embedded bookie's ServerConfiguration, so the keys of both live here.
_CONF = """\
clusterName=deltanode
brokerServicePort={port}
webServicePort={web_port}
bindAddress=127.0.0.1
{advertised}
# empty: a RocksDB metadata store under --metadata-dir
metadataStoreUrl=
configurationMetadataStoreUrl=
functionsWorkerEnabled=false
webSocketServiceEnabled=false
transactionCoordinatorEnabled=false
managedLedgerDefaultEnsembleSize=1
managedLedgerDefaultWriteQuorum=1
managedLedgerDefaultAckQuorum=1
# Milvus's producers create their topics by writing to them; an idle topic keeps its messages.
allowAutoTopicCreation=true
allowAutoTopicCreationType=non-partitioned
brokerDeleteInactiveTopicsEnabled=false
defaultRetentionTimeInMinutes=-1
defaultRetentionSizeInMB=-1
numIOThreads=2
numOrderedExecutorThreads=2
numExecutorThreadPoolSize=2
numCacheExecutorThreadPoolSize=2
numHttpServerThreads=4
managedLedgerNumSchedulerThreads=2
topicOrderedExecutorThreadNum=2
bookkeeperClientNumWorkerThreads=2
bookkeeperClientNumIoThreads=2
managedLedgerCacheSizeMB=32
maxMessageSize={max_message}
allowLoopback=true
listeningInterface=lo
ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
dbStorage_writeCacheMaxSizeMb=16
dbStorage_readAheadCacheMaxSizeMb=16
dbStorage_rocksDB_blockCacheSize=8388608
numAddWorkerThreads=1
numReadWorkerThreads=1
serverNumIOThreads=2
# As Pulsar's own standalone and Kafka's default: an entry is acknowledged once written, not once
# fsynced. It survives a SIGKILL of the broker (the page cache keeps it), not a power loss.
journalSyncData=false
# a nearly full disk would otherwise turn the only bookie read-only, and every write would fail
diskUsageThreshold=0.99
diskUsageWarnThreshold=0.98
nettyMaxFrameSizeBytes={frame}
"""

# What a PulsarSecurity adds. Token authentication: the provider checks every client's JWT against the
# secret key (HS256); the broker's internal client (topic policies, namespace setup) and admin client
# authenticate with the superuser token, which superUserRoles names. TLS: the broker's binary protocol
# also listens on a TLS port with the server certificate; the broker's own clients stay on the plain
# port (brokerClientTlsEnabled is false), which requires a token as well. No TLS web port: DeltaNode
# speaks only the binary protocol, and a second Jetty connector needs more than the 4 HTTP threads
# the broker has here ("Insufficient configured threads").
_SECURITY_CONF = """\
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
tokenSecretKey=file://{secret_key}
superUserRoles={superuser}
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=token:{superuser_token}
brokerServicePortTls={tls_port}
tlsCertificateFilePath={tls_cert}
tlsKeyFilePath={tls_key}
tlsTrustCertsFilePath={tls_ca}
tlsAllowInsecureConnection=false
tlsRequireTrustedClientCertOnConnect=false
"""

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %-5p [%t] %c{{1.}} - %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.standalone.name = org.apache.pulsar.PulsarStandalone
logger.standalone.level = info
logger.service.name = org.apache.pulsar.broker.PulsarService
logger.service.level = info
"""

# bin/pulsar's flags: BookKeeper finds its metadata drivers by these names; Netty and the JVM metrics
# reach into the JDK's internals.
_JVM_FLAGS = [
    "-Djava.net.preferIPv4Stack=true", "-Djute.maxbuffer=10485760", "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.leakDetectionLevel=disabled", "-Dio.netty.recycler.maxCapacityPerThread=4096",
    "--add-opens", "java.base/java.io=ALL-UNNAMED", "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED", "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.platform=ALL-UNNAMED",
    "-Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
    "-Dlog4j2.is.webapp=false", "-Dlog4j.shutdownHookEnabled=false",
]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_token(secret_key: bytes, subject: str) -> str:
    """A JWT for role ``subject`` signed with ``secret_key`` (HS256), as ``pulsar tokens create
    --secret-key ... --subject ...`` makes one: header ``{"alg":"HS256"}``, claim ``sub``, no expiry."""
    signing_input = (_b64url(json.dumps({"alg": "HS256"}, separators=(",", ":")).encode()) + "."
                     + _b64url(json.dumps({"sub": subject}, separators=(",", ":")).encode()))
    signature = hmac.new(secret_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(signature)}"


@dataclass(frozen=True, kw_only=True)
class PulsarSecurity:
    """Token authentication and TLS ports for ``EmbeddedApachePulsar``.

    ``secret_key``: the HS256 key the broker verifies tokens with (Pulsar's own
    ``tokens create-secret-key`` makes 32 random bytes; HS256 needs at least 32). ``superuser_token``:
    a token of that key whose ``sub`` is the superuser role, for the broker's internal clients and
    ``_wait_ready``. ``tls_cert``/``tls_key`` (PEM, PKCS#8 key): what the TLS ports present;
    ``tls_ca``: the CA the broker trusts (it asks clients for no certificate)."""

    secret_key: bytes = field(repr=False)
    superuser_token: str = field(repr=False)
    tls_cert: Path
    tls_key: Path
    tls_ca: Path
    superuser: str = "admin"


def _private(path: Path) -> None:
    """Create ``path`` (or keep it) readable and writable by this user only, before a secret goes in."""
    path.touch(mode=0o600)
    path.chmod(0o600)


def class_archive() -> Path:
    """The class data sharing archive ``build/pulsar_cds.py`` records beside the Pulsar jars (bootstrap
    makes it once; a new set of jars replaces the directory, and the archive with it)."""
    return component_dir("pulsar") / "pulsar-cds.jsa"


FORWARDED_LISTENER = "forwarded"


def standalone_conf(*, port: int, web_port: int, forwarded_port: int | None = None) -> str:
    """``forwarded_port``: advertise the ``FORWARDED_LISTENER`` there beside the internal one (Pulsar
    refuses advertisedAddress beside advertisedListeners)."""
    advertised = "advertisedAddress=127.0.0.1" if forwarded_port is None else (
        f"advertisedListeners=internal:pulsar://127.0.0.1:{port},"
        f"{FORWARDED_LISTENER}:pulsar://127.0.0.1:{forwarded_port}\ninternalListenerName=internal")
    return _CONF.format(port=port, web_port=web_port, max_message=MAX_MESSAGE_BYTES,
                        frame=MAX_MESSAGE_BYTES + (1 << 20), advertised=advertised)


class EmbeddedApachePulsar(_Process):
    """Apache Pulsar standalone on loopback, its metadata and ledgers under ``data_dir`` (they
    survive restarts); the JVM's heap bounded by ``heap``, its direct memory by ``DIRECT_MEMORY``; the
    ``FORWARDED_LISTENER`` advertised at ``forwarded_port`` when given."""

    name = "Pulsar broker"
    stop_timeout = 30.0   # a graceful stop closes every ledger and the bookie: ~15 s

    def __init__(self, data_dir: str | Path, port: int | None = None, *, heap: str = DEFAULT_HEAP,
                 web_port: int | None = None, jvm_options: tuple[str, ...] = (),
                 security: PulsarSecurity | None = None, tls_port: int | None = None,
                 forwarded_port: int | None = None) -> None:
        super().__init__()
        if security is not None and forwarded_port is not None:
            raise ValueError("a forwarded listener beside token authentication and TLS is not supported")
        self.forwarded_port = forwarded_port
        self.jvm_options = jvm_options
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.heap = heap
        # The web service (admin REST): DeltaNode never uses it; a client that does (Milvus) names it.
        self.web_port = web_port or free_port()
        # Token authentication and a TLS broker port (None: neither).
        self.security = security
        self.tls_port = (tls_port or free_port()) if security else None

    @property
    def tls_service_url(self) -> str:
        if self.tls_port is None:
            raise ValueError("this Pulsar serves no TLS port: it was started without a PulsarSecurity")
        return f"pulsar+ssl://127.0.0.1:{self.tls_port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "pulsar.log"

    def start(self) -> None:
        ensure_port_free(self.port, "Pulsar broker port")
        try:
            classpath = os.pathsep.join(str(j) for j in component_jars("pulsar"))
        except MissingJars as e:
            raise ServiceError(str(e)) from None
        if "deltanode-pulsar-launcher.jar" not in classpath:
            raise ServiceError("the Pulsar jars have no deltanode-pulsar-launcher.jar: run build/bootstrap.sh")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "standalone.conf"
        ensure_port_free(self.web_port, "Pulsar web service port")
        secured = self._security_conf()
        if secured:   # it holds the superuser token: readable by this user only, as the key file
            _private(conf)
        conf.write_text(standalone_conf(port=self.port, web_port=self.web_port, forwarded_port=self.forwarded_port)
                        + secured)
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.data_dir / "pulsar-broker.log"))
        data = self.data_dir.resolve()
        # The classes of its start mapped from an archive (docs/pulsar.md: a producer served in about
        # half the time); a JVM other than the archive's starts without it.
        archive = class_archive()
        shared = [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"] \
            if archive.is_file() and not any("ArchiveClassesAtExit" in o for o in self.jvm_options) else []
        # C1 only and the serial collector, as the other embedded JVMs: a broker beside a DataNode on
        # two cores starts sooner and takes less CPU without C2 and a parallel collector.
        self._spawn([java_binary(), "-Xms64m", f"-Xmx{self.heap}", f"-XX:MaxDirectMemorySize={DIRECT_MEMORY}",
                     C1_ONLY, "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", *shared, *self.jvm_options,
                     *_JVM_FLAGS,
                     f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath, LAUNCHER,
                     "--config", str(conf), "-nfw", "-nss",
                     "--metadata-dir", str(data / "metadata"), "--bookkeeper-dir", str(data / "bookkeeper"),
                     # PulsarStandalone starts a ZooKeeper when this directory exists: it never does.
                     "--zookeeper-dir", str(data / "no-zookeeper")],
                    self.log_path, self.port, timeout=READY_TIMEOUT, cwd=data)
        self._wait_ready()

    def _security_conf(self) -> str:
        """The broker keys of ``security`` ("" without one); writes the secret key file they name."""
        sec = self.security
        if sec is None:
            return ""
        assert self.tls_port is not None
        ensure_port_free(self.tls_port, "Pulsar broker TLS port")
        key_file = self.data_dir / "token-secret.key"
        _private(key_file)
        key_file.write_bytes(sec.secret_key)
        return _SECURITY_CONF.format(
            secret_key=key_file.resolve(), superuser=sec.superuser, superuser_token=sec.superuser_token,
            tls_port=self.tls_port, tls_cert=Path(sec.tls_cert).resolve(),
            tls_key=Path(sec.tls_key).resolve(), tls_ca=Path(sec.tls_ca).resolve())

    def _wait_ready(self) -> None:
        """The broker's port opens seconds before its default namespace exists and its bookie has
        registered: wait until a producer can be created, as Milvus's and DeltaNode's are."""
        import pulsar
        deadline = time.monotonic() + READY_TIMEOUT
        log = pulsar.FileLogger(pulsar.LoggerLevel.Error, str(self.data_dir / "ready-client.log"))
        # A secured broker is asked on its plain port with the superuser token: ready there, it is
        # ready on the TLS port too (one broker serves both).
        auth = {"authentication": pulsar.AuthenticationToken(self.security.superuser_token)} if self.security else {}
        client = pulsar.Client(self.service_url, operation_timeout_seconds=5, logger=log, **auth)
        try:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise ServiceError(f"{self.name} exited with code {self.proc.returncode} at start; "
                                       f"see {self.log_path} and {self.data_dir / 'pulsar-broker.log'}")
                try:
                    client.create_producer("persistent://public/default/deltanode-broker-ready",
                                           send_timeout_millis=5000).close()
                    return
                except Exception:  # noqa: BLE001 - not serving yet: ask again
                    pass
                full = bookie_out_of_space(self.data_dir / "pulsar-broker.log")
                if full is not None:
                    self.stop()
                    raise ServiceError(f"{self.name} cannot write: its bookie found the disk full ({full}); "
                                       f"free space under {self.data_dir}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServiceError(f"{self.name} created no producer within {READY_TIMEOUT:.0f} s; "
                                       f"see {self.data_dir / 'pulsar-broker.log'}")
                time.sleep(0.2)
        finally:
            client.close()


def bookie_out_of_space(log_path: Path) -> str | None:
    """The bookie's line saying its ledger directory is past ``diskUsageThreshold``, if the broker's
    log has one. With its only directory full, the bookie turns read-only, and the broker waits
    for a writable bookie until the readiness timeout: the line names the cause at once."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if "DiskChecker" in line and "Space left on device" in line and "> threshold" in line:
            return line.split(" - ", 1)[-1].strip()
    return None

