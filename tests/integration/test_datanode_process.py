"""The real DataNode process (spark-submit.sh datanode) killed with SIGKILL mid-stream."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from deltanode.delta.layout import StorageLayout

from .processes import descendants, start, stop, stop_running, zombie
from .support import ALL_BROKERS, CatalogTraffic, duplicated, wait_until

pytestmark = pytest.mark.spark


@ALL_BROKERS
def test_sigkill_of_the_datanode_process_loses_and_repeats_nothing(etcd_server, mq, etcd_root, tmp_path):
    prefix = f"proc{int(time.time() * 1000) % 10**9}-rootcoord-dml"
    traffic = CatalogTraffic(etcd_server.endpoint, etcd_root, mq, "killed", prefix,
                             StorageLayout(str(tmp_path / "delta")))
    conf = traffic.write_conf(tmp_path / "datanode.conf", "datanode.batch.max.messages = 8\nsession.ttl = 3s\n"
                                                          "spark.master = local[2]")
    log = tmp_path / "processes.log"
    coord = start("datacoord", conf, log)
    node = start("datanode", conf, log)
    try:
        traffic.burst(30)
        wait_until(lambda: len(traffic.rows()) >= 1000, 150, "the DataNode to commit part of the backlog")
        stop(node, signal.SIGKILL)
        at_kill = len(traffic.rows())
        traffic.burst(10)  # traffic while no DataNode runs; its lease runs out, the channels park
        node = start("datanode", conf, log)
        time.sleep(1)
        traffic.wait_committed(180, "the new DataNode to commit everything")
    finally:
        traffic.close()
        stop_running(node, coord)
    got = traffic.rows()
    dupes = duplicated(got)
    print(f"datanode SIGKILL ({mq.kind}): produced {len(traffic.pks)}, {at_kill} in Delta at the kill, "
          f"{len(got)} after restart, {len(dupes)} duplicated")
    assert at_kill < len(traffic.pks)
    assert not dupes and sorted(got) == sorted(traffic.pks)


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


def test_sigterm_of_the_jvm_stops_the_datanode_without_failing_its_vchannels(etcd_server, mq, etcd_root, tmp_path):
    """A SIGTERM sent to spark-submit's JVM (not to spark-submit.sh) stops Spark under the running
    cycle: the JVM's shutdown hooks kill the Python workers and delete Spark's temporary
    directories. The pipeline must see that Spark stopped, end without failing a vchannel (each
    used to log "flowgraph failed ... restarting from Delta"), and the node exit; a restart then
    commits every row once."""
    prefix = f"jvm{int(time.time() * 1000) % 10**9}-rootcoord-dml"
    traffic = CatalogTraffic(etcd_server.endpoint, etcd_root, mq, "jvmterm", prefix,
                             StorageLayout(str(tmp_path / "delta")))
    conf = traffic.write_conf(tmp_path / "datanode.conf", "datanode.batch.max.messages = 8\nsession.ttl = 3s\n"
                                                          "spark.master = local[2]")
    log = tmp_path / "processes.log"
    coord = start("datacoord", conf, log)
    node = start("datanode", conf, log)
    try:
        traffic.burst(30)   # a backlog: cycles of 8 messages, one after another
        wait_until(lambda: len(traffic.rows()) >= 200, 150, "the DataNode to commit part of the backlog")
        jvm = [p for p in descendants(node.pid) if b"java" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]]
        assert len(jvm) == 1, jvm
        tree = descendants(node.pid)
        os.kill(jvm[0], signal.SIGTERM)
        node.wait(60)
        wait_until(lambda: not [p for p in tree if Path(f"/proc/{p}").exists() and not zombie(p)], 60,
                   "every process of the DataNode to exit after a SIGTERM of its JVM")
        at_stop = len(traffic.rows())
        text = log.read_text()
        assert "flowgraph failed" not in text and "cycle failed" not in text, \
            [line for line in text.splitlines() if "failed" in line][:5]
        node = start("datanode", conf, log)
        traffic.wait_committed(180, "the restarted DataNode to commit everything")
    finally:
        traffic.close()
        stop_running(node, coord)
    got = traffic.rows()
    dupes = duplicated(got)
    print(f"JVM SIGTERM: produced {len(traffic.pks)}, {at_stop} in Delta at the stop, {len(got)} after restart, "
          f"{len(dupes)} duplicated; Spark stopped under a cycle: {'Spark stopped under cycle' in text}")
    assert not dupes and sorted(got) == sorted(traffic.pks)
