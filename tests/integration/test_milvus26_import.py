"""A Milvus 2.6 history imported from storage version 2, in front of its stream: the segments Milvus
persisted as Parquet column groups (tests/milvus_v2_files.py, after Milvus's and milvus-storage's
writers) with their DataCoord meta and channel checkpoint in etcd (put by Milvus's own Go types
through tests/milvus_wal), and the 2.6 messages around them on Apache Pulsar and Apache Kafka
(written by Milvus's own WAL code). DeltaNode in mirror mode (``milvus.start = segments``, as a user
runs ``spark-submit.sh standalone``) imports the segments, then reads the stream from Milvus's
checkpoint: every row once, the segments' deletes applied, the stream's after the import, and no
row of an imported segment read again from the stream (the replay filter).

Also, with a real etcd: the segment layouts the import refuses from the meta alone (a storage
version it does not know, a manifest, a column group of another file format), and a refused
column group file failing the import with the file named.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from google.protobuf import json_format

from deltanode.delta.delta_log import DeltaLog
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.etcd.client import EtcdClient
from deltanode.milvus_import.import_progress import import_progress
from deltanode.milvus_import.importer import ImportFailed, MilvusSource, VchannelImporter
from deltanode.milvus_import.meta import MilvusMetaError, read_persisted
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.state.commit import CollectionCommitter, QuarantineLog
from deltanode.state.current_state import current_rows
from deltanode.wire.datapb import Binlog, FieldBinlog, SegmentInfo
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.positions import CODECS, kafka_msg_id
from deltanode.wire.schema import CollectionLayout

from .. import milvus_binlog_files as binlogs
from .. import milvus_v2_files as v2
from .milvus26_wal import Written, append_step, etcd_put_step, open_step, run_script, tso
from .milvus_mirror import Mirror
from .support import ALL_BROKERS, wait_until

pytestmark = pytest.mark.spark
DataType = schema_pb2.DataType
_ids = itertools.count(int(time.time()) % 100000 * 100 + 61)
PK, N, NOTE, BODY, DOC, VEC = range(100, 106)
DIM = 4


def _field(fid: int, name: str, t: int, **kw) -> schema_pb2.FieldSchema:
    params = kw.pop("params", {})
    f = schema_pb2.FieldSchema(fieldID=fid, name=name, data_type=t, **kw)
    for k, v in params.items():
        f.type_params.add(key=k, value=str(v))
    return f


def fields() -> list[schema_pb2.FieldSchema]:
    """A VarChar primary key, nullable scalars, a Text and a vector: four column groups. RowID and
    Timestamp come after the user's fields, as RootCoord appends them."""
    return [_field(PK, "pk", DataType.VarChar, is_primary_key=True, params={"max_length": 32}),
            _field(N, "n", DataType.Int32, nullable=True),
            _field(NOTE, "note", DataType.VarChar, nullable=True, params={"max_length": 64}),
            _field(BODY, "body", DataType.Text, nullable=True),
            _field(DOC, "doc", DataType.JSON, nullable=True),
            _field(VEC, "vec", DataType.FloatVector, params={"dim": DIM}),
            _field(0, "RowID", DataType.Int64), _field(1, "Timestamp", DataType.Int64)]


def schema() -> schema_pb2.CollectionSchema:
    return schema_pb2.CollectionSchema(name="hist26", fields=fields())


def row(i: int) -> dict:
    """Row ``i`` as a client means it (None: null)."""
    return {"pk": f"k{i:03d}", "n": None if i % 3 == 1 else i * 7, "note": None if i % 4 == 2 else f"note {i}",
            "body": None if i % 5 == 3 else f"text {i} " * (i % 3 + 1),
            "doc": None if i % 6 == 4 else json.dumps({"i": i, "even": i % 2 == 0}),
            "vec": [float(np.float32(x)) for x in (i, i + 0.5, -i, 0.25)]}


def _nullable(fd: schema_pb2.FieldData, slot: str, values: list, zero) -> None:
    """The proxy's full form: a placeholder in a null's slot, ``valid_data`` a bool a row."""
    getattr(fd.scalars, slot).data.extend(zero if v is None else v for v in values)
    fd.valid_data.extend(v is not None for v in values)


def insert_request(cid: int, partition: int, vchannel: str, pks: list[int]) -> msg_pb2.InsertRequest:
    rows = [row(i) for i in pks]
    req = msg_pb2.InsertRequest(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=vchannel,
                                collection_name="hist26", collectionID=cid, partitionID=partition, num_rows=len(rows),
                                version=msg_pb2.InsertDataVersion.ColumnBased, rowIDs=[i * 10 for i in pks])
    req.fields_data.add(field_id=PK, field_name="pk", type=DataType.VarChar).scalars.string_data.data.extend(
        r["pk"] for r in rows)
    _nullable(req.fields_data.add(field_id=N, field_name="n", type=DataType.Int32), "int_data",
              [r["n"] for r in rows], 0)
    _nullable(req.fields_data.add(field_id=NOTE, field_name="note", type=DataType.VarChar), "string_data",
              [r["note"] for r in rows], "")
    _nullable(req.fields_data.add(field_id=BODY, field_name="body", type=DataType.Text), "string_data",
              [r["body"] for r in rows], "")
    _nullable(req.fields_data.add(field_id=DOC, field_name="doc", type=DataType.JSON), "json_data",
              [None if r["doc"] is None else r["doc"].encode() for r in rows], b"")
    vec = req.fields_data.add(field_id=VEC, field_name="vec", type=DataType.FloatVector).vectors
    vec.dim = DIM
    vec.float_vector.data.extend(x for r in rows for x in r["vec"])
    return req


def persisted_values(pks: list[int], ts: int) -> dict[int, list]:
    """What Milvus's DataNode syncs of rows ``pks`` inserted at ``ts``: a value a row by field id."""
    rows = [row(i) for i in pks]
    out = {f: [r[name] for r in rows] for f, name in ((PK, "pk"), (N, "n"), (NOTE, "note"), (BODY, "body"),
                                                       (DOC, "doc"), (VEC, "vec"))}
    out[0] = [i * 10 for i in pks]
    out[1] = [ts] * len(pks)
    return out


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def msg_id(kind: str, w: Written) -> bytes:
    """A step's message id as Milvus's positions carry it: Kafka's offset (8 bytes LE), Pulsar's
    MessageIdData."""
    if kind == "kafka":
        assert isinstance(w.offset, int)
        return kafka_msg_id(w.offset)
    assert w.id is not None
    return base64.b64decode(w.id)


class History:
    """One vchannel's 2.6 history: the stream's steps with their time ticks, and what each insert
    and delete puts in the tables (``inserted`` and ``deletes``: multisets of (pk, ts); ``inserts``:
    (pk, ts) -> its segment)."""

    def __init__(self, kind: str, address: str, cid: int) -> None:
        self.kind, self.address, self.cid = kind, address, cid
        self.p = pchannel_name(f"h26i{cid}-rootcoord-dml", 0)
        self.v = vchannel_name(self.p, cid, 0)
        self.part = cid + 1
        self.steps: list[dict] = []
        self.tts: list[int] = []
        self.inserts: dict[tuple[str, int], int] = {}
        self.inserted: Counter = Counter()       # every insert's (pk, ts), as a multiset
        self.deletes: Counter = Counter()
        self._tt = 0
        self.run_start = 0
        self.begin()

    def begin(self) -> None:
        self.run_start = len(self.steps)
        self.steps.append(open_step(self.kind, self.address, self.p))
        self.tts.append(0)

    def append(self, msg_type: str, *, body=None, header: dict | None = None, vchannel: bool = True,
               broadcast: bool = False) -> int:
        self._tt = max(self._tt + 1, tso(int(time.time() * 1000)))
        self.steps.append(append_step(
            self.p, msg_type, self._tt, vchannel=self.v if vchannel else None, header=header,
            body=json_format.MessageToDict(body) if body is not None else {}, last_confirmed="self",
            broadcast=([self.v], 7) if broadcast else None))
        self.tts.append(self._tt)
        return len(self.steps) - 1

    def tick(self) -> int:
        return self.append("TimeTick", body=msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(
            msg_type=common_pb2.MsgType.TimeTick)), vchannel=False)

    def create_collection(self) -> int:
        body = msg_pb2.CreateCollectionRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection), collectionName="hist26",
            collectionID=self.cid, partitionIDs=[self.part], partitionNames=["_default"], virtualChannelNames=[self.v],
            physicalChannelNames=[self.p], schema=schema().SerializeToString())
        return self.append("CreateCollection", body=body, broadcast=True, header={
            "collection_id": str(self.cid), "partition_ids": [str(self.part)], "db_id": "1"})

    def create_segment(self, segment: int) -> int:
        return self.append("CreateSegment", header={"collection_id": str(self.cid), "partition_id": str(self.part),
                                                    "segment_id": str(segment), "storage_version": "2",
                                                    "level": "L1"})

    def insert(self, segment: int, pks: list[int]) -> int:
        step = self.append("Insert", body=insert_request(self.cid, self.part, self.v, pks), header={
            "collection_id": str(self.cid), "partitions": [{
                "partition_id": str(self.part), "rows": str(len(pks)), "binary_size": "0",
                "segment_assignment": {"segment_id": str(segment)}}]})
        self.inserts.update({(row(i)["pk"], self.tts[step]): segment for i in pks})
        self.inserted.update((row(i)["pk"], self.tts[step]) for i in pks)
        return step

    def delete(self, pks: list[int]) -> int:
        keys = [row(i)["pk"] for i in pks]
        body = msg_pb2.DeleteRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Delete), shardName=self.v, collection_name="hist26",
            collectionID=self.cid, partitionID=self.part, num_rows=len(pks),
            primary_keys=schema_pb2.IDs(str_id=schema_pb2.StringArray(data=keys)), timestamps=[1] * len(pks))
        step = self.append("Delete", body=body, header={"collection_id": str(self.cid), "rows": str(len(pks))})
        self.deletes.update((k, self.tts[step]) for k in keys)
        return step

    def run(self) -> list[Written]:
        return [Written(step=0, op="")] * self.run_start + run_script(self.steps[self.run_start:])

    def current(self) -> Counter:
        """A query's answer: each inserted (pk, ts) no later delete of its key removes (one insert a key here)."""
        return Counter(k for k in self.inserted.elements()
                       if not any(d == k[0] and ts > k[1] for d, ts in self.deletes))


class PersistedMilvus:
    """What Milvus's DataNode and DataCoord persisted of the history: the segments' column group
    files and deltalogs under Milvus's storage root, and their meta as etcd_put steps."""

    def __init__(self, h: History, root, endpoints: str, meta_root: str) -> None:
        self.h, self.root, self.endpoints, self.base = h, root, endpoints, f"{meta_root}/datacoord-meta"
        self.log_ids = itertools.count(int(time.time()) % 1000 * 1000 + 5000)
        self.steps: list[dict] = []

    def segment(self, segment: int, state: str, syncs: list[tuple[list[int], int]], *, dml: tuple[bytes, int],
                deletes: list[tuple[str, int]] = ()) -> None:
        """A segment with a sync a (pks, ts), its dml position ``dml`` (msgID, ts), and a deltalog
        of ``deletes`` as the 2.6 DataNode writes it (the JSON stream writer's)."""
        written = [v2.write_sync(self.root, schema(), collection_id=self.h.cid, partition_id=self.h.part,
                                 segment_id=segment, values=persisted_values(pks, ts), log_ids=self.log_ids)
                   for pks, ts in syncs]
        first_ts = syncs[0][1]
        info = {"ID": str(segment), "collectionID": str(self.h.cid), "partitionID": str(self.h.part),
                "insertChannel": self.h.v, "numOfRows": str(sum(len(p) for p, _ in syncs)), "state": state,
                "level": "L1", "storageVersion": "2", "isCreatedByStreaming": True,
                "startPosition": {"channelName": self.h.v, "timestamp": str(first_ts)},
                "dmlPosition": {"channelName": self.h.v, "msgID": b64(dml[0]), "timestamp": str(dml[1])}}
        key = f"{self.h.cid}/{self.h.part}/{segment}"
        self.steps.append(etcd_put_step(self.endpoints, f"{self.base}/s/{key}", "milvus.proto.data.SegmentInfo", info))
        for g in sorted({w.group_id for w in written[0]}):
            self.steps.append(etcd_put_step(self.endpoints, f"{self.base}/binlog/{key}/{g}",
                                            "milvus.proto.data.FieldBinlog", v2.field_binlog_json(written, g)))
        if deletes:
            log_id = next(self.log_ids)
            path = self.root / f"delta_log/{key}/{log_id}"
            path.parent.mkdir(parents=True, exist_ok=True)
            rows = binlogs.json_delete_rows([k for k, _ in deletes], [t for _, t in deletes])
            path.write_bytes(binlogs.deltalog(rows, stream=True, collection_id=self.h.cid, partition_id=self.h.part,
                                              segment_id=segment))
            self.steps.append(etcd_put_step(self.endpoints, f"{self.base}/deltalog/{key}/{PK}",
                                            "milvus.proto.data.FieldBinlog", {"fieldID": str(PK), "binlogs": [{
                                                "entriesNum": str(len(deletes)), "logID": str(log_id),
                                                "timestampFrom": str(min(t for _, t in deletes)),
                                                "timestampTo": str(max(t for _, t in deletes)),
                                                "logSize": str(path.stat().st_size)}]}))

    def checkpoint(self, position: bytes, ts: int) -> None:
        self.steps.append(etcd_put_step(self.endpoints, f"{self.base}/channel-cp/{self.h.v}",
                                        "milvus.proto.msg.MsgPosition",
                                        {"channelName": self.h.v, "msgID": b64(position), "msgGroup": "streaming-node",
                                         "timestamp": str(ts)}))


def collection_meta_steps(h: History, endpoints: str, meta_root: str, start: bytes, create_tt: int) -> list[dict]:
    """The collection as RootCoord 2.6 keeps it: database, collection info, a key a field, the partition."""
    base = f"{meta_root}/root-coord"
    info = {"ID": str(h.cid), "schema": {"name": "hist26"}, "create_time": str(create_tt),
            "virtual_channel_names": [h.v], "physical_channel_names": [h.p], "shards_num": 1, "db_id": "1",
            "start_positions": [{"key": h.p, "data": b64(start)}]}
    steps = [etcd_put_step(endpoints, f"{base}/database/db-info/1", "milvus.proto.etcd.DatabaseInfo",
                           {"name": "default", "id": "1"}),
             etcd_put_step(endpoints, f"{base}/database/collection-info/1/{h.cid}", "milvus.proto.etcd.CollectionInfo",
                           info),
             etcd_put_step(endpoints, f"{base}/partitions/{h.cid}/{h.part}", "milvus.proto.etcd.PartitionInfo",
                           {"partitionID": str(h.part), "partitionName": "_default", "collection_id": str(h.cid)})]
    steps += [etcd_put_step(endpoints, f"{base}/fields/{h.cid}/{f.fieldID}", "milvus.proto.schema.FieldSchema",
                            json_format.MessageToDict(f)) for f in fields()]
    return steps


@ALL_BROKERS
def test_a_storage_v2_history_is_imported_in_front_of_its_stream(mq, etcd_server, etcd_root, tmp_path):
    cid = next(_ids)
    h = History(mq.kind, mq.address, cid)
    mq.create_topics([h.p])
    s1, s2, s3 = cid + 100, cid + 101, cid + 102
    started = time.monotonic()

    # -- what happened before the mirror: S1 filled and flushed with a delete, S2 growing, and
    # Milvus's checkpoint before S2's last synced insert.
    h.tick()
    create = h.create_collection()
    h.create_segment(s1)
    h.create_segment(s2)
    a = h.insert(s1, list(range(0, 10)))
    b = h.insert(s1, list(range(10, 20)))
    d1 = h.delete([3, 12])
    c = h.insert(s2, list(range(20, 25)))
    held = h.insert(s2, list(range(25, 30)))     # the checkpoint's message: synced into S2 too
    h.delete([7])                                # after the checkpoint: in no deltalog
    h.insert(s2, list(range(30, 35)))            # after S2's sync
    h.tick()
    first = h.run()
    tt = h.tts

    milvus_root = f"{etcd_root}/milvus/meta"
    files = tmp_path / "milvus"
    milvus = PersistedMilvus(h, files, etcd_server.endpoint, milvus_root)
    milvus.segment(s1, "Flushed", [(list(range(0, 10)), tt[a]), (list(range(10, 20)), tt[b])],
                   dml=(msg_id(mq.kind, first[d1]), tt[d1]), deletes=[(row(3)["pk"], tt[d1]), (row(12)["pk"], tt[d1])])
    milvus.segment(s2, "Growing", [(list(range(20, 25)), tt[c]), (list(range(25, 30)), tt[held])],
                   dml=(msg_id(mq.kind, first[held]), tt[held]))
    milvus.checkpoint(msg_id(mq.kind, first[held]), tt[c])
    run_script(collection_meta_steps(h, etcd_server.endpoint, milvus_root, msg_id(mq.kind, first[create]),
                                     tt[create]) + milvus.steps)

    # -- the mirror, as a user runs it; more of the stream while it runs.
    mirror = Mirror(etcd_server, SimpleNamespace(mq=mq.kind, broker_address=mq.address, meta_root=milvus_root),
                    tmp_path)
    mirror.env.update(DELTANODE_MILVUS_START="segments", DELTANODE_MILVUS_STORAGE_ROOT=str(files))
    mirror.start()
    try:
        h.begin()
        h.insert(s2, list(range(35, 40)))
        h.create_segment(s3)
        h.insert(s3, list(range(40, 45)))
        h.delete([21])                            # a row of the imported growing segment
        last = h.tick()
        h.run()

        def behind() -> bool:
            st = meta.channel_state(mirror.storage, cid, h.v)
            return st is None or st.checkpoint_ts < h.tts[last]
        try:
            wait_until(lambda: not behind(), 120, "the mirror to reach the last writes", 0.5)
        except AssertionError:
            raise AssertionError(f"behind\n{mirror.log.read_text()[-4000:]}") from None
        errors = mirror.log_errors()
    finally:
        mirror.stop()
    elapsed = time.monotonic() - started

    storage = mirror.storage
    rows = read_table(storage, storage.insert_log(cid), include_deleted=True).to_pylist()
    recorded = read_table(storage, storage.delta_log(cid), ["pk", "_ts"])
    current = current_rows(storage, cid, "pk")
    got_inserts = Counter((r["pk"], r["_ts"]) for r in rows)
    got_deletes = Counter(zip(recorded.column("pk").to_pylist(), recorded.column("_ts").to_pylist()))
    got_current = Counter(zip(current.column("pk").to_pylist(), current.column("_ts").to_pylist()))
    quarantine = read_table(storage, storage.quarantine(), ["vchannel", "reason"])
    ours = [q for q in (quarantine.to_pylist() if quarantine is not None else []) if q["vchannel"] == h.v]
    done = import_progress(DeltaLog.open(storage.insert_log(cid), storage.options), h.v)
    imported = [k for k, seg in h.inserts.items() if seg in (s1, s2) and k[1] <= tt[held]]
    print(f"{mq.kind}: {len(imported)} rows imported of {done['rows_done']}; inserts {sum(h.inserted.values())} "
          f"expected, {sum(got_inserts.values())} found ({sum(n - 1 for n in got_inserts.values())} twice); deletes "
          f"{sum(h.deletes.values())} expected, {sum(got_deletes.values())} found; current {len(h.current())} "
          f"expected, {sum(got_current.values())} found; quarantined {len(ours)}; {elapsed:.1f} s")
    assert not errors and ours == []
    assert (done["done"], done["segments_done"], done["rows_done"], done["deleted_done"]) == (True, 2, 30, 2)
    assert got_inserts == h.inserted                   # each once: S2's synced rows not again from the stream
    assert got_deletes == h.deletes                    # S1's deltalog (up to the checkpoint), then the stream's
    assert got_current == h.current()
    for r in rows:                                     # field by field, nulls as nulls
        segment = h.inserts[(r["pk"], r["_ts"])]
        i = int(r["pk"][1:])
        assert r == row(i) | {"_ts": r["_ts"], "_row_id": i * 10, "_segment_id": segment, "_partition_id": h.part}
    assert all(any(r[c] is None for r in rows) for c in ("n", "note", "body", "doc"))
    state = meta.channel_state(storage, cid, h.v)
    assert {s: m.state for s, m in state.segments.items()} == {s1: SegmentState.FLUSHED, s2: SegmentState.GROWING,
                                                                s3: SegmentState.GROWING}


def _put(client: EtcdClient, key: str, message) -> None:
    client.put(key, message.SerializeToString())


@pytest.mark.parametrize("change, reason", [
    ({"storage_version": 3}, "is in Milvus's storage version 3, which DeltaNode does not know"),
    ({"storage_version": 2, "manifest_path": "files/manifest/1"}, "keeps its files in a manifest"),
    ({"storage_version": 2, "format": "lance"}, "column group 0 of segment 9 is in the 'lance' file format"),
])
def test_a_segment_layout_after_2_6_6_is_refused_from_its_meta(client, etcd_root, change, reason):
    vchannel = "m-rootcoord-dml_0_7v0"
    base = f"{etcd_root}/datacoord-meta"
    info = SegmentInfo(ID=9, collectionID=7, partitionID=8, insert_channel=vchannel, num_of_rows=1, state=4, level=2,
                       storage_version=change["storage_version"], manifest_path=change.get("manifest_path", ""))
    _put(client, f"{base}/s/7/8/9", info)
    _put(client, f"{base}/binlog/7/8/9/0", FieldBinlog(fieldID=0, child_fields=[0, 1, 100], format=change.get(
        "format", ""), binlogs=[Binlog(entries_num=1, logID=5)]))
    with pytest.raises(MilvusMetaError, match=rf"{re.escape(base)}/(s|binlog)/7/8/9(/0)?: .*{reason}"):
        read_persisted(client, etcd_root, 7, vchannel, CODECS["kafka"])
    info.state = 6      # dropped: left out of an import, whatever its files
    _put(client, f"{base}/s/7/8/9", info)
    assert [s.segment_id for s in read_persisted(client, etcd_root, 7, vchannel, CODECS["kafka"]).segments] == [9]


def test_a_column_group_the_import_refuses_fails_it_naming_the_file(client, etcd_root, tmp_path, spark):
    """Milvus's meta at one etcd, its files on disk, DeltaNode's import run by Spark: a vector group
    written with one row fewer than its siblings stops the import with that file's name, and
    nothing of the segment is committed."""
    cid, part, seg = 61, 62, 63
    vchannel = f"imp26-rootcoord-dml_0_{cid}v0"
    base = f"{etcd_root}/datacoord-meta"
    files = tmp_path / "milvus"
    written = v2.write_sync(files, schema(), collection_id=cid, partition_id=part, segment_id=seg,
                            values=persisted_values(list(range(4)), 1000), log_ids=itertools.count(70))
    vec = next(w for w in written if w.group_id == VEC)
    vec_field = next(f for f in fields() if f.fieldID == VEC)
    (files / vec.path).write_bytes(v2.column_group_file(
        [vec_field], [v2.arrow_column(vec_field, [row(i)["vec"] for i in range(3)])],
        v2.column_groups(v2.all_fields(schema()))))
    _put(client, f"{base}/s/{cid}/{part}/{seg}", SegmentInfo(
        ID=seg, collectionID=cid, partitionID=part, insert_channel=vchannel, num_of_rows=4, state=4, level=2,
        storage_version=2, dml_position=msg_pb2.MsgPosition(channel_name=vchannel, timestamp=1000)))
    for w in written:
        _put(client, f"{base}/binlog/{cid}/{part}/{seg}/{w.group_id}", FieldBinlog(
            fieldID=w.group_id, child_fields=w.field_ids, binlogs=[Binlog(entries_num=4, logID=w.log_id)]))
    _put(client, f"{base}/channel-cp/{vchannel}", msg_pb2.MsgPosition(channel_name=vchannel,
                                                                     msgID=kafka_msg_id(9), timestamp=1000))
    storage = StorageLayout(str(tmp_path / "delta"))
    layout = CollectionLayout.from_proto(schema())
    committer = CollectionCommitter(storage, cid, layout.insert_schema(), layout.delete_schema(),
                                    QuarantineLog(storage))
    source = MilvusSource(client=client, meta_root=etcd_root, storage=StorageLayout(str(files)),
                          positions=CODECS["kafka"])
    with pytest.raises(ImportFailed, match=rf"{vchannel}: {vec.path}: 3 rows; the segment's meta says 4"):
        VchannelImporter(spark.sparkContext, storage, source).run(vchannel, cid, schema(), committer, 7)
    table = read_table(storage, storage.insert_log(cid))
    assert table is None or table.num_rows == 0
