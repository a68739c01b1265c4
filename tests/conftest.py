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
