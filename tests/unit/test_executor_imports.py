"""The executor package (what a Spark task runs) imports none of the driver's modules: a task's
Python worker loads only what reading, routing, writing and marking need, and a driver-only
dependency (delta-rs's Delta log, etcd, Spark's SQL side, the DataNode) never reaches it."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import deltanode.executor

APP = Path(deltanode.executor.__file__).parents[2]
DRIVER_ONLY = ("deltanode.pipeline", "deltanode.vchannel", "deltanode.datanode", "deltanode.datacoord",
               "deltanode.etcd", "deltanode.jobs.launch", "deltanode.standalone", "deltanode.admin", "deltanode.cli",
               "deltanode.config",
               "deltanode.state.commit", "deltanode.delta.delta_log", "deltanode.delta.tables",
               "deltanode.state.meta", "deltanode.delta.log_replay", "deltanode.state.compaction_plan",
               "deltanode.state.current_state", "deltalake", "pyspark.sql", "aetcd", "boto3", "prometheus_client")


def test_the_executor_package_imports_no_driver_module():
    """Nor does the executor side of the job contract (``jobs.contract``: every task runs through it)."""
    modules = ["deltanode.records", "deltanode.jobs.contract"] + [f"deltanode.executor.{m.name}"
                                       for m in pkgutil.iter_modules(deltanode.executor.__path__)]
    code = (f"import sys; sys.path.insert(0, {str(APP)!r}); " + "; ".join(f"import {m}" for m in modules)
            + "; print('\\n'.join(sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert all(m in loaded for m in ("deltanode.jobs.contract", "deltanode.executor.task",
                                     "deltanode.executor.delete_mark_task", "deltanode.executor.rewrite_task"))
    driver = sorted(m for m in loaded if m.startswith(DRIVER_ONLY))
    assert not driver, f"the executor package imports driver modules: {driver}"


def _imported(module_file: Path) -> set[str]:
    """The deltanode modules a file imports, resolved to absolute names (static: its import lines)."""
    import ast
    package = ".".join(module_file.relative_to(APP).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(module_file.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            name = ".".join(p for p in (base, node.module or "") if p)
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("deltanode.")}


def test_storage_imports_neither_the_executor_nor_the_driver_s_stages():
    """Storage is the bottom layer: the executor writes through it, the driver commits through it;
    it imports neither (its path helpers live in storage.written_files)."""
    above = ("deltanode.executor", "deltanode.pipeline", "deltanode.vchannel", "deltanode.datanode",
             "deltanode.datacoord", "deltanode.standalone", "deltanode.admin")
    wrong = {f"{f.relative_to(APP)}: {m}" for f in (APP / "deltanode" / "storage").glob("*.py")
             for m in _imported(f) if m.startswith(above)}
    assert not wrong, f"storage imports modules above it: {sorted(wrong)}"


def test_the_shared_records_load_no_client_library():
    """``records`` crosses the driver/executor line both ways: importing it loads no broker, etcd or
    Spark client (a task's ``Broker`` is a type there; the task module brings the client it uses)."""
    code = (f"import sys; sys.path.insert(0, {str(APP)!r}); import deltanode.records; "
            "print('\\n'.join(sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    clients = sorted(m for m in loaded if m.split(".")[0] in ("confluent_kafka", "pulsar", "_pulsar", "grpc", "aetcd",
                                                              "pyspark", "deltalake", "boto3"))
    assert "deltanode.records" in loaded and not clients, f"deltanode.records loads client libraries: {clients}"


def test_the_settings_load_no_spark():
    """Reading the conf into ``Settings`` loads no Spark: the sections (``config.sections``) are plain
    dataclasses, apart from the packages that take them and run Spark jobs."""
    code = (f"import sys; sys.path.insert(0, {str(APP)!r}); import deltanode.config.settings; "
            "print('\\n'.join(sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    spark = sorted(m for m in loaded if m.split(".")[0] in ("pyspark", "py4j"))
    assert "deltanode.config.settings" in loaded and not spark, f"deltanode.config.settings loads Spark: {spark[:5]}"
