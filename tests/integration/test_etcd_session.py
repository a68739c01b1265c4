"""Session registration against a real etcd, with Milvus's key layout and ID counter."""

from __future__ import annotations

import json
import threading
import time

from deltanode.etcd.client import EtcdClient
from deltanode.etcd.session import (
    SESSION_VERSION,
    Session,
    list_sessions,
    watch_sessions,
)

from .support import wait_until


def test_server_ids_are_unique_and_follow_the_milvus_counter(client, etcd_root):
    with Session(client, etcd_root, ttl=2) as first, Session(client, etcd_root, ttl=2) as second:
        assert (first.server_id, second.server_id) == (1, 2)
        assert client.get(f"{etcd_root}/session/id")[0] == b"3"
        assert set(list_sessions(client, etcd_root)) == {1, 2}


def test_ids_continue_from_a_counter_written_by_milvus(client, etcd_root):
    client.put(f"{etcd_root}/session/id", "41")
    with Session(client, etcd_root, ttl=2) as session:
        assert session.server_id == 41
        assert session.key == f"{etcd_root}/session/datanode-41"
    assert client.get(f"{etcd_root}/session/id")[0] == b"42"


def test_concurrent_sessions_never_share_an_id(client, etcd_root):
    sessions, errors = [], []

    def register():
        try:
            sessions.append(Session(client, etcd_root, ttl=2))
        except Exception as exc:  # noqa: BLE001 - any failure is recorded and surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=register) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert sorted(s.server_id for s in sessions) == [1, 2, 3, 4, 5, 6]
    finally:
        for s in sessions:
            s.close()


def test_session_value_is_milvus_json_bound_to_a_lease(client, etcd_root):
    with Session(client, etcd_root, address="10.0.0.5:21124", ttl=2) as session:
        value = json.loads(client.get(session.key)[0])
        assert value == {"ServerID": session.server_id, "ServerName": "datanode",
                         "Address": "10.0.0.5:21124", "Exclusive": False, "TriggerKill": True,
                         "Version": SESSION_VERSION, "LeaseID": session.lease_id}
        assert list_sessions(client, etcd_root) == {session.server_id: value}
        time.sleep(3.0)  # beyond the 2 s TTL: only the keep-alive keeps the key
        assert client.get(session.key) is not None
        assert client.refresh_lease(session.lease_id) > 0


def test_close_removes_the_key_at_once_without_reporting_a_loss(client, etcd_root):
    lost = []
    session = Session(client, etcd_root, ttl=30, on_lost=lost.append)
    session.close()
    assert client.get(session.key) is None
    assert client.refresh_lease(session.lease_id) == 0
    time.sleep(0.3)
    assert lost == [] and not session.lost


def test_on_lost_fires_once_when_the_lease_is_revoked_from_outside(client, etcd_server, etcd_root):
    lost = []
    with Session(client, etcd_root, ttl=2, on_lost=lost.append) as session:
        with EtcdClient(etcd_server.endpoint) as other:
            other.revoke_lease(session.lease_id)
        wait_until(lambda: lost, timeout=5, what="on_lost")
        time.sleep(1.0)  # the keep-alive also notices; it must not report again
        assert len(lost) == 1 and session.key in lost[0]
        assert session.lost


def test_watch_sessions_reports_joins_and_leaves(client, etcd_root):
    events = []
    early = Session(client, etcd_root, ttl=2)
    watch = watch_sessions(client, etcd_root, "datanode",
                           lambda node, info: events.append(("join", node, info["ServerID"])),
                           lambda node: events.append(("leave", node)))
    late = Session(client, etcd_root, ttl=2)
    Session(client, etcd_root, role="querynode", ttl=2).close()  # another role: not reported
    early.close()
    wait_until(lambda: len(events) >= 3, what="join, join, leave")
    late.close()
    wait_until(lambda: len(events) >= 4, what="the last leave")
    watch.cancel()
    assert events == [("join", early.server_id, early.server_id), ("join", late.server_id, late.server_id),
                      ("leave", early.server_id), ("leave", late.server_id)]
