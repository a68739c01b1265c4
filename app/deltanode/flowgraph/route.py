"""One task's walk over its messages: parse, filter (shard, dropped, replay), emit Arrow rows.

Runs on executors. Each message becomes at most one row of the record schema (``records``);
DDL, flush and tick information becomes EVENT rows for the driver; anything unparseable or
off-schema becomes a QUARANTINE row and the walk goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..storage.channel_state import ChannelState
from ..wire.schema import CollectionLayout
from . import decode
from .handoff import Handoff
from .records import DELETE, EVENT, INSERT, QUARANTINE, RECORD_SCHEMA, to_ipc
from .replay_filter import ReplayFilter

MsgType = decode.MsgType


@dataclass
class TaskStats:
    first: int
    end: int
    messages: int = 0
    bytes: int = 0
    max_tick: int = 0
    dml_messages: int = 0
    dml_bytes: int = 0
    inserted_rows: int = 0
    deleted_rows: int = 0
    quarantined: int = 0
    handed_off: int = 0          # payloads that went through the handoff directory
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def _binary(payload: bytes | pa.Buffer | None) -> pa.Array:
    """A one-value binary array; over an Arrow buffer it is zero-copy (payloads are MBs)."""
    if isinstance(payload, pa.Buffer):
        offsets = pa.py_buffer(np.array([0, payload.size], dtype=np.int32))
        return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, payload])
    return pa.array([payload], pa.binary())


class Router:
    """Turns (offset, payload) pairs of one task into record batches."""

    def __init__(self, layout: CollectionLayout, state: ChannelState, collection_name: str,
                 delete_watermark: int, quarantine_watermark: int, first: int, end: int,
                 handoff: Handoff | None = None) -> None:
        self.layout = layout
        self.insert_schema = layout.insert_schema()
        self.delete_schema = layout.delete_schema()
        self.state = state
        self.collection_name = collection_name
        self.delete_watermark = delete_watermark
        self.quarantine_watermark = quarantine_watermark
        self.dropped_segments = state.dropped_segments()
        self.dropped_partitions = set(state.dropped_partitions)
        self.replay = ReplayFilter.from_json(state.replay) if state.replay else None
        self.stats = TaskStats(first, end)
        self.handoff = handoff

    # -- rows ----------------------------------------------------------------------------
    def _row(self, kind: int, offset: int, *, segment: int | None = None, partition: int | None = None,
             rows: int = 0, min_ts: int | None = None, max_ts: int | None = None, event: str | None = None,
             payload: bytes | pa.Buffer | None = None) -> pa.RecordBatch:
        handoff = None
        if kind in (INSERT, DELETE) and self.handoff is not None:
            handoff = self.handoff.put(payload)
            if handoff is not None:
                payload = b""
                self.stats.handed_off += 1
        return pa.RecordBatch.from_arrays([
            pa.array([kind], pa.int8()), pa.array([offset], pa.int64()), pa.array([segment], pa.int64()),
            pa.array([partition], pa.int64()), pa.array([rows], pa.int32()), pa.array([min_ts], pa.int64()),
            pa.array([max_ts], pa.int64()), pa.array([event], pa.string()), _binary(payload),
            pa.array([handoff], pa.string()),
        ], schema=RECORD_SCHEMA)

    def event(self, offset: int, doc: dict) -> pa.RecordBatch:
        return self._row(EVENT, offset, event=json.dumps(doc))

    def quarantine(self, offset: int, value: bytes | None, reason: str, msg_type: int | None) -> pa.RecordBatch | None:
        self.stats.quarantined += 1
        if offset < self.quarantine_watermark:
            return None  # recorded by an earlier, committed attempt
        doc = {"reason": reason, "msg_type": msg_type, "vchannel": self.state.vchannel,
               "pchannel": self.state.pchannel, "partition": self.state.partition}
        return self._row(QUARANTINE, offset, event=json.dumps(doc), payload=value or b"")

    # -- messages ------------------------------------------------------------------------
    def route(self, offset: int, value: bytes | None) -> pa.RecordBatch | None:
        self.stats.messages += 1
        self.stats.bytes += len(value or b"")
        msg_type = None
        try:
            msg_type, msg = decode.parse(value)
            if msg is None:
                self.stats.skip("ignored type")
                return None
            if msg_type in (MsgType.Insert, MsgType.Delete):
                self.stats.dml_messages += 1
                self.stats.dml_bytes += len(value)
                return self._insert(offset, msg) if msg_type == MsgType.Insert else self._delete(offset, msg)
            return self._control(offset, msg_type, msg)
        except decode.Reject as e:
            return self.quarantine(offset, value, str(e), msg_type)

    def _dml_filtered(self, msg, begin_ts: int) -> bool:
        if msg.shardName != self.state.vchannel:
            self.stats.skip("other shard")
            return True
        if self.state.collection_dropped:
            self.stats.skip("collection dropped")
            return True
        if msg.collectionID != self.state.collection_id:
            raise decode.Reject(f"collectionID {msg.collectionID} on vchannel of collection {self.state.collection_id}")
        if begin_ts <= self.state.seek_ts:
            self.stats.skip("before seek position")
            return True
        if msg.partitionID in self.dropped_partitions:
            self.stats.skip("dropped partition")
            return True
        return False

    def _insert(self, offset: int, msg) -> pa.RecordBatch | None:
        if not msg.timestamps:
            raise decode.Reject("insert without timestamps")
        begin_ts, end_ts = min(msg.timestamps), max(msg.timestamps)
        if self._dml_filtered(msg, begin_ts):
            return None
        if msg.segmentID in self.dropped_segments:
            self.stats.skip("dropped segment")
            return None
        if self.replay is not None and not self.replay.admit(msg.segmentID, end_ts):
            self.stats.skip("replay filter")
            return None
        cols, n = decode.insert_columns(self.layout, msg)
        cols.append(pa.array(np.full(n, msg.segmentID, dtype=np.int64)))
        cols.append(pa.array(np.full(n, msg.partitionID, dtype=np.int64)))
        self.stats.inserted_rows += n
        payload = to_ipc(pa.RecordBatch.from_arrays(cols, schema=self.insert_schema))
        return self._row(INSERT, offset, segment=msg.segmentID, partition=msg.partitionID, rows=n,
                         min_ts=begin_ts, max_ts=end_ts, payload=payload)

    def _delete(self, offset: int, msg) -> pa.RecordBatch | None:
        if not msg.timestamps:
            raise decode.Reject("delete without timestamps")
        if self._dml_filtered(msg, min(msg.timestamps)):
            return None
        keys, ts, n = decode.delete_columns(self.layout, msg)
        if offset < self.delete_watermark:
            self.stats.skip("delete already committed")
            return None
        self.stats.deleted_rows += n
        partition = pa.array(np.full(n, msg.partitionID, dtype=np.int64))
        payload = to_ipc(pa.RecordBatch.from_arrays([keys, ts, partition], schema=self.delete_schema))
        return self._row(DELETE, offset, partition=msg.partitionID, rows=n, payload=payload)

    def _control(self, offset: int, msg_type: int, msg) -> pa.RecordBatch | None:
        ts = msg.base.timestamp
        if msg_type == MsgType.TimeTick:
            self.stats.max_tick = max(self.stats.max_tick, ts)
            if self.replay is not None:
                self.replay.on_tick(ts)
            return None
        if msg_type == MsgType.Flush:
            if self.collection_name not in msg.collection_names:
                self.stats.skip("other collection")
                return None
            return self.event(offset, {"type": "flush", "offset": offset, "ts": ts})
        if msg.collectionID != self.state.collection_id:
            self.stats.skip("other collection")
            return None
        if msg_type == MsgType.DropCollection:
            self.state.collection_dropped = True
            return self.event(offset, {"type": "drop_collection", "offset": offset, "ts": ts})
        if msg_type == MsgType.DropPartition:
            self.dropped_partitions.add(msg.partitionID)
            return self.event(offset, {"type": "drop_partition", "offset": offset, "ts": ts,
                                       "partition_id": msg.partitionID})
        self.stats.skip("ignored type")
        return None

    def summary(self) -> pa.RecordBatch:
        s = self.stats
        doc = {"type": "task", "first": s.first, "end": s.end, "messages": s.messages, "bytes": s.bytes,
               "max_tick": s.max_tick, "dml_messages": s.dml_messages, "dml_bytes": s.dml_bytes,
               "inserted_rows": s.inserted_rows, "deleted_rows": s.deleted_rows,
               "quarantined": s.quarantined, "handed_off": s.handed_off, "skipped": s.skipped,
               "replay": self.replay.to_json() if self.replay is not None else None}
        return self.event(s.end, doc)
