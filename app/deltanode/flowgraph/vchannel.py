"""One vchannel's logical flowgraph on the driver: what it committed, what it read since, how it fails.

The shared pipeline reads and writes for many vchannels at once; each vchannel keeps its own
state here: the ChannelState it last committed to Delta (and its ``txn`` in each table), the
working state after every batch read since, the batches not committed yet, and its failures.
A failed flowgraph drops what it did not commit and starts again from Delta after a backoff,
alone: the other vchannels of the pipeline are not touched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from ..records import FileEntry, RouteRow, RouteTail, tick_from
from ..storage.channel_state import ChannelState
from ..storage.commit import VchannelSync, Watermarks
from ..wire.datapb import VchannelInfo
from ..wire.milvus_proto import schema_pb2
from ..wire.names import check_safe, pchannel_of
from ..wire.positions import CODECS, PositionCodec, physical_ms
from ..wire.schema import CollectionLayout
from .failure import Failure
from .recovery import check_topic, initial_state
from .seal_policy import SealSettings, first_due_ms, seal_by_policies, seal_for_flush
from .state_update import BatchOutcome, advance_ticks, moves_by_ticks
from .tick_cursor import TickCursor

MAX_BACKOFF = 60.0


class FlowgraphStatus(enum.StrEnum):
    """Where a vchannel's flowgraph stands on this node."""

    RUNNING = "running"
    FAILED = "failed"      # waits out its backoff, then is loaded again from Delta
    DROPPED = "dropped"    # its collection was dropped: nothing more to read, the drop's commit may be due


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


@dataclass(frozen=True)
class Snapshot:
    """A vchannel's figures for progress reports, admin and metrics."""

    vchannel: str
    status: str
    failures: int
    last_error: str
    checkpoint_offset: int | None
    checkpoint_ts: int | None
    rows_committed: int
    batches: int
    uncommitted_batches: int
    collection_id: int = 0
    pchannel: str = ""
    committed_dml_messages: int = 0   # the committed ChannelState's totals (durable, over every node)
    committed_dml_bytes: int = 0
    consumed: Consumed = Consumed()


class VchannelFlowgraph:
    """Runs on the driver; the pipeline's loop thread calls everything but ``snapshot``."""

    # Slots: a node holds 10,000 of these and every cycle reads a few attributes of each. Past 30
    # attributes CPython 3.11 stops sharing an instance dict's keys: with 31 and no slots, an idle
    # 10,000-vchannel cycle took 200-238 ms of CPU, with 26 and no slots 163-195, with slots
    # 148-154 (``deltanode_bench.idle_cycle``).
    __slots__ = ("vchannel", "pchannel", "collection_id", "info", "schema", "node_id", "positions", "layout",
                 "schema_bytes", "status", "failures", "retry_at", "last_failure", "committed", "watermarks",
                 "_working", "pending", "pending_since", "committed_at", "read_size", "min_range", "claim",
                 "consumed", "loads", "_route_key", "_route_head", "_route_tail", "_seal_kept", "_seal_from",
                 "_ticks_key", "_ticks_move", "_cursor")

    def __init__(self, info: VchannelInfo, schema: schema_pb2.CollectionSchema, node_id: int,
                 positions: PositionCodec = CODECS["kafka"]) -> None:
        self.vchannel = check_safe("vchannel", info.channelName)
        self.pchannel = pchannel_of(self.vchannel)
        self.collection_id = info.collectionID
        self.info, self.schema, self.node_id, self.positions = info, schema, node_id, positions
        self.layout = CollectionLayout.from_proto(schema)
        self.schema_bytes = schema.SerializeToString()   # shipped with every task that reads it
        self.status = FlowgraphStatus.FAILED            # until ``load``
        self.failures = 0
        self.retry_at = 0.0
        self.last_failure: Failure | None = None
        self.committed: ChannelState | None = None
        self.watermarks = Watermarks()
        self._working: ChannelState | None = None   # ``working``: set by ``load``
        self.pending: list[BatchOutcome] = []
        self.pending_since: float | None = None   # monotonic time the oldest uncommitted data was read
        self.committed_at = 0.0                   # monotonic time of the last commit (or the load)
        self.read_size: float | None = None       # bytes per message of its last ranges, once read
        self.min_range = 0                        # messages its next range needs (pack order: to reach a tick)
        # Set when it is loaded again after a refused commit while etcd confirmed this node owns it:
        # the other writer is a node cut off from etcd. Its next commit then goes out at once, even
        # with ticks only; waiting for the idle checkpoint interval as that node does, it would be
        # outpaced by it at every turn, each refusing the other's commit, and that node never stops.
        self.claim = False
        self.consumed = Consumed()
        self.loads = 0   # times loaded: a batch planned before the last load is not its own
        self._route_key: tuple | None = None    # what ``route_row``'s kept part was made from
        self._route_head = (self.vchannel, self.collection_id, schema.name)
        self._route_tail: RouteTail | None = None
        self._seal_kept: tuple[object, SealSettings | None] = (None, None)   # segments, settings of ``_seal_from``
        self._seal_from = 0.0                     # no seal policy is due before this clock (``seal_due``)
        self._ticks_key: tuple | None = None      # what ``_ticks_move`` was worked out from (``read_ticks``)
        self._ticks_move = False
        self._cursor: TickCursor | None = None    # parked on it (``park``)

    @property
    def working(self) -> ChannelState:
        """The state after every batch read since the last commit. Set by ``load``, which the
        pipeline calls before the flowgraph joins it (a load that fails keeps the previous one).
        A parked flowgraph catches up with its cursor first."""
        if self._working is None:
            raise RuntimeError(f"{self.vchannel}: the flowgraph was never loaded")
        if self._cursor is not None:
            self._catch_up(self._cursor)
        return self._working

    @working.setter
    def working(self, state: ChannelState) -> None:
        assert self._cursor is None, "a parked flowgraph's state changes once it left its cursor"
        self._working = state

    @property
    def segments_state(self) -> ChannelState:
        """``working`` without catching up with a cursor, for other threads than the loop's (the
        compactor): a parked flowgraph's state is behind its cursor by ticks alone, which change
        no segment, partition or drop."""
        if self._working is None:
            raise RuntimeError(f"{self.vchannel}: the flowgraph was never loaded")
        return self._working

    @property
    def loaded(self) -> bool:
        return self._working is not None

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self, committed: ChannelState | None, watermarks: Watermarks, now: float, topic_id: str = "") -> None:
        """Start (again) from Delta's state of the vchannel; ``topic_id``: the broker's id of the
        pchannel topic now (recovery.check_topic), recorded with the next commit."""
        check_topic(committed, topic_id)
        self.unpark()
        self.loads += 1
        self.committed, self.watermarks = committed, watermarks
        self.working = initial_state(committed, self.info, self.node_id, self.positions)
        if topic_id:
            self.working.topic_id = topic_id
        self.pending, self.pending_since, self.committed_at = [], None, now
        self.status = FlowgraphStatus.DROPPED if self.working.collection_dropped else FlowgraphStatus.RUNNING

    def fail(self, failure: Failure, now: float) -> list[FileEntry]:
        """Stop until the backoff is over; returns the uncommitted files to delete."""
        self.unpark()
        files = self.uncommitted_files()
        self.failures += 1
        self.retry_at = now + min(MAX_BACKOFF, 2.0 ** self.failures)
        self.last_failure = failure
        self.status, self.pending, self.pending_since, self.claim = FlowgraphStatus.FAILED, [], None, False
        return files

    @property
    def last_error(self) -> str:
        """Why it last failed ("" if it never did), as logs and status documents show it."""
        return str(self.last_failure)[:500] if self.last_failure is not None else ""

    def uncommitted_files(self) -> list[FileEntry]:
        return [f for b in self.pending for f in b.files]

    @property
    def readable(self) -> bool:
        return self.status == FlowgraphStatus.RUNNING

    # -- batches -----------------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        return self.working.checkpoint_offset

    def route_row(self) -> RouteRow:
        """Its routing context for the next cycle's tasks, as ``RouteContexts`` carries it.

        Only the start offset moves from cycle to cycle for most vchannels: the rest is made
        again when the state's segments, dropped partitions, replay filter, seek, flush or the
        watermarks are other objects or values (a state is never changed in place: every change
        copies it first). Made whole for each of 10,000 vchannels, rows took 35 of an idle
        cycle's 126 ms of planning (``deltanode_bench.idle_cycle``)."""
        w, wm = self.working, self.watermarks
        key = (w.segments, w.dropped_partitions, w.replay, w.seek_ts, w.flush_ts, w.collection_dropped, wm)
        if key != self._route_key:   # the same objects compare at once; equal ones make the same row
            self._route_key = key
            self._route_tail = (w.seek_ts, frozenset(w.dropped_segments()) or None,
                                frozenset(w.dropped_partitions) or None, w.collection_dropped, w.replay,
                                wm.delete or 0, wm.quarantine or 0, w.flush_ts, w.sealed_segments() or None)
        assert self._route_tail is not None   # made above at the first call
        return self._route_head + (w.checkpoint_offset,) + self._route_tail

    def apply(self, outcome: BatchOutcome, now: float, read_size: float | None = None) -> None:
        """``read_size``: bytes per message of the ranges this batch came from."""
        self.unpark()
        self.consumed = self.consumed.plus(outcome, outcome.state.dml_bytes - self.working.dml_bytes)
        self.working = outcome.state
        if read_size:
            self.read_size = read_size
        last = self.pending[-1] if self.pending else None
        if outcome.idle and last is not None and last.idle:
            # An idle batch only moves the checkpoint: it takes the place of the idle one before
            # it. A vchannel waiting for its idle-checkpoint commit (at 10,000 vchannels, one
            # every 250 s) otherwise held a batch and a ChannelState per cycle, and every sync
            # walked them all (a sixth of an idle 10,000-vchannel driver's samples).
            self.pending[-1] = replace(outcome, start=last.start)
        else:
            self.pending.append(outcome)
        self.min_range = 0
        if not outcome.idle and self.pending_since is None:
            self.pending_since = now
        if outcome.state.collection_dropped:
            self.status = FlowgraphStatus.DROPPED   # nothing more to read; the commit of the drop is still due
        self._ran(now)

    def read_ticks(self, start: int, end: int, tick: int, now: float, read_size: float | None = None) -> bool:
        """A batch over ``[start, end)`` in which it saw no message of its own, only TimeTicks (the
        last at ``tick``, 0: none) and other vchannels' messages: applied as ``apply`` would, without
        its general path, when ticks can only move its checkpoint (``state_update.advance_ticks``).
        False, and nothing done, when it needs the general path (``advance``, then ``apply``).
        Most of a cycle's batches at 10,000 vchannels."""
        self.unpark()
        if not self.moves_by_ticks(start):
            return False
        self._move_by_ticks(start, end, tick, read_size)
        self._ran(now)
        return True

    def moves_by_ticks(self, start: int) -> bool:
        """Whether a batch from ``start`` that saw ticks only can only move its checkpoint."""
        state = self.working
        if start != state.checkpoint_offset or state.collection_dropped:
            return False
        key = (state.segments, state.seek_ts, state.flush_ts, state.replay)
        if key != self._ticks_key:   # what ``moves_by_ticks`` reads (the same objects compare at once)
            self._ticks_key, self._ticks_move = key, moves_by_ticks(state)
        return self._ticks_move

    def _move_by_ticks(self, start: int, end: int, tick: int, read_size: float | None) -> None:
        state = self._working
        assert state is not None   # loaded: the callers read ``working`` first
        last = self.pending[-1] if self.pending else None
        if last is not None and last.idle:   # takes the place of the idle batch before it (``apply``)
            self.pending[-1] = advance_ticks(state, end, tick, last.start)
        else:
            self.pending.append(advance_ticks(state, end, tick, start))
        self._working = self.pending[-1].state
        if read_size:
            self.read_size = read_size
        self.min_range = 0

    # -- parking (``tick_cursor``) ---------------------------------------------------------------
    @property
    def parked(self) -> bool:
        return self._cursor is not None

    def may_park(self) -> bool:
        """Whether it can follow a cursor: running, its ticks can only move its checkpoint, and
        nothing but ticks waits to be committed (a batch with rows, a claim or an urgent event
        is committed at the end of its cycle, which unparks it)."""
        return (self.status == FlowgraphStatus.RUNNING and self._working is not None and self.pending_since is None
                and not self.claim and bool(self.pending) and self.pending[-1].idle and self.min_range == 0
                and self.moves_by_ticks(self._working.checkpoint_offset))

    def park(self, cursor: TickCursor) -> None:
        """Follow ``cursor``, which stands where it does (``may_park``)."""
        assert self._cursor is None and cursor.offset == self.working.checkpoint_offset
        assert self.vchannel not in cursor.members, "a released flowgraph of the same name is forgotten first"
        cursor.message_size = max(cursor.message_size, self.message_size() or 0.0)
        cursor.wake_ms = min(cursor.wake_ms, self._seal_from)
        self._cursor = cursor
        cursor.members[self.vchannel] = self

    def unpark(self) -> None:
        """Catch up with its cursor and leave it: what changes or commits the state does this first."""
        cursor = self._cursor
        if cursor is not None:
            self._catch_up(cursor)
            self._cursor = None
            if cursor.members.get(self.vchannel) is self:   # not a flowgraph of the same name watched since
                del cursor.members[self.vchannel]

    def _catch_up(self, cursor: TickCursor) -> None:
        """Move by what its cursor read since it last caught up, as one batch of ticks."""
        assert self._working is not None   # parked, so loaded
        start = self._working.checkpoint_offset
        if cursor.offset > start:
            tick = tick_from(cursor.tick, cursor.tick_offset, start)
            self._move_by_ticks(start, cursor.offset, tick, cursor.read_size)

    def route_row_at(self, offset: int) -> RouteRow:
        """``route_row`` for a parked flowgraph, which starts at its cursor's ``offset``: nothing
        else of its row changed since it was last made (a change unparks it)."""
        assert self._route_tail is not None
        return self._route_head + (offset,) + self._route_tail

    def _ran(self, now: float) -> None:
        if self.failures and now - self.retry_at > MAX_BACKOFF:
            self.failures = 0       # a minute of running since the last failure: start the backoff over

    def request_flush(self, flush_ts: int) -> bool:
        """Seal its segments for a flush at ``flush_ts`` (once per request); whether it did."""
        self.unpark()
        sealed = seal_for_flush(self._working, flush_ts) if self._working is not None else None
        if sealed is not None:
            self.working = sealed
        return sealed is not None

    def seal_due(self, settings: SealSettings) -> list[int]:
        """Seal the Growing segments a seal policy says are due; their ids. The policies run only
        once the clock reaches where one may be due (``seal_policy.first_due_ms``), which is
        worked out again when the segments change."""
        self.unpark()
        state = self._working
        if state is None:
            return []
        if self._seal_kept[0] is not state.segments or self._seal_kept[1] is not settings:
            self._seal_kept, self._seal_from = (state.segments, settings), first_due_ms(state, settings)
        if state.checkpoint_ts <= 0 or physical_ms(state.checkpoint_ts) < self._seal_from:
            return []
        sealed = seal_by_policies(state, settings)
        if sealed is None:
            return []
        due = [s for s, seg in sealed.segments.items() if seg.state != self.working.segments[s].state]
        self.working = sealed
        return due

    def read_without_tick(self, messages: int) -> None:
        """Its replay filter's pack order found no TimeTick to end at in ``messages``: the next range
        is twice as long (up to the high watermark, where it waits for the next tick)."""
        self.unpark()
        self.min_range = max(2 * messages, 2)

    def skip_gap(self, position: int) -> None:
        """Move past positions the broker has no message at (a Pulsar ledger boundary): the next
        read starts at ``position``, and the next commit's checkpoint covers the gap."""
        self.unpark()
        state = self.working.copy()
        state.checkpoint_offset = position
        self.working = state

    def message_size(self) -> float | None:
        """Bytes per message to plan its ranges with: its own Insert/Delete average, else what its
        last ranges held; None until it was read once."""
        return self.working.average_dml_bytes() or self.read_size

    @property
    def uncommitted(self) -> bool:
        return bool(self.pending)

    @property
    def ticks_only(self) -> bool:
        """Its uncommitted batches only moved its checkpoint: no rows, events or claim (idle
        batches are never urgent, and ``pending_since`` is set by the first batch that is not idle)."""
        return self.pending_since is None and not self.claim

    @property
    def urgent(self) -> bool:
        return self.claim or any(b.urgent for b in self.pending)

    def pending_bytes(self) -> int:
        return sum(f.size for f in self.uncommitted_files())

    def sync(self) -> VchannelSync:
        """Everything read since the last commit, as one share of a collection commit."""
        return VchannelSync(self.working, self.watermarks, tuple(self.uncommitted_files()),
                            frozenset().union(*(b.newly_dropped for b in self.pending)))

    def committed_sync(self, sync: VchannelSync, watermarks: Watermarks, now: float) -> None:
        """``sync`` is in Delta; batches read meanwhile stay pending."""
        self.unpark()
        done = [b for b in self.pending if b.end <= sync.end]
        self.pending = self.pending[len(done):]
        self.committed, self.watermarks = sync.state, watermarks   # states are never changed in place
        self.committed_at, self.claim = now, False
        self.pending_since = now if any(not b.idle for b in self.pending) else None

    def snapshot(self) -> Snapshot:
        c = self.committed
        return Snapshot(self.vchannel, self.status, self.failures, self.last_error,
                        c.checkpoint_offset if c else None, c.checkpoint_ts if c else None,
                        c.rows if c else 0, c.batches if c else 0, len(self.pending), self.collection_id,
                        self.pchannel, c.dml_messages if c else 0, c.dml_bytes if c else 0, self.consumed)
