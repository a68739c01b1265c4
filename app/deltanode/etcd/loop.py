"""One aetcd connection on a private asyncio loop, and the long-lived tasks started on it.

DeltaNode's etcd users are plain threads, and the etcd3 package cannot be imported next to
protobuf >= 4. So one daemon thread runs an asyncio loop holding an ``aetcd.Client``; ``run``
submits a coroutine to that loop and waits for it with a deadline. Long-lived work (lease
keep-alive, watches) runs as tasks on the same loop (``spawn``) and never blocks callers; the
loop cancels what it adopted when it closes. ``EtcdClient`` owns one and exposes it as
``loop``; ``KeepAlive`` and ``PrefixWatch`` run on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

import aetcd
import grpc

from deltanode.config.sections.etcd import EtcdSecurity
from deltanode.etcd.endpoints import parse_endpoints
from deltanode.etcd.errors import EtcdError, EtcdRefused, EtcdUnavailable, describe
from deltanode.etcd.secured_client import SecuredClient, is_stale_token

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["Cancellable", "EtcdLoop", "LoopOwner"]


class Cancellable(Protocol):
    """A watch or keep-alive: the loop stops it when it closes."""

    def cancel(self) -> None:
        ...


class EtcdLoop:
    """The loop thread and the connection to the first of ``endpoints`` (comma-separated
    ``host:port``, an ``http://`` or ``https://`` prefix accepted) that answers within
    ``connect_timeout``, with TLS and a login as ``security`` says; every ``run`` must finish
    within ``request_timeout`` or raises :class:`EtcdUnavailable`."""

    def __init__(self, endpoints: str, *, connect_timeout: float, request_timeout: float,
                 security: EtcdSecurity = EtcdSecurity()) -> None:
        self.endpoints = endpoints
        self.security = security
        self.request_timeout = request_timeout
        self._closed = False
        self._children: set[Cancellable] = set()  # watches and keep-alives to stop on close()
        self._children_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="etcd-loop", daemon=True)
        self._thread.start()
        try:
            self.aio, self.endpoint = self._connect(parse_endpoints(endpoints), connect_timeout)
        except BaseException:
            self._stop_loop()
            raise

    def _connect(self, candidates: list[tuple[str, int]], timeout: float) -> tuple[aetcd.Client, str]:
        errors = []
        for host, port in candidates:
            self.endpoint = f"{host}:{port}"  # named by the errors of this attempt
            try:
                return self.run(self._open(host, port, timeout), timeout + 1.0), self.endpoint
            except EtcdRefused:
                raise   # another endpoint of the same cluster would refuse the same way
            except EtcdError as exc:
                errors.append(str(exc))
        raise EtcdUnavailable(f"etcd is not reachable at {self.endpoints!r} ({self.security.describe()}): "
                              f"{'; '.join(errors)}")

    async def _open(self, host: str, port: int, timeout: float) -> aetcd.Client:
        client = SecuredClient(host, port, security=self.security, timeout=self.request_timeout)
        try:
            try:
                await asyncio.wait_for(client.status(), timeout)
                await asyncio.wait_for(client.log_in(), timeout)
            except (aetcd.ClientError, grpc.aio.AioRpcError) as exc:
                refused = refusal(exc, f"{host}:{port}", self.security)
                if refused is not None:
                    raise refused from None
                raise
        except BaseException:
            await client.close()
            raise
        return client

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the etcd loop and wait for its result."""
        if self._closed:
            coro.close()
            raise EtcdError("the etcd client is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking etcd call made from the etcd loop thread")
        timeout = self.request_timeout if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:  # also what asyncio.wait_for raises inside ``coro``
            future.cancel()
            raise EtcdUnavailable(f"etcd at {self.endpoint} did not answer within {timeout:.1f} s") from None
        except (aetcd.ConnectionFailedError, aetcd.ConnectionTimeoutError) as exc:
            raise EtcdUnavailable(f"etcd at {self.endpoint} is unavailable: {describe(exc)}") from exc
        except aetcd.ClientError as exc:
            refused = refusal(exc, self.endpoint, self.security)
            if refused is not None:
                raise refused from exc
            raise EtcdError(f"etcd request to {self.endpoint} failed: {describe(exc)}") from exc

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task:
        """Start ``coro`` as a long-running task on the etcd loop."""
        async def start() -> asyncio.Task:
            return asyncio.get_running_loop().create_task(coro)

        return self.run(start())

    def cancel(self, task: asyncio.Task) -> None:
        """Cancel a task started with :meth:`spawn` and wait until it has unwound.

        Stopping never fails the caller: a task that does not unwind in time is left to
        finish on the loop on its own, with a warning.
        """
        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        try:
            self.run(stop())
        except EtcdUnavailable:
            log.warning("an etcd task on %s did not stop within %.1f s; abandoning it",
                        self.endpoint, self.request_timeout)

    def adopt(self, child: Cancellable) -> None:
        """Have ``close`` cancel ``child``."""
        with self._children_lock:
            self._children.add(child)

    def release(self, child: Cancellable) -> None:
        """Undo :meth:`adopt`: ``child`` stopped on its own."""
        with self._children_lock:
            self._children.discard(child)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def close(self) -> None:
        """Cancel every adopted child, then drop the connection and stop the loop. Idempotent."""
        if self._closed:
            return
        with self._children_lock:
            children = list(self._children)
        for child in children:
            child.cancel()
        try:
            self.run(self.aio.close())
        except EtcdError as exc:
            log.warning("closing the etcd connection: %s", exc)
        self._closed = True
        self._stop_loop()


def refusal(exc: BaseException, endpoint: str, security: EtcdSecurity) -> EtcdRefused | None:
    """The :class:`EtcdRefused` that ``exc`` amounts to, naming what was refused; None when ``exc`` is
    no refusal (an outage, a timeout)."""
    cause = exc if isinstance(exc, grpc.aio.AioRpcError) else exc.__cause__
    if not isinstance(cause, grpc.aio.AioRpcError):
        return None
    code, details = cause.code(), cause.details() or ""
    lowered, keys = details.lower(), security.keys
    if is_stale_token(code, details):
        return None   # logged in again at the next call (secured_client)
    if "certificate_verify_failed" in lowered or "certificate verify failed" in lowered:
        trusted = security.ca_cert or f"the system's trusted CAs ({keys}ssl.tls.ca.cert is unset)"
        return EtcdRefused(f"etcd at {endpoint}: its TLS certificate is not trusted (it does not chain to "
                           f"{trusted}, or does not name {security.server_name or 'the endpoint host'}): {details}")
    if "hostname verification" in lowered:
        return EtcdRefused(f"etcd at {endpoint}: its TLS certificate does not name "
                           f"{security.server_name or 'the endpoint host'} (set {keys}ssl.server.name to a name "
                           f"it carries): {details}")
    if "handshake" in lowered and code == grpc.StatusCode.UNAVAILABLE:
        return EtcdRefused(f"etcd at {endpoint}: the TLS handshake failed ({security.describe()}): {details}")
    if code == grpc.StatusCode.INVALID_ARGUMENT and ("authentication failed" in lowered or "user name" in lowered):
        return EtcdRefused(f"etcd at {endpoint} refused the login of user {security.username!r}: {details}")
    if code == grpc.StatusCode.FAILED_PRECONDITION and "authentication is not enabled" in lowered:
        return EtcdRefused(f"etcd at {endpoint} has authentication disabled, yet {keys}auth.enabled is true: "
                           f"{details}")
    if code == grpc.StatusCode.PERMISSION_DENIED or "permission denied" in lowered:
        who = f"user {security.username!r}" if security.username else "an anonymous client"
        return EtcdRefused(f"etcd at {endpoint} refused {who}: permission denied ({details}); grant it "
                           f"read and write on etcd.root and read on milvus.meta.root")
    if code == grpc.StatusCode.UNAUTHENTICATED or "user name is empty" in lowered:
        return EtcdRefused(f"etcd at {endpoint} asks for a login ({details}): set {keys}auth.enabled, "
                           f"{keys}auth.username and {keys}auth.password")
    return None


class LoopOwner(Protocol):
    """What a watch or keep-alive is started from (an ``EtcdClient``): it runs on the owner's loop.

    They take the owner rather than the loop because callers hold clients
    (``datanode.flush_watch`` starts a ``PrefixWatch`` from one)."""

    @property
    def loop(self) -> EtcdLoop:
        ...
