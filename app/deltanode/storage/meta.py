"""Reading a vchannel's durable state back from Delta (recovery and admin)."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from .channel_state import METADATA_KEY, ChannelState
from .commit import VCHANNEL_KEY
from .layout import StorageLayout
from .tables import open_table

HISTORY_PAGE = 200


def channel_state(storage: StorageLayout, collection_id: int, vchannel: str) -> ChannelState | None:
    """The ChannelState of the newest commit of ``vchannel``, or None if it never committed."""
    table = open_table(storage.insert_log(collection_id))
    if table is None or table.transaction_version(vchannel) is None:
        return None
    expected = table.transaction_version(vchannel)
    limit = HISTORY_PAGE
    while True:
        entries = table.history(limit)
        for entry in entries:
            if entry.get(VCHANNEL_KEY) == vchannel and METADATA_KEY in entry:
                state = ChannelState.from_json(entry[METADATA_KEY])
                if state.checkpoint_offset == expected:
                    return state
        if len(entries) < limit:
            raise RuntimeError(f"{vchannel}: insert_log has txn {expected} but no commit metadata for it; "
                               f"was the Delta log cleaned up?")
        limit *= 4


def table_watermark(uri: str, vchannel: str) -> int:
    """The ``txn`` version (next offset) of ``vchannel`` in the table at ``uri``, 0 if none."""
    table = open_table(uri)
    if table is None:
        return 0
    return table.transaction_version(vchannel) or 0


def segment_binlogs(storage: StorageLayout, collection_id: int) -> dict[int, list[dict]]:
    """Committed insert binlog files per segment: path, size, rows."""
    table = open_table(storage.insert_log(collection_id))
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
