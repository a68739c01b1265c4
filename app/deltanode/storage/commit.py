"""The driver's commit of one batch of a vchannel: binlogs, segment meta and checkpoint.

Order, and why:

1. the fence (still the channel's owner in etcd, lease alive), else refuse;
2. the insert_log ``txn`` of the vchannel must equal the batch's start offset: any other
   value means another writer moved the channel (refuse), or, if it already covers the
   batch's end, that this batch was committed by an earlier attempt (drop our files);
3. delete binlogs -> delta_log and quarantine rows -> quarantine, each with
   ``txn(vchannel, end)``; a crash after this point replays the batch, and the replay skips
   deletes/quarantine below those tables' txn (see ``flowgraph.route``);
4. ONE commit to insert_log: the insert binlogs (``add``), files of segments dropped in this
   batch (``remove``), ``txn(vchannel, end)`` and the new ChannelState in the commit
   metadata. Segment meta and checkpoint are therefore never apart, and the checkpoint
   never covers data that is not committed.

delta-rs does not make ``txn`` idempotent (platform-facts.md), hence the explicit check in
step 2; two writers racing from one snapshot get "Concurrent transaction failed" from
delta-rs, which is the compare-and-swap.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from ..faults import crash_point
from .binlog_writer import (
    DELETE_TABLE,
    INSERT_TABLE,
    QUARANTINE_TABLE,
    FileEntry,
    TaskResult,
)
from .channel_state import METADATA_KEY, ChannelState
from .layout import QUARANTINE_SCHEMA, StorageLayout, filesystem
from .state_update import BatchOutcome, advance, retract_after_drops
from .tables import open_or_create

log = logging.getLogger(__name__)
VCHANNEL_KEY = "deltanode.vchannel"


class CommitRefused(RuntimeError):
    """This flowgraph may not commit: the channel moved on without it. It must stop."""


@dataclass
class CommitResult:
    outcome: BatchOutcome
    committed: bool       # False when nothing was committed (coalesced, or committed before)
    seconds: float
    version: int | None = None
    coalesced: ChannelState | None = None   # the state to keep when an idle batch was coalesced

    @property
    def state(self) -> ChannelState:
        return self.coalesced if self.coalesced is not None else self.outcome.state


def _now_ms() -> int:
    return int(time.time() * 1000)


def _adds(files: list[FileEntry]) -> list[AddAction]:
    return [AddAction(f.path, f.size, {}, _now_ms(), True, f.stats) for f in files]


def _delete_files(root: str, files: list[FileEntry]) -> None:
    fs, base = filesystem(root)
    for f in files:
        try:
            fs.delete_file(f"{base}/{f.path}")
        except FileNotFoundError:
            pass


def discard(storage: StorageLayout, collection_id: int, files: list[FileEntry]) -> None:
    """Delete uncommitted binlog files, each from its own table."""
    roots = {INSERT_TABLE: storage.insert_log(collection_id), DELETE_TABLE: storage.delta_log(collection_id),
             QUARANTINE_TABLE: storage.quarantine()}
    for table, root in roots.items():
        _delete_files(root, [f for f in files if f.table == table])


def _commit_side_table(uri: str, schema: pa.Schema, files: list[FileEntry], vchannel: str, end: int) -> None:
    if not files:
        return
    table = open_or_create(uri, schema)
    table.create_write_transaction(_adds(files), "append", schema, commit_properties=CommitProperties(
        app_transactions=[Transaction(vchannel, end)], custom_metadata={VCHANNEL_KEY: vchannel}))


def _segment_files(table: DeltaTable, segments: set[int]) -> list[tuple[str, int]]:
    if not segments:
        return []
    actions = pa.table(table.get_add_actions(flatten=True))
    out = []
    for path, size in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()):
        parts = path.split("/")
        if len(parts) >= 3 and parts[1].isdigit() and int(parts[1]) in segments:
            out.append((path, size))
    return out


def commit_batch(storage: StorageLayout, state: ChannelState, results: list[TaskResult],
                 insert_schema: pa.Schema, delete_schema: pa.Schema, *, fence=None,
                 attempts: int = 5, coalesce_ms: int = 0) -> CommitResult:
    """Commit one batch; returns the outcome whose ``state`` is the new ChannelState.

    An idle batch (only ticks or other shards' messages) is not committed while the last
    commit is younger than ``coalesce_ms``: its range is remembered in the state
    (``resume_offset``) and the next commit covers it. The checkpoint then lags by at most
    that long, and a channel that only ticks does not write a Delta commit every trigger.
    """
    t0 = time.monotonic()
    now = _now_ms()
    results, retracted = retract_after_drops(results)
    outcome = advance(state, results, now)
    if outcome.idle and not state.replay and now - state.committed_at_ms < coalesce_ms:
        return CommitResult(outcome, False, time.monotonic() - t0, coalesced=outcome.coalesced(state))
    files = [f for r in results for f in r.files]
    by_table = {t: [f for f in files if f.table == t] for t in (INSERT_TABLE, DELETE_TABLE, QUARANTINE_TABLE)}
    insert_uri = storage.insert_log(state.collection_id)
    discard(storage, state.collection_id, retracted)
    if fence is not None:
        fence.check()
    for attempt in range(attempts):
        table = open_or_create(insert_uri, insert_schema)
        current = table.transaction_version(state.vchannel)
        if current is not None and current >= outcome.end:
            log.info("%s: batch [%d, %d) already committed (txn %d); discarding its files",
                     state.vchannel, outcome.start, outcome.end, current)
            discard(storage, state.collection_id, files)
            return CommitResult(outcome, False, time.monotonic() - t0)
        if current is not None and current != outcome.start:
            raise CommitRefused(f"{state.vchannel}: insert_log txn is {current}, this flowgraph's batch "
                                f"starts at {outcome.start}: another writer owns the channel")
        if attempt == 0:
            _commit_side_table(storage.delta_log(state.collection_id), delete_schema, by_table[DELETE_TABLE],
                               state.vchannel, outcome.end)
            _commit_side_table(storage.quarantine(), QUARANTINE_SCHEMA, by_table[QUARANTINE_TABLE],
                               state.vchannel, outcome.end)
            crash_point("after_side_commits")
        dropped = outcome.newly_dropped
        keep = [f for f in by_table[INSERT_TABLE] if f.segment_id not in dropped]
        actions: list = _adds(keep)
        actions += [RemoveAction(path, True, _now_ms(), size) for path, size in _segment_files(table, dropped)]
        try:
            table.create_write_transaction(actions, "append", insert_schema, commit_properties=CommitProperties(
                custom_metadata={METADATA_KEY: outcome.state.to_json(), VCHANNEL_KEY: state.vchannel},
                app_transactions=[Transaction(state.vchannel, outcome.end)]))
        except CommitFailedError as e:
            # Another vchannel of the collection committed meanwhile: re-check our txn and retry.
            log.warning("%s: commit conflict (%s), attempt %d", state.vchannel, e, attempt + 1)
            continue
        _delete_files(insert_uri, [f for f in by_table[INSERT_TABLE] if f.segment_id in dropped])
        return CommitResult(outcome, True, time.monotonic() - t0, table.version())
    raise CommitRefused(f"{state.vchannel}: commit to {insert_uri} failed {attempts} times in a row")
