"""Loading a vchannel's flowgraph from Delta (``pipeline.loader.VchannelLoader``), on real Delta
tables: from its committed state and txns (else its VchannelInfo), again after a failure, with the
broker's topic id checked and cached per pchannel, and a mirror's persisted segments imported
first (the broker's metadata client and Milvus are fakes)."""

from __future__ import annotations

import time

import pytest

from deltanode.delta.tables import open_table
from deltanode.failure.classify import Failure
from deltanode.failure.kinds import FailureKind
from deltanode.pipeline import loader as loader_module
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.state.channel_state import ChannelState, SegmentMeta, SegmentState
from deltanode.state.commit import VchannelSync, Watermarks
from deltanode.vchannel.flowgraph import FlowgraphStatus
from deltanode.vchannel.start_state import TopicRecreated
from deltanode.wire.datapb import VchannelInfo

from .fakes import FakeBrokerMetadata
from .vchannels import flowgraph, loaded, read_deletes, read_rows, stages


def commit(s, *fgs) -> None:
    s.syncs.sync({fg.vchannel: fg for fg in fgs}, time.monotonic(), CycleReport(0))
    assert not any(fg.uncommitted for fg in fgs)


def test_a_vchannel_that_never_committed_starts_at_its_handover_and_its_collection_gets_its_table(tmp_path):
    s = stages(tmp_path)
    fg = flowgraph(1, seek=42)
    s.loader.load(fg)
    assert (fg.status, fg.next_offset, fg.committed, fg.watermarks) == (
        FlowgraphStatus.RUNNING, 42, None, Watermarks())
    table = open_table(s.storage.insert_log(1))   # created empty now, not by the first commit
    assert table is not None and table.version() == 0 and table.transaction_version(fg.vchannel) is None


def test_a_vchannel_starts_from_its_committed_state_and_txns(tmp_path):
    s = stages(tmp_path)
    fg = loaded(s, 1)
    read_rows(fg, s.storage, [1, 2, 3])
    read_deletes(fg, s.storage, [2])
    commit(s, fg)
    again = flowgraph(1, seek=0)   # a restart: the VchannelInfo's position is behind Delta's
    stages(tmp_path).loader.load(again)
    assert again.next_offset == 20 and again.committed is not None and again.committed.rows == 3
    assert again.watermarks == Watermarks(insert=20, delete=20)
    assert again.working.segments[5].num_rows == 3


def test_a_failed_vchannel_loaded_again_drops_what_it_had_not_committed(tmp_path):
    s = stages(tmp_path)
    fg = loaded(s, 1)
    read_rows(fg, s.storage, [1])
    commit(s, fg)
    read_rows(fg, s.storage, [2])
    fg.fail(Failure(kind=FailureKind.TASK, message="worker lost"), time.monotonic())
    loads = fg.loads
    s.loader.load(fg)
    assert fg.status == FlowgraphStatus.RUNNING and fg.loads == loads + 1
    assert (fg.next_offset, fg.batches.pending, fg.watermarks.insert) == (10, [], 10)


def test_the_topic_id_is_asked_once_per_pchannel_until_forgotten(tmp_path):
    s = stages(tmp_path)
    broker = FakeBrokerMetadata(topic_ids={"dml_0": "T0", "dml_1": "T1"})
    s.loader.watermarks = broker   # type: ignore[assignment]
    fgs = [loaded(s, cid, 0) for cid in (1, 2)] + [loaded(s, 3, 1)]
    assert [fg.working.topic_id for fg in fgs] == ["T0", "T0", "T1"]
    assert broker.asked == ["dml_0", "dml_1"]   # a start's burst asks each pchannel once
    s.loader.forget("dml_0")
    s.loader.load(fgs[0])
    s.loader.load(fgs[2])
    assert broker.asked == ["dml_0", "dml_1", "dml_0"]


def test_a_topic_id_is_asked_again_once_its_ttl_is_over(tmp_path, monkeypatch):
    monkeypatch.setattr(loader_module, "TOPIC_ID_TTL", 0.0)
    s = stages(tmp_path)
    broker = FakeBrokerMetadata(topic_ids={"dml_0": "T0"})
    s.loader.watermarks = broker   # type: ignore[assignment]
    loaded(s, 1)
    loaded(s, 2)
    assert broker.asked == ["dml_0", "dml_0"]


def test_without_a_topic_id_the_check_is_skipped_and_the_vchannel_loads(tmp_path):
    s = stages(tmp_path)
    assert loaded(s, 1).working.topic_id == ""   # the broker's client is not started yet
    broker = FakeBrokerMetadata(topic_error="dml_0: not leader")
    s.loader.watermarks = broker   # type: ignore[assignment]
    fg = loaded(s, 2)
    assert fg.status == FlowgraphStatus.RUNNING and fg.working.topic_id == "" and broker.asked == ["dml_0"]
    broker.topic_error, broker.topic_ids = None, {"dml_0": "T0"}
    assert loaded(s, 3).working.topic_id == "T0"   # a failed ask is not cached


def test_a_topic_created_again_since_the_checkpoint_is_refused(tmp_path):
    s = stages(tmp_path)
    s.loader.watermarks = FakeBrokerMetadata(topic_ids={"dml_0": "T0"})   # type: ignore[assignment]
    fg = loaded(s, 1)
    read_rows(fg, s.storage, [1])
    commit(s, fg)
    restarted = stages(tmp_path)
    restarted.loader.watermarks = FakeBrokerMetadata(topic_ids={"dml_0": "T9"})   # type: ignore[assignment]
    again = flowgraph(1)
    with pytest.raises(TopicRecreated, match="deleted and created again"):
        restarted.loader.load(again)
    assert again.batches.state is None


class FakeMilvusImport:
    """Milvus's persisted segments of a vchannel, imported as ``milvus_import.importer`` does: one
    commit of the vchannel's state, with ``progressed`` called at it."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    def run(self, vchannel, collection_id, schema, committer, node_id, progressed=lambda: None) -> None:
        self.runs.append(vchannel)
        state = ChannelState(vchannel, collection_id, "dml_0", checkpoint_offset=70, checkpoint_ts=700,
                             segments={77: SegmentMeta(77, 1, SegmentState.FLUSHED, num_rows=5)})
        with committer.lock:
            assert committer.commit([VchannelSync(state, committer.watermarks(vchannel), ())]).committed
        progressed()


def test_a_mirrored_vchannel_handed_over_with_segments_is_imported_first_and_starts_after_the_import(tmp_path):
    importer = FakeMilvusImport()
    s = stages(tmp_path, importer=importer)   # type: ignore[arg-type]
    fg = flowgraph(1, seek=3)
    fg.info.flushedSegmentIds.append(77)
    steps: list[str] = []
    s.loader.load(fg, lambda: steps.append("progress"))
    assert importer.runs == [fg.vchannel] and steps == ["progress"]
    assert (fg.next_offset, fg.working.checkpoint_ts, fg.watermarks.insert) == (70, 700, 70)
    assert fg.working.segments[77].state == SegmentState.FLUSHED and fg.working.replay is None
    assert list(fg.info.flushedSegmentIds) == [] and isinstance(fg.info, VchannelInfo)
    s.loader.load(fg)   # committed now: loaded again from Delta, not imported again
    assert importer.runs == [fg.vchannel]
