"""One reconcile pass of MEP 7's channel assignment (coordinator): read everything, then carry out
what :mod:`.channel_policy` decides for each watch key, through :class:`.watch_keys.WatchKeys`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

from .channel_backoff import WatchFailures, WatchTimers
from .channel_policy import (
    WATCHED,
    Action,
    ChannelSpec,
    Decision,
    PassState,
    WatchEntry,
    balance_move,
    decide,
    finish,
    keeper,
    settled,
)
from .watch_keys import Assignment, WatchKeys

log = logging.getLogger(__name__)

# New vchannels written per etcd transaction (etcd allows 128 operations in one): a transaction
# is a durable write etcd waits for, so one per vchannel makes handing out 10,000 take minutes
# (docs/platform.md, "etcd 3.4 (channel watches and hand-outs)").
ASSIGNMENTS_PER_TXN = 64


def _guarded(what: str, action: Callable[..., None], *args: object) -> None:
    # One channel's trouble (a failing recovery() call, a lost etcd request) must not
    # hold up the others; whatever was not done is found again by the next pass.
    try:
        action(*args)
    except Exception:
        log.exception("handling %s failed; retried on the next pass", what)


class ChannelReconciler:
    """Applies the assignment rules to the nodes, channels and watch keys it reads, one pass at a time.

    Runs on the coordinator; called by the channel-manager thread (or a caller of
    ``ChannelManager.reconcile``), one pass at a time under the manager's lock.
    """

    def __init__(self, store: WatchKeys, channels: Callable[[], dict[str, ChannelSpec]],
                 nodes: Callable[[], Iterable[int]], watch_timeout: float, balance: bool) -> None:
        self._store = store
        self._channels = channels
        self._nodes = nodes
        self._balance = balance
        self._timers = WatchTimers(watch_timeout)
        self._failures = WatchFailures()
        self._balancing: dict[str, int] = {}   # vchannel -> the node a balance move takes it to

    def run(self) -> float:
        """One pass; returns the monotonic time of its earliest timer or backoff (inf: none)."""
        specs = self._channels()
        p = PassState(specs, {node: 0 for node in self._nodes()})
        entries = self._store.load()
        self._timers.begin_pass()
        by_channel: dict[str, list[WatchEntry]] = defaultdict(list)
        for entry in entries:
            by_channel[entry.vchannel].append(entry)
            p.moved(None, entry.node)
        for vchannel, group in sorted(by_channel.items()):
            kept = keeper(group, p)
            if kept is not None:
                p.held.add(vchannel)
            for entry in group:
                _guarded(entry.key, self._apply, entry, kept, p)
        new = [spec for vchannel, spec in sorted(specs.items()) if not spec.dropped and vchannel not in by_channel]
        for i in range(0, len(new), ASSIGNMENTS_PER_TXN):
            batch = new[i:i + ASSIGNMENTS_PER_TXN]
            _guarded(f"{len(batch)} new vchannels", self._assign, batch, p)
        if self._balance and settled(entries, p):
            _guarded("channel balance", self._rebalance, entries, p)
        self._timers.end_pass()
        return min(self._timers.next_deadline(), self._failures.next_retry(p.now))

    def _apply(self, e: WatchEntry, kept: WatchEntry | None, p: PassState) -> None:
        if e.node in p.load and e.info.state in WATCHED:
            self._failures.forget(e.vchannel)
        d = decide(e, kept, p, watch_timeout=self._timers.timeout)
        if d.action is Action.KEEP or (d.after_timeout and not self._timers.expired(e.key, e.version, p.now)):
            return
        if d.action is Action.WATCH_FAILED:
            assert e.node is not None   # decide: only a live node's key fails a watch
            self._failures.record(node=e.node, vchannel=e.vchannel, version=e.version, now=p.now)
        if d.action is Action.FINISH:
            if self._failures.waiting(e.vchannel, p.now):
                return   # its watch failed: it waits out its backoff first (the pass wakes up for it)
            d = finish(e, p, self._balancing.pop(e.vchannel, None), d.why)
        self._carry_out(e, d, p)

    def _carry_out(self, e: WatchEntry, d: Decision, p: PassState) -> None:
        if d.action is Action.DELETE:
            self._store.delete(e)
        elif d.action is Action.REMOVE:
            if self._store.delete(e):
                log.info("removed %s: %s", e.key, d.why)
                p.moved(e.node, None)
        elif d.action is Action.MOVE:
            self._move(e, d.node, p, d.why)
        elif d.action in (Action.RELEASE, Action.WATCH_FAILED):
            self._release(e, d.why)

    def _assign(self, specs: list[ChannelSpec], p: PassState) -> None:
        """Hand out vchannels that have no watch key, each to the least loaded node."""
        planned: list[Assignment] = []
        for spec in specs:
            node = p.least_loaded()
            try:
                planned.append(self._store.assignment(spec, node))
            except Exception:   # e.g. its recovery() failed: the others go on
                log.exception("handling %s failed; retried on the next pass", spec.vchannel)
                continue
            p.moved(None, node)
        if not planned:
            return
        written = {a.key for a in self._store.put_new(planned)}
        for a in planned:
            if a.key in written:
                log.info("assigned %s to %s", a.spec.vchannel, a.key)
                p.held.add(a.spec.vchannel)
            else:
                p.moved(a.node, None)

    def _move(self, e: WatchEntry, node: int | None, p: PassState, why: str) -> None:
        """Replace ``e`` by a fresh assignment of its channel to ``node`` (None: park it)."""
        assignment = self._store.assignment(p.specs[e.vchannel], node)
        if self._store.replace(e, assignment):
            log.info("moved %s to %s: %s", e.key, assignment.key, why)
            p.moved(e.node, node)
            p.held.add(e.vchannel)

    def _release(self, e: WatchEntry, why: str) -> None:
        if self._store.release(e):
            log.info("asked DataNode %d to release %s: %s", e.node, e.vchannel, why)

    def _rebalance(self, entries: list[WatchEntry], p: PassState) -> None:
        move = balance_move(entries, p, self._failures.cooling(p.now))
        if move is not None:
            self._balancing = {move.entry.vchannel: move.dst}
            self._release(move.entry, move.why)
