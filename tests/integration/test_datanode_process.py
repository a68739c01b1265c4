"""The real DataNode process (spark-submit.sh datanode) killed with SIGKILL mid-stream."""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from deltanode.datacoord.catalog import create_collection
from deltanode.etcd.client import EtcdClient
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.storage.layout import StorageLayout
from deltanode.storage.tables import open_table
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .processes import descendants, start, stop, zombie
from .support import ALL_BROKERS, SCHEMA, broker_conf, wait_for_checkpoints, wait_until

pytestmark = pytest.mark.spark


@ALL_BROKERS
def test_sigkill_of_the_datanode_process_loses_and_repeats_nothing(etcd_server, mq, etcd_root, tmp_path):
    conf = tmp_path / "datanode.conf"
    prefix = f"proc{int(time.time() * 1000) % 10**9}-rootcoord-dml"
    conf.write_text(f"""
etcd.endpoints = {etcd_server.endpoint}
etcd.root = {etcd_root}
{broker_conf(mq)}
mq.pchannel.prefix = {prefix}
mq.pchannel.count = 2
storage.root = {tmp_path / "delta"}
datanode.trigger.interval = 300ms
datanode.batch.max.messages = 8
session.ttl = 3s
spark.master = local[2]
spark.ui.enabled = false
spark.log.level = ERROR
""")
    log = tmp_path / "processes.log"
    storage = StorageLayout(str(tmp_path / "delta"))
    client = EtcdClient(etcd_server.endpoint)
    schema = schema_from_json(SCHEMA, "killed")
    record = create_collection(client, etcd_root, mq, "killed", schema, 2, prefix, 2)
    proxy = Proxy(mq)
    producer = MilvusProducer(proxy, CollectionLayout.from_proto(schema), record.collection_id, "killed")
    ticks_stop = threading.Event()
    ticker(producer, record.pchannels, ticks_stop)
    produced: list[int] = []

    def produce(n: int) -> None:
        for i in range(n):
            k = i % 2
            first = producer.insert(record.pchannels[k], record.vchannels[k], 70 + k, 1, 100)
            produced.extend(range(first, first + 100))
        producer.flush_producer()

    def rows() -> list[int]:
        table = open_table(storage.insert_log(record.collection_id))
        return table.to_pyarrow_table().column("pk").to_pylist() if table else []

    coord = start("datacoord", conf, log)
    node = start("datanode", conf, log)
    try:
        produce(60)
        wait_until(lambda: len(rows()) >= 1000, 150, "the DataNode to commit part of the backlog")
        stop(node, signal.SIGKILL)
        at_kill = len(rows())
        produce(20)  # traffic while no DataNode runs; its lease runs out, the channels park
        node = start("datanode", conf, log)
        time.sleep(1)
        wait_for_checkpoints(producer, storage, record.collection_id, record.pchannels, record.vchannels, 180,
                             "the new DataNode to commit everything")
    finally:
        ticks_stop.set()
        for proc in (node, coord):
            if proc.poll() is None:
                stop(proc, signal.SIGTERM)
        client.close()
        proxy.close()
    got = rows()
    dupes = [pk for pk, n in collections.Counter(got).items() if n > 1]
    print(f"datanode SIGKILL ({mq.kind}): produced {len(produced)}, {at_kill} in Delta at the kill, {len(got)} after restart, "
          f"{len(dupes)} duplicated")
    assert at_kill < len(produced)
    assert not dupes and sorted(got) == sorted(produced)


@pytest.mark.parametrize("target", ["launcher", "group"])
def test_sigkill_of_the_launcher_ends_the_whole_datanode(etcd_server, broker, etcd_root, tmp_path, target):
    """spark-submit.sh puts spark-submit in a process group of its own (so Ctrl-C reaches only the
    launcher): a SIGKILL of the launcher, or of its group, must still end the driver, the JVM and
    the Python workers (the driver's lifeline stops it, and spark-submit exits with it)."""
    conf = tmp_path / "datanode.conf"
    conf.write_text(f"""
etcd.endpoints = {etcd_server.endpoint}
etcd.root = {etcd_root}
mq.kafka.bootstrap.servers = {broker.bootstrap_servers}
storage.root = {tmp_path / "delta"}
spark.master = local[2]
spark.ui.enabled = false
spark.log.level = ERROR
""")
    log = tmp_path / "datanode.log"
    node = start("datanode", conf, log)
    tree = [node.pid]
    try:
        wait_until(lambda: " up: watching " in log.read_text(), 120, "the DataNode to start")
        tree = descendants(node.pid)
        assert len(tree) >= 3, tree   # the launcher, the JVM, the driver (and pyspark's workers)
        if target == "launcher":
            os.kill(node.pid, signal.SIGKILL)
        else:
            os.killpg(node.pid, signal.SIGKILL)
        node.wait(10)
        wait_until(lambda: not [p for p in tree if Path(f"/proc/{p}").exists() and not zombie(p)], 60,
                   f"every process of the DataNode to exit after a SIGKILL of the {target}")
        assert "the launcher (spark-submit.sh, pid" in log.read_text()
    finally:
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
