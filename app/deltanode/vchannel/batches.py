"""A vchannel's batches between two commits: the batches read since the last commit, the working
state after them, and what a commit of them carries (``sync``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..records import FileEntry, tick_from
from ..state.channel_state import ChannelState
from ..state.commit import VchannelSync, Watermarks
from .state_update import BatchOutcome, advance_ticks, moves_by_ticks
from .tick_cursor import TickCursor


@dataclass(frozen=True)
class Consumed:
    """What a vchannel read on this node since it was added, re-reads after a failure included
    (they were consumed twice): counters that only grow, for metrics."""

    rows: int = 0
    deletes: int = 0
    dml_messages: int = 0
    dml_bytes: int = 0
    quarantined: int = 0

    def plus(self, outcome: BatchOutcome, dml_bytes: int) -> Consumed:
        return Consumed(self.rows + outcome.inserted_rows, self.deletes + outcome.deleted_rows,
                        self.dml_messages + outcome.dml_messages, self.dml_bytes + dml_bytes,
                        self.quarantined + outcome.quarantined)


class Batches:
    """Runs on the driver, in the pipeline's loop thread. What changes it goes through its
    ``VchannelFlowgraph``, which leaves a cursor first; the pipeline reads its figures here. While
    the flowgraph is parked, they are behind its cursor by ticks alone, which add no file, bytes,
    urgency, segment, partition or drop: the loop thread reads ``state`` through
    ``VchannelFlowgraph.working``, which catches up first, and other threads (the compactor) read
    it here (None until the flowgraph is loaded), as catching up moves it."""

    # Slots: a node holds 10,000 flowgraphs, each with its batches, and every cycle reads a few
    # attributes of each (``deltanode_bench.idle_cycle``).
    __slots__ = ("state", "pending", "pending_since", "read_size", "min_range", "consumed", "_ticks_key",
                 "_ticks_move")

    def __init__(self) -> None:
        self.state: ChannelState | None = None    # the working state: after every batch read since the commit
        self.pending: list[BatchOutcome] = []
        self.pending_since: float | None = None   # monotonic time the oldest uncommitted data was read
        self.read_size: float | None = None       # bytes per message of its last ranges, once read
        self.min_range = 0                        # messages its next range needs (pack order: to reach a tick)
        self.consumed = Consumed()
        self._ticks_key: tuple | None = None      # what ``_ticks_move`` was worked out from (``moves_by_ticks``)
        self._ticks_move = False

    @property
    def _loaded(self) -> ChannelState:
        if self.state is None:
            raise RuntimeError("the flowgraph was never loaded")
        return self.state

    def load(self, state: ChannelState) -> None:
        """Start again from ``state``, the committed one: nothing pending."""
        self.state, self.pending, self.pending_since = state, [], None

    def drop(self) -> list[FileEntry]:
        """Forget what was not committed (a failure); returns its files to delete."""
        files = self.uncommitted_files()
        self.pending, self.pending_since = [], None
        return files

    def apply(self, outcome: BatchOutcome, now: float, read_size: float | None) -> None:
        """``read_size``: bytes per message of the ranges this batch came from."""
        self.consumed = self.consumed.plus(outcome, outcome.state.dml_bytes - self._loaded.dml_bytes)
        self.state = outcome.state
        if read_size:
            self.read_size = read_size
        last = self.pending[-1] if self.pending else None
        if outcome.idle and last is not None and last.idle:
            # An idle batch only moves the checkpoint: it takes the place of the idle one before
            # it, so that a vchannel waiting for its idle-checkpoint commit holds one batch and one
            # ChannelState, not one per cycle, and a sync walks one batch.
            self.pending[-1] = replace(outcome, start=last.start)
        else:
            self.pending.append(outcome)
        self.min_range = 0
        if not outcome.idle and self.pending_since is None:
            self.pending_since = now

    def moves_by_ticks(self, start: int) -> bool:
        """Whether a batch from ``start`` that saw ticks only can only move its checkpoint."""
        state = self._loaded
        if start != state.checkpoint_offset or state.collection_dropped:
            return False
        key = (state.segments, state.seek_ts, state.flush_ts, state.replay)
        if key != self._ticks_key:   # what ``moves_by_ticks`` reads (the same objects compare at once)
            self._ticks_key, self._ticks_move = key, moves_by_ticks(state)
        return self._ticks_move

    def move_by_ticks(self, start: int, end: int, tick: int, read_size: float | None) -> None:
        """A batch over ``[start, end)`` of ticks only (the last at ``tick``, 0: none), for a state
        that ``moves_by_ticks``: applied as ``apply`` would, without a BatchOutcome of its own."""
        state = self._loaded
        last = self.pending[-1] if self.pending else None
        if last is not None and last.idle:   # takes the place of the idle batch before it (``apply``)
            self.pending[-1] = advance_ticks(state, end, tick, last.start)
        else:
            self.pending.append(advance_ticks(state, end, tick, start))
        self.state = self.pending[-1].state
        if read_size:
            self.read_size = read_size
        self.min_range = 0

    def catch_up(self, cursor: TickCursor) -> None:
        """Move by what ``cursor`` read since the state last caught up with it, as one batch of ticks."""
        start = self._loaded.checkpoint_offset
        if cursor.offset > start:
            tick = tick_from(cursor.tick, cursor.tick_offset, start)
            self.move_by_ticks(start, cursor.offset, tick, cursor.read_size)

    def ticks_pending(self) -> bool:
        """Whether only batches of ticks wait to be committed, and ticks can only move the state
        (``VchannelFlowgraph.may_park``)."""
        return (self.state is not None and self.pending_since is None and bool(self.pending)
                and self.pending[-1].idle and self.min_range == 0 and self.moves_by_ticks(self.state.checkpoint_offset))

    def read_without_tick(self, messages: int) -> None:
        """Its replay filter's pack order found no TimeTick to end at in ``messages``: the next range
        is twice as long (up to the high watermark, where it waits for the next tick)."""
        self.min_range = max(2 * messages, 2)

    def skip_gap(self, position: int) -> None:
        """The next read starts at ``position``; the next commit's checkpoint covers the gap."""
        state = self._loaded.copy()
        state.checkpoint_offset = position
        self.state = state

    def message_size(self) -> float | None:
        """Bytes per message to plan its ranges with: its own Insert/Delete average, else what its
        last ranges held; None until it was read once."""
        return self._loaded.average_dml_bytes() or self.read_size

    def uncommitted_files(self) -> list[FileEntry]:
        return [f for b in self.pending for f in b.files]

    def pending_bytes(self) -> int:
        return sum(f.size for f in self.uncommitted_files())

    def urgent(self) -> bool:
        """Whether a batch waiting to be committed had control events or changed the replay filter."""
        return any(b.urgent for b in self.pending)

    def sync(self, watermarks: Watermarks) -> VchannelSync:
        """Everything read since the last commit, as one share of a collection commit."""
        return VchannelSync(self._loaded, watermarks, tuple(self.uncommitted_files()),
                            frozenset().union(*(b.newly_dropped for b in self.pending)))

    def committed(self, end: int, now: float) -> None:
        """A sync up to ``end`` is in Delta; batches read meanwhile stay pending."""
        done = [b for b in self.pending if b.end <= end]
        self.pending = self.pending[len(done):]
        self.pending_since = now if any(not b.idle for b in self.pending) else None
