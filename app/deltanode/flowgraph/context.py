"""What a task needs to route one vchannel's messages: the filter-relevant part of its state.

Built on the driver from the vchannel's working state before each batch (``VchannelFlowgraph.
context``) and shipped to the executors with the task; small and immutable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RouteContext:
    vchannel: str
    collection_id: int
    collection_name: str
    pchannel: str
    partition: int                      # of the pchannel topic (Milvus uses 0)
    start: int                          # the vchannel's next offset: earlier messages are not its own
    seek_ts: int = 0                    # skip DML with BeginTs <= seek_ts (timetick-stream seek)
    dropped_segments: frozenset[int] = frozenset()
    dropped_partitions: frozenset[int] = frozenset()
    collection_dropped: bool = False
    replay: dict | None = None          # ReplayFilter state while active
    delete_watermark: int = 0           # deletes below this offset are committed already
    quarantine_watermark: int = 0       # so are quarantine rows below this one
