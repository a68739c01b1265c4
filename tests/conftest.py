"""Shared fixtures: real etcd, a real Apache Kafka broker, a local Spark session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "build"))   # the benchmark's helpers (not shipped in the app zip)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from deltanode.standalone.kafka_server import EmbeddedKafka  # noqa: E402
from deltanode.standalone.services import EmbeddedEtcd  # noqa: E402


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory):
    with EmbeddedEtcd(tmp_path_factory.mktemp("etcd")) as etcd:
        yield etcd


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    with EmbeddedKafka(tmp_path_factory.mktemp("kafka")) as b:
        yield b


@pytest.fixture
def etcd_root(request) -> str:
    """A fresh etcd key root per test, so tests sharing one etcd never see each other's keys."""
    return f"test/{request.node.name}/{os.urandom(3).hex()}/meta"


# The suite's longest files (of tests/integration), longest first. build/test.sh hands whole files
# to two workers (pytest-xdist's ``--dist loadfile``, so a module's fixtures start once);
# starting the long ones first keeps both workers busy to the end. Every other file follows, in order.
LONGEST_FIRST = (
    "test_broker_faults", "test_nemesis", "test_crash_recovery", "test_milvus_history", "test_real_milvus",
    "test_standalone", "test_lake", "test_datanode_process", "test_etcd_outage", "test_secured_pulsar",
    "test_yarn", "test_admin_verify", "test_secured_etcd", "test_compaction", "test_secured_kafka",
    "test_pipeline_isolation", "test_milvus26_reorder", "test_milvus26_idle", "test_delta_readers",
    "test_object_storage_faults", "test_disk_full", "test_structured_streaming_reference",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> int:
        return rank.get(item.path.stem, len(rank)) if item.path.parent.name == "integration" else len(rank)
    items.sort(key=place)   # stable: a file's tests keep their order
