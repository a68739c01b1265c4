"""Spark task concurrency of a DataNode run, read from Spark's event log.

"Both cores used for one vchannel" means that the vchannel's micro-batches run as parallel
tasks and that the machine is busy while they do. Over a time window this gives how long
0, 1, 2, ... tasks were running (``running``) and the machine's busy cores during the time
every task slot was taken (``busy_while_full``); what is left of the window is micro-batch
boundaries (planning, the Delta commit) and the tail of a batch whose tasks end apart.
"""

from __future__ import annotations

import json
import os

from .procs import Sample

TASK_END = '"SparkListenerTaskEnd"'


def task_spans(log_dir: str) -> list[tuple[float, float]]:
    """(launch, finish) in epoch seconds of every finished task in the event logs under ``log_dir``
    (plain or rolling: Spark 4 writes ``eventlog_v2_<app>/events_<n>_<app>`` files)."""
    spans = []
    for root, _, names in os.walk(log_dir):
        for name in sorted(n for n in names if not n.startswith(".")):
            with open(os.path.join(root, name), errors="replace") as f:
                for line in f:
                    if TASK_END not in line:
                        continue
                    try:
                        info = json.loads(line)["Task Info"]
                    except (ValueError, KeyError):
                        continue  # the line Spark is writing right now
                    spans.append((info["Launch Time"] / 1000, info["Finish Time"] / 1000))
    return spans


def _steps(spans: list[tuple[float, float]], t0: float, t1: float) -> list[tuple[float, float, int]]:
    """``[t0, t1]`` cut into (start, end, tasks running) pieces."""
    edges = sorted([(max(a, t0), 1) for a, b in spans if a < t1 and b > t0]
                   + [(min(b, t1), -1) for a, b in spans if a < t1 and b > t0])
    out, k, t = [], 0, t0
    for x, d in edges:
        if x > t:
            out.append((t, x, k))
        k, t = k + d, max(t, x)
    if t1 > t:
        out.append((t, t1, k))
    return out


def running(spans: list[tuple[float, float]], t0: float, t1: float) -> dict[int, float]:
    """Seconds of ``[t0, t1]`` during which exactly k tasks were running, by k."""
    out: dict[int, float] = {}
    for a, b, k in _steps(spans, t0, t1):
        out[k] = out.get(k, 0.0) + b - a
    return out


def busy_while_full(spans: list[tuple[float, float]], samples: list[Sample], t0: float, t1: float,
                    slots: int, min_seconds: float = 1.0) -> float | None:
    """Average busy cores of the machine over the sample intervals lying wholly inside stretches
    of ``[t0, t1]`` when at least ``slots`` tasks ran; None if they add up to less than
    ``min_seconds`` (/proc counts CPU time in 10 ms ticks: a few 0.2 s intervals can read 2.03
    cores of 2)."""
    full = [(a, b) for a, b, k in _steps(spans, t0, t1) if k >= slots]
    merged: list[list[float]] = []
    for a, b in full:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    cpu = secs = 0.0
    for x, y in zip(samples, samples[1:]):
        if any(a <= x.t and y.t <= b for a, b in merged):
            cpu, secs = cpu + y.cpu_machine - x.cpu_machine, secs + y.t - x.t
    return cpu / secs if secs >= min_seconds else None
