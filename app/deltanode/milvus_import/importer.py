"""The import of what a Milvus persisted of one vchannel, before its flowgraph reads the stream.

Milvus's own DataNode recovers a vchannel from DataCoord's segment meta and the channel
checkpoint: it loads the segments, seeks to the checkpoint and drops, with its replay filter, the
inserts the segments already hold. A mirror of a Milvus whose broker no longer holds a
collection's beginning does the same, with the segments' rows copied into the Delta tables first:

1. read the vchannel's meta at one etcd revision (``meta.read_persisted``);
2. import every live segment not imported yet, or whose files changed since (a sync added a
   binlog, a delete a deltalog), on executors (``segment_task``), a job of up to ``batch``
   segments at a time, and commit each job's files to insert_log in one commit: a segment's rows
   are never half in. Segments imported before that the meta no longer lists alive (compacted
   into another one, which is imported in their place) have their files removed in that commit.
   The files have the columns of the schema the import is given (a segment written before a field
   was added to the live collection: null there); a table that lacks some is widened by them in
   the same commit, which records that schema (``storage.table_schema``);
3. read the meta again; when nothing is left to import, the last commit sets the vchannel's
   ``txn`` and its ChannelState: Milvus's checkpoint (with its ts as the seek ts), every segment
   with its dml position's ts, and the replay filter those make (``flowgraph.recovery``).

Each commit moves the import's own ``txn`` (``{vchannel}#milvus-import``) and records, in its
commitInfo, which segment files (fingerprints) are in: after a crash anywhere the next owner
reads that back and goes on; a segment committed is never imported twice, and two importers of
one vchannel cannot both commit (the txn is compared and swapped). A file removed meanwhile by
Milvus (compaction, garbage collection) makes the job's files deleted and the meta read again.

Runs on the driver, in the thread that loads the vchannel (a channel watch): the watch reports
progress at each commit, so a long import does not reach the coordinator's watch timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark import SparkContext

from ..delta import json_codec
from ..delta.actions import AddFile
from ..delta.layout import StorageLayout, segment_of
from ..delta.table_schema import TableSchema, schema_rank
from ..etcd.client import EtcdClient
from ..failure.crash_points import crash_point
from ..failure.errors import DeltaNodeError
from ..jobs.contract import JobGroup, JobKind
from ..jobs.launch import launch
from ..state.channel_state import STATES_KEY
from ..state.commit import CollectionCommitter, add_actions, delete_files
from ..vchannel.start_state import initial_state
from ..wire.datapb import SegmentInfo, VchannelInfo
from ..wire.milvus_proto import msg_pb2, schema_pb2
from ..wire.positions import PositionCodec
from ..wire.schema import CollectionLayout
from .delete_task import DeleteImport, DeltalogFile, import_deletes
from .import_progress import IMPORT_KEY, import_app, import_progress
from .meta import (
    MilvusSegmentState,
    PersistedChannel,
    PersistedSegment,
    SegmentLevel,
    read_persisted,
)
from .segment_task import ImportedSegment, SegmentImport, import_segment

log = logging.getLogger(__name__)
# Each in the import's pool: the pipeline's cycles keep their share of the cores meanwhile.
IMPORT_SEGMENTS = JobKind(name="deltanode: import", run=import_segment, group=JobGroup.MILVUS_IMPORT,
                          pool=JobGroup.MILVUS_IMPORT.value)
IMPORT_DELETES = JobKind(name="deltanode: import", run=import_deletes, group=JobGroup.MILVUS_IMPORT,
                         pool=JobGroup.MILVUS_IMPORT.value)
PROGRESS_EVERY = 30.0      # seconds between progress lines
RETRY_PAUSE = 1.0          # seconds before the meta is read again after a file went missing
MAX_ROUNDS = 100           # meta reads in a row that each found something new to import


class ImportFailed(DeltaNodeError):
    """The vchannel's import cannot go on (a file in a format DeltaNode cannot read, no checkpoint)."""


@dataclass(frozen=True, kw_only=True)
class MilvusSource:
    """Where a mirrored Milvus keeps its meta (``client``, ``meta_root``) and files (``storage``:
    its ``localStorage.path``, or ``s3://{bucket}/{rootPath}``; None when not configured)."""

    client: EtcdClient
    meta_root: str
    storage: StorageLayout | None
    positions: PositionCodec
    batch: int = 8             # segments one Spark job reads (a task each), committed together


def _state_info(persisted: PersistedChannel, positions: PositionCodec) -> VchannelInfo:
    """A VchannelInfo with Milvus's checkpoint and segments, as Milvus's DataCoord would hand it to
    a DataNode, for ``initial_state`` to build the vchannel's state and replay filter from."""
    assert persisted.checkpoint is not None
    cp = persisted.checkpoint
    info = VchannelInfo(collectionID=persisted.collection_id, channelName=persisted.vchannel)
    info.seek_position.CopyFrom(msg_pb2.MsgPosition(channel_name=persisted.vchannel,
                                                    msgID=positions.to_msg_id(cp.offset), timestamp=cp.ts))
    for seg in persisted.segments:
        if seg.level == SegmentLevel.L0:   # deletes only, imported into the segments they reach
            continue
        si = SegmentInfo(ID=seg.segment_id, collectionID=persisted.collection_id, partitionID=seg.partition_id,
                         insert_channel=persisted.vchannel, num_of_rows=seg.rows, state=int(seg.state))
        si.dml_position.CopyFrom(msg_pb2.MsgPosition(channel_name=persisted.vchannel, timestamp=seg.dml_ts))
        si.start_position.CopyFrom(msg_pb2.MsgPosition(channel_name=persisted.vchannel, timestamp=seg.start_ts))
        if seg.dropped:
            info.dropped_segments.append(si)
        elif seg.state in (MilvusSegmentState.FLUSHED, MilvusSegmentState.FLUSHING):
            info.flushedSegments.append(si)
        elif seg.imported:
            info.unflushedSegments.append(si)
    return info


class VchannelImporter:
    """Imports a vchannel's persisted segments. Runs on the driver; any thread (one per vchannel)."""

    def __init__(self, sc: SparkContext, storage: StorageLayout, source: MilvusSource) -> None:
        self.sc, self.storage, self.source, self.batch = sc, storage, source, source.batch

    def run(self, vchannel: str, collection_id: int, schema: schema_pb2.CollectionSchema,
            committer: CollectionCommitter, node_id: int, progressed: Callable[[], None] = lambda: None) -> None:
        """Import until the vchannel has a committed state (returns at once when it has one), with
        ``schema`` or the one the table records when that is newer (a field added to the live
        collection that another vchannel of it has read already: its segments may hold it)."""
        if self.source.storage is None:
            raise ImportFailed(
                f"{vchannel}: its collection's start is gone from the broker, and the rows Milvus persisted can only "
                f"be imported from Milvus's storage: set milvus.storage.root (Milvus's localStorage.path, or "
                f"s3://<minio.bucketName>/<minio.rootPath> with milvus.storage.s3.*)")
        doc = self._progress(vchannel, committer)
        if doc is None:
            return
        started = time.monotonic()
        with committer.lock:
            recorded = committer.recorded_schema()
        if recorded is not None and schema_rank(recorded) > schema_rank(schema):
            schema = recorded
        columns = TableSchema(columns=CollectionLayout.from_proto(schema).insert_schema(),
                              milvus_schema=schema.SerializeToString())
        for _ in range(MAX_ROUNDS):
            persisted = self._persisted(vchannel, collection_id)
            targets = {s.segment_id: s for s in persisted.to_import()}
            todo = [s for s in targets.values()
                    if doc["segments"].get(str(s.segment_id)) != persisted.fingerprint(s)]
            stale = [int(s) for s in doc["segments"] if int(s) not in targets]
            doc.update(segments_total=len(targets), rows_total=sum(s.rows for s in targets.values()),
                       revision=persisted.revision)
            if not todo and not self._finish(vchannel, persisted, committer, node_id, doc, stale, schema, columns):
                log.info("%s: a deltalog is gone from Milvus's storage (compacted or collected since the meta "
                         "was read); reading the meta again", vchannel)
                time.sleep(RETRY_PAUSE)
                continue
            if not todo:
                log.info("%s: import from Milvus done: %d segment(s), %d row(s) (%d of them deleted) in %.1f s; the "
                         "stream follows from Milvus's checkpoint (offset %d)", vchannel, doc["segments_done"],
                         doc["rows_done"], doc["deleted_done"], time.monotonic() - started,
                         persisted.checkpoint.offset if persisted.checkpoint else -1)
                return
            self._import_segments(vchannel, committer, doc, persisted, todo, stale, schema, columns, started,
                                  progressed)
        raise ImportFailed(f"{vchannel}: Milvus's meta changed in each of {MAX_ROUNDS} reads in a row; "
                           f"the import gives up for now (the channel is tried again)")

    @staticmethod
    def _progress(vchannel: str, committer: CollectionCommitter) -> dict | None:
        """The import's progress so far (as recorded with its commits); None: the vchannel has a
        committed state, nothing to import."""
        with committer.lock:
            insert_log = committer.created_insert_log()
            if insert_log.txn(vchannel) is not None:
                return None
            progress = import_progress(insert_log, vchannel) or {}
        return {"segments": dict(progress.get("segments", {})), "rows": dict(progress.get("rows", {})),
                "deleted": dict(progress.get("deleted", {})), "txn": progress.get("txn", 0),
                "started_ms": progress.get("started_ms") or int(time.time() * 1000)}

    def _persisted(self, vchannel: str, collection_id: int) -> PersistedChannel:
        """What Milvus persisted of the vchannel, read from its meta now: it must have a checkpoint."""
        persisted = read_persisted(self.source.client, self.source.meta_root, collection_id, vchannel,
                                   self.source.positions)
        if persisted.checkpoint is None:
            raise ImportFailed(f"{vchannel}: Milvus has no channel checkpoint for it "
                               f"({self.source.meta_root}/datacoord-meta/channel-cp/{vchannel}): nothing to "
                               f"import from, and its beginning is gone from the broker")
        return persisted

    def _import_segments(self, vchannel: str, committer: CollectionCommitter, doc: dict, persisted: PersistedChannel,
                         todo: list[PersistedSegment], stale: list[int], schema: schema_pb2.CollectionSchema,
                         columns: TableSchema, started: float, progressed: Callable[[], None]) -> None:
        """Import ``todo`` a Spark job of ``batch`` segments at a time, each batch committed with the
        progress; returns early (the meta is read again) when a file is gone meanwhile."""
        last_line = 0.0
        for i in range(0, len(todo), self.batch):
            chunk = todo[i:i + self.batch]
            results = self._run_job(persisted, chunk, schema)
            gone = [r.gone for r in results if r.gone]
            errors = [r.error for r in results if r.error]
            if gone or errors:
                self._discard(persisted.collection_id, results)
                if errors:
                    raise ImportFailed(f"{vchannel}: {errors[0]}")
                log.info("%s: %s is gone from Milvus's storage (compacted or collected since the meta was "
                         "read); reading the meta again", vchannel, gone[0])
                time.sleep(RETRY_PAUSE)
                return
            self._commit_batch(vchannel, committer, doc, persisted, chunk, results, stale if i == 0 else [], columns)
            progressed()
            if time.monotonic() - last_line >= PROGRESS_EVERY or i + self.batch >= len(todo):
                last_line = time.monotonic()
                self._log_progress(vchannel, doc, started)

    def _run_job(self, persisted: PersistedChannel, chunk: list[PersistedSegment],
                 schema: schema_pb2.CollectionSchema) -> list[ImportedSegment]:
        assert self.source.storage is not None
        raw = schema.SerializeToString()
        tasks = [SegmentImport(storage=self.storage, source=self.source.storage,
                               collection_id=persisted.collection_id, schema=raw, segment=s,
                               deltalogs=persisted.deletes_for(s)) for s in chunk]
        return launch(self.sc, IMPORT_SEGMENTS, tasks,
                      description=f"{len(tasks)} Milvus segment(s) of {persisted.vchannel}")

    def _discard(self, collection_id: int, results: list[ImportedSegment]) -> None:
        delete_files(self.storage, self.storage.insert_log(collection_id),
                     [r.entry for r in results if r.entry is not None])

    def _commit_batch(self, vchannel: str, committer: CollectionCommitter, doc: dict, persisted: PersistedChannel,
                      chunk: list[PersistedSegment], results: list[ImportedSegment], stale: list[int],
                      columns: TableSchema) -> None:
        written = [r for r in results if r.entry is not None]
        adds = [add if r.deletion_vector is None else add.with_deletion_vector(r.deletion_vector)
                for add, r in zip(add_actions([r.entry for r in written if r.entry is not None]), written)]
        update = _forget(doc, stale)
        for seg, r in zip(chunk, results):
            key = str(seg.segment_id)
            update["segments"][key] = persisted.fingerprint(seg)
            update["rows"][key], update["deleted"][key] = r.rows, r.deleted
        self._commit(vchannel, committer, doc, _progressed(update, done=False), adds,
                     {s.segment_id for s in chunk} | set(stale), columns)

    def _finish(self, vchannel: str, persisted: PersistedChannel, committer: CollectionCommitter, node_id: int,
                doc: dict, stale: list[int], schema: schema_pb2.CollectionSchema, columns: TableSchema) -> bool:
        """The last commits, from the meta this import matches: the deletes up to Milvus's
        checkpoint into delta_log, then the vchannel's txn and ChannelState into insert_log. False
        when a deltalog went missing meanwhile (the meta is read again)."""
        if not self._record_deletes(vchannel, persisted, committer, schema):
            return False
        state = initial_state(None, _state_info(persisted, self.source.positions), node_id, self.source.positions)
        update = _forget(doc, stale)
        for seg in state.segments.values():   # imported ones: the rows read (Milvus's count may lag)
            seg.num_rows = update["rows"].get(str(seg.segment_id), seg.num_rows)
        state.rows = sum(update["rows"].values())
        self._commit(vchannel, committer, doc, _progressed(update, done=True), [], set(stale), columns,
                     final=(state.checkpoint_offset, json_codec.dumps({vchannel: state.to_doc()})))
        return True

    def _record_deletes(self, vchannel: str, persisted: PersistedChannel, committer: CollectionCommitter,
                        schema: schema_pb2.CollectionSchema) -> bool:
        """Milvus's deletes of the vchannel up to its checkpoint's ts, once each, into delta_log
        (``delete_task``), in a commit that sets the vchannel's txn there to the checkpoint: the
        stream's deletes from there on are recorded by the pipeline, as after any recovery. An
        earlier attempt that got this far (its insert_log commit did not) left its checkpoint's ts
        in that commit: only the deletes after it are added."""
        assert persisted.checkpoint is not None and self.source.storage is not None
        cp, app = persisted.checkpoint, import_app(vchannel)
        with committer.lock:
            delete_log = committer.created_delete_log()
            before = import_progress(delete_log, vchannel)
        if before is not None and before["upto_ts"] >= cp.ts:
            return True
        files = tuple(DeltalogFile(path=path, partition_id=s.partition_id, may_be_gone=s.dropped)
                      for s in persisted.segments for path in s.deltalogs)
        task = DeleteImport(storage=self.storage, source=self.source.storage, collection_id=persisted.collection_id,
                            schema=schema.SerializeToString(), deltalogs=files,
                            after_ts=before["upto_ts"] if before else 0, upto_ts=cp.ts)
        (result,) = launch(self.sc, IMPORT_DELETES, [task], description=f"the deletes of {vchannel}")
        if result.gone or result.error:
            delete_files(self.storage, self.storage.delta_log(persisted.collection_id), list(result.entries))
            if result.error:
                raise ImportFailed(f"{vchannel}: {result.error}")
            return False
        txn = (before["txn"] if before else 0) + 1
        with committer.lock:
            delete_log = committer.created_delete_log()
            delete_log.commit(adds=add_actions(list(result.entries)),
                              txns={vchannel: cp.offset, app: txn},
                              expected={vchannel: before["checkpoint_offset"] if before else None,
                                        app: before["txn"] if before else None},
                              info={IMPORT_KEY: json_codec.dumps({vchannel: {
                                  "txn": txn, "upto_ts": cp.ts, "checkpoint_offset": cp.offset,
                                  "rows": result.rows + (before["rows"] if before else 0)}})})
        crash_point("after_import_deletes_commit")
        return True

    def _commit(self, vchannel: str, committer: CollectionCommitter, doc: dict, update: dict, adds: list[AddFile],
                replaced: set[int], columns: TableSchema, final: tuple[int, str] | None = None) -> None:
        """One import commit: ``adds``, the removal of the files of the ``replaced`` segments, the
        import's next txn and ``update`` as its progress; ``final``: the vchannel's txn and
        ChannelState too. ``columns``: those the files have (a table that lacks some is widened).
        ``doc`` becomes ``update`` once committed."""
        app = import_app(vchannel)
        update["txn"] = doc["txn"] + 1
        txns, info = {app: update["txn"]}, {IMPORT_KEY: json_codec.dumps({vchannel: update})}
        if final is not None:
            txns[vchannel], info[STATES_KEY] = final
        with committer.lock:
            insert_log = committer.created_insert_log()
            removes = [add.removal() for path, add in insert_log.live_files().items()
                       if (seg := segment_of(path)) is not None and seg[1] in replaced]
            insert_log.commit(adds=adds, removes=removes, txns=txns, expected={app: doc["txn"] or None, vchannel: None},
                              info=info, schema=columns)
        crash_point("after_import_commit")
        doc.clear()
        doc.update(update)

    def _log_progress(self, vchannel: str, doc: dict, started: float) -> None:
        elapsed = max(1e-3, time.monotonic() - started)
        log.info("%s: importing from Milvus: %d of %d segment(s), %d of %d row(s), %.0f rows/s", vchannel,
                 doc.get("segments_done", 0), doc.get("segments_total", 0), doc.get("rows_done", 0),
                 doc.get("rows_total", 0), doc.get("rows_done", 0) / elapsed)


def _forget(doc: dict, stale: list[int]) -> dict:
    """A copy of the import's progress without the ``stale`` segments (their files are removed)."""
    out = dict(doc, segments=dict(doc["segments"]), rows=dict(doc["rows"]), deleted=dict(doc["deleted"]))
    for s in stale:
        for part in ("segments", "rows", "deleted"):
            out[part].pop(str(s), None)
    return out


def _progressed(doc: dict, *, done: bool) -> dict:
    return dict(doc, done=done, updated_ms=int(time.time() * 1000), segments_done=len(doc["segments"]),
                rows_done=sum(doc["rows"].values()), deleted_done=sum(doc["deleted"].values()))
