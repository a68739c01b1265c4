"""aetcd's client on a channel of DeltaNode's making: TLS when asked, and a login that rides every call.

aetcd opens plain-text channels only, and logs in once: its token goes stale when etcd restarts
(simple tokens live in etcd's memory) or expires (``--auth-token-ttl``), and every call then fails
with ``invalid auth token``. Here the channel carries an interceptor that puts the current token
on every call; a call refused for a stale token marks it stale, the next call logs in again first,
and a unary call (every request but watches and lease keep-alives) is retried once at once: etcd
checks the token before it applies a request, so a refused one changed nothing. Runs on the
driver, on the etcd loop (``loop.EtcdLoop``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aetcd
import grpc
from aetcd import rpc

from deltanode.config.sections.etcd import EtcdSecurity
from deltanode.etcd.errors import EtcdRefused
from deltanode.etcd.security import pem_files

__all__ = ["SecuredClient", "is_stale_token"]

_AUTHENTICATE = "/etcdserverpb.Auth/Authenticate"


def is_stale_token(code: grpc.StatusCode, details: str | None) -> bool:
    """etcd refused a call for its token, not its user: logging in again helps."""
    return code == grpc.StatusCode.UNAUTHENTICATED and "auth token" in (details or "")


class _Login:
    """The token of one user on one channel; logs in when there is none or it went stale.

    Runs on the etcd loop (driver)."""

    def __init__(self, username: str, password: str, timeout: float | None) -> None:
        self.username, self._password, self._timeout = username, password, timeout
        self.channel: grpc.aio.Channel | None = None
        self._token: str | None = None
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        if self._token is None:
            async with self._lock:
                if self._token is None:
                    assert self.channel is not None
                    reply = await rpc.AuthStub(self.channel).Authenticate(
                        rpc.AuthenticateRequest(name=self.username, password=self._password), timeout=self._timeout)
                    self._token = reply.token
        return self._token

    def stale(self, token: str) -> None:
        if self._token == token:
            self._token = None


def _with_token(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    metadata = grpc.aio.Metadata(*(details.metadata or ()), ("token", token))
    return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                      details.wait_for_ready)


class _TokenInterceptor(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor,
                        grpc.aio.StreamUnaryClientInterceptor, grpc.aio.StreamStreamClientInterceptor):
    """Puts the login's token on every call of the channel. Runs on the etcd loop (driver)."""

    def __init__(self, login: _Login) -> None:
        self._login = login

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if details.method in (_AUTHENTICATE, _AUTHENTICATE.encode()):
            return await continuation(details, request)
        token = await self._login.token()
        call = await continuation(_with_token(details, token), request)
        if is_stale_token(await call.code(), await call.details()):
            self._login.stale(token)
            call = await continuation(_with_token(details, await self._login.token()), request)
        return call

    async def _stream(self, continuation: Any, details: Any, request: Any) -> Any:
        token = await self._login.token()
        call = await continuation(_with_token(details, token), request)

        def done(finished: Any) -> None:
            asyncio.ensure_future(self._note(finished, token))
        call.add_done_callback(done)
        return call

    async def _note(self, call: Any, token: str) -> None:
        if is_stale_token(await call.code(), await call.details()):
            self._login.stale(token)

    intercept_unary_stream = _stream
    intercept_stream_unary = _stream
    intercept_stream_stream = _stream


class SecuredClient(aetcd.Client):
    """``aetcd.Client`` whose channel is TLS when ``security.tls`` and logs in as ``security.username``.

    Runs on the etcd loop (driver)."""

    def __init__(self, host: str, port: int, *, security: EtcdSecurity, timeout: float | None) -> None:
        options = {"grpc.ssl_target_name_override": security.server_name} if security.server_name else {}
        super().__init__(host, port, timeout=timeout, options=options)
        self.security = security
        try:
            self._credentials = grpc.ssl_channel_credentials(*pem_files(security)) if security.tls else None
        except ValueError as exc:
            raise EtcdRefused(str(exc)) from None
        self._login = _Login(security.username, security.password or "", timeout) if security.username else None

    async def connect(self) -> None:
        """aetcd's ``connect`` with this client's channel (aetcd's makes a plain-text one)."""
        if self._connected.is_set():
            return
        if self._is_connecting:  # type: ignore[has-type]
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            target = f"{self._host}:{self._port}"
            interceptors = [_TokenInterceptor(self._login)] if self._login else None
            options = list(self._options.items())
            if self._credentials is not None:
                self.channel = grpc.aio.secure_channel(target, self._credentials, options=options,
                                                       interceptors=interceptors)
            else:
                self.channel = grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
            if self._login is not None:
                self._login.channel = self.channel
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = aetcd.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout)
            self._connected.set()
        finally:
            self._is_connecting = False

    async def log_in(self) -> None:
        """Log in now (at connect), so a refused user fails the connection rather than a later call."""
        if self._login is not None:
            await self.connect()
            await self._login.token()
