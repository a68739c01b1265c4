"""A Milvus 2.6 WAL message, made into what a vchannel's router takes (pure logic, executors).

A 2.6 insert's body is the proxy's ``msgpb.InsertRequest`` before the streaming node placed it: its
timestamps, segment and shard are not the real ones. Milvus's own bridge to its older flowgraph
(pkg/v2 ``streaming/util/message/adaptor/message.go``, ``recoverInsertMsgFromHeader``) sets them from
the properties, and so does ``adapt``: every row's timestamp becomes the message's time tick
(``_tt``), the segment the ``_h`` assignment of the body's partition, the shard its vchannel
(``_vc``); a Delete's timestamps all become ``_tt``; a drop's MsgBase timestamp ``_tt``. A Flush
(one segment) and a ManualFlush (its ``segment_ids`` at its ``flush_ts``) seal segments. A
SchemaChange, or an AlterCollection whose ``update_mask`` names the schema, carries the collection's
whole new schema and the segments the streaming node flushed for it (``SchemaUpdate``); the router
judges it against the schema it writes with (``schema_change``). What DeltaNode cannot apply is
refused with a reason naming the type and version: an encrypted payload (``_ch``: no key here), an
import of files, a type or version it does not know.
Transactions (BeginTxn, members, CommitTxn, RollbackTxn) are assembled once a TimeTick releases
them (``txn_buffer``): here a member is adapted like any message. A payload that makes the adaptation
raise, whatever the error, is refused with it: one bad message never fails the task.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from ..wire import messagespb
from ..wire import wal_message as w
from ..wire.milvus_proto import common_pb2, msg_pb2
from . import decode

MsgType = common_pb2.MsgType
MSG_FLUSH_SEGMENT, MSG_MANUAL_FLUSH = MsgType.FlushSegment, MsgType.ManualFlush
# What Milvus's own adaptor maps a SchemaChange and an AlterCollection to.
MSG_SCHEMA_CHANGE, MSG_ALTER_COLLECTION = MsgType.AddCollectionField, MsgType.AlterCollection


class Kind(enum.Enum):
    """What a router does with an adapted message."""

    TICK = "tick"            # nothing but its time tick (a TimeTick, a type that carries nothing for a vchannel)
    DML = "dml"              # an Insert or Delete (``msg_type``, ``msg``)
    CONTROL = "control"      # a drop (``msg``) or a seal of segments (``seal``)
    SCHEMA = "schema"        # the collection's new schema (``schema``)
    BEGIN = "begin"          # BeginTxn / CommitTxn / RollbackTxn of the message's ``_tx``
    COMMIT = "commit"
    ROLLBACK = "rollback"
    REJECT = "reject"        # to quarantine with ``reason``


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentSeal:
    """A Flush or ManualFlush: ``segments`` take no row after ``ts``."""

    segments: tuple[int, ...]
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaUpdate:
    """A SchemaChange, or an AlterCollection of the schema: the collection's whole new schema (a
    serialized ``CollectionSchema``) and the segments the streaming node flushed for it, which take
    no row after ``ts``. Runs on executors."""

    collection_id: int
    schema: bytes
    flushed: tuple[int, ...]
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Adapted:
    """One 2.6 message in the router's shapes. Runs on executors."""

    kind: Kind
    msg_type: int | None = None   # commonpb.MsgType (DML, CONTROL; REJECT: the type's, when it has one)
    msg: Any = None               # the msgpb request, timestamps, segment and shard set (DML, drops)
    seal: SegmentSeal | None = None
    schema: SchemaUpdate | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class WalEntry:
    """One 2.6 message of a vchannel as its reader holds it until a TimeTick releases it: where it
    is, its properties, what it is to a router and its wire bytes. Runs on executors."""

    offset: int
    wal: w.WalMessage
    adapted: Adapted
    value: bytes

    @property
    def time_tick(self) -> int:
        return self.wal.time_tick


_TICK = Adapted(kind=Kind.TICK)
# Types that carry nothing for a vchannel's data: creations (a segment's first rows create it in
# DeltaNode's state), and DDL of databases, aliases, users, roles, resource groups, indexes, loads.
_IGNORED = frozenset({w.T_TIME_TICK, w.T_CREATE_COLLECTION, w.T_CREATE_PARTITION, w.T_CREATE_SEGMENT,
                      w.T_ALTER_REPLICATE_CONFIG, *range(14, 37)})
# The payload version Milvus builds each type with (reflect_info.go).
_VERSIONS = {w.T_TIME_TICK: w.V1, w.T_INSERT: w.V1, w.T_DELETE: w.V1, w.T_CREATE_COLLECTION: w.V1,
             w.T_DROP_COLLECTION: w.V1, w.T_CREATE_PARTITION: w.V1, w.T_DROP_PARTITION: w.V1, w.T_IMPORT: w.V1,
             w.T_FLUSH: w.V2, w.T_MANUAL_FLUSH: w.V2, w.T_CREATE_SEGMENT: w.V2, w.T_SCHEMA_CHANGE: w.V2,
             w.T_ALTER_COLLECTION: w.V2, w.T_ALTER_REPLICATE_CONFIG: w.V2, w.T_BEGIN_TXN: w.V2,
             w.T_COMMIT_TXN: w.V2, w.T_ROLLBACK_TXN: w.V2, **{t: w.V2 for t in range(14, 37)}}
# The FieldMask path of an AlterCollection that changes the schema (message.FieldMaskCollectionSchema).
SCHEMA_MASK = "schema"
_TXN_KINDS = {w.T_BEGIN_TXN: Kind.BEGIN, w.T_COMMIT_TXN: Kind.COMMIT, w.T_ROLLBACK_TXN: Kind.ROLLBACK}


def reject(wal: w.WalMessage, reason: str) -> Adapted:
    return Adapted(kind=Kind.REJECT, msg_type=w.COMMONPB_TYPES.get(wal.type), reason=reason)


def adapt(payload: bytes | None, wal: w.WalMessage) -> Adapted:
    """What ``payload`` with properties ``wal`` (``_v`` 1 or 2) is to a router."""
    t, v = wal.type, wal.version
    if v > w.NEWEST_VERSION:
        return reject(wal, f"Milvus message version _v {v} ({wal.name}): DeltaNode reads versions 0 to "
                           f"{w.NEWEST_VERSION}")
    expected = _VERSIONS.get(t)
    if expected is None:
        what = "a transaction assembled by a reader, never written to a WAL" if t == w.T_TXN else "unknown"
        return reject(wal, f"Milvus message type _t {t} ({what}), _v {v}: not applied")
    if v != expected:
        return reject(wal, f"{wal.name} with payload version _v {v}: Milvus writes it as _v {expected}")
    if wal.cipher is not None:
        return reject(wal, f"encrypted by Milvus's cipher (zone {wal.cipher.zone}): DeltaNode has no key")
    try:
        return _adapt(payload or b"", wal)
    except w.WalFormatError as e:
        return reject(wal, str(e))
    except DecodeError as e:
        return reject(wal, f"{wal.name} payload (_v {v}) does not parse: {e}")
    except Exception as e:  # noqa: BLE001 - whatever a payload makes this pure code raise is that message's fault
        return reject(wal, f"{wal.name} (_v {v}) does not adapt: {type(e).__name__}: {e}")


def _adapt(payload: bytes, wal: w.WalMessage) -> Adapted:
    t = wal.type
    if t == w.T_INSERT:
        return _insert(msg_pb2.InsertRequest.FromString(payload), wal)
    if t == w.T_DELETE:
        return _delete(msg_pb2.DeleteRequest.FromString(payload), wal)
    if t in _TXN_KINDS:
        # A BeginTxn, CommitTxn or RollbackTxn without its ``_tx`` is no transaction's: Milvus's
        # txn buffer passes it on as an ordinary message, which carries nothing.
        return Adapted(kind=_TXN_KINDS[t]) if wal.txn is not None else _TICK
    if t in _IGNORED:
        return _TICK
    if t == w.T_FLUSH:
        h = wal.header_as(messagespb.FlushMessageHeader)
        return Adapted(kind=Kind.CONTROL, msg_type=MSG_FLUSH_SEGMENT,
                       seal=SegmentSeal(segments=(h.segment_id,), ts=wal.time_tick))
    if t == w.T_MANUAL_FLUSH:
        h = wal.header_as(messagespb.ManualFlushMessageHeader)
        return Adapted(kind=Kind.CONTROL, msg_type=MSG_MANUAL_FLUSH,
                       seal=SegmentSeal(segments=tuple(h.segment_ids), ts=h.flush_ts or wal.time_tick))
    if t == w.T_DROP_COLLECTION:
        drop = msg_pb2.DropCollectionRequest.FromString(payload)
        drop.collectionID = drop.collectionID or wal.header_as(messagespb.DropCollectionMessageHeader).collection_id
        return _control(decode.MSG_DROP_COLLECTION, drop, wal)
    if t == w.T_DROP_PARTITION:
        drop = msg_pb2.DropPartitionRequest.FromString(payload)
        header = wal.header_as(messagespb.DropPartitionMessageHeader)
        drop.collectionID = drop.collectionID or header.collection_id
        drop.partitionID = drop.partitionID or header.partition_id
        return _control(decode.MSG_DROP_PARTITION, drop, wal)
    if t == w.T_SCHEMA_CHANGE:
        h = wal.header_as(messagespb.SchemaChangeMessageHeader)
        body = messagespb.SchemaChangeMessageBody.FromString(payload)
        return _schema(wal, MSG_SCHEMA_CHANGE, h.collection_id, body.schema, h.flushed_segment_ids)
    if t == w.T_ALTER_COLLECTION:
        header = wal.header_as(messagespb.AlterCollectionMessageHeader)
        if SCHEMA_MASK not in header.update_mask.paths:
            return _TICK   # a rename, a description, properties, a consistency level: nothing of the rows
        body = messagespb.AlterCollectionMessageBody.FromString(payload)
        return _schema(wal, MSG_ALTER_COLLECTION, header.collection_id, body.updates.schema,
                       header.flushed_segment_ids)
    if t == w.T_IMPORT:
        return reject(wal, "Import: a bulk import of files, not rows on the channel; DeltaNode does not read them")
    raise AssertionError(f"type {t} has a version but no adaptation")   # _VERSIONS and the above agree


def _schema(wal: w.WalMessage, msg_type: int, collection_id: int, schema: bytes, flushed) -> Adapted:
    if not schema:
        return reject(wal, f"{wal.name} of the schema of collection {collection_id} carries no schema")
    return Adapted(kind=Kind.SCHEMA, msg_type=msg_type, schema=SchemaUpdate(
        collection_id=collection_id, schema=schema, flushed=tuple(flushed), ts=wal.time_tick))


def _control(msg_type: int, msg: Any, wal: w.WalMessage) -> Adapted:
    msg.base.timestamp = wal.time_tick
    return Adapted(kind=Kind.CONTROL, msg_type=msg_type, msg=msg)


def _insert(msg: Any, wal: w.WalMessage) -> Adapted:
    header = wal.header_as(messagespb.InsertMessageHeader)
    if msg.collectionID != header.collection_id:
        return reject(wal, f"Insert body of collection {msg.collectionID}, its header (_h) of collection "
                           f"{header.collection_id}")
    segment = next((p.segment_assignment.segment_id for p in header.partitions if p.partition_id == msg.partitionID),
                   0)
    if not segment:
        return reject(wal, f"Insert of partition {msg.partitionID} without a segment assignment for it in its header "
                           f"(_h assigns partitions {sorted(p.partition_id for p in header.partitions)})")
    if msg.num_rows != len(msg.rowIDs):   # a row count its body does not hold is never multiplied out
        return reject(wal, f"row count mismatch: num_rows {msg.num_rows}, {len(msg.rowIDs)} rowIDs")
    tt = wal.time_tick
    msg.segmentID = segment
    del msg.timestamps[:]
    msg.timestamps.extend([tt] * msg.num_rows)
    msg.base.timestamp = tt
    msg.shardName = wal.vchannel or ""
    return Adapted(kind=Kind.DML, msg_type=decode.MSG_INSERT, msg=msg)


def _delete(msg: Any, wal: w.WalMessage) -> Adapted:
    header = wal.header_as(messagespb.DeleteMessageHeader)
    if msg.collectionID != header.collection_id:
        return reject(wal, f"Delete body of collection {msg.collectionID}, its header (_h) of collection "
                           f"{header.collection_id}")
    # One timestamp per key as the body counts them (Milvus's adaptor keeps their number), or per
    # row of num_rows when the body sends none.
    n = len(msg.timestamps) or msg.num_rows
    keys = _key_count(msg)
    if n != keys:   # a row count its body does not hold is never multiplied out
        return reject(wal, f"row count mismatch: num_rows {msg.num_rows}, {keys} keys, {len(msg.timestamps)} "
                           f"timestamps")
    del msg.timestamps[:]
    msg.timestamps.extend([wal.time_tick] * n)
    msg.base.timestamp = wal.time_tick
    msg.shardName = wal.vchannel or ""
    return Adapted(kind=Kind.DML, msg_type=decode.MSG_DELETE, msg=msg)


def _key_count(msg: Any) -> int:
    ids = msg.primary_keys
    if ids.HasField("int_id"):
        return len(ids.int_id.data)
    if ids.HasField("str_id"):
        return len(ids.str_id.data)
    return len(msg.int64_primary_keys)


def restamp(adapted: Adapted, ts: int) -> Adapted:
    """A transaction's member as its CommitTxn makes it: every timestamp the commit's time tick
    (Milvus's txn buffer re-stamps its members so)."""
    msg = adapted.msg
    if adapted.kind == Kind.DML:
        n = len(msg.timestamps)
        del msg.timestamps[:]
        msg.timestamps.extend([ts] * n)
        msg.base.timestamp = ts
    elif adapted.seal is not None:
        return Adapted(kind=adapted.kind, msg_type=adapted.msg_type,
                       seal=SegmentSeal(segments=adapted.seal.segments, ts=max(adapted.seal.ts, ts)))
    elif msg is not None:
        msg.base.timestamp = ts
    return adapted
