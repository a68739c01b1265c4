"""Spark reads DeltaNode's tables on S3: ``./spark-submit.sh sql`` and a user's own PySpark session
(``configure`` + ``register_tables``), through Hadoop's S3A connector, on the tests' S3 server.

One collection is written to an ``s3://`` root by the real pipeline (inserts, then a delete: a
deletion vector S3A reads too) and recorded in DeltaNode's catalog in etcd. The ``sql`` command
reads it over the plain-HTTP endpoint with the secret key in the environment; the user's session
reads it over HTTPS (the same bucket behind a TLS front with the test CA's certificate,
``storage.s3.ca.file``). Both run side by side, each a JVM of its own: a session's S3 settings are
fixed when its JVM starts, so the suite's shared session (local roots) cannot take them."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from deltanode.config.keys import env_name
from deltanode.config.sections.pipeline import Limits, PipelineSettings, TriggerSettings
from deltanode.datacoord.catalog import CollectionRecord, catalog_prefix, encode_schema
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table
from deltanode.etcd.client import EtcdClient
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy, ticker
from deltanode.pipeline.pipeline import Pipeline
from deltanode.state.current_state import current_rows
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.schema import CollectionLayout, schema_from_json

from .support import SCHEMA, Collection, fresh_root, settled_watermark, wait_until
from .tls_relay import TlsRelay

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.spark


def test_sql_and_a_users_session_read_a_table_on_s3_every_row_once_showing_no_secret(
        spark, broker, etcd_server, s3, tls_files, tmp_path):
    storage = StorageLayout(fresh_root("spark-s3"), s3)
    cid = int(time.time() * 1000) % 10**9
    name = f"ons3_{cid}"
    expected = _write_collection(spark, Broker("kafka", broker.bootstrap_servers), storage, cid, name)
    assert sum(expected.values()) == 97 and set(expected.values()) == {1}
    meta = f"spark-s3-{cid}/meta"
    schema = schema_from_json(SCHEMA, name)
    pchannel = pchannel_name(f"s3lake{cid}-rootcoord-dml", 0)
    with EtcdClient(etcd_server.endpoint) as client:
        record = CollectionRecord(cid, name, encode_schema(schema), 1, [vchannel_name(pchannel, cid, 0)], [pchannel])
        client.put(catalog_prefix(meta) + str(cid), json.dumps(asdict(record)))
    assert collections.Counter(current_rows(storage, cid, "pk").column("pk").to_pylist()) == expected

    events = tmp_path / "events"
    events.mkdir()
    common = (f"etcd.endpoints = {etcd_server.endpoint}\netcd.root = {meta}\nstorage.root = {storage.root}\n"
              f"storage.s3.region = {s3.region}\nstorage.s3.access.key.id = {s3.access_key_id}\n")
    plain, secured = tmp_path / "plain.conf", tmp_path / "secured.conf"
    plain.write_text(common + f"storage.s3.endpoint = {s3.endpoint}\nspark.eventLog.enabled = true\n"
                     f"spark.eventLog.dir = file://{events}\nspark.eventLog.compress = false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELTANODE_")}
    env[env_name("storage.s3.secret.access.key")] = s3.secret_access_key   # a secret comes from the environment
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")                        # the trust store made of the CA file
    subprocess.run(["bash", str(ROOT / "build" / "package.sh"), "-q"], check=True, timeout=120)
    out = tmp_path / "session"
    out.mkdir()
    with TlsRelay(s3.endpoint.removeprefix("http://"), tls_files.server_cert, tls_files.server_key) as relay:
        secured.write_text(common + f"storage.s3.endpoint = {relay.endpoint}\nstorage.s3.ca.file = {tls_files.ca}\n")
        t = time.monotonic()
        sql = subprocess.Popen([str(ROOT / "spark-submit.sh"), "sql", "--conf", str(plain), f"SELECT pk FROM {name}"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        session = subprocess.Popen([sys.executable, str(Path(__file__).with_name("spark_user_session.py")),
                                    str(secured), name, str(out)], cwd=tmp_path, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sql_out, sql_err = sql.communicate(timeout=300)
        session_out, session_err = session.communicate(timeout=300)
    print(f"\nsql and a user's session side by side: {time.monotonic() - t:.1f} s")

    assert sql.returncode == 0, sql_err[-3000:]
    read = collections.Counter(json.loads(line)["pk"] for line in sql_out.splitlines())
    print(f"produced {sum(expected.values())} rows after the delete; sql read {sum(read.values())}")
    assert read == expected
    assert session.returncode == 0, session_err[-3000:]
    read = collections.Counter(json.loads(session_out.splitlines()[-1]))
    print(f"the user's session read {sum(read.values())} over HTTPS")
    assert read == expected

    # The secret key is nowhere Spark shows the sessions: not in the event log, the UI's environment
    # (whose Hadoop configuration then holds it, redacted), the JVM's command line or the output.
    event_log = "".join(f.read_text() for f in sorted(events.rglob("*")) if f.is_file())
    environment = (out / "environment.json").read_text()
    cmdline = (out / "cmdline").read_bytes().decode().replace("\0", " ")
    assert "SparkListenerEnvironmentUpdate" in event_log and "spark.hadoop.fs.s3a.endpoint" in event_log
    assert '"fs.s3a.secret.key"' in environment and "spark.hadoop.fs.s3a.endpoint" in cmdline
    said = {"event log": event_log, "environment": environment, "command line": cmdline,
            "sql's output": sql_out + sql_err, "the session's output": session_out + session_err}
    assert [where for where, text in said.items() if s3.secret_access_key in text] == []


def _write_collection(spark, mq: Broker, storage: StorageLayout, cid: int, name: str) -> collections.Counter:
    """Rows of ``name`` committed to ``storage`` by the pipeline: three inserts, then a delete of
    three keys. Returns the primary keys a reader must see, each once."""
    pchannel = pchannel_name(f"s3lake{cid}-rootcoord-dml", 0)
    vchannel = vchannel_name(pchannel, cid, 0)
    mq.create_topics([pchannel])
    producer = MilvusProducer(proxy := Proxy(mq), CollectionLayout.from_proto(schema_from_json(SCHEMA, name)), cid,
                              name)
    stop = threading.Event()
    ticker(producer, [pchannel], stop)
    coll = Collection(cid, name, [pchannel], [vchannel], producer, storage, SCHEMA)
    uri = storage.insert_log(cid)

    def committed() -> int:
        table = open_table(uri, storage.delta_options(uri))
        return (table.transaction_version(vchannel) or 0) if table else 0

    settings = PipelineSettings(limits=Limits(), trigger=TriggerSettings(interval=0.2))
    pipe = Pipeline(spark.sparkContext, storage, mq, settings).start()
    try:
        coll.watch(pipe)
        produced = []
        for rows in (40, 30, 30):
            first = producer.insert(pchannel, vchannel, 11, 3, rows)
            produced += range(first, first + rows)
        target = settled_watermark(coll, pchannel)
        wait_until(lambda: committed() >= target, 120, "the inserts to commit to S3")
        deleted = [produced[0], produced[1], produced[45]]
        producer.delete(pchannel, vchannel, 3, deleted)
        target = settled_watermark(coll, pchannel)
        wait_until(lambda: committed() >= target, 120, "the delete to commit to S3")
    finally:
        pipe.stop()
        stop.set()
        proxy.close()
    return collections.Counter(produced) - collections.Counter(deleted)
