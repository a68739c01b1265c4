"""Prefix watches that survive broken streams and compaction."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

import aetcd
from aetcd import rpc
from aetcd.utils import prefix_range_end

from deltanode.etcd.errors import describe
from deltanode.etcd.loop import LoopOwner

log = logging.getLogger(__name__)

PUT = "PUT"
DELETE = "DELETE"

_MIN_BACKOFF = 0.1
_MAX_BACKOFF = 5.0
_SHUTDOWN_TIMEOUT = 1.0


@dataclass(frozen=True)
class WatchEvent:
    """One change under a watched prefix. A DELETE carries an empty value and version 0."""

    type: str
    key: str
    value: bytes
    version: int
    mod_revision: int


class PrefixWatch:
    """Delivers every PUT and DELETE under a prefix to a callback, in revision order.

    The callback runs on a thread owned by this watch, one event at a time, so a slow
    callback delays only this watch and never the etcd loop. Without ``start_revision``
    the watch starts right after the revision at which it listed the prefix; with
    ``replay`` the keys found by that listing are delivered first, as PUTs. Either way no
    change made after the constructor returns is missed.

    A broken stream is re-created from the next revision. If that revision was compacted
    away, the prefix is listed again and the difference to what was delivered goes out as
    synthetic events (a PUT per key that changed, a DELETE per key that vanished), so the
    callback still converges on the current state.
    """

    def __init__(self, client: LoopOwner, prefix: str, callback: Callable[[WatchEvent], None], *,
                 start_revision: int | None = None, replay: bool = False) -> None:
        self.prefix = prefix
        self._loop = client.loop
        self._key = prefix.encode()
        self._callback = callback
        self._known: dict[bytes, int] = {}  # key -> mod_revision of the PUT last delivered; loop only
        self._events: queue.SimpleQueue[WatchEvent | None] = queue.SimpleQueue()
        self._cancelled = False
        if start_revision is None:
            revision = self._loop.run(self._resync(deliver=replay))
        else:
            revision = start_revision - 1
        self._dispatcher = threading.Thread(target=self._dispatch, name=f"etcd-watch {prefix}",
                                            daemon=True)
        self._dispatcher.start()
        self._task = self._loop.spawn(self._run(revision))
        self._loop.adopt(self)

    def cancel(self) -> None:
        """Stop the watch; events not yet handed to the callback are dropped."""
        if self._cancelled:
            return
        self._cancelled = True
        self._loop.release(self)
        self._loop.cancel(self._task)
        self._events.put(None)
        if threading.current_thread() is not self._dispatcher:
            self._dispatcher.join(timeout=10)

    def _dispatch(self) -> None:
        while (event := self._events.get()) is not None and not self._cancelled:
            try:
                self._callback(event)
            except Exception:
                log.exception("watch callback on %r failed for %s %s", self.prefix, event.type, event.key)

    async def _run(self, revision: int) -> None:
        relist = False
        backoff = _MIN_BACKOFF
        while True:
            # A fresh aetcd Watcher (one gRPC stream) per attempt: aetcd's shared watcher
            # does not recover once its stream has failed.
            watcher = aetcd.Watcher(rpc.WatchStub(self._loop.aio.channel), timeout=self._loop.request_timeout)
            try:
                if relist:
                    revision = await self._resync(deliver=True)
                    relist = False
                stream: asyncio.Queue = asyncio.Queue()
                await watcher.add_callback(self._key, stream.put, range_end=prefix_range_end(self._key),
                                           start_revision=revision + 1)
                while True:
                    item = await stream.get()
                    if isinstance(item, BaseException):
                        raise item
                    revision = self._deliver(item)
                    backoff = _MIN_BACKOFF
            except aetcd.RevisionCompactedError:
                log.info("watch on %r: revision %d was compacted, listing the prefix again",
                         self.prefix, revision + 1)
                relist = True
            except Exception as exc:  # noqa: BLE001 - any break re-creates the watch; it must not end
                # Warned once per outage (the first retry); the retries after it go to DEBUG.
                log.log(logging.WARNING if backoff == _MIN_BACKOFF else logging.DEBUG,
                        "watch on %r broke (%s); re-creating it in %.1f s", self.prefix, describe(exc), backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
            finally:
                # Bounded: a stream that does not close gracefully must not keep a cancelled
                # watch from unwinding (its caller is waiting in EtcdLoop.cancel).
                try:
                    await asyncio.wait_for(watcher.shutdown(), _SHUTDOWN_TIMEOUT)
                except Exception as exc:  # noqa: BLE001 - the stream is discarded anyway (a timeout too)
                    log.debug("closing a watch stream on %r: %r", self.prefix, exc)

    def _deliver(self, event: aetcd.Event) -> int:
        kv = event.kv
        if event.kind == PUT:
            self._known[kv.key] = kv.mod_revision
        else:
            self._known.pop(kv.key, None)
        self._events.put(WatchEvent(event.kind, kv.key.decode(), kv.value, kv.version, kv.mod_revision))
        return kv.mod_revision

    async def _resync(self, *, deliver: bool) -> int:
        """List the prefix; optionally emit the difference to what was delivered. Returns the revision."""
        listing = await self._loop.aio.get_prefix(self._key)
        current = {kv.key: kv for kv in listing}
        if deliver:
            for key in sorted(self._known.keys() - current.keys()):
                self._events.put(WatchEvent(DELETE, key.decode(), b"", 0, listing.header.revision))
            for kv in sorted(current.values(), key=lambda kv: kv.mod_revision):
                if self._known.get(kv.key) != kv.mod_revision:
                    self._events.put(WatchEvent(PUT, kv.key.decode(), kv.value, kv.version, kv.mod_revision))
        self._known = {key: kv.mod_revision for key, kv in current.items()}
        return listing.header.revision
