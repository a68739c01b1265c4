"""Pure helpers: percentiles, commit times from a Delta log, insert-to-commit latency.

A message at offset ``o`` of a vchannel's pchannel is durable once a commit of that vchannel
has ``txn`` (= ChannelState.checkpoint_offset, the batch's end offset) ``> o``. Its latency
is that commit's timestamp (Delta commitInfo, ms) minus the wall clock at its ``produce()``.
"""

from __future__ import annotations

import bisect
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from deltanode.state.channel_state import STATES_KEY


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Commit:
    version: int
    end: int          # the vchannel's checkpoint offset after this commit
    t: float          # commit timestamp, seconds since the epoch
    rows: int         # ChannelState.rows after this commit (cumulative)


def commits_from_log(table_uri: str) -> dict[str, list[Commit]]:
    """Each vchannel's commits in the Delta log of an insert_log table, oldest first."""
    out: dict[str, list[Commit]] = {}
    log_dir = os.path.join(table_uri, "_delta_log")
    names = sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit()) \
        if os.path.isdir(log_dir) else []
    for name in names:
        with open(os.path.join(log_dir, name)) as f:
            actions = [json.loads(line) for line in f if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        states = json.loads(info[STATES_KEY]) if STATES_KEY in info else {}
        for a in actions:
            if "txn" in a:
                v = a["txn"]["appId"]
                out.setdefault(v, []).append(Commit(int(name[:20]), int(a["txn"]["version"]),
                                                    info["timestamp"] / 1000.0,
                                                    int(states.get(v, {}).get("rows", 0))))
    return out


def commit_of(commits: Sequence[Commit], offset: int) -> Commit | None:
    """The first commit that covers ``offset`` (commits oldest first, ends increasing)."""
    ends = [c.end for c in commits]
    i = bisect.bisect_right(ends, offset)
    return commits[i] if i < len(commits) else None


def latencies(sent: Iterable[tuple[int, float]], commits: Sequence[Commit]) -> tuple[list[float], int]:
    """Latency of each ``(offset, produce_time)``; returns (latencies, number not yet committed)."""
    out, missing = [], 0
    for offset, t in sent:
        c = commit_of(commits, offset)
        if c is None:
            missing += 1
        else:
            out.append(c.t - t)
    return out, missing


def timed_latencies(sent: Iterable[tuple[int, float]], commits: Sequence[Commit]) -> list[tuple[float, float]]:
    """``(produce_time, latency)`` of each committed ``(offset, produce_time)``."""
    return [(t, c.t - t) for offset, t in sent if (c := commit_of(commits, offset)) is not None]


def wire_bytes(sent: Iterable[tuple[int, int]], start: int, end: int) -> int:
    """Sum of sizes of the ``(offset, size)`` records with ``start <= offset < end``."""
    return sum(size for off, size in sent if start <= off < end)


def warm_rate(commits: Sequence[Commit], sizes: Iterable[tuple[int, int]], skip: int = 1) -> float | None:
    """Bytes/s from the end of commit ``skip`` to the last commit (leaves out the first
    ``skip`` commits, i.e. session and worker warm-up); None if fewer than two remain."""
    if skip < 1 or len(commits) < skip + 1:
        return None
    a, b = commits[skip - 1], commits[-1]
    span = b.t - a.t
    if span <= 0 or b.end <= a.end:
        return None
    return wire_bytes(sizes, a.end, b.end) / span


def upto(commits: Sequence[Commit], target: int) -> list[Commit]:
    """The commits up to and including the first one whose end reaches ``target``."""
    out = []
    for c in commits:
        out.append(c)
        if c.end >= target:
            break
    return out


def largest_batch(commits: Sequence[Commit], sizes: Iterable[tuple[int, int]], start: int) -> int:
    """Wire bytes of the largest micro-batch among ``commits`` (the first one begins at ``start``)."""
    sizes = sorted(sizes)
    offs = [o for o, _ in sizes]
    cum = [0]
    for _, n in sizes:
        cum.append(cum[-1] + n)

    def upto_offset(x: int) -> int:
        return cum[bisect.bisect_left(offs, x)]

    best, prev = 0, start
    for c in commits:
        best = max(best, upto_offset(c.end) - upto_offset(prev))
        prev = c.end
    return best
