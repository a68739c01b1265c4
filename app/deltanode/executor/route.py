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

A Milvus 2.6 message (``wal``, made by ``wal_adaptor``) is applied like its older form; a
transaction's members are held until its CommitTxn, re-stamped with the commit's time tick (as
Milvus's txn buffer does), and dropped at a RollbackTxn or once it expires. While one is open,
nothing after its BeginTxn is written: a portion that ends with a transaction still open ends
right before its BeginTxn (a clean point, as above), so a restart reads the transaction whole.

A 2.6 schema change of the collection (``schema_change``) that adds columns ends the vchannel's
portion right before it (or at the clean point before it, while a transaction is open or messages
are held back), carrying the new schema (``Portion.schema``): the router reads nothing further,
and the rest is read again once the driver's flowgraphs write with that schema. One that adds no
column (the schema written with has them) seals the segments the streaming node flushed for it, as
a Flush does. One that is no pure addition of nullable fields is quarantined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from ..records import (
    ControlEvent,
    EventKind,
    Portion,
    PortionStats,
    QuarantineRow,
    ReplayState,
    RouteContext,
    SchemaChange,
    TaskError,
)
from ..storage.layout import StorageLayout
from ..wire.positions import LOGICAL_BITS
from ..wire.schema import CollectionLayout
from ..wire.wal_message import Txn, WalMessage
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
    restamp,
)

_SEAL_EVENTS = {MSG_FLUSH_SEGMENT: EventKind.SEGMENT_FLUSH, MSG_MANUAL_FLUSH: EventKind.MANUAL_FLUSH,
                MSG_SCHEMA_CHANGE: EventKind.SCHEMA_CHANGE, MSG_ALTER_COLLECTION: EventKind.SCHEMA_CHANGE}


@dataclass(frozen=True)
class _CleanTick:
    """Where a portion may end while the replay filter holds messages back, or a transaction is open."""

    end: int                 # the offset after the tick (before the BeginTxn)
    ts: int
    replay: ReplayState | None   # the filter's state there
    counters: tuple[int, ...]
    events: int
    sealed: int


@dataclass
class _OpenTxn:
    """A Milvus 2.6 transaction between its BeginTxn and its CommitTxn or RollbackTxn: its members,
    held (offset, adapted message, wire bytes), and the time tick of the last of them."""

    txn: Txn
    last_tt: int
    members: list[tuple[int, Adapted, bytes]]

    def expired(self, tick: int) -> bool:
        """Whether ``tick`` reached its expiry: the time tick of its last message (the BeginTxn's
        when none) plus its keepalive, in physical milliseconds (Milvus's ``ExpiredTimeTick``)."""
        if not self.txn.expires:
            return False
        expiry = self.last_tt + (self.txn.keepalive_ms << LOGICAL_BITS)
        return expiry <= tick


class VchannelRouter:
    """Routes one vchannel's messages of one offset range ``[first, end)``."""

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
        self._deferred: list[Callable[[], None]] = []   # writes since the last clean tick (pack order, open txns)
        self._clean: _CleanTick | None = None
        self._txns: dict[int, _OpenTxn] = {}   # Milvus 2.6 transactions open, by txn id
        self._new_schema: SchemaChange | None = None   # read: nothing after it is this task's

    @property
    def writer(self) -> BinlogWriter:
        if self._writer is None:
            self._writer = BinlogWriter(self.storage, self.ctx.collection_id, self.insert_schema, self.delete_schema)
        return self._writer

    # -- messages ------------------------------------------------------------------------
    def dml(self, offset: int, msg_type: int, msg, value: bytes) -> None:
        """An Insert or Delete whose shardName is this vchannel (``value``: its wire bytes)."""
        if self._new_schema is not None:
            return
        try:
            if not msg.timestamps:
                raise decode.Reject(f"{'insert' if msg_type == decode.MSG_INSERT else 'delete'} without timestamps")
            if msg.collectionID != self.ctx.collection_id:
                raise decode.Reject(f"collectionID {msg.collectionID} on vchannel of collection "
                                    f"{self.ctx.collection_id}")
        except decode.Reject as e:
            self.quarantine(offset, value, str(e), msg_type)
            return
        if self.seeking and min(msg.timestamps) <= self.ctx.seek_ts:
            return
        if self._order is not None:
            self._order.add(max(msg.timestamps), partial(self._apply_dml, offset, msg_type, msg, value))
        else:
            self._apply_dml(offset, msg_type, msg, value)

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
        """Now, or at the next clean tick under pack order or while a transaction is open (a portion
        cut there must not hold it)."""
        if self._order is not None or self._txns:
            self._deferred.append(write)
        else:
            write()

    @property
    def needs_ticks(self) -> bool:
        """Whether the dispatcher must hand it every TimeTick (the others only need the last one)."""
        return (self.seeking or self._order is not None) and self._new_schema is None

    def tick(self, ts: int, offset: int) -> None:
        """A TimeTick at ``offset``: ends the seek, releases a pack in pack order."""
        if self._new_schema is not None:
            return
        if self.seeking and ts >= self.ctx.seek_ts:
            self.seeking = False
        if self._order is None:
            return
        assert self.replay is not None   # pack order is kept only while a replay filter is
        for apply in self._order.release(ts):
            apply()
        self.replay.on_tick(ts)
        if not self.replay.active:       # nothing left to drop: the held messages go through in order
            for apply in self._order.release_all():
                apply()
        if not self._order.holding and not self._txns:
            self._clean_tick(offset + 1, ts)
            if not self.replay.active:
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
        ``ts`` (default: its MsgBase's); a 2.6 seal of segments (``wal_adaptor.SegmentSeal``)."""
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
        """A 2.6 message of this vchannel, adapted (``wal_adaptor``); ``tick_before``: the pchannel's
        time tick before it (every 2.6 message's ``_tt`` is its pchannel's progress)."""
        if self._new_schema is not None:
            return
        if self._txns:
            self._expire(tick_before, offset)
        txn = wal.txn
        if txn is None:
            self._apply_wal(offset, adapted, value, tick_before)
            return
        kind = adapted.kind
        if kind is Kind.BEGIN:
            self._begin(offset, txn, wal.time_tick, tick_before)
            return
        if kind is Kind.COMMIT or kind is Kind.ROLLBACK:
            open_txn = self._txns.pop(txn.txn_id, None)
            if open_txn is None:
                return   # a transaction never begun here, expired or ended: Milvus ignores it too
            if kind is Kind.COMMIT:
                for member_offset, member, member_value in open_txn.members:
                    self._apply_wal(member_offset, restamp(member, wal.time_tick), member_value)
            self._txn_closed(offset + 1, wal.time_tick)
            return
        open_txn = self._txns.get(txn.txn_id)
        if open_txn is not None:   # a member of a transaction not begun here is ignored, as Milvus's txn buffer does
            open_txn.members.append((offset, adapted, value))
            open_txn.last_tt = wal.time_tick

    def _apply_wal(self, offset: int, adapted: Adapted, value: bytes, tick_before: int = 0) -> None:
        kind, msg_type = adapted.kind, adapted.msg_type
        if kind is Kind.DML and msg_type is not None:
            self.dml(offset, msg_type, adapted.msg, value)
        elif kind is Kind.CONTROL and msg_type is not None:
            if adapted.seal is not None:
                self.control(offset, msg_type, adapted.seal, adapted.seal.ts)
            elif adapted.msg.collectionID == self.ctx.collection_id:
                self.control(offset, msg_type, adapted.msg)
        elif kind is Kind.SCHEMA and adapted.schema is not None and msg_type is not None:
            self._schema_change(offset, msg_type, adapted.schema, value, tick_before)
        elif kind is Kind.REJECT:
            self.quarantine(offset, value, adapted.reason, adapted.msg_type)

    def _schema_change(self, offset: int, msg_type: int, update: SchemaUpdate, value: bytes, tick_before: int) -> None:
        """A schema change of the collection: taken (``schema_change.judge``), sealing the segments
        flushed for it, when the layout has its columns; else the portion ends before it."""
        if update.collection_id != self.ctx.collection_id:
            return   # another collection's: a vchannel belongs to one
        if self.seeking and update.ts <= self.ctx.seek_ts:
            return   # before the seek's tick: the schema written with comes after it
        try:
            verdict = schema_change.judge(self.schema_version, self.layout, update.schema)
        except schema_change.NotAnAddition as e:
            self.quarantine(offset, value, f"schema change of collection {update.collection_id}: {e}", msg_type)
            return
        if verdict is schema_change.Verdict.KNOWN:
            self.control(offset, msg_type, SegmentSeal(segments=update.flushed, ts=update.ts), update.ts)
            return
        if not self._txns and not (self._order is not None and self._order.holding):
            self._clean_tick(offset, tick_before)   # else the clean point before the open transaction
        self._new_schema = SchemaChange(schema=update.schema, version=schema_change.version_of(update.schema),
                                        ts=update.ts)

    def _begin(self, offset: int, txn: Txn, tt: int, tick_before: int) -> None:
        if txn.txn_id in self._txns:
            return   # a BeginTxn repeated: Milvus keeps the first
        if not self._txns and not (self._order is not None and self._order.holding):
            self._clean_tick(offset, tick_before)   # where this portion ends if the transaction is still open
        self._txns[txn.txn_id] = _OpenTxn(txn, tt, [])

    def _txn_closed(self, end: int, ts: int) -> None:
        """A transaction ended (committed, rolled back, expired): with none left open, what was held
        for them is written and a portion may end at ``end``."""
        if not self._txns and not (self._order is not None and self._order.holding):
            self._clean_tick(end, ts)

    def _expire(self, tick: int, end: int) -> None:
        """Drop the transactions ``tick`` expires (a message before ``end`` reached it)."""
        expired = [txn_id for txn_id, t in self._txns.items() if t.expired(tick)]
        for txn_id in expired:
            del self._txns[txn_id]
        if expired:
            self._txn_closed(end, tick)

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
        if self._txns:
            self._expire(max_tick, self.end)
        end, replay = self.end, self.replay.state() if self.replay is not None else None
        cut = False
        if self._txns or (self._order is not None and self._order.holding):
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
            else:   # no clean tick (or a transaction open from the first message): nothing done, a longer range next
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

    def fail(self, error: TaskError) -> Portion:
        """The vchannel failed in this task: its files are deleted, its portion carries the error."""
        if self._writer is not None:
            self._writer.abort()
        return Portion(self.ctx.vchannel, self.first, self.end, error=error)
