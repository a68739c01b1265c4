"""Lease keep-alive running on the etcd client's loop."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from deltanode.etcd.errors import describe

if TYPE_CHECKING:
    from deltanode.etcd.client import EtcdClient

log = logging.getLogger(__name__)


class KeepAlive:
    """Refreshes a lease every third of its TTL until cancelled.

    ``on_lost(reason)`` is called once, on a new thread, when etcd reports the lease gone
    or when no refresh has succeeded for a whole TTL (etcd may have expired it by then).
    Refreshing stops after that.
    """

    def __init__(self, client: EtcdClient, lease_id: int, ttl: int,
                 on_lost: Callable[[str], None]) -> None:
        self.lease_id = lease_id
        self.ttl = ttl
        self._client = client
        self._on_lost = on_lost
        self._interval = max(ttl / 3, 0.1)
        self._done = False
        self._task = client._spawn(self._run())
        client._adopt(self)

    def cancel(self) -> None:
        if self._done:
            return
        self._done = True
        self._client._release(self)
        self._client._cancel(self._task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_ok = loop.time()
        while True:
            await asyncio.sleep(self._interval)
            try:
                reply = await asyncio.wait_for(self._client._aio.refresh_lease(self.lease_id), self._interval)
                ttl = reply.TTL
            except Exception as exc:
                if loop.time() - last_ok >= self.ttl:
                    self._lost(f"etcd lease {self.lease_id:x} not refreshed for {self.ttl} s: "
                               f"{describe(exc)}")
                    return
                log.warning("refreshing etcd lease %x failed: %s", self.lease_id, describe(exc))
                continue
            if ttl <= 0:
                self._lost(f"etcd lease {self.lease_id:x} expired or was revoked")
                return
            last_ok = loop.time()

    def _lost(self, reason: str) -> None:
        self._done = True
        self._client._release(self)
        threading.Thread(target=self._on_lost, args=(reason,), name="etcd-lease-lost", daemon=True).start()
