"""A Milvus 2.6 stream, written by Milvus's own Go code (pkg/v2 v2.6.6 through tests/milvus_wal), read
by the pipeline into Delta on Apache Kafka and Apache Pulsar.

A two-shard collection of DeltaNode's own catalog; one streaming node's history on its two
pchannels: inserts placed in segments by their ``_h`` header, deletes, segment creation, a Flush and a
ManualFlush, a committed and a rolled-back transaction, an encrypted insert, a persisted TimeTick
after each burst of appends (as a 2.6 node writes one) and none while a pchannel is idle. The
pipeline is stopped between transactions, and again while one is open on the broker (its BeginTxn
and members delivered by a TimeTick, its commit not written yet); its commit is written while no
pipeline runs. The rows each table must hold are worked out from the script alone (every
row at its message's time tick, a transaction's at its commit's, a rolled-back one's nowhere) and
compared as multisets of (pk, ts): each produced row exactly once.
"""

from __future__ import annotations

import itertools
import json
import select
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf import json_format

from deltanode.config.sections.pipeline import Limits, PipelineSettings, SyncSettings, TriggerSettings
from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table, read_table
from deltanode.mq.pulsar_positions import position as pulsar_position
from deltanode.pipeline.pipeline import Pipeline
from deltanode.state import meta
from deltanode.state.channel_state import SegmentState
from deltanode.state.current_state import current_rows
from deltanode.wire.datapb import VchannelInfo
from deltanode.wire.milvus_proto import common_pb2, msg_pb2, schema_pb2
from deltanode.wire.names import pchannel_name, vchannel_name
from deltanode.wire.schema import schema_from_json

from .milvus26_wal import append_step, open_step, tso, writer_binary
from .support import ALL_BROKERS, high_watermark, wait_until

pytestmark = pytest.mark.spark
SCHEMA = {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                     {"name": "vec", "data_type": "FloatVector", "dim": 2}]}
KEEPALIVE_MS = 600_000   # no transaction of the script expires (a unit test covers expiry)
STEP_TIMEOUT = 90.0
_ids = itertools.count(int(time.time()) % 100000 * 100 + 61)


class Writer:
    """One ``milvus-wal-writer`` process driven step by step through a pipe: one streaming node that
    keeps its WALs open for the whole test, as a 2.6 node keeps its pchannels."""

    def __init__(self) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen([str(writer_binary())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, text=True, bufsize=1)
        self.steps = 0

    def __call__(self, step: dict) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(step) + "\n")
        self._proc.stdin.flush()
        self.steps += 1
        ready, _, _ = select.select([self._proc.stdout], [], [], STEP_TIMEOUT)
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            self._stderr.seek(0)
            raise AssertionError(f"milvus-wal-writer gave no result for step {self.steps} ({step}): "
                                 f"{self._stderr.read()[-4000:]}")
        out = json.loads(line)
        assert out["step"] == self.steps, out
        return out

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()


@dataclass
class Expected:
    """What the tables must hold, from the script alone: (pk, ts) of every insert row and delete."""

    inserts: Counter = field(default_factory=Counter)
    deletes: Counter = field(default_factory=Counter)
    segments: Counter = field(default_factory=Counter)   # rows per (vchannel, segment)
    open_txns: dict[int, list[tuple[str, str, list[int], int]]] = field(default_factory=dict)

    def apply(self, kind: str, vchannel: str, pks: list[int], segment: int, ts: int) -> None:
        if kind == "Insert":
            self.inserts.update((pk, ts) for pk in pks)
            self.segments[(vchannel, segment)] += len(pks)
        else:
            self.deletes.update((pk, ts) for pk in pks)

    def current(self) -> Counter:
        """A query's answer (docs/milvus-facts.md §8): a delete at T removes its key's rows older than
        T; of the rows left, each key's newest."""
        standing: dict[int, int] = {}
        for pk, ts in self.inserts:
            if any(dpk == pk and ts < dts for dpk, dts in self.deletes):
                continue
            standing[pk] = max(ts, standing.get(pk, ts))
        return Counter(standing.items())


class Stream:
    """The script: each step written by Milvus's builders and WALs, and its effect on ``expected``."""

    def __init__(self, writer: Writer, kind: str, address: str, cid: int) -> None:
        self.write, self.cid, self.pid = writer, cid, cid + 1
        self.p = [pchannel_name(f"m26s{cid}-rootcoord-dml", i) for i in range(2)]
        self.v = [vchannel_name(p, cid, i) for i, p in enumerate(self.p)]
        self.expected = Expected()
        self.encrypted: list[Any] = []   # (vchannel, position) of each encrypted insert
        self.kind = kind
        self._tt = 0
        self._lc: list[str] = []
        for p in self.p:
            writer(open_step(kind, address, p, term=1))

    def tt(self) -> int:
        """The next time tick: the wall clock's TSO, always increasing (one allocator for both WALs)."""
        self._tt = max(self._tt + 1, tso(int(time.time() * 1000)))
        return self._tt

    def append(self, i: int, msg_type: str, *, vchannel: bool = True, header: dict | None = None,
               body: Any = None, txn: int | None = None, cipher: bool = False, broadcast: bool = False,
               tt: int | None = None) -> int:
        """Append to pchannel ``i`` at time tick ``tt`` (default the next); returns the message's
        position as DeltaNode numbers it."""
        lc = self._lc[i] if len(self._lc) > i else "self"
        payload = json_format.MessageToDict(body) if body is not None else {}
        out = self.write(append_step(
            self.p[i], msg_type, tt or self.tt(), vchannel=self.v[i] if vchannel else None, header=header, body=payload,
            last_confirmed=lc, txn=(txn, KEEPALIVE_MS) if txn is not None else None, cipher=cipher,
            broadcast=(self.v, 7) if broadcast else None))
        if lc == "self":
            self._lc.append(f"step:{out['step']}")
        offset = out["offset"]
        return offset if self.kind == "kafka" else pulsar_position(*map(int, offset.split(":")))

    def tick(self, i: int) -> int:
        tt = self.tt()
        body = msg_pb2.TimeTickMsg(base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.TimeTick, timestamp=tt))
        return self.append(i, "TimeTick", vchannel=False, body=body, tt=tt)

    def create_collection(self) -> None:
        schema = schema_from_json(SCHEMA, f"coll{self.cid}")
        for i in range(2):   # broadcast: one copy per vchannel, `_bh` naming both
            body = msg_pb2.CreateCollectionRequest(
                base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.CreateCollection), collectionName=f"coll{self.cid}",
                collectionID=self.cid, partitionIDs=[self.pid], partitionNames=["_default"],
                virtualChannelNames=self.v, physicalChannelNames=self.p, schema=schema.SerializeToString())
            self.append(i, "CreateCollection", body=body, broadcast=True,
                        header={"collection_id": str(self.cid), "partition_ids": [str(self.pid)], "db_id": "1"})

    def create_segment(self, i: int, segment: int) -> None:
        self.append(i, "CreateSegment", header={"collection_id": str(self.cid), "partition_id": str(self.pid),
                                                "segment_id": str(segment), "storage_version": "2", "level": "L1"})

    def insert(self, i: int, pks: list[int], segment: int, *, txn: int | None = None, cipher: bool = False) -> int:
        """An insert as a 2.6 proxy sends it: no timestamps, no segment; `_h` places it."""
        body = msg_pb2.InsertRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Insert), shardName=self.v[i],
            collection_name=f"coll{self.cid}", collectionID=self.cid, partitionID=self.pid, rowIDs=pks,
            num_rows=len(pks), version=msg_pb2.InsertDataVersion.ColumnBased, fields_data=[
                schema_pb2.FieldData(type=schema_pb2.DataType.Int64, field_name="pk", field_id=100,
                                     scalars=schema_pb2.ScalarField(long_data=schema_pb2.LongArray(data=pks))),
                schema_pb2.FieldData(type=schema_pb2.DataType.FloatVector, field_name="vec", field_id=101,
                                     vectors=schema_pb2.VectorField(dim=2, float_vector=schema_pb2.FloatArray(
                                         data=[float(x) for pk in pks for x in (pk, -pk)])))])
        header = {"collection_id": str(self.cid), "partitions": [
            {"partition_id": str(self.pid), "rows": str(len(pks)), "binary_size": "0",
             "segment_assignment": {"segment_id": str(segment)}}]}
        at = self.append(i, "Insert", header=header, body=body, txn=txn, cipher=cipher)
        self._effect("Insert", i, pks, segment, txn, cipher, at)
        return at

    def delete(self, i: int, pks: list[int], *, txn: int | None = None, with_timestamps: bool = True) -> int:
        body = msg_pb2.DeleteRequest(
            base=common_pb2.MsgBase(msg_type=common_pb2.MsgType.Delete), shardName=self.v[i],
            collection_name=f"coll{self.cid}", collectionID=self.cid, partitionID=self.pid, num_rows=len(pks),
            primary_keys=schema_pb2.IDs(int_id=schema_pb2.LongArray(data=pks)),
            timestamps=[1] * len(pks) if with_timestamps else [])
        at = self.append(i, "Delete", header={"collection_id": str(self.cid), "rows": str(len(pks))}, body=body,
                         txn=txn)
        self._effect("Delete", i, pks, 0, txn, False, at)
        return at

    def _effect(self, kind: str, i: int, pks: list[int], segment: int, txn: int | None, cipher: bool, at: int) -> None:
        if cipher:
            self.encrypted.append((self.v[i], at))
        elif txn is not None:
            self.expected.open_txns[txn].append((kind, self.v[i], pks, segment))
        else:
            self.expected.apply(kind, self.v[i], pks, segment, self._tt)

    def begin(self, i: int, txn: int) -> int:
        self.expected.open_txns[txn] = []
        return self.append(i, "BeginTxn", header={"keepalive_milliseconds": str(KEEPALIVE_MS)}, txn=txn)

    def commit(self, i: int, txn: int) -> None:
        self.append(i, "CommitTxn", txn=txn)
        for kind, vchannel, pks, segment in self.expected.open_txns.pop(txn):   # at the commit's time tick
            self.expected.apply(kind, vchannel, pks, segment, self._tt)

    def rollback(self, i: int, txn: int) -> None:
        self.append(i, "RollbackTxn", txn=txn)
        self.expected.open_txns.pop(txn)

    def flush(self, i: int, segment: int) -> None:
        self.append(i, "Flush", header={"collection_id": str(self.cid), "partition_id": str(self.pid),
                                        "segment_id": str(segment)})

    def manual_flush(self, i: int, segments: list[int]) -> None:
        flush_ts = self.tt()   # the message's own time tick
        self.append(i, "ManualFlush", header={"collection_id": str(self.cid), "flush_ts": str(flush_ts),
                                              "segment_ids": [str(s) for s in segments]}, tt=flush_ts)


def committed(storage: StorageLayout, cid: int, vchannel: str) -> int:
    """The vchannel's checkpoint: the next position its insert_log ``txn`` says to read."""
    table = open_table(storage.insert_log(cid))
    return (table.transaction_version(vchannel) or 0) if table else 0


@ALL_BROKERS
def test_a_milvus26_stream_lands_row_for_row_across_restarts_between_and_inside_transactions(spark, mq, tmp_path):
    cid = next(_ids)
    storage = StorageLayout(str(tmp_path / "delta"))
    schema = schema_from_json(SCHEMA, f"coll{cid}")
    seg = {name: cid + 100 + k for k, name in enumerate(("S0", "S1", "S2", "S3"))}
    writer = Writer()
    started = time.monotonic()
    try:
        s = Stream(writer, mq.kind, mq.address, cid)
        mq.create_topics(s.p)
        v0, v1 = s.v

        def heads() -> dict[str, int]:
            return {v: high_watermark(mq, p) for v, p in zip(s.v, s.p)}

        def run(targets, what: str, then=None, linger: float = 0.0) -> None:
            """A pipeline from Delta's state until each vchannel's checkpoint reaches its position in
            ``targets()`` (and ``linger`` seconds more); ``then()`` first, while it runs."""
            pipe = Pipeline(spark.sparkContext, storage, mq, PipelineSettings(
                limits=Limits(max_messages=12), trigger=TriggerSettings(interval=0.2),
                sync=SyncSettings(checkpoint_interval=1.0))).start()
            try:
                for v in s.v:
                    pipe.add(VchannelInfo(collectionID=cid, channelName=v), schema)
                if then is not None:
                    then()
                want = targets()
                wait_until(lambda: all(committed(storage, cid, v) >= at for v, at in want.items()), 60, what, 0.3)
                time.sleep(linger)
            finally:
                pipe.stop()

        # -- before the first run: the collection's first messages, each pchannel's burst closed by a TimeTick.
        for i in range(2):
            s.tick(i)
        s.create_collection()
        s.create_segment(0, seg["S0"])
        s.insert(0, list(range(1, 51)), seg["S0"])
        s.insert(0, list(range(51, 101)), seg["S0"])
        s.delete(0, [3, 4])
        s.insert(0, [7001, 7002], seg["S0"], cipher=True)   # quarantined: no key
        s.flush(0, seg["S0"])
        s.create_segment(0, seg["S2"])
        s.insert(0, list(range(101, 151)), seg["S2"])
        s.tick(0)
        s.create_segment(1, seg["S1"])
        s.insert(1, list(range(1001, 1041)), seg["S1"])
        s.begin(1, 4242)
        s.insert(1, list(range(1041, 1061)), seg["S1"], txn=4242)
        s.delete(1, [1001], txn=4242, with_timestamps=False)
        s.commit(1, 4242)
        s.begin(1, 4243)
        s.insert(1, [1061, 1062], seg["S1"], txn=4243)
        s.delete(1, [1002], txn=4243)
        s.rollback(1, 4243)
        s.insert(1, list(range(1063, 1071)), seg["S1"])
        s.tick(1)
        s.manual_flush(1, [seg["S1"]])
        s.tick(1)
        # Ranges of 12 messages, split for the cycle's two tasks: transactions straddle their cuts.
        run(heads, "both vchannels committed up to their pchannels' heads")

        # -- a second run, stopped while a transaction is open on the broker.
        opened: dict[str, int] = {}

        def write_while_running() -> None:
            s.create_segment(1, seg["S3"])
            opened["begin"] = s.begin(1, 4244)
            s.insert(1, list(range(2001, 2011)), seg["S3"], txn=4244)
            s.delete(1, [1003], txn=4244)
            s.tick(1)
            s.insert(0, list(range(151, 161)), seg["S2"])
            s.delete(0, [101])
            s.tick(0)

        def up_to_the_open_transaction() -> dict[str, int]:
            return {v0: high_watermark(mq, s.p[0]), v1: opened["begin"]}

        run(up_to_the_open_transaction, "v1 committed up to the open transaction's BeginTxn", write_while_running,
            linger=2.0)   # cycles that read the open transaction and commit nothing of it
        assert committed(storage, cid, v1) == opened["begin"], "a checkpoint went past an open transaction"

        # -- its commit, written while no pipeline runs; a third run.
        s.insert(1, list(range(2011, 2021)), seg["S3"], txn=4244)
        s.commit(1, 4244)
        s.tick(1)
        s.insert(0, list(range(161, 171)), seg["S2"])
        s.tick(0)
        run(heads, "both vchannels committed up to their pchannels' heads")
    finally:
        writer.close()
    elapsed = time.monotonic() - started

    expected = s.expected
    inserts = read_table(storage, storage.insert_log(cid), ["pk", "_ts"], include_deleted=True)
    deletes = read_table(storage, storage.delta_log(cid), ["pk", "_ts"])
    current = current_rows(storage, cid, "pk")
    got_inserts = Counter(zip(inserts.column("pk").to_pylist(), inserts.column("_ts").to_pylist()))
    got_deletes = Counter(zip(deletes.column("pk").to_pylist(), deletes.column("_ts").to_pylist()))
    got_current = Counter(zip(current.column("pk").to_pylist(), current.column("_ts").to_pylist()))
    quarantine = read_table(storage, storage.quarantine(), ["vchannel", "offset", "msg_type", "reason"])
    ours = [q for q in (quarantine.to_pylist() if quarantine is not None else []) if q["vchannel"] in s.v]
    print(f"{mq.kind}: {writer.steps} steps written; inserts {sum(expected.inserts.values())} expected, "
          f"{sum(got_inserts.values())} found; deletes {sum(expected.deletes.values())} expected, "
          f"{sum(got_deletes.values())} found; current {sum(expected.current().values())} expected, "
          f"{sum(got_current.values())} found; quarantined {len(ours)}; {elapsed:.1f} s")
    assert got_inserts == expected.inserts
    assert got_deletes == expected.deletes
    assert got_current == expected.current()
    assert [(q["vchannel"], q["offset"], q["msg_type"], q["reason"]) for q in ours] == [
        (vch, at, common_pb2.MsgType.Insert, "encrypted by Milvus's cipher (zone 1): DeltaNode has no key")
        for vch, at in s.encrypted]
    # Segments: S0 and S1 flushed by the stream's Flush and ManualFlush, with their rows; S2, S3 growing.
    states = {v: meta.channel_state(storage, cid, v) for v in s.v}
    segments = {(v, sid): (m.state, m.seal_reason, m.num_rows) for v, st in states.items() if st is not None
                for sid, m in st.segments.items()}
    assert segments == {
        (v0, seg["S0"]): (SegmentState.FLUSHED, "flush message", expected.segments[(v0, seg["S0"])]),
        (v0, seg["S2"]): (SegmentState.GROWING, "", expected.segments[(v0, seg["S2"])]),
        (v1, seg["S1"]): (SegmentState.FLUSHED, "manual flush", expected.segments[(v1, seg["S1"])]),
        (v1, seg["S3"]): (SegmentState.GROWING, "", expected.segments[(v1, seg["S3"])]),
    }
