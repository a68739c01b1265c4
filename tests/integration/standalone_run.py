"""Running ``./spark-submit.sh standalone`` as a user does, for the integration tests that start it:
its environment of its own, admin commands, waiting for committed rows, Ctrl-C, leftover processes."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

from .admin_in_process import admin_in_process

ROOT = Path(__file__).resolve().parents[2]


def service_port() -> int:
    """A loopback port free now and below the kernel's ephemeral range, for a service a test starts
    again on the same port: a port of that range (``free_port``) can meanwhile be taken as the source
    port of some outgoing connection, and the restarted service then finds it in use."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(20000, max(20001, low))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def _env(tmp_path: Path, mq: str, metrics_port: int) -> dict[str, str]:
    """A standalone run of its own: free ports (each started again on the same port by the tests
    that restart it), data and tables under ``tmp_path``."""
    return dict(os.environ, DELTANODE_METRICS_PORT=str(metrics_port),
                DELTANODE_ETCD_ENDPOINTS=f"127.0.0.1:{service_port()}",
                DELTANODE_MQ_TYPE=mq,
                DELTANODE_MQ_KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{service_port()}",
                DELTANODE_MQ_PULSAR_SERVICE_URL=f"pulsar://127.0.0.1:{service_port()}",
                DELTANODE_EMBEDDED_DATA_DIR=str(tmp_path / "var"), DELTANODE_STORAGE_ROOT=str(tmp_path / "delta"),
                DELTANODE_MQ_PCHANNEL_COUNT="2",
                DELTANODE_STANDALONE_PROGRESS_INTERVAL="2s", DELTANODE_DATANODE_TRIGGER_INTERVAL="300ms")


def admin(env, *args) -> tuple[int, object]:
    out = subprocess.run([str(ROOT / "spark-submit.sh"), "admin", *args, "--conf", "conf/standalone.conf"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return out.returncode, (json.loads(out.stdout) if out.stdout.strip() else out.stderr)


def create_collection(env, tmp_path: Path, name: str, dim: int) -> dict:
    """``admin create-collection`` of a two-shard collection (an Int64 key, a FloatVector of ``dim``)."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"fields": [{"name": "pk", "data_type": "Int64", "is_primary_key": True},
                                             {"name": "vec", "data_type": "FloatVector", "dim": dim}]}))
    rc, created = admin(env, "create-collection", "--name", name, "--schema", str(schema), "--shards", "2")
    assert rc == 0, created
    return created


def serve_a_collection(env, tmp_path: Path, name: str, log_path: Path) -> dict:
    """``admin create-collection`` of a small collection, 1,000 rows produced into it, and the wait
    until standalone committed them all; the collection as created."""
    created = create_collection(env, tmp_path, name, dim=8)
    rc, produced = admin(env, "produce", "--collection", name, "--messages", "10", "--rows", "100", "--deletes", "0")
    assert rc == 0 and produced["rows"] == 1000, produced
    wait_for_rows(env, name, 1000, 120, log_path)
    return created


def wait_until_rows(env: dict, collection: str, ok, timeout: float, log_path: Path) -> int:
    """Until ``ok(rows)`` holds for ``admin show-segments``' row count of ``collection`` (run in this
    process: a poll); that count."""
    deadline = time.monotonic() + timeout
    while True:
        rc, segments = admin_in_process(env, "conf/standalone.conf", "show-segments", "--collection", collection)
        rows = sum(s["num_rows"] for s in segments) if rc == 0 else 0
        if ok(rows):
            return rows
        assert time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.2)


def wait_for_rows(env: dict, collection: str, rows: int, timeout: float, log_path: Path) -> None:
    """Until ``admin show-segments`` counts ``rows`` rows in ``collection``; the log's tail if not."""
    wait_until_rows(env, collection, lambda n: n >= rows, timeout, log_path)


def start(env: dict, log_path: Path) -> subprocess.Popen:
    """``./spark-submit.sh standalone`` in its own session, once it logged "standalone up"."""
    proc = subprocess.Popen([str(ROOT / "spark-submit.sh"), "standalone", "--conf", "conf/standalone.conf"],
                            cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while "standalone up" not in log_path.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise AssertionError(log_path.read_text()[-3000:])
        time.sleep(0.5)
    return proc


def stop(proc: subprocess.Popen) -> int:
    """Ctrl-C in the terminal; its exit code."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:   # it had exited, and everything it started with it
        pass
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def leftovers(tmp_path: Path, within: float = 10.0) -> str:
    """The processes of the run under ``tmp_path`` still there ``within`` seconds (an embedded service
    told to stop as its parent died takes a moment: Kafka's orderly shutdown ~0.7 s)."""
    deadline = time.monotonic() + within
    while True:
        left = subprocess.run(["pgrep", "-f", str(tmp_path / "var")], capture_output=True, text=True).stdout.strip()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
