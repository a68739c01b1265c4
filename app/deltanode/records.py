"""The records that cross the driver/executor line, both ways (nothing else lives here).

The driver plans a cycle's reads (``ReadRange``), a vchannel's routing state (``RouteContext``),
the marking of deletes (``MarkTask``) and compaction rewrites (``Rewrite``); a Spark task (the
``executor`` package) returns what it wrote and saw: binlog files (``FileEntry``), a vchannel's
share of a range (``Portion``), a range's read (``ReadStats``), deletion vectors (``FileMark``).
Everything here is small, immutable and pickled with a task or its result.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import pyarrow as pa

from .delta.deletion_vectors import DeletionVector
from .delta.layout import StorageLayout
from .failure.classify import Failure

if TYPE_CHECKING:   # a task's broker; the records themselves load no broker client
    from .mq.broker import Broker

# A primary key's value: int (an Int64 key) or str (a VarChar key). One type in a collection, so
# keys compare with each other; a union would not say that to mypy.
PrimaryKey: TypeAlias = Any


class TableKind(enum.StrEnum):
    """Which table a written file is for."""

    INSERT = "insert"
    DELETE = "delete"
    # Deletes a replay read again after their delta_log commit (a crash before the insert_log
    # commit): written under delta_log's root only to mark the rows they remove, never committed.
    REPLAYED_DELETES = "replayed-deletes"
    QUARANTINE = "quarantine"


class EventKind(enum.StrEnum):
    """A control message a vchannel saw in a range."""

    FLUSH = "flush"
    DROP_PARTITION = "drop_partition"
    DROP_COLLECTION = "drop_collection"
    # Milvus 2.6: a Flush of one segment, a ManualFlush of several (``ControlEvent.segments``),
    # sealed at the event's ts.
    SEGMENT_FLUSH = "segment_flush"
    MANUAL_FLUSH = "manual_flush"
    # Milvus 2.6: a schema change the vchannel's schema already has (``ControlEvent.segments``: the
    # segments the streaming node flushed for it), sealed at the event's ts.
    SCHEMA_CHANGE = "schema_change"


class Lane(enum.StrEnum):
    """Which read of a pchannel a range is (``pipeline.plan``)."""

    MAIN = "main"
    CATCH_UP = "catch-up"


@dataclass(frozen=True, kw_only=True)
class ReplayState:
    """The replay filter's sets while it is active (``executor.replay_filter``): S, the flushed
    segments, and G, the unflushed ones, each with its dml position's ts."""

    flushed: tuple[tuple[int, int], ...] = ()
    unflushed: tuple[tuple[int, int], ...] = ()

    def to_doc(self) -> dict:
        """As a vchannel's committed state holds it (JSON)."""
        return {"flushed": {str(k): v for k, v in self.flushed}, "unflushed": {str(k): v for k, v in self.unflushed}}

    @classmethod
    def from_doc(cls, doc: dict) -> ReplayState:
        return cls(flushed=tuple((int(k), int(v)) for k, v in doc.get("flushed", {}).items()),
                   unflushed=tuple((int(k), int(v)) for k, v in doc.get("unflushed", {}).items()))


# -- a cycle's task ------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RangeKey:
    """An offset range of a pchannel partition, as the driver finds a read's plan by it
    (``ReadRange.key``, ``ReadStats.key``)."""

    pchannel: str
    partition: int
    first: int
    end: int


@dataclass(frozen=True)
class ReadRange:
    pchannel: str
    partition: int
    first: int
    end: int
    members: tuple[str, ...]          # the vchannels whose next offset is in [first, end)
    lane: Lane = Lane.MAIN
    splittable: bool = True
    high: int = 0                     # the pchannel's high watermark when planned (a message lies before it)

    @property
    def messages(self) -> int:
        return self.end - self.first

    @property
    def key(self) -> RangeKey:
        return RangeKey(pchannel=self.pchannel, partition=self.partition, first=self.first, end=self.end)


@dataclass(frozen=True)
class RouteContext:
    vchannel: str
    collection_id: int
    collection_name: str
    pchannel: str
    partition: int                      # of the pchannel topic (Milvus uses 0)
    start: int                          # the vchannel's next offset: earlier messages are not its own
    seek_ts: int = 0                    # skip messages with BeginTs <= seek_ts until a tick >= it
    dropped_segments: frozenset[int] = frozenset()
    dropped_partitions: frozenset[int] = frozenset()
    collection_dropped: bool = False
    replay: ReplayState | None = None   # the replay filter while active
    delete_watermark: int = 0           # deletes below this offset are committed already
    quarantine_watermark: int = 0       # so are quarantine rows below this one
    flush_ts: int = 0                   # a flush in progress: a segment with rows up to it is sealed at it
    sealed: dict[int, int] = field(default_factory=dict)   # segment -> ts after which it takes no row
    tick: int = 0                       # the last TimeTick read before ``start`` (0: not known)


class RouteKept(NamedTuple):
    """A vchannel's routing context but its start, as ``RouteContexts`` carries it: RouteContext's
    fields without the pchannel and partition (its range's); an empty set or dict is None. What
    seldom changes from one cycle to the next: a flowgraph keeps it while its state does not
    change (``flowgraph.route_rows``).

    A named tuple, read by name and made with keywords: the driver makes a row for every readable
    vchannel every cycle, where a frozen dataclass's ``__init__`` (a ``object.__setattr__`` per
    field) costs several times as much (``deltanode_bench.idle_cycle``), and its fields in their
    order are the columns ``RouteContexts.from_rows`` takes."""

    vchannel: str
    collection_id: int
    collection_name: str
    seek_ts: int = 0
    dropped_segments: frozenset[int] | None = None
    dropped_partitions: frozenset[int] | None = None
    collection_dropped: bool = False
    replay: ReplayState | None = None
    delete_watermark: int = 0
    quarantine_watermark: int = 0
    flush_ts: int = 0
    sealed: dict[int, int] | None = None


class RouteRow(NamedTuple):
    """A vchannel's routing context for one cycle: its start offset, which moves from cycle to
    cycle, and the rest, kept from cycle to cycle (a named tuple for ``RouteKept``'s reason)."""

    start: int        # the vchannel's next offset: earlier messages are not its own
    kept: RouteKept
    tick: int = 0     # the last TimeTick read before ``start`` (its checkpoint's ts; 0: not known)


@dataclass(frozen=True)
class RouteContexts:
    """The routing contexts of a task's vchannels, as columns (``RouteRow``'s fields, one tuple each).

    A task at 10,000 vchannels carries 5,000 contexts, most of them a name and a few integers:
    as columns they pickle and load about ten times faster than as RouteContext objects
    (docs/platform.md, "Spark 4.2"). The executor makes a RouteContext only for the vchannels a
    message comes for (``executor.contexts``).
    """

    vchannels: tuple[str, ...] = ()
    collection_ids: tuple[int, ...] = ()
    collection_names: tuple[str, ...] = ()
    starts: tuple[int, ...] = ()
    ticks: tuple[int, ...] = ()
    seek_ts: tuple[int, ...] = ()
    dropped_segments: tuple[frozenset[int] | None, ...] = ()
    dropped_partitions: tuple[frozenset[int] | None, ...] = ()
    collection_dropped: tuple[bool, ...] = ()
    replays: tuple[ReplayState | None, ...] = ()
    delete_watermarks: tuple[int, ...] = ()
    quarantine_watermarks: tuple[int, ...] = ()
    flush_ts: tuple[int, ...] = ()
    sealed: tuple[dict[int, int] | None, ...] = ()

    @classmethod
    def from_rows(cls, rows: list[RouteRow]) -> RouteContexts:
        if not rows:
            return cls()
        vchannels, collection_ids, collection_names, *rest = zip(*[r.kept for r in rows])
        return cls(vchannels, collection_ids, collection_names, tuple([r.start for r in rows]),
                   tuple([r.tick for r in rows]), *rest)

    @classmethod
    def of(cls, contexts: list[RouteContext]) -> RouteContexts:
        """Packed from RouteContext objects (their pchannel and partition are their range's)."""
        return cls.from_rows([RouteRow(start=c.start, kept=RouteKept(
            vchannel=c.vchannel, collection_id=c.collection_id, collection_name=c.collection_name, seek_ts=c.seek_ts,
            dropped_segments=c.dropped_segments or None, dropped_partitions=c.dropped_partitions or None,
            collection_dropped=c.collection_dropped, replay=c.replay, delete_watermark=c.delete_watermark,
            quarantine_watermark=c.quarantine_watermark, flush_ts=c.flush_ts, sealed=c.sealed or None), tick=c.tick)
            for c in contexts])

    def context(self, i: int, pchannel: str, partition: int) -> RouteContext:
        """The ``i``-th vchannel's RouteContext, its range being of ``pchannel``'s ``partition``."""
        return RouteContext(self.vchannels[i], self.collection_ids[i], self.collection_names[i], pchannel, partition,
                            self.starts[i], self.seek_ts[i], self.dropped_segments[i] or frozenset(),
                            self.dropped_partitions[i] or frozenset(), self.collection_dropped[i], self.replays[i],
                            self.delete_watermarks[i], self.quarantine_watermarks[i], self.flush_ts[i],
                            self.sealed[i] or {}, self.ticks[i])


@dataclass(frozen=True)
class TaskSpec:
    cycle: int
    pieces: tuple[ReadRange, ...]
    contexts: RouteContexts   # the pieces' members
    schemas: dict[int, bytes]           # collection id -> serialized CollectionSchema
    storage: StorageLayout   # the root and how to reach it (an object store's endpoint and credentials)
    broker: Broker


# -- what a task returns -------------------------------------------------------------------

@dataclass(frozen=True)
class FileEntry:
    """A written, not yet committed, binlog file."""

    table: TableKind
    path: str          # relative to the table root
    size: int
    rows: int
    stats: str         # Delta add-action stats JSON
    segment_id: int = -1
    partition_id: int = -1
    pk_bloom: bytes | None = None   # its key filter, when small enough to go in its add action


@dataclass
class SegmentStats:
    """Rows one task wrote into one segment, and where the first of them was read."""

    partition_id: int
    rows: int = 0
    min_ts: int = 0
    max_ts: int = 0
    first_offset: int = -1
    first_ts: int = 0
    bytes: int = 0          # wire bytes of the messages


@dataclass(frozen=True)
class QuarantineRow:
    vchannel: str
    pchannel: str
    partition: int
    offset: int
    msg_type: int | None
    reason: str
    payload: bytes


@dataclass(frozen=True)
class ControlEvent:
    kind: EventKind
    offset: int
    ts: int
    partition_id: int = -1
    segments: tuple[int, ...] = ()   # the segments a SEGMENT_FLUSH or MANUAL_FLUSH seals


@dataclass(frozen=True, kw_only=True)
class SchemaChange:
    """A live collection's new schema, read on a vchannel (a Milvus 2.6 SchemaChange, or an
    AlterCollection of the schema) that adds columns the schema its router wrote with lacks: the
    vchannel's portion ends before it, and the driver's flowgraphs of the collection take it. Made
    on executors (``Portion.schema``), read on the driver."""

    schema: bytes   # the whole new CollectionSchema, serialized
    version: int    # its ``version``
    ts: int         # the message's time tick


@dataclass(frozen=True)
class PortionStats:
    max_tick: int = 0       # the largest TimeTick in the portion, 0 if none
    dml_messages: int = 0   # this vchannel's Insert/Delete messages, with their wire bytes
    dml_bytes: int = 0
    inserted_rows: int = 0
    deleted_rows: int = 0
    quarantined: int = 0


@dataclass(frozen=True)
class Portion:
    """What one task did for one vchannel over offsets ``[first, end)`` of its pchannel."""

    vchannel: str
    first: int
    end: int
    files: tuple[FileEntry, ...] = ()
    segments: dict[int, SegmentStats] = field(default_factory=dict)
    events: tuple[ControlEvent, ...] = ()
    stats: PortionStats = PortionStats()
    replay: ReplayState | None = None   # the replay filter at ``end`` while it is active
    error: Failure | None = None   # the vchannel failed in this task; nothing of it is kept
    # Messages read without a point to end at (pack order: no clean TimeTick; a transaction open
    # from the first message on); nothing done, a longer range read in one piece next.
    tickless: int = 0
    sealed: tuple[int, ...] = ()   # segments it sealed at the context's flush ts (their rows reach it)
    # It ends before its range does (at a clean tick, or before a transaction still open): what
    # follows is read again, so a later piece of the same range is not applied after it.
    cut: bool = False
    # A schema change it ends before (``cut``): what follows is read again with that schema.
    schema: SchemaChange | None = None


@dataclass(frozen=True)
class ReadStats:
    """One offset range of a pchannel as a task read it (all its vchannels together).

    A task returns a ``Portion`` only for the vchannels of the range that saw a message of their
    own (``routed``): the others' portion is their part of the range and its last TimeTick,
    which ``idle_portion`` makes where the output is read. At many vchannels most of a cycle's
    portions are such, and pickling them both ways would cost more than everything else the
    driver unpickles (``deltanode_bench.idle_cycle`` measures this)."""

    pchannel: str
    first: int
    end: int
    messages: int = 0
    bytes: int = 0
    dml_messages: int = 0
    dml_bytes: int = 0
    error: Failure | None = None   # the broker could not serve the range; its vchannels fail (or wait)
    next_position: int | None = None   # past ``end``: the pchannel has no message in [end, next_position)
    tick: int = 0                  # the ts of the range's last TimeTick (0: none)
    tick_offset: int = -1          # and its offset
    routed: frozenset[str] = frozenset()   # the vchannels that have a portion of their own
    partition: int = 0

    @property
    def key(self) -> RangeKey:
        """The range it read (as ``ReadRange.key``)."""
        return RangeKey(pchannel=self.pchannel, partition=self.partition, first=self.first, end=self.end)

    def idle_portion(self, vchannel: str, start: int) -> Portion:
        """The portion of a vchannel of the range not in ``routed``, whose next offset was ``start``:
        the rest of the range, with the last tick if it read it, or the broker's error."""
        first = max(self.first, start)
        if self.error is not None:
            return Portion(vchannel, first, self.end, error=self.error)
        return Portion(vchannel, first, self.end, stats=PortionStats(self.tick_from(first)))

    def tick_from(self, first: int) -> int:
        """The ts of the range's last TimeTick at or after offset ``first`` (0: none)."""
        return tick_from(self.tick, self.tick_offset, first)


def tick_from(tick: int, tick_offset: int, first: int) -> int:
    """``tick``, the ts of the last TimeTick a read saw, at ``tick_offset``, if that is at or after
    offset ``first``; else 0 (none)."""
    return tick if tick_offset >= first else 0


@dataclass(frozen=True)
class TaskOutput:
    portions: tuple[Portion, ...]
    reads: tuple[ReadStats, ...]
    seconds: float = 0.0       # wall clock of the task
    cpu_seconds: float = 0.0   # CPU of its Python worker meanwhile (below ``seconds``: it waited)
    read_wait_seconds: float = 0.0   # wall clock spent waiting for the broker's messages


# -- marking deletes ------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class MarkCandidate:
    """An insert binlog that may hold rows the deletes remove."""

    path: str                                  # relative to the insert_log root
    rows: int
    partition_id: int
    deletion_vector: DeletionVector | None     # its DV when the task was planned
    pk_min: PrimaryKey | None = None           # its key range (stats), None when unknown
    pk_max: PrimaryKey | None = None
    pk_bloom: bytes | None = None              # its key filter from the log; None: the file beside it, if any


@dataclass(frozen=True, kw_only=True)
class MarkTask:
    """One vchannel's deletes of one sync and the files they may hit. Made on the driver."""

    collection_id: int
    vchannel: str
    pk: str                                    # the primary key's column
    deletes: tuple[str, ...]                   # delete binlogs, relative to the delta_log root
    candidates: tuple[MarkCandidate, ...]
    storage: StorageLayout


@dataclass(frozen=True, kw_only=True)
class FileMark:
    """A file's deletion vector after the task: ``base`` (the one it had) plus the new rows."""

    path: str
    base: DeletionVector | None
    deletion_vector: DeletionVector
    newly_deleted: int


@dataclass(frozen=True, kw_only=True)
class MarkResult:
    vchannel: str
    marks: tuple[FileMark, ...] = ()
    files_read: int = 0
    files_skipped: int = 0                     # by their key range or bloom filter
    seconds: float = 0.0
    error: Failure | None = None             # marking failed: the vchannel fails
    stale: str | None = None                   # a candidate file was gone (compacted): marked again next cycle


# -- compaction -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SegmentFile:
    """A live insert binlog as planned (positional: tests build it from written files)."""

    path: str      # relative to the table root
    size: int
    rows: int      # the file's (``numRecords``), deleted ones included
    min_ts: int = 0                                # its least ``_ts`` (stats): the rewrite's input order
    deletion_vector: DeletionVector | None = None  # its DV when planned

    @property
    def deleted(self) -> int:
        return self.deletion_vector.cardinality if self.deletion_vector is not None else 0


@dataclass(frozen=True)
class Rewrite:
    """Files of one segment to rewrite as one file. Made on the driver, run on an executor.
    ``inputs`` are in the output's order (``plan_segment`` orders them)."""

    collection_id: int
    vchannel: str
    segment_id: int
    partition_id: int
    inputs: tuple[SegmentFile, ...]
    schema: pa.Schema                # the insert_log table's (``CollectionLayout.insert_schema``)
    pk: str                          # its primary key's column (the new file's bloom filter covers it)
    storage: StorageLayout
