"""Progress reports: a line per failing or lagging vchannel, with its catch-up speed."""

from __future__ import annotations

import logging

from deltanode.datanode import progress_lines as progress
from deltanode.datanode.progress_lines import ProgressReporter


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


def test_a_report_names_the_failing_then_the_most_behind_up_to_its_line_cap(monkeypatch, caplog):
    clock = iter([0.0, 10.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    reporter = ProgressReporter(interval=10.0)
    rows = [{"vchannel": f"v{i:03d}", "status": "running", "checkpoint_offset": 1, "rows_committed": 0,
             "batches": 1, "lag_messages": 1000 + i} for i in range(100)]
    rows.append({"vchannel": "broken", "status": "failed", "failures": 3, "last_error": "BrokerError: gone"})
    with caplog.at_level(logging.INFO, logger="deltanode.progress"):
        reporter.maybe_report(lambda: [dict(r) for r in rows])
    lines = [r.getMessage() for r in caplog.records]
    named = [line.split(":")[0] for line in lines[1:-1]]
    assert len(named) == progress.MAX_LINES and named[:3] == ["broken", "v099", "v098"]
    assert lines[-1] == f"... and {101 - progress.MAX_LINES} more vchannel(s) restarting, dropped or lagging"


def test_vchannels_a_full_filesystem_stops_get_the_node_alert_not_a_line_each(monkeypatch, caplog):
    clock = iter([0.0, 10.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    reporter = ProgressReporter(interval=10.0)
    full = "storage full: /data/delta: No space left on device"
    rows = [{"vchannel": f"v{i}", "status": "failed", "failures": 4,
             "last_error": "StorageFull: /data/delta: No space left on device (writing binlogs)"} for i in range(50)]
    rows.append({"vchannel": "broken", "status": "failed", "failures": 3, "last_error": "BrokerError: gone"})
    with caplog.at_level(logging.INFO, logger="deltanode.progress"):
        reporter.maybe_report(lambda: [dict(r) for r in rows], alerts=lambda: [full])
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines[1:] == [(logging.WARNING, full),
                         (logging.INFO, "broken: restarting after 3 failure(s): BrokerError: gone")]
    assert "51 restarting" in lines[0][1]
