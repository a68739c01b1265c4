"""The benchmark's Spark Structured Streaming reference (build/deltanode_bench/structured_streaming.py)
is exactly once: SIGKILLed inside a micro-batch's fan-out (some tables committed the batch, others
not) and started again, it writes the cut batch to the tables that lacked it and leaves every row
produced in its table once."""

from __future__ import annotations

import base64
import collections
import os
import signal
import threading

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from deltanode.mq.milvus_producer import ticker
from deltanode.wire.names import pchannel_name
from deltanode_bench import structured_streaming as sss

from .support import high_watermark

pytestmark = pytest.mark.spark

COLLECTIONS, SHARDS, ROWS = 3, 2, 50


def produce(colls, messages: int) -> dict[int, int]:
    """``messages`` inserts of ROWS rows per vchannel of each collection; rows per collection."""
    for _ in range(messages):   # interleaved: every batch has rows of every collection
        for c in colls:
            for p, v in zip(c.pchannels, c.vchannels):
                c.producer.insert(p, v, c.collection_id + 1, 1, ROWS)
            # Each collection's producer is a client of its own: flushed in turn, the topics hold the
            # rounds in order, where unflushed each client's messages could land as one block and a
            # 60-record batch then hold fewer collections than the kill below needs.
            c.producer.flush_producer()
    return {c.collection_id: messages * ROWS * len(c.vchannels) for c in colls}


def txn_versions(uri: str) -> list[int]:
    """The reference's txn version (batch id) of every commit of a table, in commit order."""
    import json
    log = os.path.join(uri, "_delta_log")
    out = []
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        with open(os.path.join(log, name)) as f:
            out += [json.loads(line)["txn"]["version"] for line in f if '"txn"' in line]
    return out


def spec(mq, colls, tmp_path, until=None, write_threads=2) -> sss.Spec:
    pchannels = sorted({p for c in colls for p in c.pchannels})
    entries = []
    for c in colls:
        entries.append({"collection_id": c.collection_id, "vchannels": c.vchannels,
                        "schema_b64": base64.b64encode(c.schema.SerializeToString()).decode()})
    return sss.Spec(bootstrap=mq.address, topics=pchannels, collections=entries, root=str(tmp_path / "sss"),
                    checkpoint=str(tmp_path / "sss-checkpoint"), max_offsets=60, write_threads=write_threads,
                    until=until or {})


def test_sigkill_mid_fanout_then_restart_exactly_once(mq, make_collection, tmp_path):
    # three collections of two shards on the same two pchannels (fresh topics), ticking
    prefix = f"sss{os.getpid()}{id(tmp_path) % 10000}-rootcoord-dml"
    pchannels = [pchannel_name(prefix, i) for i in range(SHARDS)]
    colls = [make_collection(shards=SHARDS, pchannels=pchannels, ticking=False) for _ in range(COLLECTIONS)]
    stop = threading.Event()   # one rootcoord: a TimeTick every 200 ms on each pchannel
    ticker(colls[0].producer, pchannels, stop)
    try:
        run(mq, colls, pchannels, tmp_path)
    finally:
        stop.set()


def run(mq, colls, pchannels, tmp_path):
    expected = collections.Counter(produce(colls, 20))

    # first run: killed (the whole process group, SIGKILL) at its first table write from the 5th on
    # that leaves its batch's fan-out half done (tables written one at a time)
    first = sss.Reference(spec(mq, colls, tmp_path, write_threads=1), str(tmp_path / "run1.log"),
                          env={sss.CRASH_ENV: "5"}).start()
    code = first.wait_exit(180)
    assert code == -signal.SIGKILL, first.text()[-3000:]
    uris = [sss.table_path(str(tmp_path / "sss"), c.collection_id) for c in colls]
    # The cut batch is the last one committed anywhere; a table it has rows for still lacks it.
    before = {u: txn_versions(u) for u in uris}
    cut = max(v for versions in before.values() for v in versions)
    had_cut = {u for u in uris if cut in before[u]}
    assert had_cut != set(uris), before

    # more rows while it is down, then a second run to the end of both pchannels
    expected.update(produce(colls, 5))
    until = {p: high_watermark(mq, p) for p in pchannels}
    second = sss.Reference(spec(mq, colls, tmp_path, until), str(tmp_path / "run2.log")).start()
    try:
        assert second.wait_reached(until, 180), second.text()[-3000:]
        assert second.wait_exit(60) == 0, second.text()[-3000:]
    finally:
        second.kill()

    for c in colls:
        table = DeltaTable(sss.table_path(str(tmp_path / "sss"), c.collection_id)).to_pyarrow_table()
        assert table.num_rows == expected[c.collection_id]
        keys = collections.Counter(table.column("pk").to_pylist())
        assert [k for k, n in keys.items() if n > 1] == []            # no row twice
        assert set(keys) == set(range(1, expected[c.collection_id] + 1))   # every row
        assert set(pc.unique(table.column("_segment_id")).to_pylist()) == {c.collection_id + 1}
        assert table.schema.field("vec").type.value_type.bit_width == 32
        # the batch cut by the kill, run again: skipped by the tables that had it; each batch once
        versions = txn_versions(sss.table_path(str(tmp_path / "sss"), c.collection_id))
        assert versions == sorted(set(versions))
    # ... and written to the tables that lacked it
    assert {u for u in uris if cut in txn_versions(u)} > had_cut
