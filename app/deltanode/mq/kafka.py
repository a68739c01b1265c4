"""Kafka-protocol access: topics, watermarks and bounded offset-range reads.

Milvus uses partition 0 of one topic per pchannel. Driver side: topics and high watermarks;
executor side: bounded reads of offset ranges (``read_ranges``).

A secured broker (``mq.kafka.security.protocol = SASL_SSL`` and the rest of ``mq.kafka.*``) that
refuses the client is named at once: librdkafka keeps retrying a refused login or TLS handshake
as if the broker were merely down, and its requests end in "Broker transport failure" when their
timeout runs out. The driver's clients take its error callback (``_Refusals``) and stop waiting at
the first ``_AUTHENTICATION`` or ``_SSL`` error, which the ``BrokerError`` then quotes
(``refusal_message``).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from .types import BrokerError, BrokerRefused, Chunk, Delivered, OffsetRange

log = logging.getLogger(__name__)

Settings = dict[str, str]   # librdkafka properties from the conf (mq.kafka.*): SASL, TLS, ...
SOCKET_TIMEOUT_MS = 10000   # the driver's metadata clients and the range readers
# How long a whole-cluster metadata answer is taken to still be in the client's cache: well within
# librdkafka's metadata.max.age.ms (15 min by default; docs/platform.md).
LISTED_FOR = 300.0


class _Reader:
    """A ``read_ranges`` consumer, and the topics its client knows the partitions of.

    librdkafka looks up a topic it has not read before on its own 1-second timer, so a read of a
    topic new to the consumer waited up to a second for its first message: at the 256-vchannel
    point the tasks' pchannels change hands between the two workers as the load starts, and its
    first cycles waited 0.4-1.7 s for the broker (librdkafka's log: "metadata information
    unknown", then the answer on the next whole second). Reading 5 messages of a topic new to a
    kept consumer took 1.0 s; with the cluster's topics asked first (35-43 ms from the embedded
    broker, once), 42 ms, as for a topic it had read (docs/platform.md)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.read: set[str] = set()     # topics it was assigned: the client keeps them up to date
        self.listed: set[str] = set()   # topics the last whole-cluster metadata answer named
        self.listed_at = -LISTED_FOR

    def know(self, topics: set[str], timeout: float) -> None:
        """Have the client hold ``topics``' partitions before they are assigned: one metadata
        request for the whole cluster when a topic it never read is not in the last answer (or
        that answer is old); a topic still missing is left to the read to report."""
        new = topics - self.read
        if new and (not new <= self.listed or time.monotonic() - self.listed_at > LISTED_FOR):
            try:
                self.listed = set(self.consumer.list_topics(timeout=timeout).topics)
            except KafkaException:
                self.listed = set()   # the read asks for them itself, as before
            self.listed_at = time.monotonic()
        self.read |= topics


_idle_readers: dict[tuple, _Reader] = {}   # read_ranges' consumers between reads, per process

REFUSED = (KafkaError._AUTHENTICATION, KafkaError._SSL)   # what retrying never fixes
WAIT_STEP = 0.25   # seconds: how often a waiting request looks at the errors the client reported


class _Refusals:
    """A client's ``error_cb``: keeps the first refused login or TLS handshake (librdkafka reports
    them there, from the client's ``poll``, and only logs them otherwise)."""

    def __init__(self, bootstrap: str, settings: Settings | None) -> None:
        self.bootstrap, self.settings = bootstrap, settings or {}
        self.first: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        if self.first is None and error.code() in REFUSED:
            self.first = error

    def check(self, client) -> None:
        """Serve ``client``'s callbacks; raise BrokerError if the broker refused it."""
        client.poll(0)   # a consumer here has nothing assigned: poll only serves callbacks
        if self.first is not None:
            raise BrokerRefused(refusal_message(self.bootstrap, self.first, self.settings))


def refusal_message(bootstrap: str, error: KafkaError, settings: Settings) -> str:
    """One line naming the broker, what it refused, and the conf keys to look at, from librdkafka's
    ``_AUTHENTICATION`` or ``_SSL`` error ("sasl_ssl://host:port/bootstrap: SASL authentication
    error: ... (after 364ms in state AUTH_REQ)"); the password never appears in it."""
    detail = re.sub(r"^\S+://\S+: ", "", error.str())
    detail = re.sub(r" \(after \d+ms in state \w+\)$", "", detail)
    if error.code() == KafkaError._AUTHENTICATION:
        user = settings.get("sasl.username")
        who = f" of user {user!r}" if user else ""
        detail = detail.removeprefix("SASL authentication error: ")
        return (f"Kafka broker {bootstrap} refused SASL authentication{who}: {detail}; check "
                f"mq.kafka.sasl.username and mq.kafka.sasl.password (DELTANODE_MQ_KAFKA_SASL_PASSWORD)")
    if "certificate verify failed" in detail:
        ca = settings.get("ssl.ca.location")
        trusted = f"mq.kafka.ssl.ca.location ({ca})" if ca else "mq.kafka.ssl.ca.location (unset: the system's CAs)"
        return (f"Kafka broker {bootstrap} is not trusted: TLS certificate verification failed: {detail}; "
                f"check {trusted}")
    return f"Kafka broker {bootstrap} refused the TLS connection: {detail}; check the mq.kafka.ssl.* settings"


def _list_topics(client, bootstrap: str, timeout: float, refusals: _Refusals):
    """``client.list_topics``, in steps of ``WAIT_STEP`` so that a refusal ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.list_topics(timeout=max(0.01, min(WAIT_STEP, deadline - time.monotonic())))
        except KafkaException as e:
            refusals.check(client)
            if time.monotonic() >= deadline:
                raise BrokerError(f"Kafka broker {bootstrap} unreachable: {e}") from None


def _client(kind: type, bootstrap: str, settings: Settings | None, own: dict | None = None,
            refusals: _Refusals | None = None):
    """A librdkafka client of ``kind``: DeltaNode's ``own`` properties, then the conf's ``settings``
    (config.KAFKA_RESERVED refuses the ones exactly-once depends on); a property the client
    refuses is named as the conf key that set it. ``refusals`` becomes its error callback."""
    callbacks = {} if refusals is None else {"error_cb": refusals}
    try:
        return kind({"bootstrap.servers": bootstrap, **(own or {}), **(settings or {}), **callbacks})
    except KafkaException as e:
        bad = [k for k in (settings or {}) if k in str(e)]
        where = f" (conf key mq.kafka.{bad[0]})" if bad else ""
        raise BrokerError(f"the Kafka client refused its settings{where}: {e.args[0].str()}") from None


def create_topics(bootstrap: str, topics: list[str], timeout: float = 15.0, *,
                  settings: Settings | None = None) -> list[str]:
    """Create the missing ``topics`` (one partition each); return those that were created."""
    refusals = _Refusals(bootstrap, settings)
    admin = _client(AdminClient, bootstrap, settings, {"socket.timeout.ms": SOCKET_TIMEOUT_MS}, refusals)
    existing = set(_list_topics(admin, bootstrap, timeout, refusals).topics)
    missing = [t for t in topics if t not in existing]
    if not missing:
        return []
    futures = admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in missing],
                                  operation_timeout=timeout)
    created = []
    for topic, fut in futures.items():
        try:
            fut.result(timeout)
            created.append(topic)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerError(f"cannot create topic {topic}: {e}") from None
    return created


class Sender:
    """The Milvus proxy stand-in's producer over Kafka (Milvus's settings, without compression).

    ``produce`` waits for room when librdkafka's queue is full; ``on_delivery(position, error)``
    runs from ``poll``/``flush`` once the message landed or failed.
    """

    def __init__(self, bootstrap: str, settings: Settings | None = None) -> None:
        self._producer = _client(Producer, bootstrap, settings, {
            "linger.ms": 2, "message.max.bytes": 16 << 20, "compression.codec": "none",
            "queue.buffering.max.kbytes": 1 << 20})

    def produce(self, topic: str, value: bytes, on_delivery: Delivered | None = None) -> None:
        callback = None if on_delivery is None else (
            lambda err, msg: on_delivery(-1, str(err)) if err is not None else on_delivery(msg.offset(), ""))
        while True:
            try:
                self._producer.produce(topic, value, on_delivery=callback)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> int:
        """Block until sent or ``timeout``; the number of messages still queued."""
        return self._producer.flush(timeout)

    def close(self) -> None:
        """Delivers what is queued (5 s at most), then closes the client, so that it neither keeps
        reconnecting to a broker that stops after it nor blocks on messages no broker took."""
        left = self._producer.flush(5)
        if left:
            log.warning("closing a producer with %d message(s) no broker took in 5 s: dropped", left)
            self._producer.purge()
            self._producer.poll(0)
        self._producer.close()


def send_all(bootstrap: str, messages: Sequence[tuple[str, bytes]], timeout: float = 30.0, *,
             settings: Settings | None = None) -> list[int]:
    """Send each ``(topic, payload)``, in order per topic; the offset each landed at."""
    refusals = _Refusals(bootstrap, settings)
    producer = _client(Producer, bootstrap, settings, {"message.max.bytes": 16 << 20}, refusals)
    offsets: list[int | None] = [None] * len(messages)
    errors: list[str] = []

    def delivered(i: int, err, msg) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}: {err}")
        else:
            offsets[i] = msg.offset()

    try:
        for i, (topic, payload) in enumerate(messages):
            while True:
                try:
                    producer.produce(topic, payload, on_delivery=functools.partial(delivered, i))
                    break
                except BufferError:   # the local queue is full (a batch of thousands): let it drain
                    producer.poll(0.1)
                    refusals.check(producer)
        topics = sorted({t for t, _ in messages})
        deadline = time.monotonic() + timeout
        while producer.flush(max(0.0, min(WAIT_STEP, deadline - time.monotonic()))) and time.monotonic() < deadline:
            refusals.check(producer)
        if producer.flush(0) or errors or any(o is None for o in offsets):
            refusals.check(producer)
            raise BrokerError(f"could not send to {topics} on {bootstrap}: {errors[:5] or 'timeout'}")
    except BrokerError:
        producer.purge()   # dropped here: nothing the caller was told failed goes out later
        producer.poll(0)
        producer.close()   # and no reconnecting for as long as the error (its traceback) is kept
        raise
    return [o for o in offsets if o is not None]


def cut_points(first: int, end: int, parts: int, _high: int = 0) -> list[int]:
    """``parts - 1`` offsets cutting [first, end) into pieces of about equal messages: a read can
    start at any offset."""
    return [first + (end - first) * i // parts for i in range(1, parts)]


class Watermarks:
    """A long-lived metadata client for high watermarks (used by the driver to plan batches)."""

    def __init__(self, bootstrap: str, settings: Settings | None = None) -> None:
        self.bootstrap, self._settings = bootstrap, settings
        self._refusals = _Refusals(bootstrap, settings)
        self._consumer = _client(Consumer, bootstrap, settings, {
            "socket.timeout.ms": SOCKET_TIMEOUT_MS, "group.id": "deltanode-planner", "enable.auto.commit": False},
            self._refusals)
        self._admin: AdminClient | None = None

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        """Every partition's high watermark in one ListOffsets request (``high`` asks twice per
        partition, for the low and the high end): 16 partitions took 2.7-7.2 ms of the embedded
        Kafka's answers while 60,000 messages of 26 KB went into them (docs/platform.md)."""
        return self._list_offsets(keys, timeout) if keys else {}

    def _list_offsets(self, keys: list[tuple[str, int]], timeout: float) -> dict[tuple[str, int], int | BrokerError]:
        deadline = time.monotonic() + timeout   # one timeout for the request and every answer
        try:
            futures = self._admin_client().list_offsets(
                {TopicPartition(t, p): OffsetSpec.latest() for t, p in keys}, request_timeout=timeout)
        except KafkaException as e:
            error = BrokerError(f"cannot read high watermarks from {self.bootstrap}: {e}")
            return {key: error for key in keys}
        out: dict[tuple[str, int], int | BrokerError] = {}
        for tp, future in futures.items():
            key = (tp.topic, tp.partition)
            try:
                out[key] = future.result(max(0.0, deadline - time.monotonic())).offset
            except Exception as e:  # noqa: BLE001 - KafkaException, or the future's timeout
                why = f"no answer within {timeout:.0f} s" if isinstance(e, TimeoutError) else str(e)
                try:
                    self._refusals.check(self._admin_client())
                except BrokerError as refused:
                    why = str(refused)
                out[key] = BrokerError(f"cannot read the watermark of {tp.topic}[{tp.partition}] from "
                                       f"{self.bootstrap}: {why}")
        return out

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = _client(AdminClient, self.bootstrap, self._settings, {"socket.timeout.ms": SOCKET_TIMEOUT_MS},
                                  self._refusals)
        return self._admin

    def topic_id(self, topic: str, timeout: float = 10.0) -> str:
        """Kafka's topic id (KIP-516)."""
        try:
            described = self._admin_client().describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
            return str(described.result(timeout).topic_id or "")
        except Exception as e:  # noqa: BLE001 - KafkaException, or the future's timeout
            raise BrokerError(f"cannot describe {topic} on {self.bootstrap}: {e}") from None

    def high(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        return self._watermarks(topic, partition, timeout)[1]

    def first(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The low watermark: the first offset retention left."""
        return self._watermarks(topic, partition, timeout)[0]

    def _watermarks(self, topic: str, partition: int, timeout: float) -> tuple[int, int]:
        try:
            return self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        except KafkaException as e:
            raise BrokerError(
                f"cannot read the watermarks of {topic}[{partition}] from {self.bootstrap}: {e}") from None

    def list_topics(self, timeout: float = 10.0) -> list[str]:
        return sorted(_list_topics(self._consumer, self.bootstrap, timeout, self._refusals).topics)

    def close(self) -> None:
        self._consumer.close()


def read_ranges(bootstrap: str, ranges: list[OffsetRange], *, chunk_messages: int = 64, chunk_bytes: int = 8 << 20,
                fetch_bytes: int = 32 << 20, stall_timeout: float = 60.0,
                settings: Settings | None = None) -> Iterator[tuple[int, Chunk | BrokerError]]:
    """Yield ``(i, chunk)``: lists of ``(offset, value)`` of ``ranges[i]``, each range in offset order.

    Ranges of different partitions are read together by one consumer; ranges of the same
    partition one after another. A range the broker cannot serve yields ``(i, BrokerError)``
    once and nothing more, and the others go on: one vchannel's lost data never stops the rest.
    Memory stays bounded by ``fetch_bytes`` (the client's prefetch queue) plus one chunk: at
    most ``chunk_messages`` messages, fewer when their average size says they would pass
    ``chunk_bytes`` (64 messages of 768-dim inserts are 200 MB). An offset that the broker no
    longer has (retention) is an error, never a reason to skip ahead: skipped offsets would be
    lost rows. A read stops at its end offset, not at "no more data", so a task's output
    depends only on its ranges.

    A read that ends leaves its consumer, unassigned, to the next read of the process (Spark
    reuses Python workers across tasks): a new consumer connects and fetches the cluster's
    metadata before its first message (a read of 8 short ranges: 15 ms of CPU and its first
    message after 22 ms with a new consumer, 9 ms and 17 ms with a kept one; docs/platform.md).
    A read given up halfway closes its consumer. A kept consumer stays connected between tasks:
    while the broker is down, it logs its reconnection attempts (librdkafka's own lines, on the
    executor's stderr), as a task's consumer would.
    """
    todo = [(i, r) for i, r in enumerate(ranges) if r.end > r.start]
    if not todo:
        return
    key = (bootstrap, fetch_bytes, tuple(sorted((settings or {}).items())))
    try:
        reader = _idle_readers.pop(key, None) or _Reader(_client(Consumer, bootstrap, settings, {
            "socket.timeout.ms": SOCKET_TIMEOUT_MS,
            "group.id": "deltanode-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
            "fetch.max.bytes": fetch_bytes,
            "max.partition.fetch.bytes": max(fetch_bytes // 2, 11 << 20),
            "queued.max.messages.kbytes": max(fetch_bytes >> 10, 1024),
            # Kafka answers a Fetch as soon as any of its partitions has data; this bounds how long it
            # holds one whose partitions all sit at their end (a read's ranges end at or below the high
            # watermark, so that is the prefetch past a range's end), and how often an idle consumer
            # asks again.
            "fetch.wait.max.ms": 40,
            # Stop fetching a partition while this many of its messages wait in the client (default
            # 100,000): else a range fetched to its end but not yet worked through keeps its consumer
            # fetching the live tail, every 20 ms or each time a message lands, for as long as the
            # task works (docs/platform.md: a consumer at the tail costs the broker a request each time
            # a message lands). Large messages are bounded by queued.max.messages.kbytes first.
            "queued.min.messages": 16,
            # When the prefetch queue is full (10 messages of 768-dim inserts fill 32 MB), librdkafka
            # postpones the partition's next fetch by this much (default 1 s): half of all reads of a
            # 93 MB range took 1.3 s instead of 0.3 s, waiting on consume() with the CPU idle.
            "fetch.queue.backoff.ms": 10,
        }))
    except BrokerError as e:
        for i, _ in todo:
            yield i, e
        return
    consumer = reader.consumer
    done = False
    try:
        reader.know({r.topic for _, r in todo}, timeout=5.0)
        while todo:
            # One round: at most one range per partition (a consumer holds one position each).
            round_: list[tuple[int, OffsetRange]] = []
            later: list[tuple[int, OffsetRange]] = []
            seen: set[tuple[str, int]] = set()
            for i, r in todo:
                (later if (r.topic, r.partition) in seen else round_).append((i, r))
                seen.add((r.topic, r.partition))
            yield from _read_round(consumer, round_, chunk_messages, chunk_bytes, stall_timeout)
            todo = later
        done = True
    finally:
        # Kept (nothing assigned) for the next read of this process, unless another thread's read
        # kept one first; a read given up halfway closes its own: its assignment and queues are unknown.
        if not (done and _idle_readers.setdefault(key, reader) is reader):
            consumer.close()


def _first_offset(consumer: Consumer, key: tuple[str, int]) -> str:
    """"its first offset is N", for an error message."""
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(*key), timeout=5.0)
    except KafkaException as e:
        return f"its first offset is unknown: {e}"
    return f"its first offset is {low}"


def _read_round(consumer: Consumer, ranges: list[tuple[int, OffsetRange]], chunk_messages: int, chunk_bytes: int,
                stall_timeout: float) -> Iterator[tuple[int, Chunk | BrokerError]]:
    by_tp = {(r.topic, r.partition): (i, r) for i, r in ranges}
    next_offset = {key: r.start for key, (_, r) in by_tp.items()}
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for _, r in ranges])
    last_progress = time.monotonic()
    seen_messages = seen_bytes = 0

    def finish(key: tuple[str, int]) -> None:
        del next_offset[key]
        consumer.pause([TopicPartition(*key)])

    while next_offset:
        # Ask for no more than the ranges still need: consume() waits out its timeout while
        # it cannot fill num_messages, which would idle every short range.
        left = sum(by_tp[k][1].end - off for k, off in next_offset.items())
        by_size = chunk_bytes * seen_messages // seen_bytes if seen_bytes else 1
        msgs = consumer.consume(num_messages=max(1, min(chunk_messages, by_size, left)), timeout=0.5)
        chunks: dict[tuple[str, int], Chunk] = {}
        for m in msgs:
            key = (m.topic(), m.partition())
            if key not in next_offset:
                continue  # a range already done (or failed): prefetched past its end
            i, r = by_tp[key]
            err = m.error()
            if err is not None:
                if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    at = next_offset[key]
                    finish(key)
                    yield i, BrokerError(f"{r.topic}[{r.partition}] offset {at} is no longer on the broker "
                                         f"({_first_offset(consumer, key)}; retention?): refusing to skip data")
                elif not (err.retriable() or err.code() == KafkaError._PARTITION_EOF):
                    finish(key)
                    yield i, BrokerError(f"reading {r.topic}[{r.partition}]: {err}")
                continue
            off = m.offset()
            assert off is not None   # only an error (handled above) comes without an offset
            if off < next_offset[key]:
                continue  # fetched for an earlier assignment of the partition
            if off >= r.end:
                finish(key)
                continue
            value = m.value()
            chunks.setdefault(key, []).append((off, value))
            seen_messages, seen_bytes = seen_messages + 1, seen_bytes + len(value or b"")
            next_offset[key] = off + 1
            if off + 1 >= r.end:
                finish(key)
        for key, chunk in chunks.items():
            yield by_tp[key][0], chunk
        if chunks:
            last_progress = time.monotonic()
        elif next_offset:
            # Offsets may have gaps (control records): trust the fetch positions.
            for tp in consumer.position([TopicPartition(*key) for key in next_offset]):
                key = (tp.topic, tp.partition)
                if tp.offset >= by_tp[key][1].end:
                    finish(key)
            if next_offset and time.monotonic() - last_progress > stall_timeout:
                for key, at in list(next_offset.items()):
                    i, r = by_tp[key]
                    finish(key)
                    yield i, BrokerError(f"no data from {r.topic}[{r.partition}] at offset {at} for "
                                         f"{stall_timeout:.0f} s (range ends at {r.end})")
    # A paused partition stays paused when assigned again (librdkafka): resume before the next round.
    consumer.resume([TopicPartition(r.topic, r.partition) for _, r in ranges])
    consumer.unassign()


@dataclass(frozen=True, kw_only=True)
class KafkaBackend:
    """``backend.BrokerBackend`` over the Kafka protocol: ``address`` is the bootstrap servers,
    ``settings`` the librdkafka properties of the conf."""

    address: str
    settings: Settings = field(default_factory=dict, repr=False)   # may hold secrets

    def watermarks(self) -> Watermarks:
        return Watermarks(self.address, self.settings)

    def read_ranges(self, ranges: list[OffsetRange]) -> Iterator[tuple[int, Chunk | BrokerError]]:
        return read_ranges(self.address, ranges, settings=self.settings)

    def cut_points(self, first: int, end: int, parts: int, high: int) -> list[int]:
        return cut_points(first, end, parts, high)

    def create_topics(self, pchannels: list[str]) -> list[str]:
        return create_topics(self.address, pchannels, settings=self.settings)

    def send_all(self, messages: Sequence[tuple[str, bytes]]) -> list[int]:
        return send_all(self.address, messages, settings=self.settings)

    def sender(self) -> Sender:
        return Sender(self.address, self.settings)

    def ping(self, probe_topic: str, timeout: float = 5.0) -> None:
        """Lists the topics: Kafka answers without one (``probe_topic`` goes unused)."""
        watermarks = Watermarks(self.address, self.settings)
        try:
            watermarks.list_topics(timeout=timeout)
        finally:
            watermarks.close()
