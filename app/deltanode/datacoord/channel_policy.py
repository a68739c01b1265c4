"""Which node holds which vchannel: MEP 7's assignment rules as small, named policies (pure logic, coordinator).

Nothing here reads or writes etcd. A pass hands every stored watch key to :func:`decide`,
which answers with one :class:`Decision` and its reason, following Milvus 2.3's
``datacoord/channel_manager.go``:

- ``keeper``: of the keys of one live channel, the one allowed to hold it: watched beats
  pending, then the lowest node;
- a parked key (Milvus's buffer node) goes to the least loaded node once one is alive;
- a key of a node that is gone moves to the least loaded live node, or is deleted;
- a second holder is released; a dropped channel's key is removed;
- an answer of WatchFailure is released at once (the backoff comes before the next hand-out);
- ReleaseSuccess or ReleaseFailure ends the hand-over (:func:`finish`);
- ToWatch and ToRelease are given up on after ``watch_timeout`` without an answer.

Balance (:func:`balance_move`) moves one channel when the most and the least loaded nodes
differ by two or more, and only once the assignment is :func:`settled`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from deltanode.wire.datapb import ChannelWatchInfo, ChannelWatchState

_S = ChannelWatchState
# States in which the node has, or is about to have, the channel running.
HOLDING = frozenset({_S.ToWatch, _S.Uncomplete, _S.WatchSuccess, _S.Complete})
WATCHED = frozenset({_S.WatchSuccess, _S.Complete})
AWAITING_WATCH = frozenset({_S.ToWatch, _S.Uncomplete})
RELEASED = frozenset({_S.ReleaseSuccess, _S.ReleaseFailure})


@dataclass(frozen=True)
class ChannelSpec:
    """A vchannel the coordinator should have consumed; ``dropped`` once its collection is gone."""

    vchannel: str
    collection_id: int
    dropped: bool = False


@dataclass(frozen=True, kw_only=True)
class WatchEntry:
    """One stored watch key. ``node`` is None for a parked channel (Milvus's buffer node);
    ``legacy_parked`` when it is parked under DeltaNode 0.1's ``remaining/`` instead."""

    key: str
    node: int | None
    vchannel: str
    info: ChannelWatchInfo
    version: int
    legacy_parked: bool = False


@dataclass
class PassState:
    """What one reconcile pass knows, updated as it writes.

    Runs on the coordinator; called by the channel-manager thread, within one pass.
    """

    specs: dict[str, ChannelSpec]
    load: dict[int, int]  # live node -> number of its watch keys
    held: set[str] = field(default_factory=set)  # vchannels with a keeper on a live node
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


class Action(enum.Enum):
    """What a pass does with one watch key."""

    KEEP = "keep"                      # nothing to do
    DELETE = "delete"                  # delete the key quietly: nothing holds the channel there
    REMOVE = "remove"                  # delete the key of a node's channel, which it then lets go of
    MOVE = "move"                      # a fresh assignment to ``Decision.node`` (None: park it)
    RELEASE = "release"                # ask the node to release the channel (ToRelease)
    WATCH_FAILED = "watch failed"      # count the failure, then release
    FINISH = "finish"                  # the hand-over ended: see :func:`finish`


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What to do with one watch key, and why. ``after_timeout``: only once the key has sat
    unanswered at its version for ``watch_timeout``."""

    action: Action
    why: str = ""
    node: int | None = None
    after_timeout: bool = False


KEEP = Decision(action=Action.KEEP)


@dataclass(frozen=True, kw_only=True)
class BalanceMove:
    """One channel to take from the most loaded node ``src`` to the least loaded ``dst``."""

    entry: WatchEntry
    src: int
    dst: int
    src_load: int
    dst_load: int

    @property
    def why(self) -> str:
        return f"balance: DataNode {self.src} holds {self.src_load} channels, DataNode {self.dst} {self.dst_load}"


def keeper(group: list[WatchEntry], p: PassState) -> WatchEntry | None:
    """The one key allowed to hold a live channel: watched beats pending, then the lowest node."""
    if not p.live(group[0].vchannel):
        return None
    holders = [e for e in group if e.node in p.load and e.info.state in HOLDING]
    holders.sort(key=lambda e: (e.info.state not in WATCHED, e.node))
    return holders[0] if holders else None


def decide(e: WatchEntry, keeper: WatchEntry | None, p: PassState, *, watch_timeout: float) -> Decision:
    """The rule for ``e`` given its channel's ``keeper`` and what the pass knows so far."""
    if e.node is None:
        return _parked(e, p)
    if e.node not in p.load:
        if p.live(e.vchannel) and e.vchannel not in p.held:
            return Decision(action=Action.MOVE, node=p.least_loaded(), why=f"DataNode {e.node} is gone")
        return Decision(action=Action.DELETE)
    state = e.info.state
    if state in HOLDING:
        if e is not keeper and p.live(e.vchannel):
            return Decision(action=Action.RELEASE, why="duplicate assignment")
        if e is not keeper:
            # Dropped: the key is deleted, as Milvus does after DropVirtualChannel; the node
            # releases the channel when it sees the deletion.
            return Decision(action=Action.REMOVE, why="its collection was dropped")
        if state in AWAITING_WATCH:
            return Decision(action=Action.RELEASE, after_timeout=True,
                            why=f"no answer to ToWatch within {watch_timeout:g} s")
        return KEEP
    if state == _S.WatchFailure:
        # Released at once, as Milvus does; the backoff applies before it is handed out again.
        return Decision(action=Action.WATCH_FAILED, why="the DataNode failed to watch it")
    if state == _S.ToRelease:
        return Decision(action=Action.FINISH, after_timeout=True,
                        why=f"no answer to ToRelease within {watch_timeout:g} s")
    if state in RELEASED:
        return Decision(action=Action.FINISH, why=f"{ChannelWatchState.name(state)} from DataNode {e.node}")
    return KEEP


def _parked(e: WatchEntry, p: PassState) -> Decision:
    if not p.live(e.vchannel) or e.vchannel in p.held:
        return Decision(action=Action.DELETE)
    if p.load:
        return Decision(action=Action.MOVE, node=p.least_loaded(), why="a DataNode is alive again")
    if e.legacy_parked:
        return Decision(action=Action.MOVE, node=None, why="parked under Milvus's buffer node")
    return KEEP


def finish(e: WatchEntry, p: PassState, balance_target: int | None, why: str) -> Decision:
    """The node let go of the channel (or was given up on): reassign it, or just remove the key.
    A balance move's ``balance_target`` gets it if that node is still alive and another one."""
    if not p.live(e.vchannel) or e.vchannel in p.held:
        return Decision(action=Action.REMOVE, why=why)
    target = balance_target
    if target not in p.load or target == e.node:
        target = p.least_loaded(exclude=e.node)
    return Decision(action=Action.MOVE, node=target, why=why)


def settled(entries: list[WatchEntry], p: PassState) -> bool:
    """Every live channel watched by one live node, and nothing else stored: no hand-over under way."""
    watched = [e for e in entries if e.node in p.load and e.info.state in WATCHED and p.live(e.vchannel)]
    live = [v for v in p.specs if p.live(v)]
    return len(watched) == len(entries) == len(live) and len({e.vchannel for e in watched}) == len(live)


def balance_move(entries: list[WatchEntry], p: PassState, cooling: Collection[int]) -> BalanceMove | None:
    """Of a settled assignment, the channel to move when the most and the least loaded nodes
    differ by two or more; nodes in ``cooling`` (a recent watch failure) are given none."""
    load = {node: 0 for node in p.load}
    for e in entries:
        assert e.node is not None   # settled: every entry is held by a live node, none is parked
        load[e.node] += 1
    targets = [n for n in load if n not in cooling]
    if len(load) < 2 or not targets:
        return None
    src = max(load, key=lambda n: (load[n], -n))
    dst = min(targets, key=lambda n: (load[n], n))
    if load[src] - load[dst] < 2:
        return None
    e = max((e for e in entries if e.node == src), key=lambda e: e.vchannel)
    return BalanceMove(entry=e, src=src, dst=dst, src_load=load[src], dst_load=load[dst])
