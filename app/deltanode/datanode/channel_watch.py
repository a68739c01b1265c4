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

from .watch_answers import WatchAnswers

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

    Each vchannel has its own serial queue (``SerialQueues``: a pool of threads), so a handler
    call that takes seconds delays neither other channels nor the etcd lease. While
    ``handler.watch`` runs, the tickle clock bumps ``progress`` in the key, at most every
    ``tickle_interval`` seconds and only when the handler reported progress since the last
    bump, so that the coordinator's watch timer restarts for a watch that moves, not for one
    that hangs.
    """

    def __init__(self, client: EtcdClient, root: str, node_id: int, handler: ChannelHandler,
                 tickle_interval: float = 15.0, workers: int = 32) -> None:
        """``workers``: how many watches run at once (``datanode.watch.workers``). A watch mostly
        waits (on its files, and on etcd for its answer), and the more wait together, the more
        answers share a transaction (``watch_answers``), so handing out thousands of new vchannels
        at once goes faster with more workers (docs/platform.md, "etcd 3.4 (channel watches and
        hand-outs)")."""
        self.node_id = node_id
        self._client = client
        self._handler = handler
        self._prefix = keys.channel_watch_prefix(root, node_id)
        self._queues = SerialQueues(f"channel-watch-{node_id}", workers=workers)
        self._answers = WatchAnswers(client, f"channel-watch-{node_id} answers")
        self._tickles = _TickleClock(client, tickle_interval)
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
        self._answers.close()
        self._tickles.stop()

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
        with self._owned_lock:   # not owned(): it copies 10,000 names, per event
            running = vchannel in self._owned
        if running:
            ok = True  # already running (the coordinator repeated itself): confirm, as Milvus does
        else:
            tickler = self._tickles.begin(event.key, info, version)
            try:
                self._handler.watch(info, tickler.mark_progress)
                ok = True
            except Exception:
                log.exception("watching %s failed", vchannel)
                ok = False
            finally:
                version = self._tickles.end(tickler)
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
            if self._answers.swap(key, version, answer.SerializeToString()):
                log.info("%s: %s -> %s", key.rsplit("/", 1)[-1], ChannelWatchState.name(info.state),
                         ChannelWatchState.name(state))
                return True
            log.info("%s changed before %s could be written", key, ChannelWatchState.name(state))
        except EtcdError as exc:
            log.error("writing %s to %s failed: %s", ChannelWatchState.name(state), key, exc)
        return False


class _Tickler:
    """One watch in progress, as the tickle clock sees it: the key's version after its last bump,
    whether the watch progressed since. ``lock`` orders a bump against the watch's end."""

    def __init__(self, key: str, info: ChannelWatchInfo, version: int) -> None:
        self.key, self.version = key, version
        self.info = ChannelWatchInfo()
        self.info.CopyFrom(info)
        self.lock = threading.Lock()
        self.progressed = False
        self.done = False          # the watch ended, or the key changed under it: no more bumps

    def mark_progress(self) -> None:
        self.progressed = True


class _TickleClock:
    """Bumps ``progress`` in the watch keys of watches that got further (Milvus's etcdTickler).

    Every ``interval`` seconds, each watch in progress that reported progress since its last
    bump gets the next ``progress`` value, with a compare-version-and-swap (written on change
    only, as Milvus does). :meth:`end` returns the version the key has after the watch's last
    bump, which the final answer must be swapped against. One thread serves every watch: a
    thread per watch, started and joined while the pipeline's threads hold the GIL, costs tens
    of milliseconds a watch, a minute for 10,000 vchannels.
    """

    def __init__(self, client: EtcdClient, interval: float) -> None:
        self._client, self._interval = client, interval
        self._watches: set[_Tickler] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, key: str, info: ChannelWatchInfo, version: int) -> _Tickler:
        watch = _Tickler(key, info, version)
        with self._lock:
            self._watches.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="channel-watch tickles", daemon=True)
                self._thread.start()
        return watch

    def end(self, watch: _Tickler) -> int:
        with self._lock:
            self._watches.discard(watch)
        with watch.lock:
            watch.done = True
            return watch.version

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            with self._lock:
                due = [w for w in self._watches if w.progressed]
            for watch in due:
                self._bump(watch)

    def _bump(self, watch: _Tickler) -> None:
        with watch.lock:
            if watch.done:
                return
            watch.progressed = False
            watch.info.progress += 1
            try:
                swapped = self._client.compare_version_and_swap(watch.key, watch.version,
                                                                watch.info.SerializeToString())
            except EtcdError as exc:
                log.warning("tickling %s failed: %s", watch.key, exc)
                return
            if not swapped:
                log.info("%s changed while watching; tickles stop", watch.key)
                watch.done = True
                return
            watch.version += 1


class SerialQueues:
    """Runs tasks one at a time per key, in submission order; different keys run in parallel on
    up to ``workers`` threads (started as needed, then kept).

    A thread per key, started for each burst of a key's work, cost tens of milliseconds a start
    while other threads held the GIL (10,000 vchannels handed out at once). With a pool, a key
    whose task hangs holds one worker; the others go on.
    """

    def __init__(self, name: str, workers: int = 8) -> None:
        self._name, self._workers = name, workers
        self._pending: dict[str, deque[Callable[[], None]]] = {}   # key -> its tasks not started yet
        self._running: set[str] = set()
        self._ready: deque[str] = deque()   # keys with a task to start and none running
        self._threads = 0
        self._idle = 0
        self._cond = threading.Condition()

    def submit(self, key: str, task: Callable[[], None]) -> None:
        with self._cond:
            tasks = self._pending.setdefault(key, deque())
            tasks.append(task)
            if len(tasks) == 1 and key not in self._running:
                self._ready.append(key)
            grow = self._idle == 0 and self._threads < self._workers
            if grow:
                self._threads += 1
            self._cond.notify()
        if grow:
            threading.Thread(target=self._work, name=f"{self._name} {self._threads}", daemon=True).start()

    def join(self, timeout: float) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: not self._pending and not self._running, timeout):
                log.warning("%s: %d channel(s) still busy after %.0f s", self._name,
                            len(self._pending) + len(self._running), timeout)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                self._cond.wait_for(lambda: bool(self._ready))
                self._idle -= 1
                key = self._ready.popleft()
                task = self._pending[key].popleft()
                self._running.add(key)
            try:
                task()
            except Exception:
                log.exception("%s: task for %s failed", self._name, key)
            with self._cond:
                self._running.discard(key)
                if self._pending[key]:
                    self._ready.append(key)
                else:
                    del self._pending[key]
                self._cond.notify_all()
