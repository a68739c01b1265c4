"""Periodic progress reports of a DataNode's vchannels: a summary line, and a line per vchannel that
is failing or lagging, up to ``MAX_LINES`` (a thousand healthy vchannels would drown the log). The
vchannels a full filesystem stops get no line of their own: the node's alert says it once for all
of them (``pipeline.space_watch``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..failure.kinds import FailureKind

log = logging.getLogger("deltanode.progress")
LAGGING = 1000   # messages behind the broker's high watermark
# Vchannel lines per report, failing ones first, then the most behind: 10,000 vchannels behind
# after a burst logged 10,000 lines every report.
MAX_LINES = 20


def describe(row: dict) -> str:
    if row["status"] == "dropped":
        return f"{row['vchannel']}: collection dropped, waiting for release"
    if row["status"] == "failed":
        return f"{row['vchannel']}: restarting after {row['failures']} failure(s): {row['last_error']}"
    lag = "?" if row.get("lag_messages") is None else row["lag_messages"]
    rate = f", {row['rows_per_s']:,.0f} rows/s" if row.get("rows_per_s") is not None else ""
    return (f"{row['vchannel']}: running, checkpoint offset {row.get('checkpoint_offset', '-')}, "
            f"{row.get('rows_committed', 0)} rows in {row.get('batches', 0)} batches committed, lag {lag} messages"
            f"{rate}")


def summary(rows: list[dict]) -> str:
    if not rows:
        return "no channels assigned yet"
    running = sum(r["status"] == "running" for r in rows)
    failed = sum(r["status"] == "failed" for r in rows)
    lag = sum(r.get("lag_messages") or 0 for r in rows)
    committed = sum(r.get("rows_committed", 0) for r in rows)
    return (f"{len(rows)} vchannel(s): {running} running, {failed} restarting; {committed} rows committed, "
            f"{lag} messages behind in all")


def _waits_for_space(row: dict) -> bool:
    return row["status"] == "failed" and str(row.get("last_error", "")).startswith(FailureKind.STORAGE_FULL)


class ProgressReporter:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = time.monotonic() + interval
        self._seen: dict[str, tuple[float, int]] = {}   # vchannel -> (when, rows committed) at the last report

    def maybe_report(self, progress: Callable[[], list[dict]], alerts: Callable[[], list[str]] = list,
                     publish: Callable[[list[dict]], None] | None = None) -> None:
        """Log ``progress()`` and ``alerts()`` (node-level conditions, at WARNING) and hand the rows to
        ``publish`` if the interval has passed (they are only computed then: at 1,000 vchannels
        progress costs a few milliseconds)."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        rows = progress()
        self._add_rates(rows, now)
        if publish is not None:
            publish(rows)
        log.info("%s", summary(rows))
        for alert in alerts():
            log.warning("%s", alert)
        worth = [row for row in rows if not _waits_for_space(row) and (
                 row["status"] != "running" or (row.get("lag_messages") or 0) >= LAGGING or len(rows) <= 8)]
        worth.sort(key=lambda row: (row["status"] == "running", -(row.get("lag_messages") or 0), row["vchannel"]))
        for row in worth[:MAX_LINES]:
            log.info("%s", describe(row))
        if len(worth) > MAX_LINES:
            log.info("... and %d more vchannel(s) restarting, dropped or lagging", len(worth) - MAX_LINES)

    def _add_rates(self, rows: list[dict], now: float) -> None:
        """``rows_per_s``: rows committed per second since the previous report (a catch-up's speed)."""
        seen = {}
        for row in rows:
            if "rows_committed" not in row:
                continue
            before = self._seen.get(row["vchannel"])
            if before is not None and now > before[0] and row["rows_committed"] >= before[1]:
                row["rows_per_s"] = (row["rows_committed"] - before[1]) / (now - before[0])
            seen[row["vchannel"]] = (now, row["rows_committed"])
        self._seen = seen
