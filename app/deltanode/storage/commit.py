"""The driver's commit of a collection's vchannels: binlogs, segment meta and checkpoints.

One sync of a collection carries, for each of its vchannels this node syncs, the batches
read since its last commit: their binlog files and the ChannelState after them. Order, and why:

1. the fence (the caller's: still the channel's owner in etcd) has passed;
2. delete binlogs -> delta_log and quarantine rows -> quarantine, each commit with
   ``txn(vchannel, end)`` for the vchannels that have some; a crash after this point
   replays the batches, and the replay skips deletes/quarantine below those tables' txn;
3. ONE commit to insert_log: the insert binlogs (``add``), the committed files of segments
   dropped by these batches (``remove``), ``txn(vchannel, end)`` and the new ChannelState of
   every synced vchannel in the commit metadata. Segment meta and checkpoint are therefore
   never apart, and a checkpoint never covers data that is not committed.

Every commit is a compare-and-swap on each vchannel's txn (``delta_log.DeltaLog.commit``):
it lands only if the txn is still the one this node last committed (or read at start). A
vchannel whose txn another writer moved is refused, alone: the others of the sync are
committed without it, and its files are deleted.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field

import pyarrow as pa

from ..faults import crash_point
from .binlog_writer import DELETE_TABLE, INSERT_TABLE, QUARANTINE_TABLE, FileEntry
from .channel_state import STATES_KEY, ChannelState
from .delta_log import AddFile, DeltaLog, RemoveFile, TxnMoved
from .layout import QUARANTINE_SCHEMA, StorageLayout
from .tables import open_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Watermarks:
    """A vchannel's ``txn`` in each of its tables, as this node last committed or read them."""

    insert: int | None = None
    delete: int | None = None
    quarantine: int | None = None

    def of(self, table: str) -> int | None:
        return {INSERT_TABLE: self.insert, DELETE_TABLE: self.delete, QUARANTINE_TABLE: self.quarantine}[table]


@dataclass(frozen=True)
class VchannelSync:
    """One vchannel's share of a collection commit: everything read in ``[watermarks.insert, state.checkpoint_offset)``."""

    state: ChannelState
    watermarks: Watermarks
    files: tuple[FileEntry, ...]
    dropped_segments: frozenset[int] = frozenset()   # dropped by these batches: committed files are removed

    @property
    def vchannel(self) -> str:
        return self.state.vchannel

    @property
    def end(self) -> int:
        return self.state.checkpoint_offset

    def table_files(self, table: str) -> list[FileEntry]:
        return [f for f in self.files if f.table == table]


@dataclass
class SyncResult:
    committed: dict[str, Watermarks] = field(default_factory=dict)   # vchannel -> its new watermarks
    refused: dict[str, str] = field(default_factory=dict)            # vchannel -> why
    version: int | None = None                                       # insert_log version, if committed


def delete_files(storage: StorageLayout, root: str, files: list[FileEntry]) -> None:
    delete_paths(storage, root, [f.path for f in files])


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
    roots = {INSERT_TABLE: storage.insert_log(collection_id), DELETE_TABLE: storage.delta_log(collection_id),
             QUARANTINE_TABLE: storage.quarantine()}
    for table, root in roots.items():
        delete_files(storage, root, [f for f in files if f.table == table])


def _adds(files: list[FileEntry]) -> list[AddFile]:
    return [AddFile(f.path, f.size, f.stats) for f in files]


def _committed_segment_files(log: DeltaLog, segments: frozenset[int]) -> list[RemoveFile]:
    """The committed insert binlogs of ``segments`` (path ``{partition}/{segment}/...``)."""
    if not segments:
        return []
    table = open_table(log.uri, log.storage_options)
    if table is None:
        return []
    actions = pa.table(table.get_add_actions(flatten=True))
    out = []
    for path, size in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()):
        parts = path.split("/")
        if len(parts) >= 3 and parts[1].isdigit() and int(parts[1]) in segments:
            out.append(RemoveFile(path, size))
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
        self._logs: dict[str, DeltaLog] = {}
        self.lock = threading.Lock()   # held around every use: the loop commits, channel watchers load
        self._own_txns: dict[str, int | None] = {}   # vchannel -> insert txn this node last committed or loaded

    @property
    def insert_log_uri(self) -> str:
        return self.storage.insert_log(self.collection_id)

    def own_txn(self, vchannel: str) -> int | None:
        """The vchannel's insert_log txn as this node last committed it (or read it when it loaded
        the vchannel): a commit that must not follow another writer's expects it."""
        return self._own_txns.get(vchannel)

    def _log(self, table: str) -> DeltaLog:
        found = self._logs.get(table)
        if found is None:
            uri, schema = {INSERT_TABLE: (self.storage.insert_log(self.collection_id), self.insert_schema),
                           DELETE_TABLE: (self.storage.delta_log(self.collection_id), self.delete_schema)}[table]
            found = self._logs[table] = DeltaLog(uri, schema, self.storage.options)
        return found

    def commit(self, syncs: list[VchannelSync]) -> SyncResult:
        result = SyncResult()
        live = list(syncs)
        delete_txn = self._side_commit(DELETE_TABLE, self._log(DELETE_TABLE) if any(
            s.table_files(DELETE_TABLE) for s in live) else None, live, result)
        live = [s for s in live if s.vchannel not in result.refused]
        with self.quarantine.lock:
            quarantine_txn = self._side_commit(QUARANTINE_TABLE, self.quarantine.log() if any(
                s.table_files(QUARANTINE_TABLE) for s in live) else None, live, result)
        live = [s for s in live if s.vchannel not in result.refused]
        crash_point("after_side_commits")
        insert_log = self._log(INSERT_TABLE)
        while live:
            dropped = frozenset().union(*(s.dropped_segments for s in live))
            adds = [f for s in live for f in s.table_files(INSERT_TABLE) if f.segment_id not in dropped]
            try:
                result.version = insert_log.commit(
                    adds=_adds(adds), removes=_committed_segment_files(insert_log, dropped),
                    txns={s.vchannel: s.end for s in live},
                    expected={s.vchannel: s.watermarks.insert for s in live},
                    info={STATES_KEY: json.dumps({s.vchannel: s.state.to_doc() for s in live},
                                                 separators=(",", ":"))})
            except TxnMoved as e:
                live = self._refuse(live, e, INSERT_TABLE, result)
                continue
            delete_files(self.storage, insert_log.uri, [f for s in live for f in s.table_files(INSERT_TABLE)
                                          if f.segment_id in dropped])
            self._own_txns.update((s.vchannel, s.end) for s in live)
            for s in live:
                result.committed[s.vchannel] = Watermarks(
                    s.end, delete_txn.get(s.vchannel, s.watermarks.delete),
                    quarantine_txn.get(s.vchannel, s.watermarks.quarantine))
            break
        return result

    def _side_commit(self, table: str, side: DeltaLog | None, live: list[VchannelSync],
                     result: SyncResult) -> dict[str, int]:
        """Commit ``table``'s files of ``live`` with a txn per vchannel that has some; returns those txns."""
        if side is None:
            return {}
        writers = [s for s in live if s.table_files(table)]
        while writers:
            try:
                side.commit(adds=_adds([f for s in writers for f in s.table_files(table)]),
                            txns={s.vchannel: s.end for s in writers},
                            expected={s.vchannel: s.watermarks.of(table) for s in writers}, info={})
                return {s.vchannel: s.end for s in writers}
            except TxnMoved as e:
                writers = self._refuse(writers, e, table, result)
        return {}

    def _refuse(self, live: list[VchannelSync], e: TxnMoved, table: str, result: SyncResult) -> list[VchannelSync]:
        for s in live:
            if s.vchannel in e.moved:
                result.refused[s.vchannel] = (f"{s.vchannel}: the {table} table's txn is {e.moved[s.vchannel]}, this "
                                              f"node last committed {s.watermarks.of(table)}: another writer owns "
                                              f"the channel")
                log.warning("%s", result.refused[s.vchannel])
                discard(self.storage, self.collection_id, list(s.files))
        return [s for s in live if s.vchannel not in e.moved]

    def _existing(self, table: str) -> DeltaLog | None:
        found = self._logs.get(table)
        if found is None:
            uri = self.storage.insert_log(self.collection_id) if table == INSERT_TABLE else \
                self.storage.delta_log(self.collection_id)
            found = DeltaLog.open(uri, self.storage.options)
            if found is not None:
                self._logs[table] = found
        return found

    def insert_log(self) -> DeltaLog | None:
        """The insert_log's log, brought up to date; None while the table does not exist."""
        found = self._existing(INSERT_TABLE)
        if found is not None:
            found.refresh()
        return found

    def watermarks(self, vchannel: str) -> Watermarks:
        """The vchannel's txn in each table now (other writers' commits included)."""
        txns = []
        for table in (INSERT_TABLE, DELETE_TABLE):
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
        with self.lock:
            if self._log is None:
                self._log = DeltaLog.open(self.uri, self.options)
                if self._log is None:
                    return None
            self._log.refresh()
            return self._log.txn(vchannel)
