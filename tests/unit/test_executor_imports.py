"""The executor package (what a Spark task runs) imports none of the driver's modules: a task's
Python worker loads only what reading, routing, writing and marking need, and a driver-only
dependency (delta-rs's Delta log, etcd, Spark's SQL side, the DataNode) never reaches it."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import deltanode.executor

APP = Path(deltanode.executor.__file__).parents[2]
DRIVER_ONLY = ("deltanode.pipeline", "deltanode.flowgraph", "deltanode.datanode", "deltanode.datacoord",
               "deltanode.etcd", "deltanode.standalone", "deltanode.admin", "deltanode.cli", "deltanode.config",
               "deltanode.storage.commit", "deltanode.storage.delta_log", "deltanode.storage.tables",
               "deltanode.storage.meta", "deltanode.storage.log_replay", "deltanode.storage.compaction",
               "deltanode.storage.current_state", "deltalake", "pyspark.sql", "aetcd", "boto3", "prometheus_client")


def test_the_executor_package_imports_no_driver_module():
    modules = ["deltanode.records"] + [f"deltanode.executor.{m.name}"
                                       for m in pkgutil.iter_modules(deltanode.executor.__path__)]
    code = (f"import sys; sys.path.insert(0, {str(APP)!r}); " + "; ".join(f"import {m}" for m in modules)
            + "; print('\\n'.join(sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "deltanode.executor.task" in loaded and "deltanode.executor.delete_marks" in loaded
    driver = sorted(m for m in loaded if m.startswith(DRIVER_ONLY))
    assert not driver, f"the executor package imports driver modules: {driver}"
