"""The DataNode replay filter, applied to insert messages after a seek (recovery design).

For each insert message m that passed the shard and dropped-segment checks:

1. for each flushed segment s still in S: if m.EndTs > s.dmlPosition.ts, remove s from S for
   good; then drop m if m's segment is still in S;
2. if m's segment g is in the unflushed set G: drop m if m.EndTs <= g.dmlPosition.ts,
   otherwise remove g from G and keep m.

The filter is stateful and order-dependent, so a flowgraph runs it in one task, in Milvus's
pack order (pack_order.py), while it is active; once S and G are both empty it passes
everything and batches are split again.
A TimeTick at ts T guarantees every later message has ts > T (docs/milvus-facts.md §3), so
once a tick reaches the largest dml ts left in S and G no later message can be dropped: the
filter empties itself there instead of waiting for each segment to receive a message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..records import ReplayState


@dataclass
class ReplayFilter:
    flushed: dict[int, int] = field(default_factory=dict)    # S: segment -> dml position ts
    unflushed: dict[int, int] = field(default_factory=dict)  # G: segment -> dml position ts

    @property
    def active(self) -> bool:
        return bool(self.flushed or self.unflushed)

    def admit(self, segment_id: int, end_ts: int) -> bool:
        """Whether an insert into ``segment_id`` ending at ``end_ts`` is kept; updates S and G."""
        if self.flushed:
            self.flushed = {s: ts for s, ts in self.flushed.items() if end_ts <= ts}
            if segment_id in self.flushed:
                return False
        g_ts = self.unflushed.get(segment_id)
        if g_ts is not None:
            if end_ts <= g_ts:
                return False
            del self.unflushed[segment_id]
        return True

    def on_tick(self, tick_ts: int) -> None:
        """Empty S and G once ``tick_ts`` reaches every dml ts left in them."""
        if self.active and tick_ts >= max([*self.flushed.values(), *self.unflushed.values()]):
            self.flushed, self.unflushed = {}, {}

    def state(self) -> ReplayState | None:
        """Its sets, None once it is no longer active."""
        if not self.active:
            return None
        return ReplayState(flushed=tuple(sorted(self.flushed.items())), unflushed=tuple(sorted(self.unflushed.items())))

    @classmethod
    def of(cls, state: ReplayState | None) -> ReplayFilter:
        """The filter ``state`` holds (an empty one for None)."""
        return cls(dict(state.flushed), dict(state.unflushed)) if state is not None else cls()
