"""A real Milvus 2.3.5 standalone server for the integration tests.

The server is the one in the PyPI wheel ``milvus==2.3.5``, unpacked by ``build/milvus_env.sh``
into ``.venv-milvus/share/milvus/``. It runs against an etcd and a broker the caller gives: an
Apache Kafka (``mq="kafka"``, through the wheel's own librdkafka 1.9.1) or an Apache Pulsar
(``mq="pulsar"``, through Milvus's Go Pulsar client, with the broker's web port for its admin
calls). Milvus's DDL and DML then reach ``{root_path}-rootcoord-dml_{0..15}`` on that broker (on
Pulsar ``persistent://public/default/{root_path}-rootcoord-dml_{i}``), its metadata
``{root_path}/meta`` in that etcd. Every port it listens on is a free loopback port; its data, logs
and run files live under ``data_dir``.

    with MilvusServer(etcd.endpoint, broker.bootstrap_servers, tmp_path / "milvus") as milvus:
        with MilvusClient(milvus.uri) as client:   # tests/integration/milvus_client.py
            ...
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from deltanode.standalone.services import die_with_parent

ROOT = Path(__file__).resolve().parents[2]
SHARE = ROOT / ".venv-milvus" / "share" / "milvus"


class MilvusServerError(RuntimeError):
    """The Milvus server could not be started, or died."""


def _free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that are free right now (all held open while choosing)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# The listening ports of a standalone Milvus 2.3.5, by config key (milvus.yaml), plus the
# metrics/healthz HTTP port (default 9091), which 2.3 reads from the environment variable
# METRICS_PORT only. natsmq's (4222) is not opened with mq.type kafka or pulsar; moved all the same. Milvus
# listens on every interface (":port"); the *.ip keys only set the address it registers in etcd.
PORT_KEYS = ("proxy.port", "proxy.internalPort", "rootCoord.port", "dataCoord.port",
             "dataNode.port", "queryCoord.port", "queryNode.port", "indexNode.port",
             "natsmq.server.port")


def _dotted_keys(text: str) -> list[str]:
    """Every key of a block-style YAML text, dotted (``etcd.ssl.enabled``)."""
    found, stack = [], []
    for line in text.splitlines():
        m = re.match(r"^( *)([A-Za-z0-9_]+):", line)
        if m:
            while stack and stack[-1][0] >= len(m.group(1)):
                stack.pop()
            stack.append((len(m.group(1)), m.group(2)))
            found.append(".".join(k for _, k in stack))
    return found


def render_config(template: str, overrides: dict[str, object], new: frozenset[str] = frozenset()) -> str:
    """``template`` (the wheel's config.yaml.template: block-style YAML with ``{{ key: default }}``
    placeholders) with every placeholder at its default and each dotted key of ``overrides`` set.
    A key whose top-level section the template lacks is appended as a new section; a missing key
    inside an existing section is an error (a typo would otherwise be silently ignored), unless it
    is one of ``new``, keys the template leaves out on purpose (``pulsar.authPlugin``): those go
    first in their section."""
    text = re.sub(r"\{\{([^}:]*)(?::([^}]*))?\}\}",
                  lambda m: (m.group(2) or "").strip(), template)
    pending = dict(overrides)
    new = new - set(_dotted_keys(text))   # keys the template has are set in place, as any other
    out, stack = [], []  # stack: (indent, key) of the enclosing mappings
    for line in text.splitlines():
        m = re.match(r"^( *)([A-Za-z0-9_]+):(.*)$", line)
        if not m or line.lstrip().startswith("#"):
            out.append(line)
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        if dotted in pending:
            line = f"{m.group(1)}{key}: {_yaml_value(pending.pop(dotted))}"
        out.append(line)
        if indent == 0:
            for added in [k for k in pending if k in new and k.split(".")[:-1] == [key]]:
                out.append(f"  {added.rsplit('.', 1)[1]}: {_yaml_value(pending.pop(added))}")
    sections = {line.split(":", 1)[0] for line in out if re.match(r"^[A-Za-z0-9_]+:", line)}
    misplaced = [k for k in pending if k.split(".", 1)[0] in sections]
    if misplaced:
        raise ValueError(f"config keys not in the template's sections: {misplaced}")
    tree: dict = {}  # the keys of new sections, nested (one YAML key must not appear twice)
    for dotted, value in pending.items():
        *parents, leaf = dotted.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value

    def emit(node: dict, depth: int) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                out.append("  " * depth + f"{key}:")
                emit(value, depth + 1)
            else:
                out.append("  " * depth + f"{key}: {_yaml_value(value)}")
    emit(tree, 0)
    return "\n".join(out) + "\n"


def _yaml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))  # a JSON string is a valid YAML double-quoted scalar


MQ_TYPES = ("kafka", "pulsar")


class MilvusServer:
    """``milvus run standalone`` (Milvus 2.3.5) against a given etcd and Kafka or Pulsar broker.

    ``start()`` returns once ``/healthz`` answers and a collection could be created and dropped
    (Milvus reports healthy even when its Kafka client cannot talk to the broker; DDL then hangs).
    Measured here: a start takes ~2 s on a fresh root, ~13 s again on the same root after a stop
    and ~25 s after ``kill()`` (the old etcd sessions must expire: ``session_ttl``); collections
    that were loaded are reloaded in the background (``MilvusClient.load`` waits for it). A stop
    takes ~0 s idle, ~10 s with loaded collections. Idle it uses ~4% of a core (~7% with four
    loaded collections), ~300 MB of memory.
    """

    def __init__(self, etcd_endpoint: str, broker_address: str, data_dir: Path,
                 root_path: str = "by-dev", *, mq: str = "kafka", pulsar_web_port: int | None = None,
                 start_timeout: float = 180.0, probe_ddl: bool = True, session_ttl: int = 10,
                 proxy_port: int | None = None, config: dict[str, object] | None = None,
                 env: dict[str, str] | None = None) -> None:
        """``broker_address``: Kafka's bootstrap servers, or Pulsar's service URL
        (``pulsar://host:port``) with ``pulsar_web_port`` its web (admin REST) port.
        ``proxy_port``: where pymilvus connects (default: a free port, like every other).
        ``config``: milvus.yaml keys of the caller's (``etcd.ssl.enabled``, ...), set last;
        ``env``: environment variables of the caller's for the server process."""
        if mq not in MQ_TYPES:
            raise ValueError(f"mq must be one of {MQ_TYPES}, not {mq!r}")
        if mq == "pulsar" and (not broker_address.startswith("pulsar://") or not pulsar_web_port):
            raise ValueError("a Pulsar broker is given as pulsar://host:port with its pulsar_web_port")
        self.proxy_port = proxy_port
        self.etcd_endpoint = etcd_endpoint
        self.mq = mq
        self.broker_address = broker_address
        self.pulsar_web_port = pulsar_web_port
        self.data_dir = Path(data_dir).resolve()
        self.root_path = root_path
        self.start_timeout = start_timeout
        self.probe_ddl = probe_ddl
        self.session_ttl = session_ttl
        self.extra_config = dict(config or {})
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}
        self.start_seconds: float | None = None

    # --- what the tests use ---------------------------------------------------------------
    @property
    def uri(self) -> str:
        """host:port of the proxy (gRPC, for pymilvus; also Milvus's REST API v1)."""
        return f"127.0.0.1:{self.ports['proxy.port']}"

    @property
    def metrics_port(self) -> int:
        return self.ports["METRICS_PORT"]

    @property
    def meta_root(self) -> str:
        """etcd prefix of Milvus's metadata: ``{etcd.rootPath}/{etcd.metaSubPath}``."""
        return f"{self.root_path}/meta"

    @property
    def pchannel_prefix(self) -> str:
        """Topic prefix of the DML pchannels (``{prefix}_{0..15}``):
        ``{common.chanNamePrefix.cluster}-{common.chanNamePrefix.rootCoordDml}``; the cluster
        prefix is set to ``root_path``, so two servers with different roots share no topic."""
        return f"{self.root_path}-rootcoord-dml"

    @property
    def log(self) -> Path:
        """stdout and stderr of the server (Go and C++ logs alike)."""
        return self.data_dir / "milvus.log"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "configs" / "milvus.yaml"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # --- start / stop ---------------------------------------------------------------------
    def config(self) -> dict[str, object]:
        d = self.data_dir
        ports = self.ports
        return {
            # metadata in the caller's etcd, under root_path
            "etcd.endpoints": self.etcd_endpoint,
            "etcd.rootPath": self.root_path,
            "etcd.use.embed": False,
            "etcd.data.dir": str(d / "etcd.data"),  # unused (not embedded)
            "etcd.log.path": "stdout",
            # messages on the caller's broker; topic names start with root_path
            **self._mq_config(),
            "common.chanNamePrefix.cluster": self.root_path,
            # segments and indexes on local disk
            "common.storageType": "local",
            "localStorage.path": str(d / "data") + "/",
            "rocksmq.path": str(d / "rocksmq"),  # unused (mq.type kafka or pulsar)
            "natsmq.server.storeDir": str(d / "nats"),  # unused
            "natsmq.server.monitor.logFile": str(d / "logs" / "nats.log"),
            # ports: free ones
            **{k: ports[k] for k in PORT_KEYS},
            "indexCoord.bindIndexNodeMode.address": f"127.0.0.1:{ports['indexNode.port']}",
            **{f"{role}.ip": "127.0.0.1" for role in (
                "rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")},
            # logs: stdout only (captured in self.log)
            "log.file.rootPath": "",
            "log.level": "info",
            # fewer threads on a 2-core machine (channel counts stay at Milvus's defaults: 16)
            "queryNode.segcore.knowhereThreadPoolNumRatio": 1,
            # a restart on the same root waits until the old process's etcd sessions expire
            # (even after a graceful stop): this long (s) instead of Milvus's 30
            "common.session.ttl": self.session_ttl,
            # the QueryNode waits this long (s) at stop to hand its segments over (to nobody)
            "common.gracefulStopTimeout": 3,
            **self.extra_config,
        }

    def _mq_config(self) -> dict[str, object]:
        if self.mq == "kafka":
            return {
                "mq.type": "kafka",
                "kafka.brokerList": self.broker_address,
                # a consumer polls this long (s), and a graceful stop waits out each consumer's poll in
                # turn: with the default 10 s, stopping with loaded collections took more than 30 s
                "kafka.readTimeout": 1,
            }
        port = self.broker_address.rsplit(":", 1)[1]
        return {
            "mq.type": "pulsar",
            # an address with a port is taken as the service URL; the port key serves one without
            "pulsar.address": self.broker_address,
            "pulsar.port": int(port),
            # Milvus's admin calls (topic and subscription removal) go to http://{host}:{webport}
            "pulsar.webport": self.pulsar_web_port,
            "pulsar.tenant": "public",
            "pulsar.namespace": "default",
        }

    def start(self) -> "MilvusServer":
        binary = SHARE / "bin" / "milvus"
        if not binary.exists():
            raise MilvusServerError(f"no Milvus server at {SHARE}: run build/milvus_env.sh")
        if self.running():
            raise MilvusServerError("this Milvus server is already running")
        ports = _free_ports(len(PORT_KEYS) + 1)
        self.ports = dict(zip((*PORT_KEYS, "METRICS_PORT"), ports))
        if self.proxy_port:
            self.ports["proxy.port"] = self.proxy_port
        for sub in ("configs", "data", "logs", "run"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(render_config(
            (SHARE / "config.yaml.template").read_text(), self.config(), frozenset(self.extra_config)))
        glog = (SHARE / "glog.conf").read_text().replace(
            "--log_dir=logs/", f"--log_dir={self.data_dir / 'logs'}/")
        (self.data_dir / "configs" / "glog.conf").write_text(glog)
        env = dict(os.environ)
        env.update({
            "MILVUSCONF": str(self.data_dir / "configs"),
            "DEPLOY_MODE": "STANDALONE",
            "METRICS_PORT": str(self.metrics_port),
            "MILVUS_RUN_DIR": str(self.data_dir / "run"),
            # the wheel's own libraries, its librdkafka 1.9.1 among them
            "LD_LIBRARY_PATH": os.pathsep.join(
                [str(SHARE / "lib")] +
                [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]),
            **self.extra_env,
        })
        t0 = time.monotonic()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([str(binary), "run", "standalone"], cwd=self.data_dir,
                                         env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=die_with_parent)
        try:
            self._wait_healthy(t0 + self.start_timeout)
            if self.probe_ddl:
                self._probe_ddl(t0 + self.start_timeout)
        except BaseException:
            self.kill()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _fail(self, why: str) -> MilvusServerError:
        return MilvusServerError(f"Milvus {why}; config {self.config_path}, log {self.log}:\n"
                                 f"{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode(errors="replace")
        except OSError:
            return "(no log)"

    def _wait_healthy(self, deadline: float) -> None:
        url = f"http://127.0.0.1:{self.metrics_port}/healthz"
        while True:
            if self.proc.poll() is not None:
                raise self._fail(f"exited with code {self.proc.returncode} at start")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise self._fail(f"did not report healthy on {url} within {self.start_timeout:.0f} s")
            time.sleep(0.25)

    def _rest(self, path: str, body: dict, timeout: float) -> dict:
        req = urllib.request.Request(f"http://{self.uri}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")

    def _probe_ddl(self, deadline: float) -> None:
        """Create and drop a small collection through the proxy's REST API (v1): this is what
        hangs when Milvus's producer cannot talk to the broker, although /healthz is OK.
        It leaves one CreateCollection and one DropCollection on a DML channel."""
        name = f"deltanode_probe_{os.urandom(4).hex()}"
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self._fail(f"exited with code {self.proc.returncode} at start")
            try:
                left = max(1.0, deadline - time.monotonic())
                r = self._rest("/v1/vector/collections/create",
                               {"collectionName": name, "dimension": 2}, timeout=left)
                if r.get("code") == 200:
                    r = self._rest("/v1/vector/collections/drop", {"collectionName": name}, timeout=left)
                    if r.get("code") == 200:
                        return
                last = r
            except (OSError, urllib.error.URLError, ValueError) as e:
                last = e
            time.sleep(0.5)
        raise self._fail(f"is healthy but could not create and drop a collection within "
                         f"{self.start_timeout:.0f} s (last answer: {last!r}); a {self.mq} client that "
                         f"cannot talk to {self.broker_address} looks like this")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Milvus stops its components in turn), SIGKILL after ``timeout`` s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL: no graceful stop (sessions stay in etcd until their lease expires)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def __enter__(self) -> "MilvusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Run a Milvus 2.3.5 in the foreground until Ctrl-C (for trying mirror mode: README)."""
    import argparse
    p = argparse.ArgumentParser(prog="build/milvus.sh", description=main.__doc__)
    p.add_argument("--etcd", default="127.0.0.1:2379", help="etcd endpoint (default 127.0.0.1:2379)")
    p.add_argument("--kafka", default="127.0.0.1:9092", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    p.add_argument("--pulsar", metavar="URL", help="an Apache Pulsar's service URL (pulsar://host:port): "
                   "Milvus on Pulsar (mq.type pulsar) instead of Kafka")
    p.add_argument("--pulsar-web-port", type=int, default=8080, help="that Pulsar's web port (default 8080)")
    p.add_argument("--data-dir", default="var/milvus", help="its data and log (default var/milvus)")
    p.add_argument("--root", default="by-dev", help="etcd.rootPath and topic prefix (default by-dev)")
    p.add_argument("--port", type=int, default=19530, help="the proxy's port, for pymilvus (default 19530)")
    args = p.parse_args(argv)
    broker = args.pulsar or args.kafka
    server = MilvusServer(args.etcd, broker, Path(args.data_dir), args.root, proxy_port=args.port, probe_ddl=False,
                          mq="pulsar" if args.pulsar else "kafka", pulsar_web_port=args.pulsar_web_port)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    server.start()
    print(f"Milvus 2.3.5 up in {server.start_seconds:.1f} s: pymilvus at {server.uri}, meta {server.meta_root} "
          f"in etcd {args.etcd}, topics {server.pchannel_prefix}_* on {broker}; log {server.log}; Ctrl-C stops it",
          flush=True)
    try:
        while not stop and server.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0 if not server.proc or server.proc.returncode in (0, -15) else 1


if __name__ == "__main__":
    raise SystemExit(main())
