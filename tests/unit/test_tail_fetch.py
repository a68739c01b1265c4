"""The Fetch past the end (``mq.tail_fetch``) against a scripted peer: what a broker that does not
serve it, or answers garbage, makes of it. The embedded broker's answers are tested against the
real one (tests/integration/test_kafka_ranges.py)."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from deltanode.mq import tail_fetch
from deltanode.mq.types import BrokerError


def answer(correlation_id: int, partitions: list[tuple[int, int, int]], topic: str = "t") -> bytes:
    """A Fetch v4 response of one topic: (partition, error code, high watermark) each, no records."""
    name = topic.encode()
    body = struct.pack(">iii", correlation_id, 0, 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">i", len(partitions))
    for partition, error, high in partitions:
        body += struct.pack(">ihqqii", partition, error, high, high, 0, -1)
    return body


def scripted_peer(reply) -> tuple[int, threading.Thread]:
    """A listener that answers one request with ``reply(request body)`` (raw bytes, size prefixed here)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server, server.accept()[0] as conn:
            (size,) = struct.unpack(">i", conn.recv(4))
            request = b""
            while len(request) < size:
                request += conn.recv(size - len(request))
            out = reply(request)
            conn.sendall(struct.pack(">i", len(out)) + out)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def correlation(request: bytes) -> int:
    api_key, version, correlation_id = struct.unpack_from(">hhi", request, 0)
    assert (api_key, version) == (tail_fetch.FETCH, tail_fetch.FETCH_VERSION)
    return correlation_id


def test_a_broker_that_answers_offset_out_of_range_does_not_serve_it():
    port, thread = scripted_peer(lambda r: answer(correlation(r), [(0, tail_fetch.OFFSET_OUT_OF_RANGE, -1)]))
    tail = tail_fetch.TailFetch("127.0.0.1", port)
    with pytest.raises(tail_fetch.TailUnsupported, match="OFFSET_OUT_OF_RANGE"):
        tail.highs([("t", 0)], timeout=5)
    thread.join(5)


def test_watermarks_answered_with_an_error_or_at_zero_are_left_to_the_caller():
    port, thread = scripted_peer(lambda r: answer(correlation(r), [(0, 0, 41), (1, 3, -1), (2, 0, 0)]))
    tail = tail_fetch.TailFetch("127.0.0.1", port)
    assert tail.highs([("t", 0), ("t", 1), ("t", 2)], timeout=5) == {("t", 0): 41}
    thread.join(5)
    tail.close()


@pytest.mark.parametrize("garbage", [
    lambda cid: answer(cid, [(0, 0, 41)])[:-6],                                    # truncated
    lambda cid: struct.pack(">iii", cid, 0, 1) + struct.pack(">hi", -4, 1),        # a negative name length
])
def test_a_malformed_answer_is_a_broker_error_and_the_connection_is_dropped(garbage):
    port, thread = scripted_peer(lambda r: garbage(correlation(r)))
    tail = tail_fetch.TailFetch("127.0.0.1", port)
    with pytest.raises(BrokerError, match="malformed Fetch answer"):
        tail.highs([("t", 0)], timeout=5)
    thread.join(5)
    with pytest.raises(OSError):   # a new connection next time: the scripted peer is gone
        tail.highs([("t", 0)], timeout=1)


@pytest.mark.parametrize(("bootstrap", "settings", "served"), [
    ("127.0.0.1:9092", {}, True),
    ("localhost:9092", {"security.protocol": "PLAINTEXT"}, True),
    ("a:9092,b:9092", {}, False),                              # a cluster: partitions on other brokers
    ("127.0.0.1:9092", {"security.protocol": "SASL_SSL"}, False),
    ("PLAINTEXT://127.0.0.1:9092", {}, False),
])
def test_only_a_single_plaintext_broker_is_asked_that_way(bootstrap, settings, served):
    assert (tail_fetch.for_bootstrap(bootstrap, settings) is not None) == served
