"""What a Milvus 2.6 vchannel's reader holds between two TimeTicks, released in time-tick order.

A 2.6 streaming node allocates a message's time tick and then appends it, and its appends run
concurrently: a message may land after one with a higher time tick. Only a persisted TimeTick at
T says that every message with a time tick up to T is in the log before it. Milvus's own scanner
(main module ``wal/utility/reorder_buffer.go``) therefore holds what it reads in a heap by time
tick and, at each TimeTick, pops what is at or below it in ascending order; a message read after
that whose time tick is below the last TimeTick popped breaks the rule ("time tick violation") and
is refused (docs/milvus-facts.md §13, §14).

Pure logic; runs on executors.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class ReorderBuffer(Generic[T]):
    """Items held by time tick until a TimeTick releases them. Runs on executors."""

    last_popped: int = 0   # the time tick of the last release (0: none yet, nothing is refused)
    _heap: list[tuple[int, int, T]] = field(default_factory=list)
    _pushed: int = 0       # breaks ties in arrival order, and keeps items themselves out of comparisons

    def push(self, time_tick: int, item: T) -> bool:
        """Hold ``item``; False (not held) when its time tick is below the last release's."""
        if time_tick < self.last_popped:
            return False
        heapq.heappush(self._heap, (time_tick, self._pushed, item))
        self._pushed += 1
        return True

    def pop_until(self, time_tick: int) -> list[T]:
        """The held items with a time tick at or below ``time_tick``, in ascending time-tick order."""
        out = []
        while self._heap and self._heap[0][0] <= time_tick:
            out.append(heapq.heappop(self._heap)[2])
        self.last_popped = max(self.last_popped, time_tick)
        return out

    def __len__(self) -> int:
        return len(self._heap)
