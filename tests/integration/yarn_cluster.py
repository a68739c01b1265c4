"""Hadoop YARN on one machine for the tests: a ResourceManager and one NodeManager in one JVM.

Hadoop's MiniYARNCluster (``hadoop-client-minicluster`` 3.5.0, the Hadoop client pyspark 4.2.0
ships), started by the launcher ``build/jvm/yarn/src/YarnLauncher.java`` that ``build/bootstrap.sh``
compiles beside its jars. The launcher writes ``yarn-site.xml`` and ``core-site.xml`` into
``conf_dir`` once the NodeManager has registered: ``HADOOP_CONF_DIR=conf_dir`` is all a Spark
client needs to submit to it. The containers run as this user, in the cluster's work directory
under ``data_dir``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

from deltanode.config.jars import component_jars
from deltanode.config.jvm_options import C1_ONLY
from deltanode.standalone.services import ServiceError, _Process, die_with_parent

READY_TIMEOUT = 180.0   # ~10 s alone; the machine is shared with other JVMs starting
_READY = re.compile(r"^YARN ready: resourcemanager (?P<rm>\S+) webapp (?P<web>\S+) workdir (?P<work>\S+)$", re.M)

_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.hadoop.yarn.server.resourcemanager.RMAppManager$ApplicationSummary=INFO
log4j.logger.org.apache.hadoop.yarn.server.nodemanager.containermanager.container.ContainerImpl=INFO
"""


# On the JVM's class path, so every Configuration of the NodeManager reads it: the local file system
# that sets permissions without a chmod process per file (build/jvm/yarn/src/NioLocalFs.java).
_DAEMON_CORE_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>fs.AbstractFileSystem.file.impl</name><value>NioLocalFs</value></property>
</configuration>
"""


class YarnCluster(_Process):
    """A single-node YARN (runs beside the tests): ``memory_mb`` and ``vcores`` for containers,
    the JVM's heap bounded by ``heap``."""

    name = "YARN (MiniYARNCluster)"

    def __init__(self, data_dir: str | Path, *, memory_mb: int = 6144, vcores: int = 4, heap: str = "512m") -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.memory_mb, self.vcores, self.heap = memory_mb, vcores, heap
        self.resourcemanager = self.webapp = ""
        self.work_dir = Path()

    @property
    def conf_dir(self) -> Path:
        """For ``HADOOP_CONF_DIR``: the ResourceManager's addresses and ``fs.defaultFS=file:///``."""
        return self.data_dir / "conf"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "yarn.log"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log4j = self.data_dir / "log4j.properties"
        log4j.write_text(_LOG4J)
        site = self.data_dir / "daemon-conf"
        site.mkdir(exist_ok=True)
        (site / "core-site.xml").write_text(_DAEMON_CORE_SITE)
        classpath = os.pathsep.join([str(site), *(str(j) for j in component_jars("yarn"))])
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        with open(self.log_path, "ab") as out:
            # MiniYARNCluster puts its work directories under ./target: the data directory.
            self.proc = subprocess.Popen(
                [java, f"-Xmx{self.heap}", C1_ONLY, "-XX:+UseSerialGC", "-Djava.awt.headless=true",
                 f"-Dlog4j.configuration=file:{log4j}", "-cp", classpath, "YarnLauncher", str(self.conf_dir),
                 str(self.memory_mb), str(self.vcores)],
                cwd=self.data_dir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + READY_TIMEOUT
        while not (ready := _READY.search(self.log_path.read_text(errors="replace"))):
            if self.proc.poll() is not None:
                raise ServiceError(f"{self.name} exited with code {self.proc.returncode} at start; see "
                                   f"{self.log_path}:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"{self.name}: no NodeManager registered within {READY_TIMEOUT:.0f} s; "
                                   f"see {self.log_path}")
            time.sleep(0.2)
        self.resourcemanager, self.webapp, self.work_dir = ready["rm"], ready["web"], Path(ready["work"])

    def rest(self, path: str) -> dict:
        """The ResourceManager's REST API, e.g. ``rest("apps")``: ``/ws/v1/cluster/apps``."""
        with urllib.request.urlopen(f"http://{self.webapp}/ws/v1/cluster/{path}", timeout=10) as answer:
            return json.load(answer)

    def apps(self) -> list[dict]:
        """Every application the ResourceManager knows, finished ones included."""
        return (self.rest("apps").get("apps") or {}).get("app", [])

    def app(self, app_id: str) -> dict:
        return self.rest(f"apps/{app_id}")["app"]
