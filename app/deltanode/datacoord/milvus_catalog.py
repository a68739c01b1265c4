"""Mirror mode: the collections of a running Milvus, read from its own etcd meta (read only).

RootCoord keeps every collection under ``{meta}/root-coord/`` (docs/milvus-facts.md §7):

- ``database/collection-info/{dbID}/{collID}`` (``root-coord/collection/{collID}`` before
  databases): an ``etcdpb.CollectionInfo`` whose schema has no fields;
- ``fields/{collID}/{fieldID}``: one ``schema.FieldSchema`` each, joined into the schema here;
- ``struct-array-fields/{collID}/{fieldID}`` (2.6): one ``schema.StructArrayFieldSchema`` each, its
  sub-fields inside it, and ``functions/{collID}/{functionID}`` (2.5+): one ``schema.FunctionSchema``
  each (BM25 and the others whose outputs are fields), joined in as well;
- ``partitions/{collID}/{partID}``: ``etcdpb.PartitionInfo``; ``database/db-info/{dbID}``.

One range read of that prefix gives every collection, whatever their number. A removed key
may be left as a tombstone value; ``snapshots/`` (history) is never read. A collection still
being created is left out until RootCoord marks it created: its start positions are written
with that step.

Where a mirrored vchannel starts when DeltaNode has no checkpoint for it: right after the
collection's CreateCollection message (``CollectionInfo.start_positions``), so every row since
creation is mirrored. When the broker no longer holds that position (retention), or always with
``milvus.start = segments``, it starts at Milvus's own channel checkpoint
(``datacoord-meta/channel-cp/{vchannel}``) with the ids of the segments Milvus persisted, as
Milvus's DataCoord hands a channel to its DataNodes: the DataNode imports those segments first
(``milvus_import``) and its replay filter drops what they hold. With ``milvus.start =
checkpoint`` it starts at that checkpoint without an import, and the skipped range is recorded
under ``{etcd.root}/deltanode/gaps/{vchannel}`` and logged. DeltaNode never writes under the
Milvus root, and never uses Milvus's sessions or consumer groups.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from ..etcd.client import EtcdClient, PrefixWatch
from ..milvus_import.meta import MilvusSegmentState, read_persisted
from ..mq.broker import Broker, BrokerError
from ..wire.etcdpb import (
    CollectionInfo,
    CollectionState,
    DatabaseInfo,
    PartitionInfo,
    PartitionState,
)
from ..wire.milvus_proto import msg_pb2, schema_pb2
from ..wire.names import pchannel_of
from ..wire.positions import PositionCodec
from .catalog import (
    CatalogError,
    CollectionRecord,
    CollectionStatus,
    StartPosition,
    encode_schema,
)

log = logging.getLogger(__name__)

#: The value Milvus's snapshot KV writes for a removed key.
TOMBSTONE = b"\xe2\x9b\xbc"
START_CREATION, START_SEGMENTS, START_CHECKPOINT = "creation", "segments", "checkpoint"


def gap_key(root: str, vchannel: str) -> str:
    """Where DeltaNode records the range a mirrored vchannel skipped (under its own ``etcd.root``)."""
    return f"{root}/deltanode/gaps/{vchannel}"


@dataclass(frozen=True, kw_only=True)
class StartGap:
    """Messages of a vchannel that DeltaNode never read: they were gone from the broker when the
    vchannel first started, and Milvus's channel checkpoint was taken instead."""

    vchannel: str
    from_offset: int          # the position asked for (right after CreateCollection)
    to_offset: int            # where the vchannel started (Milvus's channel checkpoint)
    to_ts: int
    broker_first_offset: int  # the first position the broker still held
    recorded_at_ms: int


def start_after_retention(vchannel: str, created: StartPosition, first: int, checkpoint: StartPosition | None,
                          meta_root: str) -> tuple[StartPosition, StartGap]:
    """``milvus.start = checkpoint`` when the broker's ``first`` offset is past the collection's
    start: Milvus's channel ``checkpoint`` (its rows are in Milvus's binlogs), and the gap that
    leaves. Raises CatalogError when Milvus has no checkpoint, or one the broker no longer holds."""
    if checkpoint is None or checkpoint.offset < first:
        held = "none" if checkpoint is None else f"offset {checkpoint.offset}, also gone"
        raise CatalogError(
            f"{vchannel}: the broker's first offset on its pchannel is {first}, past the collection's start "
            f"position {created.offset}, and Milvus's channel checkpoint ({meta_root}/datacoord-meta/channel-cp/"
            f"{vchannel}) is {held}: nowhere to start without losing rows silently")
    return checkpoint, StartGap(vchannel=vchannel, from_offset=created.offset, to_offset=checkpoint.offset,
                                to_ts=checkpoint.ts, broker_first_offset=first, recorded_at_ms=int(time.time() * 1000))


# The parts of a schema RootCoord keeps under keys of their own, {part}/{collID}/{partID}.
_SCHEMA_PARTS = {"fields": schema_pb2.FieldSchema, "struct-array-fields": schema_pb2.StructArrayFieldSchema,
                 "functions": schema_pb2.FunctionSchema}


def _joined_schema(stored: schema_pb2.CollectionSchema, fields: list, structs: list,
                   functions: list) -> schema_pb2.CollectionSchema:
    """The collection's schema with the parts kept under keys of their own, each in id order.
    Milvus reads those keys when the stored schema has neither fields nor struct arrays (2.3+;
    before, the schema held its fields), and the functions' keys when it has no functions."""
    schema = schema_pb2.CollectionSchema()
    schema.CopyFrom(stored)
    if not schema.fields and not schema.struct_array_fields:
        schema.fields.extend(sorted(fields, key=lambda f: f.fieldID))
        schema.struct_array_fields.extend(sorted(structs, key=lambda f: f.fieldID))
    if not schema.functions:
        schema.functions.extend(sorted(functions, key=lambda f: f.id))
    return schema


def _parse(message_type, value: bytes, key: str):
    try:
        return message_type.FromString(value)
    except DecodeError as e:
        log.warning("ignoring %s: not a %s (%s)", key, message_type.DESCRIPTOR.name, e)
        return None


class MilvusCatalog:
    """The collections of the Milvus whose meta is at ``meta_root`` in ``client``'s etcd.

    ``own_client``/``own_root``: DeltaNode's etcd and root, where start gaps are recorded; a
    ``client`` other than ``own_client`` is closed with the catalog.
    ``broker`` and ``positions``: to find whether a start position is still on the broker and to
    read Milvus's msgID bytes.
    """

    kind = "milvus"

    def __init__(self, client: EtcdClient, meta_root: str, *, own_client: EtcdClient, own_root: str,
                 broker: Broker, positions: PositionCodec, start: str = START_CREATION) -> None:
        self.client, self.meta_root = client, meta_root.rstrip("/")
        self.own_client, self.own_root = own_client, own_root
        self.broker, self.positions, self.start = broker, positions, start

    def close(self) -> None:
        if self.client is not self.own_client:   # a client of Milvus's own etcd cluster, opened for it
            self.client.close()

    @property
    def prefix(self) -> str:
        return f"{self.meta_root}/root-coord/"

    def describe(self) -> str:
        return f"the Milvus meta under {self.meta_root}"

    # -- collections ------------------------------------------------------------------
    def collections(self) -> list[CollectionRecord]:
        """Every created (or dropping) collection, with its fields and partitions joined in."""
        infos: dict[int, tuple[str, Any]] = {}
        fields: dict[int, list[schema_pb2.FieldSchema]] = defaultdict(list)
        structs: dict[int, list[schema_pb2.StructArrayFieldSchema]] = defaultdict(list)
        functions: dict[int, list[schema_pb2.FunctionSchema]] = defaultdict(list)
        partitions: dict[int, dict[str, int]] = defaultdict(dict)
        databases: dict[int, str] = {}
        for key, value, _ in self.client.get_prefix(self.prefix):
            if value == TOMBSTONE:
                continue
            parts = key[len(self.prefix):].split("/")
            if parts[:2] == ["database", "collection-info"] and len(parts) == 4 or parts[0] == "collection" \
                    and len(parts) == 2:
                info = _parse(CollectionInfo, value, key)
                if info is not None:
                    infos[info.ID] = (key, info)
            elif parts[0] in _SCHEMA_PARTS and len(parts) == 3:
                message_type, into = _SCHEMA_PARTS[parts[0]], {"fields": fields, "struct-array-fields": structs,
                                                                "functions": functions}[parts[0]]
                part = _parse(message_type, value, key)
                if part is not None:
                    into[int(parts[1])].append(part)
            elif parts[0] == "partitions" and len(parts) == 3:
                part = _parse(PartitionInfo, value, key)
                if part is not None and part.state in (PartitionState.CREATED, PartitionState.CREATING):
                    partitions[int(parts[1])][part.partitionName] = part.partitionID
            elif parts[:2] == ["database", "db-info"] and len(parts) == 3:
                db = _parse(DatabaseInfo, value, key)
                if db is not None:
                    databases[db.id] = db.name
        records = []
        for collection_id, (key, info) in sorted(infos.items()):
            schema = _joined_schema(info.schema, fields.get(collection_id, []), structs.get(collection_id, []),
                                    functions.get(collection_id, []))
            record = self._record(key, info, schema, partitions.get(collection_id, {}), databases)
            if record is not None:
                records.append(record)
        return records

    def _record(self, key: str, info, schema: schema_pb2.CollectionSchema, partitions: dict[str, int],
                databases: dict[int, str]) -> CollectionRecord | None:
        if info.state in (CollectionState.CREATING, CollectionState.DROPPED):
            return None
        vchannels, pchannels = list(info.virtual_channel_names), list(info.physical_channel_names)
        if not vchannels or len(vchannels) != len(pchannels):
            log.warning("ignoring %s: %d vchannels for %d pchannels", key, len(vchannels), len(pchannels))
            return None
        starts = {}
        for pair in info.start_positions:
            try:
                starts[pair.key] = self.positions.from_msg_id(pair.data)
            except ValueError as e:
                log.warning("%s: start position of %s unreadable (%s); its vchannel starts at offset 0", key,
                            pair.key, e)
        if not partitions:   # before 2.3 partitions lived in the CollectionInfo
            partitions = dict(zip(info.partitionNames, info.partitionIDs))
        return CollectionRecord(
            collection_id=info.ID, name=schema.name, schema_b64=encode_schema(schema),
            shards=info.shards_num or len(vchannels),
            vchannels=vchannels, pchannels=pchannels, start_offsets=starts, start_ts=info.create_time,
            state=CollectionStatus.DROPPING if info.state == CollectionState.DROPPING else CollectionStatus.CREATED,
            database=databases.get(info.db_id, "default"), partitions=partitions)

    def watch(self, on_change: Callable[[], None]) -> PrefixWatch:
        """Call ``on_change`` whenever RootCoord's meta changes (a collection created or dropped, ...)."""
        return self.client.watch_prefix(self.prefix, lambda _event: on_change())

    # -- where a vchannel starts ------------------------------------------------------
    def start_position(self, record: CollectionRecord, vchannel: str) -> StartPosition:
        created = StartPosition(offset=record.start_offsets.get(pchannel_of(vchannel), -1) + 1, ts=record.start_ts)
        if self.start == START_SEGMENTS:
            return self._persisted_start(record, vchannel, created, None)
        first = self._first_offset(pchannel_of(vchannel))
        if first is None or first <= created.offset:
            return created
        if self.start == START_CREATION:
            return self._persisted_start(record, vchannel, created, first)
        start, gap = start_after_retention(vchannel, created, first, self._milvus_checkpoint(vchannel), self.meta_root)
        self._record_gap(gap)
        return start

    def _persisted_start(self, record: CollectionRecord, vchannel: str, created: StartPosition,
                         first: int | None) -> StartPosition:
        """Milvus's channel checkpoint with the segments persisted before it (imported by the
        DataNode), read at one revision; ``created`` when Milvus persisted nothing of the vchannel
        yet and the broker still holds its beginning (``first``: the broker's first offset, None
        when that is not in question)."""
        persisted = read_persisted(self.client, self.meta_root, record.collection_id, vchannel, self.positions)
        cp = persisted.checkpoint
        if cp is None or (first is not None and cp.offset < first):
            if first is None:
                return created
            held = "none" if cp is None else f"offset {cp.offset}, also gone"
            raise CatalogError(
                f"{vchannel}: the broker's first offset on its pchannel is {first}, past the collection's start "
                f"position {created.offset}, and Milvus's channel checkpoint ({self.meta_root}/datacoord-meta/"
                f"channel-cp/{vchannel}) is {held}: nowhere to start without losing rows silently")
        segments = persisted.to_import()
        flushed = tuple(s.segment_id for s in segments if s.state in (MilvusSegmentState.FLUSHED,
                                                                      MilvusSegmentState.FLUSHING))
        unflushed = tuple(s.segment_id for s in segments if s.segment_id not in flushed)
        log.info("%s: starts at Milvus's channel checkpoint (offset %d, ts %d) after an import of the %d segment(s) "
                 "Milvus persisted (%d rows)%s", vchannel, cp.offset, cp.ts, len(segments),
                 sum(s.rows for s in segments),
                 "" if first is None else f"; the broker no longer holds the collection's start ({first} > "
                                          f"{created.offset})")
        return StartPosition(offset=cp.offset, ts=cp.ts, flushed=flushed, unflushed=unflushed)

    def _first_offset(self, pchannel: str) -> int | None:
        watermarks = self.broker.watermarks()
        try:
            return watermarks.first(pchannel)
        except BrokerError as e:
            log.warning("cannot read the first offset of %s (%s): starting from the collection's start", pchannel, e)
            return None
        finally:
            watermarks.close()

    def _milvus_checkpoint(self, vchannel: str) -> StartPosition | None:
        key = f"{self.meta_root}/datacoord-meta/channel-cp/{vchannel}"
        found = self.client.get(key)
        if found is None:
            return None
        position = _parse(msg_pb2.MsgPosition, found[0], key)
        if position is None or not position.msgID:
            return None
        return StartPosition(offset=self.positions.from_msg_id(position.msgID), ts=position.timestamp)

    def _record_gap(self, gap: StartGap) -> None:
        key = gap_key(self.own_root, gap.vchannel)
        if self.own_client.get(key) is None:
            self.own_client.put(key, json.dumps(vars(gap)))
        log.warning("%s: offsets %d..%d of its pchannel are gone from the broker (first offset %d); starting at "
                    "Milvus's channel checkpoint %d (milvus.start = checkpoint): the rows in between are not mirrored",
                    gap.vchannel, gap.from_offset, gap.to_offset - 1, gap.broker_first_offset, gap.to_offset)


def read_gaps(client: EtcdClient, root: str) -> dict[str, dict]:
    """vchannel -> its recorded start gap (``StartGap`` fields)."""
    prefix = gap_key(root, "")
    return {key[len(prefix):]: json.loads(value) for key, value, _ in client.get_prefix(prefix)}

