"""EtcdClient against a real etcd: conditional writes, endpoint choice, watches, keep-alive."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from deltanode.etcd.client import EtcdClient, EtcdUnavailable
from deltanode.etcd.endpoints import parse_endpoints
from deltanode.etcd.watch import DELETE, PUT
from deltanode.standalone.services import EmbeddedEtcd, free_port

from .support import wait_until


def test_parse_endpoints():
    assert parse_endpoints(" a:1, http://b:2/ ,https://c:3") == [("a", 1), ("b", 2), ("c", 3)]
    with pytest.raises(ValueError, match="host:port"):
        parse_endpoints("localhost")


def test_conditional_writes(client, etcd_root):
    k = f"{etcd_root}/k"
    assert client.get(k) is None
    assert client.put_if_absent(k, "a")
    assert not client.put_if_absent(k, "b")
    value, version, _ = client.get(k)
    assert (value, version) == (b"a", 1)

    assert not client.compare_version_and_swap(k, 5, "x")
    assert client.compare_version_and_swap(k, 1, "b")
    assert client.get(k)[:2] == (b"b", 2)
    assert not client.compare_value_and_swap(k, "a", "x")
    assert client.compare_value_and_swap(k, "b", "c")

    dst = f"{etcd_root}/moved"
    assert not client.move_if_version(k, 1, dst, "m")
    assert client.move_if_version(k, 3, dst, "m")
    assert client.get(k) is None
    assert client.get_prefix(f"{etcd_root}/") == [(dst, b"m", 1)]

    assert not client.delete_if_version(dst, 2)
    assert client.delete_if_version(dst, 1)
    assert not client.delete(dst)


def test_unreachable_etcd_fails_fast_naming_the_endpoints():
    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(EtcdUnavailable, match=dead):
        EtcdClient(dead, connect_timeout=1.0)
    assert time.monotonic() - started < 3


def test_first_reachable_endpoint_is_used(etcd_server):
    dead = f"127.0.0.1:{free_port()}"
    with EtcdClient(f"{dead},http://{etcd_server.endpoint}", connect_timeout=1.0) as c:
        assert c.endpoint == etcd_server.endpoint


def test_watch_delivers_changes_in_order_on_its_own_thread(client, etcd_root):
    client.put(f"{etcd_root}/w/old", "before")  # not replayed without replay=True
    seen, threads = [], set()

    def record(event):
        seen.append((event.type, event.key.rsplit("/", 1)[1], event.value, event.version))
        threads.add(threading.current_thread().name)

    watch = client.watch_prefix(f"{etcd_root}/w/", record)
    client.put(f"{etcd_root}/w/a", "1")
    client.put(f"{etcd_root}/w/a", "2")
    client.put(f"{etcd_root}/other", "x")
    client.delete(f"{etcd_root}/w/a")
    wait_until(lambda: len(seen) >= 3, what="three events")
    watch.cancel()
    assert seen == [(PUT, "a", b"1", 1), (PUT, "a", b"2", 2), (DELETE, "a", b"", 0)]
    assert threads == {f"etcd-watch {etcd_root}/w/"}


def test_watch_replays_existing_keys(client, etcd_root):
    client.put(f"{etcd_root}/r/a", "1")
    client.put(f"{etcd_root}/r/b", "2")
    seen = []
    watch = client.watch_prefix(f"{etcd_root}/r/", lambda e: seen.append((e.type, e.value)), replay=True)
    client.put(f"{etcd_root}/r/a", "3")
    wait_until(lambda: len(seen) >= 3, what="replay and one change")
    watch.cancel()
    assert seen == [(PUT, b"1"), (PUT, b"2"), (PUT, b"3")]


def test_watch_from_a_compacted_revision_relists(client, etcd_server, etcd_root):
    client.put(f"{etcd_root}/c/gone", "x")
    client.delete(f"{etcd_root}/c/gone")
    client.put(f"{etcd_root}/c/kept", "y")
    revision = client.get(f"{etcd_root}/c/kept")[2]
    request = urllib.request.Request(f"http://{etcd_server.endpoint}/v3/kv/compaction", method="POST",
                                     data=json.dumps({"revision": str(revision)}).encode())
    urllib.request.urlopen(request, timeout=5).close()

    seen = []
    watch = client.watch_prefix(f"{etcd_root}/c/", lambda e: seen.append((e.type, e.key, e.value)),
                                start_revision=1)
    wait_until(lambda: seen, what="the re-listed state")
    client.put(f"{etcd_root}/c/new", "z")
    wait_until(lambda: len(seen) >= 2, what="a change after the re-list")
    watch.cancel()
    assert seen == [(PUT, f"{etcd_root}/c/kept", b"y"), (PUT, f"{etcd_root}/c/new", b"z")]


def test_watch_resumes_after_etcd_restarts(tmp_path):
    etcd = EmbeddedEtcd(tmp_path / "etcd")
    etcd.start()
    try:
        with EtcdClient(etcd.endpoint, request_timeout=2.0) as c:
            seen = []
            watch = c.watch_prefix("r/", lambda e: seen.append(e.value))
            c.put("r/1", "before")
            wait_until(lambda: seen == [b"before"], what="the first event")
            etcd.stop()
            etcd = EmbeddedEtcd(tmp_path / "etcd", etcd.client_port, etcd.peer_port)
            etcd.start()
            wait_until(lambda: _try_put(c, "r/2", "after"), what="etcd back")
            wait_until(lambda: seen == [b"before", b"after"], what="an event after the restart")
            watch.cancel()
    finally:
        etcd.stop()


def _try_put(client, key, value) -> bool:
    try:
        client.put(key, value)
        return True
    except EtcdUnavailable:
        return False


def test_keep_alive_reports_a_revoked_lease_once(client, etcd_root):
    lease = client.grant_lease(2)
    client.put(f"{etcd_root}/leased", "x", lease=lease)
    reasons = []
    client.keep_alive(lease, 2, reasons.append)
    assert client.revoke_lease(lease)
    assert client.get(f"{etcd_root}/leased") is None
    wait_until(lambda: reasons, timeout=5, what="on_lost")
    time.sleep(1.0)
    assert len(reasons) == 1 and "revoked" in reasons[0]
    assert not client.revoke_lease(lease)
    assert client.refresh_lease(lease) == 0
