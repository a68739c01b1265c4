"""Progress reports: a line per failing or lagging vchannel, with its catch-up speed."""

from __future__ import annotations

import logging

from deltanode.datanode import progress
from deltanode.datanode.progress import ProgressReporter


def test_a_lagging_vchannel_is_reported_with_its_rows_per_second(monkeypatch, caplog):
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    reporter = ProgressReporter(interval=10.0)          # first report due at 10 s
    rows = [{"vchannel": "v0", "status": "running", "checkpoint_offset": 5, "rows_committed": 1000,
             "batches": 2, "lag_messages": 50_000}]
    with caplog.at_level(logging.INFO, logger="deltanode.progress"):
        reporter.maybe_report(lambda: [dict(r) for r in rows])
        rows[0].update(rows_committed=31_000, lag_messages=20_000)
        reporter.maybe_report(lambda: [dict(r) for r in rows])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("v0:")]
    assert lines[0].endswith("lag 50000 messages")                  # no rate before a second report
    assert lines[1].endswith("lag 20000 messages, 3,000 rows/s")   # 30,000 rows in 10 s
