"""DeltaNode's own writer of Delta commits: one JSON file per version, put if absent.

Why not delta-rs's ``create_write_transaction``: each call loads the table's snapshot to check
for conflicts, and the table object must then be refreshed before the next commit, about
16 ms of CPU per commit with checkpoints every 100 versions and growing with the log between
them (docs/delta-commits.md). A DataNode with hundreds of collections commits hundreds of
times per second; writing the commit file itself costs 0.15 ms.

The protocol is Delta's: version ``n`` of a table is the file ``_delta_log/{n:020}.json``
holding one action per line (``commitInfo``, ``txn``, ``add``, ``remove``), and a commit
succeeds only if it creates that file (put if absent: ``link(2)`` on a filesystem, which fails
when the name exists; on S3 a PUT with ``If-None-Match: *``, which the store refuses with 412
when the object exists). A writer that loses the race reads the winning versions, and retries at
the next version unless one of them moved a ``txn`` it depends on: that is the
compare-and-swap on a vchannel's commit stream. A table is created the same way, its version
0 being delta-rs's own (``tables.version_zero``); delta-rs writes checkpoints (every
``CHECKPOINT_INTERVAL`` versions, off the commit path) and reads everything; Spark and delta-rs
readers see ordinary Delta tables.

A put's answer is not the truth about it. S3 can store an object and still fail the request (a 500
after the write, a reset, a timeout), and botocore then retries a conditional PUT that landed and
gets 412 for the writer's own version. So a refused or failed put is settled by reading the version
back: every commit carries a ``txnId`` of its own in ``commitInfo`` (as Spark's do), and a version
whose bytes are the ones this commit sent is this commit. Only a version that holds another
commit's bytes means another writer won; a version still absent after an error is put again, the
same bytes at the same version, so an earlier attempt that lands late is found, never doubled. When
the store keeps failing, :class:`CommitInDoubt` says that the commit may or may not have landed:
the caller keeps every file it wrote, and the next refresh reads the version if it did. A put the
store refused before writing anything of it (a full filesystem: :class:`NotLanded`) is no doubt:
the commit raises at once.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from deltalake import DeltaTable

from ..failure.errors import DeltaNodeError
from . import checkpoints, durable, json_codec, table_schema
from .actions import AddFile, RemoveFile
from .log_replay import apply_actions, live_adds
from .object_store import (
    LOCAL,
    StoreOptions,
    bucket_and_key,
    delta_storage_options,
    filesystem,
    is_object_store,
)
from .table_schema import TableSchema
from .tables import open_table, version_zero

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
CHECKPOINT_INTERVAL = 100   # Delta's default delta.checkpointInterval
# Remove actions are tracked for rewrite checks over the last REMOVES_VERSIONS versions only (a
# compaction checks its inputs at the newest version it knows, under the committer's lock, and
# commits right after; an older read is refused as if its files were gone).
REMOVES_VERSIONS = 1_000
ENGINE = "deltanode"
# Waits before each attempt to put a version whose earlier attempt failed: botocore has already
# retried each attempt's request; these cover a store that fails for a second or so.
PUT_ATTEMPT_DELAYS = (0.0, 0.2, 1.0)
# Wait before putting a version again whose put was refused while nothing is there yet: another put
# of it is in flight (S3's 409), often this commit's own earlier attempt, which settles in a moment.
IN_FLIGHT_WAIT = 0.1
DELETION_VECTORS = "deletionVectors"


class TxnMoved(DeltaNodeError):
    """Another writer moved the ``txn`` of some app ids this commit depends on (``moved``: their
    txn now); ``own_late``: those of them whose txn an earlier commit of this object moved, one
    left in doubt that landed after all (``DeltaLog.own_late``)."""

    def __init__(self, moved: dict[str, int | None], own_late: frozenset[str] = frozenset()) -> None:
        others = {app: v for app, v in moved.items() if app not in own_late}
        own = {app: v for app, v in moved.items() if app in own_late}
        super().__init__("txn moved by " + "; by ".join(
            f"{who}: {part}" for who, part in (("another writer", others), ("an earlier commit of this node", own))
            if part))
        self.moved, self.own_late = moved, own_late


class CommitInDoubt(DeltaNodeError):
    """The store failed every attempt to put a version and to read it back: the commit may have
    landed or not. Files the commit names must be kept; a later ``refresh`` reads the version if it
    landed (its ``txnId`` is in ``DeltaLog.doubtful``)."""

    def __init__(self, uri: str, version: int, txn_id: str, cause: BaseException) -> None:
        super().__init__(f"{uri}: version {version} may or may not have landed (the store's last answer: "
                         f"{type(cause).__name__}: {cause})")
        self.version, self.txn_id = version, txn_id


class FilesRemoved(DeltaNodeError):
    """A commit that removes or rewrites files found some of them removed by a version it did not
    know when it began (or since its ``ReadFiles``): Delta's concurrent-delete conflict. Nothing was
    committed."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(f"{len(paths)} of the files it removes were removed meanwhile, e.g. {paths[0]}")
        self.paths = paths


class NotLanded(DeltaNodeError):
    """The store refused a put before it wrote anything of it (the cause: the store's error, e.g.
    a full filesystem's ``ENOSPC``): the version is certainly not this put's. Raised by a log
    store; a commit raises it at once, without reading the version back or trying again."""


class NotDurable(DeltaNodeError):
    """A put's version is in the log but making its name durable failed (the cause: the failed
    directory fsync): a power cut may take it away. The commit raises it; its ``txnId`` is in
    ``DeltaLog.doubtful``, so a ``refresh`` that reads the version knows it as this node's own."""


@dataclass(frozen=True)
class ReadFiles:
    """Files a commit read at ``version`` and rewrites: it lands only while none of them was
    removed by a later version."""

    version: int
    paths: frozenset[str]


def _version_name(version: int) -> str:
    return f"{version:020d}.json"


def _txn_id() -> str:
    """A commit's own id in its ``commitInfo``: what tells it apart when read back."""
    return f"{_TMP_PREFIX}-{os.getpid()}-{next(_TMP_SEQUENCE)}"


class LogStore(Protocol):
    """A table's ``_delta_log`` directory, as ``DeltaLog`` uses it; ``name``: a file in it."""

    def get(self, name: str) -> bytes | None:
        """The file's content, None when it does not exist."""

    def put_if_absent(self, name: str, data: bytes) -> bool:
        """Create the file holding ``data``; False, and nothing written, when it exists. Raises
        :class:`NotLanded` when it certainly wrote nothing, :class:`NotDurable` when the file is
        there but not durable; any other error: the file may be there or not."""

    def make_durable(self) -> None:
        """Make the names in the log durable (a put that found its version there after an unsure
        answer counts on it); raises :class:`NotDurable` when it cannot."""

    def surely_empty(self) -> bool:
        """True only when the directory certainly holds no version (then there is no table)."""


class DeltaLog:
    """One table's commit stream, as this process has seen it.

    ``version`` is the newest version this object knows; txns of commits after the snapshot it
    opened are tracked here, so ``txn`` is exact at ``version`` without reloading the table.
    Runs on the driver; not thread-safe (the committer owns it).
    """

    def __init__(self, uri: str, schema: pa.Schema | None = None, options: StoreOptions = LOCAL, *,
                 from_start: bool = False) -> None:
        """Opens the table (delta-rs) at its newest version, creating it from ``schema`` when it
        has none; ``from_start``: at no version instead (``follow``)."""
        self.uri, self.options = uri, options
        fs, base = filesystem(uri, options)
        self.dir = f"{base}/{LOG_DIR}"
        self._store: LogStore = _ObjectStoreLog(uri, fs, options) if is_object_store(uri) \
            else _LocalLog(self.dir, options.fsync)
        self.storage_options = delta_storage_options(uri, options)
        self._snapshot: DeltaTable | None = None
        self._txns: dict[str, int] = {}
        # The table's ``metaData`` action at ``version`` once known (a version that carries one, or
        # the table's creation by this object); until then it is the snapshot's (``metadata``).
        self._meta: dict | None = None
        self._columns: frozenset[str] | None = None   # the names of its schema's columns, once asked
        # Whether ``_txns`` holds every txn of the table at ``version`` (it does when this object
        # created the table, or reads it from its version 0: it saw every version since); else
        # txn() asks a delta-rs snapshot.
        self._txns_known = from_start or (schema is not None and self._create(schema))
        if from_start:
            self._snapshot_version, protocol_dvs = -1, False
        elif self._txns_known:
            self._snapshot_version, protocol_dvs = 0, False
        else:
            # delta-rs takes about a millisecond to find that a table does not exist, and a new
            # collection's load and hand-over ask for three that do not yet (delete_log, quarantine,
            # insert_log at the coordinator's first look): thousands of new vchannels would spend
            # seconds of the driver on tables that are not there.
            table = None if self._store.surely_empty() else open_table(uri, self.storage_options)
            if table is None:
                raise FileNotFoundError(f"no Delta table at {uri}")
            self._snapshot, self._snapshot_version = table, table.version()
            protocol_dvs = DELETION_VECTORS in (table.protocol().reader_features or ())
        self.version = self._snapshot_version
        # Remove actions of the versions after ``_removes_floor`` (path -> version), for ReadFiles
        # checks; ``_removed`` holds them by version, oldest first, to forget them in order.
        self._removes: dict[str, int] = {}
        self._removed: deque[tuple[int, list[str]]] = deque()
        self._removes_floor = self._snapshot_version
        self._fs, self._base = fs, base
        self._live: dict[str, AddFile] | None = None   # the live files, once asked for (``live_files``)
        self._deletion_vectors = protocol_dvs
        # The txnIds of this object's commits that raised after a put that may still land, by the
        # version it aimed at (an entry goes once that version is read or committed), and the app
        # ids whose txn at ``version`` is set by one of them that landed after all, with its version:
        # a txn moved there is this object's own doing.
        self.doubtful: dict[int, set[str]] = {}
        self.own_late: dict[str, int] = {}

    def _create(self, schema: pa.Schema) -> bool:
        """Create the table (its version 0) if it has none; False when it exists (another
        writer may have created it just now)."""
        if self._store.get(_version_name(0)) is not None:
            return False
        data = version_zero(schema)
        if not self._store.put_if_absent(_version_name(0), data):
            return False
        self._set_meta(next(a["metaData"] for a in json_codec.read_lines(data) if "metaData" in a))
        return True

    def metadata(self) -> dict | None:
        """The table's ``metaData`` action at ``self.version`` (None: the table has no version yet).
        Do not change it."""
        if self._meta is None and self._snapshot_version >= 0:
            table = self._snapshot if self._snapshot is not None and \
                self._snapshot.version() == self._snapshot_version else \
                DeltaTable(self.uri, version=self._snapshot_version, storage_options=self.storage_options)
            meta = table.metadata()
            self._set_meta({"id": meta.id, "name": meta.name, "description": meta.description,
                            "format": {"provider": "parquet", "options": {}},
                            "schemaString": table.schema().to_json(),
                            "partitionColumns": list(meta.partition_columns), "createdTime": meta.created_time,
                            "configuration": dict(meta.configuration)})
        return self._meta

    def configuration(self) -> dict[str, str]:
        """The table's configuration at ``self.version`` (``metaData.configuration``)."""
        meta = self.metadata()
        return dict((meta or {}).get("configuration") or {})

    def _set_meta(self, meta: dict) -> None:
        self._meta, self._columns = meta, None

    def _lacks(self, schema: TableSchema) -> bool:
        """Whether the table's schema at ``self.version`` lacks a column of ``schema``."""
        if self._columns is None:
            meta = self.metadata()
            if meta is None:
                return False
            self._columns = frozenset(f["name"] for f in json_codec.loads(meta["schemaString"])["fields"])
        return not self._columns.issuperset(schema.columns.names)

    @classmethod
    def open(cls, uri: str, options: StoreOptions = LOCAL) -> DeltaLog | None:
        """The log of an existing table, None when there is no table at ``uri``."""
        try:
            return cls(uri, options=options)
        except FileNotFoundError:
            return None

    @classmethod
    def follow(cls, uri: str, options: StoreOptions = LOCAL) -> DeltaLog:
        """The log of a table that may not exist yet, at no version: each ``refresh()`` reads the
        versions committed since, from version 0, as JSON (never a delta-rs snapshot). For a
        reader that saw the table before its first commit: opening thousands of young tables with
        delta-rs as they appear would take a large share of a loaded standalone driver."""
        return cls(uri, options=options, from_start=True)

    def txn(self, app_id: str) -> int | None:
        """The ``txn`` version of ``app_id`` at ``self.version``."""
        if app_id in self._txns or self._txns_known:
            return self._txns.get(app_id)
        if self._snapshot is None:
            self._snapshot = DeltaTable(self.uri, version=self._snapshot_version, storage_options=self.storage_options)
        return self._snapshot.transaction_version(app_id)

    def refresh(self) -> list[dict]:
        """Read the versions other writers committed since ``self.version``; returns their commitInfos."""
        return [info for _, info in self._read_new()]

    def _read_new(self) -> list[tuple[int, dict]]:
        """Read and apply the versions after ``self.version``: ``(version, commitInfo)`` of each."""
        infos: list[tuple[int, dict]] = []
        while True:
            lines = self._read(self.version + 1)
            if lines is None:
                return infos
            self.version += 1
            info = next((line["commitInfo"] for line in lines if "commitInfo" in line), None)
            own_late = self._settle(self.version, info.get("txnId") if info is not None else None)
            if own_late:
                log.info("%s: version %d is a commit of this node whose answer was lost: it landed",
                         self.uri, self.version)
            self._apply(lines, self.version, own_late)
            if info is not None:
                infos.append((self.version, info))

    def _settle(self, version: int, txn_id: str | None) -> bool:
        """``version`` holds the commit ``txn_id``: whether it is one of this object's doubtful
        commits; no other doubtful commit can land there any more."""
        doubted = self.doubtful.pop(version, None)
        return doubted is not None and txn_id in doubted

    def live_files(self) -> dict[str, AddFile]:
        """The table's live files at ``self.version``, by path: read from the log once, then kept
        up to date by every version this object commits or reads. Do not change the mapping."""
        if self._live is None:
            self._live = live_adds(self._fs, self._base, self.version)
        return self._live

    def _apply(self, lines: list[dict], version: int, own_late: bool = False) -> None:
        if self._live is not None:
            apply_actions(self._live, lines)
        for action in lines:
            meta = action.get("metaData")
            if meta is not None:
                self._set_meta(meta)
            protocol = action.get("protocol")
            if protocol is not None:
                self._deletion_vectors = DELETION_VECTORS in protocol.get("readerFeatures", ())
            txn = action.get("txn")
            if txn is not None:
                self._txns[txn["appId"]] = int(txn["version"])
                if own_late:
                    self.own_late[txn["appId"]] = version
                else:
                    self.own_late.pop(txn["appId"], None)
        self._track_removes(version, [a["remove"]["path"] for a in lines if "remove" in a])

    def _track_removes(self, version: int, paths: list[str]) -> None:
        if paths:
            self._removed.append((version, paths))
            self._removes.update((p, version) for p in paths)
        while self._removed and self._removed[0][0] <= version - REMOVES_VERSIONS:
            old, gone = self._removed.popleft()
            for p in gone:
                if self._removes.get(p) == old:
                    del self._removes[p]
        self._removes_floor = max(self._removes_floor, version - REMOVES_VERSIONS)

    def removed_since(self, read: ReadFiles) -> list[str]:
        """The paths of ``read`` removed by a version after ``read.version`` (all of them when
        those versions are no longer tracked). Call after ``refresh``."""
        if read.version < self._removes_floor:
            return sorted(read.paths)
        return sorted(p for p in read.paths if self._removes.get(p, -1) > read.version)

    def _read(self, version: int) -> list[dict] | None:
        data = self._store.get(_version_name(version))
        return None if data is None else json_codec.read_lines(data)

    def _metadata_actions(self, enable_dvs: bool, schema: TableSchema | None) -> list[dict]:
        """The ``protocol`` and ``metaData`` actions a commit carries, if any (one ``metaData`` at most).

        ``enable_dvs``: let the table's files carry deletion vectors (reader 3 / writer 7, feature
        ``deletionVectors``; writer version 2's features listed as Spark lists them), once: tables
        are created without, so that readers that cannot apply DVs still read tables that never had
        a delete. ``schema``: the columns the commit's files may have; when the table lacks some,
        its schema is widened by them and its configuration records the Milvus schema
        (``table_schema``)."""
        widen = schema is not None and self._lacks(schema)
        if not enable_dvs and not widen:
            return []
        current = self.metadata()
        assert current is not None   # a table with a version: a commit follows one
        meta = {**current, "configuration": dict(current.get("configuration") or {})}
        actions: list[dict] = []
        if enable_dvs:
            actions.append({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                         "readerFeatures": [DELETION_VECTORS],
                                         "writerFeatures": ["appendOnly", "invariants", DELETION_VECTORS]}})
            meta["configuration"]["delta.enableDeletionVectors"] = "true"
        if widen:
            assert schema is not None
            meta["schemaString"] = table_schema.widened(meta["schemaString"], schema.columns) or meta["schemaString"]
            meta["configuration"].update(schema.configuration())
        actions.append({"metaData": meta})
        return actions

    def commit(self, *, adds: Sequence[AddFile] = (), removes: Sequence[RemoveFile] = (), txns: dict[str, int],
               expected: dict[str, int | None], info: dict[str, str], rewrites: ReadFiles | None = None,
               schema: TableSchema | None = None) -> int:
        """Append one version: the files, ``txn(app, version)`` for each of ``txns`` and ``info`` in
        ``commitInfo``; only if every app id of ``expected`` still has that txn, and no version
        this object did not know when the call began removed a file of ``removes`` (they are files
        live at ``self.version``). Returns the version.

        ``rewrites``: the commit only rearranges data (compaction: ``dataChange = false``, Delta's
        OPTIMIZE) and lands only while none of those files was removed by a version after
        ``rewrites.version``. ``schema``: the columns its files may have; a table that lacks some is
        widened by them in the same version (``table_schema``).
        Raises :class:`TxnMoved` or :class:`FilesRemoved` (nothing committed), :class:`NotLanded`
        (the store wrote nothing), or :class:`CommitInDoubt` or another error of the store (it may
        have landed: its txnId is then in ``doubtful``).
        """
        now = int(time.time() * 1000)
        change = rewrites is None
        operation = {"operation": "WRITE", "operationParameters": {"mode": "Append"}} if change else \
            {"operation": "OPTIMIZE", "operationParameters": {}, "isBlindAppend": False}
        txn_id = _txn_id()
        lines = [{"commitInfo": {"timestamp": now, **operation, "engineInfo": ENGINE, "txnId": txn_id, **info}}]
        lines += [{"txn": {"appId": app, "version": v, "lastUpdated": now}} for app, v in txns.items()]
        lines += [f.to_action(now, change) for f in adds]
        lines += [f.to_action(now, change) for f in removes]
        with_dvs = any(f.deletion_vector is not None for f in adds)
        reads = [r for r in (ReadFiles(self.version, frozenset(f.path for f in removes)), rewrites)
                 if r is not None and r.paths]
        # Versions where an attempt of this commit may still land (its answer lost, or another put of
        # the version in flight): if the commit raises, its txnId is doubtful there.
        uncertain: set[int] = set()
        try:
            while True:
                upgrade = self._metadata_actions(with_dvs and not self._deletion_vectors, schema)
                data = json_codec.write_lines(upgrade + lines)
                moved = {app: self.txn(app) for app, want in expected.items() if self.txn(app) != want}
                if moved:
                    raise TxnMoved(moved, frozenset(app for app in moved if app in self.own_late))
                gone = sorted({p for read in reads for p in self.removed_since(read)})
                if gone:
                    raise FilesRemoved(gone)
                version = self.version + 1
                if self._put(version, data, txn_id, uncertain):
                    self.version = version
                    self._settle(version, txn_id)
                    self._deletion_vectors = self._deletion_vectors or with_dvs
                    for action in upgrade:
                        if "metaData" in action:
                            self._set_meta(action["metaData"])
                    if self._live is not None:
                        apply_actions(self._live, lines)
                    self._txns.update(txns)
                    for app in txns:
                        self.own_late.pop(app, None)
                    self._track_removes(version, [f.path for f in removes])
                    self._checkpoint_due(version)
                    return version
                # Another commit holds the version, or a put of it is in flight (409): read what
                # landed. One of this commit's own earlier attempts may be among it (its answer lost).
                mine = next((v for v, info in self._read_new() if info.get("txnId") == txn_id), None)
                if mine is not None:
                    self._checkpoint_due(mine)
                    return mine
        except BaseException:
            for version in uncertain:
                if version > self.version:   # not read yet: it may still turn out to be this commit
                    self.doubtful.setdefault(version, set()).add(txn_id)
            raise

    def _checkpoint_due(self, version: int) -> None:
        if version % CHECKPOINT_INTERVAL == 0:
            CHECKPOINTS.request(self.uri, self.storage_options)

    def _put(self, version: int, data: bytes, txn_id: str, uncertain: set[int]) -> bool:
        """Put ``data`` as ``version``, settled by reading the version back: True when it holds
        ``data`` (this commit, whatever the put answered; its name durable), False when it holds
        another commit or is absent after a refusal (a concurrent put of it in flight). Adds
        ``version`` to ``uncertain`` while an attempt of it may still land there. Raises
        :class:`NotLanded` at once when the store wrote nothing and no earlier attempt may land,
        :class:`NotDurable` at once, and :class:`CommitInDoubt` when the store fails every
        attempt."""
        name = _version_name(version)
        failure: BaseException | None = None
        for delay in PUT_ATTEMPT_DELAYS:
            if delay:
                time.sleep(delay)
            try:
                if self._store.put_if_absent(name, data):
                    return True
                refused = True
            except NotLanded as e:
                if version in uncertain:   # an earlier attempt's answer was lost: it may land yet
                    raise CommitInDoubt(self.uri, version, txn_id, e) from e
                raise
            except NotDurable:
                uncertain.add(version)
                raise
            except Exception as e:  # noqa: BLE001 - whatever the error, the put may have landed
                failure, refused = e, False
                log.warning("%s: putting version %d failed, reading it back: %s: %s", self.uri, version,
                            type(e).__name__, e)
            uncertain.add(version)
            try:
                found = self._store.get(name)
            except Exception as e:  # noqa: BLE001 - the store is failing: try again
                failure = e
                continue
            if found == data:
                log.info("%s: version %d holds this commit: the store's answer to its put was lost",
                         self.uri, version)
                self._store.make_durable()
                return True
            if found is not None:   # another commit's: no attempt of this one can land there
                uncertain.discard(version)
                return False
            if refused:
                time.sleep(IN_FLIGHT_WAIT)
                return False
        assert failure is not None
        raise CommitInDoubt(self.uri, version, txn_id, failure)

    def commit_infos(self) -> Iterator[tuple[int, dict]]:
        """``(version, commitInfo)`` from the newest version this object knows down to 0."""
        for version in range(self.version, -1, -1):
            lines = self._read(version)
            if lines is None:
                return  # cleaned up (DeltaNode's tables keep their log; see layout.TABLE_CONFIG)
            info = next((line["commitInfo"] for line in lines if "commitInfo" in line), None)
            if info is not None:
                yield version, info


# Temporary names unique to this process (its pid: a forked child shares the prefix) and call: a
# counter costs nothing, where a uuid4 per commit shows in a loaded driver's profile.
_TMP_PREFIX = uuid.uuid4().hex
_TMP_SEQUENCE = itertools.count()


class _LocalLog:
    """A table's ``_delta_log`` on a filesystem: a put writes a temporary file beside the target
    and ``link(2)``s it to the target's name, which fails when that name exists.

    ``sync`` (``storage.fsync``): a put returns only once the version survives a power cut: the
    temporary file's data fsynced before the link (a version's name never stands for data a cut
    could lose), and the directory fsynced after it and the temporary name's removal (one fsync
    for both names). The log directory and its parents are made durable once per process
    (``durable.make_dirs``), a table's version 0 included. A failure before the link wrote no
    version (:class:`NotLanded`); a failed directory fsync after it is :class:`NotDurable`. Runs on
    the driver.
    """

    def __init__(self, log_dir: str, sync: bool = True) -> None:
        self.dir, self.sync = log_dir, sync

    def get(self, name: str) -> bytes | None:
        try:
            with open(os.path.join(self.dir, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def surely_empty(self) -> bool:
        return not os.path.isdir(self.dir)

    def put_if_absent(self, name: str, data: bytes) -> bool:
        tmp = os.path.join(self.dir, f".tmp-{_TMP_PREFIX}-{os.getpid()}-{next(_TMP_SEQUENCE)}.json")
        try:
            self._write(tmp, data)
        except OSError as e:   # e.g. no space for the whole version: nothing of it is in the log
            raise NotLanded(f"{self.dir}/{name}: {e}") from e
        try:
            os.link(tmp, os.path.join(self.dir, name))
        except FileExistsError:
            os.unlink(tmp)
            return False
        except OSError as e:
            _unlink_quietly(tmp)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):   # no room for the name: link(2) made none
                raise NotLanded(f"{self.dir}/{name}: {e}") from e
            raise   # e.g. an NFS call whose answer was lost: the name may be there
        os.unlink(tmp)
        self.make_durable()
        return True

    def _write(self, tmp: str, data: bytes) -> None:
        """The version's bytes in the temporary file ``tmp`` (its data durable with ``sync``)."""
        if self.sync:
            durable.make_dirs(self.dir, sync=True)
        try:
            f = open(tmp, "wb")
        except FileNotFoundError:   # the table's first version: no log directory yet
            durable.make_dirs(self.dir, sync=self.sync, again=True)
            f = open(tmp, "wb")
        try:
            with f:
                f.write(data)
                if self.sync:
                    f.flush()
                    os.fsync(f.fileno())
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def make_durable(self) -> None:
        # A failed fsync is an answer, never tried again: Linux reports a writeback error once, and
        # a second fsync may succeed although the names were never written. So a put whose fsync
        # failed raises NotDurable, where a read-back would find its version and count it done.
        if self.sync:
            try:
                durable.sync_dir(self.dir)
            except OSError as e:
                raise NotDurable(f"{self.dir}: making its names durable failed: {e}") from e


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass   # a temporary name left in the log is no version: readers pass over it


class _ObjectStoreLog:
    """A table's ``_delta_log`` on S3: reads through pyarrow, puts through boto3 with
    ``If-None-Match: *`` (pyarrow has no conditional write). Driver only."""

    _clients: dict[StoreOptions, object] = {}

    def __init__(self, uri: str, fs, options: StoreOptions) -> None:
        self.fs, self.options = fs, options
        self.bucket, prefix = bucket_and_key(uri)
        self.prefix = f"{prefix.rstrip('/')}/{LOG_DIR}"

    def _client(self):
        found = self._clients.get(self.options)
        if found is None:
            found = self._clients[self.options] = self.options.boto3()
        return found

    def get(self, name: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(f"{self.bucket}/{self.prefix}/{name}") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def surely_empty(self) -> bool:
        return False   # a listing costs what delta-rs's own look costs: let it look

    def make_durable(self) -> None:
        pass   # a stored object is durable

    def put_if_absent(self, name: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError
        try:
            self._client().put_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            # 412: the version exists, another writer won it. 409: a concurrent conditional PUT of the
            # same key was in flight; the caller refreshes and asks again (at the next version if it won).
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (409, 412):
                return False
            raise


class _Checkpointer:
    """Writes Delta checkpoints with delta-rs on a background thread, so readers replay at most
    ``CHECKPOINT_INTERVAL`` JSON versions, and commits never wait for it. On a filesystem they are
    published durably (``checkpoints``): a torn one would leave the table unreadable. Runs on the
    driver."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, dict[str, str] | None]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def request(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="delta-checkpoints", daemon=True)
                self._thread.start()
        self._queue.put((uri, storage_options))

    def _run(self) -> None:
        while True:
            uri, storage_options = self._queue.get()
            try:
                if is_object_store(uri):
                    DeltaTable(uri, storage_options=storage_options).create_checkpoint()
                else:
                    checkpoints.write_checkpoint(uri.removeprefix("file://"))
            except Exception as e:  # noqa: BLE001 - a missed checkpoint only slows readers
                log.warning("checkpoint of %s failed: %s", uri, e)


CHECKPOINTS = _Checkpointer()
