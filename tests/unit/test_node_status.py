"""The DataNode status documents admin health reads: written, read back, stale, persisting."""

from deltanode.datanode.status import (
    BLOCK,
    FORGET_AFTER,
    NodeStatus,
    read_statuses,
    remove_status,
    write_status,
)
from deltanode.delta.layout import StorageLayout


def status(name="host-1", written_at=1000.0, running=2, vchannels=2, **kw) -> NodeStatus:
    return NodeStatus(name, 7, written_at, 10.0, vchannels, running, **kw)


def test_written_documents_are_read_back_and_forgotten_after_an_hour(tmp_path):
    storage = StorageLayout(str(tmp_path))
    assert read_statuses(storage) == []      # no directory yet
    write_status(storage, status("a", etcd_unreachable_since=990.0, etcd_error="Deadline Exceeded"))
    write_status(storage, status("old", written_at=1000.0 - FORGET_AFTER - 1))
    (tmp_path / "_deltanode" / "status" / "torn.json").write_text('{"name": "to')   # being written
    assert read_statuses(storage, now=1001.0) == [status("a", etcd_unreachable_since=990.0,
                                                         etcd_error="Deadline Exceeded")]
    remove_status(storage, "a")
    remove_status(storage, "a")   # idempotent
    assert read_statuses(storage, now=1001.0) == []


def test_a_node_persists_while_fresh_and_none_of_its_vchannels_fails():
    assert status().persisting(now=1025.0)
    assert not status().persisting(now=1031.0)                          # three intervals without a report
    assert not status(running=1, failing={"v": "CommitRefused: ..."}).persisting(now=1001.0)
    assert status(running=0, vchannels=0).persisting(now=1001.0)      # no channels yet is not a fault


def test_a_node_whose_storage_is_full_does_not_persist_and_its_document_says_why(tmp_path):
    full = status(storage_full="storage full: /d: No space left on device", storage_full_since=990.0)
    assert not full.persisting(now=1001.0)
    storage = StorageLayout(str(tmp_path))
    write_status(storage, full)
    written = tmp_path / "_deltanode" / "status" / "host-1.json"
    assert written.stat().st_size % BLOCK == 0   # whole blocks: the next one can overwrite them in place
    assert read_statuses(storage, now=1001.0) == [full]
    assert not list(written.parent.glob("*.tmp"))
