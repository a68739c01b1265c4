"""Fixtures for flowgraph tests: one local Spark session, collections on the real broker."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time

import pytest

from deltanode.config import Conf
from deltanode.delta.layout import StorageLayout
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.standalone.pulsar_server import EmbeddedApachePulsar
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .support import SCHEMA, Collection, close_kept_clients

APP = os.path.join(os.path.dirname(__file__), "..", "..", "app")
_ids = itertools.count(int(time.time()) % 100000 * 100)


@pytest.fixture(autouse=True)
def no_client_outlives_its_test():
    """The broker clients a test's own reads left in this process, closed at its end."""
    yield
    close_kept_clients()


@pytest.fixture
def client(etcd_server):
    from deltanode.etcd.client import EtcdClient
    with EtcdClient(etcd_server.endpoint) as c:
        yield c


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local session for the suite, bounded (1 GiB driver heap), with delta-spark as a user
    gets it from ``lake.spark.configure``: the tests read DeltaNode's tables with it too."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.path.abspath(APP) + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    from deltanode.config.jvm_options import spark_defaults
    from deltanode.lake.spark import configure
    session = configure(SparkSession.builder.appName("deltanode-tests").config(map={
        **spark_defaults(), "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse"))})).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def pipelines(spark, mq, tmp_path):
    """Factory: a started shared pipeline (no etcd fence) on the test broker; stopped at the end."""
    from deltanode.config.sections.pipeline import CompactionSettings, Limits, PipelineSettings, TriggerSettings
    from deltanode.pipeline.pipeline import Pipeline
    started = []

    def make(trigger_interval: float = 0.2, fence=None, compaction: CompactionSettings = CompactionSettings(),
             **limits) -> Pipeline:
        settings = PipelineSettings(limits=Limits(**limits), trigger=TriggerSettings(interval=trigger_interval),
                                    compaction=compaction)
        pipe = Pipeline(spark.sparkContext, StorageLayout(str(tmp_path / "delta")), mq, settings, fence=fence).start()
        started.append(pipe)
        return pipe

    yield make
    for pipe in started:
        pipe.stop()


@pytest.fixture(scope="session")
def yarn(tmp_path_factory):
    """A single-node YARN (``yarn_cluster.YarnCluster``); submit with ``HADOOP_CONF_DIR=yarn.conf_dir``."""
    from .yarn_cluster import YarnCluster
    with YarnCluster(tmp_path_factory.mktemp("yarn")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def pulsar_server(tmp_path_factory):
    """Apache Pulsar standalone (Maven Central's jars, build/jvm/pulsar), as ``standalone`` runs it."""
    with EmbeddedApachePulsar(tmp_path_factory.mktemp("pulsar")) as server:
        yield server


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory):
    """A test CA with server and client certificates (``tls_files.TlsFiles``); the client's CN is
    ``root``, the user etcd's ``--client-cert-auth`` takes a certificate without a password for."""
    from .tls_files import make_tls_files
    return make_tls_files(tmp_path_factory.mktemp("tls"), client_cn="root")


@pytest.fixture
def mq(request) -> Broker:
    """The broker the collections of a test live on: Apache Kafka unless the test asks for another
    with ``@ALL_BROKERS`` (support.py): ``pulsar`` is Apache Pulsar."""
    kind = getattr(request, "param", "kafka")
    if kind == "pulsar":
        return Broker("pulsar", request.getfixturevalue("pulsar_server").service_url)
    return Broker("kafka", request.getfixturevalue("broker").bootstrap_servers)


@pytest.fixture
def make_collection(mq, tmp_path):
    """Factory: a fresh collection with ``shards`` vchannels on fresh pchannel topics of ``mq``, ticking."""
    stops = []
    proxies = []

    def make(shards: int = 1, schema: dict = SCHEMA, shared_pchannel: bool = False, ticking: bool = True,
             pchannels: list[str] | None = None) -> Collection:
        """``pchannels``: put the shards on these (shared with other collections) instead of new ones."""
        cid = next(_ids)
        prefix = f"t{cid}-rootcoord-dml"
        pchannels = pchannels or [pchannel_name(prefix, 0 if shared_pchannel else i) for i in range(shards)]
        vchannels = [vchannel_name(p, cid, i) for i, p in enumerate(pchannels)]
        mq.create_topics(sorted(set(pchannels)))
        name = f"coll{cid}"
        layout = CollectionLayout.from_proto(schema_from_json(schema, name))
        proxy = Proxy(mq)
        proxies.append(proxy)
        producer = MilvusProducer(proxy, layout, cid, name)
        if ticking:  # off where a test needs to know each message's offset
            stop = threading.Event()
            ticker(producer, sorted(set(pchannels)), stop)
            stops.append(stop)
        return Collection(cid, name, pchannels, vchannels, producer, StorageLayout(str(tmp_path / "delta")), schema)

    yield make
    for s in stops:
        s.set()
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def conf(etcd_server, mq, etcd_root, tmp_path):
    """A DataNode's conf on the test broker (``mq``: Kafka unless a test parametrizes it)."""
    broker = {"mq.type": "pulsar", "mq.pulsar.service.url": mq.address} if mq.kind == "pulsar" else \
        {"mq.kafka.bootstrap.servers": mq.address}
    return Conf.from_dict({
        "etcd.endpoints": etcd_server.endpoint, "etcd.root": etcd_root, **broker,
        "storage.root": str(tmp_path / "delta"),
        "mq.pchannel.prefix": f"sys{int(time.time() * 1000) % 10**9}-rootcoord-dml", "mq.pchannel.count": 4,
        "datanode.trigger.interval": "200ms",
        "datanode.batch.max.messages": 10, "session.ttl": "5s", "datacoord.watch.timeout": "30s",
    })


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """An S3-compatible server on loopback (moto, one request at a time: s3_server.py) with the
    bucket ``deltanode``; its StoreOptions."""
    from deltanode.delta.object_store import StoreOptions
    from deltanode.standalone.services import free_port

    from .support import wait_until
    port = free_port()
    log = tmp_path_factory.mktemp("s3") / "moto.log"
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "s3_server.py"), str(port)],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    options = StoreOptions(endpoint=f"http://127.0.0.1:{port}", region="us-east-1", access_key_id="deltanode",
                           secret_access_key="not-a-secret")
    try:
        wait_until(lambda: "serving" in log.read_text() or proc.poll() is not None, 30, "the S3 server to start")
        assert proc.poll() is None, log.read_text()
        options.boto3().create_bucket(Bucket="deltanode")
        yield options
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def env_archive():
    """build/env_archive.py's archive for the executors of a cluster (packed once per setup.cfg change,
    ~15 s; the Spark-cluster and YARN tests ship it)."""
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "build" / "env_archive.py")], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip().splitlines()[-1])
