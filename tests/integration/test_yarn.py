"""The DataNode submitted to a real YARN (a single-node MiniYARNCluster, ``yarn_cluster.py``) the way the
README says: ``DELTANODE_SPARK_MASTER=yarn ./spark-submit.sh datanode`` with ``HADOOP_CONF_DIR`` set,
the environment archive and the application zip shipped to the containers. Client deploy mode, with
the SIGKILL of the executor's container mid-cycle, then cluster deploy mode (the driver in the
application master's container) on the same collection: every row exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest

from deltanode.delta.layout import StorageLayout

from .processes import ROOT, start, stop_running
from .support import CatalogTraffic, duplicated, wait_until
from .yarn_cluster import YarnCluster

pytestmark = pytest.mark.spark
SPARK_JARS = Path(pyspark.__file__).parent / "jars"
APP_NAME = "deltanode-datanode"


def in_containers(yarn: YarnCluster, argv_has: str, argv0: str | None = None) -> list[int]:
    """Processes whose command line contains ``argv_has`` (and whose program is ``argv0``, or a path ending
    in it), running in a YARN container's directory of the cluster."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if (cwd.startswith(str(yarn.work_dir)) and "/container_" in cwd and argv_has in " ".join(argv)
                and (argv0 is None or argv[0] == argv0 or argv[0].endswith("/" + argv0))):
            found.append(int(entry))
    return found


def executors(yarn: YarnCluster) -> list[int]:
    """The executor JVMs (not the shells that YARN's launch script starts them with)."""
    return in_containers(yarn, "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend", argv0="java")


def containers(yarn: YarnCluster, app_id: str) -> list[str]:
    """The containers the NodeManager ran for ``app_id``: each has a log directory, kept after it ends."""
    return sorted(p.name for p in yarn.work_dir.glob(f"*logDir-nm*/{app_id}/container_*"))


def running_app(yarn: YarnCluster, known: set[str]) -> dict:
    """The DataNode's application: the one RUNNING YARN application named deltanode-datanode not in ``known``."""
    def find():
        apps = [a for a in yarn.apps() if a["name"] == APP_NAME and a["id"] not in known and a["state"] == "RUNNING"]
        return apps[0] if len(apps) == 1 else None
    return wait_until(find, 240, "the DataNode's YARN application to be RUNNING")


def yarn_env(yarn: YarnCluster, deploy_mode: str) -> dict[str, str]:
    return dict(os.environ, HADOOP_CONF_DIR=str(yarn.conf_dir), DELTANODE_SPARK_MASTER="yarn",
                DELTANODE_SPARK_SUBMIT_DEPLOYMODE=deploy_mode)


@pytest.fixture(scope="module")
def served(etcd_server, broker, env_archive, tmp_path_factory):
    """A two-shard collection, its conf (README, "On a cluster") and the channel assigner: both
    deploy modes' DataNodes serve it in turn."""
    from deltanode.mq.broker import Broker
    tmp = tmp_path_factory.mktemp("yarn-datanode")
    traffic = CatalogTraffic(etcd_server.endpoint, f"test/yarn/{os.urandom(3).hex()}/meta",
                             Broker("kafka", broker.bootstrap_servers), "on_yarn",
                             f"yarn{int(time.time() * 1000) % 10**9}-rootcoord-dml", StorageLayout(str(tmp / "delta")))
    conf = traffic.write_conf(tmp / "datanode.conf", f"""
datanode.batch.max.messages = 8
session.ttl = 5s
spark.archives = {env_archive}#env
spark.pyspark.python = ./env/bin/python
spark.yarn.jars = local:{SPARK_JARS}/*
spark.executor.instances = 1
spark.executor.cores = 2
spark.executor.memory = 1g""")
    log = tmp / "processes.log"
    coord = start("datacoord", conf, log)
    try:
        yield traffic, conf, log
    finally:
        traffic.close()
        stop_running(coord)


def test_client_mode_executors_in_yarn_containers_survive_the_sigkill_of_one(yarn, served):
    traffic, conf, log = served
    node = start("datanode", conf, log, env=yarn_env(yarn, "client"))
    try:
        app = running_app(yarn, set())
        traffic.burst(100)
        wait_until(lambda: len(traffic.rows()) >= 1000, 300,
                   "the DataNode on YARN to commit part of the backlog")
        workers = in_containers(yarn, "pyspark.daemon", argv0="./env/bin/python")
        assert workers, "no Python worker runs ./env/bin/python in a YARN container"
        killed = executors(yarn)
        assert len(killed) == 1, killed   # spark.executor.instances = 1, in a container of its own
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        at_kill = len(traffic.rows())
        traffic.burst(10)   # YARN runs a new executor container; the cycle that lost its tasks runs them again
        traffic.wait_committed(300, "every row to be committed after the executor container's SIGKILL")
        replaced = executors(yarn)
        assert replaced and not set(replaced) & set(killed)
        ran = containers(yarn, app["id"])
    finally:
        stop_running(node)
    got = traffic.rows()
    dupes = duplicated(got)
    final = wait_until(lambda: (a := yarn.app(app["id"]))["state"] in ("FINISHED", "FAILED", "KILLED") and a, 60,
                       "the application to end with its driver")
    print(f"YARN client mode: {app['id']} ran {len(ran)} containers {ran}, ended {final['state']}/"
          f"{final['finalStatus']}; produced {len(traffic.pks)}, {at_kill} in Delta at the kill, {len(got)} after, "
          f"{len(dupes)} duplicated")
    assert len(ran) == 3, ran   # the application master, the executor killed and its replacement
    assert final["state"] == "FINISHED" and final["finalStatus"] == "SUCCEEDED", final
    assert at_kill < 20_000   # killed mid-backlog
    assert not dupes and sorted(got) == sorted(traffic.pks)


def test_cluster_mode_runs_the_driver_in_the_application_masters_container(yarn, served):
    traffic, conf, log = served
    known = {a["id"] for a in yarn.apps()}
    node = start("datanode", conf, log, env=yarn_env(yarn, "cluster"))
    try:
        app = running_app(yarn, known)
        traffic.burst(20)
        traffic.wait_committed(300, "every row to be committed by the DataNode whose driver runs in YARN")
        drivers = in_containers(yarn, "main.py datanode", argv0="./env/bin/python")
        assert len(drivers) == 1, drivers   # the driver: in the AM's container, on the shipped archive
        assert executors(yarn), "no executor in a YARN container"
        ran = containers(yarn, app["id"])
        # A cluster-mode driver outlives its launcher: YARN stops it (SIGTERM, then SIGKILL).
        request = urllib.request.Request(f"http://{yarn.webapp}/ws/v1/cluster/apps/{app['id']}/state",
                                         data=b'{"state": "KILLED"}', method="PUT",
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=30).close()
        final = wait_until(lambda: (a := yarn.app(app["id"]))["state"] == "KILLED" and a, 60,
                           "YARN to kill the application")
        node.wait(120)   # spark-submit follows the application until it ends
        wait_until(lambda: not in_containers(yarn, "main.py datanode"), 60, "the driver to exit with its container")
    finally:
        stop_running(node)
    got = traffic.rows()
    dupes = duplicated(got)
    print(f"YARN cluster mode: {app['id']} ran {len(ran)} containers {ran}, ended {final['state']}; "
          f"produced {len(traffic.pks)}, {len(got)} in Delta, {len(dupes)} duplicated")
    assert len(ran) == 2, ran   # the application master with the driver, one executor
    assert not dupes and sorted(got) == sorted(traffic.pks)


@pytest.mark.parametrize("conf_dir", ["unset", "without yarn-site.xml"])
def test_a_yarn_master_without_the_clusters_yarn_site_is_refused_before_any_jvm(tmp_path, conf_dir):
    conf = tmp_path / "datanode.conf"
    conf.write_text(f"etcd.endpoints = 127.0.0.1:2379\nmq.kafka.bootstrap.servers = 127.0.0.1:9092\n"
                    f"storage.root = {tmp_path / 'delta'}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    if conf_dir != "unset":
        env["HADOOP_CONF_DIR"] = str(tmp_path)
    started = time.monotonic()
    done = subprocess.run([str(ROOT / "spark-submit.sh"), "datanode", "--conf", str(conf)], cwd=ROOT, timeout=120,
                          env=dict(env, DELTANODE_SPARK_MASTER="yarn"), capture_output=True, text=True)
    assert done.returncode == 2, done
    assert "spark.master = yarn" in done.stderr and ("yarn-site.xml" in done.stderr), done.stderr
    assert ("set HADOOP_CONF_DIR" in done.stderr) == (conf_dir == "unset"), done.stderr
    assert time.monotonic() - started < 60   # no JVM, no retries against 0.0.0.0:8032
