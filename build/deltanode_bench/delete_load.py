"""What the delete benchmark sends (pure): random existing keys, routed to their shards, and a
schedule of inserts and delete batches.

Keys: every InsertRequest of the benchmark holds the consecutive keys from its first one, all
on one shard (vchannel). ``KeyPicker`` knows those ranges and picks keys uniformly among the
inserted ones, each at most once (so the rows left are the rows inserted minus the keys
picked). ``by_shard`` splits a batch as Milvus's proxy splits a delete: one DeleteRequest per
shard holding some of its keys.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class KeyPicker:
    def __init__(self, seed: int = 11) -> None:
        self._firsts: list[int] = []       # each range's first key, ascending
        self._starts: list[int] = []       # each range's index among all keys (cumulative rows)
        self._rows: list[int] = []
        self._shards: list[int] = []
        self.total = 0                     # keys inserted
        self.picked: set[int] = set()
        self._rng = random.Random(seed)

    def add(self, first_pk: int, rows: int, shard: int) -> None:
        """The keys ``first_pk .. first_pk + rows - 1`` were inserted on ``shard`` (ranges come in
        ascending, non-overlapping order, as the producer hands out keys)."""
        if rows <= 0:
            raise ValueError("a range of no keys")
        if self._firsts and first_pk < self._firsts[-1] + self._rows[-1]:
            raise ValueError(f"keys from {first_pk} overlap or precede the last range")
        self._firsts.append(first_pk)
        self._starts.append(self.total)
        self._rows.append(rows)
        self._shards.append(shard)
        self.total += rows

    def shard_of(self, key: int) -> int:
        i = bisect.bisect_right(self._firsts, key) - 1
        if i < 0 or key >= self._firsts[i] + self._rows[i]:
            raise KeyError(key)
        return self._shards[i]

    def pick(self, n: int) -> list[int]:
        """``n`` inserted keys never picked before, uniformly at random; they count as picked."""
        out = self.sample(n)
        self.picked.update(out)
        return out

    def sample(self, n: int) -> list[int]:
        """``n`` distinct inserted keys never picked, uniformly at random, left unpicked."""
        if n > self.total - len(self.picked):
            raise ValueError(f"{n} keys asked, {self.total - len(self.picked)} left")
        out: dict[int, None] = {}
        while len(out) < n:   # rejection: the picked keys are a small share of the inserted ones
            i = self._rng.randrange(self.total)
            r = bisect.bisect_right(self._starts, i) - 1
            key = self._firsts[r] + i - self._starts[r]
            if key not in self.picked:
                out[key] = None
        return list(out)


def by_shard(keys: Iterable[int], shard_of: Callable[[int], int]) -> dict[int, list[int]]:
    """The keys of one delete per shard, shards ascending, keys in the order given."""
    out: dict[int, list[int]] = {}
    for key in keys:
        out.setdefault(shard_of(key), []).append(key)
    return dict(sorted(out.items()))


@dataclass
class Stream:
    """Something sent every ``interval`` seconds from the start of a phase."""

    interval: float
    send: Callable[[], None]
    sent: int = 0

    def due(self, start: float) -> float:
        return start + self.sent * self.interval


def next_stream(streams: list[Stream], start: float) -> Stream:
    """The stream due first (ties: the first listed)."""
    return min(streams, key=lambda s: s.due(start))


def pace(streams: list[Stream], seconds: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
    """Send each stream at its own rate for ``seconds``; a stream that falls behind catches up
    at once, so the rates hold over the phase."""
    start = clock()
    while True:
        s = next_stream(streams, start)
        at = s.due(start)
        if at >= start + seconds:
            return
        delay = at - clock()
        if delay > 0:
            sleep(delay)
        s.send()
        s.sent += 1
