"""How DeltaNode proves who it is to an etcd and checks whom it talks to: TLS and a user.

The keys follow Milvus's (``etcd.ssl.*``, ``etcd.auth.*``; docs/operations.md). Both etcd
clients take one :class:`EtcdSecurity`: the gRPC client (``loop.EtcdLoop``) and the fence's
JSON-gateway requests (``fence.OwnershipFence``). Only the driver holds it: executors never
reach etcd, and no task carries it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EtcdSecurity"]


@dataclass(frozen=True, kw_only=True)
class EtcdSecurity:
    """TLS (CA, client certificate, server name) and user login of one etcd; the default is neither.

    Runs on the driver. The password never shows in a repr.
    """

    tls: bool = False
    ca_cert: str | None = None        # PEM; None: the system's trusted CAs
    cert: str | None = None           # client certificate (PEM), for an etcd with --client-cert-auth
    key: str | None = None            # its private key (PEM)
    server_name: str | None = None    # the name etcd's certificate must carry; None: the endpoint's host
    username: str | None = None       # None: no login
    password: str | None = field(default=None, repr=False)
    keys: str = "etcd."               # the conf keys it comes from, which errors name

    @classmethod
    def from_conf(cls, conf: Any, prefix: str = "etcd.") -> EtcdSecurity:
        """The ``<prefix>ssl.*`` and ``<prefix>auth.*`` keys of a ``config.Conf`` (checked there)."""
        tls, auth = conf.get(prefix + "ssl.enabled"), conf.get(prefix + "auth.enabled")
        return cls(tls=tls,
                   ca_cert=conf.get(prefix + "ssl.tls.ca.cert") if tls else None,
                   cert=conf.get(prefix + "ssl.tls.cert") if tls else None,
                   key=conf.get(prefix + "ssl.tls.key") if tls else None,
                   server_name=conf.get(prefix + "ssl.server.name") if tls else None,
                   username=conf.get(prefix + "auth.username") if auth else None,
                   password=conf.get(prefix + "auth.password") if auth else None, keys=prefix)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def describe(self) -> str:
        """What a connection uses, for errors and logs: ``TLS, client certificate, user deltanode``."""
        parts = ["TLS" if self.tls else "plain text"]
        if self.cert:
            parts.append("client certificate")
        if self.username:
            parts.append(f"user {self.username}")
        return ", ".join(parts)

    def pem_files(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """``(CA, key, certificate)`` as bytes, what gRPC's channel credentials take; raises
        ``ValueError`` naming the file that cannot be read."""
        return _read(self.ca_cert, "CA certificates"), _read(self.key, "client key"), \
            _read(self.cert, "client certificate")

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that checks etcd's certificate as the gRPC client does."""
        context = ssl.create_default_context(cafile=self.ca_cert)
        if self.cert:
            context.load_cert_chain(self.cert, self.key)
        return context


def _read(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read etcd's {what} {path}: {exc.strerror}") from None
