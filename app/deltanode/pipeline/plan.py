"""What one cycle reads: offset ranges of pchannels, shared by their vchannels (pure logic, driver).

Each pchannel is read once per cycle for all the vchannels on it that are near its head: the
main lane, ``[min next offset, high watermark)`` within the caps. A vchannel far behind the
head (watched at an old seek position, or after a failover) would hold the others back, so
it reads on the pchannel's catch-up lane instead: one more range per pchannel, from the
smallest position behind, up to where the main lane starts, bounded by its own byte budget.
Once a vchannel is within ``merge window`` messages of the head it joins the main lane (the
main lane then re-reads those few messages once; the vchannels already past them skip them).
This is Milvus's msgdispatcher (one consumer per pchannel, a solo lane until caught up).

Byte budgets are shared by water-filling: every range gets up to an equal share, and what a
range does not need goes to the others, so a live pchannel is never starved by a backlog.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..config.sections.pipeline import Limits
from ..records import Lane, ReadRange

# The largest message a Milvus producer sends (docs/milvus-facts.md §1): the size a pchannel's
# messages are counted at until an average is known.
MAX_MESSAGE_BYTES = 10 << 20


# A vchannel never read is planned at this many times what its pchannel's reads have seen, and
# at no less than UNREAD_FLOOR.
UNREAD_FACTOR = 4
UNREAD_FLOOR = 64 << 10


def planning_sizes(learned: dict[str, float], vchannels: list[tuple[str, float | None]]) -> dict[str, float]:
    """Bytes per message each pchannel is planned at: what its reads have seen (``learned``), and
    never below any of its ``vchannels`` (pchannel, its own average or None when never read).

    A vchannel never read may have a backlog of larger messages than its neighbours' (a
    failover of a collection of 768-dim inserts onto a pchannel of small ones): it counts at
    ``UNREAD_FACTOR`` times the pchannel's learned size, or, when the pchannel's reads saw no
    Insert or Delete yet, times the largest size its other vchannels were read at (TimeTicks
    and DDL), and never below ``UNREAD_FLOOR``; at the largest Milvus message only when no
    vchannel of the pchannel was read. Counted at the largest message whatever is learned, many
    collections created at once (their vchannels start a few messages apart, none read yet)
    would read one message a cycle on each pchannel, and their first inserts would wait many
    cycles; counted so while only TimeTicks are read, vchannels watched with TimeTicks flowing
    would sit on the catch-up lanes, one message a cycle (the scale benchmark,
    ``deltanode_bench.scale``, measures both). A wrong guess costs one long cycle, until the
    first read teaches the size (reads raise a pchannel's size at once).
    """
    neighbours: dict[str, float] = {}
    for pchannel, own in vchannels:
        if own is not None:
            neighbours[pchannel] = max(neighbours.get(pchannel, 0.0), own)
    sizes = dict(learned)
    for pchannel, own in vchannels:
        if own is None:
            seen = learned.get(pchannel) or neighbours.get(pchannel)
            own = min(MAX_MESSAGE_BYTES, max(UNREAD_FLOOR, UNREAD_FACTOR * seen)) if seen else MAX_MESSAGE_BYTES
        sizes[pchannel] = max(sizes.get(pchannel, 0.0), own)
    return {p: size for p, size in sizes.items() if size}


class Position(NamedTuple):
    """Where a vchannel reads from this cycle (a named tuple: made for every vchannel of every
    cycle, 0.27 us against 0.75 us for a frozen dataclass)."""

    vchannel: str
    pchannel: str
    partition: int
    next_offset: int
    replaying: bool = False   # seeking or its replay filter active: its ranges are not split (order matters)
    min_messages: int = 0     # its range must hold this many messages, limits allowing (to reach a TimeTick)


@dataclass(frozen=True)
class Plan:
    ranges: tuple[ReadRange, ...]
    lost: dict[str, str]              # vchannel -> why it cannot be read (the broker lost its data)
    capped: bool                      # some range stopped short of the high watermark


@dataclass(frozen=True)
class _Want:
    pchannel: str
    partition: int
    first: int
    limit: int                        # the range may not go past this offset
    members: tuple[Position, ...]
    lane: Lane
    high: int


def merge_window(limits: Limits, average: float) -> int:
    """How many messages behind the head a vchannel may be and still read on the main lane."""
    return max(1, min(limits.max_messages, int(limits.catchup_bytes // max(average, 1.0))))


def plan_cycle(positions: list[Position], highs: dict[tuple[str, int], int], averages: dict[str, float],
               limits: Limits) -> Plan:
    """The ranges of one cycle; ``highs`` by (pchannel, partition), ``averages``: bytes per message."""
    lost: dict[str, str] = {}
    wants: list[_Want] = []
    by_channel: dict[tuple[str, int], list[Position]] = {}
    for pos in positions:
        by_channel.setdefault((pos.pchannel, pos.partition), []).append(pos)
    for (pchannel, partition), members in sorted(by_channel.items()):
        high = highs[(pchannel, partition)]
        for pos in members:
            if pos.next_offset > high:
                lost[pos.vchannel] = (f"{pchannel}[{partition}] ends at offset {high}, before the checkpoint "
                                      f"{pos.next_offset}: the broker lost data (a memory-only broker restarted?)")
        members = [p for p in members if p.vchannel not in lost]
        if not members:
            continue
        head = max(p.next_offset for p in members)
        window = merge_window(limits, averages.get(pchannel) or MAX_MESSAGE_BYTES)
        main = tuple(p for p in members if p.next_offset >= head - window)
        behind = tuple(p for p in members if p.next_offset < head - window)
        main_first = min(p.next_offset for p in main)
        wants.append(_Want(pchannel, partition, main_first, high, main, Lane.MAIN, high))
        if behind:
            wants.append(_Want(pchannel, partition, min(p.next_offset for p in behind), main_first, behind,
                               Lane.CATCH_UP, high))
    ranges: list[ReadRange] = []
    capped = False
    granted: list[tuple[_Want, int]] = []
    for lane, budget in ((Lane.MAIN, limits.max_bytes), (Lane.CATCH_UP, limits.catchup_bytes)):
        lane_wants = [w for w in wants if w.lane == lane and w.limit > w.first]
        granted += zip(lane_wants, _water_fill(lane_wants, averages, limits.max_messages, budget))
    if limits.cycle_messages is not None:
        granted = list(zip([w for w, _ in granted], share_out([n for _, n in granted], limits.cycle_messages)))
    for w, n in granted:
        n = max(n, min(w.limit - w.first, max((p.next_offset - w.first + p.min_messages for p in w.members
                                               if p.min_messages), default=0)))
        end = w.first + n
        capped = capped or end < w.limit
        vchannels = tuple(sorted(p.vchannel for p in w.members if p.next_offset < end))
        ranges.append(ReadRange(w.pchannel, w.partition, w.first, end, vchannels, w.lane,
                                splittable=not any(p.replaying for p in w.members if p.next_offset < end),
                                high=w.high))
    return Plan(tuple(ranges), lost, capped)


def share_out(desired: list[int], budget: int) -> list[int]:
    """``desired`` messages cut to ``budget`` in all: every range gets up to an equal share, what a
    range does not need goes to the others, and each keeps at least one (it must make progress)."""
    if sum(desired) <= budget:
        return list(desired)
    grants = [0] * len(desired)
    left, remaining = budget, len(desired)
    for i in sorted(range(len(desired)), key=lambda i: desired[i]):
        grants[i] = max(1, min(desired[i], left // remaining))
        left -= grants[i]
        remaining -= 1
    return grants


def _water_fill(wants: list[_Want], averages: dict[str, float], max_messages: int, budget: int) -> list[int]:
    """Messages granted to each want: up to ``max_messages``, bytes shared out equally, unused shares passed on."""
    desired = [min(w.limit - w.first, max_messages) for w in wants]
    sizes = [averages.get(w.pchannel) or MAX_MESSAGE_BYTES for w in wants]
    grants = [0] * len(wants)
    left, remaining = float(budget), len(wants)
    for i in sorted(range(len(wants)), key=lambda i: desired[i] * sizes[i]):
        share = left / remaining
        n = max(1, min(desired[i], int(share // sizes[i])))
        grants[i] = n
        left -= n * sizes[i]
        remaining -= 1
    return grants


def split_tasks(ranges: tuple[ReadRange, ...], averages: dict[str, float], splits: int,
                cuts: Callable[[int, int, int, int], list[int]]) -> list[list[ReadRange]]:
    """The cycle's ranges as at most ``splits`` tasks of about equal bytes.

    A range larger than a task's share is cut into contiguous pieces (unless a member's replay
    filter is active), so one busy vchannel still keeps every core busy. ``cuts(first, end, parts,
    high)``: where the broker lets a read start inside a range (``Broker.cut_points``).
    """
    if not ranges:
        return []

    def size(r: ReadRange) -> float:
        return r.messages * (averages.get(r.pchannel) or 1.0)

    target = sum(size(r) for r in ranges) / max(1, splits)
    pieces: list[ReadRange] = []
    for r in ranges:
        parts = min(splits, r.messages, math.ceil(size(r) / target)) if r.splittable and target > 0 else 1
        bounds = [r.first, *cuts(r.first, r.end, parts, r.high), r.end] if parts > 1 else [r.first, r.end]
        for a, b in zip(bounds, bounds[1:]):
            if b > a:
                pieces.append(replace(r, first=a, end=b, members=r.members))
    bins: list[list[ReadRange]] = [[] for _ in range(min(splits, len(pieces)))]
    loads = [0.0] * len(bins)
    for piece in sorted(pieces, key=size, reverse=True):
        i = loads.index(min(loads))
        bins[i].append(piece)
        loads[i] += size(piece)
    return [b for b in bins if b]
