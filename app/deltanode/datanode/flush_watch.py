"""The DataNode's side of flush requests: etcd's flush keys become pipeline flushes.

A PrefixWatch on ``etcd.flush_request.flush_prefix`` (keys listed first, so a request made
while the node was down is taken at start) hands each request to ``Pipeline.request_flush``.
A key that is not a flush request is logged and skipped; the watch goes on.
"""

from __future__ import annotations

import logging
from typing import Protocol

from ..etcd import flush_request
from ..etcd.client import EtcdClient
from ..etcd.watch import PUT, PrefixWatch, WatchEvent

log = logging.getLogger(__name__)


class Flushable(Protocol):
    def request_flush(self, collection_id: int, flush_ts: int) -> None: ...


class FlushWatcher:
    """Runs on the driver; its callback on the watch's own thread."""

    def __init__(self, client: EtcdClient, root: str, target: Flushable) -> None:
        self.client, self.root, self.target = client, root, target
        self._watch: PrefixWatch | None = None

    def start(self) -> FlushWatcher:
        self._watch = PrefixWatch(self.client, flush_request.flush_prefix(self.root), self._on_event, replay=True)
        return self

    def _on_event(self, event: WatchEvent) -> None:
        if event.type != PUT:
            return
        try:
            collection_id, flush_ts = flush_request.decode(self.root, event.key, event.value)
        except flush_request.BadFlushRequest as e:
            log.warning("ignoring %s", e)
            return
        log.info("flush request for collection %d at ts %d", collection_id, flush_ts)
        self.target.request_flush(collection_id, flush_ts)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
