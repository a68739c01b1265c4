"""The shared pipeline reading a real Pulsar-protocol broker (pulsar-lite; Apache Pulsar in a container
where Docker runs): exactly once, across a restart."""

from __future__ import annotations

import collections
import threading

import pytest
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.pipeline.pipeline import Pipeline, PipelineSettings
from deltanode.pipeline.plan import Limits
from deltanode.standalone.services import EmbeddedPulsar
from deltanode.storage.layout import StorageLayout
from deltanode.storage.tables import open_table
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.names import vchannel_name
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .support import SCHEMA, wait_until

pytestmark = pytest.mark.spark
CID = 448700000000000001
PCHANNEL = "by-dev-rootcoord-dml_0"


def docker_unavailable() -> str | None:
    """Why no Docker engine can run a container here, or None when one answers."""
    try:
        import docker
        docker.from_env(timeout=5).ping()
    except Exception as e:  # noqa: BLE001 - any failure means: no engine to run Apache Pulsar in
        return f"no Docker engine reachable ({type(e).__name__}: {e})"
    return None


@pytest.fixture(params=["pulsar-lite", "apache-pulsar"])
def pulsar_url(request, tmp_path):
    """A Pulsar-protocol broker: pulsar-lite (always), and Apache Pulsar 3.3 in a container where a
    Docker engine is reachable (skipped with the reason otherwise)."""
    if request.param == "pulsar-lite":
        with EmbeddedPulsar(tmp_path / "pulsar") as b:
            yield b.service_url
        return
    why = docker_unavailable()
    if why:
        pytest.skip(f"Apache Pulsar runs in a container: {why}")
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs
    with DockerContainer("apachepulsar/pulsar:3.3.0").with_command("bin/pulsar standalone") \
            .with_exposed_ports(6650) as container:
        wait_for_logs(container, "messaging service is ready", timeout=180)
        yield f"pulsar://{container.get_container_host_ip()}:{container.get_exposed_port(6650)}"


def test_two_shards_on_a_pulsar_pchannel_commit_every_row_once_across_a_restart(spark, pulsar_url, tmp_path):
    storage = StorageLayout(str(tmp_path / "delta"))
    broker = Broker("pulsar", pulsar_url)
    schema = schema_from_json(SCHEMA, "plite")
    proxy = Proxy(broker)
    producer = MilvusProducer(proxy, CollectionLayout.from_proto(schema), CID, "plite")
    vchannels = [vchannel_name(PCHANNEL, CID, k) for k in range(2)]
    stop_ticks = threading.Event()
    ticker(producer, [PCHANNEL], stop_ticks)
    produced: list[int] = []

    def produce(n: int) -> None:
        for i in range(n):
            first = producer.insert(PCHANNEL, vchannels[i % 2], 80 + i % 2, 1, 20)
            produced.extend(range(first, first + 20))
        producer.flush_producer()

    def pks() -> list[int]:
        table = open_table(storage.insert_log(CID))
        return table.to_pyarrow_table().column("pk").to_pylist() if table else []

    def run_until_all_committed() -> None:
        pipe = Pipeline(spark, storage, broker, PipelineSettings(Limits(max_messages=40), trigger_interval=0.2)).start()
        try:
            for v in vchannels:
                pipe.add(VchannelInfo(collectionID=CID, channelName=v), schema)
            wait_until(lambda: len(pks()) >= len(produced), 90, "every row to be committed from Pulsar")
        finally:
            pipe.stop()

    try:
        produce(30)
        producer.send_raw(PCHANNEL, b"\x0a\x03not a milvus message")   # quarantined, never a crash
        run_until_all_committed()
        produce(30)                      # while no pipeline runs; the next one resumes from Delta
        run_until_all_committed()
    finally:
        stop_ticks.set()
        proxy.close()
    got = pks()
    dupes = [pk for pk, n in collections.Counter(got).items() if n > 1]
    table = open_table(storage.quarantine())
    quarantined = table.to_pyarrow_table().column("offset").to_pylist() if table else []
    print(f"pulsar-lite pipeline: produced {len(produced)} rows, {len(got)} in Delta, {len(dupes)} duplicated; "
          f"quarantined at {quarantined}")
    assert not dupes and sorted(got) == sorted(produced)
    # The bad message is recorded at its position (by each shard whose first read held it), never lost.
    assert set(quarantined) == {30}
