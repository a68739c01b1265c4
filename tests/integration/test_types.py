"""Every type Milvus 2.3/2.4 persists, and 2.5's nulls, through the real pipeline: the proxy
stand-in's inserts on Apache Kafka -> the shared Spark pipeline -> the insert_log Delta table, read back
value for value; then one compaction of the segment's files, after which the rows are unchanged."""

from __future__ import annotations

import pyarrow as pa
import pytest

from deltanode.storage.compaction import CompactionSettings
from deltanode.storage.tables import open_table, read_table
from deltanode.wire.schema import CollectionLayout

from ..milvus_rows import EVERY_TYPE, comparable, rows_of
from .support import settled_watermark, wait_until

pytestmark = pytest.mark.spark
# Compaction only when the test asks (interval 0), of any two small files of a segment.
COMPACTION = CompactionSettings(interval=0, min_files=2, retention=0.0)
SEGMENT, PARTITION = 11, 3


def segment_files(coll) -> list[str]:
    table = open_table(coll.storage.insert_log(coll.collection_id))
    return pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()


def test_every_type_is_stored_value_for_value_and_survives_compaction(pipelines, make_collection):
    coll = make_collection(schema=EVERY_TYPE)
    layout = CollectionLayout.from_proto(coll.schema)
    p, v = coll.pchannels[0], coll.vchannels[0]
    pipe = pipelines(compaction=COMPACTION)
    coll.watch(pipe)
    produced = []
    for rows in (30, 20):     # committed one after the other: two binlog files of the segment
        req = coll.producer.insert_request(v, SEGMENT, PARTITION, rows)
        coll.producer.send_raw(p, req.SerializeToString())
        produced += rows_of(layout, req)
        target = settled_watermark(coll, p)
        wait_until(lambda target=target: coll.committed_offset(v) >= target, 90, "the insert to commit")
    coll.producer.delete(p, v, PARTITION, ["pk-1"])
    target = settled_watermark(coll, p)
    wait_until(lambda: coll.committed_offset(v) >= target, 90, "the delete to commit")
    expected = sorted((r | {"_segment_id": SEGMENT, "_partition_id": PARTITION} for r in produced),
                      key=lambda r: r["_ts"])

    def stored() -> list[dict]:
        return sorted((comparable(r, layout) for r in coll.insert_rows()), key=lambda r: r["_ts"])

    assert len(segment_files(coll)) == 2
    assert stored() == expected
    assert any(r["s"] is None for r in expected) and any(r["a_int64"] is None for r in expected)
    assert read_table(coll.storage, coll.storage.delta_log(coll.collection_id)).column("pk").to_pylist() == ["pk-1"]
    quarantine = read_table(coll.storage, coll.storage.quarantine())
    assert quarantine is None or v not in quarantine.column("vchannel").to_pylist()

    current = read_table(coll.storage, coll.storage.insert_log(coll.collection_id), ["pk"]).column("pk").to_pylist()
    assert sorted(current) == sorted(r["pk"] for r in expected if r["pk"] != "pk-1")   # its deletion vector

    report = pipe.compactor.run_once(every_collection=True)
    assert (report.rewrites, report.files_in, report.files_out, report.failed) == (1, 2, 1, 0), report
    assert len(segment_files(coll)) == 1
    assert stored() == [r for r in expected if r["pk"] != "pk-1"]   # the deleted row left with the rewrite
