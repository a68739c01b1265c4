"""Lease keep-alive running on the etcd client's loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from deltanode.etcd.errors import describe
from deltanode.etcd.loop import LoopOwner
from deltanode.etcd.reachability import Reachability


class KeepAlive:
    """Refreshes a lease every third of its TTL until cancelled.

    ``on_lost(reason)`` is called once, on a new thread, when etcd answers that the lease is
    gone; refreshing stops after that. Failed refreshes only go to ``reachability``: while
    etcd cannot be asked nobody knows whether the lease is still alive (a frozen etcd does
    not expire leases either), so the loss is declared on etcd's answer, never by a timer.
    """

    def __init__(self, client: LoopOwner, lease_id: int, ttl: int,
                 on_lost: Callable[[str], None], reachability: Reachability | None = None) -> None:
        self.lease_id = lease_id
        self.ttl = ttl
        self._loop = client.loop
        self._on_lost = on_lost
        self._reachability = reachability or Reachability(self._loop.endpoints)
        self._interval = max(ttl / 3, 0.1)
        self._done = False
        self._task = self._loop.spawn(self._run())
        self._loop.adopt(self)

    def cancel(self) -> None:
        if self._done:
            return
        self._done = True
        self._loop.release(self)
        self._loop.cancel(self._task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                reply = await asyncio.wait_for(self._loop.aio.refresh_lease(self.lease_id), self._interval)
                ttl = reply.TTL
            except Exception as exc:  # noqa: BLE001 - any failure is a missed refresh; keep refreshing
                self._reachability.failed(f"refreshing lease {self.lease_id:x}: {describe(exc)}")
                continue
            self._reachability.answered()
            if ttl <= 0:
                self._lost(f"etcd lease {self.lease_id:x} expired or was revoked")
                return

    def _lost(self, reason: str) -> None:
        self._done = True
        self._loop.release(self)
        threading.Thread(target=self._on_lost, args=(reason,), name="etcd-lease-lost", daemon=True).start()
