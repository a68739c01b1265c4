"""A field added to a live Milvus 2.6 collection, through a task's dispatcher and routers: a schema
change that adds columns, delivered by a TimeTick in time-tick order like any message, ends the
vchannel's portion at the last clean point before that TimeTick (before an open transaction's
BeginTxn, or at its first offset), carrying the new schema; read again with that schema it seals the
segments flushed for it, and the inserts after it land with the new column; one that is no pure
addition of nullable fields is quarantined naming the field (``executor.schema_change``)."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow.parquet as pq
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.executor import schema_change
from deltanode.executor.contexts import TaskContexts
from deltanode.executor.dispatch import PchannelDispatcher
from deltanode.executor.route import VchannelRouter
from deltanode.records import (
    ControlEvent,
    EventKind,
    Portion,
    ReadRange,
    ReplayState,
    RouteContext,
    SchemaChange,
    TableKind,
)
from deltanode.state.channel_state import ChannelState, SegmentMeta, SegmentState
from deltanode.vchannel.state_update import advance
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.schema import CollectionLayout

from .wal26 import (
    CID,
    LAYOUT,
    PCHANNEL,
    PID,
    SCHEMA,
    VCHANNEL,
    added_field,
    insert,
    insert_header,
    pb,
    props,
    time_tick,
)
from .wal26 import schema_change as schema_message

T0 = 1_700_000_000_000 << 18
SEG, NEW_SEG = 900, 901
NEW = added_field(1)
NEW_LAYOUT = CollectionLayout.from_proto(NEW)
Message = tuple[bytes, dict[str, str] | None]


def tt(ms: int) -> int:
    return T0 + (ms << 18)


def ins(ms: int, pks: list[int], *, seg: int = SEG, notes: list[str | None] | None = None,
        txn: tuple[int, int] | None = None) -> Message:
    """An insert; ``notes``: the added field's values (None: null), absent when not given (an insert
    the proxy sent before the field was added)."""
    payload = insert(pks)
    if notes is not None:
        req = msg_pb2.InsertRequest.FromString(payload)
        fd = req.fields_data.add(type=schema_pb2.DataType.VarChar, field_name="note", field_id=102)
        fd.scalars.string_data.data.extend(n or "" for n in notes)
        fd.valid_data.extend(n is not None for n in notes)
        payload = req.SerializeToString()
    return payload, props("Insert", tt(ms), header=insert_header({PID: seg}), txn=txn)


def change(ms: int, schema: schema_pb2.CollectionSchema = NEW, flushed: tuple[int, ...] = (SEG,), *,
           alter: bool = True) -> Message:
    payload, header = schema_message(schema, list(flushed), alter=alter)
    return payload, props("AlterCollection" if alter else "SchemaChange", tt(ms), header=header)


def begin(ms: int, txn_id: int) -> Message:
    return b"", props("BeginTxn", tt(ms), header=pb((1, 5000)), txn=(txn_id, 5000))


def commit(ms: int, txn_id: int) -> Message:
    return b"", props("CommitTxn", tt(ms), txn=(txn_id, 5000))


def tick(ms: int) -> Message:
    """A TimeTick of every vchannel of the pchannel."""
    return time_tick(tt(ms)), props("TimeTick", tt(ms), vchannel=None)


def dispatch(tmp_path, messages: list[Message], *, schema: schema_pb2.CollectionSchema = SCHEMA,
             first: int = 10, replay: ReplayState | None = None) -> list[Portion]:
    storage = StorageLayout(str(tmp_path))
    layout = CollectionLayout.from_proto(schema)
    ctx = RouteContext(VCHANNEL, CID, "c", PCHANNEL, 0, first, replay=replay)
    dispatcher = PchannelDispatcher(
        ReadRange(PCHANNEL, 0, first, first + len(messages), (VCHANNEL,)), TaskContexts.of([ctx]),
        lambda c, a, b: VchannelRouter(c, layout, storage, a, b, schema_version=schema.version))
    for offset, (value, p) in enumerate(messages, start=first):
        dispatcher.on_message(offset, value, p)
    portions, _ = dispatcher.finish()
    return portions


def rows(tmp_path, portion: Portion) -> Counter:
    """(pk, note, _ts) of the portion's insert files (note None where the file has no such column)."""
    root = StorageLayout(str(tmp_path)).insert_log(CID)
    out: Counter = Counter()
    for f in portion.files:
        if f.table == TableKind.INSERT:
            t = pq.read_table(os.path.join(root, f.path))
            notes = t.column("note").to_pylist() if "note" in t.column_names else [None] * len(t)
            out.update(zip(t.column("pk").to_pylist(), notes, t.column("_ts").to_pylist()))
    return out


def quarantined(tmp_path, portion: Portion) -> list[dict]:
    root = StorageLayout(str(tmp_path)).quarantine()
    return [r for f in portion.files if f.table == TableKind.QUARANTINE
            for r in pq.read_table(os.path.join(root, f.path)).to_pylist()]


# -- the judgement ------------------------------------------------------------------------------
def _changed(edit) -> bytes:
    schema = schema_pb2.CollectionSchema()
    schema.CopyFrom(NEW)
    edit(schema)
    return schema.SerializeToString()


def test_a_pure_addition_of_nullable_fields_is_adopted_and_one_adding_no_column_is_known():
    assert schema_change.judge(0, LAYOUT, NEW.SerializeToString()) is schema_change.Verdict.ADOPT
    assert schema_change.judge(1, NEW_LAYOUT, NEW.SerializeToString()) is schema_change.Verdict.KNOWN
    # Older than the schema written with: a change the collection took already.
    newer = CollectionLayout.from_proto(added_field(2, name="other", base=NEW))
    assert schema_change.judge(2, newer, NEW.SerializeToString()) is schema_change.Verdict.KNOWN
    # A change of what no column holds (a description, a max_length) adds nothing.
    assert schema_change.judge(1, NEW_LAYOUT, _changed(lambda s: setattr(s, "description", "x"))) \
        is schema_change.Verdict.KNOWN


def _drop_vec(s):
    del s.fields[1]


def _rename(s):
    s.fields[1].name = "vector"


def _retype(s):
    s.fields[1].type_params[0].value = "4"


def _pk(s):
    s.fields[0].is_primary_key = False
    s.fields[2].is_primary_key, s.fields[2].nullable, s.fields[2].data_type = True, False, schema_pb2.DataType.Int64


@pytest.mark.parametrize("edit, reason", [
    (_drop_vec, "field 'vec' (id 101) removed by schema version 1"),
    (_rename, "field 'vec' (id 101) renamed to 'vector' by schema version 1"),
    (_retype, "field 'vec' (id 101) retyped from FloatVector (dim 2) to FloatVector (dim 4) by schema version 1"),
    (_pk, "field 'pk' (id 100) no longer the primary key by schema version 1"),
    (lambda s: setattr(s.fields[2], "nullable", False),
     "field 'note' (id 102) added by schema version 1 is not nullable: the rows written before it would have "
     "no value for it"),
])
def test_what_is_no_pure_addition_is_refused_naming_the_field(edit, reason):
    with pytest.raises(schema_change.NotAnAddition) as e:
        schema_change.judge(0, LAYOUT, _changed(edit))
    assert str(e.value) == reason


# -- the router's cut ---------------------------------------------------------------------------
@pytest.mark.parametrize("alter", [True, False])
def test_a_schema_change_adding_a_column_ends_the_portion_before_the_tick_that_delivers_it(tmp_path, alter):
    messages = [ins(1, [1, 2]), ins(2, [3]), tick(2), change(3, alter=alter), ins(4, [4], seg=NEW_SEG, notes=["a"]),
                tick(4)]
    [p] = dispatch(tmp_path, messages)
    assert (p.first, p.end, p.cut, p.stats.max_tick) == (10, 13, True, tt(2))
    assert p.schema == SchemaChange(schema=NEW.SerializeToString(), version=1, ts=tt(3))
    assert rows(tmp_path, p) == Counter({(1, None, tt(1)): 1, (2, None, tt(1)): 1, (3, None, tt(2)): 1})
    assert p.stats.inserted_rows == 3 and p.events == ()


def test_an_insert_below_the_schema_change_appended_after_it_is_read_again_with_it(tmp_path):
    """Delivered before the change (a lower time tick), the insert is read again with the new schema,
    as everything after the portion's end is: its rows have the new field null, as Milvus reads them."""
    [p] = dispatch(tmp_path, [ins(1, [1]), tick(1), change(3), ins(2, [2]), tick(3)])
    assert (p.end, p.cut, p.stats.max_tick) == (12, True, tt(1)) and p.schema is not None
    assert rows(tmp_path, p) == Counter({(1, None, tt(1)): 1})
    [p] = dispatch(tmp_path, [change(3), ins(2, [2]), tick(3)], schema=NEW, first=12)
    assert rows(tmp_path, p) == Counter({(2, None, tt(2)): 1})
    assert p.events == (ControlEvent(EventKind.SCHEMA_CHANGE, 12, tt(3), segments=(SEG,)),) and not p.cut


def test_read_again_with_the_new_schema_it_seals_the_flushed_segments_and_the_new_column_lands(tmp_path):
    messages = [ins(1, [1, 2]), change(3), ins(4, [4, 5, 6], seg=NEW_SEG, notes=["a", None, "c"]),
                ins(5, [7], seg=NEW_SEG), ins(6, [8]), tick(6)]
    [p] = dispatch(tmp_path, messages, schema=NEW)
    assert (p.first, p.end, p.cut, p.schema) == (10, 16, False, None)
    # The insert before the change lacks the field: null there, as Milvus reads it (so does any that
    # lacks it). The segment the change flushed takes no more rows.
    assert rows(tmp_path, p) == Counter({(1, None, tt(1)): 1, (2, None, tt(1)): 1, (4, "a", tt(4)): 1,
                                         (5, None, tt(4)): 1, (6, "c", tt(4)): 1, (7, None, tt(5)): 1})
    assert p.events == (ControlEvent(EventKind.SCHEMA_CHANGE, 11, tt(3), segments=(SEG,)),)
    [q] = quarantined(tmp_path, p)
    assert q["offset"] == 14 and q["reason"].startswith(f"insert into segment {SEG} with EndTs {tt(6)}, after the "
                                                        f"segment was sealed at ts {tt(3)}")
    state = ChannelState(vchannel=VCHANNEL, collection_id=CID, pchannel=PCHANNEL, checkpoint_offset=10,
                         segments={SEG: SegmentMeta(SEG, PID, SegmentState.GROWING)})
    after = advance(state, [p])
    assert (after.state.segments[SEG].state, after.state.segments[SEG].seal_reason) == (SegmentState.FLUSHED,
                                                                                        "schema change")
    assert after.state.segments[NEW_SEG].state == SegmentState.GROWING and after.urgent


def test_an_open_transaction_moves_the_end_back_before_its_begin_and_the_schema_still_goes(tmp_path):
    messages = [ins(1, [1]), tick(1), begin(2, 41), ins(3, [2], txn=(41, 5000)), change(4, flushed=()),
                commit(5, 41), ins(6, [3], seg=NEW_SEG, notes=["x"]), tick(6)]
    [p] = dispatch(tmp_path, messages)
    assert (p.first, p.end, p.cut) == (10, 12, True)
    assert p.schema is not None and p.schema.version == 1
    assert rows(tmp_path, p) == Counter({(1, None, tt(1)): 1})
    # A transaction open from the first message: an empty portion carries it, read again from there.
    [p] = dispatch(tmp_path, messages[2:], first=12)
    assert p == Portion(VCHANNEL, 12, 12, cut=True, schema=p.schema) and p.schema is not None
    # With the schema taken, the transaction lands whole at its commit, and so does what follows.
    [p] = dispatch(tmp_path, messages[2:], schema=NEW, first=12)
    assert rows(tmp_path, p) == Counter({(2, None, tt(5)): 1, (3, "x", tt(6)): 1})
    assert p.end == 18 and p.schema is None


def test_with_the_replay_filter_active_the_portion_ends_with_the_filter_as_it_was_there(tmp_path):
    replay = ReplayState(flushed=((SEG + 5, tt(50)),))   # active until a tick reaches 50 ms
    messages = [tick(1), ins(2, [1]), tick(3), ins(4, [2]), change(5, flushed=()), tick(6), ins(7, [3])]
    [p] = dispatch(tmp_path, messages, replay=replay)
    assert (p.first, p.end, p.cut, p.stats.max_tick) == (10, 13, True, tt(3))
    assert p.schema is not None and p.replay == replay
    assert rows(tmp_path, p) == Counter({(1, None, tt(2)): 1})


def test_a_schema_change_that_is_no_pure_addition_is_quarantined_and_the_range_goes_on(tmp_path):
    payload, header = schema_message(added_field(1, nullable=False), [SEG])
    [p] = dispatch(tmp_path, [ins(1, [1]), (payload, props("AlterCollection", tt(2), header=header)), ins(3, [2]),
                              tick(3)])
    assert (p.end, p.cut, p.schema) == (14, False, None)
    assert rows(tmp_path, p) == Counter({(1, None, tt(1)): 1, (2, None, tt(3)): 1})
    [q] = quarantined(tmp_path, p)
    assert (q["offset"], q["msg_type"]) == (11, common_pb2.MsgType.AlterCollection)
    assert q["reason"] == (f"schema change of collection {CID}: field 'note' (id 102) added by schema version 1 is "
                           "not nullable: the rows written before it would have no value for it")


def test_another_collections_schema_change_is_not_this_vchannels(tmp_path):
    payload, header = schema_message(NEW, [SEG], collection_id=CID + 1)
    [p] = dispatch(tmp_path, [ins(1, [1]), (payload, props("AlterCollection", tt(2), header=header)), ins(3, [2]),
                              tick(3)])
    assert (p.end, p.cut, p.schema, p.events) == (14, False, None, ())


def _bad_dim(s):
    s.fields[2].type_params.add(key="dim", value="two")


def test_a_new_schema_whose_parameters_do_not_read_is_refused_not_raised():
    with pytest.raises(schema_change.NotAnAddition) as e:
        schema_change.judge(0, LAYOUT, _changed(_bad_dim))
    assert str(e.value) == ("the new schema (version 1) is not one DeltaNode stores: invalid literal for int() with "
                            "base 10: 'two'")


def test_a_schema_change_whose_schema_does_not_read_is_quarantined_and_fails_no_vchannel(tmp_path):
    """Every copy of it would fail its vchannel at every attempt, the vchannels of the collection
    stopping there for good: it is that message's fault, quarantined like a payload that does not parse."""
    payload, header = schema_message(schema_pb2.CollectionSchema.FromString(_changed(_bad_dim)), [SEG])
    [p] = dispatch(tmp_path, [ins(1, [1]), (payload, props("AlterCollection", tt(2), header=header)), ins(3, [2]),
                              tick(3)])
    assert (p.error, p.end, p.cut, p.schema) == (None, 14, False, None)
    assert rows(tmp_path, p) == Counter({(1, None, tt(1)): 1, (2, None, tt(3)): 1})
    [q] = quarantined(tmp_path, p)
    assert (q["offset"], q["msg_type"]) == (11, common_pb2.MsgType.AlterCollection)
    assert q["reason"].startswith(f"schema change of collection {CID}: the new schema (version 1) is not one")
