"""What a task needs to route one vchannel's messages: the filter-relevant part of its state.

Built on the driver from the vchannel's working state before each batch (``VchannelFlowgraph.
context``) and shipped to the executors with the task; small and immutable.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RouteContext:
    vchannel: str
    collection_id: int
    collection_name: str
    pchannel: str
    partition: int                      # of the pchannel topic (Milvus uses 0)
    start: int                          # the vchannel's next offset: earlier messages are not its own
    seek_ts: int = 0                    # skip messages with BeginTs <= seek_ts until a tick >= it
    dropped_segments: frozenset[int] = frozenset()
    dropped_partitions: frozenset[int] = frozenset()
    collection_dropped: bool = False
    replay: dict | None = None          # ReplayFilter state while active
    delete_watermark: int = 0           # deletes below this offset are committed already
    quarantine_watermark: int = 0       # so are quarantine rows below this one
    flush_ts: int = 0                   # a flush in progress: a segment with rows up to it is sealed at it
    sealed: dict[int, int] = field(default_factory=dict)   # segment -> ts after which it takes no row
