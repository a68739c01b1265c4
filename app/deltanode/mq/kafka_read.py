"""Executor side: bounded reads of Kafka offset ranges (``read_ranges``), and the consumers a
Python worker keeps between reads.

Milvus uses partition 0 of one topic per pchannel; a task reads its ranges with one consumer,
assigned to the ranges' partitions, and hands that consumer, unassigned, to the next read of the
process (Spark reuses Python workers across tasks).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from .kafka_client import OWN_LOG_LEVEL, SOCKET_TIMEOUT_MS, Settings, new_client
from .types import BrokerError, BrokerUnreachable, Chunk, OffsetRange

__all__ = ["LISTED_FOR", "STALL_TIMEOUT", "read_ranges"]

# How long a whole-cluster metadata answer is taken to still be in the client's cache: well within
# librdkafka's metadata.max.age.ms (15 min by default; docs/platform.md).
LISTED_FOR = 300.0
# Seconds a range may deliver nothing, although the broker said it holds its messages, before its read
# gives up (a ``BrokerUnreachable``: the broker went away under it). Its vchannels then wait where
# they stand and the next cycles read the range again, so giving up early costs one read. A broker
# that answers and still delivers nothing (the consumer reads read_committed, librdkafka's default,
# which stops below a transaction still open) has the driver fail them after a few such cycles
# (``pipeline.read_stalls``).
STALL_TIMEOUT = 20.0


class _Reader:
    """A ``read_ranges`` consumer, and the topics its client knows the partitions of.

    librdkafka looks up a topic it has not read before on its own 1-second timer, so a read of a
    topic new to the consumer would wait up to a second for its first message. Tasks' pchannels
    change hands between workers (as the load starts, say), so kept consumers meet new topics
    often; one whole-cluster metadata request (``know``) is a single round trip, after which a new
    topic reads as fast as one the consumer has read before (docs/platform.md)."""

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
                self.listed = set()   # the read then looks them up itself
            self.listed_at = time.monotonic()
        self.read |= topics


_idle_readers: dict[tuple, _Reader] = {}   # read_ranges' consumers between reads, per process


def close_idle() -> int:
    """Close the consumers this process keeps between reads; how many. A process that reads once and
    goes on (a test, a one-off command) calls it, so no consumer is left reconnecting to a broker
    that later goes away."""
    closed = 0
    while _idle_readers:
        _idle_readers.popitem()[1].consumer.close()
        closed += 1
    return closed


def read_ranges(bootstrap: str, ranges: list[OffsetRange], *, chunk_messages: int = 64, chunk_bytes: int = 8 << 20,
                fetch_bytes: int = 32 << 20, stall_timeout: float = STALL_TIMEOUT,
                settings: Settings | None = None) -> Iterator[tuple[int, Chunk | BrokerError]]:
    """Yield ``(i, chunk)``: lists of ``(offset, value, headers)`` of ``ranges[i]`` (``types.Chunk``), each
    range in offset order.

    Ranges of different partitions are read together by one consumer; ranges of the same
    partition one after another. A range the broker cannot serve yields ``(i, BrokerError)``
    once and nothing more, and the others go on: one vchannel's lost data never stops the rest. A
    range that delivers nothing for ``stall_timeout`` seconds yields a ``BrokerUnreachable``.
    Memory stays bounded by ``fetch_bytes`` (the client's prefetch queue) plus one chunk: at
    most ``chunk_messages`` messages, fewer when their average size says they would pass
    ``chunk_bytes`` (64 messages of 768-dim inserts are 200 MB). An offset that the broker no
    longer has (retention) is an error, never a reason to skip ahead: skipped offsets would be
    lost rows. A read stops at its end offset, not at "no more data", so a task's output
    depends only on its ranges.

    A read that ends leaves its consumer, unassigned, to the next read of the process (Spark
    reuses Python workers across tasks): a new consumer connects and fetches the cluster's
    metadata before its first message, which costs a short task more than its reading
    (docs/platform.md). A read given up halfway closes its consumer. A kept consumer stays
    connected between tasks: while the broker is down, it tries to connect again every 50-100 ms, and
    logs nothing about it (``OWN_LOG_LEVEL``): the driver reports the outage.
    """
    todo = [(i, r) for i, r in enumerate(ranges) if r.end > r.start]
    if not todo:
        return
    key = (bootstrap, fetch_bytes, tuple(sorted((settings or {}).items())))
    try:
        reader = _idle_readers.pop(key, None) or _Reader(new_client(Consumer, bootstrap, settings,
                                                                    _reader_properties(fetch_bytes)))
    except BrokerError as e:
        for i, _ in todo:
            yield i, e
        return
    done = False
    try:
        reader.know({r.topic for _, r in todo}, timeout=5.0)
        stalled = False
        while todo:
            round_, todo = _one_per_partition(todo)
            stalled |= yield from _read_round(reader.consumer, round_, chunk_messages, chunk_bytes, stall_timeout)
        done = not stalled
    finally:
        # Kept (nothing assigned) for the next read of this process, unless another thread's read
        # kept one first; a read given up halfway closes its own: its assignment and queues are unknown.
        # So does a read with a stalled range: a consumer whose connection outlived a paused broker
        # can stay stalled on its partition, and the next read connects afresh instead.
        if not (done and _idle_readers.setdefault(key, reader) is reader):
            reader.consumer.close()


def _reader_properties(fetch_bytes: int) -> dict:
    """DeltaNode's librdkafka properties of a ``read_ranges`` consumer."""
    return {
        "socket.timeout.ms": SOCKET_TIMEOUT_MS,
        "log_level": OWN_LOG_LEVEL,
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
        # postpones the partition's next fetch by this much (default 1 s), and the read waits on
        # consume() with the CPU idle: large ranges would take several times as long (docs/platform.md).
        "fetch.queue.backoff.ms": 10,
    }


def properties(headers: list[tuple[str, bytes | None]]) -> dict[str, str]:
    """A record's headers as a message's properties: Milvus 2.6 writes one header per property, its
    value the string's UTF-8 bytes (zero bytes for an empty string)."""
    return {k: v.decode("utf-8", "replace") if v else "" for k, v in headers}


def _one_per_partition(todo: list[tuple[int, OffsetRange]]
                       ) -> tuple[list[tuple[int, OffsetRange]], list[tuple[int, OffsetRange]]]:
    """``todo`` split into one round, at most one range per partition (a consumer holds one
    position each), and the ranges left for later rounds; both in ``todo``'s order."""
    round_: list[tuple[int, OffsetRange]] = []
    later: list[tuple[int, OffsetRange]] = []
    seen: set[tuple[str, int]] = set()
    for i, r in todo:
        (later if (r.topic, r.partition) in seen else round_).append((i, r))
        seen.add((r.topic, r.partition))
    return round_, later


def _first_offset(consumer: Consumer, key: tuple[str, int]) -> str:
    """"its first offset is N", for an error message."""
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(*key), timeout=5.0)
    except KafkaException as e:
        return f"its first offset is unknown: {e}"
    return f"its first offset is {low}"


def _read_round(consumer: Consumer, ranges: list[tuple[int, OffsetRange]], chunk_messages: int, chunk_bytes: int,
                stall_timeout: float) -> Generator[tuple[int, Chunk | BrokerError], None, bool]:
    """Read ``ranges``, at most one per partition, to their ends with ``consumer`` assigned to them;
    return whether a range stalled."""
    round_ = _Round(consumer, ranges)
    stalled = False
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for _, r in ranges])
    last_progress = time.monotonic()
    while round_.next_offset:
        msgs = consumer.consume(num_messages=round_.batch_size(chunk_messages, chunk_bytes), timeout=0.5)
        chunks, failed = round_.take(msgs)
        yield from failed
        for key, chunk in chunks.items():
            yield round_.by_tp[key][0], chunk
        if chunks:
            last_progress = time.monotonic()
        elif round_.next_offset:
            round_.finish_past_ends()
            if round_.next_offset and time.monotonic() - last_progress > stall_timeout:
                stalled = True
                yield from round_.fail_stalled(stall_timeout)
    # A paused partition stays paused when assigned again (librdkafka): resume before the next round.
    consumer.resume([TopicPartition(r.topic, r.partition) for _, r in ranges])
    consumer.unassign()
    return stalled


class _Round:
    """One ``_read_round``: each partition's range, the offset it needs next (until it is done or
    failed), and the messages and bytes read so far (what ``batch_size`` sizes a chunk by)."""

    def __init__(self, consumer: Consumer, ranges: list[tuple[int, OffsetRange]]) -> None:
        self.consumer = consumer
        self.by_tp = {(r.topic, r.partition): (i, r) for i, r in ranges}
        self.next_offset = {key: r.start for key, (_, r) in self.by_tp.items()}
        self.seen_messages = self.seen_bytes = 0

    def finish(self, key: tuple[str, int]) -> None:
        del self.next_offset[key]
        self.consumer.pause([TopicPartition(*key)])

    def batch_size(self, chunk_messages: int, chunk_bytes: int) -> int:
        """How many messages to ask ``consume`` for: no more than the ranges still need, since
        consume() waits out its timeout while it cannot fill num_messages, which would idle every
        short range; and no more than ``chunk_bytes`` holds at the average size read so far."""
        left = sum(self.by_tp[k][1].end - off for k, off in self.next_offset.items())
        by_size = chunk_bytes * self.seen_messages // self.seen_bytes if self.seen_bytes else 1
        return max(1, min(chunk_messages, by_size, left))

    def take(self, msgs: list) -> tuple[dict[tuple[str, int], Chunk], list[tuple[int, BrokerError]]]:
        """The chunks of one ``consume`` answer, by partition, and the ranges it failed."""
        by_tp, next_offset = self.by_tp, self.next_offset
        chunks: dict[tuple[str, int], Chunk] = {}
        failed: list[tuple[int, BrokerError]] = []
        seen_messages, seen_bytes = self.seen_messages, self.seen_bytes
        for m in msgs:
            key = (m.topic(), m.partition())
            if key not in next_offset:
                continue  # a range already done (or failed): prefetched past its end
            i, r = by_tp[key]
            err = m.error()
            if err is not None:
                error = self._failure(key, r, err)
                if error is not None:
                    failed.append((i, error))
                continue
            off = m.offset()
            assert off is not None   # only an error (handled above) comes without an offset
            if off < next_offset[key]:
                continue  # fetched for an earlier assignment of the partition
            if off >= r.end:
                self.finish(key)
                continue
            value = m.value()
            headers = m.headers()
            chunks.setdefault(key, []).append((off, value, None if headers is None else properties(headers)))
            seen_messages, seen_bytes = seen_messages + 1, seen_bytes + len(value or b"")
            next_offset[key] = off + 1
            if off + 1 >= r.end:
                self.finish(key)
        self.seen_messages, self.seen_bytes = seen_messages, seen_bytes
        return chunks, failed

    def _failure(self, key: tuple[str, int], r: OffsetRange, err: KafkaError) -> BrokerError | None:
        """What a message carrying ``err`` fails its range with (the range is then done), or None:
        a retriable error, which the client retries itself."""
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            at = self.next_offset[key]
            self.finish(key)
            return BrokerError(f"{r.topic}[{r.partition}] offset {at} is no longer on the broker "
                               f"({_first_offset(self.consumer, key)}; retention?): refusing to skip data")
        if not (err.retriable() or err.code() == KafkaError._PARTITION_EOF):
            self.finish(key)
            return BrokerError(f"reading {r.topic}[{r.partition}]: {err}")
        return None

    def finish_past_ends(self) -> None:
        """Finish the ranges whose fetch position passed their end: offsets may have gaps (control
        records), so the fetch positions are trusted over the offsets delivered."""
        for tp in self.consumer.position([TopicPartition(*key) for key in self.next_offset]):
            key = (tp.topic, tp.partition)
            if tp.offset >= self.by_tp[key][1].end:
                self.finish(key)

    def fail_stalled(self, stall_timeout: float) -> Iterator[tuple[int, BrokerError]]:
        """Fail every range not done: none delivered anything for ``stall_timeout``."""
        for key, at in list(self.next_offset.items()):
            i, r = self.by_tp[key]
            self.finish(key)
            yield i, BrokerUnreachable(f"no data from {r.topic}[{r.partition}] at offset {at} for "
                                       f"{stall_timeout:.0f} s (range ends at {r.end})")
