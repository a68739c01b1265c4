"""OwnershipFence against a real etcd through its JSON gateway."""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltanode.etcd import keys
from deltanode.etcd.fence import OwnershipFence, OwnershipLost
from deltanode.etcd.session import Session
from deltanode.standalone.services import free_port
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo
from pymilvus.grpc_gen import schema_pb2

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
    return OwnershipFence(endpoints or etcd_server.endpoint, root, node_id, VCHANNEL)


@pytest.mark.parametrize("state", [S.ToWatch, S.WatchSuccess])
def test_passes_for_a_live_owner(client, etcd_server, etcd_root, session, state):
    write_watch(client, etcd_root, session.server_id, state)
    fence_for(etcd_server, etcd_root, session.server_id).check()


@pytest.mark.parametrize("state", [S.Uncomplete, S.WatchFailure, S.ToRelease, S.ReleaseSuccess,
                                   S.ReleaseFailure])
def test_fails_when_the_channel_is_being_taken_away(client, etcd_server, etcd_root, session, state):
    write_watch(client, etcd_root, session.server_id, state)
    with pytest.raises(OwnershipLost, match=f"state {ChannelWatchState.name(state)}"):
        fence_for(etcd_server, etcd_root, session.server_id).check()


def test_fails_without_a_watch_key(client, etcd_server, etcd_root, session):
    write_watch(client, etcd_root, session.server_id + 1, S.WatchSuccess)  # another node's
    with pytest.raises(OwnershipLost, match="no longer assigned"):
        fence_for(etcd_server, etcd_root, session.server_id).check()


def test_fails_once_the_session_is_gone(client, etcd_server, etcd_root):
    session = Session(client, etcd_root, ttl=5)
    write_watch(client, etcd_root, session.server_id, S.WatchSuccess)
    fence = fence_for(etcd_server, etcd_root, session.server_id)
    fence.check()
    session.close()
    with pytest.raises(OwnershipLost, match="no live etcd session"):
        fence.check()


def test_fails_on_a_value_that_is_not_a_watch_info(client, etcd_server, etcd_root, session):
    client.put(keys.channel_watch_key(etcd_root, session.server_id, VCHANNEL), b"\x0a\xff")
    with pytest.raises(OwnershipLost, match="does not hold a ChannelWatchInfo"):
        fence_for(etcd_server, etcd_root, session.server_id).check()


def test_fails_closed_when_etcd_is_unreachable(etcd_root):
    dead = f"127.0.0.1:{free_port()}"
    fence = OwnershipFence(dead, etcd_root, 1, VCHANNEL, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(OwnershipLost, match=f"unreachable at '{dead}'"):
        fence.check()
    assert time.monotonic() - started < 2


def test_falls_back_to_the_next_endpoint(client, etcd_server, etcd_root, session):
    write_watch(client, etcd_root, session.server_id, S.WatchSuccess)
    endpoints = f"127.0.0.1:{free_port()},http://{etcd_server.endpoint}"
    fence_for(etcd_server, etcd_root, session.server_id, endpoints).check()


def test_survives_pickling_and_is_fast(client, etcd_server, etcd_root, session):
    write_watch(client, etcd_root, session.server_id, S.WatchSuccess)
    fence = pickle.loads(pickle.dumps(fence_for(etcd_server, etcd_root, session.server_id)))
    started = time.monotonic()
    for _ in range(20):
        fence.check()
    assert (time.monotonic() - started) / 20 < 0.1
    lost = pickle.loads(pickle.dumps(OwnershipLost("gone")))
    assert lost.reason == "gone"


def test_runs_in_a_fresh_process_without_grpc_or_pymilvus(client, etcd_server, etcd_root, session):
    write_watch(client, etcd_root, session.server_id, S.ToRelease)
    fence = fence_for(etcd_server, etcd_root, session.server_id)
    script = (
        "import pickle, sys\n"
        "fence = pickle.loads(sys.stdin.buffer.read())\n"
        "try:\n"
        "    fence.check()\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "print(sorted(m for m in ('grpc', 'aetcd', 'pymilvus', 'google.protobuf') if m in sys.modules))\n"
    )
    app = str(Path(__file__).resolve().parents[2] / "app")
    out = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(fence), capture_output=True,
                         env={"PYTHONPATH": app}, timeout=30, check=True).stdout.decode()
    assert "OwnershipLost" in out and "ToRelease" in out
    assert out.strip().endswith("[]")
