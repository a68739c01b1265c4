"""The nemesis's short fixed-seed form: a standalone and a second DataNode under Milvus-like
traffic while seed 7's schedule kills and pauses them, Apache Kafka and etcd for a minute; then
every row the broker holds once in Delta, deletes and upserts applied, DuckDB and Spark reading
every table (build/deltanode_nemesis/). The long runs are by hand: docs/testing.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_minute_of_mixed_faults_loses_and_doubles_nothing(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "build" / "nemesis.py"), "--seed", "7", "--minutes", "1",
                          "--collections", "4", "--rate", "10", "--workdir", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=1200)
    lines = [line for line in out.stdout.splitlines() if "rdkafka" not in line]
    print("\n".join(lines))
    assert out.returncode == 0 and lines[-1].endswith("PASS"), (out.stderr[-3000:], sorted(
        p.name for p in (tmp_path / "run" / "logs").iterdir()))
    assert "faults injected" in out.stdout and "kill" in out.stdout
