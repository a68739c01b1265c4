"""When a vchannel's Growing segments are sealed: a flush, or Milvus DataCoord's seal policies.

A sealed segment takes no row after its seal ts (a later insert into it is quarantined with
that reason: ``route.py``) and becomes Flushed in the batch whose TimeTick reaches that ts,
so in the same Delta commit as its last rows (``state_update.advance``). Downstream readers
can rely on it: Flushed means final. Every rule here is pure: it takes a vchannel's working
state and returns the state with its segments sealed, or None when nothing changes.

- A flush (``admin flush``, or the coordinator's request through etcd; Milvus's
  ``FlushChannels(flushTs)``) seals every Growing segment holding rows, at the flush ts or,
  when the vchannel has read past it already, at the largest ts it read; segments whose first
  rows up to that ts come later are sealed as they come (``Portion.sealed``).
- The policies, Milvus's DataCoord defaults (docs/milvus-facts.md §6): size (rows' bytes past
  ``seal_proportion`` of ``max_size``), lifetime (``max_life`` since its first row) and idle
  (``max_idle`` without a row, once ``min_size_from_idle`` big). Their clock is the
  vchannel's own, its last TimeTick: a vchannel replaying a day-old backlog does not seal every
  segment as idle, and the outcome is the same on every replay.

DeltaNode does not hand out segment IDs (a Milvus proxy asks DataCoord for them, and DataCoord
stops assigning a sealed segment); the producer picks them. So a sealed segment may still be
sent rows; they are quarantined, not lost.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..config.sections.pipeline import SealSettings
from ..state.channel_state import ChannelState, SegmentMeta, SegmentState
from ..wire.positions import physical_ms

FLUSH_REQUEST, FLUSH_MESSAGE, MANUAL_FLUSH = "flush", "flush message", "manual flush"
SCHEMA_CHANGE = "schema change"   # a Milvus 2.6 schema change: its streaming node flushed the segment for it


def _seconds(later_ts: int, earlier_ts: int) -> float:
    return (physical_ms(later_ts) - physical_ms(earlier_ts)) / 1000.0


def by_size(seg: SegmentMeta, now_ts: int, s: SealSettings) -> bool:
    return seg.size_bytes >= s.max_size * s.seal_proportion


def by_lifetime(seg: SegmentMeta, now_ts: int, s: SealSettings) -> bool:
    return seg.start_ts > 0 and _seconds(now_ts, seg.start_ts) >= s.max_life


def by_idle(seg: SegmentMeta, now_ts: int, s: SealSettings) -> bool:
    return seg.dml_ts > 0 and _seconds(now_ts, seg.dml_ts) >= s.max_idle and seg.size_bytes >= s.min_size_from_idle


SealPolicy = Callable[[SegmentMeta, int, SealSettings], bool]
POLICIES: tuple[tuple[str, SealPolicy], ...] = (("size", by_size), ("lifetime", by_lifetime), ("idle", by_idle))


def _seal(state: ChannelState, reasons: dict[int, str], at: int) -> ChannelState:
    new = state.copy()
    for seg_id, reason in reasons.items():
        seg = new.segments[seg_id]
        seg.state, seg.sealed_ts, seg.seal_reason = SegmentState.SEALED, at, reason
    return new


def _growing(state: ChannelState) -> list[SegmentMeta]:
    return [s for s in state.segments.values() if s.state == SegmentState.GROWING and s.num_rows > 0]


def seal_for_flush(state: ChannelState, flush_ts: int) -> ChannelState | None:
    """The state once a flush at ``flush_ts`` is taken; None for a request taken before (a
    replayed etcd key) or older than one taken."""
    if flush_ts <= state.flush_requested_ts:
        return None
    growing = _growing(state)
    at = max([flush_ts, state.checkpoint_ts, state.flush_ts] + [s.dml_ts for s in growing])
    new = _seal(state, {s.segment_id: FLUSH_REQUEST for s in growing}, at)
    new.flush_ts, new.flush_requested_ts = at, flush_ts
    return new


def first_due_ms(state: ChannelState, settings: SealSettings) -> float:
    """The vchannel clock (a TimeTick's physical ms) before which no policy seals any of the
    state's Growing segments: 0 when one is due by size, inf when none can be by time. The
    policies only read the segments and the clock, so while the segments stay the same object
    (a state is never changed in place) the clock alone decides, and ``seal_by_policies`` need
    not run before then, which spares an idle cycle running them for every vchannel
    (``deltanode_bench.idle_cycle --profile``). A millisecond early, for float rounding."""
    if not settings.by_policies:
        return math.inf
    due = math.inf
    for seg in _growing(state):
        if by_size(seg, 0, settings):
            return 0.0
        if seg.start_ts > 0:
            due = min(due, physical_ms(seg.start_ts) + settings.max_life * 1000.0 - 1.0)
        if seg.dml_ts > 0 and seg.size_bytes >= settings.min_size_from_idle:
            due = min(due, physical_ms(seg.dml_ts) + settings.max_idle * 1000.0 - 1.0)
    return due


def seal_by_policies(state: ChannelState, settings: SealSettings) -> ChannelState | None:
    """The state with the Growing segments a policy seals, at the vchannel's clock (its last
    TimeTick) or their last row's ts if later; None if none is due."""
    now = state.checkpoint_ts
    if now <= 0 or not settings.by_policies:
        return None
    reasons = {}
    for seg in _growing(state):
        reason = next((name for name, due in POLICIES if due(seg, now, settings)), None)
        if reason is not None:
            reasons[seg.segment_id] = reason
    if not reasons:
        return None
    return _seal(state, reasons, max([now] + [state.segments[s].dml_ts for s in reasons]))
