"""What a Milvus persisted of one vchannel, read from its DataCoord meta in etcd at one revision.

DataCoord keeps, under ``{meta_root}/datacoord-meta/`` (docs/milvus-facts.md §10):

- ``s/{coll}/{part}/{seg}``: the segment's ``SegmentInfo``, without its log lists;
- ``binlog/{coll}/{part}/{seg}/{field}`` and ``deltalog/{coll}/{part}/{seg}/{field}``: one
  ``FieldBinlog`` each, whose entries name their file by ``logID`` (the path is rebuilt from it
  when ``log_path`` is empty, as Milvus 2.3+ stores it). In a segment of storage version 2
  (Milvus 2.6's default) a binlog key is a column group's: its id in place of the field's, the
  fields it holds in ``child_fields`` (docs/milvus-facts.md §10, §11);
- ``channel-cp/{vchannel}``: the channel checkpoint, before which every row of the vchannel is in
  those files.

Milvus writes a sync's segment meta before it moves the checkpoint past it, so the four prefixes
read at one etcd revision (``EtcdClient.get_prefixes``) describe files that hold everything before
that checkpoint. Runs on the driver; the records it returns travel to executors.
"""

from __future__ import annotations

import enum
import hashlib
import logging
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from ..etcd.client import EtcdClient
from ..failure.errors import DeltaNodeError
from ..wire.datapb import FieldBinlog, SegmentInfo
from ..wire.milvus_proto import msg_pb2
from ..wire.positions import PositionCodec

log = logging.getLogger(__name__)
ROW_ID_FIELD = 0   # every segment has binlogs of the RowID field: its entries count the rows
BINLOG_STORAGE = (0, 1)   # SegmentInfo.storage_version of the binlog format (a file a field)
PACKED_STORAGE = 2   # SegmentInfo.storage_version of Milvus's packed column groups (a Parquet file a group)
PACKED_FORMATS = ("", "parquet")   # FieldBinlog.format of a column group DeltaNode reads ("": before it existed)


class MilvusSegmentState(enum.IntEnum):
    """``common.SegmentState``."""

    NONE = 0
    NOT_EXIST = 1
    GROWING = 2
    SEALED = 3
    FLUSHED = 4
    FLUSHING = 5
    DROPPED = 6
    IMPORTING = 7


class SegmentLevel(enum.IntEnum):
    """``datapb.SegmentLevel`` (2.4): L0 segments hold only deletes; Legacy (2.3) counts as L1."""

    LEGACY = 0
    L0 = 1
    L1 = 2
    L2 = 3


class MilvusMetaError(DeltaNodeError):
    """Milvus's meta for a vchannel cannot be read into an import."""


@dataclass(frozen=True, kw_only=True)
class PersistedSegment:
    """One segment of the vchannel as DataCoord records it; paths are relative to Milvus's storage root."""

    segment_id: int
    partition_id: int
    state: MilvusSegmentState
    level: SegmentLevel
    rows: int                                          # entries of the logs holding its RowID field
    dml_ts: int                                        # its dml position's ts: its files hold every row up to it
    start_ts: int
    binlogs: tuple[tuple[int, tuple[str, ...]], ...]   # field (v2: column group) id -> its insert logs, in order
    deltalogs: tuple[str, ...]
    storage_version: int = 0
    child_fields: tuple[tuple[int, tuple[int, ...]], ...] = ()   # v2: column group id -> the fields it holds
    entries: tuple[tuple[int, tuple[int, ...]], ...] = ()        # field or group id -> rows of each of its logs

    @property
    def packed(self) -> bool:
        """Whether its insert logs are column groups (storage version 2), not a binlog a field."""
        return self.storage_version == PACKED_STORAGE

    @property
    def dropped(self) -> bool:
        return self.state == MilvusSegmentState.DROPPED

    @property
    def imported(self) -> bool:
        """Whether its rows are imported: every live segment with rows (Growing and Sealed ones
        have synced binlogs too); L0 segments only hold deletes, importing ones are not yet visible."""
        return (self.state in (MilvusSegmentState.GROWING, MilvusSegmentState.SEALED, MilvusSegmentState.FLUSHING,
                               MilvusSegmentState.FLUSHED) and self.level != SegmentLevel.L0)


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    offset: int
    ts: int


@dataclass(frozen=True, kw_only=True)
class PersistedChannel:
    """A vchannel's segments and checkpoint at one etcd revision of Milvus's meta."""

    vchannel: str
    collection_id: int
    revision: int
    checkpoint: Checkpoint | None
    segments: tuple[PersistedSegment, ...]

    def to_import(self) -> list[PersistedSegment]:
        return [s for s in self.segments if s.imported]

    def fingerprint(self, segment: PersistedSegment) -> str:
        """Changes whenever the files the segment's import reads do (a sync added binlogs, a delete
        a deltalog of its own or of an L0 segment): a segment imported from other files is
        imported again."""
        text = "|".join([",".join(f"{f}:{';'.join(p)}" for f, p in segment.binlogs),
                         ";".join(self.deletes_for(segment))])
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def deletes_for(self, segment: PersistedSegment) -> tuple[str, ...]:
        """The deltalogs whose deletes apply to ``segment``'s rows: its own, and those of the live
        L0 segments of its partition or of every partition (partition -1)."""
        l0 = [p for s in self.segments if s.level == SegmentLevel.L0 and not s.dropped
              and s.partition_id in (segment.partition_id, -1) for p in s.deltalogs]
        return (*segment.deltalogs, *l0)


def _parse(message_type, value: bytes, key: str):
    try:
        return message_type.FromString(value)
    except DecodeError as e:
        raise MilvusMetaError(f"{key}: not a {message_type.DESCRIPTOR.name} ({e})") from None


def _ids(key: str, prefix: str, n: int) -> list[int] | None:
    parts = key[len(prefix):].split("/")
    if len(parts) != n or not all(p.lstrip("-").isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def insert_log_path(collection_id: int, partition_id: int, segment_id: int, field_id: int, log_id: int) -> str:
    return f"insert_log/{collection_id}/{partition_id}/{segment_id}/{field_id}/{log_id}"


def delta_log_path(collection_id: int, partition_id: int, segment_id: int, log_id: int) -> str:
    return f"delta_log/{collection_id}/{partition_id}/{segment_id}/{log_id}"


def _relative(path: str) -> str:
    """A stored ``log_path`` relative to the storage root (Milvus stores it with its root path in front)."""
    for marker in ("insert_log/", "delta_log/"):
        at = path.find(marker)
        if at >= 0:
            return path[at:]
    raise MilvusMetaError(f"a log path that names no insert_log/ or delta_log/ directory: {path!r}")


def _check_storage(key: str, info: SegmentInfo) -> None:
    """A live segment's files are in a layout DeltaNode reads: binlogs, or Parquet column groups
    without a manifest (Milvus 2.6). A later layout is refused rather than misread."""
    if info.manifest_path:
        raise MilvusMetaError(f"{key}: segment {info.ID} keeps its files in a manifest ({info.manifest_path}, "
                              f"storage version {info.storage_version}, Milvus after 2.6.6), which DeltaNode does "
                              f"not read; it reads binlogs (storage version 0) and Milvus 2.6's column groups (2)")
    if info.storage_version not in (*BINLOG_STORAGE, PACKED_STORAGE):
        raise MilvusMetaError(f"{key}: segment {info.ID} is in Milvus's storage version {info.storage_version}, "
                              f"which DeltaNode does not know; it reads binlogs (storage version 0) and Milvus "
                              f"2.6's Parquet column groups (2)")


def _rows(entries: dict[int, tuple[int, ...]], children: dict[int, tuple[int, ...]]) -> int:
    """The segment's rows, from the logs holding the RowID field: its own binlogs, or the column
    group whose fields include it (group 0 when the groups name no fields, as before 2.6)."""
    if ROW_ID_FIELD in entries and not children:
        return sum(entries[ROW_ID_FIELD])
    group = next((g for g, fields in children.items() if ROW_ID_FIELD in fields), ROW_ID_FIELD)
    return sum(entries.get(group, ()))


def read_persisted(client: EtcdClient, meta_root: str, collection_id: int, vchannel: str,
                   positions: PositionCodec) -> PersistedChannel:
    """The vchannel's segments (every state, dropped ones included) and checkpoint, at one revision."""
    base = f"{meta_root.rstrip('/')}/datacoord-meta"
    prefixes = {name: f"{base}/{name}/{collection_id}/" for name in ("s", "binlog", "deltalog")}
    cp_key = f"{base}/channel-cp/{vchannel}"
    revision, found = client.get_prefixes([*prefixes.values(), cp_key])
    infos: dict[int, SegmentInfo] = {}
    for key, value in found[prefixes["s"]]:
        ids = _ids(key, prefixes["s"], 2)
        if ids is None:
            continue
        info = _parse(SegmentInfo, value, key)
        if info.insert_channel != vchannel:
            continue
        if info.state != MilvusSegmentState.DROPPED:
            _check_storage(key, info)
        infos[info.ID] = info
    binlogs: dict[int, dict[int, tuple[str, ...]]] = {s: {} for s in infos}
    children: dict[int, dict[int, tuple[int, ...]]] = {s: {} for s in infos}
    entries: dict[int, dict[int, tuple[int, ...]]] = {s: {} for s in infos}
    for key, value in found[prefixes["binlog"]]:
        ids = _ids(key, prefixes["binlog"], 3)
        if ids is None or ids[1] not in infos:
            continue
        partition, segment, field = ids
        fb = _parse(FieldBinlog, value, key)
        info = infos[segment]
        if info.storage_version == PACKED_STORAGE and info.state != MilvusSegmentState.DROPPED \
                and fb.format not in PACKED_FORMATS:
            raise MilvusMetaError(f"{key}: column group {field} of segment {segment} is in the {fb.format!r} file "
                                  f"format; DeltaNode reads the Parquet column groups of Milvus 2.6")
        binlogs[segment][field] = tuple(
            _relative(b.log_path) if b.log_path else insert_log_path(collection_id, partition, segment, field, b.logID)
            for b in fb.binlogs)
        entries[segment][field] = tuple(b.entries_num for b in fb.binlogs)
        if fb.child_fields:
            children[segment][field] = tuple(fb.child_fields)
    deltalogs: dict[int, list[str]] = {s: [] for s in infos}
    for key, value in found[prefixes["deltalog"]]:
        ids = _ids(key, prefixes["deltalog"], 3)
        if ids is None or ids[1] not in infos:
            continue
        partition, segment, _ = ids
        deltalogs[segment].extend(
            _relative(b.log_path) if b.log_path else delta_log_path(collection_id, partition, segment, b.logID)
            for b in _parse(FieldBinlog, value, key).binlogs)
    segments = tuple(PersistedSegment(
        segment_id=seg_id, partition_id=info.partitionID, state=MilvusSegmentState(info.state),
        level=SegmentLevel(info.level) if info.level in SegmentLevel._value2member_map_ else SegmentLevel.L1,
        rows=_rows(entries[seg_id], children[seg_id]),
        dml_ts=info.dml_position.timestamp if info.HasField("dml_position") else 0,
        start_ts=info.start_position.timestamp if info.HasField("start_position") else 0,
        binlogs=tuple(sorted(binlogs[seg_id].items())), deltalogs=tuple(deltalogs[seg_id]),
        storage_version=info.storage_version, child_fields=tuple(sorted(children[seg_id].items())),
        entries=tuple(sorted(entries[seg_id].items())))
        for seg_id, info in sorted(infos.items()))
    checkpoint = None
    for key, value in found[cp_key]:
        if key == cp_key:
            position = _parse(msg_pb2.MsgPosition, value, key)
            if position.msgID:
                checkpoint = Checkpoint(offset=positions.from_msg_id(position.msgID), ts=position.timestamp)
    return PersistedChannel(vchannel=vchannel, collection_id=collection_id, revision=revision,
                            checkpoint=checkpoint, segments=segments)
