"""The README's main job, as a user runs it: spark-submit.sh standalone, admin commands, Ctrl-C;
on the embedded Apache Kafka and on the embedded Pulsar-protocol broker."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table, read_table

from ..row_multisets import assert_same_keys
from .standalone_run import (
    ROOT,
    _env,
    admin,
    create_collection,
    leftovers,
    service_port,
    start,
    stop,
    wait_for_rows,
    wait_until_rows,
)

pytestmark = pytest.mark.spark


def scrape(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text: str, name: str, **labels) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total, found = total + float(line.rsplit(" ", 1)[1]), True
    assert found, f"no sample of {name} {labels}"
    return total


@pytest.mark.parametrize("mq", ["kafka", "pulsar"])
def test_standalone_serves_a_collection_end_to_end(tmp_path, mq):
    metrics_port = service_port()
    env = _env(tmp_path, mq, metrics_port)
    proc = start(env, tmp_path / "standalone.log")
    try:
        created = create_collection(env, tmp_path, "books", dim=16)
        assert len(created["vchannels"]) == 2 and created["vchannels"][0].endswith(f"_{created['collection_id']}v0")
        rc, produced = admin(env, "produce", "--collection", "books", "--messages", "20", "--rows", "100")
        assert rc == 0 and produced["rows"] == 2000, produced
        wait_for_rows(env, "books", 2000, 120, tmp_path / "standalone.log")
        rc, segments = admin(env, "show-segments", "--collection", "books")
        assert sum(s["num_rows"] for s in segments) == 2000
        assert all(s["binlog_rows"] == s["num_rows"] and s["binlog_files"] for s in segments)
        rc, channels = admin(env, "show-channels")
        assert [c["state"] for c in channels] == ["WatchSuccess", "WatchSuccess"]
        assert all(c["checkpoint_ts"] for c in channels)
        rc, health = admin(env, "health")
        assert rc == 0 and health["healthy"] is True
        # The driver's own metrics and health, as Prometheus and a probe see them.
        status, healthz = scrape(metrics_port, "/healthz")
        assert status == 200 and json.loads(healthz)["running"] == 2, healthz
        status, text = scrape(metrics_port, "/metrics")
        assert status == 200
        assert metric(text, "deltanode_vchannel_committed_rows_total") == 2000
        assert metric(text, "deltanode_vchannel_consumed_rows_total") == 2000
        deletes = len(produced["deleted_pks"])   # a DeleteRequest per shard beside the 20 InsertRequests
        assert metric(text, "deltanode_vchannel_committed_messages_total") == 20 + min(2, deletes)
        assert metric(text, "deltanode_vchannel_consumed_deletes_total") == deletes
        assert metric(text, "deltanode_vchannel_up") == 2 and metric(text, "deltanode_node_session_up") == 1
        assert metric(text, "deltanode_etcd_reachable") == 1 and metric(text, "deltanode_cycles_total") > 0
        assert metric(text, "deltanode_vchannel_commit_lag_seconds_count") > 0
        assert metric(text, "deltanode_delta_commit_seconds_count") > 0
        (tmp_path / "metrics.txt").write_text(text)
        assert "rows in" in (tmp_path / "standalone.log").read_text()  # progress reports
        assert "warm-up done" in (tmp_path / "standalone.log").read_text()
        # Milvus's Flush on idle channels: the standalone's own TimeTicks carry it through.
        rc, flushed = admin(env, "flush", "--collection", "books", "--timeout", "60")
        assert rc == 0 and flushed["flushed"] is True, flushed
        assert sorted(s["segment_id"] for s in flushed["segments"]) == sorted(produced["segments"])
        assert sum(s["num_rows"] for s in flushed["segments"]) == 2000
        rc, more = admin(env, "produce", "--collection", "books", "--messages", "4", "--rows", "100", "--deletes", "0")
        assert rc == 0 and not set(more["segments"]) & set(produced["segments"])
        wait_for_rows(env, "books", 2400, 60, tmp_path / "standalone.log")
        rc, segments = admin(env, "show-segments", "--collection", "books")
        assert {s["segment_id"]: s["state"] for s in segments} == {
            **{s: "Flushed" for s in produced["segments"]}, **{s: "Growing" for s in more["segments"]}}
    finally:
        rc = stop(proc)
    assert rc == 0, (tmp_path / "standalone.log").read_text()[-3000:]
    assert not leftovers(tmp_path), "embedded services outlived standalone"

    # Started again on the same data: both brokers keep their topics on disk, so standalone resumes
    # and the rows stay exactly once, after a clean stop and after its driver was killed.
    proc = start(env, tmp_path / "standalone-2.log")
    try:
        rc, again = admin(env, "produce", "--collection", "books", "--messages", "4", "--rows", "100", "--deletes", "0")
        assert rc == 0, again
        wait_for_rows(env, "books", 2800, 60, tmp_path / "standalone-2.log")
        rc, segments = admin(env, "show-segments", "--collection", "books")
        assert sum(s["num_rows"] for s in segments) == 2800
        # The driver killed: its session's lease is never revoked. The next run removes that session,
        # so its DataNode serves the channels at once, not once the lease runs out (30 s).
        driver = subprocess.run(["pgrep", "-s", str(proc.pid), "-f", r"^[^ ]*python[^ ]* [^ ]*main\.py standalone"],
                                capture_output=True, text=True).stdout.split()
        assert len(driver) == 1, driver
        os.kill(int(driver[0]), signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        stop(proc)
    assert not leftovers(tmp_path), "embedded services outlived the killed driver"
    proc = start(env, tmp_path / "standalone-3.log")
    try:
        assert "left by an earlier run" in (tmp_path / "standalone-3.log").read_text()
        rc, again = admin(env, "produce", "--collection", "books", "--messages", "4", "--rows", "100", "--deletes", "0")
        assert rc == 0, again
        wait_for_rows(env, "books", 3200, 20, tmp_path / "standalone-3.log")
    finally:
        rc = stop(proc)
    assert rc == 0, (tmp_path / "standalone-3.log").read_text()[-3000:]
    # Every row counted once the last run stopped: each admin produce numbers its keys from 1 (1..2,000,
    # then 1..400 three times), and a delete removes only the older row of its key.
    storage = StorageLayout(str(tmp_path / "delta"))
    table = storage.insert_log(created["collection_id"])
    sent = [*range(1, 2001), *range(1, 401), *range(1, 401), *range(1, 401)]
    assert_same_keys(sent, read_table(storage, table, ["pk"], include_deleted=True).column("pk").to_pylist(),
                     what="the insert table's pk")
    deleted = produced["deleted_pks"]
    assert deleted and set(deleted) <= set(range(1, 2001))
    assert_same_keys((collections.Counter(sent) - collections.Counter(deleted)).elements(),
                     read_table(storage, table, ["pk"]).column("pk").to_pylist(), what="the current rows' pk")
    print(f"{mq} standalone: {len(sent):,} rows produced over three runs, each once in the insert table; "
          f"{len(deleted)} deleted")
    if mq == "kafka":
        # A broker that lost its data (here: its directory removed) would serve new, empty topics where
        # the checkpoints point into the old ones: standalone refuses rather than skip messages.
        shutil.rmtree(tmp_path / "var" / "kafka")
        refused = subprocess.run([str(ROOT / "spark-submit.sh"), "standalone", "--conf", "conf/standalone.conf"],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        said = refused.stdout + refused.stderr   # spark-submit merges the driver's stderr into stdout
        assert refused.returncode == 1 and "has lost the topics" in said and "skip" in said, said[-3000:]
        assert not leftovers(tmp_path), "embedded services outlived the refused start"


def test_standalone_on_kafka_sigkilled_with_its_whole_tree_mid_traffic_resumes_exactly_once(tmp_path):
    """Every process of a standalone run on Kafka (launcher, spark-submit, driver, Python workers,
    etcd, the Kafka broker) SIGKILLed at once while its DataNode is still working through the
    collection's messages; the same command started again brings every row in exactly once."""
    # At most 256 KB read a cycle (two or three of the 105 KB inserts): the DataNode takes some 120
    # cycles over the 300, longer than admin produce takes to write them.
    env = dict(_env(tmp_path, "kafka", service_port()), DELTANODE_DATANODE_BATCH_MAX_BYTES="256k",
               DELTANODE_DATANODE_CATCHUP_MAX_BYTES="256k")
    proc = start(env, tmp_path / "standalone.log")
    try:
        created = create_collection(env, tmp_path, "crash", dim=64)
        rc, produced = admin(env, "produce", "--collection", "crash", "--messages", "300", "--rows", "400",
                             "--deletes", "0")
        assert rc == 0 and produced["rows"] == 120_000, produced
        # Killed between its first commit and its last.
        storage = StorageLayout(str(tmp_path / "delta"))
        table = storage.insert_log(created["collection_id"])
        rows = wait_until(lambda: committed_rows(storage, table), 120, tmp_path / "standalone.log")
        assert rows < 120_000, "the DataNode committed everything before the kill: nothing was mid-way"
        tree = descendants(proc.pid)
        assert any("kafka.Kafka" in cmd for cmd in tree.values()), tree
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        stop(proc)
    assert not leftovers(tmp_path), "a process of the killed run is still there"
    proc = start(env, tmp_path / "standalone-2.log")
    try:
        rc, more = admin(env, "produce", "--collection", "crash", "--messages", "10", "--rows", "400", "--deletes", "0")
        assert rc == 0, more
        wait_until_rows(env, "crash", lambda n: n >= 124_000, 180, tmp_path / "standalone-2.log")
        rc, segments = admin(env, "show-segments", "--collection", "crash")
        assert sum(s["num_rows"] for s in segments) == 124_000
    finally:
        rc = stop(proc)
    assert rc == 0, (tmp_path / "standalone-2.log").read_text()[-3000:]
    # Read once the node stopped, so no copy can land after the count. Each admin produce numbers its
    # keys from 1: 1..120,000, then 1..4,000 again; every produced row exactly as often, no other.
    pks = read_table(storage, table, ["pk"], include_deleted=True).column("pk").to_pylist()
    assert_same_keys([*range(1, 120_001), *range(1, 4_001)], pks, what="the insert table's pk")
    print(f"kafka standalone SIGKILLed with {len(tree)} processes at {rows:,} of 120,000 rows committed; "
          f"after the restart {len(pks):,} rows, each produced row once, none else")


def descendants(pid: int) -> dict[int, str]:
    """Every process under ``pid`` and ``pid`` itself, with its command line."""
    out = subprocess.run(["ps", "-e", "-ww", "-o", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    procs = {int(p): (int(pp), cmd) for p, pp, cmd in (line.split(None, 2) for line in out.splitlines()
                                                        if len(line.split(None, 2)) == 3)}
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        if p in procs and p not in found:
            found[p] = procs[p][1]
            todo.extend(c for c, (pp, _) in procs.items() if pp == p)
    return found


def committed_rows(storage: StorageLayout, table: str) -> int:
    """The rows of ``table``'s files in its latest version (0 before its first commit)."""
    found = open_table(table)
    return sum(found.get_add_actions(flatten=True).column("num_records").to_pylist()) if found else 0


def wait_until(value, timeout: float, log_path: Path):
    """``value()`` once it is true (polled every 50 ms); the log's tail if it stays false."""
    deadline = time.monotonic() + timeout
    while not (got := value()):
        assert time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.05)
    return got


