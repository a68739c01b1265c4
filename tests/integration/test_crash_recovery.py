"""SIGKILL the DataNode at each crash point, restart it, and count rows: each exactly once.

Inserts are large enough (about 90 KB) to travel through the payload handoff directory.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import time

import pytest
from deltanode.faults import CRASH_AT, CRASH_DIR, POINTS
from deltanode.flowgraph.spec import encode_schema
from deltanode.storage.tables import open_table
from deltanode.wire.schema import schema_from_json

from .support import SCHEMA, settled_watermark

RUNNER = os.path.join(os.path.dirname(__file__), "flowgraph_runner.py")
pytestmark = pytest.mark.spark


def run_node(coll, broker, tmp_path, target: int, crash: str | None) -> subprocess.CompletedProcess:
    args = {"bootstrap": broker.bootstrap_servers, "storage_root": coll.storage.root,
            "collection_id": coll.collection_id, "vchannel": coll.vchannels[0],
            "schema_b64": encode_schema(schema_from_json(SCHEMA, coll.name)),
            "scratch": str(tmp_path / "scratch"), "max_messages": 6, "target": target,
            "handoff_dir": str(tmp_path / "handoff")}
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_AT, CRASH_DIR)}
    if crash:
        env[CRASH_AT], env[CRASH_DIR] = crash, str(tmp_path)
    return subprocess.run([sys.executable, RUNNER, json.dumps(args)], env=env, capture_output=True,
                          text=True, timeout=240)


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_then_restart_keeps_every_row_exactly_once(point, broker, make_collection, tmp_path):
    coll = make_collection()
    p, v = coll.pchannels[0], coll.vchannels[0]
    produced, deleted = [], []

    def produce(batches: int) -> None:
        for i in range(batches):
            first = coll.producer.insert(p, v, segment_id=1 + i % 3, partition_id=1, rows=1000)
            produced.extend(range(first, first + 1000))
            if i % 5 == 4:
                coll.producer.delete(p, v, 1, [first])
                deleted.append(first)
        coll.producer.flush_producer()

    produce(40)
    crashed = run_node(coll, broker, tmp_path, settled_watermark(coll, p), crash=f"{point}:3")
    assert crashed.returncode < 0, f"the node was not killed at {point}: rc={crashed.returncode}\n{crashed.stderr[-3000:]}"
    rows_at_crash = len(coll.insert_rows())
    produce(10)  # more traffic while the node is down
    target = settled_watermark(coll, p)
    assert coll.committed_offset(v) < target
    restart_at = time.time()
    restarted = run_node(coll, broker, tmp_path, target, crash=None)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    handed_off = [int(n) for n in re.findall(r"\((\d+) payloads handed off\)", restarted.stderr)]
    assert sum(handed_off) > 0, restarted.stderr[-3000:]
    left = [f.name for f in (tmp_path / "handoff").iterdir() if f.stat().st_mtime >= restart_at]
    assert left == [], "the restarted node's sink did not take every handed-off payload"

    pks = [r["pk"] for r in coll.insert_rows()]
    dupes = [pk for pk, n in collections.Counter(pks).items() if n > 1]
    print(f"{point}: produced {len(produced)} rows, {rows_at_crash} in Delta at the crash, "
          f"{len(pks)} after restart, {len(dupes)} duplicated")
    assert not dupes, f"{len(dupes)} rows committed twice, e.g. {dupes[:5]}"
    assert sorted(pks) == sorted(produced), f"{len(set(produced) - set(pks))} rows lost"
    deletes = open_table(coll.storage.delta_log(coll.collection_id)).to_pyarrow_table().column("pk").to_pylist()
    assert sorted(deletes) == sorted(deleted)
    state = coll.state(v)
    assert sum(s.num_rows for s in state.segments.values()) == len(produced)
