"""The import of what a Milvus persisted, on files and meta built in Milvus 2.4's format (an L0
segment whose deletes reach every partition, sparse and BFloat16 vectors), in a real etcd, read by
real Spark tasks: rows, deletion vectors, the committed state and its replay filter, a file
compacted away mid-import, an import stopped between commits and taken up again, and an import
process SIGKILLed at each of its commit points and run again.

Milvus 2.3.5's own files are imported in test_milvus_history.py (a real Milvus); 2.4 is not
runnable here, so its layout is written by ``tests/milvus_binlog_files.py``, from Milvus's code.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import read_table
from deltanode.failure.crash_points import CRASH_AT, CRASH_DIR, IMPORT_POINTS
from deltanode.milvus_import import importer as importer_module
from deltanode.milvus_import.import_progress import import_progress
from deltanode.milvus_import.importer import MilvusSource, VchannelImporter
from deltanode.milvus_import.meta import MilvusSegmentState, SegmentLevel
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.state.commit import CollectionCommitter, QuarantineLog
from deltanode.wire.datapb import Binlog, FieldBinlog, SegmentInfo
from deltanode.wire.milvus_proto import msg_pb2, schema_pb2
from deltanode.wire.positions import CODECS
from deltanode.wire.schema import CollectionLayout

from .. import milvus_binlog_files as files
from .support import fresh_root

pytestmark = pytest.mark.spark
RUNNER = os.path.join(os.path.dirname(__file__), "import_runner.py")
DataType = schema_pb2.DataType
COLLECTION, P1, P2 = 447, 448, 449
VCHANNEL = "imp-rootcoord-dml_0_447v0"
BASE_TS = 470767461955796999


def _schema() -> schema_pb2.CollectionSchema:
    schema = schema_pb2.CollectionSchema(name="imported")
    for fid, name, dtype, params in [(100, "id", DataType.Int64, {}), (101, "tag", DataType.VarChar,
                                                                         {"max_length": "16"}),
                                     (102, "vec", DataType.FloatVector, {"dim": "4"}),
                                     (103, "sp", DataType.SparseFloatVector, {}),
                                     (104, "bf", DataType.BFloat16Vector, {"dim": "2"})]:
        f = schema.fields.add(fieldID=fid, name=name, data_type=dtype, is_primary_key=fid == 100)
        for k, v in params.items():
            f.type_params.add(key=k, value=v)
    return schema


def _row(pk: int) -> dict:
    return {"id": pk, "tag": f"t{pk}", "vec": [float(pk), 1.0, 2.0, 3.0], "sp": {pk: 0.5, pk + 10: 1.5},
            "bf": struct.pack("<HH", 0x3F80, pk)}


class FakeMilvus:
    """A Milvus's persisted state written the way its DataCoord and DataNodes write it: files under
    a storage root, ``datacoord-meta`` keys in etcd."""

    def __init__(self, client, root, source: StorageLayout) -> None:
        self.client, self.meta_root = client, root
        self.fs, self.base = source.filesystem(source.root)
        self.log_ids = iter(range(9000, 100000))

    def _put_file(self, path: str, data: bytes) -> None:
        target = f"{self.base}/{path}"
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(target) as out:
            out.write(data)

    def segment(self, seg: int, partition: int, state: MilvusSegmentState, syncs: list[list[int]], *,
                dml_ts: int, level: SegmentLevel = SegmentLevel.L1, deletes: list[tuple[int, int]] = (),
                write_files: bool = True) -> None:
        """A segment with one binlog per field per sync (rows ``syncs[i]``, their ts ``BASE_TS + pk``) and
        one deltalog of ``deletes`` (pk, ts)."""
        base = f"{self.meta_root}/datacoord-meta"
        info = SegmentInfo(ID=seg, collectionID=COLLECTION, partitionID=partition, insert_channel=VCHANNEL,
                           num_of_rows=sum(map(len, syncs)), state=int(state), level=int(level))
        info.dml_position.CopyFrom(msg_pb2.MsgPosition(channel_name=VCHANNEL, timestamp=dml_ts))
        self.client.put(f"{base}/s/{COLLECTION}/{partition}/{seg}", info.SerializeToString())
        fields = {0: [], 1: [], 100: [], 101: [], 102: [], 103: [], 104: []}
        for pks in syncs:
            rows = [_row(pk) for pk in pks]
            payloads = {
                0: (DataType.Int64, pa.array([pk * 10 for pk in pks], pa.int64())),
                1: (DataType.Int64, pa.array([BASE_TS + pk for pk in pks], pa.int64())),
                100: (DataType.Int64, pa.array(pks, pa.int64())),
                101: (DataType.VarChar, pa.array([r["tag"] for r in rows], pa.string())),
                102: (DataType.FloatVector, files.float_vector_payload(np.array([r["vec"] for r in rows]))),
                103: (DataType.SparseFloatVector, files.sparse_payload([r["sp"] for r in rows])),
                104: (DataType.BFloat16Vector, files.fixed_rows_payload([r["bf"] for r in rows], 4)),
            }
            for fid, (dtype, values) in payloads.items():
                log_id = next(self.log_ids)
                if write_files:
                    self._put_file(f"insert_log/{COLLECTION}/{partition}/{seg}/{fid}/{log_id}", files.insert_binlog(
                        dtype, values, field_id=fid, collection_id=COLLECTION, partition_id=partition,
                        segment_id=seg))
                fields[fid].append(Binlog(entries_num=len(pks), logID=log_id))
        for fid, binlogs in fields.items():
            if binlogs:
                self.client.put(f"{base}/binlog/{COLLECTION}/{partition}/{seg}/{fid}",
                                FieldBinlog(fieldID=fid, binlogs=binlogs).SerializeToString())
        if deletes:
            log_id = next(self.log_ids)
            self._put_file(f"delta_log/{COLLECTION}/{partition}/{seg}/{log_id}", files.deltalog(
                files.json_delete_rows([pk for pk, _ in deletes], [ts for _, ts in deletes]),
                collection_id=COLLECTION, partition_id=partition, segment_id=seg))
            self.client.put(f"{base}/deltalog/{COLLECTION}/{partition}/{seg}/100", FieldBinlog(
                fieldID=100, binlogs=[Binlog(entries_num=len(deletes), logID=log_id)]).SerializeToString())

    def drop(self, seg: int, partition: int) -> None:
        key = f"{self.meta_root}/datacoord-meta/s/{COLLECTION}/{partition}/{seg}"
        info = SegmentInfo.FromString(self.client.get(key)[0])
        info.state = int(MilvusSegmentState.DROPPED)
        self.client.put(key, info.SerializeToString())

    def checkpoint(self, offset: int, ts: int) -> None:
        self.client.put(f"{self.meta_root}/datacoord-meta/channel-cp/{VCHANNEL}", msg_pb2.MsgPosition(
            channel_name=VCHANNEL, msgID=CODECS["kafka"].to_msg_id(offset), timestamp=ts).SerializeToString())


def _setup(client, etcd_root, spark, source: StorageLayout, storage: StorageLayout):
    milvus = FakeMilvus(client, etcd_root, source)
    milvus_source = MilvusSource(client=client, meta_root=etcd_root, storage=source, positions=CODECS["kafka"],
                                 batch=2)
    layout = CollectionLayout.from_proto(_schema())
    committer = CollectionCommitter(storage, COLLECTION, layout.insert_schema(), layout.delete_schema(),
                                    QuarantineLog(storage))
    return milvus, storage, VchannelImporter(spark.sparkContext, storage, milvus_source), committer


@pytest.fixture
def setup(client, etcd_root, tmp_path, spark):
    return _setup(client, etcd_root, spark, StorageLayout(str(tmp_path / "milvus")),
                  StorageLayout(str(tmp_path / "delta")))


def _live_ids(storage: StorageLayout, **kw) -> list[int]:
    return sorted(read_table(storage, storage.insert_log(COLLECTION), columns=["id"], **kw).column("id").to_pylist())


def test_an_import_of_2_4_segments_holds_their_rows_deletes_and_replay_filter(setup):
    milvus, storage, importer, committer = setup
    # Flushed, two syncs; its own deltalog deletes 2 (after its row), 3 (before its row) and 5 at its
    # row's ts (an upsert's delete): only 2 goes.
    milvus.segment(1, P1, MilvusSegmentState.FLUSHED, [[1, 2, 3], [4, 5]], dml_ts=BASE_TS + 100,
                   deletes=[(2, BASE_TS + 50), (3, BASE_TS + 1), (5, BASE_TS + 5)])
    milvus.segment(2, P2, MilvusSegmentState.GROWING, [[6, 7]], dml_ts=BASE_TS + 7)
    # An L0 segment of every partition deletes 4, and 7 past the checkpoint; a compacted-away segment
    # only feeds the filter.
    milvus.segment(3, -1, MilvusSegmentState.FLUSHED, [], dml_ts=BASE_TS + 90, level=SegmentLevel.L0,
                   deletes=[(4, BASE_TS + 60), (7, BASE_TS + 85)])
    milvus.segment(4, P1, MilvusSegmentState.DROPPED, [[99]], dml_ts=BASE_TS + 99, write_files=False)
    milvus.checkpoint(offset=42, ts=BASE_TS + 80)
    progressed = []

    importer.run(VCHANNEL, COLLECTION, _schema(), committer, 7, lambda: progressed.append(1))

    assert _live_ids(storage) == [1, 3, 5, 6]
    assert _live_ids(storage, include_deleted=True) == [1, 2, 3, 4, 5, 6, 7]
    rows = read_table(storage, storage.insert_log(COLLECTION)).to_pylist()
    one = next(r for r in rows if r["id"] == 6)
    assert one["tag"] == "t6" and one["vec"] == [6.0, 1.0, 2.0, 3.0] and dict(one["sp"]) == {6: 0.5, 16: 1.5}
    assert one["bf"] == struct.pack("<HH", 0x3F80, 6)
    assert (one["_ts"], one["_row_id"], one["_segment_id"], one["_partition_id"]) == (BASE_TS + 6, 60, 2, P2)
    state = meta.channel_state(storage, COLLECTION, VCHANNEL)
    assert (state.checkpoint_offset, state.checkpoint_ts, state.seek_ts) == (42, BASE_TS + 80, BASE_TS + 80)
    assert {s: (m.state, m.num_rows, m.dml_ts) for s, m in state.segments.items()} == {
        1: (SegmentState.FLUSHED, 5, BASE_TS + 100), 2: (SegmentState.GROWING, 2, BASE_TS + 7),
        4: (SegmentState.DROPPED, 1, BASE_TS + 99)}
    assert dict(state.replay.flushed) == {1: BASE_TS + 100} and dict(state.replay.unflushed) == {2: BASE_TS + 7}
    done = import_progress(committer.insert_log(), VCHANNEL)
    assert (done["done"], done["segments_done"], done["rows_done"], done["deleted_done"]) == (True, 2, 7, 3)
    assert progressed   # the channel watch heard of each commit
    # delta_log records each delete up to the checkpoint once (7's is past it: the stream brings it),
    # and its txn is the checkpoint's, where the pipeline's own deletes take over.
    recorded = read_table(storage, storage.delta_log(COLLECTION)).to_pylist()
    assert sorted((r["id"], r["_ts"] - BASE_TS, r["_partition_id"]) for r in recorded) == [
        (2, 50, P1), (3, 1, P1), (4, 60, -1), (5, 5, P1)]
    assert committer.watermarks(VCHANNEL).delete == 42

    importer.run(VCHANNEL, COLLECTION, _schema(), committer, 7)   # committed: nothing more
    assert _live_ids(storage, include_deleted=True) == [1, 2, 3, 4, 5, 6, 7]


def test_a_segment_compacted_away_mid_import_is_replaced_by_its_successor(setup, monkeypatch):
    milvus, storage, importer, committer = setup
    milvus.segment(1, P1, MilvusSegmentState.FLUSHED, [[1, 2]], dml_ts=BASE_TS + 10)
    milvus.segment(2, P1, MilvusSegmentState.FLUSHED, [[3]], dml_ts=BASE_TS + 10, write_files=False)  # gone
    milvus.checkpoint(offset=5, ts=BASE_TS + 20)
    reads = []
    real = importer_module.read_persisted

    def read_then_compact(*args):
        found = real(*args)
        reads.append(found.revision)
        if len(reads) == 1:   # Milvus compacts 1 and 2 into 5 right after the import read its meta
            milvus.segment(5, P1, MilvusSegmentState.FLUSHED, [[1, 2, 3]], dml_ts=BASE_TS + 10)
            milvus.drop(1, P1)
            milvus.drop(2, P1)
        return found
    monkeypatch.setattr(importer_module, "read_persisted", read_then_compact)
    monkeypatch.setattr(importer_module, "RETRY_PAUSE", 0.0)

    importer.run(VCHANNEL, COLLECTION, _schema(), committer, 7)

    assert len(reads) >= 2
    assert _live_ids(storage, include_deleted=True) == [1, 2, 3]
    assert {seg for seg in meta.segment_binlogs(storage, COLLECTION)} == {5}
    state = meta.channel_state(storage, COLLECTION, VCHANNEL)
    assert {s: m.state for s, m in state.segments.items()} == {
        1: SegmentState.DROPPED, 2: SegmentState.DROPPED, 5: SegmentState.FLUSHED}


def test_an_import_stopped_between_commits_goes_on_without_a_duplicate(setup, monkeypatch, spark):
    milvus, storage, importer, committer = setup
    for seg in range(1, 6):   # 5 segments, 2 a job: 3 commits before the last
        milvus.segment(seg, P1, MilvusSegmentState.FLUSHED, [[seg * 10, seg * 10 + 1]], dml_ts=BASE_TS + 100)
    milvus.checkpoint(offset=9, ts=BASE_TS + 200)
    jobs = []
    real_job = VchannelImporter._run_job

    def second_job_dies(self, *args):
        jobs.append(1)
        if len(jobs) == 2:
            raise RuntimeError("the driver dies here")
        return real_job(self, *args)
    monkeypatch.setattr(VchannelImporter, "_run_job", second_job_dies)
    with pytest.raises(RuntimeError, match="dies here"):
        importer.run(VCHANNEL, COLLECTION, _schema(), committer, 7)
    assert _live_ids(storage) == [10, 11, 20, 21]
    assert meta.channel_state(storage, COLLECTION, VCHANNEL) is None
    assert import_progress(committer.insert_log(), VCHANNEL)["segments_done"] == 2

    monkeypatch.setattr(VchannelImporter, "_run_job", real_job)
    layout = CollectionLayout.from_proto(_schema())
    again = CollectionCommitter(storage, COLLECTION, layout.insert_schema(), layout.delete_schema(),
                                QuarantineLog(storage))   # a new process: nothing in memory
    VchannelImporter(spark.sparkContext, storage, importer.source).run(VCHANNEL, COLLECTION, _schema(), again, 8)
    assert _live_ids(storage, include_deleted=True) == [10, 11, 20, 21, 30, 31, 40, 41, 50, 51]
    assert meta.channel_state(storage, COLLECTION, VCHANNEL).checkpoint_offset == 9


def test_an_import_reads_milvus_storage_on_s3(client, etcd_root, spark, s3):
    """Milvus on MinIO: its files under ``{bucketName}/{rootPath}``, reached as
    ``milvus.storage.root = s3://bucket/root`` with the ``milvus.storage.s3.*`` keys."""
    s3.boto3().create_bucket(Bucket="milvus-bucket")
    milvus, storage, importer, committer = _setup(
        client, etcd_root, spark, StorageLayout("s3://milvus-bucket/files", s3),
        StorageLayout(fresh_root("imported"), s3))
    milvus.segment(1, P1, MilvusSegmentState.FLUSHED, [[1, 2, 3]], dml_ts=BASE_TS + 10, deletes=[(2, BASE_TS + 9)])
    milvus.checkpoint(offset=3, ts=BASE_TS + 20)
    importer.run(VCHANNEL, COLLECTION, _schema(), committer, 7)
    assert _live_ids(storage) == [1, 3]
    assert meta.channel_state(storage, COLLECTION, VCHANNEL).checkpoint_offset == 3


def _run_import(etcd_endpoint: str, meta_root: str, tmp_path, crash: str | None) -> subprocess.CompletedProcess:
    """The import of ``VCHANNEL`` in a process of its own (import_runner.py), 2 segments a job;
    ``crash``: the crash point (``point:n``) that SIGKILLs it."""
    spec = {"etcd": etcd_endpoint, "meta_root": meta_root, "source_root": str(tmp_path / "milvus"),
            "storage_root": str(tmp_path / "delta"), "collection_id": COLLECTION, "vchannel": VCHANNEL,
            "schema": base64.b64encode(_schema().SerializeToString()).decode(), "batch": 2, "node_id": 7}
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_AT, CRASH_DIR)}
    if crash:
        env[CRASH_AT], env[CRASH_DIR] = crash, str(tmp_path)
    return subprocess.run([sys.executable, RUNNER, json.dumps(spec)], env=env, capture_output=True, text=True,
                          timeout=240)


# The third commit of segments (of 3: 2 segments a job), and the deletes' commit before the last one.
CRASH_HITS = {"after_import_commit": 2, "after_import_deletes_commit": 1}


@pytest.mark.parametrize("point", IMPORT_POINTS)
def test_an_import_killed_at_a_commit_point_goes_on_to_every_row_once(point, setup, etcd_server, etcd_root,
                                                                       tmp_path):
    """The import's process is SIGKILLed right after one of its commits, then the import runs
    again (here, nothing of the first in memory): every row of Milvus's segments once, each delete
    up to the checkpoint recorded once, the rows the deletes reach gone from the current state."""
    milvus, storage, importer, committer = setup
    # Five segments of 4 rows in two syncs. Their own deltalogs delete 11 and 22; 40's delete is
    # older than its row (recorded, deletes nothing); an L0 segment deletes 33 everywhere, and 52
    # after the checkpoint: its row is marked, and delta_log records it when the stream brings it.
    deletes = {1: [(11, BASE_TS + 50)], 2: [(22, BASE_TS + 60)], 4: [(40, BASE_TS + 1)]}
    for seg in range(1, 6):
        milvus.segment(seg, P1 if seg % 2 else P2, MilvusSegmentState.FLUSHED,
                       [[seg * 10, seg * 10 + 1], [seg * 10 + 2, seg * 10 + 3]], dml_ts=BASE_TS + 100,
                       deletes=deletes.get(seg, []))
    milvus.segment(6, -1, MilvusSegmentState.FLUSHED, [], dml_ts=BASE_TS + 150, level=SegmentLevel.L0,
                   deletes=[(33, BASE_TS + 150), (52, BASE_TS + 300)])
    milvus.checkpoint(offset=9, ts=BASE_TS + 200)
    imported = [seg * 10 + i for seg in range(1, 6) for i in range(4)]
    recorded, gone = [11, 22, 33, 40], {11, 22, 33, 52}

    crashed = _run_import(etcd_server.endpoint, etcd_root, tmp_path, f"{point}:{CRASH_HITS[point]}")
    assert crashed.returncode == -9, f"not killed at {point}: rc={crashed.returncode}\n{crashed.stderr[-3000:]}"
    at_crash = _live_ids(storage, include_deleted=True)
    deletes_at_crash = read_table(storage, storage.delta_log(COLLECTION), columns=["id"])
    assert meta.channel_state(storage, COLLECTION, VCHANNEL) is None   # killed before the import's last commit
    if point == "after_import_commit":
        assert len(at_crash) == 16 and deletes_at_crash is None
    else:
        assert len(at_crash) == 20 and sorted(deletes_at_crash.column("id").to_pylist()) == recorded

    importer.run(VCHANNEL, COLLECTION, _schema(), committer, 7)
    rows = _live_ids(storage, include_deleted=True)
    live = _live_ids(storage)
    recorded_now = read_table(storage, storage.delta_log(COLLECTION), columns=["id"]).column("id").to_pylist()
    print(f"import killed at {point}:{CRASH_HITS[point]}: {len(imported)} rows in Milvus's segments, "
          f"{len(at_crash)} in Delta at the kill, {len(rows)} after the second run "
          f"({len(rows) - len(set(rows))} duplicated), {len(live)} live; {len(recorded_now)} deletes recorded "
          f"of {len(recorded)}")
    assert collections.Counter(rows) == collections.Counter(imported)
    assert collections.Counter(live) == collections.Counter(pk for pk in imported if pk not in gone)
    assert collections.Counter(recorded_now) == collections.Counter(recorded)
    state = meta.channel_state(storage, COLLECTION, VCHANNEL)
    assert (state.checkpoint_offset, state.node_id) == (9, 7)
    assert sum(s.num_rows for s in state.segments.values()) == len(imported)
    done = import_progress(committer.insert_log(), VCHANNEL)
    assert (done["done"], done["segments_done"], done["rows_done"]) == (True, 5, len(imported))
    assert committer.watermarks(VCHANNEL).delete == 9
