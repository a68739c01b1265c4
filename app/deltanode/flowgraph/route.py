"""One vchannel's filters and writes within a task: the ddNode and write path of its flowgraph.

Runs on executors. The dispatcher (``pipeline.dispatch``) parses each pchannel message once
and hands it to the routers of the vchannels it concerns; a router applies the vchannel's
filters (collection dropped, seek position, dropped partition/segment, replay filter),
decodes the rows into Arrow and writes them as binlogs, and records control events. Anything
that does not fit the collection's schema is quarantined with its position and reason.
"""

from __future__ import annotations

from ..storage.binlog_writer import BinlogWriter, QuarantineRow
from ..storage.layout import StorageLayout
from ..wire.schema import CollectionLayout
from . import decode
from .context import RouteContext
from .replay_filter import ReplayFilter
from .results import DROP_COLLECTION, DROP_PARTITION, FLUSH, ControlEvent, Portion, PortionStats


class VchannelRouter:
    """Routes one vchannel's messages of one offset range ``[first, end)``."""

    def __init__(self, ctx: RouteContext, layout: CollectionLayout, storage: StorageLayout, first: int,
                 end: int) -> None:
        self.ctx, self.layout, self.storage = ctx, layout, storage
        self.first, self.end = first, end
        self.insert_schema = layout.insert_schema()
        self.delete_schema = layout.delete_schema()
        self.dropped_partitions = set(ctx.dropped_partitions)
        self.collection_dropped = ctx.collection_dropped
        self.replay = ReplayFilter.from_json(ctx.replay) if ctx.replay else None
        self.events: list[ControlEvent] = []
        self.dml_messages = self.dml_bytes = self.inserted = self.deleted = self.quarantined = 0
        self._writer: BinlogWriter | None = None

    @property
    def writer(self) -> BinlogWriter:
        if self._writer is None:
            self._writer = BinlogWriter(self.storage, self.ctx.collection_id, self.insert_schema, self.delete_schema)
        return self._writer

    # -- messages ------------------------------------------------------------------------
    def dml(self, offset: int, msg_type: int, msg, value: bytes) -> None:
        """An Insert or Delete whose shardName is this vchannel (``value``: its wire bytes)."""
        try:
            self.dml_messages += 1
            self.dml_bytes += len(value)
            if msg_type == decode.MSG_INSERT:
                self._insert(offset, msg, len(value))
            else:
                self._delete(offset, msg)
        except decode.Reject as e:
            self.quarantine(offset, value, str(e), msg_type)

    def _dml_filtered(self, msg, begin_ts: int) -> bool:
        if self.collection_dropped:
            return True
        if msg.collectionID != self.ctx.collection_id:
            raise decode.Reject(f"collectionID {msg.collectionID} on vchannel of collection {self.ctx.collection_id}")
        return begin_ts <= self.ctx.seek_ts or msg.partitionID in self.dropped_partitions

    def _insert(self, offset: int, msg, nbytes: int) -> None:
        if not msg.timestamps:
            raise decode.Reject("insert without timestamps")
        begin_ts, end_ts = min(msg.timestamps), max(msg.timestamps)
        if self._dml_filtered(msg, begin_ts) or msg.segmentID in self.ctx.dropped_segments:
            return
        if self.replay is not None and not self.replay.admit(msg.segmentID, end_ts):
            return
        cols, n = decode.insert_columns(self.layout, msg)
        self.writer.add_insert(msg.segmentID, msg.partitionID, cols, n, nbytes, offset, begin_ts, end_ts)
        self.inserted += n

    def _delete(self, offset: int, msg) -> None:
        if not msg.timestamps:
            raise decode.Reject("delete without timestamps")
        if self._dml_filtered(msg, min(msg.timestamps)):
            return
        keys, ts, n = decode.delete_columns(self.layout, msg)
        if offset < self.ctx.delete_watermark:
            return  # committed by an earlier attempt of this range
        self.writer.add_delete(msg.partitionID, keys, ts)
        self.deleted += n

    def tick(self, ts: int) -> None:
        """A TimeTick; only routers with an active replay filter need each one."""
        self.replay.on_tick(ts)

    def control(self, offset: int, msg_type: int, msg) -> None:
        """Flush (already matched by collection name) or a drop of this vchannel's collection."""
        ts = msg.base.timestamp
        if msg_type == decode.MSG_FLUSH:
            self.events.append(ControlEvent(FLUSH, offset, ts))
        elif msg_type == decode.MSG_DROP_COLLECTION:
            self.collection_dropped = True
            self.events.append(ControlEvent(DROP_COLLECTION, offset, ts))
        elif msg_type == decode.MSG_DROP_PARTITION:
            self.dropped_partitions.add(msg.partitionID)
            self.events.append(ControlEvent(DROP_PARTITION, offset, ts, msg.partitionID))

    def quarantine(self, offset: int, value: bytes | None, reason: str, msg_type: int | None) -> None:
        self.quarantined += 1
        if offset < self.ctx.quarantine_watermark:
            return  # recorded by an earlier, committed attempt
        self.writer.add_quarantine(QuarantineRow(self.ctx.vchannel, self.ctx.pchannel, self.ctx.partition, offset, msg_type,
                                                 reason, value or b""))

    # -- results -------------------------------------------------------------------------
    def finish(self, max_tick: int) -> Portion:
        files = tuple(self._writer.close()) if self._writer is not None else ()
        stats = PortionStats(max_tick, self.dml_messages, self.dml_bytes, self.inserted, self.deleted,
                             self.quarantined)
        replay = self.replay.to_json() if self.replay is not None and self.replay.active else None
        return Portion(self.ctx.vchannel, self.first, self.end, files,
                       dict(self._writer.segments) if self._writer is not None else {}, tuple(self.events), stats,
                       replay)

    def fail(self, error: str) -> Portion:
        """The vchannel failed in this task: its files are deleted, its portion carries the error."""
        if self._writer is not None:
            self._writer.abort()
        return Portion(self.ctx.vchannel, self.first, self.end, error=error)
