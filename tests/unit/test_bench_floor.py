"""The benchmark's floor (``deltanode_bench.floor``) does the work it claims: every insert's rows,
read straight from the wire, in its vchannel's one file, named by its collection's one commit;
the same rows DeltaNode's executor writes from the same messages (``task_cpu``)."""

from __future__ import annotations

import collections
import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.wire.varint import read_varint
from deltanode_bench import floor, task_cpu


def _rows(paths: list[str]) -> collections.Counter:
    """(pk, ts, row id, segment, partition, the vector's bytes) of every row in ``paths``, as a multiset."""
    rows: collections.Counter = collections.Counter()
    for path in paths:
        t = pq.read_table(path).to_pydict()
        rows.update(zip(t["pk"], t["_ts"], t["_row_id"], t["_segment_id"], t["_partition_id"],
                        (np.asarray(v, np.float32).tobytes() for v in t["vec"])))
    return rows


def test_varints_decode_in_bulk_as_protobuf_encodes_them():
    from deltanode.wire.milvus_proto import schema_pb2
    values = [0, 1, 127, 128, 300, 2**31, 2**40 + 5, 2**62, -1, -(2**40)]
    body = schema_pb2.LongArray(data=values).SerializeToString()
    _, start = read_varint(body, 0)          # field 1's key
    length, start = read_varint(body, start)
    assert floor.varints(body, start, start + length).tolist() == values


@pytest.mark.parametrize("durability", list(floor.Durability))
def test_the_floor_writes_each_insert_once_and_the_rows_deltanode_writes(tmp_path, durability):
    msgs, contexts, layouts = task_cpu.messages(3, 2, busy=2)
    cpu = floor.floor_run(str(tmp_path / "floor"), msgs, layouts, 0, durability)
    assert cpu.files > 0 and cpu.commits > 0
    files = sorted(glob.glob(str(tmp_path / "floor" / "insert_log" / "*" / "*" / "*.parquet")))
    assert len(files) == 4   # the 2 busy collections' 2 vchannels, one file each; the idle collection none
    commits = sorted(glob.glob(str(tmp_path / "floor" / "insert_log" / "*" / "_delta_log" / "*.json")))
    assert len(commits) == 2
    named = [json.loads(line)["add"]["path"] for c in commits for line in open(c) if '"add"' in line]
    assert sorted(os.path.join(str(tmp_path / "floor"), p) for p in named) == files

    task_cpu.run(StorageLayout(str(tmp_path / "deltanode")), msgs, contexts, layouts)
    ours = glob.glob(str(tmp_path / "deltanode" / "insert_log" / "**" / "*.parquet"), recursive=True)
    expected = _rows(ours)
    assert sum(expected.values()) == 2 * 2 * 2 * task_cpu.ROWS   # busy collections x shards x inserts x rows
    assert _rows(files) == expected


def test_the_scale_points_shapes_are_one_task_s_cycle_of_them():
    assert floor.shape_of(1000) == (250, 2, 250)      # every vchannel an insert a second, 2-s cycles
    assert floor.shape_of(10000) == (2500, 1, 500)    # 1,000 inserts a second over both tasks
    assert floor.shape_of(16) == (4, 2, 4)
