"""A pchannel whose high watermark cannot be read fails its own vchannels, and the cycle reads the
others."""

from __future__ import annotations

import threading
import time

from deltanode.config.sections.pipeline import Limits, SealSettings
from deltanode.delta.layout import StorageLayout
from deltanode.mq.broker import Broker, BrokerError
from deltanode.pipeline.cycle import CycleRunner
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.pipeline.registry import VchannelRegistry
from deltanode.pipeline.vchannel_stops import VchannelStops
from deltanode.records import TaskOutput, TaskSpec
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import FlowgraphStatus, VchannelFlowgraph
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import schema_from_json

SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}
BROKEN = pchannel_name("dml", 1)


class _Highs:
    """The broker's answer: pchannel ``BROKEN`` cannot be read."""

    def highs(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int | BrokerError]:
        return {key: BrokerError(f"{key[0]}: not leader") if key[0] == BROKEN else 6 for key in keys}


class _Runner(CycleRunner):
    """The cycle runner with its Spark job replaced by a record of the tasks it was given."""

    def _run_tasks(self, specs: list[TaskSpec]) -> tuple[list[TaskOutput], list]:
        self.specs = specs
        return [], []


def test_a_pchannel_without_a_watermark_fails_its_vchannels_and_the_cycle_reads_the_others(tmp_path):
    registry = VchannelRegistry()
    for c in range(3):
        for k in range(2):
            info = VchannelInfo(collectionID=100 + c, channelName=vchannel_name(pchannel_name("dml", k), 100 + c, k))
            info.seek_position.msgID = CODECS["kafka"].to_msg_id(1)
            fg = VchannelFlowgraph(info, schema_from_json(SCHEMA, f"c{c}"), node_id=1)
            fg.load(None, Watermarks(), time.monotonic())
            registry.add(fg)
    storage = StorageLayout(str(tmp_path))
    runner = _Runner(sc=None, storage=storage, broker=Broker("kafka", "127.0.0.1:1"),  # type: ignore[arg-type]
                     limits=Limits(), seal=SealSettings(), registry=registry,
                     failures=VchannelStops(storage=storage, fence=None, load=lambda fg: None,
                                            forget_topic=lambda pchannel: None),
                     flushes=dict, stopping=threading.Event())
    runner.watermarks = _Highs()   # type: ignore[assignment]
    members = registry.begin_cycle()
    report = CycleReport(1)
    try:
        launched = runner.start(members, report, time.monotonic())
        assert launched.job is not None
        launched.job.result()
    finally:
        runner.close()
    broken = sorted(v for v, fg in members.items() if fg.pchannel == BROKEN)
    assert sorted(report.failed) == broken and len(broken) == 3
    assert all(members[v].status == FlowgraphStatus.FAILED for v in broken)
    read = {(p.pchannel, p.first, p.end): sorted(p.members) for p in launched.plan.ranges}
    assert read == {(pchannel_name("dml", 0), 1, 6): sorted(v for v in members if v not in broken)}
    assert [spec.pieces for spec in runner.specs] and all(p.pchannel != BROKEN for s in runner.specs for p in s.pieces)
