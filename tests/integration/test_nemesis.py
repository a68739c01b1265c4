"""The nemesis's short fixed-seed forms (build/deltanode_nemesis/): a standalone and a second
DataNode under Milvus-like traffic (4 collections, about 10 DML messages a second) while a seeded
schedule breaks things for a minute; then every row the broker holds once in Delta (a multiset),
deletes and upserts applied, DuckDB and Spark reading every table. Two runs, each about two minutes:

- Apache Kafka, the storage root on a tmpfs of 256 MB, every kind a tmpfs run has to draw from;
  seed 22 draws both nodes and etcd killed, etcd paused, the nodes cut off from Kafka through the
  relay (``partition-broker``) and the disk filled twice while the nodes commit (``fill-disk``).
- Apache Pulsar, the storage root on the power-cut filesystem; seed 1 draws the machine losing
  power three times (``power-cut``: both nodes' trees SIGKILLed, unsynced writes dropped), the
  nodes cut off from Pulsar through the relay twice, and Pulsar killed.

Each asserts PASS and that its storage fault and its partition took effect: the disk left with no
free block and the nodes saying the storage is full, the power cut, the nodes saying the broker is
unreachable. Both mount a filesystem, so they need root (as CI has). The long runs are by hand:
docs/faults.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the nemesis's storage modes mount a filesystem: root only")


def nemesis(workdir: Path, *args: str) -> list[str]:
    """A one-minute run of ``build/nemesis.py`` with ``args``: its output lines, after checking it
    passed."""
    out = subprocess.run([sys.executable, str(ROOT / "build" / "nemesis.py"), "--minutes", "1", "--collections", "4",
                          "--rate", "10", "--workdir", str(workdir), *args],
                         capture_output=True, text=True, timeout=1200)
    lines = [line for line in out.stdout.splitlines() if "rdkafka" not in line]
    print("\n".join(lines))
    assert out.returncode == 0 and lines[-1].endswith("PASS"), (out.stderr[-3000:], sorted(
        p.name for p in (workdir / "logs").iterdir()))
    return lines


def count(lines: list[str], pattern: str) -> int:
    """The number the first line matching ``pattern`` (one group) gives; 0 when none does."""
    found = [m for m in map(re.compile(pattern).search, lines) if m]
    return int(found[0].group(1)) if found else 0


def test_a_minute_on_kafka_with_the_disk_filled_and_the_nodes_cut_off_loses_and_doubles_nothing(tmp_path):
    lines = nemesis(tmp_path / "run", "--seed", "22", "--storage", "tmpfs", "--disk-mb", "256")
    injected = next(line for line in lines if "faults injected" in line)
    assert all(kind in injected for kind in ("fill-disk", "partition-broker", "kill-", "pause-")), injected
    assert count(lines, r"(\d+) left no free block") >= 1
    assert count(lines, r"storage full x(\d+)") >= 1, "no node said its storage was full"
    assert count(lines, r"broker unreachable x(\d+)") >= 1, "no node said the broker was unreachable"


def test_a_minute_on_pulsar_with_power_cuts_and_the_nodes_cut_off_loses_and_doubles_nothing(tmp_path):
    lines = nemesis(tmp_path / "run", "--seed", "1", "--storage", "powercut", "--mq", "pulsar",
                    "--faults", "power-cut,partition-broker,kill-broker,pause-datanode")
    injected = next(line for line in lines if "faults injected" in line)
    assert "power-cut" in injected and "partition-broker" in injected, injected
    assert count(lines, r"power-cut: (\d+) cut\(s\)") >= 1
    assert count(lines, r"broker unreachable x(\d+)") >= 1, "no node said the broker was unreachable"
