"""DeltaNode mirroring a Milvus 2.3.5 that already has a history the broker no longer holds.

pymilvus writes in rounds with flushes between them (Flushed segments), a manual compaction merges
and rewrites some of them (the sources stay in Milvus's meta, Dropped), rows written after the last
flush stay Growing (Milvus syncs them to binlogs after ``dataNode.segment.syncPeriod``, set short
here) or only in the stream. Then the DML topics lose their early records as retention would
(DeleteRecords up to Milvus's own channel checkpoints): the collections' creation positions are
gone. DeltaNode starts with ``milvus.start = segments``: it imports the segments Milvus persisted
(DataCoord's meta in etcd, the binlogs under Milvus's ``localStorage.path``) and follows the stream
from Milvus's channel checkpoint with Milvus's replay filter. It is SIGKILLed during the import and
started again; more writes follow; its current state must equal Milvus's ``query`` row for row,
with no gap recorded and no ERROR logged. Kafka only: the records are removed with Kafka's
DeleteRecords.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from deltanode.datacoord.milvus_catalog import read_gaps
from deltanode.delta.delta_log import DeltaLog
from deltanode.etcd.client import EtcdClient
from deltanode.milvus_import.import_progress import import_progress
from deltanode.wire.datapb import FieldBinlog, SegmentInfo
from deltanode.wire.milvus_proto import common_pb2, msg_pb2
from deltanode.wire.names import pchannel_of
from deltanode.wire.positions import kafka_offset, now_ts

from ..row_multisets import assert_same_rows
from .milvus_client import MilvusClient
from .milvus_mirror import (
    BINARY,
    BY_KEY,
    EVERY_TYPE,
    SHARDED,
    Mirror,
    RecordingClient,
    binary_row,
    by_key_row,
    deltanode_reader,
    every_type_row,
    inserted,
    mirrored,
    sharded_row,
)
from .milvus_server import MilvusServer
from .support import wait_until

pytestmark = pytest.mark.spark

FIELDS = {"every_type": EVERY_TYPE, "by_key": BY_KEY, "binary": BINARY, "sharded": SHARDED}
ROWS = {"every_type": every_type_row, "by_key": by_key_row, "binary": binary_row, "sharded": sharded_row}
PER_ROUND = 120
SYNC_PERIOD = 5   # s: Milvus's DataNode syncs a growing segment's buffer to binlogs this long after its last sync


class SyncingMilvus(MilvusServer):
    """A Milvus whose DataNode syncs growing segments within seconds (Milvus's default is 600 s), so
    a Growing segment has binlogs of its own before the checkpoint moves past its rows."""

    def config(self) -> dict[str, object]:
        return {**super().config(), "dataNode.segment.syncPeriod": SYNC_PERIOD}


@pytest.fixture(scope="module")
def milvus(etcd_server, broker, tmp_path_factory):
    with SyncingMilvus(etcd_server.endpoint, broker.bootstrap_servers, tmp_path_factory.mktemp("milvus-history"),
                       root_path=f"mh{os.getpid()}") as server:
        yield server


@pytest.fixture(scope="module")
def mc(milvus):
    with MilvusClient(milvus.uri, timeout=120) as client:
        yield client


@pytest.fixture
def mirror(etcd_server, milvus, tmp_path):
    m = Mirror(etcd_server, milvus, tmp_path)
    # Milvus's localStorage.path: the insert_log/, delta_log/ and stats_log/ trees are right under it.
    m.env.update(DELTANODE_MILVUS_START="segments", DELTANODE_MILVUS_STORAGE_ROOT=str(milvus.data_dir / "data"))
    yield m
    m.stop()


def segments(client: EtcdClient, milvus: MilvusServer, collection_id: int) -> dict[int, tuple[str, int]]:
    """segment id -> (its state's name, how many insert binlog keys it has) from DataCoord's meta."""
    root = f"{milvus.meta_root}/datacoord-meta"
    binlogs: dict[int, int] = {}
    for key, value, _ in client.get_prefix(f"{root}/binlog/{collection_id}/"):
        seg = int(key.split("/")[-2])
        binlogs[seg] = binlogs.get(seg, 0) + len(FieldBinlog.FromString(value).binlogs)
    out = {}
    for _key, value, _ in client.get_prefix(f"{root}/s/{collection_id}/"):
        info = SegmentInfo.FromString(value)
        out[info.ID] = (common_pb2.SegmentState.Name(info.state), binlogs.get(info.ID, 0))
    return out


def channel_checkpoints(client: EtcdClient, milvus: MilvusServer, vchannels: list[str]) -> dict[str, tuple[int, int]]:
    """vchannel -> (Kafka offset, timestamp) of Milvus's channel checkpoint, for those that have one."""
    out = {}
    for v in vchannels:
        got = client.get(f"{milvus.meta_root}/datacoord-meta/channel-cp/{v}")
        if got is not None:
            pos = msg_pb2.MsgPosition.FromString(got[0])
            out[v] = (kafka_offset(pos.msgID), pos.timestamp)
    return out


def delete_records_before(bootstrap: str, offsets: dict[str, int]) -> dict[str, int]:
    """Removes each topic's records before its offset (Kafka's DeleteRecords, as retention does);
    returns each topic's low watermark afterwards."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(t, 0, o) for t, o in offsets.items()],
                                   operation_timeout=30, request_timeout=60)
    for f in futures.values():
        f.result()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"low-watermarks-{os.getpid()}"})
    try:
        return {t: consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=30)[0] for t in offsets}
    finally:
        consumer.close()


def by_key(rows: list[dict], fields: list[dict]) -> dict[object, list[dict]]:
    """``rows`` grouped by primary key."""
    pk = next(f["name"] for f in fields if f.get("is_primary_key"))
    out: dict[object, list[dict]] = {}
    for row in rows:
        out.setdefault(row[pk], []).append(row)
    return out


def write_round(mc: MilvusClient, r: int) -> None:
    """Round ``r``: new rows, deletes of this and earlier rounds' rows, upserts of earlier rows."""
    lo, hi = r * PER_ROUND, (r + 1) * PER_ROUND
    for name, row in ROWS.items():
        if name == "sharded":
            mc.insert(name, [row(i) for i in range(lo, hi, 2)])
            mc.insert(name, [row(i) for i in range(lo + 1, hi, 2)], partition="p1")
        else:
            mc.insert(name, [row(i) for i in range(lo, hi)])
    old = range(max(0, lo - PER_ROUND), lo)   # the previous round's rows: in a Flushed segment by now
    mc.delete("every_type", f"id in {[lo + 1, lo + 2, *old[3:9]]}")
    mc.delete("by_key", f"key in {[f'k{i:05d}' for i in (lo + 5, *old[10:14])]}".replace("'", '"'))
    mc.delete("binary", f"id >= {lo + 20} and id < {lo + 30}")
    mc.delete("sharded", f"id in {[lo + 1, *old[:4]]}", partition="p1")   # the even ones are in _default: kept
    mc.upsert("every_type", [every_type_row(i, version=r + 1) for i in (*range(lo + 40, lo + 50), *old[20:30])])
    mc.upsert("by_key", [by_key_row(i, version=r + 1) for i in range(lo + 50, lo + 60)])
    mc.upsert("binary", [binary_row(i, version=r + 1) for i in range(lo, hi, 7)])
    mc.upsert("sharded", [sharded_row(i, version=r + 1) for i in range(lo + 60, lo + 70, 2)])


def test_a_milvus_with_a_history_is_mirrored_from_its_segments_through_a_kill(mc, mirror, milvus, broker):
    mc = RecordingClient(mc)   # the rows sent: each must be in its insert table once
    made = {
        "every_type": mc.create_collection("every_type", EVERY_TYPE, enable_dynamic_field=True),
        "by_key": mc.create_collection("by_key", BY_KEY, num_partitions=4),
        "binary": mc.create_collection("binary", BINARY),
        "sharded": mc.create_collection("sharded", SHARDED, shards=2),
    }
    mc.create_partition("sharded", "p1")
    vchannels = [v for d in made.values() for v in d["vchannels"]]

    # History: three flushed rounds (Flushed segments with deltalogs), then a compaction of each.
    for r in range(3):
        write_round(mc, r)
        for name in made:
            mc.flush(name)
    compactions = [mc.compact(name)["compaction_id"] for name in made]
    for cid in compactions:
        mc.wait_compaction(cid, timeout=180)
    # After the last flush: rows of Growing segments (synced to binlogs after SYNC_PERIOD), deletes of
    # flushed rows and upserts, all only in the stream until then.
    write_round(mc, 3)
    last_write = now_ts()

    with EtcdClient(milvus.etcd_endpoint) as client:
        # Milvus moves a channel checkpoint about once a minute, never past a Growing segment's
        # unsynced rows: wait for every vchannel's to pass the last write, then see what Milvus made.
        wait_until(lambda: all(ts >= last_write for _, ts in channel_checkpoints(client, milvus, vchannels).values())
                   and len(channel_checkpoints(client, milvus, vchannels)) == len(vchannels), 150,
                   "Milvus's channel checkpoints to pass the last write")
        states = {name: segments(client, milvus, d["collection_id"]) for name, d in made.items()}
        cps = channel_checkpoints(client, milvus, vchannels)
    seen = {state for segs in states.values() for state, _ in segs.values()}
    assert {"Flushed", "Dropped"} <= seen, states   # the compaction's sources stay, Dropped
    growing_synced = [(n, s) for n, segs in states.items() for s, (state, logs) in segs.items()
                      if state == "Growing" and logs]
    print(f"\nMilvus's segments: { {n: sorted(set(v for v, _ in s.values())) for n, s in states.items()} }; "
          f"Growing with binlogs: {len(growing_synced)}")

    # Retention: every record before Milvus's checkpoints is gone, the CreateCollections with them.
    upto: dict[str, int] = {}
    for v, (offset, _) in cps.items():
        upto[pchannel_of(v)] = min(offset, upto.get(pchannel_of(v), offset))
    low = delete_records_before(broker.bootstrap_servers, upto)
    assert low == upto and all(o > 0 for o in low.values()), (low, upto)
    for name, d in made.items():
        assert all(cps[v][1] > d["created_timestamp"] for v in d["vchannels"]), name

    # What DeltaNode finds when it starts: the rows live then must be in the insert tables, each once;
    # a row deleted or replaced by then may be gone with a segment Milvus compacted, never twice.
    live_at_start = {name: by_key(mc.query(name, output_fields=["*"]), fields) for name, fields in FIELDS.items()}
    sent_before = {name: len(mc.sent(name)) for name in made}

    # DeltaNode starts from Milvus's segments; SIGKILLed once its first import commit is in a table.
    mirror.start()

    def imported() -> dict[str, dict]:
        found = {}
        for d in made.values():
            log = DeltaLog.open(mirror.storage.insert_log(d["collection_id"]), mirror.storage.options)
            for v in d["vchannels"] if log is not None else []:
                if (doc := import_progress(log, v)) is not None:
                    found[v] = doc
        return found

    def first_import_commit() -> dict[str, dict]:
        if mirror.proc.poll() is not None:
            raise AssertionError(f"DeltaNode exited ({mirror.proc.returncode}):\n{mirror.log.read_text()[-4000:]}")
        return imported()

    at_kill = wait_until(first_import_commit, 240, "DeltaNode's first import commit", interval=0.2)
    mirror.stop(signal.SIGKILL)
    print(f"SIGKILL with imports committed on {len(at_kill)} of {len(vchannels)} vchannels, "
          f"{sum(bool(doc.get('done')) for doc in at_kill.values())} of them done")
    time.sleep(1)
    mirror.start()

    # While running again: more inserts, deletes of imported rows and of stream rows, upserts of both.
    hi = 4 * PER_ROUND
    mc.insert("every_type", [every_type_row(i) for i in range(hi, hi + 50)])
    mc.delete("every_type", f"id in {[0, 4, 130, hi - 3, hi + 1]}")
    mc.upsert("every_type", [every_type_row(i, version=9) for i in (10, 11, 250, hi - 10, hi + 2)])
    mc.delete("by_key", 'key in ["k00000", "k00300", "k00470"]')
    mc.upsert("by_key", [by_key_row(i, version=9) for i in range(0, hi, 37)])
    mc.insert("binary", [binary_row(i) for i in range(hi, hi + 30)])
    mc.delete("binary", "id < 15")
    # Even keys only: they live in _default, where an upsert's delete reaches (an odd key's row in p1
    # would stay beside the upserted one, and Milvus's query returns either).
    mc.upsert("sharded", [sharded_row(i, version=9) for i in range(0, hi, 22)])
    mc.delete("sharded", f"id in {[2, 4, 300, hi - 2]}")
    mirror.wait_caught_up(made, now_ts(), timeout=240)

    for name, fields in FIELDS.items():
        expected = mc.query(name, output_fields=["*"])
        pk = next(f["name"] for f in fields if f.get("is_primary_key"))
        cid = made[name]["collection_id"]
        for reader in (None, deltanode_reader(mirror.storage)):   # the deletes' rules; the deletion vectors
            assert_same_rows(expected, mirrored(mirror.storage, cid, fields, reader), key=pk,
                             what=f"{name}'s current rows")
        assert len(expected) == mc.count(name) > 0
        before, live = by_key(mc.sent(name)[:sent_before[name]], fields), live_at_start[name]
        stored = inserted(mirror.storage, cid, fields)
        assert_same_rows(mc.sent(name), stored, key=pk, what=f"{name}'s insert table",
                         may_lack=lambda row, before=before, live=live, pk=pk:
                         row in before.get(row[pk], []) and row not in live.get(row[pk], []))
        print(f"{name}: {len(mc.sent(name))} rows sent, {sum(map(len, live.values()))} live at DeltaNode's start, "
              f"{len(stored)} in the insert table, {len(expected)} current")
    with EtcdClient(mirror.env["DELTANODE_ETCD_ENDPOINTS"]) as client:
        assert read_gaps(client, mirror.env["DELTANODE_ETCD_ROOT"]) == {}
    done = imported()
    assert set(done) == set(vchannels) and all(doc.get("done") for doc in done.values()), done
    print("imported: " + "; ".join(
        f"{name} {sum(done[v]['segments_done'] for v in d['vchannels'])} segment(s), "
        f"{sum(done[v]['rows_done'] for v in d['vchannels'])} row(s) "
        f"({sum(done[v]['deleted_done'] for v in d['vchannels'])} deleted), Milvus count(*) {mc.count(name)}"
        for name, d in made.items()))
    listed = {c["name"]: c for c in mirror.admin("show-collections")}
    for name in made:
        assert listed[name]["gaps"] == [] and listed[name]["imported_from_milvus"], listed[name]
    assert not mirror.log_errors()
