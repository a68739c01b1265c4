"""An etcd's sections: DeltaNode's own (``etcd.*``, ``session.ttl``), and the TLS and login of one
etcd (``etcd.ssl.*``, ``etcd.auth.*``, or ``milvus.etcd.*`` for a mirrored Milvus's)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class EtcdSecurity:
    """TLS (CA, client certificate, server name) and user login of one etcd; the default is neither.

    Runs on the driver (executors never reach etcd). The password never shows in a repr; the
    files are read by ``etcd.security`` when a client connects.
    """

    tls: bool = False
    ca_cert: str | None = None        # PEM; None: the system's trusted CAs
    cert: str | None = None           # client certificate (PEM), for an etcd with --client-cert-auth
    key: str | None = None            # its private key (PEM)
    server_name: str | None = None    # the name etcd's certificate must carry; None: the endpoint's host
    username: str | None = None       # None: no login
    password: str | None = field(default=None, repr=False)
    keys: str = "etcd."               # the conf keys it comes from, which errors name

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


@dataclass(frozen=True, kw_only=True)
class EtcdSettings:
    """DeltaNode's etcd: where it is, the root of DeltaNode's keys, a session's lease. Runs on the driver."""

    endpoints: str
    root: str
    session_ttl: float
    security: EtcdSecurity = EtcdSecurity()   # TLS and login (etcd.ssl.*, etcd.auth.*)
