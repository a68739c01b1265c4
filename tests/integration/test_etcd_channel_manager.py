"""ChannelManager with real DataNodes (Session + ChannelWatcher) on a real etcd."""

from __future__ import annotations

import threading
import time

import pytest
from pymilvus.grpc_gen import msg_pb2, schema_pb2

from deltanode.datacoord.channel_manager import ChannelManager, ChannelSpec
from deltanode.datanode.channel_watch import ChannelWatcher
from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient
from deltanode.etcd.session import Session
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo

from .support import wait_until

S = ChannelWatchState
CHANNELS = [f"by-dev-rootcoord-dml_{i}_100v{i}" for i in range(4)]


class Handler:
    def __init__(self, fails: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.fails = fails

    def watch(self, info: ChannelWatchInfo, progressed) -> None:
        with self.lock:
            self.calls.append(("watch", info.vchan.channelName))
        if self.fails:
            raise RuntimeError("this node cannot start streams")

    def release(self, vchannel: str) -> None:
        with self.lock:
            self.calls.append(("release", vchannel))


class Node:
    """A DataNode as far as channel assignment goes: a session and a channel watcher."""

    def __init__(self, client: EtcdClient, root: str, *, answers: bool = True, fails: bool = False) -> None:
        self.session = Session(client, root, ttl=2)
        self.id = self.session.server_id
        self.handler = Handler(fails)
        self.watcher = ChannelWatcher(client, root, self.id, self.handler, tickle_interval=0.5).start() \
            if answers else None

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        self.session.close()


class Cluster:
    """The coordinator's inputs (channel list, recovery info, schema) plus helpers to read etcd."""

    def __init__(self, client: EtcdClient, root: str) -> None:
        self.client = client
        self.root = root
        self.specs = {v: ChannelSpec(v, 100) for v in CHANNELS}
        self.nodes: list[Node] = []
        self.managers: list[ChannelManager] = []

    def node(self, **kwargs) -> Node:
        node = Node(self.client, self.root, **kwargs)
        self.nodes.append(node)
        return node

    def manager(self, watch_timeout: float = 300.0) -> ChannelManager:
        manager = ChannelManager(self.client, self.root, lambda: dict(self.specs), self.recovery,
                                 lambda v: schema_pb2.CollectionSchema(name="book"),
                                 watch_timeout=watch_timeout, interval=0.2)
        self.managers.append(manager)
        return manager

    @staticmethod
    def recovery(vchannel: str) -> VchannelInfo:
        return VchannelInfo(collectionID=100, channelName=vchannel,
                            seek_position=msg_pb2.MsgPosition(channel_name=vchannel, timestamp=7))

    def assignments(self) -> dict[str, tuple[str, int]]:
        """vchannel -> (node part of the key, state)."""
        root = keys.channel_watch_root(self.root)
        out = {}
        for key, value, _ in self.client.get_prefix(root):
            node, _, vchannel = key[len(root):].partition("/")
            out[vchannel] = (node, ChannelWatchInfo.FromString(value).state)
        return out

    def settled(self, expected: dict[str, tuple[str, int]]):
        return wait_until(lambda: self.assignments() == expected, what=f"assignments {expected}")

    def close(self) -> None:
        for manager in self.managers:
            manager.stop()
        for node in self.nodes:
            node.close()


@pytest.fixture
def cluster(client, etcd_root):
    c = Cluster(client, etcd_root)
    yield c
    c.close()


def wait_all_watched(cluster) -> dict[str, tuple[str, int]]:
    def done():
        current = cluster.assignments()
        return current if len(current) == len(cluster.specs) and \
            all(state == S.WatchSuccess for _, state in current.values()) else None
    return wait_until(done, what="every channel in WatchSuccess")


def owners(assignments) -> dict[str, set[str]]:
    by_node: dict[str, set[str]] = {}
    for vchannel, (node, state) in assignments.items():
        assert state == S.WatchSuccess, (vchannel, S.name(state))
        by_node.setdefault(node, set()).add(vchannel)
    return by_node


def test_channels_are_balanced_and_watched(cluster, client, etcd_root):
    a, b = cluster.node(), cluster.node()
    cluster.manager().start()
    by_node = owners(wait_all_watched(cluster))
    assert by_node == {str(a.id): a.watcher.owned(), str(b.id): b.watcher.owned()}
    assert [len(v) for v in by_node.values()] == [2, 2]
    infos = [ChannelWatchInfo.FromString(client.get(keys.channel_watch_key(etcd_root, n, v))[0])
             for n, vs in by_node.items() for v in vs]
    assert all(i.vchan.seek_position.timestamp == 7 and i.schema.name == "book" for i in infos)
    assert len({i.opID for i in infos}) == 4


def test_channels_of_a_dead_node_move_to_the_live_one(cluster, client, etcd_server):
    a, b = cluster.node(), cluster.node()
    cluster.manager().start()
    wait_until(lambda: len(a.watcher.owned()) == 2 and len(b.watcher.owned()) == 2, what="2/2")
    moved = a.watcher.owned()
    with EtcdClient(etcd_server.endpoint) as other:
        other.revoke_lease(a.session.lease_id)  # node a's session dies
    cluster.settled({v: (str(b.id), S.WatchSuccess) for v in CHANNELS})
    assert b.watcher.owned() == set(CHANNELS)
    # a saw its keys deleted and let go of its channels
    wait_until(lambda: a.watcher.owned() == set(), what="a releasing")
    assert sorted(v for op, v in a.handler.calls if op == "release") == sorted(moved)


def test_channels_wait_under_milvus_buffer_node_until_a_node_registers(cluster):
    manager = cluster.manager()
    manager.reconcile()
    assert keys.BUFFER_NODE == "-9223372036854775808"   # math.MinInt64, as Milvus's DataCoord parks them
    assert cluster.assignments() == {v: (keys.BUFFER_NODE, S.ToWatch) for v in CHANNELS}
    manager.start()
    node = cluster.node()
    cluster.settled({v: (str(node.id), S.WatchSuccess) for v in CHANNELS})
    assert node.watcher.owned() == set(CHANNELS)


def test_dropped_channels_are_released_and_removed(cluster):
    node = cluster.node()
    cluster.manager().start()
    cluster.settled({v: (str(node.id), S.WatchSuccess) for v in CHANNELS})
    dropped = CHANNELS[0]
    cluster.specs[dropped] = ChannelSpec(dropped, 100, dropped=True)
    cluster.settled({v: (str(node.id), S.WatchSuccess) for v in CHANNELS[1:]})
    assert node.watcher.owned() == set(CHANNELS[1:])
    assert node.handler.calls.count(("release", dropped)) == 1
    assert node.handler.calls.count(("watch", dropped)) == 1  # not handed out again


def test_unanswered_watch_times_out_and_is_reassigned(cluster):
    silent = cluster.node(answers=False)
    cluster.specs = {CHANNELS[0]: cluster.specs[CHANNELS[0]]}
    manager = cluster.manager(watch_timeout=1.0)
    manager.reconcile()
    assert cluster.assignments() == {CHANNELS[0]: (str(silent.id), S.ToWatch)}
    good = cluster.node()
    manager.start()
    # ToWatch times out -> ToRelease; that times out too -> the channel goes to the good node
    cluster.settled({CHANNELS[0]: (str(good.id), S.WatchSuccess)})
    assert good.watcher.owned() == {CHANNELS[0]}


def test_a_channel_a_node_failed_to_watch_goes_to_another_node(cluster, client, etcd_root):
    broken, busy = cluster.node(fails=True), cluster.node()
    cluster.specs = {v: cluster.specs[v] for v in CHANNELS[:3]}
    for owner, vchannel in [(busy, CHANNELS[1]), (busy, CHANNELS[2]), (broken, CHANNELS[0])]:
        info = ChannelWatchInfo(vchan=cluster.recovery(vchannel), state=S.ToWatch)
        client.put(keys.channel_watch_key(etcd_root, owner.id, vchannel), info.SerializeToString())
    cluster.manager().start()
    # WatchFailure -> ToRelease -> ReleaseSuccess -> reassigned away from the failing node,
    # although that node has fewer channels.
    cluster.settled({v: (str(busy.id), S.WatchSuccess) for v in CHANNELS[:3]})
    assert broken.handler.calls == [("watch", CHANNELS[0])]


def test_stored_states_are_replayed_at_start(cluster, client, etcd_root):
    node = cluster.node()

    def put(owner, vchannel, state):
        info = ChannelWatchInfo(vchan=cluster.recovery(vchannel), state=state)
        client.put(keys.channel_watch_key(etcd_root, owner, vchannel), info.SerializeToString())

    put(999, CHANNELS[0], S.WatchSuccess)           # a node that is long gone
    put(node.id, CHANNELS[1], S.WatchFailure)       # -> ToRelease -> ReleaseSuccess -> watch again
    put(node.id, CHANNELS[2], S.ReleaseSuccess)     # -> reassigned
    put(keys.LEGACY_REMAINING, CHANNELS[3], S.ToWatch)  # parked by DeltaNode 0.1 -> handed out
    put(node.id, "by-dev-rootcoord-dml_9_55v0", S.WatchSuccess)  # a channel nobody knows: dropped
    cluster.manager().start()
    cluster.settled({v: (str(node.id), S.WatchSuccess) for v in CHANNELS})
    assert node.watcher.owned() == set(CHANNELS)


def test_a_channel_is_never_held_by_two_nodes(cluster, client, etcd_root):
    a, b = cluster.node(), cluster.node()
    cluster.specs = {CHANNELS[0]: cluster.specs[CHANNELS[0]]}
    for node in (a, b):  # left behind by some earlier fault
        info = ChannelWatchInfo(vchan=cluster.recovery(CHANNELS[0]), state=S.ToWatch)
        client.put(keys.channel_watch_key(etcd_root, node.id, CHANNELS[0]), info.SerializeToString())
    watch_keys = [keys.channel_watch_key(etcd_root, node.id, CHANNELS[0]) for node in (a, b)]
    wait_until(lambda: all(ChannelWatchInfo.FromString(client.get(k)[0]).state == S.WatchSuccess
                           for k in watch_keys), what="both nodes watching the channel")
    cluster.manager().start()
    cluster.settled({CHANNELS[0]: (str(min(a.id, b.id)), S.WatchSuccess)})
    assert client.get(max(watch_keys)) is None
    assert (a.watcher.owned() | b.watcher.owned()) == {CHANNELS[0]}
    assert not (a.watcher.owned() & b.watcher.owned())


def test_a_node_that_joins_takes_over_its_share_one_channel_at_a_time(cluster, client, etcd_root):
    a = cluster.node()
    cluster.manager().start()
    wait_until(lambda: a.watcher.owned() == set(CHANNELS), what="node A to watch every channel")
    in_flight: list[int] = []   # channels not in WatchSuccess, sampled while the balance runs
    b = cluster.node()

    def balanced() -> bool:
        current = cluster.assignments()
        in_flight.append(sum(state != S.WatchSuccess for _, state in current.values()))
        return len(b.watcher.owned()) == 2 and len(a.watcher.owned()) == 2 and not in_flight[-1]
    wait_until(balanced, what="two channels moved to node B")
    moved = b.watcher.owned()
    assert max(in_flight) <= 1                       # one hand-over at a time
    assert [c for c in a.handler.calls if c[0] == "release"] == [("release", v) for v in sorted(moved, reverse=True)]
    assert sorted(b.handler.calls) == [("watch", v) for v in sorted(moved)]
    assert owners(cluster.assignments()) == {str(a.id): a.watcher.owned(), str(b.id): moved}


def test_balance_leaves_out_a_node_that_failed_a_watch(cluster, client, etcd_root):
    """The failing-node case above, run longer: balance never hands the failing node a channel."""
    broken, busy = cluster.node(fails=True), cluster.node()
    cluster.specs = {v: cluster.specs[v] for v in CHANNELS[:3]}
    for owner, vchannel in [(busy, CHANNELS[1]), (busy, CHANNELS[2]), (broken, CHANNELS[0])]:
        info = ChannelWatchInfo(vchan=cluster.recovery(vchannel), state=S.ToWatch)
        client.put(keys.channel_watch_key(etcd_root, owner.id, vchannel), info.SerializeToString())
    cluster.manager().start()
    cluster.settled({v: (str(busy.id), S.WatchSuccess) for v in CHANNELS[:3]})
    time.sleep(2)   # ten passes at interval 0.2 s
    assert broken.handler.calls == [("watch", CHANNELS[0])]
    assert cluster.assignments() == {v: (str(busy.id), S.WatchSuccess) for v in CHANNELS[:3]}


def test_channels_parked_by_deltanode_0_1_move_under_the_buffer_node(cluster, client, etcd_root):
    info = ChannelWatchInfo(vchan=cluster.recovery(CHANNELS[0]), state=S.ToWatch)
    client.put(keys.channel_watch_key(etcd_root, keys.LEGACY_REMAINING, CHANNELS[0]), info.SerializeToString())
    cluster.specs = {CHANNELS[0]: cluster.specs[CHANNELS[0]]}
    cluster.manager().reconcile()
    assert cluster.assignments() == {CHANNELS[0]: (keys.BUFFER_NODE, S.ToWatch)}
