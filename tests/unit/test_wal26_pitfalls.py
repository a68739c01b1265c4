"""Milvus 2.6 messages a reader easily mishandles: a resume from a Milvus channel checkpoint in a log
that is in time-tick order only up to each TimeTick, a message whose row count would blow up the
reader, an Insert without its vchannel, and the cost of TimeTicks with many vchannels. Each test
says what Milvus does.

Built like tests/unit/test_wal_routing.py: a task's dispatcher over a range of a pchannel, real
routers writing binlogs under ``tmp_path``, rows read back from them and compared as multisets.
"""

from __future__ import annotations

from collections import Counter

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.executor.contexts import TaskContexts
from deltanode.executor.dispatch import PchannelDispatcher
from deltanode.executor.route import VchannelRouter
from deltanode.records import Portion, ReadRange, RouteContext, TableKind
from deltanode.wire.milvus_proto import msg_pb2

from .test_wal_routing import IDLE, SEG, Message, begin, end, ins, other, quarantined, rows, tick, tt
from .wal26 import CID, LAYOUT, PCHANNEL, PID, VCHANNEL, delete, insert, insert_header, pb, props

FIRST = 10


def _dispatch(tmp_path, messages: list[Message], *, seek_ts: int = 0) -> list[Portion]:
    """The portions of ``messages`` read as one range from offset ``FIRST``; ``seek_ts``: the
    vchannel starts at a Milvus channel checkpoint of that time tick (mirror mode)."""
    storage = StorageLayout(str(tmp_path))
    contexts = [RouteContext(VCHANNEL, CID, "c", PCHANNEL, 0, FIRST, seek_ts=seek_ts),
                RouteContext(IDLE, CID, "c", PCHANNEL, 0, FIRST)]
    dispatcher = PchannelDispatcher(ReadRange(PCHANNEL, 0, FIRST, FIRST + len(messages), (VCHANNEL, IDLE)),
                                    TaskContexts.of(contexts),
                                    lambda ctx, a, b: VchannelRouter(ctx, LAYOUT, storage, a, b))
    for offset, (value, p) in enumerate(messages, start=FIRST):
        dispatcher.on_message(offset, value, p)
    return dispatcher.finish()[0]


def test_a_seek_from_a_checkpoint_drops_every_message_at_or_below_it(tmp_path):
    """Row 2 was allocated its time tick before the checkpoint's and landed after a message past it:
    Milvus consumed it before its checkpoint (its rows are in the segments the mirror imports).
    Milvus's resume filter (``DeliverFilterTimeTickGT``) drops every message at or below the
    checkpoint, not only those before the first one past it."""
    checkpoint = tt(100)
    [p] = _dispatch(tmp_path, [ins(101, [1]), ins(99, [2]), ins(102, [3]), tick(102)], seek_ts=checkpoint)
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(101)): 1, (3, tt(102)): 1})
    assert (p.end, p.cut, p.stats.max_tick) == (FIRST + 4, False, tt(102))


def test_a_seek_judges_a_transaction_by_its_commit(tmp_path):
    """Transaction 41 committed at or below the checkpoint (in the segments already): nothing of it,
    though its members pass the filter. Transaction 42 began and wrote below it but committed
    after: it lands whole, at its commit's time tick. Neither holds the portion's end."""
    messages = [begin(95, 41), ins(96, [4], txn=(41, 5000)), begin(97, 42), tick(97), ins(98, [5], txn=(42, 5000)),
                end("CommitTxn", 99, 41), tick(100), ins(101, [1]), end("CommitTxn", 103, 42), tick(104)]
    [p] = _dispatch(tmp_path, messages, seek_ts=tt(100))
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(101)): 1, (5, tt(103)): 1})
    assert (p.end, p.cut) == (FIRST + len(messages), False)
    # Read up to the checkpoint's TimeTick only: transaction 42 is open there, and something has been
    # held since the first message: nothing done, a longer range asked for.
    [p] = _dispatch(tmp_path, messages[:7], seek_ts=tt(100))
    assert p == Portion(VCHANNEL, FIRST, FIRST, tickless=7)


def _num_rows(payload: bytes, request, num_rows: int) -> bytes:
    msg = request.FromString(payload)
    msg.num_rows = num_rows
    if request is msg_pb2.DeleteRequest:
        del msg.timestamps[:]   # the body's timestamps are not the real ones: Milvus's adaptor sets them
    return msg.SerializeToString()


@pytest.mark.parametrize("kind", ["Insert", "Delete"])
def test_a_message_with_an_absurd_row_count_is_quarantined_alone(tmp_path, kind):
    """Its row count is never multiplied out into timestamps (an OverflowError or MemoryError would
    fail the task, every vchannel of it, at every retry)."""
    if kind == "Insert":
        bad = _num_rows(insert([5]), msg_pb2.InsertRequest, (1 << 64) - 1), insert_header({PID: SEG})
    else:
        bad = _num_rows(delete([5]), msg_pb2.DeleteRequest, 1 << 62), pb((1, CID), (2, 1))
    [p] = _dispatch(tmp_path, [(bad[0], props(kind, tt(1), header=bad[1])), ins(2, [6]), tick(2)])
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(6, tt(2)): 1})
    [q] = quarantined(tmp_path, p)
    assert q["offset"] == FIRST and q["reason"].startswith("row count mismatch: num_rows ")


def test_an_insert_without_its_vchannel_does_not_vanish(tmp_path):
    """Milvus's scanner hands a message without ``_vc`` to every vchannel of the pchannel; DeltaNode
    cannot tell whose rows they are: each vchannel reading it quarantines it, under its own name."""
    no_vchannel = insert([7]), props("Insert", tt(1), vchannel=None, header=insert_header({PID: SEG}))
    p, idle = _dispatch(tmp_path, [no_vchannel, ins(2, [8]), other(3), tick(3)])
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(8, tt(2)): 1})
    assert rows(tmp_path, idle, TableKind.INSERT) == Counter()
    recorded = quarantined(tmp_path, p) + quarantined(tmp_path, idle)
    assert Counter((q["vchannel"], q["offset"]) for q in recorded) == Counter({(VCHANNEL, FIRST): 1, (IDLE, FIRST): 1})
    for q in recorded:
        assert q["reason"] == ("Insert without a vchannel (_vc): Milvus hands it to every vchannel of the "
                               "pchannel; DeltaNode applies it to none")


class _CountingRouter(VchannelRouter):
    """A router that counts the TimeTicks handed to it and the times it is asked whether it needs them."""

    ticks = asked = 0

    def tick(self, ts: int, offset: int) -> None:
        _CountingRouter.ticks += 1
        super().tick(ts, offset)

    @property
    def needs_ticks(self) -> bool:
        _CountingRouter.asked += 1
        return super().needs_ticks


def test_a_timetick_costs_nothing_for_the_routers_that_wait_for_none(tmp_path):
    """500 vchannels start at a checkpoint: each needs the TimeTicks until one reaches it, and none
    after; a message of one of them makes it need them only until they deliver it."""
    storage = StorageLayout(str(tmp_path))
    names = [f"{PCHANNEL}_{CID}v{i}" for i in range(500)]
    contexts = [RouteContext(v, CID, "c", PCHANNEL, 0, FIRST, seek_ts=tt(1)) for v in names]
    messages = [tick(1), *(tick(ms) for ms in range(2, 100)), ins(100, [1]), tick(100), tick(101)]
    _CountingRouter.ticks = _CountingRouter.asked = 0
    dispatcher = PchannelDispatcher(ReadRange(PCHANNEL, 0, FIRST, FIRST + len(messages), tuple(names)),
                                    TaskContexts.of(contexts),
                                    lambda ctx, a, b: _CountingRouter(ctx, LAYOUT, storage, a, b))
    for offset, (value, p) in enumerate(messages, start=FIRST):
        dispatcher.on_message(offset, value, p)
    portions, read = dispatcher.finish()
    # Each router is asked a few times in all, not once a TimeTick.
    assert _CountingRouter.ticks == 500 + 1 and _CountingRouter.asked < 3 * 500
    assert rows(tmp_path, next(p for p in portions if p.vchannel == VCHANNEL), TableKind.INSERT) == \
        Counter({(1, tt(100)): 1})
    assert all(not p.cut and p.end == FIRST + len(messages) for p in portions) and read.tick == tt(101)
