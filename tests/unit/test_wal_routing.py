"""Milvus 2.6 messages through a task's dispatcher and routers, as Milvus's own scanner delivers
them: held until a TimeTick releases them in time-tick order, whatever order they were appended in;
rows land with the time tick and segment of their properties, only a TimeTick moves the pchannel,
flushes seal segments, transactions apply whole at their commit (or not at all, expiry judged at a
TimeTick), and a range that ends with messages still held ends its vchannel's portion at the last
point where nothing was."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow.parquet as pq
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.executor.contexts import TaskContexts
from deltanode.executor.dispatch import PchannelDispatcher
from deltanode.executor.route import VchannelRouter
from deltanode.records import (
    ControlEvent,
    EventKind,
    FileEntry,
    Portion,
    PortionStats,
    ReadRange,
    ReadStats,
    ReplayState,
    RouteContext,
    TableKind,
)
from deltanode.state.channel_state import ChannelState, SegmentState
from deltanode.state.commit import Watermarks
from deltanode.vchannel.route_rows import RouteRows
from deltanode.vchannel.state_update import advance, cut_after_short
from deltanode.wire.milvus_proto import common_pb2, msg_pb2

from .wal26 import (
    CID,
    LAYOUT,
    OTHER,
    PCHANNEL,
    PID,
    VCHANNEL,
    delete,
    drop_partition,
    insert,
    insert_header,
    pb,
    props,
    time_tick,
)

T0 = 1_700_000_000_000 << 18
SEG = 900
IDLE = f"{PCHANNEL}_9v0"   # read by the range, no message of its own
Message = tuple[bytes, dict[str, str] | None]


def tt(ms: int) -> int:
    """A time tick ``ms`` physical milliseconds after T0."""
    return T0 + (ms << 18)


def ins(ms: int, pks: list[int], *, seg: int = SEG, txn: tuple[int, int] | None = None, **kw) -> Message:
    return insert(pks), props("Insert", tt(ms), header=insert_header({PID: seg}), txn=txn, **kw)


def dele(ms: int, pks: list[int], *, txn: tuple[int, int] | None = None) -> Message:
    return delete(pks), props("Delete", tt(ms), header=pb((1, CID), (2, len(pks))), txn=txn)


def begin(ms: int, txn_id: int, keepalive_ms: int = 5000) -> Message:
    return b"", props("BeginTxn", tt(ms), header=pb((1, keepalive_ms)), txn=(txn_id, keepalive_ms))


def end(kind: str, ms: int, txn_id: int, keepalive_ms: int = 5000) -> Message:
    return b"", props(kind, tt(ms), txn=(txn_id, keepalive_ms))


def other(ms: int) -> Message:
    """A message of a vchannel on the same pchannel that the range does not read."""
    return insert([99], vchannel=OTHER), props("Insert", tt(ms), OTHER, header=insert_header({PID: 1}))


def tick(ms: int, vchannel: str | None = None) -> Message:
    """A persisted TimeTick: every message up to its time tick is in the log before it."""
    return time_tick(tt(ms)), props("TimeTick", tt(ms), vchannel=vchannel)


def dispatch(tmp_path, messages: list[Message], *, first: int = 10, starts: dict[str, int] | None = None,
             ticks: dict[str, int] | None = None, replays: dict[str, ReplayState] | None = None,
             marks: dict[str, int] | None = None) -> tuple[list[Portion], ReadStats]:
    """``ticks``: each vchannel's TimeTick before its start, as its route row carries it (0: none);
    ``replays``: the vchannels whose replay filter is active (pre-2.6 pack order); ``marks``: each
    vchannel's quarantine watermark (its quarantine rows below it are committed)."""
    storage = StorageLayout(str(tmp_path))
    stop = first + len(messages)
    contexts = [RouteContext(v, CID, "c", PCHANNEL, 0, (starts or {}).get(v, first), tick=(ticks or {}).get(v, 0),
                             replay=(replays or {}).get(v), quarantine_watermark=(marks or {}).get(v, 0))
                for v in (VCHANNEL, IDLE)]
    dispatcher = PchannelDispatcher(ReadRange(PCHANNEL, 0, first, stop, (VCHANNEL, IDLE)), TaskContexts.of(contexts),
                                    lambda ctx, a, b: VchannelRouter(ctx, LAYOUT, storage, a, b))
    for offset, (value, p) in enumerate(messages, start=first):
        dispatcher.on_message(offset, value, p)
    return dispatcher.finish()


def rows(tmp_path, portion: Portion, table: TableKind) -> Counter:
    """(pk, _ts) of the portion's insert or delete files, as a multiset."""
    storage = StorageLayout(str(tmp_path))
    root = storage.insert_log(CID) if table == TableKind.INSERT else storage.delta_log(CID)
    out: Counter = Counter()
    for f in portion.files:
        if f.table == table:
            t = pq.read_table(os.path.join(root, f.path))
            out.update(zip(t.column("pk").to_pylist(), t.column("_ts").to_pylist()))
    return out


def quarantined(tmp_path, portion: Portion) -> list[dict]:
    root = StorageLayout(str(tmp_path)).quarantine()
    return [r for f in portion.files if f.table == TableKind.QUARANTINE
            for r in pq.read_table(os.path.join(root, f.path)).to_pylist()]


def test_inserts_and_deletes_land_with_their_time_tick_and_segment(tmp_path):
    portions, read = dispatch(tmp_path, [ins(1, [1, 2, 3]), other(2), dele(3, [2]), ins(4, [4], seg=SEG + 1),
                                         tick(5), other(6)])
    [p] = portions
    assert (p.vchannel, p.first, p.end, p.cut) == (VCHANNEL, 10, 16, False)
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(1)): 1, (2, tt(1)): 1, (3, tt(1)): 1,
                                                            (4, tt(4)): 1})
    assert rows(tmp_path, p, TableKind.DELETE) == Counter({(2, tt(3)): 1})
    assert {s: st.rows for s, st in p.segments.items()} == {SEG: 3, SEG + 1: 1}
    assert p.stats == PortionStats(tt(5), 3, p.stats.dml_bytes, 4, 1, 0)
    # Another vchannel's message is not routed and moves nothing: only the TimeTick is the
    # pchannel's progress, which gives the idle vchannels their portions.
    assert read.routed == {VCHANNEL} and (read.tick, read.tick_offset) == (tt(5), 14)
    assert read.idle_portion(IDLE, 10) == Portion(IDLE, 10, 16, stats=PortionStats(tt(5)))
    assert read.dml_messages == 3


def test_messages_appended_out_of_time_tick_order_are_applied_in_it(tmp_path):
    """A 2.6 node allocates a time tick, then appends, concurrently: here the insert into SEG at 3 ms
    lands after the Flush of SEG at 4 ms and the delete at 6 ms before the insert at 5 ms of its key.
    Released at the TimeTick in time-tick order, the insert comes before the flush (no seal refuses
    it) and the delete after its row."""
    flush = b"", props("Flush", tt(4), header=pb((1, CID), (2, PID), (3, SEG)))
    portions, _ = dispatch(tmp_path, [dele(6, [1]), flush, ins(5, [1], seg=SEG + 1), ins(3, [2]), tick(6)])
    [p] = portions
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(5)): 1, (2, tt(3)): 1})
    assert rows(tmp_path, p, TableKind.DELETE) == Counter({(1, tt(6)): 1})
    assert p.events == (ControlEvent(EventKind.SEGMENT_FLUSH, 11, tt(4), segments=(SEG,)),)
    assert quarantined(tmp_path, p) == [] and (p.end, p.cut) == (15, False)


def test_what_follows_the_last_timetick_is_read_again_and_a_range_without_one_does_nothing(tmp_path):
    """Nothing was held before the first message after the last TimeTick, and what comes after that
    tick has a higher time tick: the portion ends right before that message, at the tick."""
    messages = [ins(1, [1]), other(2), tick(2), other(3), ins(4, [2]), ins(3, [3])]
    portions, read = dispatch(tmp_path, messages)
    [p] = portions
    assert (p.first, p.end, p.cut, p.stats.max_tick) == (10, 14, True, tt(2))
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(1)): 1})
    assert p.stats.inserted_rows == 1 and p.stats.dml_messages == 1
    # The vchannels with nothing held end at the range's end, with its last TimeTick.
    assert read.idle_portion(IDLE, 10) == Portion(IDLE, 10, 16, stats=PortionStats(tt(2)))
    # Read again from there: without another TimeTick, nothing is done.
    portions, _ = dispatch(tmp_path, messages[4:], first=14)
    assert portions == [Portion(VCHANNEL, 14, 14, tickless=2)]
    portions, _ = dispatch(tmp_path, messages[4:] + [tick(5)], first=14)
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(2, tt(4)): 1, (3, tt(3)): 1})
    assert (portions[0].end, portions[0].cut, portions[0].stats.max_tick) == (17, False, tt(5))


def test_a_portion_ends_right_after_the_last_timetick_that_left_nothing_held(tmp_path):
    portions, _ = dispatch(tmp_path, [ins(3, [1]), ins(1, [2]), tick(1), tick(3), ins(5, [3]), ins(4, [4]), tick(4)])
    [p] = portions
    # The first TimeTick leaves the insert at 3 ms held, the second nothing; the third the one at 5 ms.
    assert (p.end, p.cut, p.stats.max_tick) == (14, True, tt(3))
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(3)): 1, (2, tt(1)): 1})


def test_any_timetick_releases_and_a_message_below_a_released_one_is_refused(tmp_path):
    """A TimeTick is the pchannel's whatever ``_vc`` it carries; a message read after it with a lower
    time tick breaks Milvus's rule (its scanner refuses it): quarantined, not applied."""
    portions, read = dispatch(tmp_path, [ins(2, [1]), tick(3, vchannel=OTHER), ins(1, [2]), ins(4, [3]), tick(4)])
    [p] = portions
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(2)): 1, (3, tt(4)): 1})
    [q] = quarantined(tmp_path, p)
    assert (q["offset"], q["msg_type"]) == (12, common_pb2.MsgType.Insert)
    assert q["reason"] == (f"Insert at time tick {tt(1)}, below the TimeTick {tt(3)} read before it: Milvus's "
                           "scanner refuses it as a time tick violation")
    assert (p.end, p.cut, read.tick) == (15, False, tt(4))


def test_a_timetick_of_every_vchannel_ticks_without_a_router(tmp_path):
    portions, read = dispatch(tmp_path, [other(1), (time_tick(0), props("TimeTick", tt(5), vchannel=None))])
    assert portions == [] and (read.tick, read.tick_offset) == (tt(5), 11)


def test_old_and_new_messages_share_a_pchannel(tmp_path):
    old = common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick, timestamp=tt(3))
    from deltanode.wire.milvus_proto import msg_pb2
    portions, read = dispatch(tmp_path, [ins(1, [1]), (msg_pb2.TimeTickMsg(base=old).SerializeToString(), None),
                                         (b"", {"not": "milvus"})])
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(1, tt(1)): 1})
    assert read.tick == tt(3)
    # Properties without _v are an old message's: this one's payload is no Milvus message.
    assert quarantined(tmp_path, portions[0])[0]["reason"] == "empty payload"


def test_what_cannot_be_applied_is_quarantined_under_its_own_vchannel(tmp_path):
    encrypted = b"\x8a\x01ciphertext", props("Insert", tt(1), header=insert_header({PID: SEG}), cipher_zone=3)
    theirs = b"\x8a\x01ciphertext", props("Insert", tt(2), OTHER, header=insert_header({PID: SEG}), cipher_zone=3)
    broken = insert([5]), {**props("Insert", tt(3)), "_tt": "?"}
    portions, read = dispatch(tmp_path, [encrypted, theirs, broken, ins(4, [6]), tick(4)])
    [p] = portions
    got = sorted((r["offset"], r["msg_type"], r["reason"], r["payload"]) for r in quarantined(tmp_path, p))
    assert got == [(10, common_pb2.MsgType.Insert, "encrypted by Milvus's cipher (zone 3): DeltaNode has no key",
                    encrypted[0]),
                   (12, None, "Milvus 2.6 message properties: time tick _tt '?' is not base 36", broken[0])]
    assert p.stats.quarantined == 2 and rows(tmp_path, p, TableKind.INSERT) == Counter({(6, tt(4)): 1})


def test_a_flush_seals_its_segment_and_a_later_insert_into_it_is_quarantined(tmp_path):
    flush = b"", props("Flush", tt(2), header=pb((1, CID), (2, PID), (3, SEG)))
    manual = b"", props("ManualFlush", tt(5), header=pb((1, CID), (2, tt(5)), (3, [SEG + 1])))
    portions, _ = dispatch(tmp_path, [ins(1, [1]), flush, ins(3, [2]), ins(4, [3], seg=SEG + 1), manual, tick(5)])
    [p] = portions
    assert p.events == (ControlEvent(EventKind.SEGMENT_FLUSH, 11, tt(2), segments=(SEG,)),
                        ControlEvent(EventKind.MANUAL_FLUSH, 14, tt(5), segments=(SEG + 1,)))
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(1)): 1, (3, tt(4)): 1})
    [q] = quarantined(tmp_path, p)
    assert q["offset"] == 12 and "sealed" in q["reason"]
    # The driver: both sealed at their ts and Flushed in the same batch, the checkpoint's tick past them.
    state = advance(ChannelState(VCHANNEL, CID, PCHANNEL, checkpoint_offset=10), [p]).state
    segs = {s: (m.state, m.sealed_ts, m.seal_reason, m.num_rows) for s, m in state.segments.items()}
    assert segs == {SEG: (SegmentState.FLUSHED, tt(2), "flush message", 1),
                    SEG + 1: (SegmentState.FLUSHED, tt(5), "manual flush", 1)}


def test_a_drop_of_its_partition_filters_what_follows(tmp_path):
    drop = drop_partition(PID), props("DropPartition", tt(2), header=pb((1, CID), (2, PID)))
    portions, _ = dispatch(tmp_path, [ins(1, [1]), drop, ins(3, [2]), tick(3)])
    assert portions[0].events == (ControlEvent(EventKind.DROP_PARTITION, 11, tt(2), PID),)
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(1, tt(1)): 1})


def test_a_committed_transaction_applies_whole_at_its_commits_time_tick(tmp_path):
    txn = (41, 5000)
    portions, _ = dispatch(tmp_path, [ins(1, [1]), begin(2, 41), ins(3, [2, 3], txn=txn), tick(3), ins(4, [4]),
                                      dele(5, [1], txn=txn), other(6), end("CommitTxn", 7, 41), ins(8, [5]), tick(8)])
    [p] = portions
    assert not p.cut and p.end == 20
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(1)): 1, (2, tt(7)): 1, (3, tt(7)): 1,
                                                            (4, tt(4)): 1, (5, tt(8)): 1})
    assert rows(tmp_path, p, TableKind.DELETE) == Counter({(1, tt(7)): 1})
    assert p.stats.inserted_rows == 5 and p.stats.deleted_rows == 1


def test_a_rolled_back_or_expired_transaction_writes_nothing(tmp_path):
    portions, _ = dispatch(tmp_path, [begin(1, 41), ins(2, [1], txn=(41, 5000)), end("RollbackTxn", 3, 41),
                                      ins(4, [2]), tick(4)])
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(2, tt(4)): 1})
    # Expired: a TimeTick reaches its last member's time tick plus its keepalive before its commit
    # is released, which then commits nothing. Another vchannel's message past it expires nothing.
    expiring = [begin(1, 42, 100), ins(2, [1], txn=(42, 100)), other(150), end("CommitTxn", 103, 42, 100),
                ins(104, [2]), tick(104)]
    portions, _ = dispatch(tmp_path, expiring)
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(1, tt(103)): 1, (2, tt(104)): 1})
    portions, _ = dispatch(tmp_path, expiring[:3] + [tick(102)] + expiring[3:])
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(2, tt(104)): 1})
    assert not portions[0].cut
    # Released with its commit by one TimeTick past its expiry: committed (expiry is judged after the batch).
    portions, _ = dispatch(tmp_path, expiring[:3] + expiring[3:-1] + [tick(500)])
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(1, tt(103)): 1, (2, tt(104)): 1})
    # A keepalive of -1 s never expires.
    portions, _ = dispatch(tmp_path, [begin(1, 43, -1000), ins(2, [1], txn=(43, -1000)), tick(10 ** 6),
                                      end("CommitTxn", 10 ** 6 + 1, 43, -1000), tick(10 ** 6 + 1)])
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(1, tt(10 ** 6 + 1)): 1})


def test_a_member_or_commit_of_a_transaction_never_begun_here_is_ignored(tmp_path):
    portions, _ = dispatch(tmp_path, [ins(1, [1], txn=(44, 5000)), end("CommitTxn", 2, 44), ins(3, [2]), tick(3)])
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(2, tt(3)): 1})


def test_a_range_ending_inside_a_transaction_ends_the_portion_before_its_begin(tmp_path):
    messages = [ins(1, [1]), other(2), tick(2), begin(3, 41), ins(4, [2], txn=(41, 5000)), ins(5, [3]), other(6),
                tick(6)]
    portions, read = dispatch(tmp_path, messages)
    [p] = portions
    # Up to the BeginTxn, with the tick before it; what follows (the plain insert too) is read again.
    assert (p.first, p.end, p.cut, p.stats.max_tick) == (10, 13, True, tt(2))
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(1)): 1})
    assert p.stats.inserted_rows == 1 and p.stats.dml_messages == 1
    assert read.tick == tt(6)   # the other vchannels move on
    # From the BeginTxn on, without its commit: nothing done, a longer range asked for.
    portions, _ = dispatch(tmp_path, messages[3:], first=13)
    assert portions == [Portion(VCHANNEL, 13, 13, tickless=5)]
    # With its commit: whole.
    portions, _ = dispatch(tmp_path, messages[3:] + [end("CommitTxn", 7, 41), tick(7)], first=13)
    assert rows(tmp_path, portions[0], TableKind.INSERT) == Counter({(2, tt(7)): 1, (3, tt(5)): 1})
    assert (portions[0].end, portions[0].cut) == (20, False)


def test_after_a_cut_the_later_pieces_of_the_range_are_not_applied():
    files = (FileEntry(TableKind.INSERT, "p/s/part-1.parquet", 10, 1, "{}"),)
    cut = Portion(VCHANNEL, 10, 12, cut=True)
    later = Portion(VCHANNEL, 15, 20, files=files)
    assert cut_after_short([later, Portion(VCHANNEL, 0, 10), cut]) == ([Portion(VCHANNEL, 0, 10), cut], [later])
    assert cut_after_short([Portion(VCHANNEL, 0, 10), later]) == ([Portion(VCHANNEL, 0, 10), later], [])


def test_a_vchannel_that_asked_for_a_longer_range_reads_it_in_one_piece():
    """Split, its first piece would again end before the commit it needs."""
    from deltanode.pipeline.cycle import _position
    from deltanode.state.commit import Watermarks
    from deltanode.vchannel.flowgraph import VchannelFlowgraph
    from deltanode.wire.datapb import VchannelInfo
    from deltanode.wire.schema import schema_from_json

    schema = schema_from_json({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                                          {"name": "vec", "data_type": "FloatVector", "dim": 2}]}, "c")
    fg = VchannelFlowgraph(VchannelInfo(collectionID=CID, channelName=VCHANNEL), schema, node_id=1)
    fg.load(None, Watermarks(), 0.0)
    assert not _position(fg).replaying
    fg.read_without_tick(8)
    assert _position(fg).replaying and _position(fg).min_messages == 16


@pytest.mark.parametrize("cut", [True, False])
def test_a_message_below_the_last_timetick_is_refused_whatever_batch_reads_it(tmp_path, cut):
    """The TimeTick at 3 ms, then an insert at 2 ms that breaks the rule (behind an insert at 5 ms
    held, or not). Read in one range, it is quarantined. A range ending before it (cut right before
    the held insert, or ending where nothing is held) commits the TimeTick at 3 ms as its
    checkpoint's ts; the next batch's row carries it and its scan starts with it released: the
    insert is refused there too, as Milvus's scanner never delivers it (resumed from that checkpoint,
    its filter drops it)."""
    messages = [tick(3), ins(5, [1]), ins(2, [2]), tick(6)] if cut else [tick(3), ins(2, [2]), ins(5, [1]), tick(6)]
    below = 12 if cut else 11
    [whole], _ = dispatch(tmp_path / "one", messages)
    assert rows(tmp_path / "one", whole, TableKind.INSERT) == Counter({(1, tt(5)): 1})
    assert [q["offset"] for q in quarantined(tmp_path / "one", whole)] == [below]
    routed, read = dispatch(tmp_path / "two", messages[:3] if cut else messages[:1])
    [head] = routed or [read.idle_portion(VCHANNEL, 10)]   # only the TimeTick: the vchannel's portion is idle
    assert (head.end, head.cut, head.stats.max_tick) == ((11, True, tt(3)) if cut else (11, False, tt(3)))
    assert rows(tmp_path / "two", head, TableKind.INSERT) == Counter() and quarantined(tmp_path / "two", head) == []
    state = ChannelState(vchannel=VCHANNEL, collection_id=CID, pchannel=PCHANNEL, checkpoint_offset=10)
    row = RouteRows(VCHANNEL, CID, "c").row(advance(state, [head]).state, Watermarks())
    assert (row.start, row.tick) == (11, tt(3))
    [rest], _ = dispatch(tmp_path / "two", messages[1:], first=11, ticks={VCHANNEL: row.tick})
    assert rows(tmp_path / "two", rest, TableKind.INSERT) == Counter({(1, tt(5)): 1})
    assert [q["offset"] for q in quarantined(tmp_path / "two", rest)] == [below]


def test_a_scan_resumed_from_a_milvus_checkpoint_starts_with_no_timetick_released(tmp_path):
    """From a Milvus channel checkpoint (a seek) the resume filter judges what is below it, as
    Milvus's scanner does: a transaction's BeginTxn and members below it pass, and the transaction
    lands at its CommitTxn above it."""
    messages = [begin(2, 41), ins(3, [1], txn=(41, 5000)), end("CommitTxn", 5, 41), tick(6)]
    storage = StorageLayout(str(tmp_path))
    ctx = RouteContext(VCHANNEL, CID, "c", PCHANNEL, 0, 10, seek_ts=tt(4), tick=tt(4))
    dispatcher = PchannelDispatcher(ReadRange(PCHANNEL, 0, 10, 14, (VCHANNEL,)), TaskContexts.of([ctx]),
                                    lambda c, a, b: VchannelRouter(c, LAYOUT, storage, a, b))
    for offset, (value, p) in enumerate(messages, start=10):
        dispatcher.on_message(offset, value, p)
    [p], _ = dispatcher.finish()
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(5)): 1}) and quarantined(tmp_path, p) == []


def read_over_a_cut(tmp_path, messages: list[Message], **kw) -> list[Portion]:
    """``messages`` from offset 10 in two batches, as the pipeline reads them: the first ends before
    the last message; the second starts where the first's earliest portion ended, each vchannel at
    its own end. Then both batches read again from 10, every vchannel's quarantine watermark at its
    end (a restart after its quarantine rows' commit landed): those add no row. The portions."""
    first, _ = dispatch(tmp_path, messages[:-1], **kw)
    ends = {p.vchannel: p.end for p in first}
    start = min(ends.values())
    second, _ = dispatch(tmp_path, messages[start - 10:], first=start, starts=ends, **kw)
    again, _ = dispatch(tmp_path, messages, marks={v: 10 + len(messages) for v in ends}, **kw)
    assert [q for p in again for q in quarantined(tmp_path, p)] == []
    return first + second


@pytest.mark.parametrize("cut", [None, VCHANNEL, IDLE])
def test_a_message_of_no_vchannel_is_quarantined_once_by_each_vchannel_whatever_the_cuts(tmp_path, cut):
    """An Insert without ``_vc`` is Milvus's for every vchannel of the pchannel: each vchannel that
    reads it records it once, under its own name. ``cut``: the vchannel holding an insert there, cut
    before it in the first batch and reading it again in the next, while the other reads past it."""
    nowhere = insert([9]), props("Insert", tt(4), vchannel=None, header=insert_header({PID: SEG}))
    held = ins(5, [1], vchannel=cut) if cut else other(5)
    portions = read_over_a_cut(tmp_path, [tick(1), held, nowhere, tick(6)])
    recorded = Counter((q["vchannel"], q["offset"]) for p in portions for q in quarantined(tmp_path, p))
    assert recorded == Counter({(VCHANNEL, 12): 1, (IDLE, 12): 1})
    assert {p.vchannel: (p.end, p.cut) for p in portions if p.first == 10} == {
        v: (11, True) if v == cut else (13, False) for v in (VCHANNEL, IDLE)}
    landed = Counter(r for p in portions for r in rows(tmp_path, p, TableKind.INSERT))
    assert landed == (Counter({(1, tt(5)): 1}) if cut else Counter())


def old_insert(ms: int, pk: int, vchannel: str) -> Message:
    """A pre-2.6 Insert (no properties) of one row at ``ms``, into SEG."""
    req = msg_pb2.InsertRequest.FromString(insert([pk], vchannel=vchannel))
    req.base.timestamp = tt(ms)
    req.timestamps.append(tt(ms))
    req.segmentID = SEG
    return req.SerializeToString(), None


@pytest.mark.parametrize("cut", [VCHANNEL, IDLE])
def test_a_message_that_does_not_parse_is_quarantined_once_by_each_vchannel_whatever_the_cuts(tmp_path, cut):
    """A pre-2.6 message that does not parse names no vchannel: each vchannel that reads it records
    it once. ``cut``: the vchannel replaying in pack order, holding an insert there, so cut before it."""
    unparseable = b"\xff\xff\xff", None
    pre26_tick = time_tick(tt(1)), None
    replays = {cut: ReplayState(flushed=((SEG + 50, tt(100)),))}   # active to the end: pack order throughout
    portions = read_over_a_cut(tmp_path, [pre26_tick, old_insert(5, 1, cut), unparseable, (time_tick(tt(6)), None)],
                               replays=replays)
    assert {p.vchannel: (p.end, p.cut) for p in portions if p.first == 10} == {
        v: (11, True) if v == cut else (13, False) for v in (VCHANNEL, IDLE)}
    recorded = Counter((q["vchannel"], q["offset"]) for p in portions for q in quarantined(tmp_path, p))
    assert recorded == Counter({(VCHANNEL, 12): 1, (IDLE, 12): 1})
    assert Counter(r for p in portions for r in rows(tmp_path, p, TableKind.INSERT)) == Counter({(1, tt(5)): 1})
