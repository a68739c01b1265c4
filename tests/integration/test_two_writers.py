"""Two DataNode processes on one channel: the owner stopped (SIGSTOP) right before its insert
commit until its etcd lease expires, the channel handed to a second DataNode that commits, then
the first resumed. Delta must refuse its commit, it must delete none of the new owner's files and
stop writing the channel, and every row must be in Delta exactly once."""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from pathlib import Path

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.delta.tables import open_table, read_table
from deltanode.failure.crash_points import CRASH_AT, CRASH_DIR, PAUSE_AT, paused_marker
from deltanode.state import meta
from deltanode.state.channel_state import STATES_KEY
from deltanode.state.current_state import current_rows

from .processes import start, stop_running
from .support import CatalogTraffic, wait_until

pytestmark = pytest.mark.spark
PAUSE_POINT = "after_side_commits"   # the fence passed, delta_log committed, insert_log next
PAUSE_HIT = 3                        # the third sync: two commits of the backlog before it


class DeletingTraffic:
    """CatalogTraffic's inserts (100 rows a message, segments 70 and 71 of partition 1), each
    followed on its shard by a delete of one key of the insert two before it there (committed
    by then, usually: the delete marks a committed file's deletion vector)."""

    def __init__(self, traffic: CatalogTraffic) -> None:
        self.traffic = traffic
        self.deleted: list[int] = []
        self.per_shard = [0, 0]   # rows produced on each shard
        self._firsts: list[list[int]] = [[], []]

    def produce(self, pairs: int) -> None:
        r, producer = self.traffic.record, self.traffic.producer
        for _ in range(pairs):
            for k in range(2):
                first = producer.insert(r.pchannels[k], r.vchannels[k], 70 + k, 1, 100)
                self.traffic.produced.extend((time.time(), pk) for pk in range(first, first + 100))
                self.per_shard[k] += 100
                firsts = self._firsts[k]
                firsts.append(first)
                if len(firsts) >= 3:
                    pk = firsts[-3] + len(firsts) % 100
                    producer.delete(r.pchannels[k], r.vchannels[k], 1, [pk])
                    self.deleted.append(pk)
        producer.flush_producer()


def delta_versions(table_root: str) -> list[tuple[int, list[dict]]]:
    """Every version of a local Delta table, its actions parsed."""
    log_dir = Path(table_root) / "_delta_log"
    return [(int(p.name[:20]), [json.loads(line) for line in p.read_text().splitlines() if line.strip()])
            for p in sorted(log_dir.glob("[0-9]*.json"))]


def committed_files(table_root: str) -> set[str]:
    """The paths every version of the table ever added."""
    return {a["add"]["path"] for _, actions in delta_versions(table_root) for a in actions if "add" in a}


def files_on_disk(table_root: str) -> set[str]:
    """The parquet files under the table's root (its data files), relative to it."""
    root = Path(table_root)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if not p.name.startswith(".")
            and "_delta_log" not in p.parts}


def committers(table_root: str, after: int) -> dict[int, set[int]]:
    """Version -> the node ids of the channel states it commits, for the versions after ``after``."""
    out = {}
    for version, actions in delta_versions(table_root):
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if version > after and STATES_KEY in info:
            out[version] = {doc["node_id"] for doc in json.loads(info[STATES_KEY]).values()}
    return out


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_a_node_paused_past_its_lease_is_refused_and_deletes_nothing_of_the_new_owner(
        etcd_server, mq, etcd_root, tmp_path):
    prefix = f"two{int(time.time() * 1000) % 10**9}-rootcoord-dml"
    storage = StorageLayout(str(tmp_path / "delta"))
    traffic = CatalogTraffic(etcd_server.endpoint, etcd_root, mq, "twowriters", prefix, storage)
    source = DeletingTraffic(traffic)
    record = traffic.record
    cid, vchannels = record.collection_id, record.vchannels
    insert_root, delete_root = storage.insert_log(cid), storage.delta_log(cid)
    # No balance: the channels go to B only because A's session expired, and stay there once A
    # registers again.
    conf = traffic.write_conf(tmp_path / "datanode.conf", "datanode.batch.max.messages = 8\nsession.ttl = 3s\n"
                                                          "datacoord.channel.balance = false\nspark.master = local[2]")
    log_a, log_b = tmp_path / "node_a.log", tmp_path / "node_b.log"
    env_a = {k: v for k, v in os.environ.items() if k != CRASH_AT}
    env_a.update({PAUSE_AT: f"{PAUSE_POINT}:{PAUSE_HIT}", CRASH_DIR: str(tmp_path)})
    source.produce(30)   # a backlog: A commits it 8 messages a cycle
    coord = start("datacoord", conf, tmp_path / "datacoord.log")
    node_a = start("datanode", conf, log_a, env_a)
    node_b, driver_a = None, 0

    def txns() -> dict[str, int]:
        table = open_table(insert_root)
        return {v: (table.transaction_version(v) or 0) if table else 0 for v in vchannels}

    def owners() -> set[int]:
        return {meta.channel_state(storage, cid, v).node_id if meta.channel_state(storage, cid, v) else 0
                for v in vchannels}

    try:
        marker = paused_marker(PAUSE_POINT, str(tmp_path))
        wait_until(lambda: os.path.exists(marker), 180, f"node A to pause at its sync #{PAUSE_HIT}")
        driver_a = int(Path(marker).read_text())
        wait_until(lambda: process_state(driver_a) == "T", 10, "A's driver to be stopped")
        (a_id,) = owners() - {0}   # a vchannel may not have committed yet
        paused_version = delta_versions(insert_root)[-1][0]
        at_pause = txns()
        in_flight = files_on_disk(insert_root) - committed_files(insert_root)   # A's batch, not committed
        delete_table = open_table(delete_root)
        side_txns = {v: (delete_table.transaction_version(v) or 0) if delete_table else 0 for v in vchannels}
        rows_at_pause = len(traffic.rows())

        source.produce(10)   # while A is stopped: its lease runs out, B takes the channels
        node_b = start("datanode", conf, log_b)
        wait_until(lambda: 0 not in owners() and a_id not in owners()
                   and all(t > at_pause[v] for v, t in txns().items()), 180,
                   "node B to load both channels and commit them")
        (b_id,) = owners()
        b_took_over = delta_versions(insert_root)[-1][0]
        os.kill(driver_a, signal.SIGCONT)
        wait_until(lambda: "another writer owns the channel" in log_a.read_text(), 60,
                   "Delta to refuse A's insert commit")
        wait_until(lambda: "lost its etcd session" in log_a.read_text(), 60, "A to learn its session is gone")
        wait_until(lambda: not in_flight & files_on_disk(insert_root), 30, "A to delete its refused batch's files")
        source.produce(10)
        traffic.wait_committed(180, "node B to commit everything")
        time.sleep(3)   # A's chance to commit the channel again, if it went on writing it
    finally:
        traffic.close()
        if driver_a and process_state(driver_a) == "T":
            os.kill(driver_a, signal.SIGCONT)   # a stopped driver cannot take the SIGTERM that stops it
        stop_running(*(p for p in (node_a, node_b, coord) if p is not None))
    text_a = log_a.read_text()
    refused = [line for line in text_a.splitlines() if "another writer owns the channel" in line]
    after_resume = text_a[text_a.index(refused[0]):].splitlines()
    print("A after SIGCONT:\n  " + "\n  ".join(line[:220] for line in after_resume[:25]))

    produced = traffic.pks
    rows = traffic.rows()
    live = read_table(storage, insert_root, ["pk"]).column("pk").to_pylist()
    deletes = read_table(storage, delete_root, ["pk"]).column("pk").to_pylist()
    current = current_rows(storage, cid, "pk").column("pk").to_pylist()
    standing = collections.Counter(produced) - collections.Counter(source.deleted)
    written_by = committers(insert_root, paused_version)
    print(f"two writers: produced {len(produced)} rows and {len(source.deleted)} deletes; {rows_at_pause} rows in "
          f"Delta when A paused (version {paused_version}, its refused batch: {len(in_flight)} files); B (DataNode "
          f"{b_id}) committed from version {b_took_over}; after: {len(rows)} rows, "
          f"{len(rows) - len(set(rows))} duplicated, {len(live)} live, {len(deletes)} deletes recorded; "
          f"versions after the pause by node: {dict(collections.Counter(n for ns in written_by.values() for n in ns))}")

    # The paused commit carried rows, and its side commit landed: B took over in the middle of A's sync.
    assert in_flight and any(side_txns[v] > at_pause[v] for v in vchannels), (in_flight, side_txns, at_pause)
    # A's commit was refused, and A committed nothing after its pause (not under a new session either).
    assert {n for ns in written_by.values() for n in ns} == {b_id} and b_id != a_id
    # A deleted no file that a commit names (B's among them), and deleted its refused batch's
    # files: what is on disk is exactly what the commits name (nothing was compacted).
    assert files_on_disk(insert_root) == committed_files(insert_root)
    assert files_on_disk(delete_root) == committed_files(delete_root)
    # Every produced row once, every delete recorded once, the current state what they leave.
    assert collections.Counter(rows) == collections.Counter(produced)
    assert collections.Counter(deletes) == collections.Counter(source.deleted)
    assert collections.Counter(live) == standing
    assert collections.Counter(current) == standing
    for k, v in enumerate(vchannels):
        state = meta.channel_state(storage, cid, v)
        assert state.node_id == b_id
        assert sum(s.num_rows for s in state.segments.values()) == source.per_shard[k]
