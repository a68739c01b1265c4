"""Range reads against the real broker: several partitions at once, the same partition twice, errors per range."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from deltanode.mq.kafka import Watermarks, create_topics, read_ranges, send_all
from deltanode.mq.types import BrokerError, OffsetRange
from deltanode.standalone.kafka_server import EmbeddedKafka


def test_ranges_are_read_each_in_order_and_one_failure_stays_its_own(broker):
    topics = [f"ranges{time.time_ns() % 10**9}-{t}" for t in "ab"]
    create_topics(broker.bootstrap_servers, topics)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(12):
        for t in topics:
            producer.produce(t, f"{t}-{i}".encode())
            producer.flush()
    a, b = topics
    ranges = [OffsetRange(a, 0, 0, 4), OffsetRange(a, 0, 4, 9),   # one partition twice: read one after the other
              OffsetRange(b, 0, 2, 6), OffsetRange("missing-topic", 0, 0, 3)]
    got: dict[int, list[int]] = {}
    errors: dict[int, BrokerError] = {}
    started = time.monotonic()
    for i, item in read_ranges(broker.bootstrap_servers, ranges, stall_timeout=3):
        if isinstance(item, BrokerError):
            errors[i] = item
        else:
            got.setdefault(i, []).extend(offset for offset, _, _ in item)
            assert all(value.decode().startswith(ranges[i].topic) for _, value, _ in item)
    assert got == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7, 8], 2: [2, 3, 4, 5]}
    assert list(errors) == [3]
    assert time.monotonic() - started < 10


def test_client_settings_reach_the_range_reader_and_a_refused_one_is_named(broker):
    topic = f"settings{time.time_ns() % 10**9}"
    create_topics(broker.bootstrap_servers, [topic], settings={"client.id": "deltanode-test"})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, f"m{i}".encode())
    producer.flush()
    tuned = {"client.id": "deltanode-test", "fetch.wait.max.ms": "5", "socket.keepalive.enable": "true"}
    read = [off for _, chunk in read_ranges(broker.bootstrap_servers, [OffsetRange(topic, 0, 0, 5)], settings=tuned)
            for off, _, _ in chunk]
    assert read == [0, 1, 2, 3, 4]
    refused = list(read_ranges(broker.bootstrap_servers, [OffsetRange(topic, 0, 0, 5), OffsetRange(topic, 0, 5, 6)],
                               settings={"fetch.wait.max.ms": "soon"}))
    assert [i for i, _ in refused] == [0, 1]   # every range told, none read
    assert all(isinstance(e, BrokerError) and "conf key mq.kafka.fetch.wait.max.ms" in str(e) for _, e in refused)


def test_high_watermarks_of_many_partitions_in_one_request_and_a_missing_topic_alone(broker):
    topics = [f"highs{time.time_ns() % 10**9}-{t}" for t in "abc"]
    create_topics(broker.bootstrap_servers, topics)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for n, t in enumerate(topics):
        for _ in range(3 * n + 2):   # 2, 5 and 8 messages, each its own batch
            producer.produce(t, b"m")
            producer.flush()
    producer.produce(topics[0], b"tick")   # a broker may leave the last batch out of its high watermark
    producer.flush()
    wm = Watermarks(broker.bootstrap_servers)
    try:
        keys = [(t, 0) for t in topics] + [("missing-topic-highs", 0)]
        got = wm.highs(keys, timeout=5)
        one_by_one = {(t, 0): wm.high(t) for t in topics}
    finally:
        wm.close()
    assert {k: v for k, v in got.items() if not isinstance(v, BrokerError)} == one_by_one
    assert one_by_one[(topics[1], 0)] >= 4 and one_by_one[(topics[2], 0)] >= 7
    assert isinstance(got[("missing-topic-highs", 0)], BrokerError)


def test_a_high_watermark_counts_every_record_of_the_last_batch(broker):
    """Seven records in one batch: the plan's high watermark is 7, at once (a checkpoint is taken
    at it, so a watermark short of the last batch would hold every vchannel back). An empty topic
    is 0."""
    full, empty = (f"lastbatch{time.time_ns() % 10**9}-{t}" for t in "ab")
    create_topics(broker.bootstrap_servers, [full, empty])
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 200})
    for i in range(7):
        producer.produce(full, f"m{i}".encode())
    producer.flush()
    wm = Watermarks(broker.bootstrap_servers)
    try:
        assert wm.highs([(full, 0), (empty, 0)], timeout=5) == {(full, 0): 7, (empty, 0): 0}
        assert wm.highs([(full, 0)], timeout=5) == {(full, 0): 7}   # the kept connection, asked again
    finally:
        wm.close()
    read = [off for _, chunk in read_ranges(broker.bootstrap_servers, [OffsetRange(full, 0, 0, 7)])
            for off, _, _ in chunk]
    assert read == list(range(7))


def test_a_broker_gone_fails_every_watermark_within_the_timeout(tmp_path):
    """A broker gone after its first answer: every watermark asked is an error, within the timeout."""
    gone = EmbeddedKafka(tmp_path)
    gone.start()
    wm = Watermarks(gone.bootstrap_servers)
    try:
        create_topics(gone.bootstrap_servers, ["t"])
        send_all(gone.bootstrap_servers, [("t", b"m")] * 3)
        assert wm.highs([("t", 0)], timeout=5) == {("t", 0): 3}
        gone.stop()
        started = time.monotonic()
        got = wm.highs([("t", 0), ("u", 0)], timeout=3)
        assert time.monotonic() - started < 3 + 1
        assert all(isinstance(e, BrokerError) and "watermark" in str(e) for e in got.values())
        assert set(got) == {("t", 0), ("u", 0)}
    finally:
        wm.close()
        gone.stop()


def test_reads_one_after_another_in_a_process_each_get_exactly_their_ranges(broker):
    """A read leaves its consumer to the next read of the process; a read given up halfway closes
    it. Whatever came before (a later range of the same partition, a read abandoned with
    messages prefetched), each read yields exactly its own offsets."""
    topic = f"reuse{time.time_ns() % 10**9}"
    create_topics(broker.bootstrap_servers, [topic])
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(40):
        producer.produce(topic, f"m{i}".encode())
    producer.flush()

    def offsets(first: int, end: int) -> list[int]:
        got = [off for _, chunk in read_ranges(broker.bootstrap_servers, [OffsetRange(topic, 0, first, end)])
               for off, _, _ in chunk]
        assert all(isinstance(off, int) for off in got)
        return got

    assert offsets(20, 30) == list(range(20, 30))
    assert offsets(5, 12) == list(range(5, 12))     # back before the last read's messages
    assert offsets(30, 40) == list(range(30, 40))
    abandoned = read_ranges(broker.bootstrap_servers, [OffsetRange(topic, 0, 0, 40)], chunk_messages=2)
    assert next(abandoned)[1][0][0] == 0
    abandoned.close()
    assert offsets(10, 15) == list(range(10, 15))
    assert offsets(0, 40) == list(range(40))


def test_a_kept_reader_reads_topics_new_to_it_without_waiting_for_its_client_to_look_them_up(broker):
    """librdkafka looks up a topic its consumer has not read on a 1-second timer: three reads of
    new topics one after another took 1.0 s each on a kept consumer, 42 ms once the reader asks
    for the cluster's topics first (mq/kafka.py ``_Reader``)."""
    topics = [f"newtopic{time.time_ns() % 10**9}-{t}" for t in "abcd"]
    create_topics(broker.bootstrap_servers, topics)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for t in topics:
        for i in range(3):
            producer.produce(t, f"{t}-{i}".encode())
    producer.flush()

    def read(topic: str) -> list[bytes]:
        return [value for _, chunk in read_ranges(broker.bootstrap_servers, [OffsetRange(topic, 0, 0, 3)])
                for _, value, _ in chunk]

    assert read(topics[0]) == [f"{topics[0]}-{i}".encode() for i in range(3)]   # the process's reader, kept
    started = time.monotonic()
    for t in topics[1:]:
        assert read(t) == [f"{t}-{i}".encode() for i in range(3)]
    assert time.monotonic() - started < 1.0


def test_ranges_past_one_fetch_answer_are_read_exactly_in_bounded_chunks(broker):
    """A Fetch answer of the embedded broker holds 5 MiB at most (docs/platform.md), so these three
    ranges (about 7 MB each) take several answers each: every offset comes once, in order, in
    chunks within ``chunk_bytes``, with a prefetch queue smaller than a range."""
    topics = [f"big{time.time_ns() % 10**9}-{t}" for t in "abc"]
    create_topics(broker.bootstrap_servers, topics)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                         "message.max.bytes": 16 << 20})
    payload = b"x" * (200 << 10)
    for i in range(36):
        for t in topics:
            producer.produce(t, t.encode() + b"-%d-" % i + payload)
        producer.flush()
    ranges = [OffsetRange(t, 0, 1, 35) for t in topics]
    got: dict[int, list[int]] = {}
    largest = 0
    for i, chunk in read_ranges(broker.bootstrap_servers, ranges, chunk_messages=8, chunk_bytes=700 << 10,
                                fetch_bytes=2 << 20):
        assert not isinstance(chunk, BrokerError), chunk
        largest = max(largest, len(chunk))
        for offset, value, _ in chunk:
            assert value.startswith(topics[i].encode() + b"-%d-" % offset)
        got.setdefault(i, []).extend(offset for offset, _, _ in chunk)
    assert got == {i: list(range(1, 35)) for i in range(3)}
    assert largest == 3   # 700 KB of 200 KB messages
