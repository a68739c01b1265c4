"""Brokers that advertise a second address, where a forwarder (a proxy, NAT, a test's TCP relay)
relays to them, and the Pulsar client that names the listener it comes in by."""

from __future__ import annotations

from pathlib import Path

from deltanode.config import Conf
from deltanode.config.settings import Settings
from deltanode.mq.broker import Broker
from deltanode.mq.pulsar_client import client_options
from deltanode.standalone.kafka_server import ForwardedListener, server_properties
from deltanode.standalone.pulsar_server import FORWARDED_LISTENER, standalone_conf


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_a_kafka_forwarded_listener_listens_on_its_port_and_advertises_the_forwarders():
    props = _props(server_properties(port=9092, controller_port=9093, log_dirs=Path("/data/kafka"),
                                     forwarded=ForwardedListener(port=9094, advertised_port=19094)))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,FORWARDED://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,FORWARDED://127.0.0.1:19094"
    assert props["listener.security.protocol.map"].endswith(",FORWARDED:PLAINTEXT")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    plain = _props(server_properties(port=9092, controller_port=9093, log_dirs=Path("/data/kafka")))
    assert plain["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092" and "FORWARDED" not in str(plain)


def test_a_pulsar_forwarded_listener_is_advertised_beside_the_internal_one():
    props = _props(standalone_conf(port=6650, web_port=8080, forwarded_port=16650))
    assert props["advertisedListeners"] == (f"internal:pulsar://127.0.0.1:6650,"
                                            f"{FORWARDED_LISTENER}:pulsar://127.0.0.1:16650")
    assert props["internalListenerName"] == "internal" and "advertisedAddress" not in props   # Pulsar refuses both
    assert _props(standalone_conf(port=6650, web_port=8080))["advertisedAddress"] == "127.0.0.1"


def test_a_pulsar_client_names_the_listener_of_the_conf():
    conf = Conf.from_dict({"storage.root": "/tmp/x", "mq.type": "pulsar", "mq.pulsar.service.url": "pulsar://relay:6650",
                           "mq.pulsar.listener.name": "forwarded"})
    broker = Broker.of(Settings.of(conf).broker)
    assert broker.settings["listener.name"] == "forwarded"
    assert client_options(broker.settings)["listener_name"] == "forwarded"
    assert "listener_name" not in client_options({})
