"""A synchronous etcd v3 client running aetcd on a private asyncio loop.

DeltaNode's etcd users (the session lease, the channel watch, the coordinator) are plain
threads, and the etcd3 package cannot be imported next to protobuf >= 4. So one daemon
thread runs an asyncio loop holding an ``aetcd.Client``; every method here submits a
coroutine to that loop and waits for it with a deadline. Long-lived work (lease
keep-alive, watches) runs as tasks on the same loop and never blocks callers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import aetcd

from deltanode.etcd.endpoints import parse_endpoints
from deltanode.etcd.errors import EtcdError, EtcdUnavailable, describe
from deltanode.etcd.keepalive import KeepAlive
from deltanode.etcd.reachability import Reachability
from deltanode.etcd.watch import PrefixWatch, WatchEvent

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["EtcdClient", "EtcdError", "EtcdUnavailable", "KeepAlive", "PrefixWatch", "WatchEvent"]


def _b(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


class EtcdClient:
    """Blocking facade over one etcd cluster.

    ``endpoints`` is a comma-separated list of ``host:port`` (an ``http://`` prefix is
    accepted); the first one that answers within ``connect_timeout`` is used. Each
    request must finish within ``request_timeout`` or raises :class:`EtcdUnavailable`.
    """

    def __init__(self, endpoints: str, *, connect_timeout: float = 5.0,
                 request_timeout: float = 5.0) -> None:
        self.endpoints = endpoints
        self.request_timeout = request_timeout
        self._closed = False
        self._children: set[Any] = set()  # watches and keep-alives to stop on close()
        self._children_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="etcd-loop", daemon=True)
        self._thread.start()
        try:
            self._aio, self.endpoint = self._connect(parse_endpoints(endpoints), connect_timeout)
        except BaseException:
            self._stop_loop()
            raise

    # -- plumbing ---------------------------------------------------------------------

    def _connect(self, candidates: list[tuple[str, int]], timeout: float) -> tuple[aetcd.Client, str]:
        errors = []
        for host, port in candidates:
            self.endpoint = f"{host}:{port}"  # named by the errors of this attempt
            try:
                return self._run(self._open(host, port, timeout), timeout + 1.0), self.endpoint
            except EtcdError as exc:
                errors.append(str(exc))
        raise EtcdUnavailable(f"etcd is not reachable at {self.endpoints!r}: {'; '.join(errors)}")

    async def _open(self, host: str, port: int, timeout: float) -> aetcd.Client:
        client = aetcd.Client(host, port, timeout=self.request_timeout)
        try:
            await asyncio.wait_for(client.status(), timeout)
        except BaseException:
            await client.close()
            raise
        return client

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the etcd loop and wait for its result."""
        if self._closed:
            coro.close()
            raise EtcdError("the etcd client is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking etcd call made from the etcd loop thread")
        timeout = self.request_timeout if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:  # also what asyncio.wait_for raises inside ``coro``
            future.cancel()
            raise EtcdUnavailable(f"etcd at {self.endpoint} did not answer within {timeout:.1f} s") from None
        except (aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError) as exc:
            raise EtcdUnavailable(f"etcd at {self.endpoint} is unavailable: {describe(exc)}") from exc
        except aetcd.ClientError as exc:
            raise EtcdError(f"etcd request to {self.endpoint} failed: {describe(exc)}") from exc

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task:
        """Start ``coro`` as a long-running task on the etcd loop."""
        async def start() -> asyncio.Task:
            return asyncio.get_running_loop().create_task(coro)

        return self._run(start())

    def _cancel(self, task: asyncio.Task) -> None:
        """Cancel a task started with :meth:`_spawn` and wait until it has unwound.

        Stopping never fails the caller: a task that does not unwind in time is left to
        finish on the loop on its own, with a warning.
        """
        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        try:
            self._run(stop())
        except EtcdUnavailable:
            log.warning("an etcd task on %s did not stop within %.1f s; abandoning it",
                        self.endpoint, self.request_timeout)

    def _adopt(self, child: Any) -> None:
        with self._children_lock:
            self._children.add(child)

    def _release(self, child: Any) -> None:
        with self._children_lock:
            self._children.discard(child)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def close(self) -> None:
        """Stop every watch and keep-alive started here, then drop the connection.

        Leases are not revoked: their keys expire after the TTL, as after a crash.
        """
        if self._closed:
            return
        with self._children_lock:
            children = list(self._children)
        for child in children:
            child.cancel()
        try:
            self._run(self._aio.close())
        except EtcdError as exc:
            log.warning("closing the etcd connection: %s", exc)
        self._closed = True
        self._stop_loop()

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- key-value --------------------------------------------------------------------

    def get(self, key: str) -> tuple[bytes, int, int] | None:
        """``(value, version, mod_revision)`` of ``key``, or None when it does not exist."""
        kv = self._run(self._aio.get(_b(key)))
        return None if kv is None else (kv.value, kv.version, kv.mod_revision)

    def get_prefix(self, prefix: str) -> list[tuple[str, bytes, int]]:
        """``(key, value, version)`` of every key under ``prefix``, sorted by key."""
        kvs = self._run(self._aio.get_prefix(_b(prefix)))
        return [(kv.key.decode(), kv.value, kv.version) for kv in kvs]

    def put(self, key: str, value: bytes | str, lease: int | None = None) -> None:
        self._run(self._aio.put(_b(key), _b(value), lease=lease))

    def delete(self, key: str) -> bool:
        """Delete ``key``; False when it did not exist."""
        return bool(self._run(self._aio.delete(_b(key))))

    def _txn(self, compare: list[Any], success: list[Any]) -> bool:
        succeeded, _ = self._run(self._aio.transaction(compare=compare, success=success, failure=[]))
        return bool(succeeded)

    def put_if_absent(self, key: str, value: bytes | str, lease: int | None = None) -> bool:
        """Create ``key``; False (and no write) when it already exists."""
        t = self._aio.transactions
        return self._txn([t.version(_b(key)) == 0], [t.put(_b(key), _b(value), lease)])

    def compare_version_and_swap(self, key: str, expected_version: int, value: bytes | str) -> bool:
        """Overwrite ``key`` only if its version is still ``expected_version``.

        On success the key's version becomes ``expected_version + 1``.
        """
        t = self._aio.transactions
        return self._txn([t.version(_b(key)) == expected_version], [t.put(_b(key), _b(value))])

    def compare_value_and_swap(self, key: str, expected_value: bytes | str, value: bytes | str) -> bool:
        """Overwrite ``key`` only if it still holds ``expected_value``."""
        t = self._aio.transactions
        return self._txn([t.value(_b(key)) == _b(expected_value)], [t.put(_b(key), _b(value))])

    def delete_if_version(self, key: str, version: int) -> bool:
        """Delete ``key`` only if its version is still ``version``."""
        t = self._aio.transactions
        return self._txn([t.version(_b(key)) == version], [t.delete(_b(key))])

    def move_if_version(self, src: str, version: int, dst: str, value: bytes | str) -> bool:
        """Atomically delete ``src`` (if still at ``version``) and create ``dst``.

        False, and nothing written, when ``src`` changed or ``dst`` already exists.
        """
        t = self._aio.transactions
        return self._txn([t.version(_b(src)) == version, t.version(_b(dst)) == 0],
                         [t.delete(_b(src)), t.put(_b(dst), _b(value))])

    # -- leases -----------------------------------------------------------------------

    def grant_lease(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds; returns its ID."""
        return self._run(self._aio.lease(ttl)).id

    def refresh_lease(self, lease_id: int) -> int:
        """Refresh a lease once; returns its new TTL, 0 when it expired or was revoked."""
        return self._run(self._aio.refresh_lease(lease_id)).TTL

    def revoke_lease(self, lease_id: int) -> bool:
        """Revoke a lease, deleting its keys; False when it no longer existed."""
        try:
            self._run(self._aio.revoke_lease(lease_id))
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
