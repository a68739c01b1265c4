"""The embedded Kafka's pure parts: its cluster ids and its server.properties."""

from __future__ import annotations

import base64
from pathlib import Path

from deltanode.standalone.kafka_server import MAX_MESSAGE_BYTES, cluster_id, server_properties


def test_cluster_ids_are_uuids_in_url_safe_base64_never_starting_with_a_dash():
    # About one id in 64 would start with "-", which StorageTool's command line reads as an option.
    ids = {cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    for found in ids:
        assert len(found) == 22 and not found.startswith("-")
        assert len(base64.urlsafe_b64decode(found + "==")) == 16


def test_server_properties_put_broker_and_controller_on_loopback_with_one_replica():
    props = dict(line.split("=", 1) for line in server_properties(
        port=9092, controller_port=9093, log_dirs=Path("/data/kafka")).splitlines() if line)
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["log.dirs"] == "/data/kafka"
    assert props["offsets.topic.replication.factor"] == props["transaction.state.log.replication.factor"] == "1"
    assert int(props["message.max.bytes"]) == MAX_MESSAGE_BYTES >= 16 << 20


def test_a_sasl_ssl_listener_is_added_beside_plaintext_only_when_asked():
    plain = server_properties(port=9092, controller_port=9093, log_dirs=Path("/data/kafka"))
    assert "SASL" not in plain and "ssl." not in plain
    props = dict(line.split("=", 1) for line in server_properties(
        port=9092, controller_port=9093, log_dirs=Path("/data/kafka"), sasl_ssl_port=9094,
        keystore=Path("/data/kafka/ks.pem")).splitlines() if line)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["listener.security.protocol.map"].endswith(",SASL_SSL:SASL_SSL")
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["listener.name.sasl_ssl.ssl.keystore.type"] == "PEM"
    assert props["listener.name.sasl_ssl.ssl.keystore.location"] == "/data/kafka/ks.pem"
    assert "ScramLoginModule required;" in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]


def test_a_refused_login_or_handshake_is_one_line_naming_the_broker_and_the_conf_keys():
    from confluent_kafka import KafkaError

    from deltanode.mq.kafka import refusal_message

    settings = {"sasl.username": "alice", "sasl.password": "pw-123", "ssl.ca.location": "/etc/ca.pem"}
    auth = KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://10.0.0.1:9093/bootstrap: SASL authentication error: "
                      "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                      "SCRAM-SHA-512 (after 364ms in state AUTH_REQ)")
    assert refusal_message("10.0.0.1:9093", auth, settings) == (
        "Kafka broker 10.0.0.1:9093 refused SASL authentication of user 'alice': Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512; check mq.kafka.sasl.username "
        "and mq.kafka.sasl.password (DELTANODE_MQ_KAFKA_SASL_PASSWORD)")
    untrusted = KafkaError(KafkaError._SSL, "sasl_ssl://10.0.0.1:9093/bootstrap: SSL handshake failed: "
                           "error:0A000086:SSL routines::certificate verify failed (after 15ms in state SSL_HANDSHAKE)")
    said = refusal_message("10.0.0.1:9093", untrusted, settings)
    assert said.startswith("Kafka broker 10.0.0.1:9093 is not trusted: TLS certificate verification failed: SSL "
                           "handshake failed") and said.endswith("check mq.kafka.ssl.ca.location (/etc/ca.pem)")
    other = KafkaError(KafkaError._SSL, "ssl://10.0.0.1:9093/bootstrap: SSL handshake failed: wrong version number")
    assert refusal_message("10.0.0.1:9093", other, {}) == (
        "Kafka broker 10.0.0.1:9093 refused the TLS connection: SSL handshake failed: wrong version number; check "
        "the mq.kafka.ssl.* settings")
    assert all("pw-123" not in m for m in (said, refusal_message("10.0.0.1:9093", auth, settings)))
