"""A synchronous etcd v3 client running aetcd on a private asyncio loop (``loop.EtcdLoop``).

Every method here submits a coroutine to that loop and waits for it with a deadline;
long-lived work (lease keep-alive, watches) runs as tasks on the same loop and never blocks
callers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from aetcd.utils import prefix_range_end

from deltanode.config.sections.etcd import EtcdSecurity
from deltanode.etcd.errors import EtcdError, EtcdRefused, EtcdUnavailable
from deltanode.etcd.keepalive import KeepAlive
from deltanode.etcd.loop import EtcdLoop
from deltanode.etcd.reachability import Reachability
from deltanode.etcd.watch import PrefixWatch, WatchEvent

__all__ = ["EtcdClient", "EtcdError", "EtcdRefused", "EtcdSecurity", "EtcdUnavailable", "KeepAlive", "PrefixWatch",
           "WatchEvent"]


def _b(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


class EtcdClient:
    """Blocking facade over one etcd cluster.

    ``endpoints`` is a comma-separated list of ``host:port`` (an ``http://`` or ``https://``
    prefix is accepted); the first one that answers within ``connect_timeout`` is used, over TLS
    and logged in as ``security`` says. Each request must finish within ``request_timeout`` or
    raises :class:`EtcdUnavailable`; etcd refusing the client raises :class:`EtcdRefused`.
    """

    def __init__(self, endpoints: str, *, connect_timeout: float = 5.0, request_timeout: float = 5.0,
                 security: EtcdSecurity = EtcdSecurity()) -> None:
        self.loop = EtcdLoop(endpoints, connect_timeout=connect_timeout, request_timeout=request_timeout,
                             security=security)

    @property
    def endpoints(self) -> str:
        return self.loop.endpoints

    @property
    def security(self) -> EtcdSecurity:
        return self.loop.security

    @property
    def endpoint(self) -> str:
        """The endpoint connected to."""
        return self.loop.endpoint

    @property
    def request_timeout(self) -> float:
        return self.loop.request_timeout

    def close(self) -> None:
        """Stop every watch and keep-alive started here, then drop the connection.

        Leases are not revoked: their keys expire after the TTL, as after a crash.
        """
        self.loop.close()

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- key-value --------------------------------------------------------------------

    def get(self, key: str) -> tuple[bytes, int, int] | None:
        """``(value, version, mod_revision)`` of ``key``, or None when it does not exist."""
        kv = self.loop.run(self.loop.aio.get(_b(key)))
        return None if kv is None else (kv.value, kv.version, kv.mod_revision)

    def get_prefix(self, prefix: str) -> list[tuple[str, bytes, int]]:
        """``(key, value, version)`` of every key under ``prefix``, sorted by key."""
        kvs = self.loop.run(self.loop.aio.get_prefix(_b(prefix)))
        return [(kv.key.decode(), kv.value, kv.version) for kv in kvs]

    def get_prefixes(self, prefixes: list[str]) -> tuple[int, dict[str, list[tuple[str, bytes]]]]:
        """Every ``(key, value)`` under each of ``prefixes``, all read at one revision (the first
        range's): a consistent view of keys another system writes in several places. Returns that
        revision and the keys of each prefix, sorted by key."""
        aio = self.loop.aio

        async def ranges() -> tuple[int, dict[str, list[tuple[str, bytes]]]]:
            revision, out = 0, {}
            for prefix in prefixes:
                request = aio._build_get_range_request(key=_b(prefix), range_end=prefix_range_end(_b(prefix)))
                if revision:
                    request.revision = revision
                try:
                    response = await aio.kvstub.Range(request, timeout=aio._timeout, metadata=aio.metadata)
                except grpc.aio.AioRpcError as exc:
                    raise EtcdUnavailable(f"reading {prefix} at revision {revision or 'current'}: "
                                          f"{exc.code().name} {exc.details()}") from None
                revision = revision or response.header.revision
                out[prefix] = [(kv.key.decode(), kv.value) for kv in response.kvs]
            return revision, out
        return self.loop.run(ranges())

    def put(self, key: str, value: bytes | str, lease: int | None = None) -> None:
        self.loop.run(self.loop.aio.put(_b(key), _b(value), lease=lease))

    def delete(self, key: str) -> bool:
        """Delete ``key``; False when it did not exist."""
        return bool(self.loop.run(self.loop.aio.delete(_b(key))))

    def _txn(self, compare: list[Any], success: list[Any]) -> bool:
        succeeded, _ = self.loop.run(self.loop.aio.transaction(compare=compare, success=success, failure=[]))
        return bool(succeeded)

    def put_if_absent(self, key: str, value: bytes | str, lease: int | None = None) -> bool:
        """Create ``key``; False (and no write) when it already exists."""
        t = self.loop.aio.transactions
        return self._txn([t.version(_b(key)) == 0], [t.put(_b(key), _b(value), lease)])

    def put_all_if_absent(self, items: dict[str, bytes | str]) -> bool:
        """Create every key of ``items`` in one transaction; False (and no write) when one exists.
        etcd caps a transaction's operations (128 by default): keep ``items`` to 64 keys."""
        t = self.loop.aio.transactions
        return self._txn([t.version(_b(k)) == 0 for k in items], [t.put(_b(k), _b(v)) for k, v in items.items()])

    def compare_version_and_swap(self, key: str, expected_version: int, value: bytes | str) -> bool:
        """Overwrite ``key`` only if its version is still ``expected_version``.

        On success the key's version becomes ``expected_version + 1``.
        """
        t = self.loop.aio.transactions
        return self._txn([t.version(_b(key)) == expected_version], [t.put(_b(key), _b(value))])

    def compare_versions_and_swap(self, items: dict[str, tuple[int, bytes | str]]) -> bool:
        """``compare_version_and_swap`` of every ``key: (expected_version, value)`` in one
        transaction; False (and no write) when one key moved. Keep ``items`` to 64 keys."""
        t = self.loop.aio.transactions
        return self._txn([t.version(_b(k)) == version for k, (version, _) in items.items()],
                         [t.put(_b(k), _b(v)) for k, (_, v) in items.items()])

    def compare_value_and_swap(self, key: str, expected_value: bytes | str, value: bytes | str) -> bool:
        """Overwrite ``key`` only if it still holds ``expected_value``."""
        t = self.loop.aio.transactions
        return self._txn([t.value(_b(key)) == _b(expected_value)], [t.put(_b(key), _b(value))])

    def delete_if_version(self, key: str, version: int) -> bool:
        """Delete ``key`` only if its version is still ``version``."""
        t = self.loop.aio.transactions
        return self._txn([t.version(_b(key)) == version], [t.delete(_b(key))])

    def move_if_version(self, src: str, version: int, dst: str, value: bytes | str) -> bool:
        """Atomically delete ``src`` (if still at ``version``) and create ``dst``.

        False, and nothing written, when ``src`` changed or ``dst`` already exists.
        """
        t = self.loop.aio.transactions
        return self._txn([t.version(_b(src)) == version, t.version(_b(dst)) == 0],
                         [t.delete(_b(src)), t.put(_b(dst), _b(value))])

    # -- leases -----------------------------------------------------------------------

    def grant_lease(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds; returns its ID."""
        return self.loop.run(self.loop.aio.lease(ttl)).id

    def refresh_lease(self, lease_id: int) -> int:
        """Refresh a lease once; returns its new TTL, 0 when it expired or was revoked."""
        return self.loop.run(self.loop.aio.refresh_lease(lease_id)).TTL

    def revoke_lease(self, lease_id: int) -> bool:
        """Revoke a lease, deleting its keys; False when it no longer existed."""
        try:
            self.loop.run(self.loop.aio.revoke_lease(lease_id))
        except EtcdError as exc:
            if "lease not found" in str(exc):
                return False
            raise
        return True

    def keep_alive(self, lease_id: int, ttl: int, on_lost: Callable[[str], None],
                   reachability: Reachability | None = None) -> KeepAlive:
        """Refresh ``lease_id`` from the etcd loop until cancelled; see :class:`KeepAlive`."""
        return KeepAlive(self, lease_id, ttl, on_lost, reachability)

    # -- watches ----------------------------------------------------------------------

    def watch_prefix(self, prefix: str, callback: Callable[[WatchEvent], None],
                     start_revision: int | None = None, *, replay: bool = False) -> PrefixWatch:
        """Deliver every later PUT/DELETE under ``prefix`` to ``callback``; see :class:`PrefixWatch`."""
        return PrefixWatch(self, prefix, callback, start_revision=start_revision, replay=replay)
