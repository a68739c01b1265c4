"""The DataNode side of MEP 7: take and give back vchannels as the coordinator writes them to etcd.

The coordinator writes ``{root}/channelwatch/{node_id}/{vchannel}`` (a ChannelWatchInfo in
state ToWatch or ToRelease); the node acts and answers in the same key with a
compare-version-and-swap against the version it acted on. Mirrors Milvus 2.3's
``datanode/event_manager.go``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from google.protobuf.message import DecodeError

from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient, EtcdError, PrefixWatch
from deltanode.etcd.watch import DELETE, WatchEvent
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState

log = logging.getLogger(__name__)

_END_STATES = frozenset({ChannelWatchState.WatchSuccess, ChannelWatchState.WatchFailure,
                         ChannelWatchState.ReleaseSuccess, ChannelWatchState.ReleaseFailure})


class ChannelHandler(Protocol):
    """What the node does with a channel. Calls for one vchannel never overlap."""

    def watch(self, info: ChannelWatchInfo, progressed: Callable[[], None]) -> None:
        """Start consuming ``info.vchan``; raise when that fails (the channel then counts as not started).

        Call ``progressed()`` whenever the watch gets further (Milvus: per segment loaded): only
        then does the tickler tell the coordinator, so a watch that hangs reaches its timeout."""

    def release(self, vchannel: str) -> None:
        """Stop consuming ``vchannel`` and drop its state."""


class ChannelWatcher:
    """Follows this node's channel watch keys and drives ``handler`` accordingly.

    Each vchannel has its own serial queue on its own thread, so a handler call that
    takes seconds delays neither other channels nor the etcd lease. While
    ``handler.watch`` runs, a tickler bumps ``progress`` in the key, at most every
    ``tickle_interval`` seconds and only when the handler reported progress since the last
    bump, so that the coordinator's watch timer restarts for a watch that moves, not for one
    that hangs.
    """

    def __init__(self, client: EtcdClient, root: str, node_id: int, handler: ChannelHandler,
                 tickle_interval: float = 15.0) -> None:
        self.node_id = node_id
        self._client = client
        self._handler = handler
        self._tickle_interval = tickle_interval
        self._prefix = keys.channel_watch_prefix(root, node_id)
        self._queues = _SerialQueues(f"channel-watch-{node_id}")
        self._owned: set[str] = set()
        self._owned_lock = threading.Lock()
        self._handled: dict[str, int] = {}  # vchannel -> mod_revision last handled; per-channel thread
        self._stopped = False
        self._watch: PrefixWatch | None = None

    def start(self) -> ChannelWatcher:
        """Handle the watch keys already present, then every change to them."""
        self._watch = self._client.watch_prefix(self._prefix, self._on_event, replay=True)
        return self

    def owned(self) -> set[str]:
        """The vchannels this node currently runs."""
        with self._owned_lock:
            return set(self._owned)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop following etcd and wait up to ``timeout`` s for running handler calls.

        Owned channels are not released: the node closes them itself when it shuts down.
        """
        self._stopped = True
        if self._watch is not None:
            self._watch.cancel()
        self._queues.join(timeout)

    def _on_event(self, event: WatchEvent) -> None:
        vchannel = event.key[len(self._prefix):]
        self._queues.submit(vchannel, lambda: self._handle(vchannel, event))

    def _handle(self, vchannel: str, event: WatchEvent) -> None:
        if self._stopped:
            return
        # A re-listed prefix (after compaction) may repeat what was handled already.
        if event.mod_revision <= self._handled.get(vchannel, 0):
            return
        self._handled[vchannel] = event.mod_revision
        if event.type == DELETE:
            self._release(vchannel, "its watch key was deleted")
            return
        try:
            info = ChannelWatchInfo.FromString(event.value)
        except DecodeError as exc:
            log.error("%s does not hold a ChannelWatchInfo (%s); ignored", event.key, exc)
            return
        if info.state in _END_STATES or info.progress != 0:
            return  # our own answers and tickles
        if info.state in (ChannelWatchState.ToWatch, ChannelWatchState.Uncomplete):
            self._watch_channel(vchannel, event, info)
        elif info.state == ChannelWatchState.ToRelease:
            self._release_channel(vchannel, event, info)
        else:
            log.warning("%s: state %s is not acted on", event.key, ChannelWatchState.name(info.state))

    def _watch_channel(self, vchannel: str, event: WatchEvent, info: ChannelWatchInfo) -> None:
        version = event.version
        if vchannel in self.owned():
            ok = True  # already running (the coordinator repeated itself): confirm, as Milvus does
        else:
            tickler = _Tickler(self._client, event.key, info, version, self._tickle_interval)
            try:
                self._handler.watch(info, tickler.progressed)
                ok = True
            except Exception:
                log.exception("watching %s failed", vchannel)
                ok = False
            finally:
                version = tickler.stop()
            if ok:
                with self._owned_lock:
                    self._owned.add(vchannel)
        state = ChannelWatchState.WatchSuccess if ok else ChannelWatchState.WatchFailure
        if not self._answer(event.key, version, info, state) and ok:
            self._release(vchannel, "the coordinator changed its watch key meanwhile")

    def _release_channel(self, vchannel: str, event: WatchEvent, info: ChannelWatchInfo) -> None:
        ok = self._release(vchannel, "the coordinator asked for it")
        state = ChannelWatchState.ReleaseSuccess if ok else ChannelWatchState.ReleaseFailure
        self._answer(event.key, event.version, info, state)

    def _release(self, vchannel: str, why: str) -> bool:
        """Release ``vchannel`` if this node runs it; False when the handler failed."""
        with self._owned_lock:
            if vchannel not in self._owned:
                return True
            self._owned.discard(vchannel)
        log.info("releasing %s: %s", vchannel, why)
        try:
            self._handler.release(vchannel)
        except Exception:
            log.exception("releasing %s failed", vchannel)
            return False
        return True

    def _answer(self, key: str, version: int, info: ChannelWatchInfo, state: int) -> bool:
        """Write ``state`` back if the key is still at ``version``; False when it was not written."""
        answer = ChannelWatchInfo()
        answer.CopyFrom(info)
        answer.state = state
        answer.progress = 0
        try:
            if self._client.compare_version_and_swap(key, version, answer.SerializeToString()):
                log.info("%s: %s -> %s", key.rsplit("/", 1)[-1], ChannelWatchState.name(info.state),
                         ChannelWatchState.name(state))
                return True
            log.info("%s changed before %s could be written", key, ChannelWatchState.name(state))
        except EtcdError as exc:
            log.error("writing %s to %s failed: %s", ChannelWatchState.name(state), key, exc)
        return False


class _Tickler:
    """Bumps ``progress`` in the watch key when the watch got further (Milvus's etcdTickler).

    ``progressed()`` marks progress; every ``interval`` seconds a marked tickler writes the
    next ``progress`` value with a compare-version-and-swap (written on change only, as
    Milvus does). :meth:`stop` returns the version the key has after the last successful
    bump, which the final answer must be swapped against.
    """

    def __init__(self, client: EtcdClient, key: str, info: ChannelWatchInfo, version: int,
                 interval: float) -> None:
        self._client = client
        self._key = key
        self._info = ChannelWatchInfo()
        self._info.CopyFrom(info)
        self._version = version
        self._interval = interval
        self._progressed = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tickler {key}", daemon=True)
        self._thread.start()

    def progressed(self) -> None:
        self._progressed = True

    def stop(self) -> int:
        self._stopping.set()
        self._thread.join()
        return self._version

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            if not self._progressed:
                continue
            self._progressed = False
            self._info.progress += 1
            try:
                swapped = self._client.compare_version_and_swap(self._key, self._version,
                                                                self._info.SerializeToString())
            except EtcdError as exc:
                log.warning("tickling %s failed: %s", self._key, exc)
                continue
            if not swapped:
                log.info("%s changed while watching; tickler stops", self._key)
                return
            self._version += 1


class _SerialQueues:
    """Runs tasks one at a time per key, in submission order; different keys run in parallel.

    A key's thread lives while it has work, so idle channels cost nothing.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._pending: dict[str, deque[Callable[[], None]]] = {}
        self._idle = threading.Condition()

    def submit(self, key: str, task: Callable[[], None]) -> None:
        with self._idle:
            if key in self._pending:
                self._pending[key].append(task)
                return
            self._pending[key] = deque([task])
        threading.Thread(target=self._drain, args=(key,), name=f"{self._name} {key}", daemon=True).start()

    def join(self, timeout: float) -> None:
        with self._idle:
            if not self._idle.wait_for(lambda: not self._pending, timeout):
                log.warning("%s: %d channel(s) still busy after %.0f s", self._name,
                            len(self._pending), timeout)

    def _drain(self, key: str) -> None:
        while True:
            with self._idle:
                tasks = self._pending[key]
                if not tasks:
                    del self._pending[key]
                    self._idle.notify_all()
                    return
                task = tasks.popleft()
            try:
                task()
            except Exception:
                log.exception("%s: task for %s failed", self._name, key)
