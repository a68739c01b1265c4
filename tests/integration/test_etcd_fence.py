"""OwnershipFence against a real etcd through its JSON gateway: one check for many vchannels; refusals
only on etcd's answer."""

from __future__ import annotations

import time

import pytest
from pymilvus.grpc_gen import schema_pb2

from deltanode.etcd import keys
from deltanode.etcd.fence import OwnershipFence
from deltanode.etcd.session import Session
from deltanode.standalone.services import free_port
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo

from .support import wait_until

VCHANNEL = "by-dev-rootcoord-dml_3_448712345678901234v0"
S = ChannelWatchState


@pytest.fixture
def session(client, etcd_root):
    with Session(client, etcd_root, ttl=5) as s:
        yield s


def write_watch(client, root, node_id, state, vchannel=VCHANNEL):
    info = ChannelWatchInfo(vchan=VchannelInfo(collectionID=448712345678901234, channelName=vchannel),
                            schema=schema_pb2.CollectionSchema(name="book"), state=state, opID=9,
                            startTs=int(time.time()))
    client.put(keys.channel_watch_key(root, node_id, vchannel), info.SerializeToString())


def fence_for(etcd_server, root, node_id, endpoints=None):
    return OwnershipFence(endpoints or etcd_server.endpoint, root, node_id)


@pytest.mark.parametrize("state", [S.ToWatch, S.WatchSuccess])
def test_passes_for_a_live_owner(client, etcd_server, etcd_root, session, state):
    write_watch(client, etcd_root, session.server_id, state)
    assert fence_for(etcd_server, etcd_root, session.server_id).check([VCHANNEL]) == {}


@pytest.mark.parametrize("state", [S.Uncomplete, S.WatchFailure, S.ToRelease, S.ReleaseSuccess,
                                   S.ReleaseFailure])
def test_fails_when_the_channel_is_being_taken_away(client, etcd_server, etcd_root, session, state):
    write_watch(client, etcd_root, session.server_id, state)
    lost = fence_for(etcd_server, etcd_root, session.server_id).check([VCHANNEL])
    assert f"state {ChannelWatchState.name(state)}" in lost[VCHANNEL]


def test_fails_without_a_watch_key(client, etcd_server, etcd_root, session):
    write_watch(client, etcd_root, session.server_id + 1, S.WatchSuccess)  # another node's
    lost = fence_for(etcd_server, etcd_root, session.server_id).check([VCHANNEL])
    assert "no longer assigned" in lost[VCHANNEL]


def test_fails_once_the_session_is_gone(client, etcd_server, etcd_root):
    session = Session(client, etcd_root, ttl=5)
    write_watch(client, etcd_root, session.server_id, S.WatchSuccess)
    fence = fence_for(etcd_server, etcd_root, session.server_id)
    assert fence.check([VCHANNEL]) == {}
    session.close()
    assert "no live etcd session" in fence.check([VCHANNEL])[VCHANNEL]


def test_fails_on_a_value_that_is_not_a_watch_info(client, etcd_server, etcd_root, session):
    client.put(keys.channel_watch_key(etcd_root, session.server_id, VCHANNEL), b"\x0a\xff")
    lost = fence_for(etcd_server, etcd_root, session.server_id).check([VCHANNEL])
    assert "does not hold a ChannelWatchInfo" in lost[VCHANNEL]


def test_passes_while_etcd_is_unreachable_and_records_since_when(client, etcd_server, etcd_root, session):
    """Fail-open: the commit's txn check is the single-writer guarantee; the fence only refuses on etcd's word."""
    write_watch(client, etcd_root, session.server_id, S.ToRelease)
    dead = f"127.0.0.1:{free_port()}"
    fence = OwnershipFence(dead, etcd_root, session.server_id, timeout=1.0, probe_interval=0.2)
    started = time.monotonic()
    assert fence.check([VCHANNEL, "other_1v0"]) == {}
    assert time.monotonic() - started < 2
    assert not fence.reachable and f"unreachable at '{dead}'" in fence.reachability.describe()
    since = fence.reachability.down_since
    started = time.monotonic()
    assert fence.check([VCHANNEL]) == {} and time.monotonic() - started < 0.1   # no waiting on a dead etcd
    assert fence.reachability.down_since == since   # one outage, one start
    fence.endpoints = etcd_server.endpoint    # etcd answers again: the probe notices, then etcd's word counts
    wait_until(lambda: fence.reachable, 5, "the probe to reach etcd")
    assert "ToRelease" in fence.check([VCHANNEL])[VCHANNEL]
    assert fence.reachability.describe() is None


def test_falls_back_to_the_next_endpoint(client, etcd_server, etcd_root, session):
    write_watch(client, etcd_root, session.server_id, S.WatchSuccess)
    endpoints = f"127.0.0.1:{free_port()},http://{etcd_server.endpoint}"
    assert fence_for(etcd_server, etcd_root, session.server_id, endpoints).check([VCHANNEL]) == {}


def test_one_round_trip_answers_for_a_thousand_vchannels(client, etcd_server, etcd_root, session):
    vchannels = [f"by-dev-rootcoord-dml_{i % 16}_{1000 + i}v0" for i in range(1000)]
    for i, v in enumerate(vchannels):
        write_watch(client, etcd_root, session.server_id, S.ToRelease if i % 100 == 7 else S.WatchSuccess, v)
    write_watch(client, etcd_root, session.server_id + 1, S.WatchSuccess, "not-mine_1v0")
    fence = fence_for(etcd_server, etcd_root, session.server_id)
    started = time.monotonic()
    lost = fence.check(vchannels + ["not-mine_1v0"])
    assert time.monotonic() - started < 1.0
    assert sorted(lost) == sorted([v for i, v in enumerate(vchannels) if i % 100 == 7] + ["not-mine_1v0"])


def test_later_checks_see_changes_and_deletions(client, etcd_server, etcd_root, session):
    """After the first check a fence reads only the keys modified since, and the key count: a
    deletion (even one hidden by a creation, the count unchanged) still refuses its vchannel."""
    vchannels = [f"by-dev-rootcoord-dml_{i}_{2000 + i}v0" for i in range(6)]
    for v in vchannels[:5]:
        write_watch(client, etcd_root, session.server_id, S.WatchSuccess, v)
    fence = fence_for(etcd_server, etcd_root, session.server_id)
    assert fence.check(vchannels[:5]) == {}
    write_watch(client, etcd_root, session.server_id, S.ToRelease, vchannels[0])
    assert list(fence.check(vchannels[:5])) == [vchannels[0]]
    client.delete(keys.channel_watch_key(etcd_root, session.server_id, vchannels[1]))
    write_watch(client, etcd_root, session.server_id, S.WatchSuccess, vchannels[5])   # same count as before
    lost = fence.check(vchannels)
    assert sorted(lost) == vchannels[:2] and "no longer assigned" in lost[vchannels[1]]
    client.delete(keys.channel_watch_key(etcd_root, session.server_id, vchannels[2]))
    assert sorted(fence.check(vchannels)) == vchannels[:3]
    write_watch(client, etcd_root, session.server_id, S.WatchSuccess, vchannels[2])   # given back
    assert sorted(fence.check(vchannels)) == vchannels[:2]


def test_while_etcd_is_quiet_a_check_reads_the_session_key_alone(client, etcd_server, etcd_root, session,
                                                                  monkeypatch):
    """With no write anywhere since the last two reads, the revision of the session key's answer
    shows that nothing changed and the watch keys are not read again (at 10,000 keys etcd spent
    30-35 ms on each such read); the first write after that is seen by the next check."""
    vchannels = [f"by-dev-rootcoord-dml_{i}_{3000 + i}v0" for i in range(3)]
    for v in vchannels:
        write_watch(client, etcd_root, session.server_id, S.WatchSuccess, v)
    fence = fence_for(etcd_server, etcd_root, session.server_id)
    asked: list[int] = []   # the ranges of each transaction the fence sends
    send = fence._txn
    monkeypatch.setattr(fence, "_txn", lambda ranges: asked.append(len(ranges)) or send(ranges))
    for _ in range(4):
        assert fence.check(vchannels) == {}
    assert asked == [2, 1, 1, 1]   # the whole prefix, then the session key alone
    write_watch(client, etcd_root, session.server_id, S.ToRelease, vchannels[1])
    assert list(fence.check(vchannels)) == [vchannels[1]]
    assert list(fence.check(vchannels)) == [vchannels[1]]
    assert asked[4:] == [1, 3, 3]   # revision moved: what changed, then once more until etcd is quiet
    assert list(fence.check(vchannels)) == [vchannels[1]] and asked[7:] == [1]
