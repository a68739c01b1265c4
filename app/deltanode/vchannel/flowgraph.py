"""One vchannel's logical flowgraph on the driver: what it is, where it stands, how it fails.

The shared pipeline reads and writes for many vchannels at once; each vchannel keeps its own
state in its flowgraph, made of parts with one job each: its batches since the last commit
(``batches``), the sealing of its segments (``sealing``), its routing row
(``route_rows``) and the cursor it follows while parked (``tick_cursor``). A failed flowgraph
drops what it did not commit and starts again from Delta after a backoff, alone: the other
vchannels of the pipeline are not touched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..config.sections.pipeline import SealSettings
from ..delta.table_schema import TableSchema, schema_rank
from ..failure.classify import MAX_BACKOFF, Failure, restart_delay
from ..records import FileEntry, RouteRow
from ..state.channel_state import ChannelState
from ..state.commit import VchannelSync, Watermarks
from ..wire.datapb import VchannelInfo
from ..wire.milvus_proto import schema_pb2
from ..wire.names import check_safe, pchannel_of
from ..wire.positions import CODECS, PositionCodec
from ..wire.schema import CollectionLayout
from .batches import Batches, Consumed
from .route_rows import RouteRows
from .sealing import Sealing
from .start_state import check_topic, initial_state
from .state_update import BatchOutcome
from .tick_cursor import TickCursor


class FlowgraphStatus(enum.StrEnum):
    """Where a vchannel's flowgraph stands on this node."""

    RUNNING = "running"
    FAILED = "failed"      # waits out its backoff, then is loaded again from Delta
    DROPPED = "dropped"    # its collection was dropped: nothing more to read, the drop's commit may be due


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
    """Runs on the driver; the pipeline's loop thread calls everything but ``snapshot``. It keeps
    the vchannel's identity, lifecycle and last commit, and the cursor it follows while parked;
    its parts keep the rest, and callers read their figures there. What changes or commits the
    state goes through the flowgraph, which leaves the cursor first (``unpark``)."""

    # Slots: a node holds 10,000 of these and every cycle reads a few attributes of each
    # (``deltanode_bench.idle_cycle``).
    __slots__ = ("vchannel", "pchannel", "collection_id", "info", "schema", "node_id", "positions", "layout",
                 "schema_bytes", "schema_rank", "table_schema", "status", "failures", "retry_at", "last_failure",
                 "loads", "committed", "watermarks", "committed_at", "claim", "batches", "_seals", "routes", "_cursor")

    def __init__(self, info: VchannelInfo, schema: schema_pb2.CollectionSchema, node_id: int,
                 positions: PositionCodec = CODECS["kafka"]) -> None:
        self.vchannel = check_safe("vchannel", info.channelName)
        self.pchannel = pchannel_of(self.vchannel)
        self.collection_id = info.collectionID
        self.info, self.node_id, self.positions = info, node_id, positions
        self._write_with(schema)
        self.status = FlowgraphStatus.FAILED            # until ``load``
        self.failures = 0
        self.retry_at = 0.0
        self.last_failure: Failure | None = None
        self.loads = 0   # times loaded: a batch planned before the last load is not its own
        self.committed: ChannelState | None = None
        self.watermarks = Watermarks()
        self.committed_at = 0.0   # monotonic time of the last commit (or the load)
        # Set when it is loaded again after a refused commit while etcd confirmed this node owns it:
        # the other writer is a node cut off from etcd. Its next commit then goes out at once, even
        # with ticks only; waiting for the idle checkpoint interval as that node does, it would be
        # outpaced by it at every turn, each refusing the other's commit, and that node never stops.
        self.claim = False
        self.batches = Batches()   # what changes it goes through the flowgraph, which leaves a cursor first
        self._seals = Sealing()
        self.routes = RouteRows(self.vchannel, self.collection_id, schema.name)
        self._cursor: TickCursor[VchannelFlowgraph] | None = None   # parked on it (``park``)

    def _write_with(self, schema: schema_pb2.CollectionSchema) -> None:
        self.schema = schema
        self.layout = CollectionLayout.from_proto(schema)
        self.schema_bytes = schema.SerializeToString()   # shipped with every task that reads it
        self.schema_rank = schema_rank(schema)
        self.table_schema = TableSchema(columns=self.layout.insert_schema(), milvus_schema=self.schema_bytes)

    def take_schema(self, schema: schema_pb2.CollectionSchema) -> bool:
        """Write with ``schema`` from now on if it is newer than its own (``schema_rank``: a field
        added to the live collection); whether it took it. Rows read before it lack its new fields,
        which read as null: nothing read is read again for it."""
        if schema_rank(schema) <= self.schema_rank:
            return False
        self._write_with(schema)
        return True

    @property
    def working(self) -> ChannelState:
        """The state after every batch read since the last commit. Set by ``load``, which the
        pipeline calls before the flowgraph joins it (a load that fails keeps the previous one).
        A parked flowgraph catches up with its cursor first."""
        if self._cursor is not None:   # ``_caught_up`` inline: read for every vchannel, several times a cycle
            self.batches.catch_up(self._cursor)
        state = self.batches.state
        if state is None:
            raise RuntimeError(f"{self.vchannel}: the flowgraph was never loaded")
        return state

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self, committed: ChannelState | None, watermarks: Watermarks, now: float, topic_id: str = "") -> None:
        """Start (again) from Delta's state of the vchannel; ``topic_id``: the broker's id of the
        pchannel topic (recovery.check_topic), recorded with the next commit."""
        check_topic(committed, topic_id)
        self.unpark()
        self.loads += 1
        self.committed, self.watermarks, self.committed_at = committed, watermarks, now
        state = initial_state(committed, self.info, self.node_id, self.positions)
        if topic_id:
            state.topic_id = topic_id
        self.batches.load(state)
        self.status = FlowgraphStatus.DROPPED if state.collection_dropped else FlowgraphStatus.RUNNING

    def fail(self, failure: Failure, now: float) -> list[FileEntry]:
        """Stop until the wait ``failure`` calls for is over (``classify.restart_delay``); returns the
        uncommitted files to delete."""
        self.unpark()
        self.failures += 1
        self.retry_at = now + restart_delay(failure, self.failures)
        self.last_failure, self.status, self.claim = failure, FlowgraphStatus.FAILED, False
        return self.batches.drop()

    def _ran(self, now: float) -> None:
        if self.failures and now - self.retry_at > MAX_BACKOFF:
            self.failures = 0       # a minute of running since the last failure: start the backoff over

    @property
    def last_error(self) -> str:
        """Why it last failed ("" if it never did), as logs and status documents show it."""
        return str(self.last_failure)[:500] if self.last_failure is not None else ""

    @property
    def readable(self) -> bool:
        return self.status == FlowgraphStatus.RUNNING

    def snapshot(self) -> Snapshot:
        c = self.committed
        return Snapshot(self.vchannel, self.status, self.failures, self.last_error,
                        c.checkpoint_offset if c else None, c.checkpoint_ts if c else None,
                        c.rows if c else 0, c.batches if c else 0, len(self.batches.pending), self.collection_id,
                        self.pchannel, c.dml_messages if c else 0, c.dml_bytes if c else 0, self.batches.consumed)

    # -- batches (``batches``) and commits ------------------------------------------------------
    def apply(self, outcome: BatchOutcome, now: float, read_size: float | None = None) -> None:
        """``read_size``: bytes per message of the ranges this batch came from."""
        self.unpark()
        self.batches.apply(outcome, now, read_size)
        if outcome.state.collection_dropped:
            self.status = FlowgraphStatus.DROPPED   # nothing more to read; the commit of the drop is still due
        self._ran(now)

    def read_ticks(self, start: int, end: int, tick: int, now: float, read_size: float | None = None) -> bool:
        """A batch over ``[start, end)`` of ticks only (``Batches.move_by_ticks``), when ticks can only
        move its checkpoint; False, and nothing done, when it needs ``advance``, then ``apply``."""
        self.unpark()
        if not self.batches.moves_by_ticks(start):
            return False
        self.batches.move_by_ticks(start, end, tick, read_size)
        self._ran(now)
        return True

    def read_without_tick(self, messages: int) -> None:
        self.unpark()
        self.batches.read_without_tick(messages)

    def skip_gap(self, position: int) -> None:
        """Move past positions the broker has no message at (a Pulsar ledger boundary)."""
        self.unpark()
        self.batches.skip_gap(position)

    @property
    def next_offset(self) -> int:
        return self.working.checkpoint_offset

    @property
    def uncommitted(self) -> bool:
        return bool(self.batches.pending)

    @property
    def ticks_only(self) -> bool:
        """Its uncommitted batches only moved its checkpoint: no rows, events or claim (idle
        batches are never urgent, and ``pending_since`` is set by the first batch that is not idle)."""
        return self.batches.pending_since is None and not self.claim

    @property
    def urgent(self) -> bool:
        return self.claim or self.batches.urgent()

    def sync(self) -> VchannelSync:
        """Everything read since the last commit, as one share of a collection commit."""
        return self._caught_up().sync(self.watermarks)

    def committed_sync(self, sync: VchannelSync, watermarks: Watermarks, now: float) -> None:
        """``sync`` is in Delta; batches read meanwhile stay pending."""
        self.unpark()
        self.batches.committed(sync.end, now)
        self.committed, self.watermarks = sync.state, watermarks   # states are never changed in place
        self.committed_at, self.claim = now, False

    # -- sealing (``sealing``) -------------------------------------------------------------------
    def request_flush(self, flush_ts: int) -> bool:
        """Seal its segments for a flush at ``flush_ts`` (once per request); whether it did."""
        self.unpark()
        return self._seals.for_flush(self.batches, flush_ts)

    def seal_due(self, settings: SealSettings) -> list[int]:
        """Seal the Growing segments a seal policy says are due; their ids."""
        self.unpark()
        return self._seals.due(self.batches, settings)

    # -- routing (``route_rows``) ---------------------------------------------------------------
    def route_row(self) -> RouteRow:
        """Its routing context for the next cycle's tasks, as ``RouteContexts`` carries it; a parked
        flowgraph's is ``routes.at`` its cursor's offset."""
        return self.routes.row(self.working, self.watermarks)

    # -- parking (``tick_cursor``) ----------------------------------------------------------------
    @property
    def parked(self) -> bool:
        return self._cursor is not None

    def may_park(self) -> bool:
        """Whether it can follow a cursor: running, and nothing but ticks, which can only move its
        checkpoint, waits to be committed (a commit at the end of the cycle unparks it)."""
        return self.status == FlowgraphStatus.RUNNING and not self.claim and self.batches.ticks_pending()

    def park(self, cursor: TickCursor[VchannelFlowgraph]) -> None:
        """Follow ``cursor``, which stands where it does (``may_park``)."""
        assert self._cursor is None and cursor.offset == self.working.checkpoint_offset
        cursor.join(self.vchannel, self, self.batches.message_size(), self._seals.wake_ms)
        self._cursor = cursor

    def unpark(self) -> None:
        """Catch up with its cursor and leave it."""
        cursor = self._cursor
        if cursor is not None:
            self.batches.catch_up(cursor)
            self._cursor = None
            cursor.leave(self.vchannel, self)

    def _caught_up(self) -> Batches:
        """Its batches, caught up with its cursor if it is parked (it stays parked)."""
        if self._cursor is not None:
            self.batches.catch_up(self._cursor)
        return self.batches


def align_schemas(fgs: list[VchannelFlowgraph]) -> dict[int, bytes]:
    """Each collection's newest schema among ``fgs``, which every one of them then writes with (a
    task ships one schema per collection: a vchannel that had not taken a sibling's newer schema
    would drop the new fields of rows written after it); the serialized schema by collection id."""
    newest: dict[int, VchannelFlowgraph] = {}
    for fg in fgs:
        known = newest.get(fg.collection_id)
        if known is None or fg.schema_rank > known.schema_rank:
            newest[fg.collection_id] = fg
    for fg in fgs:
        top = newest[fg.collection_id]
        if top is not fg and top.schema_rank > fg.schema_rank:
            fg.take_schema(top.schema)
    return {cid: fg.schema_bytes for cid, fg in newest.items()}
