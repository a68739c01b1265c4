"""A commit whose put the store answered wrongly: stored but answered with an error, stored and then
refused by a retry (412 for the writer's own version), refused while another put of it is in flight
(409), or failing throughout; and one the store certainly refused (a full filesystem) or stored
without making it durable. The log store is a real one (a table on disk) behind a wrapper that
breaks its answers; what is checked is that the commit is settled by what the version holds, never
by the answer, and that a commit left in doubt that lands later is known as this node's own."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import time

import pyarrow as pa
import pytest

from deltanode.delta import delta_log, durable
from deltanode.delta.delta_log import (
    CommitInDoubt,
    DeltaLog,
    NotDurable,
    NotLanded,
    TxnMoved,
    _LocalLog,
    _version_name,
)
from deltanode.delta.tables import open_table
from deltanode.failure.causes import NO_SPACE, out_of_space
from deltanode.failure.classify import classify
from deltanode.failure.kinds import FailureKind

SCHEMA = pa.schema([("pk", pa.int64())])


class BrokenAnswers:
    """A ``LogStore`` whose next puts follow a script: ``stored_then_error`` (the put lands, the
    caller gets an exception), ``stored_then_refused`` (lands; the caller is told the name exists,
    as a retried conditional PUT is), ``error`` (nothing lands), ``in_flight`` (nothing lands yet:
    the put is kept in ``late`` and the caller gets an exception), ``conflict`` (refused while
    nothing is there, as S3's 409 for a put of the name in flight), ``full`` (the store refuses
    before writing, as a full filesystem does); ``get_errors`` fails the next reads, ``gets``
    scripts them (``ok``, ``error``) before ``get_errors`` counts."""

    def __init__(self, inner) -> None:
        self.inner, self.script, self.get_errors, self.puts, self.reads = inner, [], 0, 0, 0
        self.gets: list[str] = []
        self.late: list[tuple[str, bytes]] = []

    def get(self, name: str) -> bytes | None:
        self.reads += 1
        step = self.gets.pop(0) if self.gets else "error" if self.get_errors else "ok"
        if step == "error":
            self.get_errors = max(0, self.get_errors - 1)
            raise OSError("read timed out")
        return self.inner.get(name)

    def surely_empty(self) -> bool:
        return self.inner.surely_empty()

    def make_durable(self) -> None:
        self.inner.make_durable()

    def put_if_absent(self, name: str, data: bytes) -> bool:
        self.puts += 1
        step = self.script.pop(0) if self.script else "ok"
        if step == "error":
            raise OSError("500 InternalError")
        if step == "in_flight":
            self.late.append((name, data))
            raise OSError("read timeout")
        if step == "conflict":
            return False
        if step == "full":
            raise NotLanded("no space") from OSError(errno.ENOSPC, NO_SPACE)
        landed = self.inner.put_if_absent(name, data)
        if step == "stored_then_error":
            raise OSError("connection reset after the body was sent")
        if step == "stored_then_refused":
            return False
        return landed

    def land_late(self) -> None:
        """The puts kept in flight reach the store now (the first one that finds the name free lands)."""
        for name, data in self.late:
            self.inner.put_if_absent(name, data)
        self.late.clear()


@pytest.fixture
def table(tmp_path):
    uri = str(tmp_path / "t")
    DeltaLog(uri, SCHEMA).commit(txns={"other": 1}, expected={}, info={})
    log = DeltaLog(uri)
    log._store = BrokenAnswers(log._store)
    return uri, log


def versions(uri: str) -> int:
    return open_table(uri, None).version()


@pytest.mark.parametrize("step", ["stored_then_error", "stored_then_refused"])
def test_a_stored_put_whose_answer_is_lost_is_this_commit(table, step):
    uri, log = table
    log._store.script = [step]
    assert log.commit(txns={"v": 7}, expected={"v": None}, info={}) == 2
    assert versions(uri) == 2 and open_table(uri, None).transaction_version("v") == 7
    assert log.commit(txns={"v": 9}, expected={"v": 7}, info={}) == 3   # the stream goes on from it


def test_a_put_that_failed_without_landing_is_put_again_at_the_same_version(table):
    uri, log = table
    log._store.script = ["error", "error"]
    log._store.get_errors = 1
    assert log.commit(txns={"v": 7}, expected={"v": None}, info={}) == 2
    assert log._store.puts == 3 and versions(uri) == 2


def test_a_store_failing_throughout_leaves_the_commit_in_doubt_and_a_late_landing_is_recognised(table):
    uri, log = table
    inner = log._store.inner
    late: list[tuple[str, bytes]] = []

    def in_flight(name: str, data: bytes) -> bool:   # every attempt hangs in the store, then times out
        late.append((name, data))
        raise OSError("read timeout")

    log._store.put_if_absent = in_flight
    with pytest.raises(CommitInDoubt) as e:
        log.commit(txns={"v": 7}, expected={"v": None}, info={})
    assert e.value.version == 2 and versions(uri) == 1 and log.version == 1
    assert len(late) == 3 and len({d for _, d in late}) == 1   # the same bytes at the same version
    assert inner.put_if_absent(*late[0])                         # one of them lands after all
    log.refresh()
    assert log.own_late == {"v": 2} and log.txn("v") == 7 and log.doubtful == {}
    with pytest.raises(TxnMoved) as moved:   # the caller still expects the txn from before it
        log.commit(txns={"v": 9}, expected={"v": None}, info={})
    assert moved.value.own_late == {"v"} and "earlier commit of this node" in str(moved.value)


def test_another_writers_version_is_not_taken_for_this_commit(table):
    """The version holds another commit: a real loss of the race, retried at the next version
    (no txn of this commit's moved), and the compare-and-swap still refuses a moved txn."""
    uri, log = table
    rival = DeltaLog(uri)
    rival.commit(txns={"w": 3}, expected={"w": None}, info={})          # version 2, unseen by ``log``
    log._store.script = ["stored_then_error"]                            # refused: version 2 exists
    assert log.commit(txns={"v": 7}, expected={"v": None}, info={}) == 3
    rival.refresh()
    rival.commit(txns={"v": 8}, expected={"v": 7}, info={})            # version 4 moves v's txn
    with pytest.raises(TxnMoved) as moved:
        log.commit(txns={"v": 9}, expected={"v": 7}, info={})
    assert moved.value.moved == {"v": 8} and not moved.value.own_late
    assert versions(uri) == 4


def test_every_commit_carries_a_txn_id_of_its_own(table):
    uri, log = table
    log.commit(txns={"v": 1}, expected={}, info={})
    log.commit(txns={"v": 2}, expected={}, info={})
    ids = [log._read(v)[0]["commitInfo"]["txnId"] for v in (2, 3)]
    assert all(ids) and ids[0] != ids[1]
    assert log._store.inner.get(_version_name(3)) is not None


# --- whose commit moved a txn ----------------------------------------------------------------------


def in_doubt(log: DeltaLog, **commit) -> None:
    """A commit whose every attempt stays in flight (kept in the wrapper's ``late``): CommitInDoubt."""
    log._store.script = ["in_flight"] * len(delta_log.PUT_ATTEMPT_DELAYS)
    with pytest.raises(CommitInDoubt):
        log.commit(**commit)


@pytest.mark.parametrize("reads_it", ["refresh", "a commit of another vchannel"])
def test_a_late_landing_already_read_is_not_blamed_for_another_writers_later_move(table, monkeypatch, reads_it):
    monkeypatch.setattr(delta_log, "PUT_ATTEMPT_DELAYS", (0.0,))
    uri, log = table
    in_doubt(log, txns={"v": 7}, expected={"v": None}, info={})
    log._store.land_late()                                              # version 2: this node's, late
    if reads_it == "refresh":
        log.refresh()
    else:
        assert log.commit(txns={"w": 1}, expected={"w": None}, info={}) == 3
    assert log.own_late == {"v": 2} and log.txn("v") == 7
    rival = DeltaLog(uri)
    rival.commit(txns={"v": 99}, expected={"v": 7}, info={})            # another writer takes v
    with pytest.raises(TxnMoved) as moved:
        log.commit(txns={"v": 8}, expected={"v": 7}, info={})
    assert moved.value.moved == {"v": 99} and moved.value.own_late == frozenset()
    assert "another writer" in str(moved.value) and "this node" not in str(moved.value)


def test_a_put_whose_answer_was_lost_is_this_nodes_when_the_commit_raises_on_a_later_step(table):
    """The put is in flight (its answer lost), the retry is refused as in flight with nothing there
    yet (409), and reading on fails: the commit raises a plain store error, not CommitInDoubt; its
    put lands afterwards, and the txn it moved is still known as this node's own."""
    uri, log = table
    log._store.script = ["in_flight", "conflict"]
    log._store.gets = ["ok", "ok", "error"]   # the two read-backs find nothing; reading on fails
    with pytest.raises(OSError, match="read timed out"):
        log.commit(txns={"v": 7}, expected={"v": None}, info={})
    assert list(log.doubtful) == [2] and log.version == 1
    log._store.land_late()
    log.refresh()
    assert log.own_late == {"v": 2}
    with pytest.raises(TxnMoved) as moved:
        log.commit(txns={"v": 8}, expected={"v": None}, info={})
    assert moved.value.own_late == {"v"} and "an earlier commit of this node" in str(moved.value)


@pytest.mark.parametrize("next_version", ["another writer's", "this node's next commit"])
def test_a_doubtful_commit_is_forgotten_once_its_version_holds_another(table, monkeypatch, next_version):
    monkeypatch.setattr(delta_log, "PUT_ATTEMPT_DELAYS", (0.0,))
    uri, log = table
    in_doubt(log, txns={"v": 7}, expected={"v": None}, info={})
    assert list(log.doubtful) == [2]
    if next_version == "another writer's":
        DeltaLog(uri).commit(txns={"w": 1}, expected={}, info={})
        log.refresh()
    else:
        assert log.commit(txns={"v": 7}, expected={"v": None}, info={}) == 2
    log._store.land_late()                     # too late: version 2 is taken, the put is refused
    log.refresh()
    assert log.doubtful == {} and log.own_late == {} and log.version == 2 == versions(uri)


# --- what the store's answers say ------------------------------------------------------------------


def test_a_put_the_store_refused_before_writing_raises_at_once_without_doubt(table, caplog):
    uri, log = table
    log._store.script = ["full"]
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger=delta_log.__name__), pytest.raises(NotLanded) as e:
        log.commit(txns={"v": 7}, expected={"v": None}, info={})
    assert time.monotonic() - started < 0.1 and log._store.puts == 1 and log._store.reads == 0
    assert caplog.records == [] and log.doubtful == {}
    assert out_of_space(e.value) == NO_SPACE
    assert log.commit(txns={"v": 7}, expected={"v": None}, info={}) == 2   # space is back: the same version


def test_a_refusal_before_writing_after_an_attempt_whose_answer_was_lost_is_still_in_doubt(table):
    uri, log = table
    log._store.script = ["in_flight", "full"]
    with pytest.raises(CommitInDoubt) as e:
        log.commit(txns={"v": 7}, expected={"v": None}, info={})
    assert list(log.doubtful) == [2] and out_of_space(e.value) == NO_SPACE


def test_a_put_refused_as_in_flight_waits_before_it_asks_again(table):
    """S3 answers 409 while another put of the version is in flight (here this commit's own first
    attempt, which lands 0.3 s later): the commit asks again after a short wait, not in a loop."""
    uri, log = table
    store = log._store
    started = time.monotonic()
    store.script = ["in_flight"] + ["conflict"] * 1000

    def conflict_until_landed(name: str, data: bytes) -> bool:
        if time.monotonic() - started >= 0.3 and store.late:
            store.land_late()
            store.script = []
        return BrokenAnswers.put_if_absent(store, name, data)

    store.put_if_absent = conflict_until_landed
    assert log.commit(txns={"v": 7}, expected={"v": None}, info={}) == 2
    assert versions(uri) == 2 and 3 <= store.puts <= 8


@pytest.fixture
def full_fs(tmp_path):
    """A table on a 1 MiB tmpfs (mounted here, as root; the test skips where that is refused),
    and a function that fills it and one that frees it."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused here, so no filesystem can be filled: {done.stderr.strip()}")
    filler = mnt / "filler"

    def fill() -> None:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for chunk in (b"\0" * 65536, b"\0" * 512):
                try:
                    while True:
                        os.write(fd, chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
        finally:
            os.close(fd)

    try:
        yield str(mnt / "t"), fill, filler.unlink
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_full_filesystem_refuses_the_commit_at_once_as_out_of_space(full_fs, caplog):
    uri, fill, free = full_fs
    DeltaLog(uri, SCHEMA).commit(txns={"other": 1}, expected={}, info={})
    log = DeltaLog(uri)
    fill()
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger=delta_log.__name__), pytest.raises(NotLanded) as e:
        log.commit(txns={"v": 7}, expected={"v": None}, info={})
    assert time.monotonic() - started < 0.1 and caplog.records == [] and log.doubtful == {}
    failure = classify(e.value, kind=FailureKind.COMMIT_FAILED, where=uri, step="committing")
    assert failure.kind is FailureKind.STORAGE_FULL and NO_SPACE in failure.message
    assert [n for n in os.listdir(f"{uri}/_delta_log") if n.startswith(".tmp")] == []   # nothing left behind
    free()
    assert log.commit(txns={"v": 7}, expected={"v": None}, info={}) == 2 == versions(uri)


def test_a_failed_directory_fsync_after_the_link_fails_the_commit(table, monkeypatch):
    """The version is in the log but its name may not survive a power cut: the commit raises (not
    in doubt, no read-back that would count it done); a refresh knows it as this node's own."""
    uri, log = table
    log._store = log._store.inner   # the local log itself
    failed: list[str] = []
    real = durable.sync_dir

    def sync_dir(path: str) -> None:
        if not failed:
            failed.append(path)
            raise OSError(errno.EIO, "Input/output error")
        real(path)

    monkeypatch.setattr(durable, "sync_dir", sync_dir)
    with pytest.raises(NotDurable):
        log.commit(txns={"v": 7}, expected={"v": None}, info={})
    assert log.version == 1 and list(log.doubtful) == [2] and versions(uri) == 2
    log.refresh()
    assert log.own_late == {"v": 2}


def test_a_version_found_after_an_unsure_answer_is_made_durable_before_it_counts(table, monkeypatch):
    """The put was refused (an NFS ``link`` retransmitted: EEXIST for its own first call), and the
    version holds this commit, linked where this process never fsynced the directory: the
    read-back fsyncs it, and a failure there fails the commit."""
    uri, log = table
    store = log._store
    log_dir = store.inner.dir

    def linked_by_a_first_call(name: str, data: bytes) -> bool:
        store.puts += 1
        _LocalLog(log_dir, sync=False).put_if_absent(name, data)
        return False

    def sync_dir(path: str) -> None:
        raise OSError(errno.EIO, "Input/output error")

    store.put_if_absent = linked_by_a_first_call
    monkeypatch.setattr(durable, "sync_dir", sync_dir)
    with pytest.raises(NotDurable):
        log.commit(txns={"v": 7}, expected={"v": None}, info={})
    assert list(log.doubtful) == [2] and versions(uri) == 2
