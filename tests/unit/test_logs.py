"""The driver's log lines go through one writer thread (``deltanode.logs``)."""

from __future__ import annotations

import io
import logging
import sys
import threading
import time

import pytest

from deltanode.logs import flush_logs, setup_logging


@pytest.fixture
def root_logger():
    """The root logger's handlers and level, put back after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    flush_logs()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_every_line_of_every_thread_is_written_in_its_order_by_the_time_flush_returns(root_logger, monkeypatch):
    stderr = io.StringIO()
    with monkeypatch.context() as m:   # in the test's body: pytest sets its own stderr after fixtures
        m.setattr(sys, "stderr", stderr)
        setup_logging("INFO")
    log = logging.getLogger("deltanode.test")

    def lines(t: int) -> None:
        for i in range(500):
            log.info("thread %d line %d", t, i)

    threads = [threading.Thread(target=lines, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        raise ValueError("bad input")
    except ValueError:
        log.exception("a failure")
    log.debug("below the level")
    flush_logs()
    written = stderr.getvalue().splitlines()
    for t in range(4):
        mine = [line.rsplit(" ", 1)[1] for line in written if f"thread {t} line" in line]
        assert mine == [str(i) for i in range(500)]
    assert " ERROR   deltanode.test: a failure" in written[2000]
    assert written[-1] == "ValueError: bad input"   # the traceback follows its line
    assert not any("below the level" in line for line in written)
    assert len(written) == 2000 + 1 + 4


def test_setting_up_again_ends_the_previous_writer(root_logger, monkeypatch):
    def writers() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "log-writer")

    first, second = io.StringIO(), io.StringIO()
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", first)
        setup_logging("INFO")
    logging.getLogger("deltanode.test").info("to the first")
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", second)
        setup_logging("INFO")
    logging.getLogger("deltanode.test").info("to the second")
    flush_logs()
    deadline = time.monotonic() + 5
    while writers() > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writers() == 1   # each setup ended the writer before it
    assert first.getvalue().endswith("deltanode.test: to the first\n")
    assert second.getvalue().endswith("deltanode.test: to the second\n") and "first" not in second.getvalue()
