"""A Milvus 2.6 message's properties and payload, made into what a router takes: every type, the
cipher, versions DeltaNode does not read (``wire.wal_message``, ``executor.wal_adaptor``)."""

from __future__ import annotations

import pytest

from deltanode.executor.wal_adaptor import (
    MSG_FLUSH_SEGMENT,
    MSG_MANUAL_FLUSH,
    Kind,
    SchemaUpdate,
    SegmentSeal,
    adapt,
    restamp,
)
from deltanode.wire import wal_message
from deltanode.wire.milvus_proto import common_pb2
from deltanode.wire.wal_message import Cipher, Txn, WalFormatError, parse

from .wal26 import (
    CID,
    OTHER,
    PID,
    VCHANNEL,
    added_field,
    b64,
    base36,
    delete,
    drop_collection,
    drop_partition,
    insert,
    insert_header,
    pb,
    props,
    schema_change,
    time_tick,
)

MsgType = common_pb2.MsgType
TT = (1_700_000_000_000 << 18) | 5


def adapted(kind: str, payload: bytes = b"", tt: int = TT, **kw):
    return adapt(payload, parse(props(kind, tt, **kw)))


def test_properties_decode_as_milvus_writes_them():
    p = props("Insert", TT, header=insert_header({PID: 900}), txn=(42, 5000), cipher_zone=3,
              broadcast=[VCHANNEL, OTHER], replicated=True)
    assert p["_tt"] == base36(TT) and int(p["_tt"], 36) == TT
    wal = parse(p)
    assert (wal.version, wal.type, wal.time_tick, wal.vchannel, wal.name) == (1, 2, TT, VCHANNEL, "Insert")
    assert wal.txn == Txn(txn_id=42, keepalive_ms=5000) and wal.txn.expires
    assert wal.cipher == Cipher(zone=3, collection_id=CID, payload_bytes=99)
    assert wal.broadcast and wal.replicated
    assert parse(props("BeginTxn", TT, txn=(1, -1000))).txn == Txn(txn_id=1, keepalive_ms=-1000)
    assert not parse(props("BeginTxn", TT, txn=(1, -1000))).txn.expires   # -1 s: never expires
    tick = parse(props("TimeTick", TT, vchannel=None))
    assert tick.vchannel is None and tick.header == b""
    assert wal_message.version({"_t": "2"}) == 0   # no _v: a message from before 2.6


@pytest.mark.parametrize("key, value, says", [
    ("_tt", "not base36!", "time tick _tt 'not base36!' is not base 36"),
    ("_tt", "zzzzzzzzzzzzzz", "out of the uint64 range"),
    ("_t", "two", "message type _t 'two' is not a decimal number"),
    ("_v", "one", "payload version _v 'one'"),
    ("_h", "***", "header _h is not base64"),
    ("_tx", "AAAA", "_tx is not a base64 TxnContext"),
])
def test_a_property_that_does_not_decode_is_named(key, value, says):
    p = props("Insert", TT)
    p[key] = value
    with pytest.raises(WalFormatError, match=says.replace("(", r"\(").replace(")", r"\)")):
        parse(p)
    p = props("CreateCollection", TT, broadcast=[VCHANNEL])
    del p["_vc"]
    with pytest.raises(WalFormatError, match="broadcast"):
        parse(p)


def test_an_insert_takes_its_time_tick_segment_and_shard_from_the_properties():
    a = adapted("Insert", insert([1, 2, 3], vchannel="the proxy's guess"),
                header=insert_header({PID + 1: 901, PID: 900}))
    assert a.kind is Kind.DML and a.msg_type == MsgType.Insert
    msg = a.msg
    assert list(msg.timestamps) == [TT] * 3 and msg.base.timestamp == TT
    assert (msg.segmentID, msg.shardName, list(msg.rowIDs)) == (900, VCHANNEL, [1, 2, 3])


def test_an_insert_without_its_partitions_assignment_or_of_another_collection_is_refused():
    a = adapted("Insert", insert([1]), header=insert_header({PID + 1: 901}))
    assert a.kind is Kind.REJECT and a.msg_type == MsgType.Insert
    assert a.reason == f"Insert of partition {PID} without a segment assignment for it in its header (_h assigns " \
                       f"partitions [{PID + 1}])"
    a = adapted("Insert", insert([1], collection_id=CID + 1), header=insert_header({PID: 900}))
    assert a.kind is Kind.REJECT and "collection" in a.reason


def test_a_delete_takes_the_time_tick_for_every_key():
    a = adapted("Delete", delete([4, 5]), header=pb((1, CID), (2, 2)))
    assert a.kind is Kind.DML and a.msg_type == MsgType.Delete
    assert list(a.msg.timestamps) == [TT, TT] and a.msg.shardName == VCHANNEL


@pytest.mark.parametrize("kind, payload", [
    ("TimeTick", time_tick(1)), ("CreateCollection", b""), ("CreatePartition", b""), ("CreateSegment", b""),
    ("CreateIndex", b""),
])
def test_types_that_carry_nothing_for_a_vchannels_rows_only_tick(kind, payload):
    assert adapted(kind, payload, header=pb((1, CID), (2, PID), (3, 900))).kind is Kind.TICK


def test_flushes_seal_their_segments():
    a = adapted("Flush", header=pb((1, CID), (2, PID), (3, 900)))   # collection_id, partition_id, segment_id
    assert (a.kind, a.msg_type, a.seal) == (Kind.CONTROL, MSG_FLUSH_SEGMENT, SegmentSeal(segments=(900,), ts=TT))
    # ManualFlushMessageHeader: collection_id, flush_ts, segment_ids
    a = adapted("ManualFlush", header=pb((1, CID), (2, TT - 9), (3, [900, 901])))
    assert (a.kind, a.msg_type, a.seal) == (Kind.CONTROL, MSG_MANUAL_FLUSH, SegmentSeal(segments=(900, 901),
                                                                                          ts=TT - 9))


def test_drops_carry_their_time_tick():
    a = adapted("DropPartition", drop_partition(PID), header=pb((1, CID), (2, PID)))
    assert (a.kind, a.msg_type, a.msg.partitionID, a.msg.base.timestamp) == (Kind.CONTROL, MsgType.DropPartition,
                                                                             PID, TT)
    a = adapted("DropCollection", drop_collection(), header=pb((1, CID), (2, 1)))
    assert (a.kind, a.msg_type, a.msg.collectionID, a.msg.base.timestamp) == (Kind.CONTROL, MsgType.DropCollection,
                                                                              CID, TT)


def test_an_encrypted_message_is_refused_with_its_zone_never_decoded():
    a = adapted("Insert", b"\x8a\x01ciphertext that would not parse", header=insert_header({PID: 900}), cipher_zone=3)
    assert (a.kind, a.msg_type, a.msg) == (Kind.REJECT, MsgType.Insert, None)
    assert a.reason == "encrypted by Milvus's cipher (zone 3): DeltaNode has no key"


@pytest.mark.parametrize("kind, kw, reason", [
    ("Insert", {"version": 3}, "Milvus message version _v 3 (Insert): DeltaNode reads versions 0 to 2"),
    ("Insert", {"version": 2}, "Insert with payload version _v 2: Milvus writes it as _v 1"),
    ("SchemaChange", {"header": pb((1, CID))}, f"SchemaChange of the schema of collection {CID} carries no schema"),
    ("Import", {}, "Import: a bulk import of files, not rows on the channel"),
])
def test_what_deltanode_cannot_apply_is_refused_naming_type_and_version(kind, kw, reason):
    a = adapted(kind, **kw)
    assert a.kind is Kind.REJECT and a.reason.startswith(reason), a.reason


def test_an_unknown_type_or_a_txn_message_on_the_wire_is_refused():
    p = props("Insert", TT)
    p["_t"] = "77"
    a = adapt(b"", parse(p))
    assert (a.kind, a.msg_type) == (Kind.REJECT, None)
    assert a.reason == "Milvus message type _t 77 (unknown), _v 1: not applied"
    p["_t"], p["_v"] = "999", "2"
    assert "assembled by a reader" in adapt(b"", parse(p)).reason


@pytest.mark.parametrize("alter, kind, msg_type", [(True, "AlterCollection", MsgType.AlterCollection),
                                                   (False, "SchemaChange", MsgType.AddCollectionField)])
def test_a_schema_change_carries_the_whole_new_schema_and_the_segments_flushed_for_it(alter, kind, msg_type):
    schema = added_field()
    payload, header = schema_change(schema, [900, 901], alter=alter)
    a = adapted(kind, payload, header=header)
    assert (a.kind, a.msg_type) == (Kind.SCHEMA, msg_type)
    assert a.schema == SchemaUpdate(collection_id=CID, schema=schema.SerializeToString(), flushed=(900, 901), ts=TT)


def test_an_alter_collection_of_no_schema_only_ticks_and_one_of_the_schema_without_it_is_refused():
    # AlterCollectionMessageHeader: db_id 1, collection_id 2, update_mask 3 (FieldMask: paths 1)
    assert adapted("AlterCollection", header=pb((1, 1), (2, CID), (3, pb((1, "properties"))))).kind is Kind.TICK
    a = adapted("AlterCollection", header=pb((1, 1), (2, CID), (3, pb((1, "schema")))))
    assert (a.kind, a.msg_type) == (Kind.REJECT, MsgType.AlterCollection)
    assert a.reason == f"AlterCollection of the schema of collection {CID} carries no schema"


def test_a_payload_that_does_not_parse_is_refused():
    a = adapted("Insert", b"\xff\xff\xff", header=insert_header({PID: 900}))
    assert a.kind is Kind.REJECT and a.reason.startswith("Insert payload (_v 1) does not parse")
    p = props("Flush", TT)
    p["_h"] = b64(b"\xff\xff")
    assert adapt(b"", parse(p)).reason.startswith("Flush header (_h) is not a FlushMessageHeader")


def test_transaction_markers_need_their_context():
    assert adapted("BeginTxn", header=pb((1, 5000)), txn=(1, 5000)).kind is Kind.BEGIN
    assert adapted("CommitTxn", txn=(1, 5000)).kind is Kind.COMMIT
    assert adapted("RollbackTxn", txn=(1, 5000)).kind is Kind.ROLLBACK
    assert adapted("BeginTxn", header=pb((1, 5000))).kind is Kind.TICK   # no _tx: no transaction's


def test_a_member_is_restamped_with_its_commit():
    a = adapted("Insert", insert([1, 2]), header=insert_header({PID: 900}), txn=(1, 5000))
    assert list(restamp(a, TT + 7).msg.timestamps) == [TT + 7, TT + 7]
    seal = adapted("Flush", header=pb((1, CID), (2, PID), (3, 900)))
    assert restamp(seal, TT + 7).seal == SegmentSeal(segments=(900,), ts=TT + 7)
