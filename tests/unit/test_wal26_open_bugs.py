"""Milvus 2.6 messages that the executor's dispatcher and routers mishandle: each test says what
Milvus does and fails on the current code (``xfail(strict=True)``: it must start passing with the
fix in ``executor/``, and then lose its mark).

Built like tests/unit/test_wal_routing.py: a task's dispatcher over a range of a pchannel, real
routers writing binlogs under ``tmp_path``, rows read back from them and compared as multisets.
"""

from __future__ import annotations

from collections import Counter

import pytest

from deltanode.executor.contexts import TaskContexts
from deltanode.executor.dispatch import PchannelDispatcher
from deltanode.executor.route import VchannelRouter
from deltanode.records import Portion, ReadRange, RouteContext, TableKind
from deltanode.storage.layout import StorageLayout
from deltanode.wire.milvus_proto import msg_pb2

from .test_wal_routing import IDLE, SEG, Message, ins, other, quarantined, rows, tt
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


@pytest.mark.xfail(strict=True, reason=(
    "executor/route.py VchannelRouter.dml/tick and executor/dispatch.py _on_wal_message: a 2.6 seek ends at the "
    "first message whose _tt reaches the checkpoint's, and what follows is applied whatever its _tt. A 2.6 "
    "streaming node appends concurrently (its time tick interceptor allocates the _tt, then appends), so the "
    "log is in _tt order only up to each persisted TimeTick; Milvus reads a checkpoint back with "
    "DeliverFilterTimeTickGT, which drops every message at or below it (a transaction by its commit's _tt)"))
def test_a_seek_from_a_checkpoint_drops_every_message_at_or_below_it(tmp_path):
    """Row 2 was allocated its time tick before the checkpoint's and landed after a message past it:
    Milvus consumed it before its checkpoint (its rows are in the segments the mirror imports)."""
    checkpoint = tt(100)
    [p] = _dispatch(tmp_path, [ins(101, [1]), ins(99, [2]), ins(102, [3])], seek_ts=checkpoint)
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(1, tt(101)): 1, (3, tt(102)): 1})


def _num_rows(payload: bytes, request, num_rows: int) -> bytes:
    msg = request.FromString(payload)
    msg.num_rows = num_rows
    if request is msg_pb2.DeleteRequest:
        del msg.timestamps[:]   # the body's timestamps are not the real ones: Milvus's adaptor sets them
    return msg.SerializeToString()


@pytest.mark.xfail(strict=True, reason=(
    "executor/wal_adaptor.py _insert and _delete build [_tt] * num_rows before any check of num_rows: an "
    "absurd one raises OverflowError or MemoryError out of PchannelDispatcher.on_message (adapt runs outside "
    "_call), which fails the whole task, every vchannel of it, again at each retry; a message that does not "
    "fit is to be quarantined"))
@pytest.mark.parametrize("kind", ["Insert", "Delete"])
def test_a_message_with_an_absurd_row_count_is_quarantined_alone(tmp_path, kind):
    if kind == "Insert":
        bad = _num_rows(insert([5]), msg_pb2.InsertRequest, (1 << 64) - 1), insert_header({PID: SEG})
    else:
        bad = _num_rows(delete([5]), msg_pb2.DeleteRequest, 1 << 62), pb((1, CID), (2, 1))
    [p] = _dispatch(tmp_path, [(bad[0], props(kind, tt(1), header=bad[1])), ins(2, [6])])
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(6, tt(2)): 1})
    assert [q["offset"] for q in quarantined(tmp_path, p)] == [FIRST]


@pytest.mark.xfail(strict=True, reason=(
    "executor/dispatch.py _on_wal_message: a message without _vc that is no TimeTick is adapted and, unless "
    "refused, dropped without a trace; an Insert or Delete without _vc (Milvus's scanner hands such a message "
    "to every vchannel of the pchannel) must not vanish silently: it is to be quarantined"))
def test_an_insert_without_its_vchannel_does_not_vanish(tmp_path):
    no_vchannel = insert([7]), props("Insert", tt(1), vchannel=None, header=insert_header({PID: SEG}))
    [p] = _dispatch(tmp_path, [no_vchannel, ins(2, [8]), other(3)])
    assert rows(tmp_path, p, TableKind.INSERT) == Counter({(8, tt(2)): 1})
    assert [q["offset"] for q in quarantined(tmp_path, p)] == [FIRST]
