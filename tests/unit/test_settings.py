"""The conf read into ``Settings`` sections: what standalone starts, on which ports, and who chose them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from deltanode import cli
from deltanode.config import load_conf
from deltanode.config.sections.embedded import EmbeddedPort
from deltanode.config.settings import Settings, embedded_settings
from deltanode.standalone.lifecycle import ServiceGroup
from deltanode.standalone.services import PortInUseError


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None):
    path = tmp_path / "x.conf"
    path.write_text(text)
    return load_conf(path, env or {}, base_dir=tmp_path), path


def test_the_embedded_section_names_each_port_and_the_key_that_chose_it(tmp_path):
    conf, path = _load(tmp_path, "storage.root = delta\nembedded.etcd = true\nembedded.broker = true\n"
                                 "etcd.endpoints = 127.0.0.1:12379\nembedded.broker.heap = 256m\n",
                       {"DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092"})
    embedded = Settings.of(conf).embedded
    assert embedded == embedded_settings(conf)
    assert embedded.etcd and embedded.broker and embedded.data_dir == tmp_path / "var"
    assert embedded.etcd_port == EmbeddedPort(port=12379, key="etcd.endpoints", source=f"{path}:4")
    assert embedded.broker_port.origin == ("set by mq.kafka.bootstrap.servers at "
                                           "env DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS")
    assert embedded.broker_port.port == 19092 and embedded.broker_kind == "kafka"
    assert embedded.broker_heap == 256 << 20


def test_a_pulsar_broker_port_comes_from_its_service_url(tmp_path):
    conf, _ = _load(tmp_path, "storage.root = delta\nmq.type = pulsar\n")
    embedded = Settings.of(conf).embedded
    assert not embedded.etcd and not embedded.broker
    assert embedded.broker_kind == "pulsar"
    assert embedded.broker_port == EmbeddedPort(port=6650, key="mq.pulsar.service.url", source="default")


def test_a_service_group_starts_what_the_embedded_section_says(tmp_path):
    conf, _ = _load(tmp_path, "storage.root = delta\n")
    with ServiceGroup(Settings.of(conf).embedded, handle_signals=False) as group:
        assert group.etcd is None and group.broker is None and group.data_dir == tmp_path / "var"


def test_a_taken_embedded_port_is_refused_before_any_jvm_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        conf, path = _load(tmp_path, f"storage.root = delta\nembedded.etcd = true\netcd.endpoints = 127.0.0.1:{port}\n")
        with pytest.raises(PortInUseError) as e:
            cli._check_embedded_ports(conf)
    assert f"127.0.0.1:{port} is already in use" in str(e.value)
    assert f"(set by etcd.endpoints at {path}:3)" in str(e.value)
