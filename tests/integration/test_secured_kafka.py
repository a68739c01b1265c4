"""DeltaNode on an Apache Kafka behind SASL_SSL (SCRAM-SHA-512 over TLS), as a production Milvus
keeps it: standalone with ``embedded.broker = false`` on the secured listener, every row exactly
once across a restart, the password in no output; a wrong password and an untrusted certificate
each refused at start in one line naming Kafka, the address and what was refused, nothing committed.

One embedded Kafka (``EmbeddedKafka(security=...)``) serves the module; each test uses pchannel
topics of its own on it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table, read_table
from deltanode.mq.broker import Broker, BrokerError
from deltanode.standalone.kafka_server import EmbeddedKafka, KafkaSecurity
from deltanode.standalone.services import free_port

from .milvus_client import MilvusClient
from .milvus_mirror import Mirror, mirror_a_sharded_collection
from .milvus_server import MilvusServer
from .standalone_run import (
    ROOT,
    _env,
    admin,
    leftovers,
    serve_a_collection,
    start,
    stop,
    wait_for_rows,
)

pytestmark = pytest.mark.spark

USER = "deltanode"
PASSWORD = "Scr4m-s3cret-7d1f"   # looked for in every output: it must never be printed
AUTH_REFUSED = "refused SASL authentication of user 'deltanode'"
CERT_REFUSED = "TLS certificate verification failed"


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory, tls_files):
    """Apache Kafka with a SASL_SSL listener (SCRAM-SHA-512, the test CA's server certificate)."""
    security = KafkaSecurity(username=USER, password=PASSWORD, cert=tls_files.server_cert, key=tls_files.server_key,
                             ca=tls_files.ca)
    with EmbeddedKafka(tmp_path_factory.mktemp("secured-kafka"), heap="256m", security=security) as kafka:
        yield kafka


def secured_env(tmp_path: Path, kafka: EmbeddedKafka, ca: Path, prefix: str, **overrides: str) -> dict[str, str]:
    """A standalone run of its own (embedded etcd) on the secured listener, its topics named ``prefix``-N."""
    return {**_env(tmp_path, "kafka", free_port()),
            "DELTANODE_EMBEDDED_BROKER": "false",
            "DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS": kafka.sasl_ssl_bootstrap_servers,
            "DELTANODE_MQ_PCHANNEL_PREFIX": prefix,
            "DELTANODE_MQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "DELTANODE_MQ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "DELTANODE_MQ_KAFKA_SASL_USERNAME": USER,
            "DELTANODE_MQ_KAFKA_SASL_PASSWORD": PASSWORD,
            "DELTANODE_MQ_KAFKA_SSL_CA_LOCATION": str(ca),
            **overrides}


def table_versions(storage_root: Path) -> dict[str, int]:
    """Every Delta table under ``storage_root`` and its newest version."""
    found = {}
    for log_dir in storage_root.rglob("_delta_log"):
        table = open_table(str(log_dir.parent))
        if table is not None:
            found[str(log_dir.parent)] = table.version()
    return found


def refused_start(env: dict[str, str]) -> tuple[int, str, float]:
    """``spark-submit.sh standalone`` expected to stop on its own: exit code, output, seconds taken."""
    began = time.monotonic()
    done = subprocess.run([str(ROOT / "spark-submit.sh"), "standalone", "--conf", "conf/standalone.conf"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - began


def topics_named(kafka: EmbeddedKafka, prefix: str) -> list[str]:
    """The topics on the broker whose names start with ``prefix`` (asked on the PLAINTEXT listener)."""
    watermarks = Broker("kafka", kafka.bootstrap_servers).watermarks()
    try:
        return [t for t in watermarks.list_topics() if t.startswith(prefix)]
    finally:
        watermarks.close()


def test_standalone_on_sasl_ssl_kafka_serves_every_row_once_across_a_restart(secured_kafka, tls_files, tmp_path):
    """The executors' range readers log in with the password their tasks carry (pickled with the
    ``Broker``), which Spark's event log (what its history server shows) never holds."""
    events = tmp_path / "events"
    events.mkdir()
    env = secured_env(tmp_path, secured_kafka, tls_files.ca, "secured-dml", DELTANODE_SPARK_EVENTLOG_ENABLED="true",
                      DELTANODE_SPARK_EVENTLOG_DIR=f"file://{events}", DELTANODE_SPARK_EVENTLOG_COMPRESS="false")
    shown = subprocess.run([str(ROOT / "spark-submit.sh"), "standalone", "--print-conf", "--conf",
                            "conf/standalone.conf"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "mq.kafka.sasl.password = ****" in shown.stdout and PASSWORD not in shown.stdout + shown.stderr
    assert f"mq.kafka.bootstrap.servers = {secured_kafka.sasl_ssl_bootstrap_servers}" in shown.stdout

    logs = [tmp_path / "standalone.log", tmp_path / "standalone-2.log"]
    proc = start(env, logs[0])
    try:
        created = serve_a_collection(env, tmp_path, "vault", logs[0])
        rc, health = admin(env, "health")
        assert rc == 0 and health["broker"] == "up" and health["healthy"] is True, health
    finally:
        rc = stop(proc)
    assert rc == 0, logs[0].read_text()[-3000:]
    assert not leftovers(tmp_path), "embedded services outlived standalone"
    assert sorted(topics_named(secured_kafka, "secured-dml")) == ["secured-dml_0", "secured-dml_1"]
    storage = StorageLayout(str(tmp_path / "delta"))
    table = storage.insert_log(created["collection_id"])
    assert sorted(read_table(storage, table, include_deleted=True).column("pk").to_pylist()) == list(range(1, 1001))

    proc = start(env, logs[1])
    try:
        rc, more = admin(env, "produce", "--collection", "vault", "--messages", "4", "--rows", "100", "--deletes", "0")
        assert rc == 0, more
        wait_for_rows(env, "vault", 1400, 60, logs[1])
    finally:
        rc = stop(proc)
    assert rc == 0, logs[1].read_text()[-3000:]
    # admin produce numbers its keys from 1 each time: 1..1000, then 1..400 again, each row once.
    pks = read_table(storage, table, include_deleted=True).column("pk").to_pylist()
    assert sorted(pks) == sorted([*range(1, 1001), *range(1, 401)])
    for path in [*logs, *(f for f in events.rglob("*") if f.is_file())]:
        assert PASSWORD not in path.read_text(), f"the SASL password is in {path}"
    assert "SparkListenerTaskEnd" in "".join(f.read_text() for f in events.rglob("*") if f.is_file())

    # The password rotated on the broker: the next start refuses in one line and commits nothing.
    versions = table_versions(tmp_path / "delta")
    assert versions
    rc, said, took = refused_start({**env, "DELTANODE_MQ_KAFKA_SASL_PASSWORD": "not-the-password"})
    assert rc == 1 and AUTH_REFUSED in said and took < 60, said[-3000:]
    assert table_versions(tmp_path / "delta") == versions
    assert not leftovers(tmp_path), "embedded services outlived the refused start"


@pytest.mark.parametrize("case", ["wrong password", "untrusted certificate"])
def test_standalone_refused_by_secured_kafka_stops_at_start_in_one_line(secured_kafka, tls_files, tmp_path, case):
    """Exit 1 within seconds (no Spark started, no retries until a timeout): the last line says what
    the broker refused, at which address; no topic created, no table written."""
    prefix = f"refused-{case.split()[0]}"
    override = ({"DELTANODE_MQ_KAFKA_SASL_PASSWORD": "not-the-password"} if case == "wrong password"
                else {"DELTANODE_MQ_KAFKA_SSL_CA_LOCATION": str(tls_files.other_ca)})
    env = secured_env(tmp_path, secured_kafka, tls_files.ca, prefix, **override)
    rc, said, took = refused_start(env)
    address = secured_kafka.sasl_ssl_bootstrap_servers
    errors = [line for line in said.splitlines() if line.startswith("spark-submit.sh standalone: error: ")]
    print(f"{case}: exit {rc} after {took:.1f} s: {errors}")
    assert rc == 1 and len(errors) == 1, said[-3000:]
    assert errors[0].startswith(f"spark-submit.sh standalone: error: Kafka broker {address} "), said[-3000:]
    if case == "wrong password":
        assert AUTH_REFUSED in errors[0] and "invalid credentials" in errors[0] and "SCRAM-SHA-512" in errors[0]
        assert "mq.kafka.sasl.password" in errors[0]
    else:
        assert CERT_REFUSED in errors[0] and "certificate verify failed" in errors[0]
        assert str(tls_files.other_ca) in errors[0]
    assert "starting Spark" not in said
    assert "Traceback" not in said and PASSWORD not in said and "not-the-password" not in said
    assert took < 60, f"took {took:.0f} s"
    assert not topics_named(secured_kafka, prefix)
    assert not table_versions(tmp_path / "delta")
    assert not leftovers(tmp_path), "embedded services outlived the refused start"


def test_a_datanode_refused_by_secured_kafka_stops_at_start_in_one_line(secured_kafka, tls_files, tmp_path):
    """``spark-submit.sh datanode`` (a cluster's DataNode) checks the broker before it registers: a
    refused login ends it with the same line; a broker that does not answer yet would be waited for."""
    env = secured_env(tmp_path, secured_kafka, tls_files.ca, "refused-datanode",
                      DELTANODE_MQ_KAFKA_SASL_PASSWORD="not-the-password")
    started = time.monotonic()
    done = subprocess.run([str(ROOT / "spark-submit.sh"), "datanode", "--conf", "conf/standalone.conf"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    said = done.stdout + done.stderr
    errors = [line for line in said.splitlines() if line.startswith("spark-submit.sh datanode: error: ")]
    assert done.returncode == 1 and len(errors) == 1 and AUTH_REFUSED in errors[0], said[-3000:]
    assert "Traceback" not in said and time.monotonic() - started < 90


@pytest.mark.parametrize("case", ["wrong password", "untrusted certificate"])
def test_kafka_clients_name_a_refusal_at_once(secured_kafka, tls_files, case):
    """What ``admin health`` (ping), topic creation and sending see: the refusal, within a second or
    two, not "Broker transport failure" once a timeout ran out."""
    settings = KafkaSecurity(username=USER, password=PASSWORD, cert=tls_files.server_cert, key=tls_files.server_key,
                             ca=tls_files.ca).client_settings()
    settings.update({"sasl.password": "not-the-password"} if case == "wrong password"
                    else {"ssl.ca.location": str(tls_files.other_ca)})
    broker = Broker("kafka", secured_kafka.sasl_ssl_bootstrap_servers, client=tuple(settings.items()))
    expected = AUTH_REFUSED if case == "wrong password" else CERT_REFUSED
    for what, call in [("ping", lambda: broker.ping("refused-probe", timeout=20)),
                       ("create_topics", lambda: broker.create_topics(["refused-probe"])),
                       ("send_all", lambda: broker.send_all([("refused-probe", b"x")]))]:
        began = time.monotonic()
        with pytest.raises(BrokerError) as refused:
            call()
        took = time.monotonic() - began
        assert f"Kafka broker {broker.address}" in str(refused.value) and expected in str(refused.value), what
        assert took < 10, f"{what}: {took:.1f} s"
    assert not topics_named(secured_kafka, "refused-probe")


def test_a_real_milvus_on_sasl_ssl_kafka_is_mirrored(secured_kafka, tls_files, etcd_server, tmp_path):
    """Milvus 2.3.5 produces through the SASL_SSL listener (its kafka.sasl* and securityProtocol keys;
    its librdkafka 1.9.1 trusts the test CA through OpenSSL's ``SSL_CERT_FILE``), and the mirror
    follows its pchannels through the same listener."""
    root = f"mkafka{os.getpid()}"
    milvus_kafka = {"kafka.securityProtocol": "SASL_SSL", "kafka.saslMechanisms": "SCRAM-SHA-512",
                    "kafka.saslUsername": USER, "kafka.saslPassword": PASSWORD}
    with MilvusServer(etcd_server.endpoint, secured_kafka.sasl_ssl_bootstrap_servers, tmp_path / "milvus",
                      root_path=root, config=milvus_kafka, env={"SSL_CERT_FILE": str(tls_files.ca)}) as milvus, \
            MilvusClient(milvus.uri, timeout=120) as mc:
        mirror = Mirror(etcd_server, milvus, tmp_path)
        mirror.env.update({k: v for k, v in secured_env(tmp_path, secured_kafka, tls_files.ca, "unused").items()
                           if k.startswith("DELTANODE_MQ_KAFKA_")})
        mirror_a_sharded_collection(mc, mirror, "vault")
    assert PASSWORD not in mirror.log.read_text()
