"""The single-writer check run right before a Delta commit.

The commit runs on the Spark driver in a short-lived Python worker process, so this
module only uses the standard library: no gRPC channel to open, no pymilvus to import
(importing ``deltanode.wire.datapb`` costs about a second). It reads etcd through its
JSON gateway (``POST /v3/kv/txn``, served by etcd 3.4+) and decodes the one field it
needs from ChannelWatchInfo by hand. A check costs one HTTP round trip.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

from deltanode.etcd import keys
from deltanode.etcd.endpoints import parse_endpoints

# datapb.ChannelWatchState values and names, repeated here to keep this module light.
_TO_WATCH, _WATCH_SUCCESS = 2, 3
_STATE_NAMES = {0: "Uncomplete", 1: "Complete", 2: "ToWatch", 3: "WatchSuccess", 4: "WatchFailure",
                5: "ToRelease", 6: "ReleaseSuccess", 7: "ReleaseFailure"}
_STATE_FIELD = 3  # ChannelWatchInfo.state


class OwnershipLost(Exception):
    """This node may no longer write the channel; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class OwnershipFence:
    """Passes only while ``node_id`` holds a live session and ``vchannel`` is assigned to it.

    Holds plain attributes only, so it pickles into Spark closures. Fails closed: when
    etcd cannot be asked, ownership counts as lost.
    """

    def __init__(self, endpoints: str, root: str, node_id: int, vchannel: str,
                 timeout: float = 2.0) -> None:
        self.endpoints = endpoints
        self.root = root
        self.node_id = node_id
        self.vchannel = vchannel
        self.timeout = timeout

    @property
    def session_key(self) -> str:
        return keys.session_key(self.root, "datanode", self.node_id)

    @property
    def watch_key(self) -> str:
        return keys.channel_watch_key(self.root, self.node_id, self.vchannel)

    def check(self) -> None:
        """Raise :class:`OwnershipLost` unless this node still owns the channel."""
        session, watch = self._read(self.session_key, self.watch_key)
        if session is None:
            raise OwnershipLost(f"DataNode {self.node_id} has no live etcd session "
                                f"({self.session_key} is gone)")
        if watch is None:
            raise OwnershipLost(f"{self.vchannel} is no longer assigned to DataNode {self.node_id} "
                                f"({self.watch_key} is gone)")
        try:
            state = _watch_state(watch)
        except ValueError as exc:
            raise OwnershipLost(f"{self.watch_key} does not hold a ChannelWatchInfo: {exc}") from None
        if state not in (_TO_WATCH, _WATCH_SUCCESS):
            raise OwnershipLost(f"{self.vchannel} on DataNode {self.node_id} is in state "
                                f"{_STATE_NAMES.get(state, state)}, not ToWatch or WatchSuccess")

    def _read(self, *wanted: str) -> list[bytes | None]:
        """The values of ``wanted`` keys, read in one transaction so they share a revision."""
        body = json.dumps({"success": [{"request_range": {"key": _b64(key)}} for key in wanted]}).encode()
        errors = []
        for host, port in parse_endpoints(self.endpoints):
            request = urllib.request.Request(f"http://{host}:{port}/v3/kv/txn", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    reply = json.load(response)
            except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
                errors.append(f"{host}:{port}: {exc}")
                continue
            values = []
            for item in reply.get("responses", []):
                kvs = item.get("response_range", {}).get("kvs", [])
                values.append(base64.b64decode(kvs[0].get("value", "")) if kvs else None)
            if len(values) != len(wanted):
                raise OwnershipLost(f"etcd at {host}:{port} answered the fence check with {reply!r}")
            return values
        raise OwnershipLost(f"cannot check channel ownership, etcd is unreachable at "
                            f"{self.endpoints!r}: {'; '.join(errors)}")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _watch_state(data: bytes) -> int:
    """The ``state`` field of serialized ChannelWatchInfo bytes (0 when absent, as in proto3)."""
    state, pos = 0, 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
            if field == _STATE_FIELD:
                state = value
        elif wire_type == 2:
            length, pos = _varint(data, pos)
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
