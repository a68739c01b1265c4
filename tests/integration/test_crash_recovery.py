"""SIGKILL the DataNode's pipeline (a process of its own) at each crash point, or from outside
mid-stream, restart it (a new pipeline loading every vchannel from Delta), and count rows: each
exactly once."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from deltanode.config.sections.pipeline import CompactionSettings
from deltanode.delta.tables import open_table, read_table
from deltanode.failure.crash_points import COMPACTION_POINTS, CRASH_AT, CRASH_DIR, POINTS

from .support import ALL_BROKERS, data_files_added, settled_watermark, wait_until

RUNNER = os.path.join(os.path.dirname(__file__), "pipeline_runner.py")
pytestmark = pytest.mark.spark


def runner_args(colls, tmp_path, targets: dict[str, int], max_messages: int, **extra) -> list[str]:
    mq = colls[0].producer.broker
    args = {"mq": mq.kind, "address": mq.address, "storage_root": colls[0].storage.root,
            "collections": [{"collection_id": c.collection_id, "name": c.name, "schema": c.schema_doc,
                             "vchannels": c.vchannels} for c in colls],
            "targets": targets, "max_messages": max_messages, "timeout": 200, **extra}
    return [sys.executable, RUNNER, json.dumps(args)]


def run_node(colls, tmp_path, targets, crash: str | None, max_messages: int = 6,
             **extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_AT, CRASH_DIR)}
    if crash:
        env[CRASH_AT], env[CRASH_DIR] = crash, str(tmp_path)
    return subprocess.run(runner_args(colls, tmp_path, targets, max_messages, **extra), env=env, capture_output=True,
                          text=True, timeout=240)


def restart(pipelines, colls, targets: dict[str, int], max_messages: int = 6, compaction: dict | None = None,
            rewrites: int = 0, timeout: float = 200) -> None:
    """The node started again after its kill: a new pipeline as the runner makes one (the same limits,
    trigger and compaction), in this process on the session's Spark (the restart needs a pipeline
    that loads every vchannel from Delta, not a driver of its own), until every vchannel's
    insert_log txn reaches its target and the compactor made ``rewrites`` rewrites; then stopped,
    so that nothing lands after the counts."""
    pipe = pipelines(trigger_interval=0.1, compaction=CompactionSettings(**(compaction or {"interval": 0})),
                     max_messages=max_messages, splits=2)
    for c in colls:
        c.watch(pipe)

    def done() -> bool:
        return all(c.committed_offset(v) >= targets[v] for c in colls for v in c.vchannels) \
            and pipe.compactor.totals.rewrites >= rewrites
    try:
        wait_until(done, timeout, "the restarted node to reach its targets")
    except AssertionError:
        raise AssertionError(f"vchannels: {pipe.snapshots()}; compaction: {pipe.compactor.totals}") from None
    finally:
        pipe.stop()


def exactly_once(coll, produced: list[int], deleted: list[int] = ()) -> tuple[int, int]:
    """Every produced row once in the insert binlogs (a deleted one may be gone: compaction drops
    the rows deletion vectors mark), and the current state, as every Delta reader sees it, exactly
    the produced rows that were not deleted."""
    pks = [r["pk"] for r in coll.insert_rows()]
    dupes = [pk for pk, n in collections.Counter(pks).items() if n > 1]
    assert not dupes, f"{len(dupes)} rows committed twice, e.g. {dupes[:5]}"
    lost = set(produced) - set(deleted) - set(pks)
    assert not lost and set(pks) <= set(produced), f"{len(lost)} rows lost, {len(set(pks) - set(produced))} unknown"
    current = read_table(coll.storage, coll.storage.insert_log(coll.collection_id), ["pk"]).column("pk").to_pylist()
    assert sorted(current) == sorted(set(produced) - set(deleted)), \
        f"current state: {len(set(current) & set(deleted))} deleted rows still there, {len(current)} rows"
    return len(pks), len(dupes)


@ALL_BROKERS
@pytest.mark.parametrize("point", POINTS)
def test_sigkill_then_restart_keeps_every_row_exactly_once(point, mq, make_collection, pipelines, tmp_path):
    coll = make_collection()
    p, v = coll.pchannels[0], coll.vchannels[0]
    produced, deleted = [], []

    def produce(batches: int) -> None:
        for i in range(batches):
            first = coll.producer.insert(p, v, segment_id=1 + i % 3, partition_id=1, rows=1000)
            produced.extend(range(first, first + 1000))
            if i % 5 == 4:
                coll.producer.delete(p, v, 1, [first])
                deleted.append(first)
        coll.producer.flush_producer()

    produce(40)
    crashed = run_node([coll], tmp_path, {v: settled_watermark(coll, p)}, crash=f"{point}:3")
    assert crashed.returncode < 0, (
        f"the node was not killed at {point}: rc={crashed.returncode}\n{crashed.stderr[-3000:]}")
    rows_at_crash = len(coll.insert_rows())
    produce(10)  # more traffic while the node is down
    target = settled_watermark(coll, p)
    assert coll.committed_offset(v) < target
    restart(pipelines, [coll], {v: target})
    rows, _ = exactly_once(coll, produced, deleted)
    print(f"{mq.kind} {point}: produced {len(produced)} rows, {rows_at_crash} in Delta at the crash, "
          f"{rows} after restart, 0 duplicated")
    deletes = read_table(coll.storage, coll.storage.delta_log(coll.collection_id)).column("pk").to_pylist()
    assert sorted(deletes) == sorted(deleted)
    state = coll.state(v)
    assert sum(s.num_rows for s in state.segments.values()) == len(produced)


@pytest.mark.parametrize("point", COMPACTION_POINTS)
def test_sigkill_during_a_compaction_commit_loses_nothing(point, make_collection, pipelines, tmp_path):
    """The compactor rewrites segments while the pipeline commits; the node is killed right before
    or right after a compaction's Delta commit, more rows arrive, it restarts (compacting again):
    every row exactly once, deletes intact, segment row counts true, fewer files than batches."""
    coll = make_collection()
    p, v = coll.pchannels[0], coll.vchannels[0]
    produced, deleted = [], []

    def produce(batches: int) -> None:
        for i in range(batches):
            first = coll.producer.insert(p, v, segment_id=1 + i % 2, partition_id=1, rows=200)
            produced.extend(range(first, first + 200))
            if i % 5 == 4:
                coll.producer.delete(p, v, 1, [first])
                deleted.append(first)
        coll.producer.flush_producer()

    compaction = {"interval": 0.5, "min_files": 3, "retention": 0}
    produce(40)
    crashed = run_node([coll], tmp_path, {v: settled_watermark(coll, p)}, crash=f"{point}:1", max_messages=2,
                       compaction=compaction, rewrites=1)
    assert crashed.returncode < 0, (
        f"the node was not killed at {point}: rc={crashed.returncode}\n{crashed.stderr[-3000:]}")
    rows_at_crash = len(coll.insert_rows())
    produce(10)
    target = settled_watermark(coll, p)
    restart(pipelines, [coll], {v: target}, max_messages=2, compaction=compaction, rewrites=1)
    rows, _ = exactly_once(coll, produced, deleted)
    files = len(open_table(coll.storage.insert_log(coll.collection_id)).file_uris())
    written = data_files_added(coll.storage.insert_log(coll.collection_id))
    print(f"compaction {point}: produced {len(produced)} rows, {rows_at_crash} in Delta at the crash, {rows} after "
          f"restart, 0 duplicated; {written} binlog files committed, {files} after compaction")
    assert files < written
    deletes = read_table(coll.storage, coll.storage.delta_log(coll.collection_id)).column("pk").to_pylist()
    assert sorted(deletes) == sorted(deleted)
    state = coll.state(v)
    assert sum(s.num_rows for s in state.segments.values()) == len(produced)


def test_forty_vchannels_on_four_pchannels_survive_a_sigkill_mid_stream(make_collection, pipelines, tmp_path):
    """20 collections x 2 shards over 4 shared pchannels; the node is killed from outside while it
    commits; traffic goes on; a new node resumes every vchannel from Delta."""
    pchannels = [f"t{time.time_ns() % 10**9}-rootcoord-dml_{i}" for i in range(4)]
    colls = [make_collection(shards=2, ticking=i < 2, pchannels=pchannels[i % 2 * 2:i % 2 * 2 + 2])
             for i in range(20)]
    produced = {c.collection_id: [] for c in colls}

    def produce(rounds: int) -> None:
        for _ in range(rounds):
            for c in colls:
                for k, (p, v) in enumerate(zip(c.pchannels, c.vchannels)):
                    first = c.producer.insert(p, v, segment_id=c.collection_id * 10 + k, partition_id=1, rows=20)
                    produced[c.collection_id].extend(range(first, first + 20))
        for c in colls:
            c.producer.flush_producer()

    produce(15)
    never = {v: 1 << 40 for c in colls for v in c.vchannels}
    node = subprocess.Popen(runner_args(colls, tmp_path, never, 50), stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "node.log", "w"))
    try:
        wait_until(lambda: sum(len(c.insert_rows()) for c in colls) >= 2000, 120, "part of the backlog to commit")
        produce(5)
        os.killpg(node.pid, signal.SIGKILL)   # the runner leads its own group: driver, JVM, Python workers
        node.wait(30)
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
    at_kill = sum(len(c.insert_rows()) for c in colls)
    produce(5)   # traffic while no node runs
    targets = {v: settled_watermark(colls[0], p) for p in pchannels for c in colls
               for v, pv in zip(c.vchannels, c.pchannels) if pv == p}
    restart(pipelines, colls, targets, max_messages=200)
    total = 0
    for c in colls:
        rows, _ = exactly_once(c, produced[c.collection_id])
        total += rows
    expected = sum(len(p) for p in produced.values())
    print(f"40 vchannels: produced {expected} rows, {at_kill} in Delta at the kill, {total} after restart, "
          f"0 duplicated")
    assert at_kill < expected
