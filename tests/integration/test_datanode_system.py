"""DataCoord + DataNodes through real etcd: assignment, a zombie owner fenced off, exactly once."""

from __future__ import annotations

import collections
import threading
import time

import pytest

from deltanode.config.settings import Settings
from deltanode.datanode.node import DataNode
from deltanode.delta.layout import StorageLayout
from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient
from deltanode.state import meta
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState

from .relay import Relay
from .support import ALL_BROKERS, TwoShards, coordinator, wait_until

pytestmark = pytest.mark.spark


def watch_states(client: EtcdClient, root: str) -> dict[str, tuple[str, int]]:
    prefix = keys.channel_watch_root(root)
    return {k[len(prefix):].split("/", 1)[1]: (k[len(prefix):].split("/", 1)[0],
                                               ChannelWatchInfo.FromString(v).state)
            for k, v, _ in client.get_prefix(prefix)}


def holders(client: EtcdClient, root: str) -> collections.Counter:
    """Node ID -> the channels it watches (WatchSuccess)."""
    return collections.Counter(n for n, s in watch_states(client, root).values() if s == ChannelWatchState.WatchSuccess)


def exactly_once(got: list, produced: list) -> None:
    dupes = [pk for pk, n in collections.Counter(got).items() if n > 1]
    assert not dupes, f"{len(dupes)} duplicated rows"
    assert sorted(got) == sorted(produced)


@ALL_BROKERS
def test_channels_move_off_a_zombie_node_without_loss_or_duplicates(spark, conf, tmp_path):
    root = conf.get("etcd.root")
    storage = StorageLayout(conf.get("storage.root"))
    client = EtcdClient(conf.get("etcd.endpoints"))
    # No balance: node A comes back under a new session, and the test follows the channels to B only.
    coord = coordinator(client, conf, balance=False)
    node_a = DataNode(Settings.of(conf), spark.sparkContext).start()
    stop = threading.Event()
    coll = TwoShards(client, conf, "sys", stop)
    record, producer, produce, rows, produced = coll.record, coll.producer, coll.produce, coll.rows, coll.produced
    node_b = None
    try:
        wait_until(lambda: all(s == (str(node_a.node_id), ChannelWatchState.WatchSuccess)
                               for s in watch_states(client, root).values())
                   and len(watch_states(client, root)) == 2, 60, "node A to watch both channels")
        produce(20)
        wait_until(lambda: len(rows()) >= 500, 90, "node A to commit some rows")

        # Node A turns zombie: its watcher goes deaf and its lease is revoked, while its
        # flowgraphs run on until it learns of the loss (whatever they try to commit meanwhile,
        # the fence refuses). Node B joins; the coordinator moves the channels to it.
        first_id = node_a.node_id
        node_a.watcher.stop()
        node_b = DataNode(Settings.of(conf), spark.sparkContext).start()
        client.revoke_lease(node_a.session.lease_id)
        produce(20)
        wait_until(lambda: all(n == str(node_b.node_id) and s == ChannelWatchState.WatchSuccess
                               for n, s in watch_states(client, root).values()), 60, "the channels to move to B")
        produce(10)
        for k in range(2):
            producer.tick(record.pchannels[k])
        producer.flush_producer()
        wait_until(lambda: len(set(rows())) >= len(produced), 120, "node B to commit everything")
        time.sleep(2)  # give a zombie commit the chance to land, if the fence let it
        # A learnt from etcd that its session was gone: it released its channels and registered anew.
        assert node_a.sessions_lost == 1 and node_a.node_id not in (first_id, node_b.node_id)
        errors = [row["last_error"] for row in node_a.progress()]
        assert all("OwnershipLost" in e for e in errors), errors
    finally:
        stop.set()
        for node in (node_a, node_b):
            if node is not None:
                node.stop()
        coord.stop()
        client.close()
        coll.proxy.close()
    exactly_once(rows(), produced)
    for v in record.vchannels:
        state = meta.channel_state(storage, record.collection_id, v)
        assert state.node_id == node_b.node_id  # the last commits came from B


def test_a_datanode_that_joins_takes_over_channels_while_rows_keep_landing_once(spark, conf):
    root = conf.get("etcd.root")
    client = EtcdClient(conf.get("etcd.endpoints"))
    coord = coordinator(client, conf)
    node_a = DataNode(Settings.of(conf), spark.sparkContext).start()
    stop = threading.Event()
    colls = [TwoShards(client, conf, name, stop) for name in ("join_a", "join_b")]

    def produce(n: int) -> None:
        for c in colls:
            c.produce(n)

    def rows() -> list[tuple[int, int]]:
        return [row for c in colls for row in c.rows()]

    node_b = None
    try:
        wait_until(lambda: holders(client, root) == {str(node_a.node_id): 4}, 60, "node A to watch all four channels")
        produce(10)
        wait_until(lambda: len(rows()) >= 500, 90, "node A to commit some rows")
        node_b = DataNode(Settings.of(conf), spark.sparkContext).start()
        for _ in range(6):          # traffic while the channels move
            produce(2)
            time.sleep(0.5)
        wait_until(lambda: holders(client, root) == {str(node_a.node_id): 2, str(node_b.node_id): 2}, 60,
                   "two channels to move to node B")
        produce(10)
        produced = [row for c in colls for row in c.produced]
        wait_until(lambda: len(set(rows())) >= len(produced), 120, "every row to be committed")
        moved = set(node_b.pipeline.vchannels())
    finally:
        stop.set()
        for node in (node_a, node_b):
            if node is not None:
                node.stop()
        coord.stop()
        client.close()
    got = rows()
    print(f"node join: produced {len(produced)}, {len(got)} in Delta, {len(got) - len(set(got))} duplicated; "
          f"moved {sorted(moved)}")
    exactly_once(got, produced)
    assert len(moved) == 2


def test_a_node_cut_off_from_etcd_loses_its_channels_without_loss_or_duplicates(spark, conf):
    """Node A reaches etcd through a relay the test cuts; the coordinator and node B do not. A keeps
    committing (it cannot ask etcd) until B, given A's channel, commits it: then Delta refuses A's
    next commit. When A reaches etcd again it learns its session is gone, releases, and re-registers."""
    root = conf.get("etcd.root")
    client = EtcdClient(conf.get("etcd.endpoints"))
    relay = Relay(conf.get("etcd.endpoints")).start()
    conf_a = conf.with_overrides({"etcd.endpoints": relay.endpoint, "session.ttl": "3s"})
    coord = coordinator(client, conf)
    node_a = DataNode(Settings.of(conf_a), spark.sparkContext).start()
    stop = threading.Event()
    coll = TwoShards(client, conf, "cut", stop)
    record, producer, produce, rows, produced = coll.record, coll.producer, coll.produce, coll.rows, coll.produced
    node_b = None
    try:
        node_b = DataNode(Settings.of(conf), spark.sparkContext).start()
        wait_until(lambda: holders(client, root) == {str(node_a.node_id): 1, str(node_b.node_id): 1}, 60,
                   "one channel on each node")
        produce(10)
        wait_until(lambda: len(rows()) >= 300, 90, "both nodes to commit some rows")
        first_a = node_a.node_id
        relay.cut()
        for _ in range(16):            # traffic while A is cut off and its channel moves to B
            produce(2)
            time.sleep(0.5)
        wait_until(lambda: holders(client, root) == {str(node_b.node_id): 2}, 60, "A's channel to move to B")
        wait_until(lambda: len(set(rows())) >= len(produced), 120, "B to commit every row")
        assert node_a.reachability.down_since is not None and node_a.sessions_lost == 0

        def refused_on_a() -> list[dict]:
            return [r for r in node_a.progress() if r["status"] == "failed" and "CommitRefused" in r["last_error"]]
        wait_until(lambda: len(refused_on_a()) == 1, 30, "Delta to refuse A's commit of the moved channel")
        failures = refused_on_a()[0]["failures"]
        time.sleep(3)    # past its restart backoff: A holds the vchannel while etcd cannot say whose it is
        assert [r["failures"] for r in refused_on_a()] == [failures]
        relay.restore()
        wait_until(lambda: node_a.sessions_lost == 1 and node_a.node_id != first_a, 60,
                   "A to learn its session is gone and register again")
        produce(10)
        for k in range(2):
            producer.tick(record.pchannels[k])
        producer.flush_producer()
        wait_until(lambda: len(set(rows())) >= len(produced), 120, "every row to be committed")
    finally:
        stop.set()
        for node in (node_a, node_b):
            if node is not None:
                node.stop()
        coord.stop()
        relay.cut()
        client.close()
    got = rows()
    print(f"cut-off node: produced {len(produced)}, {len(got)} in Delta, {len(got) - len(set(got))} duplicated")
    exactly_once(got, produced)
