"""Every type Milvus 2.3/2.4 persists, and 2.5's nulls, through the real pipeline: the proxy
stand-in's inserts on Apache Kafka -> the shared Spark pipeline -> the insert_log Delta table, read back
value for value; then one compaction of the segment's files, after which the rows are unchanged.
At each step (no delete yet, a deletion vector, compaction, a delta-rs checkpoint with a deletion
vector after it) Spark with delta-spark reads every column as DuckDB does, and the rows Milvus's
rules keep; the ``sql`` subcommand's JSON of each row decodes every vector kind."""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltanode.config.sections.pipeline import CompactionSettings
from deltanode.delta.tables import open_table, read_table
from deltanode.lake.rows_json import RowRenderer
from deltanode.lake.tables import LakeTable
from deltanode.lake.views import register
from deltanode.state.current_state import current_rows
from deltanode.wire.schema import CollectionLayout, DataType

from ..delta_readers import assert_spark_reads_as_duckdb
from ..milvus_rows import EVERY_TYPE, comparable, rows_of
from .support import settled_watermark, wait_until

pytestmark = pytest.mark.spark
# Compaction only when the test asks (interval 0), of any two small files of a segment.
COMPACTION = CompactionSettings(interval=0, min_files=2, retention=0.0)
SEGMENT, PARTITION = 11, 3
VECTOR_TYPES = (DataType.FloatVector, DataType.BinaryVector, DataType.Float16Vector, DataType.BFloat16Vector,
                DataType.SparseFloatVector)


def segment_files(coll) -> list[str]:
    table = open_table(coll.storage.insert_log(coll.collection_id))
    return pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()


def read_by_spark_as_duckdb(spark, coll) -> list[str]:
    """Spark's rows are DuckDB's, every column, and the rows Milvus's rules keep; their keys."""
    rows = assert_spark_reads_as_duckdb(spark, coll.storage.insert_log(coll.collection_id), ["pk", "_ts"])
    reference = current_rows(coll.storage, coll.collection_id, "pk")
    assert [(r["pk"], r["_ts"]) for r in rows] == sorted(zip(reference.column("pk").to_pylist(),
                                                               reference.column("_ts").to_pylist()))
    return [r["pk"] for r in rows]


def as_milvus_json(row: dict, layout: CollectionLayout) -> dict:
    """A row read by DuckDB as the sql subcommand prints it, decoded here with numpy and struct."""
    out = dict(row)
    for f in layout.fields:
        v, t = row[f.name], f.data_type
        if v is None:
            continue
        if t == DataType.BinaryVector:
            out[f.name] = list(v)
        elif t == DataType.Float16Vector:
            out[f.name] = [float(x) for x in np.frombuffer(v, "<f2")]
        elif t == DataType.BFloat16Vector:
            out[f.name] = [struct.unpack("<f", b"\0\0" + v[i:i + 2])[0] for i in range(0, len(v), 2)]
        elif t == DataType.SparseFloatVector:
            out[f.name] = {str(k): x for k, x in v}
        elif t == DataType.JSON:
            out[f.name] = json.loads(v)
    return out


def test_every_type_is_stored_value_for_value_and_survives_compaction(spark, pipelines, make_collection):
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
    assert len(read_by_spark_as_duckdb(spark, coll)) == len(produced)   # no delete yet: protocol 1/2
    coll.producer.delete(p, v, PARTITION, ["pk-1"])
    target = settled_watermark(coll, p)
    wait_until(lambda: coll.committed_offset(v) >= target, 90, "the delete to commit")
    expected = sorted((r | {"_segment_id": SEGMENT, "_partition_id": PARTITION} for r in produced),
                      key=lambda r: r["_ts"])

    def stored() -> list[dict]:
        return sorted((comparable(r, layout) for r in coll.insert_rows()), key=lambda r: r["_ts"])

    assert len(segment_files(coll)) == 2
    assert stored() == expected
    assert sorted(read_by_spark_as_duckdb(spark, coll)) == sorted(r["pk"] for r in expected if r["pk"] != "pk-1")
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
    assert "pk-1" not in read_by_spark_as_duckdb(spark, coll)

    # A checkpoint of delta-rs's, then a deletion vector in a JSON version after it.
    uri = coll.storage.insert_log(coll.collection_id)
    DeltaTable(uri).create_checkpoint()
    coll.producer.delete(p, v, PARTITION, ["pk-2"])
    target = settled_watermark(coll, p)
    wait_until(lambda: coll.committed_offset(v) >= target, 90, "the delete to commit")
    keys = read_by_spark_as_duckdb(spark, coll)
    assert sorted(keys) == sorted(r["pk"] for r in expected if r["pk"] not in ("pk-1", "pk-2"))

    # The sql subcommand's JSON: the collection's view, each row rendered, every vector kind decoded.
    register(spark, coll.storage, [LakeTable(name=coll.name, database="default", collection_id=coll.collection_id,
                                             uri=uri, layout=layout)])
    frame = spark.sql(f"SELECT * FROM {coll.name}")
    renderer = RowRenderer(frame.schema)
    printed = sorted((json.loads(renderer.render(r)) for r in frame.toLocalIterator()), key=lambda r: r["pk"])
    duck = assert_spark_reads_as_duckdb(spark, uri, ["pk"])
    assert printed == [as_milvus_json(r, layout) for r in duck]
    assert {type(printed[0][f.name]) for f in layout.fields if f.data_type in VECTOR_TYPES} == {list, dict}
