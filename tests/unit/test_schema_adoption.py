"""The driver's side of a field added to a live collection, on real Delta tables: a portion that
ends before a schema change has every flowgraph of the collection take it; a cycle ships each
collection's newest schema and aligns its flowgraphs on it; the commit of what they wrote widens
the table and records the Milvus schema; a flowgraph loaded again (a restart) whose watch gives an
older schema takes the table's."""

from __future__ import annotations

import time

import pyarrow as pa

from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.table_schema import recorded_schema, schema_rank
from deltanode.delta.tables import read_table
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.pipeline.cycle_apply import _take_schema
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.records import Portion, PortionStats, SchemaChange
from deltanode.vchannel.flowgraph import VchannelFlowgraph, align_schemas
from deltanode.vchannel.state_update import advance
from deltanode.wire.milvus_proto import schema_pb2

from .vchannels import flowgraph, loaded, read_rows, stages


def added(fg: VchannelFlowgraph, version: int = 1) -> schema_pb2.CollectionSchema:
    """``fg``'s schema with a nullable VarChar ``note`` added, at ``version``."""
    schema = schema_pb2.CollectionSchema()
    schema.CopyFrom(fg.schema)
    f = schema.fields.add(fieldID=101, name="note", data_type=schema_pb2.DataType.VarChar, nullable=True)
    f.type_params.add(key="max_length", value="32")
    schema.version = version
    return schema


def read_notes(fg: VchannelFlowgraph, storage, pks: list[int], notes: list[str | None], *, ts: int = 200) -> None:
    """A batch whose rows carry the added field, written with ``fg``'s schema."""
    writer = BinlogWriter(storage, fg.collection_id, fg.layout.insert_schema(), fg.layout.delete_schema())
    n = len(pks)
    writer.add_insert(6, 1, [pa.array(pks, pa.int64()), pa.array(notes, pa.string()),
                             pa.array(range(ts, ts + n), pa.int64()), pa.array(pks, pa.int64())],
                      n, 24 * n, fg.next_offset, ts, ts + n - 1)
    first = fg.next_offset
    portion = Portion(fg.vchannel, first, first + 10, tuple(writer.close()), dict(writer.segments),
                      stats=PortionStats(2000, 1, 24 * n, n))
    fg.apply(advance(fg.working, [portion]), time.monotonic())


def test_a_schema_read_on_one_vchannel_is_taken_by_its_collections_flowgraphs_and_the_newest_ships(tmp_path):
    s = stages(tmp_path)
    fg0, fg1, other = loaded(s, 1, 0), loaded(s, 1, 1), loaded(s, 2, 0)
    new = added(fg0)
    _take_schema(fg0, SchemaChange(schema=new.SerializeToString(), version=1, ts=5),
                 {fg.vchannel: fg for fg in (fg0, fg1, other)})
    assert [fg.schema.version for fg in (fg0, fg1, other)] == [1, 1, 0]
    assert fg1.layout.insert_schema().names == ["pk", "note", "_ts", "_row_id", "_segment_id", "_partition_id"]
    # Older, or as new: not taken.
    assert not fg0.take_schema(flowgraph(1).schema) and not fg0.take_schema(new)
    # A flowgraph loaded meanwhile with the older schema is aligned on its siblings' when a cycle plans.
    late = loaded(s, 1, 2)
    assert schema_rank(late.schema) < schema_rank(fg0.schema)
    shipped = align_schemas([late, fg0, other])
    assert shipped == {1: fg0.schema_bytes, 2: other.schema_bytes} and late.schema_bytes == fg0.schema_bytes


def test_the_commit_after_it_widens_the_table_and_a_restart_writes_with_the_tables_schema(tmp_path):
    s = stages(tmp_path)
    fg = loaded(s, 1)
    read_rows(fg, s.storage, [1, 2])
    assert fg.take_schema(added(fg))
    read_notes(fg, s.storage, [3, 4], ["x", None])
    s.syncs.sync({fg.vchannel: fg}, time.monotonic(), CycleReport(0))
    assert not fg.uncommitted
    uri = s.storage.insert_log(1)
    assert recorded_schema(DeltaLog.open(uri).configuration()).version == 1
    rows = read_table(s.storage, uri, ["pk", "note"]).to_pylist()
    assert sorted(rows, key=lambda r: r["pk"]) == [{"pk": 1, "note": None}, {"pk": 2, "note": None},
                                                   {"pk": 3, "note": "x"}, {"pk": 4, "note": None}]
    # A restart: DeltaNode's catalog gives the schema the collection was created with.
    again = flowgraph(1)
    stages(tmp_path).loader.load(again)
    assert again.schema.version == 1 and [f.name for f in again.layout.fields] == ["pk", "note"]
    assert again.next_offset == fg.next_offset
