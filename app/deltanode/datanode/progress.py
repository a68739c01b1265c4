"""Periodic one-line progress reports of a DataNode's flowgraphs."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("deltanode.progress")


def describe(row: dict) -> str:
    if row.get("dropped"):
        return f"{row['vchannel']}: collection dropped, waiting for release"
    if "checkpoint_offset" not in row:
        status = "starting" if row["running"] else f"down ({row['failures']} failures): {row['last_error']}"
        return f"{row['vchannel']}: {status}"
    lag = "?" if row.get("lag_messages") is None else row["lag_messages"]
    state = "running" if row["running"] else f"restarting after: {row['last_error']}"
    return (f"{row['vchannel']}: {state}, checkpoint offset {row['checkpoint_offset']}, "
            f"{row['rows_committed']} rows in {row['batches']} batches committed, lag {lag} messages")


class ProgressReporter:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = time.monotonic() + interval

    def maybe_report(self, rows: list[dict]) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        if not rows:
            log.info("no channels assigned yet")
        for row in rows:
            log.info("%s", describe(row))
