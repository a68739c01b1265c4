"""A full disk (ENOSPC) under a running pipeline: the whole storage root, one table's log alone, and
Spark's local directory, each a real tmpfs of a fixed size that the test mounts (as root) and keeps
full. Commits stop, the node says why once ("storage full: <where>: No space left on device", in
its health and one log line), nothing is lost or written twice, every table stays readable, and
commits resume by themselves within seconds of space returning."""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from deltanode.datanode.status import NodeStatus, read_statuses, write_status
from deltanode.delta import checkpoints
from deltanode.delta.tables import read_table
from deltanode.failure.classify import BACK_OFF_EVERY

from .filler import Filler, free_bytes
from .support import SCHEMA, settled_watermark, wait_until

pytestmark = pytest.mark.spark
RUNNER = os.path.join(os.path.dirname(__file__), "pipeline_runner.py")
# 128-dim vectors (512 bytes a row, written plain): a few rounds of traffic are megabytes.
WIDE = {"fields": [dict(f, dim=128) if f["name"] == "vec" else f for f in SCHEMA["fields"]]}


@pytest.fixture
def small_fs():
    """Factory: a tmpfs of ``size`` mounted at a directory (made if need be); every mount is
    undone at the end, whatever happened. Skips, saying why, when mounting is refused (not root)."""
    mounted: list[Path] = []

    def mount(directory: Path, size: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"mounting a tmpfs was refused here, so no filesystem can be filled: {done.stderr.strip()}")
        mounted.append(directory)
        return directory

    yield mount
    for directory in reversed(mounted):
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], check=True)   # a process still holds a file there


class Traffic:
    """Inserts of 100 rows on each shard of ``coll`` and a delete of one earlier row, a round every
    ``interval`` s on a thread (or a round at a time); every produced and deleted key kept."""

    def __init__(self, coll) -> None:
        self.coll, self.produced, self.deleted = coll, [], []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def round(self) -> None:
        c = self.coll
        for k, (p, v) in enumerate(zip(c.pchannels, c.vchannels)):
            first = c.producer.insert(p, v, c.collection_id * 10 + k, 1, 100)
            self.produced.extend(range(first, first + 100))
            c.producer.delete(p, v, 1, [first + 7])
            self.deleted.append(first + 7)
        c.producer.flush_producer()

    def run(self, interval: float) -> None:
        def loop() -> None:
            while not self._stop.wait(interval):
                self.round()
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def committed_everything(coll) -> Callable[[], bool]:
    targets = {v: settled_watermark(coll, p) for p, v in zip(coll.pchannels, coll.vchannels)}
    return lambda: all(coll.committed_offset(v) >= targets[v] for v in coll.vchannels)


def readable_rows(storage, uri: str) -> int:
    """The rows of the table at ``uri`` as a reader sees them (deletion vectors applied), after
    checking that delta-rs opens it and that every file its newest version names is there; the
    files are read whole, so a torn one fails here."""
    table = DeltaTable(uri)
    missing = [u for u in table.file_uris() if not os.path.exists(u.removeprefix("file://"))]
    assert not missing, f"{uri}: {len(missing)} files its version {table.version()} names are missing: {missing[:3]}"
    return read_table(storage, uri).num_rows


def orphans(uri: str) -> int:
    """Data files under the table at ``uri`` that no version of it ever added (a failed commit's
    files, kept: the compactor's sweep deletes them after ``orphan_retention``)."""
    added = set()
    log_dir = Path(uri) / "_delta_log"
    for version in log_dir.glob("*.json"):
        for line in version.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(action["add"]["path"])
    return sum(1 for f in Path(uri).rglob("*.parquet")
               if "_delta_log" not in f.parts and str(f.relative_to(uri)) not in added)


def exactly_once(coll, traffic: Traffic) -> dict[str, int]:
    """Every produced row exactly once in the insert table, as a multiset; every delete exactly
    once in the delete table; the current state the produced rows but the deleted ones. Counts."""
    storage = coll.storage
    inserted = collections.Counter(r["pk"] for r in coll.insert_rows())
    assert inserted == collections.Counter(traffic.produced), (
        f"{len(set(traffic.produced) - set(inserted))} rows lost, "
        f"{sum(n - 1 for n in inserted.values() if n > 1)} written twice")
    deletes = read_table(storage, storage.delta_log(coll.collection_id), ["pk"]).column("pk").to_pylist()
    assert collections.Counter(deletes) == collections.Counter(traffic.deleted)
    current = read_table(storage, storage.insert_log(coll.collection_id), ["pk"]).column("pk").to_pylist()
    assert collections.Counter(current) == collections.Counter(traffic.produced) - collections.Counter(traffic.deleted)
    return {"produced": len(traffic.produced), "found": sum(inserted.values()), "deleted": len(deletes),
            "current": len(current)}


def temporary_files(uri: str) -> list[str]:
    """What failed commits left in the table's log (a commit file is written aside, then linked)."""
    return [p.name for p in (Path(uri) / "_delta_log").iterdir() if p.name.startswith(".tmp-")]


def deltanode_records(caplog, level: int, text: str) -> list[logging.LogRecord]:
    """DeltaNode's records at ``level`` holding ``text``, but a broker outage's: a topic made for the
    test can refuse a watermark request (NOT_LEADER_FOR_PARTITION) until its leader is known, which
    the node tells as a broker outage of its own; the storage's condition is what is counted here."""
    return [r for r in caplog.records if r.name.startswith("deltanode") and r.levelno == level
            and text in r.getMessage() and r.name != "deltanode.mq.reachability"]


def test_a_full_storage_root_stops_commits_says_why_once_and_resumes_when_space_returns(
        small_fs, pipelines, make_collection, tmp_path, caplog):
    from deltanode.config.sections.pipeline import CompactionSettings
    root = small_fs(tmp_path / "delta", "16m")
    coll = make_collection(shards=2, schema=WIDE)
    pipe = pipelines(compaction=CompactionSettings(interval=0))   # the rows stay in their files: counted as written
    coll.watch(pipe)
    insert_log, delete_log = coll.storage.insert_log(coll.collection_id), coll.storage.delta_log(coll.collection_id)
    traffic = Traffic(coll)
    for _ in range(5):
        traffic.round()
    wait_until(committed_everything(coll), 60, "the first rounds to commit")
    node = NodeStatus("node-a", 7, time.time(), 10.0, 2, 2)
    write_status(coll.storage, node)   # a running node's document, as it is before the disk fills
    caplog.set_level(logging.DEBUG, logger="deltanode")

    filler = Filler(root)
    traffic.run(0.5)
    full = f"storage full: {root}: No space left on device"
    wait_until(lambda: pipe.storage_full, 30, "the pipeline to report its storage full")
    assert pipe.storage_full == full
    # Every vchannel failed for lack of space twice at least: it was retried while the disk stayed full.
    wait_until(lambda: all(s.failures >= 2 for s in pipe.snapshots()), 3 * BACK_OFF_EVERY + 10,
               "every vchannel to fail twice while the disk is full")
    assert free_bytes(root) == 0 and pipe.storage_full == full
    snapshots = {s.vchannel: s for s in pipe.snapshots()}
    assert len(snapshots) == 2 and all(s.failures >= 2 for s in snapshots.values()), snapshots
    # What admin health reads: the node's document, written over its last one in place.
    write_status(coll.storage, NodeStatus("node-a", 7, time.time(), 10.0, 2, 0, storage_full=pipe.storage_full,
                                          storage_full_since=pipe.storage_full_since))
    assert [s.storage_full for s in read_statuses(coll.storage)] == [full]
    # Readers meanwhile: both tables open and read whole; a checkpoint fails and leaves nothing behind.
    rows_while_full = readable_rows(coll.storage, insert_log)
    readable_rows(coll.storage, delete_log)
    try:   # the checkpoint the node writes every 100 versions, tried now: it finds no space (a page
        checkpoints.write_checkpoint(insert_log)   # freed by a failed write may let it through)
        checkpoint = "written"
    except Exception as e:  # noqa: BLE001 - delta-rs's own error for the space it lacks
        checkpoint = f"failed ({str(e)[:80]})"
    assert not any((Path(insert_log) / checkpoints.SCRATCH).iterdir())
    assert readable_rows(coll.storage, insert_log) == rows_while_full
    traffic.stop()

    filler.release()
    freed = time.monotonic()
    wait_until(committed_everything(coll), 60, "every vchannel to commit once space returned")
    resumed_in = time.monotonic() - freed
    wait_until(lambda: pipe.storage_full is None, 30, "the storage-full condition to clear")
    assert resumed_in < BACK_OFF_EVERY + 10   # not the 60-s backoff of other failures

    told = deltanode_records(caplog, logging.ERROR, "")
    assert [r.getMessage().split(": the vchannels")[0] for r in told] == [full], [r.getMessage() for r in told]
    assert len(deltanode_records(caplog, logging.WARNING, "storage has space again")) == 1
    quiet = deltanode_records(caplog, logging.DEBUG, "flowgraph failed, retried")
    assert len(quiet) >= 4 and all("StorageFull" in r.getMessage() for r in quiet)
    assert checkpoints.write_checkpoint(insert_log) is not None   # with space, the checkpoint lands
    assert not temporary_files(insert_log) and not temporary_files(delete_log)
    assert not list((root / "_deltanode" / "status").glob("*.tmp"))
    counts = exactly_once(coll, traffic)
    assert readable_rows(coll.storage, insert_log) == counts["current"]
    print(f"storage root full: {counts}, {rows_while_full} readable while full, {len(quiet)} vchannel failures "
          f"for lack of space (at DEBUG), 1 line; a checkpoint while full {checkpoint}; commits resumed "
          f"{resumed_in:.1f} s after space returned; {orphans(insert_log)} orphan insert binlogs kept")


def test_a_full_insert_log_after_the_deletes_committed_loses_and_doubles_nothing(
        small_fs, pipelines, make_collection, tmp_path, caplog):
    """Only the insert table's log is full: each sync's deletes land in delta_log, then its
    insert_log commit finds no space. Reloaded from Delta, the vchannel reads those deletes again
    (only to mark rows, never committed twice) until the insert commit lands."""
    from deltanode.config.sections.pipeline import CompactionSettings
    coll = make_collection(shards=2, schema=WIDE)
    insert_log, delete_log = coll.storage.insert_log(coll.collection_id), coll.storage.delta_log(coll.collection_id)
    log_fs = small_fs(Path(insert_log) / "_delta_log", "1m")
    pipe = pipelines(compaction=CompactionSettings(interval=0))
    coll.watch(pipe)
    traffic = Traffic(coll)
    for _ in range(3):
        traffic.round()
    wait_until(committed_everything(coll), 60, "the first rounds to commit")
    caplog.set_level(logging.DEBUG, logger="deltanode")

    filler = Filler(log_fs)
    for _ in range(3):
        traffic.round()
    wait_until(lambda: pipe.storage_full, 30, "the pipeline to report its storage full")
    assert pipe.storage_full == f"storage full: {coll.storage.root}: No space left on device"

    def deletes_ahead() -> bool:
        inserts, deletes = DeltaTable(insert_log), DeltaTable(delete_log)
        return all((deletes.transaction_version(v) or 0) > (inserts.transaction_version(v) or 0)
                   for v in coll.vchannels)
    wait_until(deletes_ahead, 30, "the deletes' commits to land ahead of the inserts' refused ones")
    # A retry of each vchannel after its deletes landed: the deletes read again, their commit not repeated.
    failed_before = collections.Counter(r.getMessage().split(":")[0]
                                        for r in deltanode_records(caplog, logging.DEBUG, "StorageFull"))

    def retried_each() -> bool:
        failed = collections.Counter(r.getMessage().split(":")[0]
                                     for r in deltanode_records(caplog, logging.DEBUG, "StorageFull"))
        return all(failed[v] > failed_before[v] for v in coll.vchannels)
    wait_until(retried_each, 2 * BACK_OFF_EVERY + 10, "each vchannel to be retried after its deletes landed")
    assert any("(committing)" in r.getMessage() for r in deltanode_records(caplog, logging.DEBUG, "StorageFull"))
    readable_rows(coll.storage, insert_log)
    readable_rows(coll.storage, delete_log)

    filler.release()
    freed = time.monotonic()
    wait_until(committed_everything(coll), 60, "every vchannel to commit once space returned")
    resumed_in = time.monotonic() - freed
    wait_until(lambda: pipe.storage_full is None, 30, "the storage-full condition to clear")
    assert len(deltanode_records(caplog, logging.ERROR, "")) == 1
    assert not temporary_files(insert_log) and not temporary_files(delete_log)
    counts = exactly_once(coll, traffic)
    assert readable_rows(coll.storage, insert_log) == counts["current"]
    print(f"insert_log's log full after the deletes' commit: {counts}; commits resumed {resumed_in:.1f} s after "
          f"space returned; {orphans(insert_log)} insert and {orphans(delete_log)} delete files kept unnamed")


def test_a_full_spark_local_directory_stops_commits_says_why_once_and_resumes(small_fs, make_collection, tmp_path):
    """``spark.local.dir`` (here ``SPARK_LOCAL_DIRS``) full: PySpark cannot write a job's tasks
    there, so every cycle's job fails before it starts. A DataNode's pipeline in a process of its
    own (its Spark's local directory is set at start), on the storage root of the test's disk."""
    local = small_fs(tmp_path / "spark-local", "8m")
    coll = make_collection(shards=2)
    traffic = Traffic(coll)
    traffic.round()
    mq = coll.producer.broker
    spec = {"mq": mq.kind, "address": mq.address, "storage_root": coll.storage.root, "max_messages": 50,
            "collections": [{"collection_id": coll.collection_id, "name": coll.name, "schema": coll.schema_doc,
                             "vchannels": coll.vchannels}],
            "targets": {v: 1 << 62 for v in coll.vchannels}, "timeout": 240}   # runs until stopped here
    log_path = tmp_path / "node.log"
    with open(log_path, "w") as out:
        node = subprocess.Popen([sys.executable, RUNNER, json.dumps(spec)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "SPARK_LOCAL_DIRS": str(local)})
    try:
        wait_until(committed_everything(coll), 120, "the node to commit the first round")
        filler = Filler(local)
        full = f"storage full: Spark's local directory {local}: No space left on device"
        wait_until(lambda: full in log_path.read_text(), 30, "the node to log its local directory full")
        for _ in range(2 * int(BACK_OFF_EVERY)):   # rows arrive while no job can run
            traffic.round()
            time.sleep(1)
        filler.release()
        freed = time.monotonic()
        wait_until(committed_everything(coll), 60, "every vchannel to commit once space returned")
        resumed_in = time.monotonic() - freed
        wait_until(lambda: "storage has space again" in log_path.read_text(), 30, "the condition to clear")
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGTERM)   # the runner's own process group: its JVM and workers too
        node.wait(60)
    lines = log_path.read_text().splitlines()
    errors = [line for line in lines if " ERROR " in line and "deltanode" in line]
    assert len(errors) == 1 and full in errors[0], errors
    assert sum("storage has space again" in line for line in lines) == 1
    assert not any("its Spark job failed" in line for line in lines)   # the job failures: at DEBUG
    assert resumed_in < BACK_OFF_EVERY + 10
    counts = exactly_once(coll, traffic)
    print(f"Spark's local directory full: {counts}; commits resumed {resumed_in:.1f} s after space returned")
