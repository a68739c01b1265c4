"""A commit whose put the store answered wrongly: stored but answered with an error, stored and then
refused by a retry (412 for the writer's own version), or failing throughout. The log store is a
real one (a table on disk) behind a wrapper that breaks its answers; what is checked is that the
commit is settled by what the version holds, never by the answer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltanode.storage.delta_log import CommitInDoubt, DeltaLog, TxnMoved, _version_name
from deltanode.storage.tables import open_table

SCHEMA = pa.schema([("pk", pa.int64())])


class BrokenAnswers:
    """A ``LogStore`` whose next puts follow a script: ``stored_then_error`` (the put lands, the
    caller gets an exception), ``stored_then_refused`` (lands; the caller is told the name exists,
    as a retried conditional PUT is), ``error`` (nothing lands); ``get_errors`` fails reads."""

    def __init__(self, inner) -> None:
        self.inner, self.script, self.get_errors, self.puts = inner, [], 0, 0

    def get(self, name: str) -> bytes | None:
        if self.get_errors:
            self.get_errors -= 1
            raise OSError("read timed out")
        return self.inner.get(name)

    def surely_empty(self) -> bool:
        return self.inner.surely_empty()

    def put_if_absent(self, name: str, data: bytes) -> bool:
        self.puts += 1
        step = self.script.pop(0) if self.script else "ok"
        if step == "error":
            raise OSError("500 InternalError")
        landed = self.inner.put_if_absent(name, data)
        if step == "stored_then_error":
            raise OSError("connection reset after the body was sent")
        if step == "stored_then_refused":
            return False
        return landed


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
    assert log.own_late == {2} and log.txn("v") == 7
    with pytest.raises(TxnMoved) as moved:   # the caller still expects the txn from before it
        log.commit(txns={"v": 9}, expected={"v": None}, info={})
    assert moved.value.own_late and "earlier commit of this node" in str(moved.value)


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
