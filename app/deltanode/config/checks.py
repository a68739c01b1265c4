"""Checks across keys, made once every key has its value: a value fine alone but wrong with another."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .values import ConfError

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class CheckedConf(Protocol):
    """What the checks read of a ``conf.Conf``: the values, where each was set, and the endpoints."""

    @property
    def broker_key(self) -> str: ...

    def get(self, key: str) -> Any: ...

    def source(self, key: str) -> str: ...

    def hostports(self, key: str) -> list[tuple[str, int]]: ...

    def broker_hostports(self) -> list[tuple[str, int]]: ...


def check_cross(conf: CheckedConf) -> None:
    def fail(key: str, msg: str) -> None:
        raise ConfError(f"{conf.source(key)}: bad value for {key!r}: {msg}")

    root = str(conf.get("storage.root"))
    scheme = root.split("://", 1)[0].lower() if "://" in root else "file"
    if scheme not in ("file", "s3"):
        fail("storage.root", f"{root!r}: Delta commits need an atomic put-if-absent, which DeltaNode has for a "
                             f"local or mounted filesystem (a path or file://) and for S3 (s3://bucket/prefix)")
    milvus_root = conf.get("milvus.meta.root")
    if milvus_root is not None:
        own, theirs = conf.get("etcd.root").strip("/"), milvus_root.strip("/")
        if not theirs:
            fail("milvus.meta.root", "empty: give the Milvus meta root, e.g. by-dev/meta")
        if own == theirs or own.startswith(theirs + "/"):
            blamed = "milvus.meta.root" if conf.source("etcd.root") == "default" else "etcd.root"
            where = "the" if own == theirs else "inside the"
            fail(blamed, f"etcd.root {conf.get('etcd.root')!r} ({conf.source('etcd.root')}) is {where} Milvus "
                         f"meta root {milvus_root!r} (milvus.meta.root): DeltaNode never writes under Milvus's "
                         f"keys; give it a root of its own, e.g. deltanode/meta")
    for prefix in ("etcd.", "milvus.etcd."):
        _check_etcd_security(conf, prefix, fail)
    if conf.get("embedded.etcd"):
        eps = conf.hostports("etcd.endpoints")
        if len(eps) != 1 or eps[0][0] not in _LOOPBACK:
            fail("etcd.endpoints", f"{conf.get('etcd.endpoints')!r}: with embedded.etcd = true "
                                   "it must be one loopback endpoint, e.g. 127.0.0.1:2379")
    if conf.get("embedded.broker"):
        eps = conf.broker_hostports()
        if len(eps) != 1 or eps[0][0] not in _LOOPBACK:
            example = "pulsar://127.0.0.1:6650" if conf.get("mq.type") == "pulsar" else "127.0.0.1:9092"
            fail(conf.broker_key, f"{conf.get(conf.broker_key)!r}: with embedded.broker = true it "
                                  f"must be one loopback endpoint, e.g. {example}")


def _check_etcd_security(conf: CheckedConf, prefix: str, fail: Callable[[str, str], None]) -> None:
    """Security keys that would be ignored are errors: a user who set them expects them to apply."""
    def given(name: str) -> bool:
        return conf.source(prefix + name) not in ("default", "unset")

    named = [n for n in ("ssl.enabled", "ssl.tls.ca.cert", "ssl.tls.cert", "ssl.tls.key", "ssl.server.name",
                         "auth.enabled", "auth.username", "auth.password") if given(n)]
    if prefix == "milvus.etcd." and conf.get("milvus.etcd.endpoints") is None:
        if named:
            fail(prefix + named[0], "milvus.etcd.endpoints is unset, so Milvus's etcd is DeltaNode's and etcd.* "
                                    "apply to it: set etcd.* instead, or set milvus.etcd.endpoints")
        return
    endpoints = conf.get(prefix + "endpoints")
    if not conf.get(prefix + "ssl.enabled"):
        if any(n.startswith("ssl.") for n in named):
            fail(prefix + next(n for n in named if n.startswith("ssl.")),
                 f"{prefix}ssl.enabled is false: set it to true for TLS, or remove the line")
        if "https://" in endpoints:
            fail(prefix + "endpoints", f"{endpoints!r} names https:// while {prefix}ssl.enabled is false")
    if given("ssl.tls.cert") != given("ssl.tls.key"):
        fail(prefix + ("ssl.tls.key" if given("ssl.tls.cert") else "ssl.tls.cert"),
             f"a client certificate needs both {prefix}ssl.tls.cert and {prefix}ssl.tls.key")
    if conf.get(prefix + "auth.enabled"):
        for name in ("auth.username", "auth.password"):
            if conf.get(prefix + name) is None:
                fail(prefix + "auth.enabled", f"true, but {prefix}{name} is unset")
    elif given("auth.username") or given("auth.password"):
        fail(prefix + ("auth.username" if given("auth.username") else "auth.password"),
             f"{prefix}auth.enabled is false: set it to true to log in, or remove the line")
