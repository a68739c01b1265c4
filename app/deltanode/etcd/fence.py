"""The ownership check run right before a Delta commit.

The pipeline checks once per cycle, before it commits, for every vchannel it is about to
commit. It asks etcd on a blocking gRPC channel of its own, independent of the node's asyncio
client and its loop (a loop busy with watches never delays a commit), and decodes the one field
it needs from ChannelWatchInfo by hand. A check costs one round trip, and carries the watch keys
modified since the last check. Over TLS and logged in as the node's client is
(``security.EtcdSecurity``); a check refused for a stale token (etcd restarted) logs in again
and asks once more. Not etcd's JSON gateway: with ``--client-cert-auth`` it refuses every client
whose certificate has a common name, which a certificate for Milvus's etcd.ssl has.

The fence refuses a commit only on etcd's answer: the session is gone, the watch key is
gone or says the channel is being taken away. When etcd cannot be asked, it passes: the
single-writer guarantee is the Delta commit's, a compare-and-swap on the vchannel's ``txn``
that refuses a writer which did not start from the latest checkpoint (``state.commit``).
The fence only makes a node that etcd has told to stop stop sooner.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass

import grpc
from aetcd import rpc

from deltanode.config.sections.etcd import EtcdSecurity
from deltanode.etcd import keys
from deltanode.etcd.endpoints import parse_endpoints
from deltanode.etcd.reachability import Reachability
from deltanode.etcd.security import pem_files
from deltanode.failure.errors import DeltaNodeError
from deltanode.wire.varint import read_varint

# datapb.ChannelWatchState values and names, repeated here to keep this module light.
_TO_WATCH, _WATCH_SUCCESS = 2, 3
_STATE_NAMES = {0: "Uncomplete", 1: "Complete", 2: "ToWatch", 3: "WatchSuccess", 4: "WatchFailure",
                5: "ToRelease", 6: "ReleaseSuccess", 7: "ReleaseFailure"}
_STATE_FIELD = 3  # ChannelWatchInfo.state


class EtcdNoAnswer(DeltaNodeError):
    """etcd could not be asked, or gave an answer that says nothing about ownership."""


class OwnershipFence:
    """Refuses a vchannel once etcd says ``node_id`` has no live session or does not hold the vchannel.

    One check reads the session key and the node's watch keys in one transaction (one HTTP
    round trip, whatever the number of vchannels): only those modified since the last check,
    unless some were deleted, and none while nothing was written to etcd since (``_read``).
    When etcd cannot be asked the check passes and ``reachability`` records the outage (see
    the module docstring).
    """

    def __init__(self, endpoints: str, root: str, node_id: int, timeout: float = 0.5,
                 reachability: Reachability | None = None, probe_interval: float = 5.0, *,
                 security: EtcdSecurity = EtcdSecurity()) -> None:
        self.endpoints = endpoints
        self.security = security
        self._credentials = grpc.ssl_channel_credentials(*pem_files(security)) if security.tls else None
        self._channels: dict[tuple[str, int], grpc.Channel] = {}   # one per endpoint asked, kept open
        self._token: str | None = None   # the login (security.username), made at the first check
        self.root = root
        self.node_id = node_id
        self.timeout = timeout
        self.reachability = reachability or Reachability(endpoints)
        # While etcd does not answer, checks pass at once and a probe on a thread of its own asks
        # etcd every ``probe_interval`` seconds: a frozen etcd accepts connections and answers
        # nothing, so a check that asked would hold the cycle for ``timeout``.
        # ``timeout`` is short: an etcd slower than that counts as unreachable, which only means
        # the commit relies on Delta's check alone for a while.
        self.probe_interval = probe_interval
        self._probe: threading.Thread | None = None
        self._view: _View | None = None   # the last read, which the next one brings up to date
        self._lock = threading.Lock()     # checks on the loop, probes on their own thread

    @property
    def reachable(self) -> bool:
        """False while etcd's last answer to this node failed (an outage is under way)."""
        return self.reachability.down_since is None

    @property
    def session_key(self) -> str:
        return keys.session_key(self.root, "datanode", self.node_id)

    def check(self, vchannels: list[str]) -> dict[str, str]:
        """The vchannels of ``vchannels`` this node may no longer write, each with the reason."""
        if not self.reachable:
            if self._probe is None or not self._probe.is_alive():
                self._probe = threading.Thread(target=self._probe_until_answered, name="fence-probe", daemon=True)
                self._probe.start()
            return {}
        try:
            session, watches = self._read()
        except EtcdNoAnswer as e:
            self.reachability.failed(str(e))
            return {}
        self.reachability.answered()
        if session is None:
            why = f"DataNode {self.node_id} has no live etcd session ({self.session_key} is gone)"
            return {v: why for v in vchannels}
        lost = {}
        for v in vchannels:
            key = keys.channel_watch_key(self.root, self.node_id, v)
            value = watches.get(key)
            if value is None:
                lost[v] = f"{v} is no longer assigned to DataNode {self.node_id} ({key} is gone)"
                continue
            try:
                state = _watch_state(value)
            except ValueError as exc:
                lost[v] = f"{key} does not hold a ChannelWatchInfo: {exc}"
                continue
            if state not in (_TO_WATCH, _WATCH_SUCCESS):
                lost[v] = (f"{v} on DataNode {self.node_id} is in state {_STATE_NAMES.get(state, state)}, "
                           f"not ToWatch or WatchSuccess")
        return lost

    def _probe_until_answered(self) -> None:
        """Runs on its own thread while etcd is unreachable; the next check asks etcd itself."""
        while not self.reachable:
            time.sleep(self.probe_interval)
            try:
                self._read()
            except EtcdNoAnswer as e:
                self.reachability.failed(str(e))
                continue
            self.reachability.answered()

    def _read(self) -> tuple[bytes | None, dict[str, bytes]]:
        """The session value and every watch key of this node, as of one etcd revision.

        The first read takes the whole prefix; later ones only the keys modified since the last
        (``min_mod_revision``) and the prefix's key count, in the same transaction, and apply them
        to the last view. A key deleted since is not among the modified ones, but the view then
        holds more keys than the count, and the whole prefix is read again. At 10,000 vchannels
        a whole read takes 47-48 ms of the driver's CPU and about 80 ms of wall time
        (docs/platform.md), which every cycle would pay.

        That read still costs etcd as much as the prefix has keys, whatever it returns: 30-40 ms
        of its CPU at 10,000 keys (docs/platform.md).
        While etcd is quiet (the last read found its revision where the one before left it: no
        write anywhere since), a check first reads the session key alone, whose answer carries
        the store's revision: unchanged, the view holds as it is (``_unchanged``).
        """
        prefix = keys.channel_watch_prefix(self.root, self.node_id)
        whole = {"key": prefix.encode(), "range_end": _prefix_end(prefix).encode()}
        source = (self.endpoints, prefix)
        with self._lock:
            view = self._view if self._view is not None and self._view.source == source else None
            if view is not None:
                unchanged = self._unchanged(view)
                if unchanged is not None:
                    return unchanged, view.watches
                revision, (session, changed, counted) = self._txn([
                    rpc.RangeRequest(key=self.session_key.encode()),
                    rpc.RangeRequest(**whole, min_mod_revision=view.revision + 1),
                    rpc.RangeRequest(**whole, count_only=True)])
                watches = {**view.watches, **_kvs(changed)}
                if revision >= view.revision and len(watches) == counted.count:
                    self._view = _View(source=source, revision=revision, watches=watches,
                                       quiet=revision == view.revision)
                    return _session(session), watches
            revision, (session, listed) = self._txn([rpc.RangeRequest(key=self.session_key.encode()),
                                                     rpc.RangeRequest(**whole)])
            self._view = _View(source=source, revision=revision, watches=_kvs(listed), quiet=True)
            return _session(session), self._view.watches

    def _unchanged(self, view: _View) -> bytes | None:
        """The session value, if the view is quiet and etcd's revision has not moved since it was
        read; else None (the caller reads what changed)."""
        if not view.quiet:
            return None
        revision, (session,) = self._txn([rpc.RangeRequest(key=self.session_key.encode())])
        return _session(session) if revision == view.revision else None

    def _txn(self, ranges: list[rpc.RangeRequest]) -> tuple[int, list[rpc.RangeResponse]]:
        """One transaction of range requests: the store revision it read at, and each range's response."""
        request = rpc.TxnRequest(success=[rpc.RequestOp(request_range=r) for r in ranges])
        errors = []
        for endpoint in parse_endpoints(self.endpoints):
            try:
                try:
                    reply = self._call(endpoint, request)
                except grpc.RpcError as exc:
                    if not (self.security.username and exc.code() == grpc.StatusCode.UNAUTHENTICATED
                            and "auth token" in (exc.details() or "")):
                        raise
                    self._token = None   # etcd restarted or the token expired: log in again, once
                    reply = self._call(endpoint, request)
            except grpc.RpcError as exc:
                errors.append(f"{endpoint[0]}:{endpoint[1]}: {exc.code().name} {exc.details()}")
                continue
            if len(reply.responses) != len(ranges):
                raise EtcdNoAnswer(f"etcd at {endpoint[0]}:{endpoint[1]} answered the fence check with "
                                   f"{str(reply)[:200]}")
            return reply.header.revision, [r.response_range for r in reply.responses]
        raise EtcdNoAnswer(f"cannot check channel ownership, etcd is unreachable at "
                           f"{self.endpoints!r}: {'; '.join(errors)}")

    def _call(self, endpoint: tuple[str, int], request: rpc.TxnRequest) -> rpc.TxnResponse:
        channel = self._channels.get(endpoint)
        if channel is None:
            target, options = f"{endpoint[0]}:{endpoint[1]}", []
            if self.security.server_name:
                options.append(("grpc.ssl_target_name_override", self.security.server_name))
            channel = grpc.secure_channel(target, self._credentials, options) if self._credentials \
                else grpc.insecure_channel(target, options)
            self._channels[endpoint] = channel
        metadata = None
        if self.security.username:
            if self._token is None:
                try:
                    self._token = rpc.AuthStub(channel).Authenticate(
                        rpc.AuthenticateRequest(name=self.security.username, password=self.security.password or ""),
                        timeout=self.timeout).token
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:   # not etcd's answer to the login
                        raise
                    raise _Refused(exc, f"refused the login of user {self.security.username!r}") from None
            metadata = (("token", self._token),)
        return rpc.KVStub(channel).Txn(request, timeout=self.timeout, metadata=metadata)

    def close(self) -> None:
        """Close the channels; a later check opens them again."""
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()


class _Refused(DeltaNodeError, grpc.RpcError):
    """A login refused, as the ``grpc.RpcError`` the check reports, with what was refused in front."""

    def __init__(self, cause: grpc.RpcError, what: str) -> None:
        super().__init__()
        self._code, self._details = cause.code(), f"{what}: {cause.details()}"

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@dataclass(frozen=True, kw_only=True)
class _View:
    """A node's watch keys as of an etcd revision, read from ``source`` (endpoints, prefix)."""

    source: tuple[str, str]
    revision: int
    watches: dict[str, bytes]
    quiet: bool = False   # etcd's revision had not moved between the last two reads


def _kvs(response: rpc.RangeResponse) -> dict[str, bytes]:
    return {kv.key.decode(): kv.value for kv in response.kvs}


def _session(response: rpc.RangeResponse) -> bytes | None:
    return response.kvs[0].value if response.kvs else None


def _prefix_end(prefix: str) -> str:
    """The end of the key range holding every key that starts with ``prefix`` (ASCII prefixes)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@functools.lru_cache(maxsize=1 << 16)   # a view's unchanged values come back, check after check
def _watch_state(data: bytes) -> int:
    """The ``state`` field of serialized ChannelWatchInfo bytes (0 when absent, as in proto3)."""
    state, pos = 0, 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, pos = read_varint(data, pos)
            if field == _STATE_FIELD:
                state = value
        elif wire_type == 2:
            length, pos = read_varint(data, pos)
            pos += length
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type} at byte {pos}")
        if pos > len(data):
            raise ValueError("truncated message")
    return state
