"""After a seek, DeltaNode keeps exactly the inserts Milvus's DataNode keeps.

Generated pchannel logs (ticks, inserts whose EndTs may pass the next tick, inserts before the
seek), cut into batches at random offsets, run through the real dispatcher, routers, state
advance and binlog files; compared with a transliteration of Milvus's seek loop
(``MqTtMsgStream.Seek``), pack cutting (``bufMsgPackToChannel``) and ddNode replay filter
(``tryToFilterSegmentInsertMessages``) written independently of DeltaNode's code. Seeded, so a
failure names its case.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.executor.contexts import TaskContexts
from deltanode.executor.dispatch import PchannelDispatcher
from deltanode.executor.replay_filter import ReplayFilter
from deltanode.executor.route import VchannelRouter
from deltanode.mq.milvus_producer import field_data
from deltanode.records import ReadRange, RouteContexts, TableKind
from deltanode.state.commit import Watermarks
from deltanode.vchannel.flowgraph import VchannelFlowgraph
from deltanode.vchannel.state_update import advance
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.milvus_proto import common_pb2, msg_pb2
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import CollectionLayout, schema_from_json

CID, PCHANNEL = 7, "dn-dml_0"
VCHANNEL = f"{PCHANNEL}_{CID}v0"
SCHEMA = schema_from_json({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                                      {"name": "vec", "data_type": "FloatVector", "dim": 2}]}, "c")
LAYOUT = CollectionLayout.from_proto(SCHEMA)
SEEK_TS = 1000


@dataclass(frozen=True)
class Msg:
    kind: str          # "tt", "ins" or "drop" (a DropPartition of partition 1)
    ts: int            # the tick's ts, or the insert's EndTs (one row: BeginTs == EndTs)
    segment: int = 0
    pk: int = 0


class FixedBatches:
    """Batches of ``n`` messages (``deltanode_kept``'s ``sizes``)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def randint(self, low: int, high: int) -> int:
        return self.n


def generated_case(seed: int) -> tuple[list[Msg], dict[int, int], dict[int, int]]:
    """A log from before the seek to well after it, and the flushed (S) and unflushed (G)
    segments' dml position timestamps."""
    rng = random.Random(seed)
    segments = list(range(1, 5))
    rng.shuffle(segments)
    flushed = {s: SEEK_TS + rng.randint(0, 40) for s in segments[:rng.randint(1, 3)]}
    unflushed = {s: SEEK_TS + rng.randint(0, 40) for s in segments[len(flushed):len(flushed) + rng.randint(0, 2)]}
    log, pk, t = [], 0, SEEK_TS - 30
    while t < SEEK_TS + 70:
        for _ in range(rng.randint(0, 4)):
            pk += 1
            skew = rng.choice([0, 0, -3, 4, 8, 15])   # > 0: may pass the next tick (another proxy)
            log.append(Msg("ins", max(1, t + rng.randint(0, 9) + skew), rng.choice(segments), pk))
        t += 10
        log.append(Msg("tt", t))
    log.append(Msg("tt", t + 100))        # releases everything
    return log, flushed, unflushed


def kept_in_log_order(log: list[Msg], seek_ts: int, flushed: dict[int, int], unflushed: dict[int, int]) -> list[int]:
    """The replay filter fed in raw log order (what DeltaNode did before pack order)."""
    f, seeking, kept = ReplayFilter(dict(flushed), dict(unflushed)), True, []
    for m in log:
        if seeking:
            if m.kind == "tt" and m.ts >= seek_ts:
                seeking = False
            elif m.ts <= seek_ts:
                continue
        if m.kind == "ins" and f.admit(m.segment, m.ts):
            kept.append(m.pk)
    return kept


def milvus_kept(log: list[Msg], seek_ts: int, flushed: dict[int, int], unflushed: dict[int, int]) -> list[int]:
    """What Milvus's DataNode keeps, in the order it writes it."""
    S, G = dict(flushed), dict(unflushed)
    seeking, buffer, kept = True, [], []

    def dd_node(m: Msg) -> None:
        for seg, ts in list(S.items()):
            if m.ts > ts:
                del S[seg]
        if m.segment in S:
            return
        if m.segment in G:
            if m.ts <= G[m.segment]:
                return
            del G[m.segment]
        kept.append(m.pk)

    for m in log:
        if seeking:
            if m.kind == "tt" and m.ts >= seek_ts:
                seeking = False      # this tick ends the seek and cuts the first pack
            elif m.ts <= seek_ts:
                continue
        if m.kind == "ins":
            buffer.append(m)
            continue
        pack = [b for b in buffer if b.ts <= m.ts]
        buffer = [b for b in buffer if b.ts > m.ts]
        for b in pack:
            dd_node(b)
    return kept


def payload(m: Msg) -> bytes:
    if m.kind == "tt":
        return msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick,
                                                           timestamp=m.ts)).SerializeToString()
    if m.kind == "drop":
        return msg_pb2.DropPartitionRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.DropPartition,
                                                                    timestamp=m.ts),
                                            collectionID=CID, partitionID=1).SerializeToString()
    req = msg_pb2.InsertRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert, timestamp=m.ts),
                                shardName=VCHANNEL, collectionID=CID, partitionID=1, segmentID=m.segment,
                                timestamps=[m.ts], rowIDs=[m.pk], num_rows=1, version=msg_pb2.ColumnBased)
    req.fields_data.extend(field_data(f, 1, np.random.default_rng(m.pk), m.pk) for f in LAYOUT.fields)
    return req.SerializeToString()


def deltanode_kept(log: list[Msg], seek_ts: int, flushed: dict[int, int], unflushed: dict[int, int],
                   storage: StorageLayout, sizes: random.Random) -> tuple[list[int], int]:
    """What DeltaNode writes when the log comes in batches of random sizes; and the batches."""
    info = VchannelInfo(collectionID=CID, channelName=VCHANNEL)
    info.seek_position.msgID, info.seek_position.timestamp = CODECS["kafka"].to_msg_id(0), seek_ts
    for segs, add in ((flushed, info.flushedSegments.add), (unflushed, info.unflushedSegments.add)):
        for seg, ts in segs.items():
            add(ID=seg, partitionID=1).dml_position.timestamp = ts
    fg = VchannelFlowgraph(info, SCHEMA, node_id=1)
    fg.load(None, Watermarks(), 0.0)
    payloads = [payload(m) for m in log]
    files, batches = [], 0
    while fg.next_offset < len(log):
        first = fg.next_offset
        end = min(len(log), first + max(sizes.randint(1, 25), fg.batches.min_range))
        dispatcher = PchannelDispatcher(ReadRange(PCHANNEL, 0, first, end, (VCHANNEL,), splittable=False),
                                        TaskContexts(RouteContexts.from_rows([fg.route_row()])),
                                        lambda ctx, a, b: VchannelRouter(ctx, LAYOUT, storage, a, b))
        for offset in range(first, end):
            dispatcher.on_message(offset, payloads[offset])
        routed, read = dispatcher.finish()
        portions = routed or [read.idle_portion(VCHANNEL, first)]
        assert portions[0].error is None, portions[0].error
        batches += 1
        if portions[0].tickless:          # as the pipeline does: a longer range next
            assert not portions[0].files and portions[0].end == first
            fg.read_without_tick(portions[0].tickless)
            continue
        outcome = advance(fg.working, portions)
        assert outcome.end > first, "a batch made no progress"
        fg.apply(outcome, 0.0)
        files += [f for f in outcome.files if f.table == TableKind.INSERT]
    root = storage.insert_log(CID)
    tables = [pq.read_table(os.path.join(root, f.path)) for f in files]
    kept = [pk for t in tables for pk in t.column("pk").to_pylist()]
    assert sum(s.num_rows for s in fg.working.segments.values()) == len(kept)
    assert fg.working.replay is None and fg.working.seek_ts == 0
    return sorted(kept), batches


CASES = range(60)


def test_enough_generated_cases_depend_on_the_order():
    """Guards the generator: in raw log order the filter keeps something else in some cases."""
    differ = []
    for seed in CASES:
        log, flushed, unflushed = generated_case(seed)
        if sorted(kept_in_log_order(log, SEEK_TS, flushed, unflushed)) != sorted(milvus_kept(log, SEEK_TS, flushed,
                                                                                               unflushed)):
            differ.append(seed)
    assert len(differ) >= 5, differ


@pytest.mark.parametrize("seed", CASES)
def test_deltanode_keeps_what_milvus_keeps_after_a_seek(seed, tmp_path):
    log, flushed, unflushed = generated_case(seed)
    expected = milvus_kept(log, SEEK_TS, flushed, unflushed)
    kept, batches = deltanode_kept(log, SEEK_TS, flushed, unflushed, StorageLayout(str(tmp_path)), random.Random(seed))
    assert sorted(kept) == sorted(expected), f"case {seed}: {len(log)} messages in {batches} batches, S={flushed} " \
                                             f"G={unflushed}"


@pytest.mark.parametrize("cut", [1, 2, 3, 5])
def test_the_issues_case_keeps_only_the_later_segment(cut, tmp_path):
    """Flushed segment 1 at dml ts 102; log TT95, seg 9 @105, seg 1 @99, TT100, TT110: Milvus
    hands seg 1's message over first (its EndTs is within TT100's pack) and drops it; in raw
    log order seg 9's message would take segment 1 out of the filter and seg 1's would pass."""
    log = [Msg("tt", 95), Msg("ins", 105, 9, 1), Msg("ins", 99, 1, 2), Msg("tt", 100), Msg("tt", 110)]
    assert milvus_kept(log, 90, {1: 102}, {}) == [1]
    kept, _ = deltanode_kept(log, 90, {1: 102}, {}, StorageLayout(str(tmp_path)), FixedBatches(cut))
    assert kept == [1]


@pytest.mark.parametrize("cut", [1, 4])
def test_the_seek_skips_ddl_up_to_its_tick_and_nothing_after_it(cut, tmp_path):
    """Milvus's seek skips every message with BeginTs <= the seek ts, a DropPartition too, until
    the first TimeTick at or past it; a message after that tick is not skipped, whatever its ts."""
    before = [Msg("drop", 990), Msg("tt", 1000), Msg("ins", 1005, 3, 1), Msg("tt", 1010)]
    kept, _ = deltanode_kept(before, 1000, {}, {}, StorageLayout(str(tmp_path / "before")), FixedBatches(cut))
    assert kept == [1]              # the drop was before the seek: partition 1 lives on
    after = [Msg("ins", 999, 3, 1), Msg("tt", 1000), Msg("ins", 998, 3, 3), Msg("drop", 995), Msg("ins", 1005, 3, 2),
             Msg("tt", 1010)]
    kept, _ = deltanode_kept(after, 1000, {}, {}, StorageLayout(str(tmp_path / "after")), FixedBatches(cut))
    assert kept == [3]              # 999 came before the seek's tick, 998 after it; the drop counts
