"""What a message queue must offer DeltaNode: one implementation per broker protocol
(``kafka.KafkaBackend``, ``pulsar.PulsarBackend``), made once per process and broker by ``broker.connect``.

Driver side: watermarks to plan a cycle's ranges, where a range may be cut among tasks,
topics to create, a message to send, a ping. Executor side: the messages of ranges.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from .types import BrokerError, Chunk, Delivered, Gap, OffsetRange

__all__ = ["BrokerBackend", "HighWatermarks", "Sender"]


class HighWatermarks(Protocol):
    """Driver side: a long-lived metadata client."""

    def high(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The position after the last message of ``topic[partition]`` the broker reports."""

    def first(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The position of the first message the broker still holds (the high watermark when none)."""

    def highs(self, keys: list[tuple[str, int]], timeout: float = 10.0) -> dict[tuple[str, int], int | BrokerError]:
        """``high`` of every ``(topic, partition)``, in as few round trips as the broker allows; a
        partition the broker cannot answer for maps to its ``BrokerError``."""

    def topic_id(self, topic: str, timeout: float = 10.0) -> str:
        """The id the broker gave ``topic`` when it created it ("" where the broker has none): a
        topic deleted and created again under the same name gets a new one."""

    def answered_since(self, topic: str) -> float | None:
        """Monotonic time since which ``highs`` got an answer for ``topic`` every time (0.0: every
        time so far); None while its last one went unanswered (``topic_answers``)."""

    def close(self) -> None:
        ...


class Sender(Protocol):
    """A producer as the Milvus proxy stand-in uses it (``kafka.Sender``, ``pulsar.Sender``)."""

    def produce(self, topic: str, value: bytes, on_delivery: Delivered | None = None) -> None:
        """Queue ``value`` for ``topic``; ``on_delivery(position, error)`` once it landed or failed."""

    def flush(self, timeout: float = 30.0) -> int:
        """Block until sent; the number of messages not sent."""

    def close(self) -> None:
        ...


class BrokerBackend(Protocol):
    """One broker protocol, bound to a broker's address and client settings. Tasks carry the
    ``Broker`` record, never its backend: each process makes its own (``broker.connect``)."""

    def watermarks(self) -> HighWatermarks:
        """Runs on the driver."""

    def read_ranges(self, ranges: list[OffsetRange]) -> Iterator[tuple[int, Chunk | Gap | BrokerError]]:
        """Runs on executors: ``(i, chunk)`` of ``ranges[i]`` in offset order, or ``(i, BrokerError)`` once;
        ``(i, Gap)`` last when the range ended in a gap of positions."""

    def cut_points(self, first: int, end: int, parts: int, high: int) -> list[int]:
        """Runs on the driver: up to ``parts - 1`` positions inside [first, end) where a read can start,
        to share one range among tasks; ``high``: the topic's high watermark."""

    def create_topics(self, pchannels: list[str]) -> list[str]:
        """Create the missing pchannel topics; those created. Pulsar creates topics on first use, so
        it creates none here, not even after a restart of a broker that lost them."""

    def send_all(self, messages: Sequence[tuple[str, bytes]]) -> list[int]:
        """Send each ``(pchannel, payload)``, in order per pchannel; the position each landed at."""

    def sender(self) -> Sender:
        ...

    def ping(self, probe_topic: str, timeout: float = 5.0) -> None:
        """Raise BrokerError unless the broker answers (``probe_topic``: a pchannel, Pulsar needs one)."""
