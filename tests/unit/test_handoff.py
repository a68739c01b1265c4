"""Payload handoff between a task's source and sink through a host-local directory (real files)."""

import os
import time

import pyarrow as pa
import pytest
from deltanode.flowgraph.handoff import KEEP_FREE, MIN_HANDOFF_BYTES, Handoff, HandoffGone, sweep, take
from deltanode.flowgraph.route import Router
from deltanode.mq.milvus_producer import MilvusProducer
from deltanode.storage.binlog_writer import BinlogWriter
from deltanode.storage.channel_state import ChannelState
from deltanode.storage.layout import StorageLayout
from deltanode.wire.schema import CollectionLayout, schema_from_json

BIG = pa.py_buffer(bytes(range(256)) * (MIN_HANDOFF_BYTES // 256 + 1))
LAYOUT = CollectionLayout.from_proto(schema_from_json({"fields": [
    {"name": "pk", "data_type": "Int64", "is_primary_key": True},
    {"name": "vec", "data_type": "FloatVector", "dim": 64}]}, "c"))


def test_a_large_payload_waits_in_a_file_that_the_sink_maps_and_removes(tmp_path):
    handoff = Handoff.open(str(tmp_path / "h"))
    path = handoff.put(BIG)
    assert path is not None and os.path.getsize(path) == BIG.size
    assert take(path).equals(BIG)
    assert not os.path.exists(path)
    with pytest.raises(HandoffGone, match="retries it from the broker"):
        take(path)


def test_small_payloads_and_an_unset_or_unusable_directory_go_inline(tmp_path):
    assert Handoff.open(None) is None
    (tmp_path / "file").write_text("x")
    assert Handoff.open(str(tmp_path / "file" / "h")) is None   # not a directory
    handoff = Handoff.open(str(tmp_path / "h"))
    assert handoff.put(pa.py_buffer(b"x" * 100)) is None
    assert os.listdir(tmp_path / "h") == []


def test_a_directory_that_fails_mid_task_sends_the_rest_inline(tmp_path):
    handoff = Handoff.open(str(tmp_path / "h"))
    os.rmdir(tmp_path / "h")
    assert handoff.put(BIG) is None and handoff.put(BIG) is None


def test_a_failing_task_discards_its_files_and_stale_files_are_swept(tmp_path):
    handoff = Handoff.open(str(tmp_path / "h"))
    taken, left = handoff.put(BIG), handoff.put(BIG)
    take(taken)
    handoff.discard()
    assert not os.path.exists(left)
    old, fresh = handoff.put(BIG), handoff.put(BIG)
    (tmp_path / "h" / "unrelated.txt").write_text("kept")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert sweep(str(tmp_path / "h")) == 1
    assert sorted(os.listdir(tmp_path / "h")) == sorted([os.path.basename(fresh), "unrelated.txt"])


def test_a_routed_insert_reaches_its_binlog_through_the_handoff(tmp_path):
    producer = MilvusProducer("127.0.0.1:1", LAYOUT, 1, "c")  # builds messages only; never sends
    router = Router(LAYOUT, ChannelState("v", 1, "p"), "c", 0, 0, 0, 2, Handoff.open(str(tmp_path / "h")))
    insert = router.route(0, producer.insert_request("v", 5, 1, 400).SerializeToString())
    assert insert.column("_handoff")[0].as_py() is not None and insert.column("_payload")[0].as_py() == b""
    storage = StorageLayout(str(tmp_path / "delta"))
    writer = BinlogWriter(storage.insert_log(1), storage.delta_log(1), storage.quarantine(),
                          LAYOUT.insert_schema(), LAYOUT.delete_schema())
    writer.add(insert)
    result = writer.close()
    assert os.listdir(tmp_path / "h") == []
    assert result.segments[5].rows == 400 and [f.rows for f in result.files] == [400]


def test_a_payload_that_would_fill_the_filesystem_goes_inline(tmp_path):
    handoff = Handoff.open(str(tmp_path / "h"))
    fs = os.statvfs(tmp_path)
    too_big = fs.f_bavail * fs.f_frsize - KEEP_FREE * fs.f_blocks * fs.f_frsize + 1
    assert not handoff._room_for(int(too_big)) and handoff._room_for(BIG.size)
