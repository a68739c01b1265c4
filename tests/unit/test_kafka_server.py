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
