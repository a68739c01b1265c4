"""Fields added to a live Milvus 2.6 collection, mirrored: the collection's etcd meta at the 2.6 keys
and its stream, both written by Milvus's own Go code (pkg/v2 v2.6.6 through tests/milvus_wal), read by
DeltaNode in mirror mode (``spark-submit.sh standalone`` with ``milvus.meta.root``) on Apache Kafka.

Milvus adds a field by a broadcast AlterCollection (or the older SchemaChange) on every vchannel and
then saves the collection's meta: the field at ``root-coord/fields/{coll}/{field}``, the collection's
schema ``version`` one up. DeltaNode reads the two on their own paths, so each order is in the
script, on a two-shard collection:

- ``note``: in etcd already when DeltaNode first starts; shard 0 starts at the collection's start,
  shard 1 at Milvus's channel checkpoint (the broker no longer holds its beginning), both before
  the change: the inserts written before it lack the field and land with null there;
- ``score`` (a default value): read from the stream while DeltaNode runs, saved in etcd after;
- ``tag``: saved in etcd while DeltaNode runs (the coordinator logs it), read from the stream after;
- ``flag``: written to the stream and saved in etcd while no DeltaNode runs; DeltaNode then starts
  again from its own checkpoint before the change, with the meta's newer schema.

Every burst of appends ends with a TimeTick, as a 2.6 streaming node persists one. What the table
must hold comes from the script alone, as a multiset of (pk, ts, note, score, tag, flag): each row
exactly once, a field null in the rows written before it; in every reader, and in the lake's view
with score's default where it is null, as Milvus's query answers.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from google.protobuf import json_format

from deltanode.datacoord.milvus_catalog import MilvusCatalog
from deltanode.delta.table_schema import recorded_schema
from deltanode.delta.tables import open_table, read_table
from deltanode.etcd.client import EtcdClient
from deltanode.lake.tables import lake_tables
from deltanode.lake.views import register
from deltanode.mq.broker import Broker
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.positions import CODECS, kafka_msg_id

from ..delta_readers import READERS, by_spark
from .milvus26_wal import etcd_put_step
from .milvus_mirror import Mirror
from .support import wait_until
from .test_milvus26_schema_change import Evolving, added
from .test_milvus26_stream import Writer
from .test_milvus26_types import delete_records_before

pytestmark = pytest.mark.spark
DataType = schema_pb2.DataType
SCORE_DEFAULT = 0.5
_ids = itertools.count(int(time.time()) % 100000 * 100 + 69)
ADDED = ("note", "score", "tag", "flag")
COLUMNS = ("pk", "_ts", *ADDED)


def field(fid: int, name: str) -> schema_pb2.FieldSchema:
    """An added field, nullable, as Milvus's proxy takes one."""
    return {
        "note": schema_pb2.FieldSchema(fieldID=fid, name=name, data_type=DataType.VarChar, nullable=True,
                                       type_params=[common_pb2.KeyValuePair(key="max_length", value="32")]),
        "score": schema_pb2.FieldSchema(fieldID=fid, name=name, data_type=DataType.Float, nullable=True,
                                        default_value=schema_pb2.ValueField(float_data=SCORE_DEFAULT)),
        "tag": schema_pb2.FieldSchema(fieldID=fid, name=name, data_type=DataType.Int64, nullable=True),
        "flag": schema_pb2.FieldSchema(fieldID=fid, name=name, data_type=DataType.Bool, nullable=True),
    }[name]


def value(name: str, pk: int):
    """Row ``pk``'s value of an added field as the client means it (None: null; score has a default,
    which Milvus's proxy sends in a null's place)."""
    if name == "note":
        return None if pk % 3 == 0 else f"n{pk}"
    if name == "score":
        return SCORE_DEFAULT if pk % 5 == 0 else pk / 4
    if name == "tag":
        return None if pk % 4 == 0 else pk * 7
    return None if pk % 5 == 1 else pk % 2 == 0


_SLOTS = {"note": ("string_data", DataType.VarChar, ""), "score": ("float_data", DataType.Float, 0.0),
          "tag": ("long_data", DataType.Int64, 0), "flag": ("bool_data", DataType.Bool, False)}


class Growing(Evolving):
    """The script: ``Evolving``'s messages, with inserts carrying whichever added fields exist when
    they are sent, and the collection's meta as RootCoord 2.6 saves it (etcd_put steps, through the
    same writer process)."""

    def __init__(self, writer: Writer, kind: str, address: str, cid: int, endpoints: str, root: str) -> None:
        super().__init__(writer, kind, address, cid)
        self.endpoints, self.base = endpoints, f"{root}/root-coord"
        system = [schema_pb2.FieldSchema(fieldID=0, name="RowID", data_type=DataType.Int64),
                  schema_pb2.FieldSchema(fieldID=1, name="Timestamp", data_type=DataType.Int64)]
        self.schema.fields.extend(system)   # RootCoord keeps the system fields with the user's
        self.schemas = [self.schema]        # each version
        for fid, name in enumerate(ADDED, start=102):
            self.schemas.append(added(self.schemas[-1], field(fid, name)))
        self.rows = Counter()
        self.info: dict = {}                # the collection's info as RootCoord saves it
        self.last_offset = -1

    def fields_at(self, version: int) -> list[str]:
        return list(ADDED[:version])

    def insert(self, i: int, pks: list[int], segment: int, version: int) -> None:
        """An insert of ``pks`` sent while the collection's schema is at ``version``: the added fields
        of that version, each with ``valid_data`` (a placeholder in a null's slot)."""
        body = msg_pb2.InsertRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=self.v[i],
            collection_name=f"coll{self.cid}", collectionID=self.cid, partitionID=self.pid, rowIDs=pks,
            num_rows=len(pks), version=msg_pb2.InsertDataVersion.ColumnBased, fields_data=[
                schema_pb2.FieldData(type=DataType.Int64, field_name="pk", field_id=100,
                                     scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=pks))),
                schema_pb2.FieldData(type=DataType.FloatVector, field_name="vec", field_id=101,
                                     vectors=schema_pb2.VectorField(dim=2, float_vector=schema_pb2.FloatArray(
                                         data=[float(x) for pk in pks for x in (pk, -pk)])))])
        for k, name in enumerate(self.fields_at(version)):
            slot, data_type, zero = _SLOTS[name]
            fd = body.fields_data.add(type=data_type, field_name=name, field_id=102 + k)
            values = [value(name, pk) for pk in pks]
            getattr(fd.scalars, slot).data.extend(zero if v is None else v for v in values)
            fd.valid_data.extend(v is not None for v in values)
        header = {"collection_id": str(self.cid), "partitions": [
            {"partition_id": str(self.pid), "rows": str(len(pks)), "binary_size": "0",
             "segment_assignment": {"segment_id": str(segment)}}]}
        self.last_offset = self.append(i, "Insert", header=header, body=body)
        present = self.fields_at(version)
        self.rows.update((pk, self._tt, *(value(n, pk) if n in present else None for n in ADDED)) for pk in pks)

    def add_field(self, version: int, flushed: list[int], *, alter: bool = True) -> None:
        """The broadcast of ``version``'s schema: each shard's copy, flushing its segment of ``flushed``."""
        for i in range(2):
            self.change(i, self.schemas[version], [flushed[i]], alter=alter)

    def ticks(self) -> list[int]:
        """A TimeTick on each pchannel, ending a burst of appends; their time ticks, by shard (a 2.6
        pchannel's time is its own: each vchannel's checkpoint reaches its own pchannel's)."""
        out = []
        for i in range(2):
            self.tick(i)
            out.append(self._tt)
        return out

    def save_meta(self, version: int, *, starts: dict[str, bytes] | None = None, create_tt: int = 0) -> None:
        """RootCoord's save of ``version``: the fields' keys (the new one), then the collection's info
        with its schema version (``starts``: the whole collection, as it is first saved)."""
        schema = self.schemas[version]
        new = schema.fields if starts is not None else [f for f in schema.fields if f.fieldID == 101 + version]
        for f in new:
            self.write(etcd_put_step(self.endpoints, f"{self.base}/fields/{self.cid}/{f.fieldID}",
                                     "milvus.proto.schema.FieldSchema", json_format.MessageToDict(f)))
        if starts is not None:
            self.write(etcd_put_step(self.endpoints, f"{self.base}/database/db-info/1",
                                     "milvus.proto.etcd.DatabaseInfo", {"name": "default", "id": "1"}))
            self.write(etcd_put_step(self.endpoints, f"{self.base}/partitions/{self.cid}/{self.pid}",
                                     "milvus.proto.etcd.PartitionInfo",
                                     {"partitionID": str(self.pid), "partitionName": "_default",
                                      "collection_id": str(self.cid)}))
            self.info = {"ID": str(self.cid), "create_time": str(create_tt), "virtual_channel_names": self.v,
                         "physical_channel_names": self.p, "shards_num": 2, "db_id": "1",
                         "start_positions": [{"key": p, "data": _b64(starts[p])} for p in self.p]}
        self.info["schema"] = {"name": schema.name, "version": version}
        self.write(etcd_put_step(self.endpoints, f"{self.base}/database/collection-info/1/{self.cid}",
                                 "milvus.proto.etcd.CollectionInfo", self.info))


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def rows_of(table) -> Counter:
    return Counter(zip(*(table.column(c).to_pylist() for c in COLUMNS)))


def test_fields_added_to_a_mirrored_collection_land_whichever_comes_first_meta_or_stream(
        mq, etcd_server, etcd_root, tmp_path, spark):
    cid = next(_ids)
    writer = Writer()
    milvus_root = f"{etcd_root}/milvus/meta"
    s = Growing(writer, mq.kind, mq.address, cid, etcd_server.endpoint, milvus_root)
    mq.create_topics(s.p)
    seg = [(cid + 100 + 2 * k, cid + 101 + 2 * k) for k in range(5)]   # each shard's segment, one a version
    mirror = Mirror(etcd_server, SimpleNamespace(mq=mq.kind, broker_address=mq.address, meta_root=milvus_root),
                    tmp_path)
    mirror.env["DELTANODE_MILVUS_START"] = "checkpoint"
    started = time.monotonic()

    def caught_up(tts: list[int], what: str) -> None:
        def behind() -> list[str]:
            return [v for v, tt in zip(s.v, tts)
                    if (st := meta.channel_state(mirror.storage, cid, v)) is None or st.checkpoint_ts < tt]
        try:
            wait_until(lambda: not behind(), 120, what, 0.5)
        except AssertionError:
            raise AssertionError(f"behind: {behind()}\n{mirror.log.read_text()[-4000:]}") from None

    def recorded() -> tuple[int, list[str]]:
        table = open_table(mirror.storage.insert_log(cid))
        schema = recorded_schema(table.metadata().configuration)
        return (schema.version if schema else -1), [f.name for f in table.schema().fields]

    def logged(version: int) -> None:
        line = f"the catalog gives schema version {version} (was {version - 1}; "   # one line a key put
        wait_until(lambda: line in mirror.log.read_text(), 30, f"the coordinator to read schema version {version}")

    try:
        # -- before DeltaNode: the collection, inserts, note added; Milvus saved it (version 1).
        s.ticks()
        creates = []
        for i in range(2):
            creates.append(s.append(i, "CreateCollection", broadcast=True, body=_create_request(s), header={
                "collection_id": str(cid), "partition_ids": [str(s.pid)], "db_id": "1"}))
        create_tt = s._tt
        for i in range(2):
            s.create_segment(i, seg[0][i])
        s.insert(0, list(range(1, 11)), seg[0][0], 0)
        s.insert(1, list(range(1001, 1011)), seg[0][1], 0)         # gone from the broker
        s.insert(1, list(range(1011, 1021)), seg[0][1], 0)         # Milvus's channel checkpoint
        checkpoint = (s.last_offset, s._tt)
        s.insert(1, list(range(1021, 1031)), seg[0][1], 0)
        s.add_field(1, [seg[0][0], seg[0][1]])
        for i in range(2):
            s.create_segment(i, seg[1][i])
        s.insert(0, list(range(11, 21)), seg[1][0], 1)
        s.insert(1, list(range(1031, 1041)), seg[1][1], 1)
        last = s.ticks()
        s.save_meta(1, starts={p: kafka_msg_id(o) for p, o in zip(s.p, creates)}, create_tt=create_tt)
        s.write(etcd_put_step(etcd_server.endpoint, f"{milvus_root}/datacoord-meta/channel-cp/{s.v[1]}",
                              "milvus.proto.msg.MsgPosition", json_format.MessageToDict(msg_pb2.MsgPosition(
                                  channel_name=s.v[1], msgID=kafka_msg_id(checkpoint[0]), timestamp=checkpoint[1],
                                  msgGroup="datanode-1"))))
        assert delete_records_before(mq.address, {s.p[1]: checkpoint[0]})[s.p[1]] == checkpoint[0]
        s.rows = Counter(r for r in s.rows.elements() if not (1001 <= r[0] <= 1020))   # before the checkpoint
        with EtcdClient(etcd_server.endpoint) as client:
            record = MilvusCatalog(client, milvus_root, own_client=client, own_root=etcd_root,
                                   broker=Broker(mq.kind, mq.address), positions=CODECS[mq.kind]).collections()[0]
        assert (record.schema.version, [f.name for f in record.schema.fields]) == (
            1, ["RowID", "Timestamp", "pk", "vec", "note"])

        mirror.start()
        caught_up(last, "both shards past note's change")
        assert recorded()[1][:3] == ["pk", "vec", "note"]          # made with the meta's schema

        # -- score: read from the stream first, saved in etcd after.
        s.insert(0, list(range(21, 31)), seg[1][0], 1)
        s.add_field(2, [seg[1][0], seg[1][1]])
        for i in range(2):
            s.create_segment(i, seg[2][i])
        s.insert(0, list(range(31, 41)), seg[2][0], 2)
        s.insert(1, list(range(1041, 1051)), seg[2][1], 2)
        caught_up(s.ticks(), "both shards past score's change")
        assert recorded()[0] == 2 and recorded()[1][-1] == "score"   # widened, while etcd says version 1
        s.save_meta(2)
        logged(2)
        s.insert(1, list(range(1051, 1061)), seg[2][1], 2)
        caught_up(s.ticks(), "both shards past an insert after score's meta")

        # -- tag: saved in etcd first, read from the stream after.
        s.save_meta(3)
        logged(3)
        s.insert(0, list(range(41, 51)), seg[2][0], 2)               # sent before the change
        s.add_field(3, [seg[2][0], seg[2][1]], alter=False)          # the older SchemaChange message
        for i in range(2):
            s.create_segment(i, seg[3][i])
        s.insert(0, list(range(51, 61)), seg[3][0], 3)
        s.insert(1, list(range(1061, 1071)), seg[3][1], 3)
        caught_up(s.ticks(), "both shards past tag's change")
        assert recorded()[0] == 3 and recorded()[1][-1] == "tag"
        mirror.stop()

        # -- flag: stream and meta while no DeltaNode runs; then it starts again before the change.
        s.insert(1, list(range(1071, 1081)), seg[3][1], 3)
        s.add_field(4, [seg[3][0], seg[3][1]])
        for i in range(2):
            s.create_segment(i, seg[4][i])
        s.insert(0, list(range(61, 71)), seg[4][0], 4)
        s.insert(1, list(range(1081, 1091)), seg[4][1], 4)
        last = s.ticks()
        s.save_meta(4)
        mirror.start()
        caught_up(last, "both shards past flag's change after the restart")
        assert recorded()[0] == 4 and recorded()[1][-1] == "flag"
        errors = mirror.log_errors()
        log_text = mirror.log.read_text()
    finally:
        mirror.stop()
        writer.close()
    elapsed = time.monotonic() - started

    storage = mirror.storage
    uri = storage.insert_log(cid)
    table = open_table(uri)
    assert [f.name for f in table.schema().fields] == ["pk", "vec", "note", "_ts", "_row_id", "_segment_id",
                                                       "_partition_id", "score", "tag", "flag"]
    got = rows_of(read_table(storage, uri, list(COLUMNS), include_deleted=True))
    print(f"{mq.kind}: {writer.steps} steps; {sum(s.rows.values())} rows expected, {sum(got.values())} found; "
          + ", ".join(f"{n} set in {sum(1 for r in got.elements() if r[2 + k] is not None)}"
                      for k, n in enumerate(ADDED)) + f"; {elapsed:.1f} s")
    assert not errors, errors
    assert got == s.rows
    # The changes read from the stream with an older schema were taken there; those the meta gave at
    # a watch (note at the first start, flag at the restart) only sealed their segments.
    adopted = [v for v in range(1, 5) if f"schema version {v} read on " in log_text]
    assert adopted == [2, 3], adopted
    plain = Counter(tuple(r[:1] + r[2:]) for r in s.rows.elements())
    for name, reader in {**READERS, "spark": lambda u, c: by_spark(spark, u, c)}.items():
        read = reader(uri, ["pk", *ADDED])
        assert Counter(zip(*(read.column(c).to_pylist() for c in ("pk", *ADDED)))) == plain, name
    # The lake's view over the mirror's catalog: score's default where a row predates it.
    with EtcdClient(etcd_server.endpoint) as client:
        records = MilvusCatalog(client, milvus_root, own_client=client, own_root=etcd_root,
                                broker=Broker(mq.kind, mq.address), positions=CODECS[mq.kind]).collections()
    register(spark, storage, lake_tables(records, storage))
    viewed = Counter(tuple(r) for r in spark.sql(f"SELECT pk, {', '.join(ADDED)} FROM coll{cid}").collect())
    assert viewed == Counter((pk, note, SCORE_DEFAULT if score is None else score, tag, flag)
                             for pk, note, score, tag, flag in plain.elements())
    # Each change sealed the segments its streaming node flushed for it; none quarantined.
    states = {(v, sid): (m.state, m.seal_reason) for v in s.v
              for sid, m in meta.channel_state(storage, cid, v).segments.items()}
    flushed = (SegmentState.FLUSHED, "schema change")
    assert states == {**{(s.v[i], seg[k][i]): flushed for k in range(4) for i in range(2)},
                      (s.v[0], seg[4][0]): (SegmentState.GROWING, ""), (s.v[1], seg[4][1]): (SegmentState.GROWING, "")}
    quarantine = read_table(storage, storage.quarantine(), ["vchannel", "reason"])
    assert [q for q in (quarantine.to_pylist() if quarantine is not None else []) if q["vchannel"] in s.v] == []


def _create_request(s: Growing) -> msg_pb2.CreateCollectionRequest:
    return msg_pb2.CreateCollectionRequest(
        base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection), collectionName=f"coll{s.cid}",
        collectionID=s.cid, partitionIDs=[s.pid], partitionNames=["_default"], virtualChannelNames=s.v,
        physicalChannelNames=s.p, schema=s.schemas[0].SerializeToString())
