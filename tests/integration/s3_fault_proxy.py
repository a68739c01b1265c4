"""An HTTP proxy in front of the tests' S3 server that breaks the requests a test names.

A test points every S3 client of DeltaNode (pyarrow on the executors, delta-rs, boto3's commit
PUTs) at the proxy (``faulty_s3``) and adds :class:`Rule` s, each matched on the method and on a
regular expression searched in the object's path (``/bucket/key``, percent-decoded), firing on a
count or a seeded probability:

- ``LOST_ANSWER``: forward the request, let S3 act on it (store the object), then answer 500
  InternalError: the client cannot tell that its write landed;
- ``REFUSE``: answer 503 SlowDown without forwarding;
- ``RESET_BEFORE`` / ``RESET_AFTER``: close the connection without an answer (a TCP reset),
  before forwarding or after S3 acted on the request;
- ``SLOW``: wait ``seconds`` before forwarding.

Every request is recorded with what the proxy did and what S3 answered (``exchanges``,
``report``), so a test can check that the faults it meant were injected where it meant them.

Request bodies are read whole before forwarding (``Transfer-Encoding: chunked`` decoded, an
``aws-chunked`` body passed on as its bytes with its headers), and a HEAD answer keeps S3's
``Content-Length``: it is the object's size, not the length of the empty body.
"""

from __future__ import annotations

import contextlib
import enum
import http.client
import http.server
import random
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from deltanode.delta.object_store import StoreOptions
from deltanode.standalone.services import free_port

# Headers about one connection, not the request: never passed on. ``Expect``: the proxy answers
# ``100 Continue`` itself and forwards the body whole.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "transfer-encoding", "upgrade", "expect"})
UPSTREAM_TIMEOUT = 120.0


class Fault(enum.Enum):
    """What the proxy does to a request a rule matches (the module's docstring says each)."""

    LOST_ANSWER = "lost_answer"
    REFUSE = "refuse"
    RESET_BEFORE = "reset_before"
    RESET_AFTER = "reset_after"
    SLOW = "slow"


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Break the requests whose method fully matches ``method``, in whose path ``key`` is found
    and in whose query string ``query`` is (``uploadId=`` tells a multipart upload's completion
    from its creation, both POSTs of the object's path): after ``skip`` matching requests, each
    with ``probability`` (drawn from a ``random.Random(seed)`` of the rule's own), at most
    ``times`` of them (None: no limit); with ``after``, only once the rule of that name broke a
    request (a read-back refused only after its write's answer was lost). Made by a test; read by
    the proxy's threads."""

    fault: Fault
    key: str
    method: str = "PUT"
    query: str = ""
    times: int | None = 1
    probability: float = 1.0
    skip: int = 0
    seed: int = 0
    seconds: float = 0.0        # SLOW's delay
    name: str = ""              # for the report and ``after``; the fault's name when empty
    after: str = ""

    @property
    def label(self) -> str:
        return self.name or self.fault.value


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """One request through the proxy: what it did (``rule``: None when it only forwarded) and
    the status S3 gave (``upstream``: None when not forwarded) and the client got (``answered``:
    None when the connection was reset). Made on the proxy's threads, read by the test."""

    at: float
    method: str
    path: str
    query: str
    rule: str | None
    fault: Fault | None
    upstream: int | None
    answered: int | None

    def __str__(self) -> str:
        what = f"{self.rule} " if self.rule else ""
        query = f"?{self.query}" if self.query else ""
        return (f"{self.method} {self.path}{query}: {what}S3 {self.upstream or '-'}, "
                f"client {self.answered or 'reset'}")


@dataclass(kw_only=True)
class _RuleState:
    """A rule's matches, injections and random draws. Runs in the test process, under the
    proxy's lock."""

    rule: Rule
    pattern: re.Pattern[str]
    query: re.Pattern[str]
    rng: random.Random
    matched: int = 0
    injected: int = 0

    def wants(self, method: str, path: str, query: str, broke: set[str]) -> bool:
        """Whether the rule would break this request (a match counted, a draw taken); ``broke``:
        the names of the rules that broke a request so far."""
        if self.rule.after and self.rule.after not in broke:
            return False
        if not re.fullmatch(self.rule.method, method) or not self.pattern.search(path) or \
                not self.query.search(query):
            return False
        self.matched += 1
        if self.matched <= self.rule.skip:
            return False
        if self.rule.times is not None and self.injected >= self.rule.times:
            return False
        return self.rule.probability >= 1.0 or self.rng.random() < self.rule.probability


def _error_body(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f'<RequestId>{uuid.uuid4().hex[:16]}</RequestId></Error>').encode()


_ANSWERS = {Fault.LOST_ANSWER: (500, "InternalError", "We encountered an internal error. Please try again."),
            Fault.REFUSE: (503, "SlowDown", "Please reduce your request rate.")}


class S3FaultProxy:
    """Forwards ``127.0.0.1:port`` to the S3 server at ``upstream`` (``http://host:port``),
    breaking the requests its rules match. Runs in the test process: a thread per connection.
    ``add``, ``clear`` and the readers of the log may be called from any thread."""

    def __init__(self, upstream: str) -> None:
        url = urllib.parse.urlsplit(upstream)
        self.upstream = (url.hostname or "127.0.0.1", url.port or 80)
        self.port = free_port()
        self._lock = threading.Lock()
        self._rules: list[_RuleState] = []
        self._exchanges: list[Exchange] = []
        self._server: http.server.ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()   # the clients' open connections

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3FaultProxy:
        server = _QuietServer(("127.0.0.1", self.port), _handler(self))
        self._server = server
        threading.Thread(target=server.serve_forever, name="s3-fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening and close every client's connection (a keep-alive one would go on
        reaching S3 through a stopped proxy)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            open_now, self._connections = list(self._connections), set()
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

    def add(self, *rules: Rule) -> None:
        with self._lock:
            self._rules += [_RuleState(rule=r, pattern=re.compile(r.key), query=re.compile(r.query),
                                       rng=random.Random(r.seed)) for r in rules]

    def clear(self, *names: str) -> None:
        """Faults off, those of the rules ``names`` only if any: the requests they matched are
        forwarded as they are from now on (the log is kept)."""
        with self._lock:
            self._rules = [s for s in self._rules if names and s.rule.label not in names]

    def _pick(self, method: str, path: str, query: str) -> Rule | None:
        """The first rule that wants the request breaks it."""
        with self._lock:
            # Every rule sees every request, so that each rule's matches and draws depend on the
            # requests it matches only, not on which other rules broke some of them.
            broke = {s.rule.label for s in self._rules if s.injected}
            wanting = [s for s in self._rules if s.wants(method, path, query, broke)]
            if not wanting:
                return None
            wanting[0].injected += 1
            return wanting[0].rule

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def injected(self, fault: Fault | None = None, key: str = "", method: str = ".*") -> list[Exchange]:
        """The exchanges a rule broke (of ``fault``, on paths where ``key`` is found)."""
        pattern = re.compile(key)
        return [e for e in self.exchanges if e.fault is not None and (fault is None or e.fault is fault)
                and pattern.search(e.path) and re.fullmatch(method, e.method)]

    def report(self) -> str:
        """Faults injected by rule, then each broken exchange, one a line."""
        broken = [e for e in self.exchanges if e.fault is not None]
        counts = Counter(e.rule for e in broken)
        lines = [f"{len(self.exchanges)} requests through the S3 fault proxy, {len(broken)} broken: "
                 + ", ".join(f"{rule} x{n}" for rule, n in sorted(counts.items()))]
        lines += [f"  {e}" for e in broken]
        return "\n".join(lines)


class _QuietServer(http.server.ThreadingHTTPServer):
    """The proxy's listener: a thread per connection. A client that drops its connection
    mid-answer is no error of the proxy's. Runs in the test process."""

    daemon_threads = True
    # delta-rs opens a table with dozens of GETs at once; socketserver's default backlog of 5
    # drops their connection attempts, and the client's backoff then stalls it for half a minute.
    request_queue_size = 256

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _handler(proxy: S3FaultProxy) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(_ProxyHandler):
        """A connection to ``proxy``. Runs on the proxy's thread for it."""
    Handler.proxy = proxy
    return Handler


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    """One client connection (keep-alive: HTTP/1.1). Runs on the proxy's thread for it."""

    protocol_version = "HTTP/1.1"
    proxy: S3FaultProxy

    def setup(self) -> None:
        super().setup()
        self.proxy._opened(self.connection)

    def finish(self) -> None:
        self.proxy._closed(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args) -> None:
        pass   # the exchanges are the log

    def do_GET(self) -> None:
        self._relay()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _relay(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        body = self._body()
        rule = self.proxy._pick(self.command, path, url.query)
        fault = rule.fault if rule is not None else None
        seen = Exchange(at=time.time(), method=self.command, path=path, query=url.query,
                        rule=rule.label if rule else None, fault=fault, upstream=None, answered=None)
        if rule is not None and rule.fault is Fault.SLOW:
            time.sleep(rule.seconds)
        if fault is Fault.RESET_BEFORE:
            self._reset()
            self.proxy._record(seen)
            return
        if fault is Fault.REFUSE:
            self._answer_error(fault)
            self.proxy._record(replace(seen, answered=_ANSWERS[fault][0]))
            return
        status, reason, headers, answer = self._forward(body)
        seen = replace(seen, upstream=status)
        if fault is Fault.RESET_AFTER:
            self._reset()
            self.proxy._record(seen)
            return
        if fault is Fault.LOST_ANSWER:
            self._answer_error(fault)
            self.proxy._record(replace(seen, answered=_ANSWERS[fault][0]))
            return
        self.send_response_only(status, reason)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)
        self.proxy._record(replace(seen, answered=status))

    def _body(self) -> bytes:
        """The request's body, whole (a chunked one decoded)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass   # trailers: the aws-chunked ones travel inside the body, not here
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Send the request to S3; its status, reason, headers to pass on, and body."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body or self.command in ("PUT", "POST"):
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(*self.proxy.upstream, timeout=UPSTREAM_TIMEOUT)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
            if self.command != "HEAD":
                out = [(k, v) for k, v in out if k.lower() != "content-length"] + [("Content-Length", str(len(answer)))]
            elif not any(k.lower() == "content-length" for k, _ in out):
                out.append(("Content-Length", "0"))
            return resp.status, resp.reason, out, answer
        finally:
            conn.close()

    def _answer_error(self, fault: Fault) -> None:
        status, code, message = _ANSWERS[fault]
        body = _error_body(code, message)
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", uuid.uuid4().hex[:16])
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self) -> None:
        """Close the connection with a TCP reset (linger 0), no answer sent."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.rfile.close()
            self.connection.close()   # the last reference to the socket: the kernel sends RST


@dataclass(frozen=True, kw_only=True)
class FaultyS3:
    """StoreOptions pointed at the proxy (``options``: what DeltaNode is given), the proxy, and
    the S3 server's own options (``direct``: what the test checks the bucket with). Lives in
    the test process; ``options`` travel to the executors inside a ``StorageLayout``."""

    options: StoreOptions
    proxy: S3FaultProxy
    direct: StoreOptions = field(repr=False)


@contextlib.contextmanager
def faulty_s3(direct: StoreOptions) -> Iterator[FaultyS3]:
    """A started proxy in front of the S3 server of ``direct`` (the ``s3`` fixture's options)."""
    assert direct.endpoint, "the proxy needs the S3 server's endpoint"
    proxy = S3FaultProxy(direct.endpoint).start()
    try:
        yield FaultyS3(options=replace(direct, endpoint=proxy.endpoint), proxy=proxy, direct=direct)
    finally:
        proxy.stop()
