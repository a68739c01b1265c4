"""Power cuts: DeltaNode's tables on a FUSE filesystem that drops every write not made durable by
fsync (``powercut_fs.py``), the machine "cut" mid-stream, then restarted: every table opens in
every reader, no commit names a missing or torn file, every produced row is there exactly once.

A killed process keeps the page cache: only a cut shows what fsync is for. The commit-level test
also runs with nothing fsynced and with only the commits fsynced, and asserts that the cut breaks
those: the filesystem does drop what it should. The pipeline test runs that way by hand with
``POWERCUT_FSYNC=false`` (docs/durability.md says what it showed).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from deltanode.delta.layout import StorageLayout
from deltanode.delta.object_store import StoreOptions
from deltanode.delta.tables import open_table, read_table
from deltanode.executor import binlog_writer
from deltanode.executor.binlog_writer import BinlogWriter
from deltanode.state.channel_state import ChannelState
from deltanode.state.commit import CollectionCommitter, QuarantineLog, VchannelSync, Watermarks
from deltanode.wire.schema import CollectionLayout, schema_from_json

from ..delta_readers import by_deltalake_sql, by_duckdb, by_polars, by_spark
from .powercut_fs import PowerCutMount
from .processes import descendants, zombie
from .support import settled_watermark, wait_until

RUNNER = os.path.join(os.path.dirname(__file__), "pipeline_runner.py")
# The pipeline's cut: each directory, and each file's data, changed since its last fsync was
# written back by the kernel with these chances (names sooner than data, as ext4 does): a random
# mix of old and new, as a machine without fsync keeps.
NAMES, DATA, SEED = 0.8, 0.3, 1
LAYOUT = CollectionLayout.from_proto(schema_from_json(
    {"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True}]}, "c"))


@pytest.fixture
def disk(tmp_path):
    """The power-cut filesystem, mounted at ``tmp_path/mnt`` over ``tmp_path/disk``."""
    mount = PowerCutMount(tmp_path / "disk", tmp_path / "mnt", tmp_path / "powercut_fs.log")
    mount.start()
    try:
        yield mount
    finally:
        mount.stop()


def unreadable_adds(storage: StorageLayout, uri: str) -> list[str]:
    """The problems of the files the table's live adds name: missing, or not the parquet file of
    ``numRecords`` rows its add says (torn)."""
    table = open_table(uri, storage.delta_options(uri))
    if table is None:
        return []
    problems = []
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    for add in adds:
        path = os.path.join(uri, add["path"])
        try:
            rows = pq.read_metadata(path).num_rows
        except FileNotFoundError:
            problems.append(f"missing {add['path']}")
            continue
        except (OSError, pa.ArrowInvalid) as e:
            problems.append(f"torn {add['path']}: {e}")
            continue
        if rows != add["num_records"]:
            problems.append(f"{add['path']}: {rows} rows, its add says {add['num_records']}")
    return problems


def readable_everywhere(storage: StorageLayout, uri: str, spark=None) -> dict[str, int]:
    """Rows of the table as each reader sees it (deletion vectors applied); each must open it."""
    readers = {"deltanode": lambda: len(read_table(storage, uri, ["pk"])),
               "delta-rs": lambda: len(by_deltalake_sql(uri, ["pk"])),
               "duckdb": lambda: len(by_duckdb(uri, ["pk"])), "polars": lambda: len(by_polars(uri, ["pk"]))}
    if spark is not None:
        readers["spark"] = lambda: len(by_spark(spark, uri, ["pk"]))
    return {name: read() for name, read in readers.items()}


# --- the commit protocol alone (no Spark, no broker) -------------------------------------------

def _write_and_commit(storage: StorageLayout, committer: CollectionCommitter, marks: Watermarks, batch: int,
                      pks: list[int], deletes: list[int]) -> Watermarks:
    """One task's binlog files for the vchannel ``v`` and their commit; its new watermarks."""
    writer = BinlogWriter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema())
    n = len(pks)
    columns = [pa.array(pks, pa.int64()), pa.array(range(100, 100 + n), pa.int64()), pa.array(pks, pa.int64())]
    writer.add_insert(5 + batch % 3, 1, columns, n, 24 * n, batch, 100, 99 + n)
    if deletes:
        writer.add_delete(1, pa.array(deletes, pa.int64()), pa.array([10**6] * len(deletes), pa.int64()))
    state = ChannelState("v", 1, "p", checkpoint_offset=batch + 1)
    result = committer.commit([VchannelSync(state, marks, tuple(writer.close()), frozenset())])
    assert set(result.committed) == {"v"}, result
    return result.committed["v"]


@pytest.mark.parametrize("synced", ["everything", "nothing", "commits only"])
def test_committed_rows_survive_a_power_cut_only_when_every_file_is_fsynced(synced, disk, monkeypatch):
    """30 commits of 100 rows (and a delete in every third), then the power cut. fsynced: every
    committed row and delete is there once and every reader opens both tables. Not: the cut takes committed
    rows (nothing fsynced: the tables' directories are gone), or leaves commits naming binlog files
    that are gone (only the commit files fsynced)."""
    if synced == "commits only":
        monkeypatch.setattr(binlog_writer, "syncs", lambda storage: False)
    storage = StorageLayout(str(disk.mountpoint / "delta"), StoreOptions(fsync=synced != "nothing"))
    committer = CollectionCommitter(storage, 1, LAYOUT.insert_schema(), LAYOUT.delete_schema(), QuarantineLog(storage))
    produced, deleted = [], []
    marks = Watermarks()
    for batch in range(30):
        pks = list(range(batch * 100, batch * 100 + 100))
        dels = [pks[0]] if batch % 3 == 0 else []
        marks = _write_and_commit(storage, committer, marks, batch, pks, dels)
        produced += pks
        deleted += dels
    report = disk.cut()
    disk.start()
    insert_uri, delete_uri = storage.insert_log(1), storage.delta_log(1)
    if synced == "everything":
        assert unreadable_adds(storage, insert_uri) == [] and unreadable_adds(storage, delete_uri) == []
        found = collections.Counter(read_table(storage, insert_uri, ["pk"], include_deleted=True).column("pk")
                                    .to_pylist())
        assert found == collections.Counter(produced), "rows lost or doubled by the cut"
        assert collections.Counter(read_table(storage, delete_uri, ["pk"]).column("pk").to_pylist()) == \
            collections.Counter(deleted)
        for uri in (insert_uri, delete_uri):
            counts = readable_everywhere(storage, uri)
            assert len(set(counts.values())) == 1, counts
        print(f"fsynced: {len(produced)} rows committed in 30 commits, {sum(found.values())} after the cut, "
              f"0 doubled; the cut dropped {report['names_dropped']} unsynced names")
    elif synced == "nothing":
        assert open_table(insert_uri) is None, "an unsynced table survived the cut: the filesystem kept too much"
        print(f"nothing fsynced: the cut dropped {report['names_dropped']} names; the tables are gone "
              f"with {len(produced)} committed rows")
    else:
        problems = unreadable_adds(storage, insert_uri)
        assert problems, "commits survived with every binlog they name: the filesystem kept unsynced files"
        print(f"commits only: the tables open at version {DeltaTable(insert_uri).version()}, and "
              f"{len(problems)} of their adds name lost files, e.g. {problems[0]}")


# --- the DataNode's pipeline, killed and cut mid-stream -------------------------------------

def _runner(coll, targets: dict[str, int], fsync: bool, max_messages: int = 2) -> list[str]:
    mq = coll.producer.broker
    args = {"mq": mq.kind, "address": mq.address, "storage_root": coll.storage.root,
            "collections": [{"collection_id": coll.collection_id, "name": coll.name, "schema": coll.schema_doc,
                             "vchannels": coll.vchannels}],
            "targets": targets, "max_messages": max_messages, "timeout": 200, "fsync": fsync,
            "checkpoint_interval": 10}
    return [sys.executable, RUNNER, json.dumps(args)]


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the runner's group (driver, JVM, Python workers): every process gone, its files closed."""
    tree = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_until(lambda: not [p for p in tree if os.path.exists(f"/proc/{p}") and not zombie(p)], 60,
               "every process of the runner to exit")


@pytest.mark.spark
def test_a_power_cut_mid_stream_then_a_restart_keeps_every_row_exactly_once(disk, make_collection, spark):
    """One vchannel of inserts (and deletes, marked as deletion vectors) on Apache Kafka; the node
    commits onto the power-cut filesystem, everything written so far is synced (as the kernel's
    writeback would), more commits land, the node is SIGKILLed mid-stream and the power cut (what
    was not fsynced since is lost but what the kernel happened to write back, ``NAMES``, ``DATA``);
    traffic goes on while it is down; restarted on the same root it catches up. Then every table opens in
    delta-rs, DeltaNode's reader, DuckDB, Polars and Spark, no add names a missing or torn file,
    and every produced row is there exactly once (a multiset), deletes applied."""
    fsync = os.environ.get("POWERCUT_FSYNC", "true") != "false"
    coll = dataclasses.replace(make_collection(), storage=StorageLayout(str(disk.mountpoint / "delta")))
    p, v = coll.pchannels[0], coll.vchannels[0]
    produced, deleted = [], []

    def produce(batches: int) -> None:
        for i in range(batches):
            first = coll.producer.insert(p, v, segment_id=1 + i % 3, partition_id=1, rows=200)
            produced.extend(range(first, first + 200))
            if i % 4 == 3:
                coll.producer.delete(p, v, 1, [first, first + 1])
                deleted.extend([first, first + 1])
        coll.producer.flush_producer()

    def committed() -> int:
        return len(coll.insert_rows())

    t0 = time.monotonic()
    produce(30)
    logs = disk.log.parent   # each run's log stays beside the disk for a failure to be read
    node = subprocess.Popen(_runner(coll, {v: 1 << 40}, fsync), stdout=subprocess.DEVNULL,
                            stderr=open(logs / "node.log", "w"), start_new_session=False)
    try:
        wait_until(lambda: committed() >= 1000, 150, "part of the backlog to commit")
        t_commit = time.monotonic()
        disk.sync()   # the kernel wrote everything back by now: what the cut takes is what follows
        at_sync = committed()
        # The node may have caught up the whole backlog before the sync: traffic after it makes the
        # commits the cut is to find unsynced.
        produce(5)
        wait_until(lambda: committed() >= at_sync + 600, 60, "commits after the sync")
        produce(5)
        time.sleep(1.0)   # commits and checkpoints in flight
        _kill_tree(node)
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
    at_kill = committed()
    report = disk.cut(names=NAMES, data=DATA, seed=SEED)
    disk.start()
    insert_uri, delete_uri = coll.storage.insert_log(coll.collection_id), coll.storage.delta_log(coll.collection_id)
    problems = unreadable_adds(coll.storage, insert_uri) + unreadable_adds(coll.storage, delete_uri)
    assert not problems, f"after the cut, {len(problems)} adds name lost or torn files, e.g. {problems[:3]}"
    after_cut = committed()
    produce(5)   # traffic while the node is down
    target = settled_watermark(coll, p)
    t_restart = time.monotonic()
    with open(logs / "restart.log", "w") as restart_log:
        restarted = subprocess.run(_runner(coll, {v: target}, fsync, max_messages=20), stdout=restart_log,
                                   stderr=subprocess.STDOUT, timeout=240)
    assert restarted.returncode == 0, (logs / "restart.log").read_text()[-3000:]
    t_done = time.monotonic()

    problems = unreadable_adds(coll.storage, insert_uri) + unreadable_adds(coll.storage, delete_uri)
    assert not problems, f"{len(problems)} adds name lost or torn files, e.g. {problems[:3]}"
    rows = collections.Counter(r["pk"] for r in coll.insert_rows())
    expected = collections.Counter(produced)
    assert rows == expected, f"{sum((expected - rows).values())} rows lost, {sum((rows - expected).values())} extra"
    current = collections.Counter(read_table(coll.storage, insert_uri, ["pk"]).column("pk").to_pylist())
    assert current == expected - collections.Counter(deleted), "the current state is not the rows less the deletes"
    deletes = collections.Counter(read_table(coll.storage, delete_uri, ["pk"]).column("pk").to_pylist())
    assert deletes == collections.Counter(deleted)
    counts = readable_everywhere(coll.storage, insert_uri, spark)
    assert set(counts.values()) == {len(current)}, counts
    checkpoints = sorted(n for n in os.listdir(os.path.join(insert_uri, "_delta_log")) if "checkpoint" in n)
    print(f"power cut: produced {len(produced)} rows ({len(deleted)} deleted); {at_sync} in Delta at the sync, "
          f"{at_kill} at the kill, "
          f"{after_cut} after the cut (it dropped {report['names_dropped']} unsynced names, restored "
          f"{report['names_restored']}, reverted {report['files_reverted']} files); {sum(rows.values())} after "
          f"the restart, 0 doubled; readers {counts}; insert_log at version {DeltaTable(insert_uri).version()}, "
          f"checkpoints {checkpoints[-3:]}; {t_commit - t0:.0f} s to the first commits, restart "
          f"{t_done - t_restart:.0f} s, checks {time.monotonic() - t_done:.0f} s")
