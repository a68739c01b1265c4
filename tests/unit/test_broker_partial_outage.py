"""A broker that answers some questions and not others: one Pulsar topic that times out, a Pulsar
namespace the broker does not have, Kafka partitions answered under stale leader epochs or without
a leader, a range whose reads deliver nothing while the broker answers its watermarks, a topic id
asked for a pchannel the broker does not answer for, and the pipeline's look at the broker while a
job runs. The broker's clients are faked where the other unit tests fake them (their methods, or
the function that makes them); what is tested is the logic above them."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from deltanode.mq import kafka
from deltanode.mq.broker import BrokerError, BrokerUnreachable

PARTITIONS = 50


class _Admin:
    """An admin client whose every ListOffsets answer is the error ``code``."""

    made = 0

    def __init__(self, code: int) -> None:
        type(self).made += 1
        self.code = code

    def poll(self, timeout: float) -> int:
        return 0

    def list_offsets(self, request: dict, request_timeout: float) -> dict:
        out = {}
        for tp in request:
            future: Future = Future()
            future.set_exception(KafkaException(KafkaError(self.code)))
            out[tp] = future
        return out


class _Consumer:
    """The planner's consumer: ``topics`` in its metadata answers, which it counts."""

    def __init__(self, topics: set[str]) -> None:
        self.topics, self.listed = topics, 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> SimpleNamespace:
        self.listed += 1
        return SimpleNamespace(topics={t: SimpleNamespace(error=None) for t in self.topics})

    def poll(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        pass


def _kafka_marks(monkeypatch, code: int, topics: set[str] = frozenset()) -> tuple[kafka.Watermarks, _Consumer]:
    consumer = _Consumer(set(topics))
    _Admin.made = 0
    monkeypatch.setattr(kafka, "new_client", lambda kind, *args: _Admin(code) if kind is AdminClient else consumer)
    return kafka.Watermarks("kafka-1:9092"), consumer


def test_kafka_partitions_answered_under_stale_leader_epochs_make_one_new_admin_client_per_question(monkeypatch):
    marks, _ = _kafka_marks(monkeypatch, KafkaError.FENCED_LEADER_EPOCH)
    keys = [(f"dml_{i}", 0) for i in range(PARTITIONS)]
    found = marks.highs(keys)
    assert all(isinstance(found[key], BrokerUnreachable) for key in keys)
    assert _Admin.made == 1 and marks._admin is None   # made again once, at the next question
    marks.highs(keys)
    assert _Admin.made == 2


def test_kafka_partitions_without_a_leader_are_looked_up_in_one_metadata_request(monkeypatch):
    marks, consumer = _kafka_marks(monkeypatch, KafkaError._NOENT, topics={f"dml_{i}" for i in range(1, PARTITIONS)})
    keys = [(f"dml_{i}", 0) for i in range(PARTITIONS)]
    found = marks.highs(keys)
    assert consumer.listed == 1 and _Admin.made == 1
    assert type(found[("dml_0", 0)]) is BrokerError and "dml_0" in str(found[("dml_0", 0)])   # not on the broker
    assert all(isinstance(found[key], BrokerUnreachable) for key in keys[1:])   # a leader not elected yet
