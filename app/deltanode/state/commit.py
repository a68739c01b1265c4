"""The driver's commit of a collection's vchannels: binlogs, segment meta and checkpoints.

One sync of a collection carries, for each of its vchannels this node syncs, the batches
read since its last commit: their binlog files and the ChannelState after them. Order, and why:

1. the fence (the caller's: still the channel's owner in etcd) has passed;
2. delete binlogs -> delta_log and quarantine rows -> quarantine, each commit with
   ``txn(vchannel, end)`` for the vchannels that have some; a crash after this point
   replays the batches, and the replay skips deletes/quarantine below those tables' txn;
3. ONE commit to insert_log: the insert binlogs (``add``), the committed files of segments
   dropped by these batches (``remove``), the deletion vectors of the rows the batches' deletes
   remove (``delete_mark_task``: a ``remove`` of each marked file with its old DV and an ``add`` with
   the new one; a new file is added with its DV), ``txn(vchannel, end)`` and the new
   ChannelState of every synced vchannel in the commit metadata, and, when the files may have
   columns the table lacks (a field added to the live collection), the table's schema widened by
   them with the Milvus schema they come from (``table_schema``). Segment meta, deletions,
   columns and checkpoint are therefore never apart, and a checkpoint never covers data that is not
   committed. A crash after step 2 replays the batch: its deletes, already in delta_log, are
   read again to mark their rows (``binlog_writer.REPLAYED_DELETES``).

Every commit is a compare-and-swap on each vchannel's txn (``delta_log.DeltaLog.commit``):
it lands only if the txn is still the one this node last committed (or read at start). A
vchannel whose txn another writer moved is refused, alone: the others of the sync are
committed without it, and its files are deleted (no landed version names them: file names are
unique to the task that wrote them). A commit that raises instead (``CommitInDoubt``, or any
error of the store) may have landed: the caller keeps every file of the sync, and the vchannel
reloads from whatever Delta holds.

A commit that removes files (a dropped segment's, a marked file's old deletion vector) lands only
while no version it did not know removed one of them (``FilesRemoved``): a compaction of this node
left in doubt may land after it released the lock, and a removal that missed its output would
bring the rows back twice. The dropped segments' files are then listed again from the files live
now; a vchannel whose marks were on such a file waits for the next cycle, which marks its deletes
again, or reloads when its side commits landed (the side tables' txns refuse its batches a
second time).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import pyarrow as pa

from ..delta import json_codec
from ..delta.actions import AddFile, RemoveFile
from ..delta.delta_log import DeltaLog, FilesRemoved, TxnMoved
from ..delta.layout import QUARANTINE_SCHEMA, StorageLayout
from ..delta.table_schema import TableSchema, recorded_schema
from ..failure.crash_points import crash_point
from ..records import FileEntry, FileMark, TableKind
from ..wire.milvus_proto import schema_pb2
from .channel_state import STATES_KEY, ChannelState
from .written_files import delete_written, table_roots

log = logging.getLogger(__name__)
SIDE_TABLES = (TableKind.DELETE, TableKind.QUARANTINE)   # committed before insert_log, in this order


@dataclass(frozen=True)
class Watermarks:
    """A vchannel's ``txn`` in each of its tables, as this node last committed or read them."""

    insert: int | None = None
    delete: int | None = None
    quarantine: int | None = None

    def of(self, table: TableKind) -> int | None:
        return {TableKind.INSERT: self.insert, TableKind.DELETE: self.delete,
                TableKind.QUARANTINE: self.quarantine}[table]


@dataclass(frozen=True)
class VchannelSync:
    """One vchannel's share of a collection commit: everything read in
    ``[watermarks.insert, state.checkpoint_offset)``."""

    state: ChannelState
    watermarks: Watermarks
    files: tuple[FileEntry, ...]
    dropped_segments: frozenset[int] = frozenset()   # dropped by these batches: committed files are removed
    marks: tuple[FileMark, ...] = ()                 # deletion vectors of the rows its deletes remove

    @property
    def vchannel(self) -> str:
        return self.state.vchannel

    @property
    def end(self) -> int:
        return self.state.checkpoint_offset

    def table_files(self, table: TableKind) -> list[FileEntry]:
        return [f for f in self.files if f.table == table]


@dataclass
class SyncResult:
    committed: dict[str, Watermarks] = field(default_factory=dict)   # vchannel -> its new watermarks
    refused: dict[str, str] = field(default_factory=dict)            # vchannel -> why
    deferred: dict[str, str] = field(default_factory=dict)           # vchannel -> why it waits for the next cycle
    version: int | None = None                                       # insert_log version, if committed


def delete_files(storage: StorageLayout, root: str, files: list[FileEntry]) -> None:
    """Delete written files of the table at ``root`` (an insert binlog's bloom filter with it)."""
    for f in files:
        delete_written(storage, root, f)


def delete_paths(storage: StorageLayout, root: str, paths: list[str]) -> None:
    """Delete files of the table at ``root`` (paths relative to it); a missing one is no error."""
    fs, base = storage.filesystem(root)
    for path in paths:
        try:
            fs.delete_file(f"{base}/{path}")
        except FileNotFoundError:
            pass


def discard(storage: StorageLayout, collection_id: int, files: list[FileEntry]) -> None:
    """Delete uncommitted binlog files, each from its own table."""
    if not files:   # the common case: every cycle asks for each vchannel
        return
    roots = table_roots(storage, collection_id)
    for f in files:
        delete_written(storage, roots[f.table], f)


def add_actions(files: list[FileEntry]) -> list[AddFile]:
    """The ``add`` of each written file (its stats, and its key filter when that goes in the log)."""
    return [AddFile(path=f.path, size=f.size, stats=f.stats, pk_bloom=f.pk_bloom) for f in files]


def _moved(live: list[VchannelSync], e: TxnMoved, table: TableKind) -> dict[str, str]:
    def who(vchannel: str) -> str:
        return ("an earlier commit of this node, whose answer was lost, landed since: the vchannel reloads from it"
                if vchannel in e.own_late else "another writer owns the channel")
    return {s.vchannel: f"{s.vchannel}: the {table} table's txn is {e.moved[s.vchannel]}, this node last committed "
                        f"{s.watermarks.of(table)}: {who(s.vchannel)}"
            for s in live if s.vchannel in e.moved}


def _marked_gone(live: list[VchannelSync], e: FilesRemoved) -> dict[str, str]:
    """The syncs whose marks are on a file that a version landed since their commit began
    removed (a compaction whose answer was lost, landing late), with the reason: their marks
    must be made again against the files that replaced it."""
    gone = set(e.paths)
    out = {}
    for s in live:
        path = next((m.path for m in s.marks if m.path in gone), None)
        if path is not None:
            out[s.vchannel] = f"{path}, where its deletes were marked, was removed by a version that landed meanwhile"
    return out


def _stale_marks(insert_log: DeltaLog, syncs: list[VchannelSync]) -> dict[str, str]:
    """The syncs whose marks extend a deletion vector their committed file no longer has (a
    compaction rewrote the file after the marking read it), with the reason: they wait for the
    next cycle, which marks their deletes again. Checked before any commit, under the lock that
    keeps compactions out until this commit is done."""
    if not any(s.marks for s in syncs):
        return {}
    insert_log.refresh()
    current = insert_log.live_files()
    stale = {}
    for s in syncs:
        new = {f.path for f in s.table_files(TableKind.INSERT)}
        gone = next((m.path for m in s.marks if m.path not in new and (
            m.path not in current or current[m.path].deletion_vector != m.base)), None)
        if gone is not None:
            stale[s.vchannel] = f"{gone}, where its deletes were marked, was compacted meanwhile"
    return stale


def _marked(insert_log: DeltaLog, live: list[VchannelSync], new: dict[str, AddFile],
            removed: set[str]) -> dict[str, AddFile]:
    """The files ``live``'s marks give a new deletion vector, as their ``add`` (``new``: this
    commit's own files). Files this commit removes need none."""
    current = insert_log.live_files() if any(s.marks for s in live) else {}
    return {m.path: (new.get(m.path) or current[m.path]).with_deletion_vector(m.deletion_vector)
            for s in live for m in s.marks if m.path not in removed}


def _committed_segment_files(log: DeltaLog, segments: frozenset[int]) -> list[RemoveFile]:
    """The committed insert binlogs of ``segments`` (path ``{partition}/{segment}/...``), each
    with its deletion vector (a remove without it would leave the file live)."""
    if not segments:
        return []
    out = []
    for path, add in log.live_files().items():
        parts = path.split("/")
        if len(parts) >= 3 and parts[1].isdigit() and int(parts[1]) in segments:
            out.append(add.removal())
    return out


class CollectionCommitter:
    """The Delta logs of one collection's tables, and the commit of its vchannels' syncs.

    Runs on the driver; callers hold ``lock``. ``quarantine`` is the node's shared log of the
    quarantine table (committed to by one thread, the pipeline's loop).
    """

    def __init__(self, storage: StorageLayout, collection_id: int, insert_schema: pa.Schema,
                 delete_schema: pa.Schema, quarantine: QuarantineLog) -> None:
        self.storage, self.collection_id = storage, collection_id
        self.insert_schema, self.delete_schema = insert_schema, delete_schema
        self.quarantine = quarantine
        self._logs: dict[TableKind, DeltaLog] = {}
        self.lock = threading.Lock()   # held around every use: the loop commits, channel watchers load
        self._own_txns: dict[str, int | None] = {}   # vchannel -> insert txn this node last committed or loaded

    @property
    def insert_log_uri(self) -> str:
        return self.storage.insert_log(self.collection_id)

    def own_txn(self, vchannel: str) -> int | None:
        """The vchannel's insert_log txn as this node last committed it (or read it when it loaded
        the vchannel): a commit that must not follow another writer's expects it."""
        return self._own_txns.get(vchannel)

    def _log(self, table: TableKind) -> DeltaLog:
        found = self._logs.get(table)
        if found is None:
            uri, schema = {TableKind.INSERT: (self.storage.insert_log(self.collection_id), self.insert_schema),
                           TableKind.DELETE: (self.storage.delta_log(self.collection_id), self.delete_schema)}[table]
            found = self._logs[table] = DeltaLog(uri, schema, self.storage.options)
        return found

    def commit(self, syncs: list[VchannelSync], schema: TableSchema | None = None) -> SyncResult:
        """``schema``: the columns the syncs' files may have (the table is widened by those it lacks,
        in its insert_log commit: ``table_schema``)."""
        result = SyncResult()
        insert_log = self._log(TableKind.INSERT)
        result.deferred = _stale_marks(insert_log, syncs)
        live = [s for s in syncs if s.vchannel not in result.deferred]
        delete_txn = self._side_commit(TableKind.DELETE, self._log(TableKind.DELETE) if any(
            s.table_files(TableKind.DELETE) for s in live) else None, live, result)
        live = [s for s in live if s.vchannel not in result.refused]
        with self.quarantine.lock:
            quarantine_txn = self._side_commit(TableKind.QUARANTINE, self.quarantine.log() if any(
                s.table_files(TableKind.QUARANTINE) for s in live) else None, live, result)
        live = [s for s in live if s.vchannel not in result.refused]
        crash_point("after_side_commits")
        while live:
            dropped = frozenset().union(*(s.dropped_segments for s in live))
            adds = add_actions([f for s in live for f in s.table_files(TableKind.INSERT)
                                if f.segment_id not in dropped])
            removes = _committed_segment_files(insert_log, dropped)
            marked = _marked(insert_log, live, {a.path: a for a in adds}, {r.path for r in removes})
            committed = [path for path in marked if path not in {a.path for a in adds}]   # the others are new
            try:
                result.version = insert_log.commit(
                    adds=[marked.get(a.path, a) for a in adds] + [marked[path] for path in committed],
                    removes=removes + [insert_log.live_files()[path].removal() for path in committed],
                    txns={s.vchannel: s.end for s in live},
                    expected={s.vchannel: s.watermarks.insert for s in live},
                    info={STATES_KEY: json_codec.dumps({s.vchannel: s.state.to_doc() for s in live})},
                    schema=schema)
            except TxnMoved as e:
                live = self._refuse(live, _moved(live, e, TableKind.INSERT), result, SIDE_TABLES)
                continue
            except FilesRemoved as e:
                # The removes of dropped segments are listed again from the files live now. Marks
                # are made again next cycle (deferred), or by the vchannel's reload when its side
                # commits landed: the side tables hold its batches' deletes and quarantined rows
                # now, and their txns refuse a later sync of the same batches.
                gone = _marked_gone(live, e)
                landed = {v: why for v, why in gone.items() if v in delete_txn or v in quarantine_txn}
                result.deferred.update((v, why) for v, why in gone.items() if v not in landed)
                live = self._refuse(live, {v: f"{v}: {why}: the vchannel reloads" for v, why in landed.items()},
                                    result, SIDE_TABLES)
                live = [s for s in live if s.vchannel not in result.deferred]
                continue
            delete_files(self.storage, insert_log.uri, [f for s in live for f in s.table_files(TableKind.INSERT)
                                          if f.segment_id in dropped])
            discard(self.storage, self.collection_id,
                    [f for s in live for f in s.table_files(TableKind.REPLAYED_DELETES)])
            self._own_txns.update((s.vchannel, s.end) for s in live)
            for s in live:
                result.committed[s.vchannel] = Watermarks(
                    s.end, delete_txn.get(s.vchannel, s.watermarks.delete),
                    quarantine_txn.get(s.vchannel, s.watermarks.quarantine))
            break
        return result

    def _side_commit(self, table: TableKind, side: DeltaLog | None, live: list[VchannelSync],
                     result: SyncResult) -> dict[str, int]:
        """Commit ``table``'s files of ``live`` with a txn per vchannel that has some; returns those txns."""
        if side is None:
            return {}
        writers = [s for s in live if s.table_files(table)]
        while writers:
            try:
                side.commit(adds=add_actions([f for s in writers for f in s.table_files(table)]),
                            txns={s.vchannel: s.end for s in writers},
                            expected={s.vchannel: s.watermarks.of(table) for s in writers}, info={})
                return {s.vchannel: s.end for s in writers}
            except TxnMoved as e:
                writers = self._refuse(writers, _moved(writers, e, table), result,
                                       SIDE_TABLES[:SIDE_TABLES.index(table)])
        return {}

    def _refuse(self, live: list[VchannelSync], why: dict[str, str], result: SyncResult,
                committed: tuple[TableKind, ...] = ()) -> list[VchannelSync]:
        """Drop the vchannels ``why`` names from the commit, with its reasons; their files are
        deleted, but those of the ``committed`` tables (their side commits landed: a reload reads
        the batch again and skips them)."""
        for s in live:
            if s.vchannel in why:
                result.refused[s.vchannel] = why[s.vchannel]
                log.warning("%s", why[s.vchannel])
                discard(self.storage, self.collection_id, [f for f in s.files if f.table not in committed])
        return [s for s in live if s.vchannel not in why]

    def _existing(self, table: TableKind) -> DeltaLog | None:
        found = self._logs.get(table)
        if found is None:
            uri = self.storage.insert_log(self.collection_id) if table == TableKind.INSERT else \
                self.storage.delta_log(self.collection_id)
            found = DeltaLog.open(uri, self.storage.options)
            if found is not None:
                self._logs[table] = found
        return found

    def insert_log(self) -> DeltaLog | None:
        """The insert_log's log, brought up to date; None while the table does not exist."""
        found = self._existing(TableKind.INSERT)
        if found is not None:
            found.refresh()
        return found

    def recorded_schema(self) -> schema_pb2.CollectionSchema | None:
        """The Milvus schema the insert_log records (``table_schema``), None when it records none or
        there is no table."""
        found = self.insert_log()
        return recorded_schema(found.configuration()) if found is not None else None

    def created_insert_log(self) -> DeltaLog:
        """The insert_log's log, brought up to date; created now, empty, if the table does not
        exist (no txn: as if it did not exist)."""
        found = self.insert_log()
        return found if found is not None else self._log(TableKind.INSERT)

    def created_delete_log(self) -> DeltaLog:
        """The delta_log's log, brought up to date; created now, empty, if the table does not exist."""
        found = self._existing(TableKind.DELETE)
        if found is not None:
            found.refresh()
            return found
        return self._log(TableKind.DELETE)

    def watermarks(self, vchannel: str) -> Watermarks:
        """The vchannel's txn in each table now (other writers' commits included)."""
        txns = []
        for table in (TableKind.INSERT, TableKind.DELETE):
            found = self._existing(table)
            if found is not None:
                found.refresh()
            txns.append(found.txn(vchannel) if found is not None else None)
        self._own_txns[vchannel] = txns[0]
        return Watermarks(txns[0], txns[1], self.quarantine.txn(vchannel))


class QuarantineLog:
    """The node's one log of the shared quarantine table (opened, or created, on first use)."""

    def __init__(self, storage: StorageLayout) -> None:
        self.uri, self.options = storage.quarantine(), storage.options
        self._log: DeltaLog | None = None
        self.lock = threading.RLock()  # every collection's committer uses this one log

    def log(self) -> DeltaLog:
        """Callers hold ``lock``."""
        if self._log is None:
            self._log = DeltaLog(self.uri, QUARANTINE_SCHEMA, self.options)
        return self._log

    def txn(self, vchannel: str) -> int | None:
        """``vchannel``'s txn in the quarantine table now (None: it has none, or there is no table)."""
        table = self._log
        if table is None:
            # Looked for outside the lock: until the first quarantine, every load asks (a stat),
            # and the channel watch runs loads on many threads at once.
            found = DeltaLog.open(self.uri, self.options)
            if found is None:
                return None
            with self.lock:
                if self._log is None:
                    self._log = found
                table = self._log
        with self.lock:
            table.refresh()
            return table.txn(vchannel)
