"""Kafka-protocol access: topics, watermarks and bounded offset-range reads.

Milvus uses partition 0 of one topic per pchannel. A range read stops at its end offset,
not at "no more data", so a task's output depends only on its range: Spark may re-run a
task and get the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


class BrokerError(RuntimeError):
    """The broker could not serve a request (unreachable, topic missing, data expired)."""


def _base(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000}


def create_topics(bootstrap: str, topics: list[str], timeout: float = 15.0) -> list[str]:
    """Create the missing ``topics`` (one partition each); return those that were created."""
    admin = AdminClient(_base(bootstrap))
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as e:
        raise BrokerError(f"broker {bootstrap} unreachable: {e}") from None
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


class Watermarks:
    """A long-lived metadata client for high watermarks (used by the driver to plan batches)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._consumer = Consumer({**_base(bootstrap), "group.id": "deltanode-planner",
                                   "enable.auto.commit": False})

    def high(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        try:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        except KafkaException as e:
            raise BrokerError(f"cannot read the watermark of {topic}[{partition}] from {self.bootstrap}: {e}") from None
        return high

    def list_topics(self, timeout: float = 10.0) -> list[str]:
        try:
            return sorted(self._consumer.list_topics(timeout=timeout).topics)
        except KafkaException as e:
            raise BrokerError(f"broker {self.bootstrap} unreachable: {e}") from None

    def close(self) -> None:
        self._consumer.close()


def read_range(bootstrap: str, topic: str, partition: int, start: int, end: int, *,
               chunk_messages: int = 64, chunk_bytes: int = 8 << 20, fetch_bytes: int = 32 << 20,
               stall_timeout: float = 60.0) -> Iterator[list[tuple[int, bytes | None]]]:
    """Yield lists of ``(offset, value)`` covering offsets ``[start, end)`` in order.

    Memory stays bounded by ``fetch_bytes`` (the client's prefetch queue) plus one chunk: at
    most ``chunk_messages`` messages, fewer when their average size says they would pass
    ``chunk_bytes`` (64 messages of 768-dim inserts are 200 MB).
    An offset that the broker no longer has (retention) raises BrokerError instead of
    silently skipping ahead: skipped offsets would be lost rows.
    """
    if end <= start:
        return
    consumer = Consumer({
        **_base(bootstrap),
        "group.id": f"deltanode-reader-{topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "fetch.max.bytes": fetch_bytes,
        "max.partition.fetch.bytes": max(fetch_bytes // 2, 11 << 20),
        "queued.max.messages.kbytes": max(fetch_bytes >> 10, 1024),
        "fetch.wait.max.ms": 20,
    })
    tp = TopicPartition(topic, partition, start)
    try:
        consumer.assign([tp])
        last_progress = time.monotonic()
        next_offset = start
        seen_messages = seen_bytes = 0
        while next_offset < end:
            # Ask for no more than the range still needs: consume() waits out its timeout
            # while it cannot fill num_messages, which would idle every short range.
            by_size = chunk_bytes * seen_messages // seen_bytes if seen_bytes else 1
            msgs = consumer.consume(num_messages=max(1, min(chunk_messages, by_size, end - next_offset)), timeout=0.5)
            chunk = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._AUTO_OFFSET_RESET or err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                        raise BrokerError(f"{topic}[{partition}] offset {next_offset} is no longer on the broker "
                                          f"(retention?): refusing to skip data")
                    if err.retriable() or err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BrokerError(f"reading {topic}[{partition}] at {next_offset}: {err}")
                off = m.offset()
                if off >= end:
                    next_offset = end
                    break
                value = m.value()
                chunk.append((off, value))
                seen_messages, seen_bytes = seen_messages + 1, seen_bytes + len(value or b"")
                next_offset = off + 1
            if chunk:
                last_progress = time.monotonic()
                yield chunk
            elif next_offset < end:
                # Offsets may have gaps (control records): trust the fetch position.
                pos = consumer.position([TopicPartition(topic, partition)])[0].offset
                if pos >= end:
                    break
                if time.monotonic() - last_progress > stall_timeout:
                    raise BrokerError(f"no data from {topic}[{partition}] at offset {next_offset} for "
                                      f"{stall_timeout:.0f} s (range ends at {end})")
    finally:
        consumer.close()
