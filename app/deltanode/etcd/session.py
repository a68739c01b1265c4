"""Node registration in etcd, as Milvus's ``sessionutil`` does it.

A node takes a server ID from the shared counter, writes ``{root}/session/{role}-{id}``
bound to a lease and keeps the lease alive. The key vanishing is how the coordinator
learns that the node is gone.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient, EtcdError, KeepAlive, PrefixWatch
from deltanode.etcd.reachability import Reachability
from deltanode.etcd.watch import DELETE, PUT, WatchEvent
from deltanode.failure.errors import DeltaNodeError

log = logging.getLogger(__name__)

#: Written as the session's ``Version`` (docs/milvus-facts.md §4): the protocol DeltaNode speaks is
#: Milvus 2.3's etcd channel watch, and a 2.4 DataCoord drives nodes at or below 2.4.1 that way
#: ("legacy" nodes). ``+deltanode`` is semver build metadata, ignored when versions are compared.
SESSION_VERSION = "2.3.0+deltanode"


class SessionError(DeltaNodeError):
    """A session could not be registered."""


def allocate_server_id(client: EtcdClient, root: str, attempts: int = 100) -> int:
    """Take the next server ID from ``{root}/session/id``, shared with Milvus's components.

    The counter is decimal text, created as "1" when absent; the ID taken is the value
    read, and the counter moves on with a compare-value-and-swap to value + 1.
    """
    key = keys.server_id_key(root)
    client.put_if_absent(key, b"1")
    for _ in range(attempts):
        current = client.get(key)
        if current is None:  # deleted by hand meanwhile: start over as Milvus would
            client.put_if_absent(key, b"1")
            continue
        value = current[0]
        try:
            server_id = int(value)
        except ValueError:
            raise SessionError(f"{key} holds {value!r}, not a decimal server ID") from None
        if client.compare_value_and_swap(key, value, str(server_id + 1)):
            return server_id
    raise SessionError(f"could not take a server ID from {key}: lost the race {attempts} times")


class Session:
    """A live registration of one node of a non-exclusive role (datanode, querynode, ...).

    ``on_lost(reason)`` is called at most once, when etcd answers that the lease expired or
    was revoked, or the session key is deleted; an etcd that does not answer is only
    reported to ``reachability``. Milvus kills the process at that point (TriggerKill); a
    DataNode registers a new session instead and goes on (``datanode.node``).
    """

    def __init__(self, client: EtcdClient, root: str, role: str = "datanode", address: str = "",
                 ttl: int = 30, on_lost: Callable[[str], None] | None = None,
                 reachability: Reachability | None = None) -> None:
        self.role = role
        self.address = address
        self.ttl = ttl
        self._client = client
        self._on_lost = on_lost
        self._state_lock = threading.Lock()
        self._closed = False
        self._lost = False
        self._watch: PrefixWatch | None = None
        self._keepalive: KeepAlive | None = None
        self.server_id = allocate_server_id(client, root)
        self.key = keys.session_key(root, role, self.server_id)
        self.lease_id = client.grant_lease(ttl)
        try:
            if not client.put_if_absent(self.key, json.dumps(self.info()), lease=self.lease_id):
                raise SessionError(f"session key {self.key} already exists; "
                                   f"was server ID {self.server_id} handed out twice?")
            self._watch = client.watch_prefix(self.key, self._on_event)
            self._keepalive = client.keep_alive(self.lease_id, ttl, self._mark_lost, reachability)
        except BaseException:
            client.revoke_lease(self.lease_id)
            raise
        log.info("registered %s as %s (lease %x, ttl %d s)", role, self.key, self.lease_id, ttl)

    def info(self) -> dict[str, Any]:
        """The session value, with the JSON field names of Milvus's ``sessionutil.Session``."""
        return {
            "ServerID": self.server_id,
            "ServerName": self.role,
            "Address": self.address,
            "Exclusive": False,
            "TriggerKill": True,
            "Version": SESSION_VERSION,
            "LeaseID": self.lease_id,
        }

    @property
    def lost(self) -> bool:
        return self._lost

    def close(self) -> None:
        """Deregister: revoking the lease deletes the session key at once."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._stop_tracking()
        try:
            self._client.revoke_lease(self.lease_id)
        except EtcdError as exc:
            log.warning("could not revoke the lease of %s (%s); the key expires within %d s",
                        self.key, exc, self.ttl)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stop_tracking(self) -> None:
        for child in (self._watch, self._keepalive):
            if child is not None:
                child.cancel()

    def _on_event(self, event: WatchEvent) -> None:
        # The watch is on a prefix, so ``datanode-1`` also sees ``datanode-10``.
        if event.key == self.key and event.type == DELETE:
            self._mark_lost(f"session key {self.key} was deleted")

    def _mark_lost(self, reason: str) -> None:
        with self._state_lock:
            if self._closed or self._lost:
                return
            self._lost = True
        log.error("%s lost its etcd session: %s", self.key, reason)
        self._stop_tracking()
        if self._on_lost is not None:
            self._on_lost(reason)


def _server_id(prefix: str, key: str) -> int | None:
    suffix = key[len(prefix):]
    return int(suffix) if suffix.isdigit() else None


def list_sessions(client: EtcdClient, root: str, role: str = "datanode") -> dict[int, dict[str, Any]]:
    """Server ID -> session value of every live node of ``role``."""
    prefix = keys.session_prefix(root, role)
    sessions = {}
    for key, value, _ in client.get_prefix(prefix):
        server_id = _server_id(prefix, key)
        if server_id is not None:
            sessions[server_id] = json.loads(value)
    return sessions


def watch_sessions(client: EtcdClient, root: str, role: str,
                   on_join: Callable[[int, dict[str, Any]], None],
                   on_leave: Callable[[int], None]) -> PrefixWatch:
    """Report nodes of ``role`` joining and leaving; the nodes alive now are reported as joins first."""
    prefix = keys.session_prefix(root, role)

    def on_event(event: WatchEvent) -> None:
        server_id = _server_id(prefix, event.key)
        if server_id is None:
            return
        if event.type == PUT:
            on_join(server_id, json.loads(event.value))
        else:
            on_leave(server_id)

    return client.watch_prefix(prefix, on_event, replay=True)
