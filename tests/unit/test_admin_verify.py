"""``admin verify``'s pure parts: keys counted as multisets, field values brought to one form from
pymilvus's and from Delta's shapes, the expressions that page Milvus's keys, which collections a
command line names, and its usage errors (exit 2). The command against a real Milvus:
tests/integration/test_admin_verify.py."""

from __future__ import annotations

import base64
import json
import math
import struct

import numpy as np
import pytest

from deltanode import cli
from deltanode.admin.milvus_reader import after, among, key_literal
from deltanode.admin.row_differences import (
    DifferenceKind,
    delta_values,
    differing_fields,
    key_differences,
    milvus_values,
)
from deltanode.admin.verify import UsageError, selected
from deltanode.datacoord.catalog import CollectionRecord, CollectionStatus, encode_schema
from deltanode.wire.schema import CollectionLayout, DataType, FieldSpec, schema_from_json

INT_PK = FieldSpec(100, "id", DataType.Int64, is_primary_key=True)
STR_PK = FieldSpec(100, "key", DataType.VarChar, is_primary_key=True, max_length=64)


@pytest.fixture(autouse=True)
def _no_logging_setup(monkeypatch):
    monkeypatch.setattr(cli, "setup_logging", lambda level="INFO": None)


def kinds(differences) -> dict:
    return {d.key: (d.kind, d.milvus_copies, d.delta_copies) for d in differences}


def test_keys_are_counted_as_multisets():
    found = key_differences([1, 2, 3, 4, 5], [1, 1, 3, 4, 4, 4, 6, 6])
    missing, extra, duplicated = DifferenceKind.MISSING_IN_DELTA, DifferenceKind.EXTRA_IN_DELTA, \
        DifferenceKind.DUPLICATED_IN_DELTA
    assert kinds(found) == {2: (missing, 1, 0), 5: (missing, 1, 0), 1: (duplicated, 1, 2), 4: (duplicated, 1, 3),
                            6: (extra, 0, 2)}
    assert [d.key for d in found] == [1, 2, 4, 5, 6]   # in key order
    # A row lost and another doubled keep the counts equal: only the keys tell.
    assert kinds(key_differences(["a", "b"], ["a", "a"])) == {
        "a": (DifferenceKind.DUPLICATED_IN_DELTA, 1, 2), "b": (DifferenceKind.MISSING_IN_DELTA, 1, 0)}
    assert key_differences([3, 1, 2], [2, 3, 1]) == []


EVERY_TYPE = {"enable_dynamic_field": True, "fields": [
    {"name": "id", "data_type": "Int64", "is_primary_key": True},
    {"name": "flag", "data_type": "Bool"}, {"name": "i8", "data_type": "Int8"},
    {"name": "f", "data_type": "Float"}, {"name": "d", "data_type": "Double", "nullable": True},
    {"name": "s", "data_type": "VarChar", "max_length": 16}, {"name": "j", "data_type": "JSON"},
    {"name": "a_f", "data_type": "Array", "element_type": "Float", "max_capacity": 4},
    {"name": "fv", "data_type": "FloatVector", "dim": 2}, {"name": "bv", "data_type": "BinaryVector", "dim": 16},
    {"name": "hv", "data_type": "Float16Vector", "dim": 2}, {"name": "sv", "data_type": "SparseFloatVector"},
]}
LAYOUT = CollectionLayout.from_proto(schema_from_json(EVERY_TYPE, "every_type"))


def milvus_row(**changes) -> dict:
    """A row as pymilvus's MilvusClient.query gives it: the dynamic field's keys at the top."""
    row = {"id": 7, "flag": True, "i8": -3, "f": float(np.float32(1 / 3)), "d": None, "s": "é\"x",
           "j": {"n": 1, "tags": ["a"]}, "a_f": [float(np.float32(0.1)), 2.5], "fv": [0.5, float(np.float32(0.7))],
           "bv": [b"\x01\xff"], "hv": np.array([1.5, -2], np.float16).tobytes(), "sv": {3: 0.25, 1: 1.5},
           "color": "red", "score": 2}
    return {**row, **changes}


def delta_row(**changes) -> dict:
    """The same row as the insert table holds it (``to_pylist``): JSON as text, the dynamic field as
    the JSON object ``$meta``, a sparse vector as (index, value) pairs."""
    row = {"id": 7, "flag": True, "i8": -3, "f": float(np.float32(1 / 3)), "d": None, "s": "é\"x",
           "j": json.dumps({"tags": ["a"], "n": 1}), "a_f": [float(np.float32(0.1)), 2.5],
           "fv": [0.5, float(np.float32(0.7))], "bv": b"\x01\xff", "hv": np.array([1.5, -2], np.float16).tobytes(),
           "sv": [(1, 1.5), (3, 0.25)], "$meta": json.dumps({"score": 2, "color": "red"})}
    return {**row, **changes}


def test_a_row_from_milvus_and_from_delta_compare_equal_field_by_field():
    assert differing_fields(milvus_values(LAYOUT, milvus_row()), delta_values(LAYOUT, delta_row())) == ()


@pytest.mark.parametrize("field,milvus_value,delta_value", [
    ("fv", [0.5, float(np.float32(0.7))], [0.5, float(np.nextafter(np.float32(0.7), np.float32(1)))]),  # one ulp
    ("f", float(np.float32(1 / 3)), float(np.nextafter(np.float32(1 / 3), np.float32(0)))),
    ("a_f", [float(np.float32(0.1)), 2.5], [float(np.float32(0.1))]),
    ("d", None, 0.0),
    ("j", {"n": 1, "tags": ["a"]}, json.dumps({"n": 2, "tags": ["a"]})),
    ("bv", [b"\x01\xff"], b"\x01\xfe"),
    ("hv", np.array([1.5, -2], np.float16).tobytes(), np.array([1.5, 2], np.float16).tobytes()),
    ("sv", {3: 0.25, 1: 1.5}, [(1, 1.5)]),
    ("s", "é\"x", "é\"y"),
])
def test_a_field_that_differs_is_named(field, milvus_value, delta_value):
    got = differing_fields(milvus_values(LAYOUT, milvus_row(**{field: milvus_value})),
                           delta_values(LAYOUT, delta_row(**{field: delta_value})))
    assert got == (field,)


def test_the_dynamic_field_compares_as_the_keys_outside_the_schema():
    milvus = milvus_values(LAYOUT, milvus_row(color="blue"))
    assert differing_fields(milvus, delta_values(LAYOUT, delta_row())) == ("$meta",)
    no_keys = {k: v for k, v in milvus_row().items() if k not in ("color", "score")}
    assert differing_fields(milvus_values(LAYOUT, no_keys), delta_values(LAYOUT, delta_row(**{"$meta": None}))) == ()
    assert differing_fields(milvus_values(LAYOUT, no_keys), delta_values(LAYOUT, delta_row(**{"$meta": "{}"}))) == ()


def test_floats_compare_bit_for_bit():
    nan = milvus_values(LAYOUT, milvus_row(d=math.nan))
    assert differing_fields(nan, delta_values(LAYOUT, delta_row(d=math.nan))) == ()
    assert differing_fields(nan, delta_values(LAYOUT, delta_row(d=-math.nan))) == ("d",)   # another NaN
    assert struct.pack("<d", 0.0) != struct.pack("<d", -0.0)
    assert differing_fields(milvus_values(LAYOUT, milvus_row(d=0.0)),
                            delta_values(LAYOUT, delta_row(d=-0.0))) == ("d",)


def test_binary_vectors_in_every_shape_pymilvus_gives():
    for shape in (b"\x01\xff", [b"\x01\xff"], bytearray(b"\x01\xff")):
        assert differing_fields(milvus_values(LAYOUT, milvus_row(bv=shape)), delta_values(LAYOUT, delta_row())) == ()
    as_numbers = milvus_row(hv=[1.5, -2.0])
    assert differing_fields(milvus_values(LAYOUT, as_numbers), delta_values(LAYOUT, delta_row())) == ()
    # base64 is the tests' side client's form, not pymilvus's: a different value
    assert differing_fields(milvus_values(LAYOUT, milvus_row(bv=base64.b64encode(b"\x01\xff"))),
                            delta_values(LAYOUT, delta_row())) == ("bv",)


def test_expressions_page_and_pick_keys_milvus_can_parse():
    assert after(INT_PK, None) == ""
    assert after(INT_PK, 41) == "id >= 42"
    assert after(INT_PK, -(1 << 63)) == f"id >= {-(1 << 63) + 1}"   # -2^63 has no literal in Milvus's parser
    assert after(STR_PK, 'a"b\\c') == 'key > "a\\"b\\\\c"'
    assert key_literal(STR_PK, "é😀\n") == '"é😀\\n"'   # no \u escape: Milvus reads UTF-8 as it is
    assert among(INT_PK, [3, 1]) == "id in [3, 1]"
    assert among(INT_PK, [-(1 << 63), 5]) == f"id in [5] or id < {-(1 << 63) + 1}"
    assert among(INT_PK, [-(1 << 63)]) == f"id < {-(1 << 63) + 1}"
    assert among(STR_PK, ["x", "y'"]) == 'key in ["x", "y\'"]'


def record(name: str, collection_id: int, state=CollectionStatus.CREATED, database: str = "default"):
    schema = schema_from_json({"fields": [{"name": "id", "data_type": "Int64", "is_primary_key": True}]}, name)
    return CollectionRecord(collection_id=collection_id, name=name, schema_b64=encode_schema(schema), shards=1,
                            vchannels=[f"v{collection_id}"], pchannels=["p"], state=state, database=database)


def test_which_collections_a_command_line_names():
    records = [record("a", 1), record("b", 2, CollectionStatus.DROPPING), record("c", 3, database="db2")]
    assert [r.name for r in selected(records, ())] == ["a", "c"]   # every created one
    assert [r.collection_id for r in selected(records, ("c", "1", "a"))] == [3, 1]
    assert [r.collection_id for r in selected(records, ("db2.c",))] == [3]
    with pytest.raises(UsageError, match="no collection named 'nope'"):
        selected(records, ("nope",))
    with pytest.raises(UsageError, match="'b' is dropping in Milvus"):
        selected(records, ("b",))


@pytest.fixture
def conf_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for k in list(__import__("os").environ):
        if k.startswith("DELTANODE_"):
            monkeypatch.delenv(k)
    p = tmp_path / "t.conf"
    p.write_text("storage.root = data\nlog.level = WARNING\n")
    return p


def test_usage_errors_exit_2(conf_file, capsys):
    assert cli.main(["admin", "verify", "--help"]) == 0
    assert "--all-fields" in capsys.readouterr().out
    assert cli.main(["admin", "verify", "--conf", str(conf_file), "--sample", "5", "--all-fields"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert cli.main(["admin", "verify", "--conf", str(conf_file)]) == 2   # no milvus.meta.root: no Milvus to ask
    assert "milvus.meta.root is not set" in capsys.readouterr().err
    mirror = conf_file.parent / "m.conf"
    mirror.write_text(conf_file.read_text() + "etcd.root = deltanode/meta\nmilvus.meta.root = by-dev/meta\n")
    assert cli.main(["admin", "verify", "--conf", str(mirror), "--sample", "0"]) == 2
    assert "--sample must be at least 1" in capsys.readouterr().err


def test_waiting_for_a_datanode_stops_once_no_checkpoint_moves(tmp_path, monkeypatch):
    """No table at all (no DeltaNode ever ran): the wait ends after the stall window, not the timeout."""
    import time

    from deltanode.admin import verify
    from deltanode.delta.layout import StorageLayout
    monkeypatch.setattr(verify, "STALLED_AFTER_S", 1.0)
    started = time.monotonic()
    late = verify.behind(StorageLayout(str(tmp_path)), record("a", 1), ts=10**18, timeout=60.0)
    assert late == ("v1",)
    assert time.monotonic() - started < 5


def test_a_vchannel_that_never_committed_is_caught_up_when_nothing_is_past_its_collections_start(tmp_path):
    """A Milvus 2.6 shard that never got a message past its CreateCollection has no checkpoint and no
    TimeTick to wait for; one whose pchannel holds more has rows still to come."""
    import time

    from deltanode.admin import verify
    from deltanode.delta.layout import StorageLayout

    class Watermarks:   # the broker's answers: its pchannels' high watermarks (pure logic)
        def highs(self, keys, timeout=10.0):
            return {key: {"p_0": 8, "p_1": 8}[key[0]] for key in keys}

        def close(self):
            pass

    class Broker:
        def watermarks(self):
            return Watermarks()

    schema = schema_from_json({"fields": [{"name": "id", "data_type": "Int64", "is_primary_key": True}]}, "c")
    rec = CollectionRecord(collection_id=7, name="c", schema_b64=encode_schema(schema), shards=2,
                           vchannels=["p_0_7v0", "p_1_7v1"], pchannels=["p_0", "p_1"],
                           start_offsets={"p_0": 7, "p_1": 3})
    started = time.monotonic()
    assert verify.behind(StorageLayout(str(tmp_path)), rec, ts=10**18, timeout=1.0, broker=Broker()) == ("p_1_7v1",)
    assert time.monotonic() - started < 3
