"""The Delta log's JSON (``storage.json_codec``) is what ``json`` writes, compact, and reads back."""

from __future__ import annotations

import json

from deltanode.delta import json_codec
from deltanode.records import ReplayState
from deltanode.state.channel_state import ChannelState, SegmentMeta, SegmentState


def state() -> ChannelState:
    """A vchannel state with a segment in each state, a dropped partition and a replay filter."""
    segments = {i: SegmentMeta(i, 7, s, num_rows=10 * i, start_offset=i, start_ts=(1 << 60) + i, sealed_ts=i,
                               seal_reason="size")
                for i, s in enumerate(SegmentState, start=100)}
    return ChannelState("dn-dml_0_7v0", 7, "dn-dml_0", checkpoint_offset=42, checkpoint_ts=(1 << 62) + 3,
                        segments=segments, dropped_partitions=[9],
                        replay=ReplayState(flushed=((100, 5),), unflushed=((101, 6),)))


def test_documents_are_written_as_json_writes_them_compact():
    doc = {"dn-dml_0_7v0": state().to_doc(), "other": {"n": [1, 2.5, None, True], "s": "a\"b\\c"}}
    assert json_codec.dumps(doc) == json.dumps(doc, separators=(",", ":"))
    assert json_codec.loads(json_codec.dumps(doc)) == json.loads(json.dumps(doc))
    assert json_codec.dumps({1: "a"}) == json.dumps({1: "a"}, separators=(",", ":"))   # keys as strings


def test_a_version_is_one_document_per_line_and_reads_back():
    actions = [{"commitInfo": {"timestamp": 1, "deltanode.channel_states": json_codec.dumps({"v": state().to_doc()})}},
               {"txn": {"appId": "v", "version": 42, "lastUpdated": 1}},
               {"add": {"path": "7/100/a.parquet", "size": 10, "stats": "{\"numRecords\":5}", "dataChange": True}}]
    data = json_codec.write_lines(actions)
    assert data == "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()
    assert json_codec.read_lines(data + b"\n\n") == actions
    states = json_codec.loads(json_codec.read_lines(data)[0]["commitInfo"]["deltanode.channel_states"])
    assert ChannelState.from_doc(states["v"]) == state()
