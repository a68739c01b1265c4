"""A filesystem out of space, as DeltaNode recognises and tells it: by errno or by the words of
delta-rs, the JVM and Spark's jobs (``failure.causes``), as the kind the executor's classifier
gives and the driver keeps, retried every ``BACK_OFF_EVERY`` seconds instead of the growing backoff,
and told once for the node (``pipeline.space_watch``) until every vchannel it stopped commits
again. On real flowgraphs and Delta tables; Spark is a fake (tests/integration/test_disk_full.py
fills real filesystems)."""

from __future__ import annotations

import errno
import logging
import time

import pyarrow as pa
import pytest

from deltanode.config.sections.pipeline import SyncSettings
from deltanode.delta.space import condition
from deltanode.failure.causes import NO_SPACE, QUOTA, out_of_space
from deltanode.failure.classify import BACK_OFF_EVERY, Failure, classify, worded
from deltanode.failure.kinds import Action, FailureKind
from deltanode.pipeline.cycle_report import CycleReport

from .vchannels import loaded, read_deletes, read_rows, stages


def storage_full(*, where: str, reason: str, step: str) -> Failure:
    return Failure(kind=FailureKind.STORAGE_FULL, message=worded(where, reason, step))


def pyarrow_write_error() -> OSError:
    """What pyarrow raises when a write finds no space: an OSError with the errno of the call."""
    return OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")


@pytest.mark.parametrize("error, reason", [
    (OSError(errno.ENOSPC, "No space left on device"), NO_SPACE),
    (pyarrow_write_error(), NO_SPACE),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), QUOTA),
    (Exception("Generic LocalFileSystem error: Unable to copy data to file: No space left on device (os error 28)"),
     NO_SPACE),
    ("py4j.protocol.Py4JJavaError: ...\njava.io.IOException: No space left on device\n\tat java.base/...", NO_SPACE),
    (OSError(errno.EACCES, "Permission denied"), None),
    (pa.ArrowInvalid("No space in this schema for a column"), None),
    (RuntimeError("os error 2"), None),
])
def test_out_of_space_is_read_from_the_errno_or_the_words_of_each_layer(error, reason):
    assert out_of_space(error) == reason


def test_out_of_space_is_found_through_the_chain_of_causes():
    try:
        try:
            raise pyarrow_write_error()
        except OSError as e:
            raise RuntimeError("closing the binlog failed") from e
    except RuntimeError as outer:
        assert out_of_space(outer) == NO_SPACE


def test_the_node_line_is_the_place_and_the_reason_whatever_the_step():
    message = worded("/data/delta", NO_SPACE, "committing")
    assert message == "/data/delta: No space left on device (committing)"
    assert condition(message) == "storage full: /data/delta: No space left on device"
    assert condition(worded("Spark's local directory /tmp (x)", QUOTA, "running the cycle's Spark job")) == \
        "storage full: Spark's local directory /tmp (x): Disk quota exceeded"


def test_a_task_error_out_of_space_is_storage_full_on_the_driver_and_others_keep_their_kind():
    full = classify(pyarrow_write_error(), kind=FailureKind.ROUTER, where="/data/delta", step="writing binlogs")
    assert full.kind is FailureKind.STORAGE_FULL and full.action is Action.BACK_OFF
    assert full == storage_full(where="/data/delta", reason=NO_SPACE, step="writing binlogs")
    assert classify(full, where="/data/delta") is full   # the driver keeps the executor's word
    other = classify(ValueError("bad row"), kind=FailureKind.ROUTER, where="/data/delta", step="writing binlogs")
    assert (other.kind, other.message) == (FailureKind.ROUTER, "ValueError: bad row")
    assert classify(OSError(errno.EIO, "I/O error"), kind=FailureKind.COMMIT_FAILED, where="/d", step="committing") == \
        Failure(kind=FailureKind.COMMIT_FAILED, message="OSError: [Errno 5] I/O error")


def test_a_full_filesystem_retries_on_a_short_fixed_interval_where_other_failures_back_off(tmp_path):
    s = stages(tmp_path)
    full, other = loaded(s, 1, 0), loaded(s, 1, 1)
    now = time.monotonic()
    for _ in range(5):
        s.failures.fail(full, storage_full(where=str(tmp_path), reason=NO_SPACE, step="committing"), now)
        s.failures.fail(other, Failure(kind=FailureKind.COMMIT_FAILED, message="OSError: I/O error"), now)
    assert full.retry_at == now + BACK_OFF_EVERY and full.failures == 5
    assert other.retry_at == now + 32.0


def test_a_full_filesystem_is_told_once_for_the_node_until_every_vchannel_it_stopped_commits(tmp_path, caplog):
    s = stages(tmp_path, settings=SyncSettings(checkpoint_interval=3600.0))
    a0, a1, b0 = loaded(s, 1, 0), loaded(s, 1, 1), loaded(s, 2, 0)
    for fg, pks in ((a0, [1, 2]), (a1, [3]), (b0, [4])):
        read_rows(fg, s.storage, pks)
    s.syncs.sync({fg.vchannel: fg for fg in (a0, a1, b0)}, time.monotonic(), CycleReport(1))
    members = {fg.vchannel: fg for fg in (a0, a1, b0)}
    watch = s.failures.space
    caplog.set_level(logging.DEBUG, logger="deltanode")
    where, steps = str(tmp_path), ("writing binlogs", "committing", "loading it from Delta")
    for cycle in range(3):   # three retries of both vchannels, each failing for lack of space
        now = time.monotonic()
        for fg in (a0, a1):
            s.failures.fail(fg, storage_full(where=where, reason=NO_SPACE, step=steps[cycle]), now)
        watch.check(members.get)
    line = f"storage full: {where}: No space left on device"
    assert watch.condition == line and watch.waiting == 2
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].getMessage().startswith(line)
    assert sum(r.levelno == logging.DEBUG and "flowgraph failed" in r.getMessage() for r in caplog.records) == 6

    other = "storage full: Spark's local directory /tmp: No space left on device"
    s.failures.fail(b0, storage_full(where="Spark's local directory /tmp", reason=NO_SPACE, step="x"), time.monotonic())
    assert watch.condition == f"{line}; {other}"          # a second place full: told once more
    assert sum(r.levelno >= logging.ERROR for r in caplog.records) == 2

    for fg in (a0, a1, b0):   # space is back: each is loaded again and commits
        s.loader.load(fg)
    read_rows(a0, s.storage, [5])
    read_deletes(a1, s.storage, [3])
    s.syncs.sync({a0.vchannel: a0, a1.vchannel: a1}, time.monotonic(), CycleReport(2))
    watch.check(members.get)
    assert watch.condition == line + "; " + other and watch.waiting == 1   # b0 has not committed yet
    del members[b0.vchannel]                                               # ... and leaves the node
    watch.check(members.get)
    assert watch.condition is None and watch.since is None and watch.waiting == 0
    cleared = [r for r in caplog.records if r.levelno == logging.WARNING and "space again" in r.getMessage()]
    assert len(cleared) == 1 and sum(r.levelno >= logging.ERROR for r in caplog.records) == 2


def test_a_vchannel_with_nothing_to_write_ends_the_condition_after_a_retry_interval_running(tmp_path, monkeypatch):
    """Milvus stopped, no ticks: a vchannel the full disk stopped cannot commit to prove the space
    back. Running again for a whole retry interval without failing, while the filesystem it found
    full has room again, is proof enough; failing again meanwhile starts the interval over."""
    from deltanode.pipeline import space_watch
    clock = [1000.0]
    monkeypatch.setattr(space_watch.time, "monotonic", lambda: clock[0])
    s = stages(tmp_path)
    fg = loaded(s, 1, 0)
    members = {fg.vchannel: fg}
    watch = s.failures.space
    full = storage_full(where=str(tmp_path), reason=NO_SPACE, step="committing")
    s.failures.fail(fg, full, clock[0])
    s.loader.load(fg)                      # reloaded: running, nothing to commit
    watch.check(members.get)
    clock[0] += BACK_OFF_EVERY - 1
    watch.check(members.get)
    assert watch.waiting == 1
    s.failures.fail(fg, full, clock[0])    # failed again: the interval starts over
    s.loader.load(fg)
    clock[0] += 2
    watch.check(members.get)
    assert watch.waiting == 1 and watch.condition is not None
    monkeypatch.setattr(space_watch.space, "has_room", lambda path: False)   # still full: no proof
    clock[0] += BACK_OFF_EVERY
    watch.check(members.get)
    assert watch.waiting == 1 and watch.condition is not None
    monkeypatch.setattr(space_watch.space, "has_room", lambda path: path == str(tmp_path))   # room again
    watch.check(members.get)
    assert watch.waiting == 0 and watch.condition is None


def test_the_path_a_storage_full_failure_names_is_asked_for_room(tmp_path):
    from deltanode.delta.space import has_room, path_of
    assert path_of(worded(str(tmp_path), NO_SPACE, "committing")) == str(tmp_path)
    assert path_of(worded("Spark's local directory /tmp/spark-1 (x)", QUOTA, "running")) == "/tmp/spark-1"
    assert path_of(worded("s3://bucket/root", NO_SPACE, "committing")) is None
    assert has_room(str(tmp_path)) and not has_room(None) and not has_room(str(tmp_path / "missing"))
