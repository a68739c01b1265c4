"""etcd away: the DataNode keeps committing, nothing exits, everything converges once etcd is back.

Real processes (``spark-submit.sh datacoord`` and ``datanode``), a real etcd of the test's own
(frozen with SIGSTOP, or killed and restarted on its data directory), the real broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from deltanode.delta.layout import StorageLayout
from deltanode.standalone.services import EmbeddedEtcd

from .processes import ROOT, start, stop_running
from .support import CatalogTraffic, duplicated, wait_until

pytestmark = pytest.mark.spark
TTL = 3          # session.ttl of the DataNode, seconds
OUTAGE = 2 * TTL + 2


def admin_health(conf) -> dict:
    """``admin health`` as a user runs it; etcd being down makes it answer after its connect timeout."""
    out = subprocess.run([str(ROOT / "spark-submit.sh"), "admin", "health", "--conf", str(conf)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


@pytest.mark.parametrize("outage", ["frozen", "restarted"])
def test_the_datanode_keeps_committing_while_etcd_is_away(mq, tmp_path, outage):
    etcd = EmbeddedEtcd(tmp_path / "etcd")
    etcd.start()
    root = "outage/meta"
    prefix = f"outage{int(time.time() * 1000) % 10**9}-rootcoord-dml"
    traffic = CatalogTraffic(etcd.endpoint, root, mq, "outage", prefix, StorageLayout(str(tmp_path / "delta")))
    conf = traffic.write_conf(tmp_path / "node.conf", f"session.ttl = {TTL}s\nstandalone.progress.interval = 2s\n"
                                                      "spark.master = local[2]")
    log = tmp_path / "processes.log"
    pks = traffic.rows

    seen: dict[int, float] = {}   # pk -> when it was first seen in Delta (sampled every 0.25 s)
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.25):
            now = time.time()
            for pk in pks():
                seen.setdefault(pk, now)
    threading.Thread(target=sample, daemon=True).start()

    def p99(since: float, until: float) -> float:
        """insert -> durable p99 of the rows produced in [since, until)."""
        latencies = sorted(seen[pk] - t for t, pk in traffic.produced if since <= t < until and pk in seen)
        return latencies[int(0.99 * (len(latencies) - 1))]

    coord = start("datacoord", conf, log)
    node = start("datanode", conf, log)
    try:
        traffic.burst(10)
        wait_until(lambda: len(pks()) >= 2000, 150, "the DataNode to commit the first rows")
        traffic.run()
        time.sleep(6)   # the "before" of the latency comparison

        down_at = time.time()
        if outage == "frozen":
            os.kill(etcd.proc.pid, signal.SIGSTOP)
        else:
            etcd.stop()
        at_outage = len(pks())
        # While etcd is away, rows keep landing: everything produced in the outage's first
        # seconds is committed before etcd comes back.
        time.sleep(OUTAGE / 2)
        produced_early = {pk for t, pk in traffic.produced if t <= time.time()}
        wait_until(lambda: produced_early <= set(pks()), OUTAGE, "rows produced during the outage to be committed")
        committed_during = len(pks()) - at_outage
        health = admin_health(conf)
        node_report = [d for d in health["datanodes"] if d.get("process")]
        assert health["etcd"] == "down" and health["healthy"] is True, health
        assert len(node_report) == 1 and "etcd unreachable since" in node_report[0]["etcd_unreachable_since"], health
        time.sleep(max(0.0, down_at + OUTAGE - time.time()))
        if outage == "frozen":
            os.kill(etcd.proc.pid, signal.SIGCONT)
        else:
            etcd = EmbeddedEtcd(tmp_path / "etcd", etcd.client_port, etcd.peer_port)
            etcd.start()
        back_at = time.time()
        normal_p99, outage_p99 = p99(down_at - 6, down_at), p99(down_at, down_at + OUTAGE / 2)
        assert node.poll() is None and coord.poll() is None, "a process exited because etcd was away"

        # Traffic goes on after etcd is back, until a row produced since is committed.
        wait_until(lambda: any(t > back_at and pk in seen for t, pk in list(traffic.produced)), 60,
                   "a row produced after etcd came back to be committed")
        traffic.stop()
        every_pk = {pk for _, pk in traffic.produced}
        wait_until(lambda: every_pk <= set(pks()), 120, "every row to be committed after etcd came back")
        converged = time.time() - back_at
        traffic.wait_committed(120, "the checkpoints to reach the end of the pchannels")
        assert node.poll() is None and coord.poll() is None
    finally:
        sampling.set()
        traffic.close()
        stop_running(node, coord)
        if outage == "frozen" and etcd.proc is not None:
            os.kill(etcd.proc.pid, signal.SIGCONT)
        etcd.stop()
    got = pks()
    produced = [pk for _, pk in traffic.produced]
    dupes = duplicated(got)
    text = log.read_text()
    rejoined = "registered again as DataNode" in text
    print(f"etcd {outage} for {OUTAGE} s: produced {len(produced)} rows, {committed_during} committed during the "
          f"outage, {len(got)} in Delta at the end, {len(dupes)} duplicated; every row committed "
          f"{converged:.1f} s after etcd came back ({'new session' if rejoined else 'the session survived'}); "
          f"insert -> durable p99 {normal_p99:.2f} s before, {outage_p99:.2f} s during the outage")
    assert committed_during > 0
    assert outage_p99 <= 2 * normal_p99 + 0.5, (normal_p99, outage_p99)   # 0.5 s: the sampling period, twice
    assert not dupes and sorted(got) == sorted(produced)
    assert "etcd unreachable" in text
