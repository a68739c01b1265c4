"""spark-submit.sh and the packaging: help without a JVM, conf errors before a JVM, the zip,
and one real spark-submit round trip (a JVM, no SparkSession)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = re.search(r'__version__ = "([^"]+)"',
                    (ROOT / "app/deltanode/__init__.py").read_text()).group(1)
ZIP = ROOT / "build" / "dist" / f"deltanode-{VERSION}.zip"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELTANODE_")}
    env.update(extra)
    return env


def run(*argv, timeout=60, **env):
    return subprocess.run([str(ROOT / "spark-submit.sh"), *argv], capture_output=True,
                          text=True, timeout=timeout, env=_env(**env))


def test_help_answers_without_a_jvm():
    for argv in (["--help"], ["admin", "--help"], ["standalone", "--help"],
                 ["admin", "show-segments", "--help"], ["sql", "--help"]):
        t = time.monotonic()
        r = run(*argv)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("usage: spark-submit.sh"), r.stdout
        assert "Spark" not in r.stderr  # no spark-submit / JVM output
        assert time.monotonic() - t < 5


def test_conf_error_reported_before_a_jvm(tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("storage.root = x\netcd.endpoint = 127.0.0.1:2379\n")
    t = time.monotonic()
    r = run("datanode", "--conf", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"{bad}:2: unknown key 'etcd.endpoint' "
                                "(did you mean 'etcd.endpoints'?)")
    good = tmp_path / "good.conf"
    good.write_text("storage.root = x\n")
    r = run("datanode", "--conf", str(good), DELTANODE_NOPE="1")
    assert r.returncode == 2 and "env DELTANODE_NOPE: unknown variable" in r.stderr
    r = run("nosuchcommand")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    assert time.monotonic() - t < 10


def test_package_zip_imports_alone(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "build/package.sh")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(ZIP)
    names = zipfile.ZipFile(ZIP).namelist()
    assert "deltanode/__init__.py" in names and "deltanode/cli.py" in names
    assert "deltanode/config/__init__.py" in names and "deltanode/config/sections/storage.py" in names
    assert "deltanode/standalone/services.py" in names
    assert not [n for n in names if "__pycache__" in n]
    sources = {n[:-3] for n in names if n.endswith(".py")}
    assert sources == {n[:-4] for n in names if n.endswith(".pyc")}  # bytecode beside each module
    # only the zip (and the standard library) on sys.path: no site-packages, no app/
    code = (f"import sys; sys.path.insert(0, {str(ZIP)!r}); import deltanode.cli as c; "
            f"assert c.__file__.startswith({str(ZIP)!r}) and c.__file__.endswith('.pyc'), c.__file__; "
            "assert c.main(['admin', '--help']) == 0")
    r = subprocess.run([sys.executable, "-S", "-I", "-c", code], cwd=tmp_path,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "usage: spark-submit.sh admin" in r.stdout


def test_spark_submit_round_trip(tmp_path):
    """A real spark-submit: the driver imports deltanode from the zip and sees the conf,
    with environment overrides; spark.* keys reach spark-submit."""
    conf = tmp_path / "t.conf"
    conf.write_text("storage.root = delta\nspark.ui.enabled = false\n")
    r = run("datanode", "--conf", str(conf), "--print-conf", timeout=120,
            DELTANODE_MQ_PCHANNEL_COUNT="3", DELTANODE_SPARK_MASTER="local[1]")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert re.search(r"# deltanode \S+ from \S*deltanode-[^/]+\.zip/deltanode", out), out
    assert "mq.pchannel.count = 3  # env DELTANODE_MQ_PCHANNEL_COUNT" in out
    assert "spark.master = local[1]  # env DELTANODE_SPARK_MASTER" in out
    assert ZIP.exists()
