"""How one batch changes a vchannel's ChannelState (pure logic, no I/O).

A batch is the vchannel's portions of one cycle: contiguous offset ranges, read by tasks
that may have run concurrently (a range split for both cores). ``advance`` applies them in
offset order to the working state; ``retract_after_drops`` first takes back what a later
portion kept that an earlier portion's drop filters out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ..failure.errors import DeltaNodeError
from ..records import ControlEvent, EventKind, FileEntry, Portion, PortionStats, ReplayState, TableKind
from ..state.channel_state import ChannelState, SegmentMeta, SegmentState
from .seal_policy import FLUSH_MESSAGE, FLUSH_REQUEST, MANUAL_FLUSH, SCHEMA_CHANGE


class BatchRangeError(DeltaNodeError):
    """The portions of a batch do not continue the vchannel's offsets contiguously."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchOutcome:
    """What one batch did to a vchannel: its state after, its offsets and what a commit of it carries."""

    state: ChannelState           # the working state after the batch
    start: int
    end: int
    files: tuple[FileEntry, ...]  # to commit (retracted files are already deleted)
    newly_dropped: frozenset[int]
    inserted_rows: int
    deleted_rows: int
    quarantined: int
    dml_messages: int
    idle: bool                    # nothing to persist but the checkpoint: ticks, other shards' messages
    urgent: bool                  # control events or a replay filter change: sync without delay


_NOTHING_DROPPED: frozenset[int] = frozenset()
_SEAL_REASONS = {EventKind.SEGMENT_FLUSH: FLUSH_MESSAGE, EventKind.MANUAL_FLUSH: MANUAL_FLUSH,
                 EventKind.SCHEMA_CHANGE: SCHEMA_CHANGE}


def _dropped(everything: bool, parts: set[int], f: FileEntry) -> bool:
    """A data file that the drops filter out: any (a DropCollection) or one of ``parts`` (DropPartition)."""
    return f.table in (TableKind.INSERT, TableKind.DELETE, TableKind.REPLAYED_DELETES) and (
        everything or f.partition_id in parts)


def retract_after_drops(portions: list[Portion]) -> tuple[list[Portion], list[FileEntry]]:
    """Take back what a portion kept that a drop in an earlier portion of the same batch filters out.

    Concurrent tasks each start from the batch's state, so a portion after a DropPartition
    (DropCollection) still kept that partition's (every) inserts and deletes. Within one
    portion the router already filters them; here the later portions' segment counts and
    binlog files of the dropped partitions are removed, so the outcome is the one a single
    task would have had. Returns the corrected portions and the files to delete. (Quarantine
    rows of such messages stay: a record of bad input is never wrong.)
    """
    drops = sorted((e for p in portions for e in p.events
                    if e.kind in (EventKind.DROP_PARTITION, EventKind.DROP_COLLECTION)),
                   key=lambda e: e.offset)
    if not drops:
        return portions, []
    kept, discarded = [], []
    for p in portions:
        earlier = [e for e in drops if e.offset < p.first]
        everything = any(e.kind == EventKind.DROP_COLLECTION for e in earlier)
        parts = {e.partition_id for e in earlier if e.kind == EventKind.DROP_PARTITION}
        if not everything and not parts:
            kept.append(p)
            continue

        gone = functools.partial(_dropped, everything, parts)
        retracted = [f for f in p.files if gone(f)]
        discarded += retracted
        rows = {t: sum(f.rows for f in retracted if f.table == t) for t in (TableKind.INSERT, TableKind.DELETE)}
        stats = replace(p.stats, inserted_rows=p.stats.inserted_rows - rows[TableKind.INSERT],
                        deleted_rows=p.stats.deleted_rows - rows[TableKind.DELETE])
        kept.append(replace(p, files=tuple(f for f in p.files if not gone(f)), stats=stats,
                            segments={s: st for s, st in p.segments.items()
                                      if not (everything or st.partition_id in parts)}))
    return kept, discarded


def cut_after_short(portions: list[Portion]) -> tuple[list[Portion], list[Portion]]:
    """The portions up to the first that ends before its range does (``Portion.cut``: what follows it
    is read again), and the later ones, which are not applied: another task read them, from a
    piece of the same range past the cut."""
    ordered = sorted(portions, key=lambda p: p.first)
    for i, p in enumerate(ordered):
        if p.cut:
            return ordered[:i + 1], ordered[i + 1:]
    return portions, []


def moves_by_ticks(state: ChannelState) -> bool:
    """Whether a tick can only move the state's checkpoint: no seek, flush, replay filter or
    Sealed segment waits for one."""
    return (not state.seek_ts and not state.flush_ts and state.replay is None
            and all(seg.state != SegmentState.SEALED for seg in state.segments.values()))


def _ticks_only(state: ChannelState, portions: list[Portion]) -> bool:
    """Whether the batch only moves the checkpoint: its portions saw TimeTicks and other
    vchannels' messages, and no tick can change the state. Most batches of an idle vchannel are
    such, and they skip the general path's copy of the state and its segments (``advance_ticks``)."""
    return (all(not p.files and not p.segments and not p.events and not p.sealed and p.replay is None
                and p.stats == PortionStats(p.stats.max_tick) for p in portions)
            and moves_by_ticks(state))


def advance_ticks(state: ChannelState, end: int, tick: int, since: int) -> BatchOutcome:
    """The state after a batch up to ``end`` that saw no message of the vchannel's own, only
    TimeTicks (the last at ``tick``, 0: none) and other vchannels' messages, for a state that
    ``moves_by_ticks``; the outcome starts at ``since``. The new state shares the segments and
    lists of ``state`` (every change of a state copies it first)."""
    moved = state.shallow_copy()
    moved.checkpoint_offset, moved.batches = end, state.batches + 1
    if tick > state.checkpoint_ts:
        moved.checkpoint_ts = tick
    return BatchOutcome(state=moved, start=since, end=end, files=(), newly_dropped=_NOTHING_DROPPED,
                        inserted_rows=0, deleted_rows=0, quarantined=0, dml_messages=0, idle=True, urgent=False)


def advance(state: ChannelState, portions: list[Portion]) -> BatchOutcome:
    """The state after ``portions`` (error-free, retracted): segment counts, flush/drop events, checkpoint."""
    portions = _in_order(state, portions)
    start, end = portions[0].first, portions[-1].end
    if _ticks_only(state, portions):
        return advance_ticks(state, end, max(p.stats.max_tick for p in portions), start)
    new = state.copy()
    _count_rows(new, portions, end)
    _seal_after_flush_request(new, portions)
    before_dropped = state.dropped_segments()
    events = sorted((e for p in portions for e in p.events), key=lambda e: e.offset)
    for e in events:
        _apply_event(new, e, end)
    stats = [p.stats for p in portions]
    flushed = _move_checkpoint(new, stats, end)
    new.replay = _replay_after(state, portions)
    total = PortionStats(0, *(sum(getattr(s, f) for s in stats) for f in
                              ("dml_messages", "dml_bytes", "inserted_rows", "deleted_rows", "quarantined")))
    new.batches += 1
    new.rows += total.inserted_rows
    new.dml_messages += total.dml_messages
    new.dml_bytes += total.dml_bytes
    files = tuple(f for p in portions for f in p.files)
    sealing = bool(flushed) or any(p.sealed for p in portions) or (bool(state.flush_ts) and not new.flush_ts)
    idle = (not events and not files and not any(p.segments for p in portions) and new.replay == state.replay
            and not sealing and total.inserted_rows == total.deleted_rows == total.quarantined == 0)
    return BatchOutcome(state=new, start=start, end=end, files=files,
                        newly_dropped=frozenset(new.dropped_segments() - before_dropped),
                        inserted_rows=total.inserted_rows, deleted_rows=total.deleted_rows,
                        quarantined=total.quarantined, dml_messages=total.dml_messages, idle=idle,
                        urgent=bool(events) or new.replay != state.replay or sealing)


def _in_order(state: ChannelState, portions: list[Portion]) -> list[Portion]:
    """``portions`` by offset, once they are checked to continue the state's offsets contiguously."""
    portions = sorted(portions, key=lambda p: p.first)
    if not portions:
        raise BatchRangeError(f"{state.vchannel}: a batch without portions")
    if portions[0].first != state.checkpoint_offset:
        raise BatchRangeError(f"{state.vchannel}: batch starts at {portions[0].first}, expected "
                              f"{state.checkpoint_offset}")
    for a, b in zip(portions, portions[1:]):
        if a.end != b.first:
            raise BatchRangeError(f"{state.vchannel}: portions are not contiguous: [{a.first}, {a.end}) then "
                                  f"[{b.first}, {b.end})")
    return portions


def _count_rows(new: ChannelState, portions: list[Portion], end: int) -> None:
    """Add the portions' rows to their segments in ``new``; a segment seen first is Growing."""
    for p in portions:
        for seg_id, st in p.segments.items():
            seg = new.segments.get(seg_id)
            if seg is None:
                seg = new.segments[seg_id] = SegmentMeta(seg_id, st.partition_id, SegmentState.GROWING,
                                                         start_offset=st.first_offset, start_ts=st.first_ts)
            seg.num_rows += st.rows
            seg.size_bytes += st.bytes
            seg.dml_ts = max(seg.dml_ts, st.max_ts)
            seg.dml_offset = end
            if seg.start_offset < 0 or st.first_offset < seg.start_offset:
                seg.start_offset, seg.start_ts = st.first_offset, st.first_ts


def _seal_after_flush_request(new: ChannelState, portions: list[Portion]) -> None:
    """Seal the segments the portions sealed at the flush ts: their first rows read after the flush
    request reach its ts."""
    for seg_id in (s for p in portions for s in p.sealed):
        seg = new.segments[seg_id]
        if seg.state == SegmentState.GROWING:
            seg.state, seg.sealed_ts, seg.seal_reason = SegmentState.SEALED, new.flush_ts, FLUSH_REQUEST


def _apply_event(new: ChannelState, e: ControlEvent, end: int) -> None:
    """A Flush, DropPartition or DropCollection message read in the batch ending at ``end``."""
    if e.kind == EventKind.FLUSH:
        # Seal the segments that had rows before the flush; one first seen after it stays open.
        for seg in new.segments.values():
            if seg.state == SegmentState.GROWING and 0 <= seg.start_offset < e.offset:
                seg.state, seg.dml_offset = SegmentState.FLUSHED, end
                seg.sealed_ts, seg.seal_reason = e.ts, FLUSH_MESSAGE
    elif e.kind == EventKind.DROP_PARTITION:
        if e.partition_id not in new.dropped_partitions:
            new.dropped_partitions.append(e.partition_id)
        for seg in new.segments.values():
            if seg.partition_id == e.partition_id:
                seg.state = SegmentState.DROPPED
    elif e.kind == EventKind.DROP_COLLECTION:
        new.collection_dropped = True
        for seg in new.segments.values():
            seg.state = SegmentState.DROPPED
    elif e.kind in _SEAL_REASONS:
        # Milvus 2.6 seals the segments it names at the event's ts (a schema change, the segments its
        # streaming node flushed for it); each becomes Flushed once the checkpoint's tick reaches it
        # (``_move_checkpoint``). A segment without a row here has nothing to flush.
        reason = _SEAL_REASONS[e.kind]
        for seg_id in e.segments:
            found = new.segments.get(seg_id)
            if found is not None and found.state == SegmentState.GROWING:
                found.state, found.sealed_ts, found.seal_reason = SegmentState.SEALED, e.ts, reason


def _move_checkpoint(new: ChannelState, stats: list[PortionStats], end: int) -> list[SegmentMeta]:
    """Move ``new``'s checkpoint to ``end`` and its last tick; end the seek and the flush its ticks
    reach, and flush the Sealed segments they reach. Returns those segments."""
    new.checkpoint_offset = end
    new.checkpoint_ts = max([new.checkpoint_ts] + [s.max_tick for s in stats])
    if new.seek_ts and any(s.max_tick >= new.seek_ts for s in stats):
        new.seek_ts = 0    # the seek's TimeTick came: the seek rule is over (route.py)
    # A tick at or past a segment's seal ts: every row up to it was written before the tick, so
    # read by now (this batch or an earlier one): the segment is final, Flushed in this commit.
    flushed = [seg for seg in new.segments.values()
               if seg.state == SegmentState.SEALED and seg.sealed_ts <= new.checkpoint_ts]
    for seg in flushed:
        seg.state, seg.dml_offset = SegmentState.FLUSHED, end
    if new.flush_ts and new.checkpoint_ts >= new.flush_ts:
        new.flush_ts = 0
    return flushed


def _replay_after(state: ChannelState, portions: list[Portion]) -> ReplayState | None:
    """The replay filter after the batch: the one task that ran it returns it."""
    if len(portions) == 1:
        return portions[0].replay
    if any(p.replay is not None for p in portions):
        raise BatchRangeError(f"{state.vchannel}: the replay filter ran in a split batch: it must run in one task")
    return None
