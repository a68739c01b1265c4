"""A task returns portions only for the vchannels that saw a message of their own; the others'
(the idle ones) are made from the range's stats where the output is read."""

from __future__ import annotations

import numpy as np

from deltanode.delta.layout import StorageLayout
from deltanode.executor.contexts import TaskContexts
from deltanode.executor.dispatch import PchannelDispatcher
from deltanode.executor.route import VchannelRouter
from deltanode.failure.classify import Failure
from deltanode.failure.kinds import FailureKind
from deltanode.mq.milvus_producer import field_data
from deltanode.records import Portion, PortionStats, ReadRange, RouteContext
from deltanode.wire.milvus_proto import common_pb2, msg_pb2
from deltanode.wire.schema import CollectionLayout, schema_from_json

CID, PCHANNEL = 7, "dn-dml_0"
BUSY, IDLE, LATE = f"{PCHANNEL}_7v0", f"{PCHANNEL}_8v0", f"{PCHANNEL}_9v0"
LAYOUT = CollectionLayout.from_proto(schema_from_json(
    {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}, "c"))


def tick(ts: int) -> bytes:
    return msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick,
                                                       timestamp=ts)).SerializeToString()


def insert(ts: int, pk: int) -> bytes:
    req = msg_pb2.InsertRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert, timestamp=ts),
                                shardName=BUSY, collectionID=CID, partitionID=1, segmentID=100,
                                timestamps=[ts], rowIDs=[pk], num_rows=1, version=msg_pb2.ColumnBased)
    req.fields_data.extend(field_data(f, 1, np.random.default_rng(pk), pk) for f in LAYOUT.fields)
    return req.SerializeToString()


def dispatch(tmp_path, messages: list[bytes], first: int = 10) -> PchannelDispatcher:
    """The range ``[first, first + len(messages))`` read for BUSY and IDLE (next offset ``first``)
    and LATE (next offset ``first + 2``)."""
    storage = StorageLayout(str(tmp_path))
    end = first + len(messages)
    contexts = [RouteContext(v, CID, "c", PCHANNEL, 0, start) for v, start in
                ((BUSY, first), (IDLE, first), (LATE, first + 2))]
    dispatcher = PchannelDispatcher(ReadRange(PCHANNEL, 0, first, end, (BUSY, IDLE, LATE)), TaskContexts.of(contexts),
                                    lambda ctx, a, b: VchannelRouter(ctx, LAYOUT, storage, a, b))
    for offset, value in enumerate(messages, start=first):
        dispatcher.on_message(offset, value)
    return dispatcher


def test_only_routed_vchannels_come_back_and_the_idle_ones_are_made_from_the_range(tmp_path):
    portions, read = dispatch(tmp_path, [tick(100), insert(101, 1), tick(102), tick(103)]).finish()
    assert [p.vchannel for p in portions] == [BUSY] and read.routed == {BUSY}
    assert portions[0].stats.inserted_rows == 1 and portions[0].stats.max_tick == 103
    assert (read.tick, read.tick_offset) == (103, 13)
    assert read.idle_portion(IDLE, 10) == Portion(IDLE, 10, 14, stats=PortionStats(103))
    assert read.idle_portion(LATE, 12) == Portion(LATE, 12, 14, stats=PortionStats(103))


def test_an_idle_vchannel_that_starts_after_the_last_tick_has_no_tick(tmp_path):
    _, read = dispatch(tmp_path, [tick(100), insert(101, 1), tick(102)]).finish()
    assert read.idle_portion(LATE, 12) == Portion(LATE, 12, 13, stats=PortionStats(102))
    _, read = dispatch(tmp_path, [tick(100), tick(101), insert(102, 1), insert(103, 2)]).finish()
    assert read.idle_portion(LATE, 12) == Portion(LATE, 12, 14, stats=PortionStats(0))


def test_a_broker_error_fails_the_idle_vchannels_too(tmp_path):
    dispatcher = dispatch(tmp_path, [tick(100)])
    dispatcher.broker_failed("partition gone")
    portions, read = dispatcher.finish()
    gone = Failure(kind=FailureKind.BROKER, message="partition gone")
    assert portions == [] and read.error == gone
    assert read.idle_portion(IDLE, 10) == Portion(IDLE, 10, 11, error=gone)
