"""High watermarks from one Fetch past the end of every partition (driver, Kafka protocol).

Why: the embedded broker (Tansu 0.6.0, memory storage) answers a ListOffsets by listing every
record batch a partition holds, so the plan's ListOffsets of 16 pchannels grew from 5.5 to 37 ms
over a 60-s load of 1,000 messages a second and took the broker from 0.17 to 0.25 cores; and its
answer is the last batch's base offset + 1, not the high watermark (docs/platform.md). A Fetch at
or past a partition's end lists nothing: Tansu answers it from the partition's watermark record,
with no error and the true high watermark. Asked this way every second through the same load:
1.6-2.0 ms a request, the broker flat at 0.18-0.19 cores, as with no request at all.

A Kafka broker answers such a Fetch with OFFSET_OUT_OF_RANGE: ``TailFetch.highs`` then says the
broker does not serve it (``TailUnsupported``), and the caller asks ListOffsets from then on, as
it does when the first Fetch fails in any other way (a broker that closes the connection on a
Fetch v4).

librdkafka cannot send one Fetch on demand, so this speaks the two messages itself (Fetch v4,
its request and response), over a plaintext connection to the one broker it is given: it is
meant for a single-node broker such as the embedded one, and used only where the conf names one
bootstrap server and no security protocol (``for_bootstrap``).
"""

from __future__ import annotations

import itertools
import socket
import struct

from .types import BrokerError

FETCH = 1                   # Kafka's api key of Fetch
FETCH_VERSION = 4           # topics by name, isolation level, no fetch sessions
PAST_END = 1 << 62          # an offset past any partition's end
MAX_WAIT_MS = 1             # Tansu answers nothing to a Fetch with 0 (it returns before its first pass)
NO_ERROR, OFFSET_OUT_OF_RANGE = 0, 1
CLIENT_ID = b"deltanode-watermarks"
MAX_ANSWER = 1 << 20        # an answer of no records is a few bytes a partition: more is not one


class TailUnsupported(Exception):
    """The broker does not answer a Fetch past the end with its high watermark."""


def for_bootstrap(bootstrap: str, settings: dict[str, str]) -> TailFetch | None:
    """A TailFetch for a conf that names a single plaintext broker, else None. Parsed here rather
    than with ``config.parse_hostports``: this package runs on executors too, where no driver
    module is imported (tests/unit/test_executor_imports.py)."""
    servers = [s.strip() for s in bootstrap.split(",") if s.strip()]
    protocol = settings.get("security.protocol", "plaintext").lower()
    if len(servers) != 1 or protocol != "plaintext":
        return None
    host, _, port = servers[0].rpartition(":")
    host = host.strip("[]")
    return TailFetch(host, int(port)) if host and "/" not in host and port.isdigit() else None


def fetch_request(correlation_id: int, keys: list[tuple[str, int]]) -> bytes:
    """A size-prefixed Fetch v4 at ``PAST_END`` of every (topic, partition) of ``keys``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(partition)
    parts = [struct.pack(">hhih", FETCH, FETCH_VERSION, correlation_id, len(CLIENT_ID)), CLIENT_ID,
             # replica id, max wait, min bytes, max bytes, isolation level (read uncommitted)
             struct.pack(">iiiib", -1, MAX_WAIT_MS, 0, 1, 0), struct.pack(">i", len(by_topic))]
    for topic, partitions in by_topic.items():
        name = topic.encode()
        parts += [struct.pack(">h", len(name)), name, struct.pack(">i", len(partitions))]
        parts += [struct.pack(">iqi", p, PAST_END, 1) for p in partitions]
    body = b"".join(parts)
    return struct.pack(">i", len(body)) + body


def parse_response(data: bytes, correlation_id: int) -> dict[tuple[str, int], tuple[int, int]]:
    """A Fetch v4 response (without its size): ``(topic, partition) -> (error code, high watermark)``."""
    try:
        got, _throttle, topics = struct.unpack_from(">iii", data, 0)
        if got != correlation_id:
            raise BrokerError(f"a Fetch answer for request {got}, not {correlation_id}")
        at, out = 12, {}
        for _ in range(topics):
            (size,) = struct.unpack_from(">h", data, at)
            if size < 0:
                raise struct.error(f"a negative topic name length ({size})")
            topic = data[at + 2:at + 2 + size].decode()
            (partitions,) = struct.unpack_from(">i", data, at + 2 + size)
            if partitions < 0:
                raise struct.error(f"a negative partition count ({partitions})")
            at += 6 + size
            for _ in range(partitions):
                partition, error, high, _stable, aborted = struct.unpack_from(">ihqqi", data, at)
                at += 26 + 16 * max(aborted, 0)
                (records,) = struct.unpack_from(">i", data, at)
                at += 4 + max(records, 0)
                out[(topic, partition)] = (error, high)
        if at > len(data):
            raise struct.error("truncated")
        return out
    except (struct.error, UnicodeDecodeError) as e:
        raise BrokerError(f"a malformed Fetch answer ({len(data)} bytes): {e}") from None


class TailFetch:
    """A connection to one broker, kept between calls; not thread-safe (the pipeline's loop asks)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._socket: socket.socket | None = None
        self._ids = itertools.count(1)

    def highs(self, keys: list[tuple[str, int]], timeout: float) -> dict[tuple[str, int], int]:
        """The high watermark of each of ``keys`` the broker answered without error and above 0
        (the others are left out: the caller asks them otherwise, for Tansu answers 0 for a topic
        or partition that does not exist). Raises ``TailUnsupported`` when the broker refuses a
        Fetch past the end, ``OSError`` or ``BrokerError`` when it cannot be asked."""
        correlation_id = next(self._ids)
        try:
            answer = parse_response(self._exchange(fetch_request(correlation_id, keys), timeout), correlation_id)
        except (OSError, BrokerError):
            self.close()   # a new connection next time
            raise
        if any(error == OFFSET_OUT_OF_RANGE for error, _ in answer.values()):
            raise TailUnsupported(f"{self.host}:{self.port} answers a Fetch past the end with OFFSET_OUT_OF_RANGE")
        return {key: high for key, (error, high) in answer.items() if error == NO_ERROR and high > 0}

    def _exchange(self, request: bytes, timeout: float) -> bytes:
        if self._socket is None:
            self._socket = socket.create_connection((self.host, self.port), timeout)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.settimeout(timeout)
        self._socket.sendall(request)
        (size,) = struct.unpack(">i", self._read(4))
        if not 0 <= size <= MAX_ANSWER:
            raise BrokerError(f"{self.host}:{self.port} announced a Fetch answer of {size} bytes")
        return self._read(size)

    def _read(self, n: int) -> bytes:
        assert self._socket is not None
        buffer = bytearray()
        while len(buffer) < n:
            chunk = self._socket.recv(n - len(buffer))
            if not chunk:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            buffer += chunk
        return bytes(buffer)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
