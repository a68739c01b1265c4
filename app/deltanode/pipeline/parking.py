"""The cycle's side of parked vchannels (driver): who parks, their ranges, moving their cursors.

A vchannel whose read of a cycle saw ticks only, and that ``may_park``, parks on its partition's
cursor (``flowgraph.tick_cursor``) when it stands where the cursor does. The next cycle plans
one position for each cursor (``GROUP``: its members read from the cursor's offset), ships
their routing rows as they were, and moves the cursor over the reads of its range. A member
leaves its cursor, and takes the general path for the cycle, when it had a message of its own
in the reads, when they failed or ended at a gap, when a flush is requested for its
collection, when a seal policy may be due (a tick reached the cursor's ``wake_ms``), when the
broker's high watermark is behind the cursor, and when it commits or changes in any way
(``VchannelFlowgraph.unpark``).

Parking is what keeps an idle cycle cheap for the driver at many vchannels: most of them read
nothing of their own, and a cursor is planned, shipped and moved once per partition where they
would each be planned, shipped and applied (``deltanode_bench.idle_cycle [--busy N]`` measures
this; docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..records import RangeKey, ReadRange, ReadStats, RouteRow
from ..vchannel.flowgraph import VchannelFlowgraph
from ..vchannel.tick_cursor import TickCursor
from ..wire.positions import physical_ms
from .plan import Position

# The name a cursor's position goes by in the plan (no vchannel name starts with it).
GROUP = "\0parked "


class CursorKey(NamedTuple):
    """A cursor's pchannel partition. A tuple, so that it is also the broker's key of the partition
    (``HighWatermarks.highs``) and the cursor's own (``TickCursor.key``)."""

    pchannel: str
    partition: int


@dataclass(frozen=True, kw_only=True)
class CursorSpan:
    """The range of a cycle that reads for a cursor's members (``Parking.expand``)."""

    first: int
    end: int
    own: int   # the number of the range's own members, listed before the cursor's


class Parking:
    """Runs on the driver, in the pipeline's loop thread."""

    def __init__(self) -> None:
        self._cursors: dict[CursorKey, TickCursor[VchannelFlowgraph]] = {}
        self._flushes: dict[int, int] = {}

    def cursors(self) -> list[TickCursor[VchannelFlowgraph]]:
        """The cursors with members."""
        return [c for c in self._cursors.values() if c.members]

    def park(self, fg: VchannelFlowgraph) -> None:
        """Park ``fg`` after a read of ticks only, if it may and stands where its cursor does."""
        if fg.parked or not fg.may_park():
            return
        state = fg.working
        key = CursorKey(fg.pchannel, state.partition)   # positional: asked for every vchannel that read ticks
        cursor = self._cursors.get(key)
        if cursor is None:
            cursor = self._cursors[key] = TickCursor(fg.pchannel, state.partition, state.checkpoint_offset)
        elif not cursor.members:
            cursor.restart(state.checkpoint_offset)
        elif cursor.offset != state.checkpoint_offset:
            return
        # Its rows while parked start after the TimeTick before the cursor: its own until the cursor reads one.
        fg.routes.tick = max(fg.routes.tick, state.checkpoint_ts)
        fg.park(cursor)

    def prepare(self, members: dict[str, VchannelFlowgraph], flushes: dict[int, int]) -> None:
        """Before a cycle plans: forget members no longer in ``members`` (released, or watched
        again as another flowgraph); unpark the members of collections with a new flush request
        (``flushes``: collection id -> its latest flush ts) and of cursors whose tick reached a
        member's seal policies."""
        changed = {cid for cid, ts in flushes.items() if self._flushes.get(cid) != ts}
        self._flushes = dict(flushes)
        for cursor in self.cursors():
            gone = [v for v, fg in cursor.members.items() if members.get(v) is not fg]
            for v in gone:
                cursor.members[v].unpark()
            if cursor.tick and physical_ms(cursor.tick) >= cursor.wake_ms:
                self.unpark_all(_key(cursor))
            elif changed:
                for fg in [fg for fg in cursor.members.values() if fg.collection_id in changed]:
                    fg.unpark()

    def keys(self) -> set[CursorKey]:
        return {_key(c) for c in self.cursors()}

    def unpark_all(self, key: CursorKey) -> list[VchannelFlowgraph]:
        """Every member of the cursor of ``key`` leaves it; returns them."""
        cursor = self._cursors.get(key)
        left = list(cursor.members.values()) if cursor is not None else []
        for fg in left:
            fg.unpark()
        return left

    def positions(self) -> list[Position]:
        """One position for each cursor with members, named ``GROUP`` + its pchannel and partition."""
        return [Position(_name(_key(c)), c.pchannel, c.partition, c.offset) for c in self.cursors()]

    def sizes(self) -> list[tuple[str, float | None]]:
        """(pchannel, size) of each cursor's members, for ``plan.planning_sizes``."""
        return [(c.pchannel, c.message_size) for c in self.cursors() if c.message_size]

    def expand(self, ranges: tuple[ReadRange, ...]) -> tuple[tuple[ReadRange, ...], dict[CursorKey, CursorSpan]]:
        """``ranges`` with each cursor's members in place of its position (after the range's own
        members), and, by cursor, the range that holds its members."""
        spans: dict[CursorKey, CursorSpan] = {}
        out = []
        for r in ranges:
            if not any(v.startswith(GROUP) for v in r.members):
                out.append(r)
                continue
            key = CursorKey(pchannel=r.pchannel, partition=r.partition)
            cursor = self._cursors[key]
            own = tuple(v for v in r.members if not v.startswith(GROUP))
            spans[key] = CursorSpan(first=r.first, end=r.end, own=len(own))
            out.append(replace(r, members=own + tuple(cursor.members)))
        return tuple(out), spans

    def pieces(self, pieces: list[ReadRange], spans: dict[CursorKey, CursorSpan]
               ) -> tuple[dict[RangeKey, tuple[str, ...]], dict[RangeKey, CursorKey]]:
        """The tasks' ``pieces`` of the expanded ranges (``spans``: ``expand``'s): by piece, its
        members not parked, and the cursor whose members it reads for, if any."""
        own: dict[RangeKey, tuple[str, ...]] = {}
        grouped: dict[RangeKey, CursorKey] = {}
        for piece in pieces:
            key = CursorKey(pchannel=piece.pchannel, partition=piece.partition)
            span = spans.get(key)
            if span is not None and span.first <= piece.first < span.end:
                grouped[piece.key] = key
                own[piece.key] = piece.members[:span.own]
            else:
                own[piece.key] = piece.members
        return own, grouped

    def members(self, key: CursorKey) -> tuple[str, ...]:
        return tuple(self._cursors[key].members)

    def unpark_past(self, highs: dict[tuple[str, int], int]) -> list[VchannelFlowgraph]:
        """The members of cursors past their partition's high watermark (``highs``, by the broker's
        key), unparked: the plan fails them as it fails a vchannel whose broker lost data."""
        past = [_key(c) for c in self.cursors() if c.key in highs and c.offset > highs[c.key]]
        return [fg for key in past for fg in self.unpark_all(key)]

    def flowgraphs(self, read: Iterable[CursorKey]) -> list[VchannelFlowgraph]:
        """The members of the cursors the cycle reads (``read``: ``expand``'s spans)."""
        return [fg for key in read for fg in self._cursors[key].members.values()]

    def rows(self, read: Iterable[CursorKey], rows: dict[str, RouteRow], schemas: dict[int, bytes],
             starts: dict[str, int], loads: dict[str, int]) -> None:
        """Add the routing row, start and loads of each member of the cursors the cycle reads
        (``read``: ``expand``'s spans) to the cycle's, and its collection's schema unless the cycle
        has one (the newest: ``vchannel.align_schemas``)."""
        for key in read:
            cursor = self._cursors[key]
            offset = cursor.offset
            for v, fg in cursor.members.items():
                rows[v] = fg.routes.at(offset, cursor.tick)
                schemas.setdefault(fg.collection_id, fg.schema_bytes)
                loads[v] = fg.loads
            starts.update(dict.fromkeys(cursor.members, offset))

    def settle(self, reads: list[ReadStats], grouped: dict[RangeKey, CursorKey],
               planned: dict[CursorKey, tuple[str, ...]], sizes: dict[str, float | None]) -> dict[CursorKey, list[str]]:
        """After a cycle's job: move each cursor over the reads of its range. Returns, by cursor,
        the vchannels parked on it when the cycle planned that take the general path for these
        reads: those that left it meanwhile, those that had a message of their own in them, and
        all of them when a read failed or ended at a gap (they leave the cursor first, at the
        offset their reads started from)."""
        by_key: dict[CursorKey, list[ReadStats]] = {}
        for read in reads:
            key = grouped.get(read.key)
            if key is not None:
                by_key.setdefault(key, []).append(read)
        general: dict[CursorKey, list[str]] = {}
        for key, names in planned.items():
            cursor = self._cursors[key]
            mine = sorted(by_key.get(key, ()), key=lambda r: r.first)
            if any(r.error is not None or r.next_position is not None for r in mine):
                self.unpark_all(key)
            else:
                for routed in (r.routed for r in mine if r.routed):
                    for v in routed:
                        fg = cursor.members.get(v)
                        if fg is not None:
                            fg.unpark()
            for r in mine:
                if cursor.members and r.first <= cursor.offset < r.end:
                    cursor.move(r.end, r.tick, r.tick_offset, sizes.get(r.pchannel))
            left = [v for v in names if v not in cursor.members]
            if left:
                general[key] = left
        return general


def _key(cursor: TickCursor[VchannelFlowgraph]) -> CursorKey:
    return CursorKey(pchannel=cursor.pchannel, partition=cursor.partition)


def _name(key: CursorKey) -> str:
    return f"{GROUP}{key.pchannel}[{key.partition}]"
