"""How DeltaNode proves who it is to an etcd and checks whom it talks to: the files of an
``EtcdSecurity`` (``config.sections.etcd``: TLS and a user), read when a client connects.

The keys follow Milvus's (``etcd.ssl.*``, ``etcd.auth.*``; docs/operations.md). Both etcd
clients take one ``EtcdSecurity``: the gRPC client (``loop.EtcdLoop``) and the fence's own
channel (``fence.OwnershipFence``). Only the driver holds it: executors never reach etcd, and no
task carries it.
"""

from __future__ import annotations

from pathlib import Path

from ..config.sections.etcd import EtcdSecurity

__all__ = ["pem_files"]


def pem_files(security: EtcdSecurity) -> tuple[bytes | None, bytes | None, bytes | None]:
    """``(CA, key, certificate)`` as bytes, what gRPC's channel credentials take; raises
    ``ValueError`` naming the file that cannot be read. Runs on the driver."""
    return _read(security.ca_cert, "CA certificates"), _read(security.key, "client key"), \
        _read(security.cert, "client certificate")


def _read(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read etcd's {what} {path}: {exc.strerror}") from None
