"""Fields added to a live Milvus 2.6 collection, written by Milvus's own Go code (pkg/v2 v2.6.6 through
tests/milvus_wal), followed into Delta by the pipeline on Apache Kafka and Apache Pulsar.

A two-shard collection of DeltaNode's own catalog (which never hears of the new fields). The
script: inserts on both shards; ``note`` (VarChar, nullable) added as v2.6.6 broadcasts it, an
AlterCollection whose update_mask names the schema, each shard's copy with the segments its
streaming node flushed; inserts carrying the field (some null). Shard 0's copy is read by a first
run; shard 1's copy is written after it stopped and read by a second run, whose flowgraphs get the
created schema from the catalog and must take the table's. Then ``score`` (Float, nullable, default
0.5) added with the older SchemaChange message, and inserts carrying both fields. What the table
must hold comes from the script alone, as a multiset of (pk, ts, note, score): each row exactly
once, the rows written before a field null there, and in the lake's view the default where it is
null, as Milvus's query shows it.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pytest
from google.protobuf import json_format

from deltanode.config.sections.pipeline import Limits, PipelineSettings, SyncSettings, TriggerSettings
from deltanode.datacoord.catalog import CollectionRecord, encode_schema
from deltanode.delta.layout import StorageLayout
from deltanode.delta.table_schema import recorded_schema
from deltanode.delta.tables import open_table, read_table
from deltanode.lake.tables import lake_tables
from deltanode.lake.views import register
from deltanode.pipeline.pipeline import Pipeline
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.schema import schema_from_json

from ..delta_readers import READERS, by_spark
from .milvus26_wal import append_step
from .support import ALL_BROKERS, high_watermark, wait_until
from .test_milvus26_stream import SCHEMA, Stream, Writer, committed

pytestmark = pytest.mark.spark
SCORE_DEFAULT = 0.5
_ids = itertools.count(int(time.time()) % 100000 * 100 + 77)


def added(schema: schema_pb2.CollectionSchema, field: schema_pb2.FieldSchema) -> schema_pb2.CollectionSchema:
    """``schema`` with ``field`` appended and its version one up, as RootCoord builds it."""
    out = schema_pb2.CollectionSchema()
    out.CopyFrom(schema)
    out.fields.append(field)
    out.version += 1
    return out


class Evolving(Stream):
    """The script of ``Stream`` with schema changes and inserts carrying the added fields; what the
    insert_log must hold, as rows."""

    def __init__(self, writer: Writer, kind: str, address: str, cid: int) -> None:
        super().__init__(writer, kind, address, cid)
        self.rows: Counter = Counter()
        self.schema = schema_from_json(SCHEMA, f"coll{cid}")

    def change(self, i: int, schema: schema_pb2.CollectionSchema, flushed: list[int], *, alter: bool) -> int:
        """Shard ``i``'s copy of the broadcast schema change, flushing ``flushed``."""
        body = json_format.MessageToDict(schema)
        ids = [str(s) for s in flushed]
        if alter:   # v2.6.6: AlterCollection, its update_mask naming the schema
            msg_type, body = "AlterCollection", {"updates": {"schema": body}}
            header = {"db_id": "1", "collection_id": str(self.cid), "update_mask": "schema",
                      "flushed_segment_ids": ids}
        else:       # the older SchemaChange
            msg_type, body = "SchemaChange", {"schema": body}
            header = {"collection_id": str(self.cid), "flushed_segment_ids": ids}
        lc = self._lc[i] if len(self._lc) > i else "self"
        out = self.write(append_step(self.p[i], msg_type, self.tt(), vchannel=self.v[i], header=header, body=body,
                                     last_confirmed=lc, broadcast=(self.v, 100 + schema.version)))
        if lc == "self":
            self._lc.append(f"step:{out['step']}")
        return out["offset"]

    def put(self, i: int, pks: list[int], segment: int, *, notes: list[str | None] | None = None,
            scores: list[float] | None = None) -> None:
        """An insert of ``pks``; ``notes``/``scores``: the added fields, absent when None (an insert sent
        before the field existed). A null is sent as Milvus's proxy sends it: a placeholder and
        ``valid_data`` false."""
        body = msg_pb2.InsertRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=self.v[i],
            collection_name=f"coll{self.cid}", collectionID=self.cid, partitionID=self.pid, rowIDs=pks,
            num_rows=len(pks), version=msg_pb2.InsertDataVersion.ColumnBased, fields_data=[
                schema_pb2.FieldData(type=schema_pb2.DataType.Int64, field_name="pk", field_id=100,
                                     scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=pks))),
                schema_pb2.FieldData(type=schema_pb2.DataType.FloatVector, field_name="vec", field_id=101,
                                     vectors=schema_pb2.VectorField(dim=2, float_vector=schema_pb2.FloatArray(
                                         data=[float(x) for pk in pks for x in (pk, -pk)])))])
        if notes is not None:
            fd = body.fields_data.add(type=schema_pb2.DataType.VarChar, field_name="note", field_id=102)
            fd.scalars.string_data.data.extend(n or "" for n in notes)
            fd.valid_data.extend(n is not None for n in notes)
        if scores is not None:   # a default value: the proxy sends every row valid
            fd = body.fields_data.add(type=schema_pb2.DataType.Float, field_name="score", field_id=103)
            fd.scalars.float_data.data.extend(scores)
            fd.valid_data.extend([True] * len(scores))
        header = {"collection_id": str(self.cid), "partitions": [
            {"partition_id": str(self.pid), "rows": str(len(pks)), "binary_size": "0",
             "segment_assignment": {"segment_id": str(segment)}}]}
        self.append(i, "Insert", header=header, body=body)
        self.rows.update((pk, self._tt, notes[k] if notes else None, scores[k] if scores else None)
                         for k, pk in enumerate(pks))


def rows_of(table) -> Counter:
    return Counter(zip(table.column("pk").to_pylist(), table.column("_ts").to_pylist(),
                       table.column("note").to_pylist(), table.column("score").to_pylist()))


@ALL_BROKERS
def test_fields_added_to_a_live_collection_land_row_for_row_across_a_restart_between_the_shards_copies(
        spark, mq, tmp_path):
    cid = next(_ids)
    storage = StorageLayout(str(tmp_path / "delta"))
    seg = {name: cid + 100 + k for k, name in enumerate(("S0", "S1", "S2", "S3", "S4", "S5"))}
    writer = Writer()
    started = time.monotonic()
    try:
        s = Evolving(writer, mq.kind, mq.address, cid)
        mq.create_topics(s.p)
        created = s.schema
        v1 = added(created, schema_pb2.FieldSchema(
            fieldID=102, name="note", data_type=schema_pb2.DataType.VarChar, nullable=True,
            type_params=[common_pb2.KeyValuePair(key="max_length", value="32")]))
        v2 = added(v1, schema_pb2.FieldSchema(fieldID=103, name="score", data_type=schema_pb2.DataType.Float,
                                              nullable=True, default_value=schema_pb2.ValueField(
                                                  float_data=SCORE_DEFAULT)))
        took: list[int] = []

        def run(what: str, check=None) -> None:
            """A pipeline from Delta's state, its flowgraphs given the created schema (DeltaNode's catalog's),
            until each vchannel's checkpoint reaches its pchannel's head."""
            pipe = Pipeline(spark.sparkContext, storage, mq, PipelineSettings(
                limits=Limits(max_messages=12), trigger=TriggerSettings(interval=0.2),
                sync=SyncSettings(checkpoint_interval=1.0))).start()
            try:
                for v in s.v:
                    pipe.add(VchannelInfo(collectionID=cid, channelName=v), created)
                if check is not None:
                    check(pipe)
                want = {v: high_watermark(mq, p) for v, p in zip(s.v, s.p)}
                wait_until(lambda: all(committed(storage, cid, v) >= at for v, at in want.items()), 60, what, 0.3)
            finally:
                pipe.stop()

        # -- the first run: both shards' inserts, shard 0's copy of the AlterCollection and its new rows.
        for i in range(2):
            s.tick(i)
        s.create_collection()
        for i, name in ((0, "S0"), (1, "S1")):
            s.create_segment(i, seg[name])
            s.put(i, list(range(1000 * i + 1, 1000 * i + 31)), seg[name])
        s.put(0, list(range(31, 41)), seg["S0"])
        s.change(0, v1, [seg["S0"]], alter=True)
        s.create_segment(0, seg["S2"])
        s.put(0, list(range(41, 61)), seg["S2"], notes=[f"n{k}" if k % 3 else None for k in range(20)])
        for i in range(2):   # each burst closed by a TimeTick, as a 2.6 node writes one
            s.tick(i)
        run("both vchannels committed up to their heads, v0 past its schema change")
        table = open_table(storage.insert_log(cid))
        assert [f.name for f in table.schema().fields][-2:] == ["_partition_id", "note"]   # widened once
        assert recorded_schema(table.metadata().configuration) == v1

        # -- shard 1's copy, written while no DeltaNode runs; then score, with the older SchemaChange.
        s.put(1, list(range(1031, 1041)), seg["S1"])
        s.change(1, v1, [seg["S1"]], alter=True)
        s.create_segment(1, seg["S3"])
        s.put(1, list(range(1041, 1061)), seg["S3"], notes=[None if k % 4 else f"m{k}" for k in range(20)])
        for i, old, new in ((0, "S2", "S4"), (1, "S3", "S5")):
            s.change(i, v2, [seg[old]], alter=False)
            s.create_segment(i, seg[new])
            base = 2000 + 1000 * i
            s.put(i, list(range(base, base + 12)), seg[new], notes=["x", None] * 6,
                  scores=[0.25 * k if k % 5 else SCORE_DEFAULT for k in range(12)])
        for i in range(2):
            s.tick(i)

        def restarted(pipe) -> None:   # the catalog gave v0; the table records v1
            took.extend(pipe.registry.get(v).schema.version for v in s.v)
        run("both vchannels committed up to their heads, past both schema changes", restarted)
    finally:
        writer.close()
    elapsed = time.monotonic() - started

    assert took == [1, 1]
    uri = storage.insert_log(cid)
    table = open_table(uri)
    fields = table.schema().fields
    assert [f.name for f in fields] == ["pk", "vec", "_ts", "_row_id", "_segment_id", "_partition_id", "note", "score"]
    assert all(f.nullable for f in fields)
    assert recorded_schema(table.metadata().configuration) == v2
    got = rows_of(read_table(storage, uri, ["pk", "_ts", "note", "score"], include_deleted=True))
    print(f"{mq.kind}: {writer.steps} steps; {sum(s.rows.values())} rows written, {sum(got.values())} found "
          f"({sum(1 for r in got.elements() if r[2] is not None)} with a note, "
          f"{sum(1 for r in got.elements() if r[3] is not None)} with a score); {elapsed:.1f} s")
    assert got == s.rows
    # Every reader: the rows before a field read as null there.
    plain = Counter((pk, note, score) for pk, _, note, score in s.rows.elements())
    for name, reader in {**READERS, "spark": lambda u, c: by_spark(spark, u, c)}.items():
        read = reader(uri, ["pk", "note", "score"])
        assert Counter(zip(*(read.column(c).to_pylist() for c in ("pk", "note", "score")))) == plain, name
    # The lake's view: score's default where a row predates it, as Milvus's query answers.
    record = CollectionRecord(cid, f"coll{cid}", encode_schema(created), 2, s.v, s.p)
    register(spark, storage, lake_tables([record], storage))
    viewed = Counter(tuple(r) for r in spark.sql(f"SELECT pk, note, score FROM coll{cid}").collect())
    assert viewed == Counter((pk, note, SCORE_DEFAULT if score is None else score)
                             for pk, note, score in plain.elements())
    # Each copy sealed the segments its streaming node flushed for it; none quarantined.
    segments = {(v, sid): (m.state, m.seal_reason) for v in s.v
                for sid, m in meta.channel_state(storage, cid, v).segments.items()}
    flushed = (SegmentState.FLUSHED, "schema change")
    assert segments == {(s.v[0], seg["S0"]): flushed, (s.v[1], seg["S1"]): flushed, (s.v[0], seg["S2"]): flushed,
                        (s.v[1], seg["S3"]): flushed, (s.v[0], seg["S4"]): (SegmentState.GROWING, ""),
                        (s.v[1], seg["S5"]): (SegmentState.GROWING, "")}
    quarantine = read_table(storage, storage.quarantine(), ["vchannel", "reason"])
    assert [q for q in (quarantine.to_pylist() if quarantine is not None else []) if q["vchannel"] in s.v] == []
