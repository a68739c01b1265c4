"""Errors raised by DeltaNode's etcd layer."""

from __future__ import annotations

from aetcd import rpc


class EtcdError(RuntimeError):
    """An etcd request failed."""


class EtcdUnavailable(EtcdError):
    """etcd did not answer: no endpoint reachable, or a request ran past its deadline."""


def describe(exc: BaseException) -> str:
    """A one-line description of ``exc``; gRPC errors otherwise print their whole debug string."""
    if isinstance(exc, rpc.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__
