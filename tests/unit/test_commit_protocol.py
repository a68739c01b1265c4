"""The driver's commit protocol on real Delta tables (no Spark): txn CAS per vchannel, one commit for
several vchannels, a refused vchannel alone, drops, recovery of each vchannel's state."""

import functools
import threading

import pyarrow as pa
import pytest

from deltanode.datacoord.catalog import CollectionRecord, OwnCatalog
from deltanode.datacoord.coordinator import DataCoord
from deltanode.datacoord.vchannel_info import vchannel_info
from deltanode.delta import delta_log
from deltanode.delta.delta_log import DeltaLog, TxnMoved
from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import UnsupportedStorage
from deltanode.delta.tables import open_table, read_table
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.records import ReplayState
from deltanode.state import meta
from deltanode.state.channel_state import ChannelState, SegmentMeta, SegmentState
from deltanode.state.commit import (
    CollectionCommitter,
    QuarantineLog,
    VchannelSync,
    Watermarks,
    discard,
)
from deltanode.vchannel.start_state import (
    TopicRecreated,
    UnknownSegments,
    check_topic,
    initial_state,
)
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import CollectionLayout, schema_from_json

from ..races import race_for_one_step

LAYOUT = CollectionLayout.from_proto(schema_from_json(
    {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}, "c"))


def written(storage: StorageLayout, pks: list[int], segment: int = 5, partition: int = 1, deletes=()):
    """Binlog files of one task for one vchannel: rows of ``segment``, and deletes."""
    writer = BinlogWriter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema())
    if pks:
        n = len(pks)
        columns = [pa.array(pks, pa.int64()), pa.array(range(100, 100 + n), pa.int64()), pa.array(pks, pa.int64())]
        writer.add_insert(segment, partition, columns, n, 8 * 3 * n, 0, 100, 99 + n)
    if deletes:
        n = len(deletes)
        writer.add_delete(partition, pa.array(deletes, pa.int64()), pa.array([200] * n, pa.int64()))
    return tuple(writer.close())


def sync(vchannel, start, end, files, *, delete=None, dropped=frozenset(), segments=None):
    state = ChannelState(vchannel, 1, "p", checkpoint_offset=end, segments=segments or {})
    return VchannelSync(state, Watermarks(start, delete), files, dropped)


def committer(storage):
    return CollectionCommitter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema(), QuarantineLog(storage))


def pks_in(storage, table="insert"):
    uri = storage.insert_log(1) if table == "insert" else storage.delta_log(1)
    return sorted(read_table(storage, uri).column("pk").to_pylist())


def test_one_commit_carries_several_vchannels_each_with_its_txn_and_state(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    result = c.commit([sync("a", None, 10, written(storage, [1, 2])), sync("b", None, 7, written(storage, [3]))])
    assert set(result.committed) == {"a", "b"} and result.refused == {}
    table = open_table(storage.insert_log(1))
    assert table.version() == result.version == 1   # table creation, then ONE commit
    assert (table.transaction_version("a"), table.transaction_version("b")) == (10, 7)
    assert pks_in(storage) == [1, 2, 3]
    assert meta.channel_state(storage, 1, "a").checkpoint_offset == 10
    assert meta.channel_state(storage, 1, "b").checkpoint_offset == 7


def test_a_vchannel_another_writer_moved_is_refused_alone(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    c.commit([sync("a", None, 10, written(storage, [1])), sync("b", None, 10, written(storage, [2]))])
    # Another node took "b" over and committed [10, 20) with its own writer.
    other = committer(storage)
    other.commit([sync("b", 10, 20, written(storage, [3]))])
    stale = written(storage, [4])
    result = c.commit([sync("a", 10, 20, written(storage, [5])), sync("b", 10, 20, stale)])
    assert set(result.committed) == {"a"} and "another writer owns the channel" in result.refused["b"]
    assert not (tmp_path / "insert_log" / "1" / stale[0].path).exists()   # its files are gone
    assert pks_in(storage) == [1, 2, 3, 5]
    table = open_table(storage.insert_log(1))
    assert (table.transaction_version("a"), table.transaction_version("b")) == (20, 20)


def test_deletes_go_first_with_their_own_txn_and_a_drop_removes_committed_files(tmp_path):
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    result = c.commit([sync("a", None, 10, written(storage, [1, 2], segment=5) + written(storage, [3], segment=6),
                            delete=None)])
    result = c.commit([sync("a", 10, 20, written(storage, [], deletes=[1]), delete=None)])
    assert result.committed["a"] == Watermarks(20, 20, None)
    assert pks_in(storage, "delete") == [1]
    assert open_table(storage.delta_log(1)).transaction_version("a") == 20
    # Segment 5 is dropped by the next batch: its committed file is removed, a new file of it never added.
    late = written(storage, [4], segment=5)
    c.commit([sync("a", 20, 30, late, delete=20, dropped=frozenset({5}),
                   segments={5: SegmentMeta(5, 1, SegmentState.DROPPED)})])
    assert pks_in(storage) == [3]
    assert not (tmp_path / "insert_log" / "1" / late[0].path).exists()


def test_the_log_is_a_compare_and_swap_between_writers_that_do_not_see_each_other(tmp_path):
    storage = StorageLayout(str(tmp_path))
    committer(storage).commit([sync("a", None, 1, ())])
    one, two = DeltaLog(storage.insert_log(1)), DeltaLog(storage.insert_log(1))
    one.commit(txns={"a": 2}, expected={"a": 1}, info={})
    two.commit(txns={"b": 1}, expected={"b": None}, info={})       # another app: lands on the next version
    assert (one.version, two.version) == (2, 3)
    with pytest.raises(TxnMoved) as e:
        DeltaLog(storage.insert_log(1)).commit(txns={"a": 3}, expected={"a": 1}, info={})
    assert e.value.moved == {"a": 2}
    racers = [DeltaLog(storage.insert_log(1)) for _ in range(4)]
    assert race_for_one_step(racers, "a", 2) == ["refused"] * 3 + ["won"]
    assert open_table(storage.insert_log(1)).transaction_version("a") == 3


def test_checkpoints_are_written_every_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(delta_log, "CHECKPOINT_INTERVAL", 5)
    storage = StorageLayout(str(tmp_path))
    c = committer(storage)
    for i in range(6):
        c.commit([sync("a", i or None, i + 1, written(storage, [i]))])
    log_dir = tmp_path / "insert_log" / "1" / "_delta_log"
    for _ in range(100):
        if (log_dir / "_last_checkpoint").exists():
            break
        threading.Event().wait(0.05)
    checkpoints = [int(p.name[:20]) for p in log_dir.glob("*.checkpoint.parquet")]
    assert checkpoints and min(checkpoints) >= 5   # of the table as the background thread found it
    table = open_table(storage.insert_log(1))
    assert table.version() == 6 and table.transaction_version("a") == 6 and len(pks_in(storage)) == 6


def test_resuming_at_the_committed_offset_filters_only_segments_delta_does_not_know(tmp_path):
    storage = StorageLayout(str(tmp_path))
    committer(storage).commit([sync("v", None, 10, written(storage, [1, 2]),
                                    segments={5: SegmentMeta(5, 1, num_rows=2, dml_ts=101)})])
    info = VchannelInfo(collectionID=1, channelName="p_1v0")
    committed = meta.channel_state(storage, 1, "v")
    assert initial_state(committed, info).replay is None
    foreign = info.unflushedSegments.add(ID=9, partitionID=1, num_of_rows=3)
    foreign.dml_position.timestamp = 500
    state = initial_state(committed, info)
    assert state.checkpoint_offset == 10 and set(state.segments) == {5, 9}
    assert state.replay == ReplayState(unflushed=((9, 500),))
    assert 9 not in committed.segments   # the committed state is not modified


def test_a_restart_inside_the_replay_window_goes_on_with_the_committed_filter_and_seek(tmp_path):
    """A node killed after committing batches of a fresh seek, before the replay filter emptied
    and before the seek's TimeTick: its successor resumes both where the commit left them."""
    storage = StorageLayout(str(tmp_path))
    state = ChannelState("v", 1, "p", checkpoint_offset=10, seek_ts=1000,
                         replay=ReplayState(flushed=((3, 1040),)),
                         segments={3: SegmentMeta(3, 1, SegmentState.FLUSHED, dml_ts=1040)})
    committer(storage).commit([VchannelSync(state, Watermarks(None, None), written(storage, [1]))])
    committed = meta.channel_state(storage, 1, "v")
    info = VchannelInfo(collectionID=1, channelName="p_1v0")
    info.unflushedSegments.add(ID=9, partitionID=1).dml_position.timestamp = 1020
    resumed = initial_state(committed, info)
    assert resumed.replay == ReplayState(flushed=((3, 1040),), unflushed=((9, 1020),)) and resumed.seek_ts == 1000


def test_segments_named_by_id_only_come_from_delta_or_the_vchannel_is_refused(tmp_path):
    """Milvus 2.3/2.4's DataCoord fills only VchannelInfo fields 7-9 (segment ids)."""
    storage = StorageLayout(str(tmp_path))
    committer(storage).commit([sync("v", None, 10, written(storage, [1, 2]),
                                    segments={5: SegmentMeta(5, 1, num_rows=2, dml_ts=101)})])
    committed = meta.channel_state(storage, 1, "v")
    known = VchannelInfo(collectionID=1, channelName="p_1v0", flushedSegmentIds=[5])
    state = initial_state(committed, known)
    assert state.segments[5] == committed.segments[5] and state.replay is None   # Delta's meta, partition and all
    unknown = VchannelInfo(collectionID=1, channelName="p_1v0", flushedSegmentIds=[5, 77], unflushedSegmentIds=[78])
    with pytest.raises(UnknownSegments, match=r"segment\(s\) \[77, 78\] by id only"):
        initial_state(committed, unknown)
    with pytest.raises(UnknownSegments):
        initial_state(None, known)   # a vchannel Delta never saw: nothing to fill them from


def test_discard_removes_uncommitted_files_from_their_tables(tmp_path):
    storage = StorageLayout(str(tmp_path))
    files = written(storage, [1, 2], deletes=[1])
    paths = [tmp_path / ("insert_log" if f.table == "insert" else "delta_log") / "1" / f.path for f in files]
    assert len(paths) == 2 and all(p.exists() for p in paths)
    discard(storage, 1, list(files) * 2)  # twice over: a file already gone is no error
    assert not any(p.exists() for p in paths)
    assert open_table(storage.insert_log(1)) is None  # nothing was committed


def test_a_store_without_put_if_absent_is_refused_with_a_clear_error(tmp_path):
    for uri in ("gs://bucket/delta/insert_log/1", "hdfs://nn/delta/insert_log/1"):
        with pytest.raises(UnsupportedStorage, match="put-if-absent"):
            DeltaLog(uri)
        with pytest.raises(UnsupportedStorage, match="put-if-absent"):
            StorageLayout(uri)


def test_a_hand_overs_positions_name_the_vchannel(tmp_path):
    """Milvus's MsgPosition.channel_name holds the vchannel; the msgID is its pchannel's offset."""
    storage = StorageLayout(str(tmp_path))
    record = CollectionRecord(1, "c", "", 1, ["p_1v0"], ["p"], {"p": 4}, 77)
    start = functools.partial(OwnCatalog(None, "r").start_position, record, "p_1v0")
    fresh = vchannel_info(meta.channel_state(storage, 1, "p_1v0"), record, "p_1v0", start)
    assert fresh.seek_position.channel_name == "p_1v0"
    assert CODECS["kafka"].from_msg_id(fresh.seek_position.msgID) == 5 and fresh.seek_position.timestamp == 77
    committer(storage).commit([sync("p_1v0", None, 10, written(storage, [1]),
                                    segments={5: SegmentMeta(5, 1, num_rows=1, dml_offset=10, dml_ts=101)})])
    info = vchannel_info(meta.channel_state(storage, 1, "p_1v0"), record, "p_1v0", start)
    positions = [info.seek_position, info.unflushedSegments[0].dml_position, info.unflushedSegments[0].start_position]
    assert {p.channel_name for p in positions} == {"p_1v0"}
    assert CODECS["kafka"].from_msg_id(info.seek_position.msgID) == 10


class OneCollection(OwnCatalog):
    """The catalog of one collection, without etcd."""

    def __init__(self, record: CollectionRecord) -> None:
        super().__init__(None, "r")
        self.record = record

    def collections(self) -> list[CollectionRecord]:
        return [self.record]


def test_a_hand_over_resumes_at_what_was_committed_since_the_coordinator_first_looked(tmp_path):
    """The coordinator follows each collection's insert_log from its first look (before its table
    exists, here) instead of opening it per hand-over: each hand-over still starts at the newest checkpoint."""
    storage = StorageLayout(str(tmp_path))
    record = CollectionRecord(1, "c", "", 1, ["p_1v0", "p_1v1"], ["p"], {"p": 4}, 77)
    coord = DataCoord(None, "r", storage, CODECS["kafka"], OneCollection(record))
    seek = lambda vchannel: CODECS["kafka"].from_msg_id(coord.recovery(vchannel).seek_position.msgID)  # noqa: E731
    assert seek("p_1v0") == 5                                    # no table yet: the catalog's start
    committer(storage).commit([sync("p_1v0", None, 10, written(storage, [1]))])
    assert (seek("p_1v0"), seek("p_1v1")) == (10, 5)
    committer(storage).commit([sync("p_1v0", 10, 20, written(storage, [2])),
                               sync("p_1v1", None, 30, written(storage, [3]))])
    assert (seek("p_1v0"), seek("p_1v1")) == (20, 30)


def test_the_topic_id_goes_with_the_checkpoint_and_a_new_one_is_refused(tmp_path):
    """The id the broker gave the pchannel topic is committed with the vchannel's state; a load
    that finds another id refuses (the topic was created again); no id on either side: no check."""
    storage = StorageLayout(str(tmp_path))
    state = ChannelState("v", 1, "p", checkpoint_offset=10, topic_id="A")
    committer(storage).commit([VchannelSync(state, Watermarks(None), written(storage, [1]))])
    committed = meta.channel_state(storage, 1, "v")
    assert committed.topic_id == "A"
    check_topic(committed, "A")
    check_topic(committed, "")                            # the broker gives none (Pulsar) or cannot answer
    check_topic(ChannelState("v", 1, "p", checkpoint_offset=10), "B")   # committed before ids were kept
    check_topic(None, "B")                                # never committed: starts at its VchannelInfo
    with pytest.raises(TopicRecreated, match="p was deleted and created again .* offset 10 was committed in A"):
        check_topic(committed, "B")


def test_a_log_followed_from_before_its_table_exists_sees_every_commit(tmp_path):
    """The coordinator follows a collection it saw before its first commit from version 0, as
    JSON: every txn and every dropped vchannel, without a delta-rs snapshot."""
    storage = StorageLayout(str(tmp_path))
    follower = DeltaLog.follow(storage.insert_log(1))
    assert follower.refresh() == [] and follower.version == -1    # no table yet
    c = committer(storage)
    c.commit([sync("a", None, 10, written(storage, [1])), sync("b", None, 10, written(storage, [2]))])
    assert meta.dropped_vchannels(follower.refresh()) == set() and follower.version == 1
    dropped = ChannelState("b", 1, "p", checkpoint_offset=20, collection_dropped=True)
    c.commit([sync("a", 10, 20, written(storage, [3])), VchannelSync(dropped, Watermarks(10), ())])
    assert meta.dropped_vchannels(follower.refresh()) == {"b"}
    assert (follower.version, follower.txn("a"), follower.txn("b"), follower.txn("c")) == (2, 20, 20, None)
    assert meta.channel_state_in(follower, "b").collection_dropped
