"""Embedded service processes for single-machine runs and tests: etcd here, Apache Kafka in
``kafka_server``, Apache Pulsar in ``pulsar_server``.

Each binds to loopback only. A port that is already taken is reported at once
(``PortInUseError``), never waited on.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..failure.errors import DeltaNodeError


class ServiceError(DeltaNodeError):
    """An embedded service could not be started."""


class PortInUseError(ServiceError):
    """The configured port is already bound by another process."""


def free_port() -> int:
    """A loopback port that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_port_free(port: int, what: str) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise PortInUseError(
                f"{what}: port 127.0.0.1:{port} is already in use; stop whatever holds it "
                f"or choose another port in the conf file") from None


def _wait_for_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"{what} exited with code {proc.returncode} at start; see {log}:\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    proc.kill()
    raise ServiceError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s; see {log}")


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies, however it dies (Linux),
    so an embedded service never outlives a killed standalone run."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class _Process:
    """A child process with a log file, stopped with SIGTERM then SIGKILL."""

    name = "service"
    stop_timeout = 10.0   # seconds between SIGTERM and SIGKILL

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _spawn(self, argv: list[str], log: Path, port: int, timeout: float, cwd: Path | None = None) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=die_with_parent, cwd=cwd)
        _wait_for_port(port, self.proc, self.name, log, timeout)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def java_binary() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on ``PATH`` (the embedded brokers' JVMs)."""
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else "java"


def etcd_binary() -> str:
    path = shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)
    if not path:
        raise ServiceError("etcd is not installed: run build/bootstrap.sh (it installs the Debian "
                           "package etcd-server) or set embedded.etcd = false and point "
                           "etcd.endpoints at a running etcd")
    return path


@dataclass(frozen=True, kw_only=True)
class EtcdServerTls:
    """TLS of an etcd's client port: its certificate and key, and the CA its clients' certificates
    must chain to (``--client-cert-auth``: with authentication enabled, a client that does not log
    in acts as the user its certificate's CN names, as Milvus 2.3 does with etcd.ssl)."""

    cert: Path
    key: Path
    client_ca: Path


class EmbeddedEtcd(_Process):
    """A single-member etcd on loopback, data under ``data_dir``; its client port TLS with ``tls``."""

    name = "etcd"

    def __init__(self, data_dir: str | Path, client_port: int | None = None,
                 peer_port: int | None = None, *, tls: EtcdServerTls | None = None) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.tls = tls

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "etcd.log"

    def start(self) -> None:
        ensure_port_free(self.client_port, "etcd client port")
        ensure_port_free(self.peer_port, "etcd peer port")
        binary = etcd_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls = [] if self.tls is None else [
            "--cert-file", str(self.tls.cert), "--key-file", str(self.tls.key),
            "--trusted-ca-file", str(self.tls.client_ca), "--client-cert-auth"]
        self._spawn([binary, "--name", "deltanode", "--data-dir", str(self.data_dir / "data"),
                     "--listen-client-urls", client, "--advertise-client-urls", client,
                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                     "--initial-cluster", f"deltanode={peer}", *tls],
                    self.log_path, self.client_port, timeout=30)
