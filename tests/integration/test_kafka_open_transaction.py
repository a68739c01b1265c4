"""A Kafka partition held below a transaction that stays open: the broker answers its watermark,
and a ``read_committed`` read (librdkafka's default, and the range reader's) delivers nothing from
the transaction's first message on. On the real broker's answers, the driver's judge of unserved
reads (``pipeline.read_stalls``) waits for it through ``STALLS_TO_FAIL - 1`` cycles, then fails
it with an error naming the partition and the offset; aborted, the transaction holds nothing."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from deltanode.failure.classify import Failure
from deltanode.failure.kinds import FailureKind
from deltanode.mq.kafka import Watermarks, create_topics, read_ranges
from deltanode.mq.types import BrokerError, BrokerUnreachable, OffsetRange
from deltanode.pipeline.read_stalls import STALLS_TO_FAIL, StalledReads
from deltanode.records import ReadStats, TaskOutput

STALL = 2.0   # seconds a read may deliver nothing (the node's 20, shortened)


def _read(bootstrap: str, topic: str, end: int) -> tuple[list[int], list[BrokerError]]:
    """The offsets a read of ``topic[0]`` [0, end) delivered, and its errors."""
    offsets: list[int] = []
    errors: list[BrokerError] = []
    for _, item in read_ranges(bootstrap, [OffsetRange(topic, 0, 0, end)], stall_timeout=STALL):
        if isinstance(item, BrokerError):
            errors.append(item)
        else:
            offsets.extend(offset for offset, _, _ in item)
    return offsets, errors


def test_a_partition_held_by_an_open_transaction_fails_its_vchannels_after_a_few_unserved_reads(broker):
    bootstrap = broker.bootstrap_servers
    topic = f"opentxn{time.time_ns() % 10**9}"
    create_topics(bootstrap, [topic])
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(3):
        plain.produce(topic, f"before-{i}".encode())   # offsets 0-2
    plain.flush(10)
    held = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-producer", "linger.ms": 0})
    held.init_transactions(30)
    held.begin_transaction()
    for i in range(2):
        held.produce(topic, f"open-{i}".encode())      # offsets 3-4, never committed
    held.flush(10)
    for i in range(2):
        plain.produce(topic, f"after-{i}".encode())    # offsets 5-6, behind the open transaction
    plain.flush(10)
    marks = Watermarks(bootstrap)
    stalls = StalledReads()
    try:
        high = marks.highs([(topic, 0)])[(topic, 0)]
        assert high == 7
        for cycle in range(1, STALLS_TO_FAIL + 1):
            offsets, errors = _read(bootstrap, topic, high)
            assert offsets == [0, 1, 2] and len(errors) == 1 and isinstance(errors[0], BrokerUnreachable)
            assert f"no data from {topic}[0] at offset 3" in str(errors[0])
            unserved = Failure(kind=FailureKind.BROKER_UNREACHABLE, message=str(errors[0]))
            [out] = stalls.judge([TaskOutput((), (ReadStats(topic, 0, high, messages=3, error=unserved),))], marks)
            error = out.reads[0].error
            assert error is not None
            if cycle < STALLS_TO_FAIL:
                assert error == unserved   # waited for, as a broker away
            else:
                assert error.kind is FailureKind.BROKER
                assert error.message.startswith(f"{topic}[0]: the broker answers its watermark (7) but served none ")
                assert f"at offset 3 for {STALL:.0f} s" in error.message
        held.abort_transaction(30)
        assert _read(bootstrap, topic, high) == ([0, 1, 2, 5, 6], [])   # the aborted ones are skipped
    finally:
        marks.close()
