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
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from deltanode.etcd import keys
from deltanode.etcd.client import EtcdClient, PrefixWatch
from deltanode.etcd.session import list_sessions, watch_sessions
from deltanode.etcd.watch import WatchEvent
from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState, VchannelInfo
from deltanode.wire.milvus_proto import schema_pb2

log = logging.getLogger(__name__)

_S = ChannelWatchState
# States in which the node has, or is about to have, the channel running.
_HOLDING = frozenset({_S.ToWatch, _S.Uncomplete, _S.WatchSuccess, _S.Complete})
_WATCHED = frozenset({_S.WatchSuccess, _S.Complete})
_AWAITING_WATCH = frozenset({_S.ToWatch, _S.Uncomplete})
_RELEASED = frozenset({_S.ReleaseSuccess, _S.ReleaseFailure})
FAILED_NODE_COOLDOWN = 300.0   # seconds a node that failed a watch is left out of balance moves
# New vchannels written per etcd transaction (etcd allows 128 operations in one): one at a time,
# 10,000 vchannels took 100 s to hand out.
ASSIGNMENTS_PER_TXN = 64
# With nothing changed, passes take at most this share of the time. At 10,000 watch keys (and
# the Delta meta of 5,000 collections), passes every 5 s were 11% of an idle standalone
# driver's busy samples (py-spy), about 0.6 s a pass, and 26% while it persisted 1,000 inserts
# a second.
IDLE_PASS_SHARE = 0.05


@dataclass(frozen=True)
class ChannelSpec:
    """A vchannel the coordinator should have consumed; ``dropped`` once its collection is gone."""

    vchannel: str
    collection_id: int
    dropped: bool = False


@dataclass
class _Entry:
    """One stored watch key. ``node`` is None for a parked channel (Milvus's buffer node)."""

    key: str
    node: int | None
    vchannel: str
    info: ChannelWatchInfo
    version: int


@dataclass
class _Pass:
    """What one reconcile pass knows, updated as it writes."""

    specs: dict[str, ChannelSpec]
    load: dict[int, int]  # live node -> number of its watch keys
    held: set[str] = field(default_factory=set)  # vchannels with a keeper on a live node
    timed: set[str] = field(default_factory=set)  # keys whose timer is still needed
    now: float = field(default_factory=time.monotonic)

    def live(self, vchannel: str) -> bool:
        spec = self.specs.get(vchannel)
        return spec is not None and not spec.dropped

    def least_loaded(self, exclude: int | None = None) -> int | None:
        """The live node with the fewest channels, avoiding ``exclude`` unless it is the only one."""
        candidates = [n for n in self.load if n != exclude] or list(self.load)
        return min(candidates, key=lambda n: (self.load[n], n), default=None)

    def moved(self, src: int | None, dst: int | None) -> None:
        if src in self.load:
            self.load[src] -= 1
        if dst in self.load:
            self.load[dst] += 1


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
    every watch key: at 1,000 channels a pass a second took a tenth of a core, competing with
    the DataNode that runs beside it in standalone.
    """

    def __init__(self, client: EtcdClient, root: str, channels: Callable[[], dict[str, ChannelSpec]],
                 recovery: Callable[[str], VchannelInfo], schema: Callable[[str], schema_pb2.CollectionSchema | None],
                 watch_timeout: float = 300.0, interval: float = 5.0, balance: bool = True) -> None:
        self._client = client
        self._root = root
        self._channels = channels
        self._recovery = recovery
        self._schema = schema
        self._watch_timeout = watch_timeout
        self._interval = interval
        self._balance = balance
        self._balancing: dict[str, int] = {}             # vchannel -> the node a balance move takes it to
        self._failed_nodes: dict[int, float] = {}        # node -> monotonic time of its last WatchFailure
        self._timers: dict[str, tuple[int, float]] = {}  # key -> (version seen, deadline)
        self._failures: dict[str, tuple[int, int, float]] = {}  # vchannel -> (count, version, retry at)
        self._last_op_id = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._next_due = 0.0   # monotonic time of the earliest timer or backoff of the last pass
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._watches: list[PrefixWatch] = []

    # -- lifecycle --------------------------------------------------------------------

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

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            started = time.monotonic()
            try:
                self.reconcile()
            except Exception:
                log.exception("channel assignment pass failed; retrying in %.1f s", self._interval)
            # At least as long as the pass took, before the next: while 10,000 vchannels were
            # handed out, every answer woke a pass over all their keys, back to back, on the
            # DataNode's driver in standalone.
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

    # -- one pass ---------------------------------------------------------------------

    def reconcile(self) -> None:
        """Read nodes, channels and watch keys once and apply the assignment rules."""
        with self._lock:
            specs = self._channels()
            nodes = list_sessions(self._client, self._root, "datanode")
            entries = self._load_entries()
            p = _Pass(specs, {node: 0 for node in nodes})
            by_channel: dict[str, list[_Entry]] = defaultdict(list)
            for entry in entries:
                by_channel[entry.vchannel].append(entry)
                p.moved(None, entry.node)
            for vchannel, group in sorted(by_channel.items()):
                keeper = self._keeper(group, p)
                if keeper is not None:
                    p.held.add(vchannel)
                for entry in group:
                    self._guarded(entry.key, self._apply, entry, keeper, p)
            new = [spec for vchannel, spec in sorted(specs.items()) if not spec.dropped and vchannel not in by_channel]
            for i in range(0, len(new), ASSIGNMENTS_PER_TXN):
                self._guarded(f"{len(new[i:i + ASSIGNMENTS_PER_TXN])} new vchannels", self._assign,
                              new[i:i + ASSIGNMENTS_PER_TXN], p)
            if self._balance and self._settled(entries, p):
                self._guarded("channel balance", self._rebalance, entries, p)
            self._timers = {k: v for k, v in self._timers.items() if k in p.timed}
            self._next_due = min([deadline for _, deadline in self._timers.values()]
                                 + [retry_at for _, _, retry_at in self._failures.values() if retry_at > p.now],
                                 default=math.inf)

    def _load_entries(self) -> list[_Entry]:
        root = keys.channel_watch_root(self._root)
        entries = []
        for key, value, version in self._client.get_prefix(root):
            node_part, _, vchannel = key[len(root):].partition("/")
            parked = node_part in (keys.BUFFER_NODE, keys.LEGACY_REMAINING)
            if not vchannel or not (node_part.isdigit() or parked):
                log.warning("ignoring %s: not {node}/{vchannel} under %s", key, root)
                continue
            try:
                info = ChannelWatchInfo.FromString(value)
            except DecodeError as exc:
                log.error("ignoring %s: not a ChannelWatchInfo (%s)", key, exc)
                continue
            node = None if parked else int(node_part)
            entries.append(_Entry(key, node, vchannel, info, version))
        return entries

    @staticmethod
    def _keeper(group: list[_Entry], p: _Pass) -> _Entry | None:
        """The one key allowed to hold a live channel: watched beats pending, then the lowest node."""
        if not p.live(group[0].vchannel):
            return None
        holders = [e for e in group if e.node in p.load and e.info.state in _HOLDING]
        holders.sort(key=lambda e: (e.info.state not in _WATCHED, e.node))
        return holders[0] if holders else None

    @staticmethod
    def _guarded(what: str, action: Callable[..., None], *args: object) -> None:
        # One channel's trouble (a failing recovery() call, a lost etcd request) must not
        # hold up the others; whatever was not done is found again by the next pass.
        try:
            action(*args)
        except Exception:
            log.exception("handling %s failed; retried on the next pass", what)

    def _apply(self, e: _Entry, keeper: _Entry | None, p: _Pass) -> None:
        state = e.info.state
        if e.node is None:
            if not p.live(e.vchannel) or e.vchannel in p.held:
                self._client.delete_if_version(e.key, e.version)
            elif p.load:
                self._move(e, p.least_loaded(), p, "a DataNode is alive again")
            elif e.key != keys.channel_watch_key(self._root, keys.BUFFER_NODE, e.vchannel):
                self._move(e, None, p, "parked under Milvus's buffer node")
        elif e.node not in p.load:
            if p.live(e.vchannel) and e.vchannel not in p.held:
                self._move(e, p.least_loaded(), p, f"DataNode {e.node} is gone")
            else:
                self._client.delete_if_version(e.key, e.version)
        elif state in _HOLDING:
            if state in _WATCHED:
                self._failures.pop(e.vchannel, None)
            if e is not keeper and p.live(e.vchannel):
                self._to_release(e, "duplicate assignment")
            elif e is not keeper:
                # Dropped: the key is deleted, as Milvus does after DropVirtualChannel; the node
                # releases the channel when it sees the deletion.
                if self._client.delete_if_version(e.key, e.version):
                    log.info("removed %s: its collection was dropped", e.key)
                    p.moved(e.node, None)
            elif state in _AWAITING_WATCH and self._expired(e, p):
                self._to_release(e, f"no answer to ToWatch within {self._watch_timeout:g} s")
        elif state == _S.WatchFailure:
            # Released at once, as Milvus does; the backoff applies before it is handed out again.
            self._failed_nodes[e.node] = p.now
            self._count_failure(e, p.now)
            self._to_release(e, "the DataNode failed to watch it")
        elif state == _S.ToRelease:
            if self._expired(e, p):
                self._finish(e, p, f"no answer to ToRelease within {self._watch_timeout:g} s")
        elif state in _RELEASED:
            self._finish(e, p, f"{ChannelWatchState.name(state)} from DataNode {e.node}")

    def _assign(self, specs: list[ChannelSpec], p: _Pass) -> None:
        """Hand out vchannels that have no watch key, each to the least loaded node: one etcd
        transaction for them all, or one each when some key appeared meanwhile."""
        planned = []
        for spec in specs:
            node = p.least_loaded()
            try:
                planned.append((spec, node, *self._assignment(spec, node)))
            except Exception:   # e.g. its recovery() failed: the others go on
                log.exception("handling %s failed; retried on the next pass", spec.vchannel)
                continue
            p.moved(None, node)
        if not planned:
            return
        if self._client.put_all_if_absent({key: value for _, _, key, value in planned}):
            written = planned
        else:
            written = []
            for spec, node, key, value in planned:
                if self._client.put_if_absent(key, value):
                    written.append((spec, node, key, value))
                else:
                    p.moved(node, None)
        for spec, _, key, _ in written:
            log.info("assigned %s to %s", spec.vchannel, key)
            p.held.add(spec.vchannel)

    def _finish(self, e: _Entry, p: _Pass, why: str) -> None:
        """The node let go of the channel (or was given up on): reassign it, or just drop the key."""
        if self._failures.get(e.vchannel, (0, -1, 0.0))[2] > p.now:
            return   # its watch failed: it waits out its backoff first (the pass wakes up for it)
        target = self._balancing.pop(e.vchannel, None)
        if p.live(e.vchannel) and e.vchannel not in p.held:
            if target not in p.load or target == e.node:
                target = p.least_loaded(exclude=e.node)
            self._move(e, target, p, why)
        elif self._client.delete_if_version(e.key, e.version):
            log.info("removed %s: %s", e.key, why)
            p.moved(e.node, None)

    def _move(self, e: _Entry, node: int | None, p: _Pass, why: str) -> None:
        """Replace ``e`` by a fresh assignment of its channel to ``node`` (None: park it)."""
        dst, value = self._assignment(p.specs[e.vchannel], node)
        if dst == e.key:
            done = self._client.compare_version_and_swap(e.key, e.version, value)
        else:
            done = self._client.move_if_version(e.key, e.version, dst, value)
        if done:
            log.info("moved %s to %s: %s", e.key, dst, why)
            p.moved(e.node, node)
            p.held.add(e.vchannel)

    def _to_release(self, e: _Entry, why: str) -> None:
        info = ChannelWatchInfo()
        info.CopyFrom(e.info)
        info.state = _S.ToRelease
        info.progress = 0
        info.startTs = int(time.time())
        info.opID = self._next_op_id()
        if self._client.compare_version_and_swap(e.key, e.version, info.SerializeToString()):
            log.info("asked DataNode %d to release %s: %s", e.node, e.vchannel, why)

    @staticmethod
    def _settled(entries: list[_Entry], p: _Pass) -> bool:
        """Every live channel watched by one live node, and nothing else stored: no hand-over under way."""
        watched = [e for e in entries if e.node in p.load and e.info.state in _WATCHED and p.live(e.vchannel)]
        live = [v for v in p.specs if p.live(v)]
        return len(watched) == len(entries) == len(live) and len({e.vchannel for e in watched}) == len(live)

    def _rebalance(self, entries: list[_Entry], p: _Pass) -> None:
        """Move one channel from the most to the least loaded node when they differ by two or more."""
        load = {node: 0 for node in p.load}
        for e in entries:
            assert e.node is not None   # _settled: every entry is held by a live node, none is parked
            load[e.node] += 1
        targets = [n for n in load if p.now - self._failed_nodes.get(n, -FAILED_NODE_COOLDOWN) >= FAILED_NODE_COOLDOWN]
        if len(load) < 2 or not targets:
            return
        src = max(load, key=lambda n: (load[n], -n))
        dst = min(targets, key=lambda n: (load[n], n))
        if load[src] - load[dst] < 2:
            return
        e = max((e for e in entries if e.node == src), key=lambda e: e.vchannel)
        self._balancing = {e.vchannel: dst}
        self._to_release(e, f"balance: DataNode {src} holds {load[src]} channels, DataNode {dst} {load[dst]}")

    def _count_failure(self, e: _Entry, now: float) -> None:
        """A failed watch (counted once per key version): the channel is handed out again 1 s after
        its first failure in a row, doubling up to 60 s, so a channel that cannot start does not spin."""
        count, version, _ = self._failures.get(e.vchannel, (0, -1, 0.0))
        if version != e.version:
            count += 1
            self._failures[e.vchannel] = (count, e.version, now + min(60.0, 2.0 ** (count - 1)))

    def _expired(self, e: _Entry, p: _Pass) -> bool:
        """Whether ``e`` has sat at its current version for ``watch_timeout``; starts the clock."""
        p.timed.add(e.key)
        version, deadline = self._timers.get(e.key, (None, 0.0))
        if version != e.version:
            self._timers[e.key] = (e.version, p.now + self._watch_timeout)
            return False
        return p.now >= deadline

    # -- values -----------------------------------------------------------------------

    def _assignment(self, spec: ChannelSpec, node: int | None) -> tuple[str, bytes]:
        """Key and value assigning ``spec`` to ``node``, or parking it when ``node`` is None."""
        if node is None:
            return keys.channel_watch_key(self._root, keys.BUFFER_NODE, spec.vchannel), self._parked(spec)
        return keys.channel_watch_key(self._root, node, spec.vchannel), self._to_watch(spec.vchannel)

    def _to_watch(self, vchannel: str) -> bytes:
        info = ChannelWatchInfo(vchan=self._recovery(vchannel), startTs=int(time.time()),
                                state=_S.ToWatch, opID=self._next_op_id())
        schema = self._schema(vchannel)
        if schema is not None:
            info.schema.CopyFrom(schema)
        return info.SerializeToString()

    def _parked(self, spec: ChannelSpec) -> bytes:
        """Nobody reads a parked channel's value: it is re-created from recovery() on hand-out."""
        vchan = VchannelInfo(collectionID=spec.collection_id, channelName=spec.vchannel)
        return ChannelWatchInfo(vchan=vchan, startTs=int(time.time()), state=_S.ToWatch,
                                opID=self._next_op_id()).SerializeToString()

    def _next_op_id(self) -> int:
        # Microseconds since the epoch, strictly increasing: larger than any opID written
        # by an earlier coordinator process.
        self._last_op_id = max(self._last_op_id + 1, time.time_ns() // 1000)
        return self._last_op_id
