"""Reading a vchannel's durable state back from Delta (recovery and admin)."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from ..delta import json_codec
from ..delta.delta_log import DeltaLog
from ..delta.layout import StorageLayout
from ..delta.tables import open_table
from .channel_state import STATES_KEY, ChannelState


def channel_state_in(insert_log: DeltaLog, vchannel: str) -> ChannelState | None:
    """The ChannelState committed with the vchannel's current ``txn``, None if it never committed.

    The newest commit that carries the vchannel's state is usually among the last few: every
    commit of a collection carries each vchannel it moves, and idle vchannels are committed
    at least every ``datanode.checkpoint.interval`` (budget permitting).
    """
    expected = insert_log.txn(vchannel)
    if expected is None:
        return None
    quoted = json_codec.dumps(vchannel)   # vchannel names are ASCII (wire.names.check_safe)
    for _, info in insert_log.commit_infos():
        states = info.get(STATES_KEY)
        if not states or quoted not in states:
            continue
        doc = json_codec.loads(states).get(vchannel)
        if doc is not None and doc["checkpoint_offset"] == expected:
            return ChannelState.from_doc(doc)
    raise RuntimeError(f"{vchannel}: {insert_log.uri} has txn {expected} but no commit metadata for it; "
                       f"was the Delta log cleaned up?")


def dropped_vchannels(infos: list[dict]) -> set[str]:
    """The vchannels whose state in these commitInfos says their collection was dropped."""
    out: set[str] = set()
    for info in infos:
        states = info.get(STATES_KEY)
        if states and '"collection_dropped":true' in states:
            out.update(v for v, doc in json_codec.loads(states).items() if doc.get("collection_dropped"))
    return out


def channel_state(storage: StorageLayout, collection_id: int, vchannel: str) -> ChannelState | None:
    """The newest committed ChannelState of ``vchannel``, or None if it never committed."""
    insert_log = DeltaLog.open(storage.insert_log(collection_id), storage.options)
    return None if insert_log is None else channel_state_in(insert_log, vchannel)


def segment_binlogs(storage: StorageLayout, collection_id: int) -> dict[int, list[dict]]:
    """Committed insert binlog files per segment: path, size, rows."""
    table = open_table(storage.insert_log(collection_id), storage.delta_options(storage.insert_log(collection_id)))
    if table is None:
        return {}
    actions = pa.table(table.get_add_actions(flatten=True))
    out: dict[int, list[dict]] = defaultdict(list)
    for path, size, rows in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(),
                                actions.column("num_records").to_pylist()):
        parts = path.split("/")
        if len(parts) >= 3 and parts[1].isdigit():
            out[int(parts[1])].append({"path": path, "size": size, "rows": rows})
    return dict(out)
