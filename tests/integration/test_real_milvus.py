"""DeltaNode mirroring a real Milvus 2.3.5: collections made through pymilvus, DeltaNode's
standalone in mirror mode beside it (``conf/milvus-mirror.conf``), killed and started again
mid-stream, and its current state compared with Milvus's own ``query`` row for row, every field.

The test runs once per broker Milvus 2.3.5 can write to: the suite's Apache Kafka (``mq.type:
kafka``) and the suite's Apache Pulsar (``mq.type: pulsar``, its ``pulsar.*`` settings), one Milvus
each on the suite's etcd, DeltaNode's mirror on the same broker. Milvus runs from .venv-milvus
(build/milvus_env.sh); pymilvus 2.3 runs there too, behind ``MilvusClient``. The 2.4/2.5 types
(BFloat16 and sparse vectors, nulls) reach DeltaNode through the proxy stand-in in test_types.py:
Milvus 2.3.5 does not have them.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from deltanode.config import load_conf
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.etcd.client import EtcdClient
from deltanode.lake.rows_json import RowRenderer
from deltanode.lake.spark import register_tables
from deltanode.wire.names import pchannel_of
from deltanode.wire.positions import now_ts

from ..delta_readers import READERS
from ..row_multisets import assert_same_rows
from .milvus_client import MilvusClient
from .milvus_mirror import (
    BINARY,
    BY_KEY,
    EVERY_TYPE,
    SHARDED,
    Mirror,
    RecordingClient,
    absent_from,
    binary_row,
    by_key_row,
    compacted,
    deltanode_reader,
    every_type_row,
    inserted,
    mirrored,
    sharded_row,
)
from .milvus_server import MilvusServer
from .support import wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.spark

HALVES = [{"name": "id", "data_type": "Int64", "is_primary_key": True},
          {"name": "half", "data_type": "Float16Vector", "dim": 8}]










def halves_row(i: int) -> dict:
    return {"id": i, "half": base64.b64encode(np.arange(i, i + 8, dtype=np.float16).tobytes()).decode()}






def spark_mirrored(spark, mirror: Mirror, name: str, fields: list[dict]) -> list[dict]:
    """The collection's rows, every one, as ``./spark-submit.sh sql`` prints them (delta-spark over
    the table ``register_tables`` names after the Milvus collection, each row through the sql
    subcommand's JSON), in the shape ``as_milvus`` gives: dynamic keys at the top, binary and
    Float16 vectors (arrays in the JSON) in base64."""
    conf = load_conf(ROOT / "conf" / "milvus-mirror.conf", env=mirror.env)
    register_tables(spark, conf, [name])
    frame = spark.sql(f"SELECT * FROM {name}")
    renderer = RowRenderer(frame.schema)
    out = []
    for printed in (json.loads(renderer.render(row)) for row in frame.toLocalIterator()):
        row = {}
        for f in fields:
            value = printed[f["name"]]
            if f["data_type"] == "BinaryVector":
                value = base64.b64encode(bytes(value)).decode()
            elif f["data_type"] == "Float16Vector":
                value = base64.b64encode(np.array(value, np.float16).tobytes()).decode()
            row[f["name"]] = value
        for k, v in (printed.get("$meta") or {}).items():
            row.setdefault(k, v)
        out.append(row)
    return out


def subscriptions(milvus: MilvusServer) -> dict[str, set[str]]:
    """On Pulsar: the subscriptions of each of Milvus's DML topics (the broker's admin REST API)."""
    web = f"http://127.0.0.1:{milvus.pulsar_web_port}/admin/v2/persistent/public/default"

    def get(url: str):
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.loads(r.read())
    topics = [t.rsplit("/", 1)[1] for t in get(web) if t.rsplit("/", 1)[1].startswith(milvus.pchannel_prefix + "_")]
    return {t: set(get(f"{web}/{t}/stats")["subscriptions"]) for t in topics}


def deltanode_subscriptions(milvus: MilvusServer) -> set[str]:
    return {s for subs in subscriptions(milvus).values() for s in subs if s.startswith("deltanode-")}


def table_rows(storage: StorageLayout, uri: str, column: str = "_ts") -> int:
    """Every row the table's live files hold, deleted ones included."""
    table = read_table(storage, uri, [column], include_deleted=True)
    return len(table) if table is not None else 0




@pytest.fixture(scope="module", params=["kafka", "pulsar"])
def milvus(request, etcd_server, tmp_path_factory):
    """One Milvus per broker (the module's tests run on the Kafka one, then on the Pulsar one); its
    root (etcd keys, topic prefix) apart from every other Milvus's of the suite."""
    kind = request.param
    root = f"mv{os.getpid()}{kind[0]}"
    if kind == "pulsar":
        pulsar = request.getfixturevalue("pulsar_server")
        server = MilvusServer(etcd_server.endpoint, pulsar.service_url, tmp_path_factory.mktemp("milvus-pulsar"),
                              root_path=root, mq="pulsar", pulsar_web_port=pulsar.web_port)
    else:
        server = MilvusServer(etcd_server.endpoint, request.getfixturevalue("broker").bootstrap_servers,
                              tmp_path_factory.mktemp("milvus-kafka"), root_path=root)
    with server:
        yield server


@pytest.fixture(scope="module")
def mc(milvus):
    with MilvusClient(milvus.uri, timeout=120) as client:
        yield client






@pytest.fixture
def mirror(etcd_server, milvus, tmp_path):
    m = Mirror(etcd_server, milvus, tmp_path)
    yield m
    m.stop()


def test_a_real_milvus_is_mirrored_row_for_row_through_a_restart(spark, mc, mirror, milvus):
    mc = RecordingClient(mc)   # the rows sent: each must be in its insert table once
    made = {
        "every_type": mc.create_collection("every_type", EVERY_TYPE, enable_dynamic_field=True),
        "by_key": mc.create_collection("by_key", BY_KEY, num_partitions=4),
        "sharded": mc.create_collection("sharded", SHARDED, shards=2),
        "binary": mc.create_collection("binary", BINARY),
        "halves": mc.create_collection("halves", HALVES),
    }
    mc.create_partition("sharded", "p1")
    mirror.start()

    # Before and while DeltaNode starts: inserts, deletes by key list and by expression, upserts.
    mc.insert("every_type", [every_type_row(i) for i in range(600)])
    mc.delete("every_type", "id in [3, 5, 7, 11]")
    mc.upsert("every_type", [every_type_row(i, version=1) for i in range(20, 40)])
    mc.insert("by_key", [by_key_row(i) for i in range(400)])
    mc.delete("by_key", 'key in ["k00001", "k00002"]')
    mc.upsert("by_key", [by_key_row(i, version=1) for i in range(10, 20)])
    mc.insert("sharded", [sharded_row(i) for i in range(300)])
    mc.insert("sharded", [sharded_row(i) for i in range(300, 500)], partition="p1")
    mc.delete("sharded", "id in [301, 302]", partition="p1")
    mc.delete("sharded", "id in [303, 1, 2]", partition="_default")   # 303 lives in p1: it stays
    mc.insert("binary", [binary_row(i) for i in range(200)])
    mc.upsert("binary", [binary_row(i, version=1) for i in range(0, 200, 3)])
    mc.insert("halves", [halves_row(i) for i in range(50)])
    mirror.wait_caught_up(made, now_ts())

    # SIGKILL while a writer inserts, then start again: nothing lost, nothing twice.
    stop_writing = threading.Event()
    written = [0]   # rows the writer inserted so far

    def writer() -> None:
        i = 1000
        while not stop_writing.is_set() and i < 3000:
            mc.insert("sharded", [sharded_row(j) for j in range(i, i + 50)])
            i += 50
            written[0] += 50
            time.sleep(0.1)

    def writes_past(rows: int) -> bool:
        return written[0] >= rows or not thread.is_alive()

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: writes_past(500), 60, "the writer's rows before the kill")
    killed_subscriptions = deltanode_subscriptions(milvus) if milvus.mq == "pulsar" else set()
    mirror.stop(signal.SIGKILL)
    at_kill = written[0]
    wait_until(lambda: writes_past(at_kill + 200), 60, "the writer's rows while DeltaNode is down")
    at_restart = written[0]
    mirror.start()
    wait_until(lambda: writes_past(at_restart + 500), 60, "the writer's rows as DeltaNode starts again")
    stop_writing.set()
    thread.join()
    assert 0 < at_kill < written[0], (at_kill, written[0])   # the kill fell amid the writes
    print(f"\n{milvus.mq}: SIGKILL after {at_kill:,} rows of the writer, restart after {at_restart:,}, "
          f"{written[0]:,} in all")

    # While running again: a collection created, a partition made and dropped, more deletes and upserts.
    made["late"] = mc.create_collection("late", SHARDED)
    mc.insert("late", [sharded_row(i) for i in range(100)])
    mc.create_partition("sharded", "p2")
    mc.insert("sharded", [sharded_row(i) for i in range(5000, 5100)], partition="p2")
    mc.drop_partition("sharded", "p2")
    mc.delete("every_type", "f64 > 80 and flag == true")
    mc.delete("every_type", 'doc["n"] < 50')   # not the rows upserted at 20-39: theirs start at 1,000
    mc.upsert("every_type", [every_type_row(i, version=2) for i in range(590, 620)])
    mc.delete("sharded", "id >= 1000 and id < 1100")
    mc.upsert("by_key", [by_key_row(i, version=2) for i in range(0, 400, 40)])
    mirror.wait_caught_up(made, now_ts())

    # Every row counted: Milvus's current rows each once in the current state (as every reader reads
    # it), and each row inserted or upserted once in the insert table (a deleted one too, unless
    # DeltaNode's compaction rewrote its file).
    print(f"\n{milvus.mq}: collection  Milvus count(*)  Delta current rows  rows sent  insert_log rows "
          "(deleted too)  delta_log rows")
    for name, fields in (("every_type", EVERY_TYPE), ("by_key", BY_KEY), ("sharded", SHARDED), ("binary", BINARY),
                         ("late", SHARDED)):
        expected = mc.query(name, output_fields=["*"])
        pk = next(f["name"] for f in fields if f.get("is_primary_key"))
        cid = made[name]["collection_id"]
        delta = mirrored(mirror.storage, cid, fields)
        assert_same_rows(expected, delta, key=pk, what=f"{name}'s current rows")
        for reader_name, reader in {**READERS, "DeltaNode": deltanode_reader(mirror.storage)}.items():
            # deletion vectors applied by every Delta reader, every row it reads counted
            assert_same_rows(expected, mirrored(mirror.storage, cid, fields, reader), key=pk,
                             what=f"{name}, read by {reader_name}")
        assert_same_rows(expected, spark_mirrored(spark, mirror, name, fields), key=pk, what=f"{name}, read by Spark")
        assert len(expected) == mc.count(name) > 0
        stored = inserted(mirror.storage, cid, fields)
        assert_same_rows(mc.sent(name), stored, key=pk, what=f"{name}'s insert table",
                         may_lack=absent_from(expected, pk) if compacted(mirror.storage, cid) else None)
        delta_rows = table_rows(mirror.storage, mirror.storage.delta_log(cid))
        print(f"{name:11} {len(expected):16,} {len(delta):19,} {len(mc.sent(name)):10,} {len(stored):16,} "
              f"{delta_rows:15,}")
    assert table_rows(mirror.storage, mirror.storage.quarantine(), "offset") == 0
    halves = made["halves"]["collection_id"]
    assert_same_rows(mc.sent("halves"), mirrored(mirror.storage, halves, HALVES), key="id", what="halves' current rows")
    assert_same_rows(mc.sent("halves"), inserted(mirror.storage, halves, HALVES), key="id", what="halves' insert table")
    assert_same_rows(mc.sent("halves"), spark_mirrored(spark, mirror, "halves", HALVES), key="id",
                     what="halves, read by Spark")

    listed = {c["name"]: c for c in mirror.admin("show-collections")}
    # The server's start-up probe made and dropped a collection: Milvus keeps it, dropping, a while.
    assert set(made) <= set(listed) and all(c["state"] != "created" for n, c in listed.items() if n not in made)
    for name, described in made.items():
        c = listed[name]
        assert (c["collection_id"], c["vchannels"], c["state"]) == \
            (described["collection_id"], described["vchannels"], "created")
    assert "$meta" in [f["name"] for f in listed["every_type"]["fields"]]
    assert len(listed["by_key"]["partitions"]) == 4

    # Milvus's own DataNode goes on beside DeltaNode (its flush and count still work), and DeltaNode
    # wrote nothing under Milvus's root: the only DataNode session there is Milvus's own.
    with EtcdClient(mirror.env["DELTANODE_ETCD_ENDPOINTS"]) as client:
        sessions = [k.rsplit("/", 1)[1] for k, _, _ in client.get_prefix(f"{milvus.meta_root}/session/")]
        assert len([s for s in sessions if s.startswith("datanode-")]) == 1, sessions
        watch_root = f"{mirror.env['DELTANODE_ETCD_ROOT']}/channelwatch/"
        ours = {k.rsplit("/", 1)[1] for k, _, _ in client.get_prefix(watch_root)}
        assert {v for d in made.values() for v in d["vchannels"]} <= ours
    mc.flush("sharded")
    assert mc.count("sharded") == len(mirrored(mirror.storage, made["sharded"]["collection_id"], SHARDED))

    # A collection dropped in Milvus is dropped in DeltaNode's tables too.
    mc.drop_collection("late")
    wait_until(lambda: {c["name"]: c["state"] for c in mirror.admin_polled("show-collections")}.get("late", "dropped")
               == "dropped", 120, "the dropped collection to be dropped in Delta")
    assert mirrored(mirror.storage, made["late"]["collection_id"], SHARDED) == []
    assert not mirror.log_errors()

    if milvus.mq == "pulsar":
        # On Milvus's topics: Milvus's own subscriptions, one a vchannel and consuming node, and
        # DeltaNode's watermark subscriptions (its readers subscribe nothing). The SIGKILLed process's
        # stay behind (docs/pulsar.md); the last process removes its own at a stop when its driver
        # gets that far (a SIGTERM to the whole process tree, as here, may end the driver first).
        mirror.stop()
        left = subscriptions(milvus)
        milvus_own = re.compile(rf"(datanode|querynode)-\d+-{re.escape(milvus.pchannel_prefix)}_\d+_\d+v\d+-true")
        strays = {s for subs in left.values() for s in subs if not milvus_own.fullmatch(s) and
                  not re.fullmatch(r"deltanode-watermarks-[0-9a-f]{12}", s)}
        assert not strays, strays
        ours_left = deltanode_subscriptions(milvus)
        assert killed_subscriptions and killed_subscriptions <= ours_left
        assert len(ours_left - killed_subscriptions) <= len(killed_subscriptions), (ours_left, killed_subscriptions)
        for name, described in made.items():   # Milvus's DataNode consumes each live vchannel; a dropped one, none
            for v in described["vchannels"]:
                consumers = {s.split("-", 1)[0] for s in left[pchannel_of(v)] if s.endswith(f"-{v}-true")}
                assert ("datanode" in consumers) == (name != "late"), (name, v, consumers)
        ours = sorted(s for subs in left.values() for s in subs if milvus_own.fullmatch(s))
        print(f"pulsar: {len(ours)} subscriptions of Milvus's on {len(left)} topics (e.g. {ours[0]}); DeltaNode's "
              f"left by the SIGKILL: {sorted(killed_subscriptions)}, by the last stop: "
              f"{sorted(ours_left - killed_subscriptions)}")
