"""Metrics and health of a DataNode: what /metrics and /healthz say for given node states (pure logic)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from deltanode.datanode.metrics import MetricsServer, NodeView, health, readiness
from deltanode.pipeline.cycle_report import CycleReport
from deltanode.vchannel.flowgraph import Consumed, Snapshot
from deltanode.wire.positions import compose_ts

V0, V1 = "by-dev-rootcoord-dml_0_7v0", "by-dev-rootcoord-dml_1_7v1"


def snap(vchannel: str, status: str = "running", failures: int = 0, error: str = "", offset: int = 90,
         tick_age: float = 2.0) -> Snapshot:
    tick = compose_ts(int((time.time() - tick_age) * 1000), 0)
    return Snapshot(vchannel, status, failures, error, offset, tick, 500, 4, 0, 7, vchannel.rsplit("_", 1)[0],
                    10, 12_000, Consumed(rows=600, deletes=3, dml_messages=12, dml_bytes=14_000, quarantined=1))


def view(snaps, node_id=5, alive=True, down_since=None) -> NodeView:
    return NodeView(node_id=lambda: node_id, snapshots=lambda: snaps, high_watermark=lambda p: 100,
                    pipeline_alive=lambda: alive, etcd_down_since=lambda: down_since, etcd_error=lambda: "refused",
                    sessions_lost=lambda: 1)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_and_health_over_http():
    snaps = [snap(V0), snap(V1, "failed", 2, "BrokerError: gone")]
    server = MetricsServer(view(snaps), "127.0.0.1", 0).start()
    try:
        report = CycleReport(1, seconds=0.4, job_s=0.3, tasks=2, messages=50, bytes=9000,
                             commit_seconds=[0.01], commit_lag=[(V0, 0.7)])
        server.on_cycle(report)
        status, text = get(server.port, "/metrics")
        assert status == 200
        lines = set(text.splitlines())
        assert f'deltanode_vchannel_consumed_rows_total{{collection="7",vchannel="{V0}"}} 600.0' in lines
        assert f'deltanode_vchannel_committed_bytes_total{{collection="7",vchannel="{V0}"}} 12000.0' in lines
        assert f'deltanode_vchannel_checkpoint_lag_messages{{collection="7",vchannel="{V0}"}} 10.0' in lines
        assert f'deltanode_vchannel_up{{collection="7",vchannel="{V1}"}} 0.0' in lines
        assert f'deltanode_vchannel_commit_lag_seconds_bucket{{le="1.0",vchannel="{V0}"}} 1.0' in lines
        assert "deltanode_cycles_total 1.0" in lines and "deltanode_read_messages_total 50.0" in lines
        assert "deltanode_node_session_up 1.0" in lines and "deltanode_etcd_reachable 1.0" in lines
        lag = next(float(x.rsplit(" ", 1)[1]) for x in lines
                   if x.startswith(f'deltanode_vchannel_checkpoint_lag_seconds{{collection="7",vchannel="{V0}"'))
        assert 1.5 < lag < 10
        status, body = get(server.port, "/healthz")
        assert status == 503
        assert json.loads(body)["failing"] == {V1: "BrokerError: gone"}
        assert get(server.port, "/nothing")[0] == 404
    finally:
        server.stop()


def test_health_follows_the_node():
    ok, body = health(view([snap(V0)]))
    assert ok and body["status"] == "ok" and body["etcd"] == "reachable"
    ok, body = health(view([snap(V0)], down_since=time.time() - 30))
    assert ok and body["etcd"].startswith("unreachable for 30 s")   # an etcd outage alone: still persisting
    assert readiness(view([snap(V0)], down_since=time.time() - 30))[0] is True
    ok, body = health(view([snap(V0)], node_id=0))
    assert not ok and body["problems"] == ["no etcd session (registering)"]
    ok, body = health(view([], alive=False))
    assert not ok and "the pipeline loop stopped" in body["problems"]


def test_a_full_filesystem_keeps_the_node_sound_but_not_ready_and_sets_a_gauge():
    full = "storage full: /data/delta: No space left on device"
    snaps = [snap(V0, "failed", 3, "StorageFull: /data/delta: No space left on device (committing)")]
    node = NodeView(node_id=lambda: 5, snapshots=lambda: snaps, high_watermark=lambda p: 100,
                    pipeline_alive=lambda: True, etcd_down_since=lambda: None, etcd_error=lambda: "",
                    sessions_lost=lambda: 0, storage_full=lambda: full)
    ok, body = health(node)
    assert ok and body["problems"] == [] and body["outages"] == [full] and body["storage_full"] == full
    assert body["failing"] == {} and body["waiting_outside"] == 1 and body["persisting"] is False
    assert readiness(node)[0] is False
    assert health(view([snap(V0)]))[1]["storage_full"] is None
    server = MetricsServer(node, "127.0.0.1", 0).start()
    try:
        assert "deltanode_storage_full 1.0" in get(server.port, "/metrics")[1].splitlines()
        assert get(server.port, "/healthz")[0] == 200
        status, body = get(server.port, "/readyz")
        assert status == 503 and json.loads(body)["outages"] == [full]
    finally:
        server.stop()


def test_a_vchannel_failing_for_its_own_reason_beside_a_full_disk_fails_liveness():
    snaps = [snap(V0, "failed", 3, "StorageFull: /data/delta: No space left on device (committing)"),
             snap(V1, "failed", 1, "CommitFailed: OSError: bad")]
    ok, body = health(view(snaps))
    assert not ok and body["failing"] == {V1: "CommitFailed: OSError: bad"} and body["waiting_outside"] == 1


def test_a_checkpoint_at_its_pchannels_head_lags_no_seconds_however_old_its_tick():
    """A Milvus 2.6 pchannel at rest gets no TimeTick: its caught-up vchannels' ticks grow old."""
    from deltanode.datanode.metrics import DataNodeCollector
    snaps = [snap(V0, offset=100, tick_age=600.0), snap(V1, offset=99, tick_age=600.0)]
    family = next(m for m in DataNodeCollector(view(snaps)).collect()
                  if m.name == "deltanode_vchannel_checkpoint_lag_seconds")
    lags = {s.labels["vchannel"]: s.value for s in family.samples}
    assert lags[V0] == 0.0 and 599 < lags[V1] < 610
