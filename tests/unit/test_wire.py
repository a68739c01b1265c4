"""Names, positions, schemas and message decoding."""

import numpy as np
import pyarrow as pa
import pytest
from pymilvus.grpc_gen import common_pb2, msg_pb2

from deltanode.delta.layout import StorageLayout
from deltanode.etcd import flush_request
from deltanode.executor import decode
from deltanode.mq.broker import Broker
from deltanode.mq.milvus_producer import MilvusProducer, Proxy
from deltanode.wire.names import UnsafeNameError, check_safe, pchannel_of, vchannel_name
from deltanode.wire.positions import (
    CODECS,
    compose_ts,
    kafka_msg_id,
    kafka_offset,
    pulsar_ledger_entry,
    pulsar_msg_id,
)
from deltanode.wire.schema import CollectionLayout, SchemaError, schema_from_json

ALL_TYPES = {"fields": [
    {"name": "pk", "data_type": "VarChar", "is_primary_key": True, "max_length": 32},
    {"name": "fv", "data_type": "FloatVector", "dim": 4}, {"name": "bv", "data_type": "BinaryVector", "dim": 16},
    {"name": "hv", "data_type": "Float16Vector", "dim": 2}, {"name": "j", "data_type": "JSON"},
    {"name": "b", "data_type": "Bool"}, {"name": "i8", "data_type": "Int8"}, {"name": "i16", "data_type": "Int16"},
    {"name": "i32", "data_type": "Int32"}, {"name": "i64", "data_type": "Int64"},
    {"name": "f", "data_type": "Float"}, {"name": "d", "data_type": "Double"},
]}


@pytest.mark.parametrize("name", ["../etc", "a/b", "..", "", "x\x00y", "/abs", "a\\b", ".hidden", "x" * 300])
def test_hostile_names_are_refused(name):
    with pytest.raises(UnsafeNameError):
        check_safe("vchannel", name)


def test_milvus_names_round_trip():
    v = vchannel_name("by-dev-rootcoord-dml_3", 448712345678901234, 0)
    assert v == "by-dev-rootcoord-dml_3_448712345678901234v0"
    assert pchannel_of(v) == "by-dev-rootcoord-dml_3"
    assert check_safe("vchannel", v) == v


def test_positions_and_tso_match_milvus():
    assert kafka_msg_id(5) == bytes.fromhex("0500000000000000")
    assert kafka_offset(kafka_msg_id(123456789)) == 123456789
    assert compose_ts(1700000000000, 5) == 445644800000000005
    with pytest.raises(ValueError):
        kafka_offset(b"\x01\x02")


def test_pulsar_positions_are_the_message_id_data_milvus_stores():
    import pulsar
    assert pulsar_msg_id(12, 3) == bytes.fromhex("080c100318002000")   # docs/pulsar.md: what Milvus 2.3/2.4 write
    assert pulsar_ledger_entry(pulsar_msg_id(2 ** 40, 7, -1, -1)) == (2 ** 40, 7)
    ours = pulsar.MessageId.deserialize(pulsar_msg_id(12, 3))
    assert (ours.ledger_id(), ours.entry_id()) == (12, 3)
    assert pulsar_ledger_entry(pulsar.MessageId(-1, 12, 3, -1).serialize()) == (12, 3)   # the client omits -1s
    for bad in (b"", b"\x08\x0c", b"\x08", b"\x0d\x00\x00\x00\x00"):
        with pytest.raises(ValueError, match="MessageIdData|varint"):
            pulsar_ledger_entry(bad)
    # a channel checkpoint a real Milvus 2.3.5 on Apache Pulsar 4.0.7 stored (docs/milvus-facts.md §9): DeltaNode
    # reads it as ledger 5, entry 18, and writes that position back byte for byte as Milvus does
    seen = bytes.fromhex("0805101218002000")
    assert CODECS["pulsar"].from_msg_id(seen) == 5 << 24 | 18
    assert CODECS["pulsar"].to_msg_id(5 << 24 | 18) == seen


def test_storage_paths_stay_under_the_root(tmp_path):
    layout = StorageLayout(str(tmp_path))
    assert layout.insert_log(42) == f"{tmp_path}/insert_log/42"
    with pytest.raises(ValueError):
        layout.insert_log("../x")  # type: ignore[arg-type]


@pytest.mark.parametrize("doc, message", [
    ({"fields": []}, "non-empty"),
    ({"fields": [{"name": "v", "data_type": "FloatVector", "dim": 4}]}, "primary key"),
    ({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                 {"name": "v", "data_type": "FloatVector"}]}, "dim"),
    ({"fields": [{"name": "pk", "data_type": "Nope", "is_primary_key": True}]}, "unknown data_type"),
    ({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                 {"name": "_ts", "data_type": "Int64"}]}, "reserved"),
])
def test_bad_schemas_say_why(doc, message):
    with pytest.raises(SchemaError, match=message):
        schema_from_json(doc, "c")


def test_every_supported_type_decodes_to_its_arrow_column():
    layout = CollectionLayout.from_proto(schema_from_json(ALL_TYPES, "c"))
    # builds messages only; never sends
    producer = MilvusProducer(Proxy(Broker("kafka", "127.0.0.1:1")), layout, 1, "c")
    req = producer.insert_request("v", 1, 1, 3)
    msg_type, msg = decode.parse(req.SerializeToString())
    assert msg_type == common_pb2.MsgType.Insert
    cols, n = decode.insert_columns(layout, msg)
    table = pa.Table.from_arrays(cols, names=[f.name for f in layout.fields] + ["_ts", "_row_id"])
    assert n == 3 and table.schema.equals(pa.schema(list(layout.insert_schema())[:-2]), check_metadata=False)
    assert table.column("pk").to_pylist() == ["pk-1", "pk-2", "pk-3"]
    np.testing.assert_array_equal(np.array(table.column("fv")[1].as_py(), dtype=np.float32),
                                  np.asarray(req.fields_data[1].vectors.float_vector.data[4:8], dtype=np.float32))
    assert [len(x) for x in table.column("bv").to_pylist()] == [2, 2, 2]
    assert [len(x) for x in table.column("hv").to_pylist()] == [4, 4, 4]
    assert table.column("j").to_pylist()[0] == '{"i": 1}'


def test_off_schema_inserts_are_rejected_with_a_reason():
    layout = CollectionLayout.from_proto(schema_from_json(ALL_TYPES, "c"))
    producer = MilvusProducer(Proxy(Broker("kafka", "127.0.0.1:1")), layout, 1, "c")
    req = producer.insert_request("v", 1, 1, 2)
    req.fields_data[9].scalars.long_data.data.append(7)                  # 3 values for 2 rows
    with pytest.raises(decode.Reject, match="3 values for 2 rows"):
        decode.insert_columns(layout, req)
    req = producer.insert_request("v", 1, 1, 2)
    req.fields_data[6].scalars.int_data.data[0] = 1000                   # Int8 out of range
    with pytest.raises(decode.Reject, match="out of range"):
        decode.insert_columns(layout, req)
    req = producer.insert_request("v", 1, 1, 2)
    del req.fields_data[3]
    with pytest.raises(decode.Reject, match="missing"):
        decode.insert_columns(layout, req)
    req = producer.insert_request("v", 1, 1, 2)
    req.fields_data[5].type = 5                                           # Bool field claims Int64
    with pytest.raises(decode.Reject, match="schema says Bool"):
        decode.insert_columns(layout, req)


def test_unparseable_and_unknown_messages_are_rejected():
    with pytest.raises(decode.Reject, match="empty"):
        decode.parse(b"")
    with pytest.raises(decode.Reject):
        decode.parse(b"\xff\xff\xff")
    with pytest.raises(decode.Reject, match="unknown message type 4242"):
        decode.parse(common_pb2.MsgHeader(base=common_pb2.MsgBase(msg_type=4242)).SerializeToString())
    assert decode.parse(msg_pb2.CreatePartitionRequest(
        base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreatePartition)).SerializeToString())[1] is None


def test_delete_key_type_must_match_the_primary_key():
    layout = CollectionLayout.from_proto(schema_from_json(ALL_TYPES, "c"))
    req = msg_pb2.DeleteRequest(timestamps=[1, 2], num_rows=2)
    req.primary_keys.int_id.data.extend([1, 2])
    with pytest.raises(decode.Reject, match="VarChar"):
        decode.delete_columns(layout, req)


def test_a_flush_request_key_names_the_collection_and_a_bad_one_says_why():
    key = flush_request.flush_key("by-dev/meta", 42)
    assert key == "by-dev/meta/deltanode/flush/42"
    assert flush_request.decode("by-dev/meta", key, flush_request.encode(7).encode()) == (42, 7)
    for bad_key, value in ((key, b"{}"), (key, b'{"flush_ts": -1}'), (key, b"not json"),
                           ("by-dev/meta/deltanode/flush/x", b'{"flush_ts": 7}')):
        with pytest.raises(flush_request.BadFlushRequest, match="deltanode/flush/"):
            flush_request.decode("by-dev/meta", bad_key, value)
