"""pulsar-lite, a Pulsar-protocol broker in Rust with file storage (the ``pulsar-lite`` wheel), for
the benchmark's side-by-side with Apache Pulsar (``--mq pulsar-lite``).

DeltaNode's own default path runs on Apache Pulsar; pulsar-lite stays here only so that a benchmark
run can show both under the same load (docs/benchmarks.md). It duplicates and drops deliveries to a
reader whose receiver queue holds more than one message, so the benchmark reads it with
``mq.pulsar.receiver.queue.size = 1`` (docs/pulsar.md).
"""

from __future__ import annotations

from pathlib import Path

from deltanode.standalone.services import ServiceError, _Process, ensure_port_free, free_port

RECEIVER_QUEUE = 1   # the most pulsar-lite delivers exactly


def pulsar_lite_binary() -> str:
    try:
        import pulsar_lite
    except ImportError:
        raise ServiceError("the pulsar-lite package (it ships a Pulsar-protocol broker) is not installed: "
                           "run build/bootstrap.sh (the bench extras)") from None
    path = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
    if not path.exists():
        raise ServiceError(f"pulsar-lite has no broker binary at {path}")
    return str(path)


class PulsarLite(_Process):
    """pulsar-lite on loopback, its topics in files under ``data_dir``."""

    name = "Pulsar-protocol broker (pulsar-lite)"

    def __init__(self, data_dir: str | Path, port: int | None = None) -> None:
        super().__init__()
        self.data_dir = Path(data_dir)
        self.port = port or free_port()

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "pulsar-lite.log"

    def start(self) -> None:
        ensure_port_free(self.port, "pulsar-lite port")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._spawn([pulsar_lite_binary(), "--addr", f"127.0.0.1:{self.port}", "--db-path", str(self.data_dir / "db")],
                    self.log_path, self.port, timeout=30)
