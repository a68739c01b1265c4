"""The seam between the pipeline and a message queue.

The pipeline needs two things of a broker: on the driver, how far each pchannel goes (its
high watermark) to plan a cycle's offset ranges; on the executors, the messages of those
ranges, in order, with the failure of one range reported apart from the others. Positions
are 64-bit integers that grow by one per message (Kafka offsets; a Pulsar implementation
maps its message ids onto such a sequence). ``Broker`` is small and picklable: tasks carry it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from . import kafka
from .kafka import BrokerError, Chunk, OffsetRange

__all__ = ["Broker", "BrokerError", "Chunk", "HighWatermarks", "OffsetRange"]


class HighWatermarks(Protocol):
    """Driver side: a long-lived metadata client."""

    def high(self, topic: str, partition: int = 0, timeout: float = 10.0) -> int:
        """The position after the last message of ``topic[partition]`` the broker reports."""

    def close(self) -> None:
        ...


@dataclass(frozen=True)
class Broker:
    kind: str       # "kafka"
    address: str    # bootstrap servers

    def watermarks(self) -> HighWatermarks:
        """Runs on the driver."""
        return kafka.Watermarks(self.address)

    def read_ranges(self, ranges: list[OffsetRange]) -> Iterator[tuple[int, Chunk | BrokerError]]:
        """Runs on executors: ``(i, chunk)`` of ``ranges[i]`` in offset order, or ``(i, BrokerError)`` once."""
        return kafka.read_ranges(self.address, ranges)
