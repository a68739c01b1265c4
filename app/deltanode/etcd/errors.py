"""Errors raised by DeltaNode's etcd layer (standard library only: the command line catches them)."""

from __future__ import annotations

from ..failure.errors import DeltaNodeError


class EtcdError(DeltaNodeError):
    """An etcd request failed."""


class EtcdUnavailable(EtcdError):
    """etcd did not answer: no endpoint reachable, or a request ran past its deadline."""


class EtcdRefused(EtcdError):
    """etcd answered and refused DeltaNode: its certificate is not trusted, the user or password is
    wrong, the user lacks a permission. Asking again does not help; the message says what to fix."""


def describe(exc: BaseException) -> str:
    """A one-line description of ``exc``; gRPC errors otherwise print their whole debug string."""
    from aetcd import rpc
    if isinstance(exc, rpc.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__
