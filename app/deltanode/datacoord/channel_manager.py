"""The coordinator side of MEP 7: every live vchannel assigned to exactly one live DataNode.

State lives in etcd only: ``{root}/channelwatch/{node_id}/{vchannel}`` holds a
ChannelWatchInfo whose state says where the hand-over stands, and
``{root}/channelwatch/-9223372036854775808/{vchannel}`` (Milvus's buffer node, ``math.MinInt64``)
parks channels while no DataNode is alive; keys DeltaNode 0.1 parked under ``remaining/`` are
read as parked too and moved there.
Each :meth:`ChannelManager.reconcile` pass reads everything and applies the rules of
Milvus 2.3's ``datacoord/channel_manager.go`` to what it finds, so a restarted coordinator
simply carries on. Only the watch timers are in memory; they restart with the process.

Balance: once every channel is watched, a pass that finds one live DataNode holding two or
more channels more than another moves one channel from the most loaded node to the least
loaded one (ToRelease, then ToWatch on the chosen node), and the next move waits until that
hand-over has ended. A node that joins therefore takes over its share one channel at a time;
the moved channel resumes from its Delta checkpoint, so nothing is lost or written twice.
A node that failed a watch within ``FAILED_NODE_COOLDOWN`` is not given channels by balance.

The parts: :class:`ChannelManager` schedules the passes; :class:`.channel_reconciler.ChannelReconciler`
runs one; :mod:`.channel_policy` decides, key by key, without etcd; :class:`.watch_keys.WatchKeys`
reads and writes the keys; :mod:`.channel_backoff` keeps the watch timeouts and failure backoffs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient, PrefixWatch
from deltanode.etcd.session import list_sessions, watch_sessions
from deltanode.etcd.watch import WatchEvent
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.milvus_proto import schema_pb2

from .channel_policy import ChannelSpec
from .channel_reconciler import ChannelReconciler
from .watch_keys import WatchKeys

__all__ = ["ChannelManager", "ChannelSpec", "IDLE_PASS_SHARE"]

log = logging.getLogger(__name__)

# With nothing changed, passes take at most this share of the time: a pass over 10,000 watch
# keys and the Delta meta of 5,000 collections costs the driver about half a second, and the
# driver's CPU belongs to the cycles (docs/platform.md, "etcd 3.4 (channel watches and hand-outs)").
IDLE_PASS_SHARE = 0.05


class ChannelManager:
    """Assigns vchannels to DataNodes through etcd and drives every hand-over to its end.

    ``channels()`` returns the vchannels that should exist; a vchannel found in etcd but
    missing there is treated as dropped. ``recovery(vchannel)`` gives the VchannelInfo
    (seek position, segments) for a fresh watch and ``schema(vchannel)`` the collection
    schema. A ToWatch or ToRelease left unanswered for ``watch_timeout`` seconds (the
    DataNode's tickles restart the clock) is given up on.

    A pass runs when something changed (a node joined or left, a watch key changed, ``wake()``),
    when a timer or a failure's backoff is due, and otherwise every ``interval`` seconds, or
    ``1 / IDLE_PASS_SHARE`` times as long as the last pass took if that is longer. A pass reads
    every watch key: at 1,000 channels a pass a second costs a tenth of a core, taken from the
    DataNode that runs beside it in standalone.

    Runs on the coordinator, its passes on its own ``channel-manager`` thread; ``start``/``stop``
    are called by the coordinator's thread, ``wake`` by any thread (the catalog's watch), the
    ``_node_*``/``_key_changed`` callbacks by the etcd watches' threads.
    """

    def __init__(self, client: EtcdClient, root: str, channels: Callable[[], dict[str, ChannelSpec]],
                 recovery: Callable[[str], VchannelInfo], schema: Callable[[str], schema_pb2.CollectionSchema | None],
                 watch_timeout: float = 300.0, interval: float = 5.0, balance: bool = True) -> None:
        self._client = client
        self._root = root
        self._interval = interval
        self._passes = ChannelReconciler(WatchKeys(client, root, recovery, schema), channels,
                                         lambda: list_sessions(client, root, "datanode"), watch_timeout, balance)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._next_due = 0.0   # monotonic time of the earliest timer or backoff of the last pass
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._watches: list[PrefixWatch] = []

    def start(self) -> ChannelManager:
        """Reconcile at least every ``interval`` seconds, and at once when nodes or watch keys change."""
        self._watches = [
            watch_sessions(self._client, self._root, "datanode", self._node_joined, self._node_left),
            self._client.watch_prefix(keys.channel_watch_root(self._root), self._key_changed),
        ]
        self._thread = threading.Thread(target=self._run, name="channel-manager", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        for watch in self._watches:
            watch.cancel()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def wake(self) -> None:
        """Run a pass now (the set of channels changed)."""
        self._wake.set()

    def reconcile(self) -> None:
        """Read nodes, channels and watch keys once and apply the assignment rules."""
        with self._lock:
            self._next_due = self._passes.run()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            started = time.monotonic()
            try:
                self.reconcile()
            except Exception:
                log.exception("channel assignment pass failed; retrying in %.1f s", self._interval)
            # At least as long as the pass lasted, before the next: while thousands of vchannels
            # are handed out, every answer wakes a pass over all their keys, and passes back to
            # back would take the DataNode's driver in standalone.
            took = time.monotonic() - started
            if self._stopping.wait(min(took, self._interval)):
                return
            quiet = max(self._interval, took / IDLE_PASS_SHARE)
            self._wake.wait(min(quiet, max(0.2, self._next_due - time.monotonic())))

    def _node_joined(self, node: int, info: dict) -> None:
        log.info("DataNode %d joined (%s)", node, info.get("Address", ""))
        self._wake.set()

    def _node_left(self, node: int) -> None:
        log.info("DataNode %d left", node)
        self._wake.set()

    def _key_changed(self, event: WatchEvent) -> None:
        self._wake.set()
