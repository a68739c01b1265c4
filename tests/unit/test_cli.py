"""The command line, in process: --help everywhere, dispatch, error exits, spark-submit glue."""

from __future__ import annotations

import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

from deltanode import cli
from deltanode.config import jvm_options as jvm
from deltanode.config.jars import component_jars

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(autouse=True)
def _no_logging_setup(monkeypatch):
    """cli.main configures the root logger; keep pytest's logging as it is."""
    monkeypatch.setattr(cli, "setup_logging", lambda level="INFO": None)


HELP_ARGV = [
    [], ["standalone"], ["datanode"], ["datacoord"], ["admin"],
    ["admin", "create-collection"], ["admin", "show-channels"], ["admin", "show-segments"],
    ["admin", "health"], ["sql"],
]


@pytest.mark.parametrize("argv", HELP_ARGV, ids=lambda a: " ".join(a) or "top")
def test_help_for_every_subcommand(argv, capsys):
    assert cli.main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: spark-submit.sh")
    if argv and argv != ["admin"]:
        assert "--conf FILE" in out


def test_help_does_not_import_spark_or_runners():
    code = ("import sys; from deltanode.cli import main; rc = main(['standalone', '--help']); "
            "bad = [m for m in sys.modules if m.startswith(('pyspark', 'py4j', 'deltanode.standalone.run',"
            " 'deltanode.datanode', 'deltanode.datacoord', 'deltanode.admin'))]; "
            "assert rc == 0 and not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "app", capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_usage_errors_exit_2(capsys):
    assert cli.main([]) == 2
    assert cli.main(["bogus"]) == 2
    assert cli.main(["datanode"]) == 2  # --conf is required
    assert cli.main(["admin", "show-segments", "--conf", "x.conf"]) == 2  # --collection
    assert "required" in capsys.readouterr().err


@pytest.fixture
def conf_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for k in list(__import__("os").environ):
        if k.startswith("DELTANODE_"):
            monkeypatch.delenv(k)
    p = tmp_path / "t.conf"
    p.write_text("storage.root = data\nlog.level = WARNING\nspark.ui.enabled = false\n")
    return p


def test_conf_error_exit_2(tmp_path, capsys, conf_file):
    bad = tmp_path / "bad.conf"
    bad.write_text("storage.root = x\ndatanode.read.splits = x\n")
    assert cli.main(["datanode", "--conf", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"{bad}:2: bad value for 'datanode.read.splits': 'x' is not an integer")
    assert cli.main(["datanode", "--conf", str(tmp_path / "missing.conf")]) == 2
    assert "conf file not found" in capsys.readouterr().err


def _fake_module(monkeypatch, name: str, **funcs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(funcs)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


def test_dispatch_to_runners(monkeypatch, conf_file):
    seen = {}
    for command in ("standalone", "datanode", "datacoord"):
        _fake_module(monkeypatch, f"deltanode.{command}.run",
                     run=lambda conf, c=command: seen.setdefault(c, conf) and 0)
        assert cli.main([command, "--conf", str(conf_file)]) == 0
        assert seen[command].get("storage.root") == str(conf_file.parent / "data")


def test_dispatch_to_admin_commands(monkeypatch, conf_file):
    calls = []

    def create_collection(conf, args):
        calls.append((args.name, args.schema, args.shards))
        return 0

    _fake_module(monkeypatch, "deltanode.admin.commands", create_collection=create_collection,
                 health=lambda conf, args: 3)
    assert cli.main(["admin", "create-collection", "--name", "c", "--schema", "s.json",
                     "--shards", "2", "--conf", str(conf_file)]) == 0
    assert calls == [("c", "s.json", 2)]
    assert cli.main(["admin", "health", "--conf", str(conf_file)]) == 3
    assert cli.main(["admin", "show-channels", "--conf", str(conf_file)]) == 2  # no function


def test_dispatch_to_sql_with_its_query(monkeypatch, conf_file, capsys):
    seen = []
    _fake_module(monkeypatch, "deltanode.lake.sql_command", run=lambda conf, args: seen.append(args.query) or 0)
    assert cli.main(["sql", "--conf", str(conf_file), "SELECT count(*) FROM demo"]) == 0
    assert seen == ["SELECT count(*) FROM demo"]
    assert cli.main(["sql", "--conf", str(conf_file)]) == 2
    assert "QUERY is required" in capsys.readouterr().err
    assert cli.main(["sql", "--conf", str(conf_file), "--print-conf"]) == 0   # no query needed


def test_admin_takes_conf_before_or_after_its_command(monkeypatch, conf_file, capsys):
    _fake_module(monkeypatch, "deltanode.admin.commands", health=lambda conf, args: 3)
    assert cli.main(["admin", "--conf", str(conf_file), "health"]) == 3
    assert cli.main(["admin", "health", "--conf", str(conf_file)]) == 3
    assert cli.main(["admin", "health"]) == 2
    assert "admin health: --conf FILE is required (before or after health)" in capsys.readouterr().err


def test_missing_module_exit_2(monkeypatch, conf_file, capsys):
    def fail(name, *a, **k):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(cli.importlib, "import_module", fail)
    assert cli.main(["datacoord", "--conf", str(conf_file)]) == 2
    assert "deltanode.datacoord.run is not part of this build" in capsys.readouterr().err


def test_service_error_exit_1(monkeypatch, conf_file, capsys):
    from deltanode.standalone.services import PortInUseError

    def run(conf):
        raise PortInUseError("etcd client port: port 127.0.0.1:1 is already in use")

    _fake_module(monkeypatch, "deltanode.standalone.run", run=run)
    assert cli.main(["standalone", "--conf", str(conf_file)]) == 1
    assert "127.0.0.1:1 is already in use" in capsys.readouterr().err


def test_print_conf(conf_file, capsys, monkeypatch):
    monkeypatch.setenv("DELTANODE_MQ_PCHANNEL_COUNT", "4")
    assert cli.main(["datanode", "--conf", str(conf_file), "--print-conf"]) == 0
    out = capsys.readouterr().out
    assert "mq.pchannel.count = 4  # env DELTANODE_MQ_PCHANNEL_COUNT" in out
    assert f"storage.root = {conf_file.parent / 'data'}  # {conf_file}:1" in out
    assert "spark.ui.enabled = false" in out


def test_spark_submit_args(conf_file, monkeypatch, tmp_path):
    monkeypatch.setattr(jvm, "cds_archive", lambda: tmp_path / "not-made.jsa")
    assert cli.spark_submit_args(["datanode", "--conf", str(conf_file)]) == [
        "--conf", "spark.ui.enabled=false", "--conf", "spark.master=local[2]",
        "--conf", "spark.driver.defaultJavaOptions=-XX:TieredStopAtLevel=1",
        "--conf", "spark.executor.defaultJavaOptions=-XX:TieredStopAtLevel=1",
        "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.scheduler.mode=FAIR",
        "--conf", "spark.python.unix.domain.socket.enabled=true", "--conf", "spark.app.name=deltanode-datanode",
        "--conf", "spark.jars=" + ",".join(str(p) for p in component_jars("delta"))]
    monkeypatch.setenv("DELTANODE_SPARK_MASTER", "local[1]")
    monkeypatch.setenv("DELTANODE_SPARK_DRIVER_DEFAULTJAVAOPTIONS", "-Xss4m")
    opts = cli.spark_submit_args(["admin", "health", "--conf", str(conf_file)])
    assert "spark.master=local[1]" in opts and "spark.app.name=deltanode-admin" in opts
    assert "spark.driver.defaultJavaOptions=-Xss4m" in opts  # the conf wins over the defaults


def test_executors_on_a_shipped_environment_leave_the_driver_on_this_python(conf_file, monkeypatch):
    monkeypatch.setenv("DELTANODE_SPARK_PYSPARK_PYTHON", "./env/bin/python")
    monkeypatch.setenv("DELTANODE_SPARK_ARCHIVES", "/d/deltanode-env.tar.gz#env")
    opts = cli.spark_submit_args(["datanode", "--conf", str(conf_file)])
    assert "spark.pyspark.python=./env/bin/python" in opts and f"spark.pyspark.driver.python={sys.executable}" in opts
    monkeypatch.setenv("DELTANODE_SPARK_SUBMIT_DEPLOYMODE", "cluster")   # the driver runs on the cluster too
    opts = cli.spark_submit_args(["datanode", "--conf", str(conf_file)])
    assert not any(o.startswith("spark.pyspark.driver.python=") for o in opts)


def test_spark_submit_args_use_the_class_archive_when_bootstrap_made_one(conf_file, monkeypatch, tmp_path):
    archive = tmp_path / "spark-cds.jsa"
    archive.write_bytes(b"")
    monkeypatch.setattr(jvm, "cds_archive", lambda: archive)
    opts = cli.spark_submit_args(["datanode", "--conf", str(conf_file)])
    assert f'spark.driver.defaultJavaOptions=-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile="{archive}"' in opts
    assert "spark.executor.defaultJavaOptions=-XX:TieredStopAtLevel=1" in opts  # no such file on executor hosts


def test_spark_args_main_checks_ports_before_jvm(conf_file, capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setenv("DELTANODE_EMBEDDED_ETCD", "true")
        monkeypatch.setenv("DELTANODE_ETCD_ENDPOINTS", f"127.0.0.1:{port}")
        assert cli._spark_args_main(["standalone", "--conf", str(conf_file)]) == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port} is already in use" in err and "etcd.endpoints" in err


def test_admin_output_into_a_closed_pipe_stops_quietly(conf_file):
    """``admin show-segments | head``: no traceback when the reader goes away (exit 141, as Unix tools)."""
    script = f"""
import sys, types
from deltanode import cli
fake = types.ModuleType("deltanode.admin.commands")
def health(conf, args):
    for i in range(200000):
        print('{{"segment_id": %d}}' % i)
fake.health = health
sys.modules["deltanode.admin.commands"] = fake
sys.exit(cli.main(["admin", "health", "--conf", {str(conf_file)!r}]))
"""
    proc = subprocess.run(["bash", "-c", f'"{sys.executable}" -c "$0" | head -c 10 >/dev/null; '
                                         'echo "rc=${PIPESTATUS[0]}" >&2', script],
                          capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr and "rc=141" in proc.stderr, proc.stderr
