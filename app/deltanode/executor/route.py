"""One vchannel's filters and writes within a task: the ddNode and write path of its flowgraph.

Runs on executors. The dispatcher (``executor.dispatch``) parses each pchannel message once
and hands it to the routers of the vchannels it concerns; a router applies the vchannel's
filters (seek position, collection dropped, dropped partition/segment, replay filter),
decodes the rows into Arrow and writes them as binlogs, and records control events. Anything
that does not fit the collection's schema is quarantined with its position and reason.

The seek rule is Milvus's (``MqTtMsgStream.Seek``): after a seek at ts S, every message with
BeginTs <= S is skipped, DDL included, until the first TimeTick at S or later.

While the replay filter is active, messages are applied in Milvus's pack order
(``pack_order``): held until the TimeTick that releases them. A portion then ends at the last
tick after which nothing was held (a "clean" tick): what follows it is read again by the next
batch, so nothing after that tick is written, counted or reported by this one. A range
without a clean tick does nothing and asks for a longer one (``Portion.tickless``).

A Milvus 2.6 vchannel is read as Milvus's own scanner delivers it (``wal_scan``): its messages
(``wal``, made by ``wal_adaptor``) wait until a TimeTick releases them in time-tick order, a resume
filter drops what a Milvus channel checkpoint already holds (every message at or below its time
tick, a transaction by its CommitTxn's), and a transaction's members are held until its CommitTxn
hands them on re-stamped with the commit's time tick, or dropped at its RollbackTxn or its expiry
(judged at each TimeTick). What is delivered is applied like its older form. A portion of the
vchannel ends at the range's end when nothing is held there; else at the last clean point: right
after a TimeTick that left nothing held (no message waiting, no transaction open), or right
before the message that began the holding, at the TimeTick before it. What follows is read again
by the next batch, which starts with nothing held and the TimeTick of its start released (a
message below it breaks the rule there too); a range without a clean point does nothing and
asks for a longer one (``Portion.tickless``). So a restart reads an open transaction whole, and
a 2.6 message never counts as progress of its pchannel: only a TimeTick does.

A 2.6 schema change of the collection (``schema_change``) that adds columns, once delivered, ends
the vchannel's portion at the last clean point before the TimeTick that delivered it, carrying the
new schema (``Portion.schema``): the router reads nothing further, and the rest is read again once
the driver's flowgraphs write with that schema. One that adds no column (the schema written with
has them) seals the segments the streaming node flushed for it, as a Flush does. One that is no
pure addition of nullable fields is quarantined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from ..delta.layout import StorageLayout
from ..failure.classify import Failure
from ..records import (
    ControlEvent,
    EventKind,
    Portion,
    PortionStats,
    QuarantineRow,
    ReplayState,
    RouteContext,
    SchemaChange,
)
from ..wire.schema import CollectionLayout
from ..wire.wal_message import WalMessage
from . import decode, schema_change
from .binlog_writer import BinlogWriter
from .pack_order import PackOrder
from .replay_filter import ReplayFilter
from .wal_adaptor import (
    MSG_ALTER_COLLECTION,
    MSG_FLUSH_SEGMENT,
    MSG_MANUAL_FLUSH,
    MSG_SCHEMA_CHANGE,
    Adapted,
    Kind,
    SchemaUpdate,
    SegmentSeal,
    WalEntry,
)
from .wal_scan import WalScan

_SEAL_EVENTS = {MSG_FLUSH_SEGMENT: EventKind.SEGMENT_FLUSH, MSG_MANUAL_FLUSH: EventKind.MANUAL_FLUSH,
                MSG_SCHEMA_CHANGE: EventKind.SCHEMA_CHANGE, MSG_ALTER_COLLECTION: EventKind.SCHEMA_CHANGE}


@dataclass(frozen=True)
class _CleanTick:
    """Where a portion may end while messages are held back (pack order, a 2.6 vchannel's messages
    between TimeTicks and its open transactions). Runs on executors."""

    end: int                 # the offset after the tick (or before the message that began the holding)
    ts: int
    replay: ReplayState | None   # the filter's state there
    counters: tuple[int, ...]
    events: int
    sealed: int


class VchannelRouter:
    """Routes one vchannel's messages of one offset range ``[first, end)``. Runs on executors."""

    def __init__(self, ctx: RouteContext, layout: CollectionLayout, storage: StorageLayout, first: int,
                 end: int, *, schema_version: int = 0) -> None:
        """``layout``: the collection's columns, of its schema at ``schema_version``."""
        self.ctx, self.layout, self.storage = ctx, layout, storage
        self.schema_version = schema_version
        self.first, self.end = first, end
        self.insert_schema = layout.insert_schema()
        self.delete_schema = layout.delete_schema()
        self.dropped_partitions = set(ctx.dropped_partitions)
        self.collection_dropped = ctx.collection_dropped
        self.replay = ReplayFilter.of(ctx.replay) if ctx.replay else None
        self.seeking = ctx.seek_ts > 0
        self.sealed = dict(ctx.sealed)
        self.newly_sealed: list[int] = []
        self.events: list[ControlEvent] = []
        self.dml_messages = self.dml_bytes = self.inserted = self.deleted = self.quarantined = 0
        self._writer: BinlogWriter | None = None
        self._order = PackOrder() if self.replay is not None else None
        self._deferred: list[Callable[[], None]] = []   # writes since the last clean tick, while holding
        self._clean: _CleanTick | None = None
        # Milvus 2.6 messages until a TimeTick delivers them, from where the last task's scan stopped
        # (a seek's resume filter in place of that: Milvus's scanner starts so from its checkpoint).
        self._scan = WalScan(checkpoint_ts=ctx.seek_ts, tick=0 if ctx.seek_ts else ctx.tick)
        self._delivering = False   # a TimeTick's delivery is under way: its writes wait for the tick's end
        self._new_schema: SchemaChange | None = None   # read: nothing after it is this task's

    @property
    def writer(self) -> BinlogWriter:
        if self._writer is None:
            self._writer = BinlogWriter(self.storage, self.ctx.collection_id, self.insert_schema, self.delete_schema)
        return self._writer

    # -- messages ------------------------------------------------------------------------
    def dml(self, offset: int, msg_type: int, msg, value: bytes) -> None:
        """An Insert or Delete whose shardName is this vchannel (``value``: its wire bytes)."""
        if self._new_schema is not None or not self._dml_fits(offset, msg_type, msg, value):
            return
        if self.seeking and min(msg.timestamps) <= self.ctx.seek_ts:
            return
        if self._order is not None:
            self._order.add(max(msg.timestamps), partial(self._apply_dml, offset, msg_type, msg, value))
        else:
            self._apply_dml(offset, msg_type, msg, value)

    def _dml_fits(self, offset: int, msg_type: int, msg, value: bytes) -> bool:
        """Whether it has timestamps and is of the vchannel's collection; quarantined when not."""
        try:
            if not msg.timestamps:
                raise decode.Reject(f"{'insert' if msg_type == decode.MSG_INSERT else 'delete'} without timestamps")
            if msg.collectionID != self.ctx.collection_id:
                raise decode.Reject(f"collectionID {msg.collectionID} on vchannel of collection "
                                    f"{self.ctx.collection_id}")
        except decode.Reject as e:
            self.quarantine(offset, value, str(e), msg_type)
            return False
        return True

    def _apply_dml(self, offset: int, msg_type: int, msg, value: bytes) -> None:
        try:
            self.dml_messages += 1
            self.dml_bytes += len(value)
            if msg_type == decode.MSG_INSERT:
                self._insert(offset, msg, len(value))
            else:
                self._delete(offset, msg)
        except decode.Reject as e:
            self.quarantine(offset, value, str(e), msg_type)

    def _dml_filtered(self, msg) -> bool:
        return self.collection_dropped or msg.partitionID in self.dropped_partitions

    def _insert(self, offset: int, msg, nbytes: int) -> None:
        begin_ts, end_ts = min(msg.timestamps), max(msg.timestamps)
        if self._dml_filtered(msg) or msg.segmentID in self.ctx.dropped_segments:
            return
        if self.replay is not None and not self.replay.admit(msg.segmentID, end_ts):
            return
        self._check_seal(msg.segmentID, end_ts)
        cols, n = decode.insert_columns(self.layout, msg)
        self._write(partial(self.writer.add_insert, msg.segmentID, msg.partitionID, cols, n, nbytes, offset,
                            begin_ts, end_ts))
        self.inserted += n

    def _check_seal(self, segment: int, end_ts: int) -> None:
        """A sealed segment takes no row after its seal ts; during a flush, a segment whose rows
        reach the flush ts is sealed at it (``Portion.sealed``)."""
        sealed_at = self.sealed.get(segment)
        if sealed_at is not None and end_ts > sealed_at:
            raise decode.Reject(f"insert into segment {segment} with EndTs {end_ts}, after the segment was sealed "
                                f"at ts {sealed_at}: a sealed segment takes no more rows")
        if sealed_at is None and self.ctx.flush_ts and end_ts <= self.ctx.flush_ts:
            self.sealed[segment] = self.ctx.flush_ts
            self.newly_sealed.append(segment)

    def _delete(self, offset: int, msg) -> None:
        if self._dml_filtered(msg):
            return
        keys, ts, n = decode.delete_columns(self.layout, msg)
        if offset < self.ctx.delete_watermark:
            # In delta_log already (an earlier attempt of this range committed it there, then
            # stopped before its insert_log commit): not recorded again, but its rows are still
            # to be marked deleted in the insert binlogs.
            self._write(partial(self.writer.add_delete, msg.partitionID, keys, ts, replayed=True))
            return
        self._write(partial(self.writer.add_delete, msg.partitionID, keys, ts))
        self.deleted += n

    def _write(self, write: Callable[[], None]) -> None:
        """Now, or at the next clean tick while messages are held or a TimeTick delivers (a portion
        cut before it must not hold it)."""
        if self._order is not None or self._delivering or self._scan.holding:
            self._deferred.append(write)
        else:
            write()

    def _holding(self) -> bool:
        """Whether a message read is not applied yet: in pack order, or a 2.6 one not delivered."""
        return (self._order is not None and self._order.holding) or self._scan.holding

    @property
    def needs_ticks(self) -> bool:
        """Whether the dispatcher must hand it every TimeTick (the others only need the last one)."""
        return (self.seeking or self._order is not None or self._scan.holding) and self._new_schema is None

    def tick(self, ts: int, offset: int) -> None:
        """A TimeTick at ``offset``: ends the seek, delivers the 2.6 messages it releases, releases a
        pack in pack order; a portion may end right after it when nothing is held any more."""
        if self._new_schema is not None:
            return
        if self.seeking and ts >= self.ctx.seek_ts:
            self.seeking = False
        delivered = self._scan.holding
        if delivered:
            self._deliver(ts)
            if self._new_schema is not None:
                return
        if self._order is not None:
            assert self.replay is not None   # pack order is kept only while a replay filter is
            for apply in self._order.release(ts):
                apply()
            self.replay.on_tick(ts)
            if not self.replay.active:       # nothing left to drop: the held messages go through in order
                for apply in self._order.release_all():
                    apply()
        elif not delivered:
            return
        if not self._holding():
            self._clean_tick(offset + 1, ts)
            if self._order is not None and self.replay is not None and not self.replay.active:
                self._order = None

    def _clean_tick(self, end: int, ts: int) -> None:
        """Everything before offset ``end`` is written: a portion may end there (never past a schema
        change it stopped at)."""
        if self._new_schema is not None:
            return
        for write in self._deferred:
            write()
        self._deferred = []
        self._clean = _CleanTick(end, ts, self.replay.state() if self.replay is not None else None,
                                 self._counters(), len(self.events), len(self.newly_sealed))

    def _counters(self) -> tuple[int, ...]:
        return self.dml_messages, self.dml_bytes, self.inserted, self.deleted, self.quarantined

    def control(self, offset: int, msg_type: int, msg, ts: int | None = None) -> None:
        """Flush (already matched by collection name) or a drop of this vchannel's collection, at
        ``ts`` (default: its MsgBase's)."""
        if self._new_schema is not None:
            return
        if ts is None:
            ts = msg.base.timestamp
        if self.seeking and ts <= self.ctx.seek_ts:
            return
        if self._order is not None:
            self._order.add(ts, partial(self._apply_control, offset, msg_type, msg, ts))
        else:
            self._apply_control(offset, msg_type, msg, ts)

    def _apply_control(self, offset: int, msg_type: int, msg, ts: int) -> None:
        if msg_type == decode.MSG_FLUSH:
            self.events.append(ControlEvent(EventKind.FLUSH, offset, ts))
        elif msg_type == decode.MSG_DROP_COLLECTION:
            self.collection_dropped = True
            self.events.append(ControlEvent(EventKind.DROP_COLLECTION, offset, ts))
        elif msg_type == decode.MSG_DROP_PARTITION:
            self.dropped_partitions.add(msg.partitionID)
            self.events.append(ControlEvent(EventKind.DROP_PARTITION, offset, ts, msg.partitionID))
        elif msg_type in _SEAL_EVENTS:
            for segment in msg.segments:   # a later insert into it is refused (``_check_seal``)
                self.sealed.setdefault(segment, ts)
            self.events.append(ControlEvent(_SEAL_EVENTS[msg_type], offset, ts, segments=msg.segments))

    # -- Milvus 2.6 ------------------------------------------------------------------------
    def wal(self, offset: int, wal: WalMessage, adapted: Adapted, value: bytes, tick_before: int) -> None:
        """A 2.6 message of this vchannel, adapted (``wal_adaptor``): held until a TimeTick delivers it
        (``wal_scan``); ``tick_before``: the last TimeTick the vchannel read before it (0: none)."""
        if self._new_schema is not None:
            return
        if not self._holding():
            # Everything before it is applied, and what follows the last TimeTick has a higher time
            # tick: a portion may end right here, at that tick, if it is still held at the range's end.
            self._clean_tick(offset, tick_before)
        if not self._scan.push(WalEntry(offset=offset, wal=wal, adapted=adapted, value=value), tick_before):
            self.quarantine(offset, value, f"{wal.name} at time tick {wal.time_tick}, below the TimeTick "
                                           f"{self._scan.last_released} read before it: Milvus's scanner "
                                           f"refuses it as a time tick violation", adapted.msg_type)

    def _deliver(self, tick: int) -> None:
        """Apply what a TimeTick at ``tick`` delivers, in Milvus's order; nothing after a schema change
        that ends the portion. Its writes wait for the tick's end (``_write``)."""
        self._delivering = True
        try:
            for entry in self._scan.release(tick):
                self._apply_wal(entry.offset, entry.adapted, entry.value)
                if self._new_schema is not None:
                    return
        finally:
            self._delivering = False

    def _apply_wal(self, offset: int, adapted: Adapted, value: bytes) -> None:
        kind, msg_type = adapted.kind, adapted.msg_type
        if kind is Kind.DML and msg_type is not None:
            if self._dml_fits(offset, msg_type, adapted.msg, value):
                self._apply_dml(offset, msg_type, adapted.msg, value)
        elif kind is Kind.CONTROL and msg_type is not None:
            if adapted.seal is not None:
                self._apply_control(offset, msg_type, adapted.seal, adapted.seal.ts)
            elif adapted.msg.collectionID == self.ctx.collection_id:
                self._apply_control(offset, msg_type, adapted.msg, adapted.msg.base.timestamp)
        elif kind is Kind.SCHEMA and adapted.schema is not None and msg_type is not None:
            self._schema_change(offset, msg_type, adapted.schema, value)
        elif kind is Kind.REJECT:
            self.quarantine(offset, value, adapted.reason, adapted.msg_type)

    def _schema_change(self, offset: int, msg_type: int, update: SchemaUpdate, value: bytes) -> None:
        """A schema change of the collection: taken (``schema_change.judge``), sealing the segments
        flushed for it, when the layout has its columns; else the portion ends at the last clean
        tick before the TimeTick that delivered it."""
        if update.collection_id != self.ctx.collection_id:
            return   # another collection's: a vchannel belongs to one
        try:
            verdict = schema_change.judge(self.schema_version, self.layout, update.schema)
        except schema_change.NotAnAddition as e:
            self.quarantine(offset, value, f"schema change of collection {update.collection_id}: {e}", msg_type)
            return
        if verdict is schema_change.Verdict.KNOWN:
            self._apply_control(offset, msg_type, SegmentSeal(segments=update.flushed, ts=update.ts), update.ts)
            return
        self._new_schema = SchemaChange(schema=update.schema, version=schema_change.version_of(update.schema),
                                        ts=update.ts)

    def quarantine(self, offset: int, value: bytes | None, reason: str, msg_type: int | None) -> None:
        if self._new_schema is not None:
            return
        self.quarantined += 1
        if offset < self.ctx.quarantine_watermark:
            return  # recorded by an earlier, committed attempt
        self._write(partial(self.writer.add_quarantine, QuarantineRow(
            self.ctx.vchannel, self.ctx.pchannel, self.ctx.partition, offset, msg_type, reason, value or b"")))

    # -- results -------------------------------------------------------------------------
    def finish(self, max_tick: int) -> Portion:
        """``max_tick``: the range's last TimeTick if this vchannel read it, else 0."""
        if self._new_schema is not None:
            return self._end_before_schema()
        end, replay = self.end, self.replay.state() if self.replay is not None else None
        cut = False
        if self._holding():
            clean = self._clean
            if clean is not None and clean.end > self.first:   # end there: the rest is read again next batch
                cut = True
                end, max_tick, replay = clean.end, clean.ts, clean.replay
                (self.dml_messages, self.dml_bytes, self.inserted, self.deleted, self.quarantined) = clean.counters
                del self.events[clean.events:]
                for segment in self.newly_sealed[clean.sealed:]:
                    del self.sealed[segment]
                del self.newly_sealed[clean.sealed:]
                self._deferred = []
            else:   # no clean tick (nothing delivered, a transaction open from the first message): a longer range next
                if self._writer is not None:
                    self._writer.abort()
                return Portion(self.ctx.vchannel, self.first, self.first, tickless=self.end - self.first)
        for write in self._deferred:
            write()
        files = tuple(self._writer.close()) if self._writer is not None else ()
        stats = PortionStats(max_tick, self.dml_messages, self.dml_bytes, self.inserted, self.deleted,
                             self.quarantined)
        return Portion(self.ctx.vchannel, self.first, end, files,
                       dict(self._writer.segments) if self._writer is not None else {}, tuple(self.events), stats,
                       replay, sealed=tuple(self.newly_sealed), cut=cut)

    def _end_before_schema(self) -> Portion:
        """The portion up to the last clean point before the schema change it stopped at, carrying
        it; an empty one at its first offset when there is none (a transaction open from its start)."""
        clean = self._clean
        if clean is None or clean.end <= self.first:
            if self._writer is not None:
                self._writer.abort()
            return Portion(self.ctx.vchannel, self.first, self.first, cut=True, schema=self._new_schema)
        (self.dml_messages, self.dml_bytes, self.inserted, self.deleted, self.quarantined) = clean.counters
        del self.events[clean.events:]
        del self.newly_sealed[clean.sealed:]
        files = tuple(self._writer.close()) if self._writer is not None else ()
        stats = PortionStats(clean.ts, self.dml_messages, self.dml_bytes, self.inserted, self.deleted,
                             self.quarantined)
        return Portion(self.ctx.vchannel, self.first, clean.end, files,
                       dict(self._writer.segments) if self._writer is not None else {}, tuple(self.events), stats,
                       clean.replay, sealed=tuple(self.newly_sealed), cut=True, schema=self._new_schema)

    def fail(self, error: Failure) -> Portion:
        """The vchannel failed in this task: its files are deleted, its portion carries the error."""
        if self._writer is not None:
            self._writer.abort()
        return Portion(self.ctx.vchannel, self.first, self.end, error=error)
