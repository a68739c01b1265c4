"""The DataNode on a real Spark standalone cluster: a master and a worker on loopback, executors in
JVMs of their own whose Python workers run on the shipped environment archive; a SIGKILL of the
executor JVM mid-stream loses and repeats nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.standalone.services import free_port

from .processes import ROOT, start, stop_running
from .support import CatalogTraffic, duplicated, wait_until

pytestmark = pytest.mark.spark
SPARK_CLASS = ROOT / ".venv" / "bin" / "spark-class"


def executor_jvms() -> list[int]:
    return [int(p) for p in subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                                           text=True).stdout.split()]


def python_workers_on_the_archive(work_dir: Path) -> list[int]:
    """Python workers started as ``./env/bin/python`` inside an executor's directory of the worker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv0 = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode()
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if argv0 == "./env/bin/python" and cwd.startswith(str(work_dir)):
            found.append(int(entry))
    return found


@pytest.fixture
def spark_cluster(tmp_path):
    """A Spark standalone master and one worker (2 cores) on loopback, as a user starts them."""
    port = free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1")
    logs = tmp_path / "spark-cluster.log"
    work = tmp_path / "spark-work"
    master = subprocess.Popen([str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())],
                              env=env, stdout=open(logs, "a"), stderr=subprocess.STDOUT, start_new_session=True)
    worker = subprocess.Popen([str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                               "--cores", "2", "--memory", "2g", "--webui-port", str(free_port()),
                               "--work-dir", str(work), f"spark://127.0.0.1:{port}"],
                              env=env, stdout=open(logs, "a"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: "Successfully registered with master" in logs.read_text(), 90,
                   "the Spark worker to register with its master")
        yield f"spark://127.0.0.1:{port}", work
    finally:
        for proc in (worker, master):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in (worker, master):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in executor_jvms():   # an executor whose worker is gone exits by itself; make sure
            os.kill(pid, signal.SIGKILL)


def test_a_datanode_on_a_spark_cluster_survives_the_sigkill_of_its_executor(
        spark_cluster, env_archive, etcd_server, mq, etcd_root, tmp_path):
    master, work = spark_cluster
    prefix = f"cluster{int(time.time() * 1000) % 10**9}-rootcoord-dml"
    traffic = CatalogTraffic(etcd_server.endpoint, etcd_root, mq, "clustered", prefix,
                             StorageLayout(str(tmp_path / "delta")))
    conf = traffic.write_conf(tmp_path / "datanode.conf", f"""
datanode.batch.max.messages = 8
session.ttl = 5s
spark.master = {master}
spark.archives = {env_archive}#env
spark.pyspark.python = ./env/bin/python
spark.executor.memory = 1g
spark.executor.cores = 2
spark.cores.max = 2
spark.driver.host = 127.0.0.1
spark.driver.bindAddress = 127.0.0.1""")
    log = tmp_path / "processes.log"
    coord = start("datacoord", conf, log)
    node = start("datanode", conf, log)
    try:
        traffic.burst(100)
        wait_until(lambda: len(traffic.rows()) >= 1000, 240,
                   "the DataNode on the cluster to commit part of the backlog")
        workers = python_workers_on_the_archive(work)
        assert workers, "no Python worker runs ./env/bin/python in an executor directory"
        executors = executor_jvms()
        assert len(executors) == 1, executors   # its own JVM, not the driver's
        for pid in executors:
            os.kill(pid, signal.SIGKILL)
        at_kill = len(traffic.rows())
        traffic.burst(10)   # the master starts a new executor; the cycle that lost its tasks runs them again
        traffic.wait_committed(240, "every row to be committed after the executor's SIGKILL")
        replaced = executor_jvms()
        assert replaced and not set(replaced) & set(executors)
    finally:
        traffic.close()
        stop_running(node, coord)
    got = traffic.rows()
    dupes = duplicated(got)
    print(f"Spark cluster, executor SIGKILL: produced {len(traffic.pks)}, {at_kill} in Delta at the kill, "
          f"{len(got)} after, {len(dupes)} duplicated")
    assert at_kill < 20_000   # killed mid-backlog
    assert not dupes and sorted(got) == sorted(traffic.pks)
