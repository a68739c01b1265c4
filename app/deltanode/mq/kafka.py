"""Kafka-protocol access: ``KafkaBackend``, and the driver's side of it: topics, their watermarks,
and where a range may be cut among tasks.

Milvus uses partition 0 of one topic per pchannel. The rest lives beside this module and is
importable from it: the executor's offset-range reads (``kafka_read``), sending (``kafka_send``),
and the clients made from the conf's settings, whose refusal by a secured broker is named at once
(``kafka_client``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from .kafka_client import (
    OWN_LOG_LEVEL,
    SOCKET_TIMEOUT_MS,
    UNANSWERED,
    Refusals,
    Settings,
    list_topics_watching,
    new_client,
    refusal_message,
)
from .kafka_read import read_ranges
from .kafka_send import Sender, send_all
from .topic_answers import TopicAnswers
from .types import BrokerError, BrokerRefused, BrokerUnreachable, Chunk, OffsetRange, even_cut_points

__all__ = ["KafkaBackend", "Sender", "Settings", "Watermarks", "create_topics", "cut_points", "read_ranges",
           "refusal_message", "send_all"]


def create_topics(bootstrap: str, topics: list[str], timeout: float = 15.0, *,
                  settings: Settings | None = None) -> list[str]:
    """Create the missing ``topics`` (one partition each); return those that were created."""
    refusals = Refusals(bootstrap, settings)
    admin = new_client(AdminClient, bootstrap, settings, {"socket.timeout.ms": SOCKET_TIMEOUT_MS}, refusals)
    existing = set(list_topics_watching(admin, bootstrap, timeout, refusals).topics)
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


def cut_points(first: int, end: int, parts: int, _high: int = 0) -> list[int]:
    """``parts - 1`` offsets cutting [first, end) into pieces of about equal messages: a read can
    start at any offset."""
    return even_cut_points(first, end, parts)


# What a broker answers a client whose idea of a partition's leader is out of date (after the broker's
# pause, say). The admin client does not learn better by itself (docs/platform.md): it is made again.
STALE_LEADERS = (KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION)
# Seconds without an answer after which the admin client is made again at the next question, and again
# every as many seconds while none comes: a new client asks the broker afresh, whatever state the old
# one was left in by the outage (what it costs: a connection and a metadata request).
RENEW_AFTER = 30.0


def _what(key: tuple[str, int]) -> str:
    """What the question of ``key`` was, for an error message (``("", -1)``: every partition's)."""
    return f"cannot read the watermark of {key[0]}[{key[1]}]" if key[0] else "cannot read high watermarks"


def _code(e: Exception) -> int | None:
    """The librdkafka error code of ``e`` (None: a timeout, or no KafkaError)."""
    return e.args[0].code() if isinstance(e, KafkaException) and isinstance(e.args[0], KafkaError) else None


class Watermarks:
    """A long-lived metadata client for high watermarks (used by the driver to plan batches)."""

    def __init__(self, bootstrap: str, settings: Settings | None = None) -> None:
        self.bootstrap, self._settings = bootstrap, settings
        self._refusals = Refusals(bootstrap, settings)
        self._consumer = new_client(Consumer, bootstrap, settings, {
            "socket.timeout.ms": SOCKET_TIMEOUT_MS, "group.id": "deltanode-planner", "enable.auto.commit": False,
            "log_level": OWN_LOG_LEVEL}, self._refusals)
        self._admin: AdminClient | None = None
        self._answered_at = time.monotonic()   # the admin client's last answer with an offset (or its making)
        self._answers = TopicAnswers()

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        """Every partition's high watermark in one ListOffsets request: ``high`` asks twice per
        partition, for the low and the high end, and the driver asks for every pchannel each cycle.
        A partition the broker did not answer for maps to a ``BrokerUnreachable``."""
        out = self._list_offsets(keys, timeout) if keys else {}
        self._answers.record(out)
        return out

    def answered_since(self, topic: str) -> float | None:
        return self._answers.since(topic)

    def _list_offsets(self, keys: list[tuple[str, int]], timeout: float) -> dict[tuple[str, int], int | BrokerError]:
        deadline = time.monotonic() + timeout   # one timeout for the request and every answer
        admin = self._admin_client()
        try:
            futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in keys},
                                         request_timeout=timeout)
        except KafkaException as e:
            error = self._errors(admin, {("", -1): e}, timeout)[("", -1)]
            return {key: error for key in keys}
        out: dict[tuple[str, int], int | BrokerError] = {}
        failed: dict[tuple[str, int], Exception] = {}
        for tp, future in futures.items():
            key = (tp.topic, tp.partition)
            try:
                offset = future.result(max(0.0, deadline - time.monotonic())).offset
            except Exception as e:  # noqa: BLE001 - KafkaException, or the future's timeout
                failed[key] = e
                continue
            # A broker killed or paused under the request answers some partitions with no offset (-1001).
            if offset >= 0:
                out[key] = offset
                self._answered_at = time.monotonic()
            else:
                out[key] = self._unanswered(f"{_what(key)} from {self.bootstrap}: it answered no offset ({offset})")
        out.update(self._errors(admin, failed, timeout))
        return out

    def _unanswered(self, message: str) -> BrokerUnreachable:
        """A question of the admin client went unanswered (``message``: how); ``RENEW_AFTER`` seconds
        without an answer make it again."""
        if time.monotonic() - self._answered_at > RENEW_AFTER:
            self._admin, self._answered_at = None, time.monotonic()
        return BrokerUnreachable(message)

    def _errors(self, admin: AdminClient, failed: dict[tuple[str, int], Exception],
                timeout: float) -> dict[tuple[str, int], BrokerError]:
        """What ``admin``'s failed question of each partition means: the broker refused this client
        (``BrokerRefused``), did not answer (``BrokerUnreachable``), or answered with an error
        (``BrokerError``: a topic it does not have). ``("", -1)``: the whole request failed.

        What it takes to tell is asked once for all of them: ``admin``'s refusal, one metadata
        request for the topics answered without a leader, and ``admin`` made again once (after a
        stale leader epoch), not once per partition: one question covers every pchannel."""
        if not failed:
            return {}
        try:
            self._refusals.check(admin)
        except BrokerRefused as refused:
            return {key: BrokerRefused(f"{_what(key)} from {self.bootstrap}: {refused}") for key in failed}
        codes = {key: _code(e) for key, e in failed.items()}
        # "No leaders found": a topic the broker does not have, or one whose leader it has not elected yet.
        leaderless = {key[0] for key, code in codes.items() if code == KafkaError._NOENT and key[0]}
        missing = self._missing(leaderless) if leaderless else set()
        out: dict[tuple[str, int], BrokerError] = {}
        for key, e in failed.items():
            what = f"{_what(key)} from {self.bootstrap}"
            if isinstance(e, TimeoutError):
                out[key] = self._unanswered(f"{what}: no answer within {timeout:.0f} s")
            elif codes[key] in UNANSWERED or (key[0] in leaderless and key[0] not in missing):
                out[key] = self._unanswered(f"{what}: {e}")
            else:
                out[key] = BrokerError(f"{what}: {e}")
        if self._admin is admin and any(code in STALE_LEADERS for code in codes.values()):
            self._admin = None   # a new client, with the partitions' leaders as they are now
        return out

    def _missing(self, topics: set[str]) -> set[str]:
        """Those of ``topics`` the broker's metadata says it does not have (none when it does not
        answer): one request for the whole cluster."""
        try:
            found = self._consumer.list_topics(timeout=2.0).topics
        except KafkaException:
            return set()
        return {t for t in topics if t not in found or (
            found[t].error is not None and found[t].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)}

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = new_client(AdminClient, self.bootstrap, self._settings,
                                     {"socket.timeout.ms": SOCKET_TIMEOUT_MS, "log_level": OWN_LOG_LEVEL},
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
        return sorted(list_topics_watching(self._consumer, self.bootstrap, timeout, self._refusals).topics)

    def close(self) -> None:
        self._consumer.close()


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
